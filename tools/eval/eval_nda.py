#!/usr/bin/python3
"""F1 of a `quarry run` over the Kleister-NDA contracts against their labels, as the Kleister benchmark
scores it: per document the set of (key, value upper-cased) pairs; true / false positives and false
negatives summed over the documents (a document without a record counts all its labels as missed).

  quarry run ../shared/corpora/kleister-nda/pdf --schema ../shared/corpora/kleister-nda/nda.schema.json -o OUT
  tools/eval/eval_nda.py OUT/results.jsonl [--labels ../shared/corpora/kleister-nda/labels.jsonl]

The schema's `parties` array is scored as the labels' `party`.

`quarry ask` records (tools/eval/nda_questions.jsonl: one question per label key) are scored the same
way, each answer string upper-cased as the value of its question's key:

  quarry ask ../shared/corpora/kleister-nda/pdf --questions tools/eval/nda_questions.jsonl -o ASK
  tools/eval/eval_nda.py ASK/results.jsonl

--texts INGEST.jsonl (`quarry ingest ../shared/corpora/kleister-nda/pdf -o INGEST.jsonl`) adds how many
label values are printed in the extracted text at all (upper-cased, white space and commas ignored;
dates also as "April 18, 2001", "18 April 2001", "04/18/2001", "18th day of April, 2001"): what a
model that copies from the document could reach.
--grounded-schema OUT writes the NDA schema with x-quarry-source annotations (parties and
jurisdiction: copy, effective_date: date) for a grounded run.
"""
import argparse
import datetime
import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))


MONTHS = ["JANUARY", "FEBRUARY", "MARCH", "APRIL", "MAY", "JUNE", "JULY", "AUGUST", "SEPTEMBER", "OCTOBER",
          "NOVEMBER", "DECEMBER"]


def norm(text):
    return re.sub(r"\s+", " ", text.upper().replace(",", " ")).strip()


def spellings(key, value):
    """How a label value may be printed (normalised with norm)."""
    out = {norm(value)}
    if key == "effective_date":
        try:
            d = datetime.date.fromisoformat(value)
        except ValueError:
            return out
        m = MONTHS[d.month - 1]
        suffix = "TH" if 11 <= d.day <= 13 else {1: "ST", 2: "ND", 3: "RD"}.get(d.day % 10, "TH")
        for t in (f"{m} {d.day} {d.year}", f"{d.day} {m} {d.year}", f"{d.month:02d}/{d.day:02d}/{d.year}",
                  f"{d.month}/{d.day}/{d.year}", f"{d.day}{suffix} DAY OF {m} {d.year}",
                  f"{d.day}{suffix} DAY OF {m}"):
            out.add(norm(t))
    return out


def presence(texts_path, labels):
    texts = {}
    with open(texts_path, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            texts[os.path.basename(r.get("source", ""))] = norm(r.get("text") or "")
    by_key = {}
    for name, lab in labels.items():
        text = texts.get(name, "")
        for k, vs in lab.items():
            if k == "file":
                continue
            for v in vs:
                e = by_key.setdefault(k, {"values": 0, "printed": 0})
                e["values"] += 1
                e["printed"] += any(sp in text for sp in spellings(k, v))
    total = {"values": sum(e["values"] for e in by_key.values()), "printed": sum(e["printed"] for e in by_key.values())}
    return {"by_key": by_key, "total": total}


def write_grounded_schema(labels_path, out):
    schema_path = os.path.join(os.path.dirname(labels_path), "nda.schema.json")
    with open(schema_path, encoding="utf-8") as f:
        schema = json.load(f)
    props = schema["properties"]
    props["parties"]["items"]["x-quarry-source"] = "copy"
    props["effective_date"]["x-quarry-source"] = "date"
    props["jurisdiction"]["x-quarry-source"] = "copy"
    with open(out, "w", encoding="utf-8") as f:
        json.dump(schema, f, indent=2)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="?", help="OUT/results.jsonl of the run")
    ap.add_argument("--labels", default=os.path.join(HERE, "..", "..", "..", "shared", "corpora", "kleister-nda",
                                                     "labels.jsonl"))
    ap.add_argument("--texts", help="quarry ingest output of the contracts: count label values printed in them")
    ap.add_argument("--grounded-schema", metavar="OUT", help="write the grounded NDA schema to OUT and exit")
    a = ap.parse_args()
    if a.grounded_schema:
        write_grounded_schema(a.labels, a.grounded_schema)
        return
    if not a.results:
        ap.error("the results file is required")
    labels = {}
    with open(a.labels, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            labels[os.path.basename(r["file"])] = r
    tp = fp = fn = 0
    statuses, seen, preds = {}, set(), {}
    chunked = 0
    with open(a.results, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            name = os.path.basename(r.get("source", ""))
            seen.add(name)
            statuses[r["status"]] = statuses.get(r["status"], 0) + 1
            chunked += (r.get("stats") or {}).get("chunks", 0) > 1
            d = r.get("data") if isinstance(r.get("data"), dict) else {}
            pred = preds.setdefault(name, set())
            if "question_id" in r:  # a quarry ask record: its answer is the value of its question's key
                v = d.get("answer")
                if isinstance(v, str) and v.strip():
                    pred.add((r["question_id"], v.strip().upper()))
                continue
            pred |= {("party", p.strip().upper()) for p in (d.get("parties") or []) if isinstance(p, str) and p.strip()}
            for k in ("effective_date", "jurisdiction", "term"):
                v = d.get(k)
                if isinstance(v, str) and v.strip():
                    pred.add((k, v.strip().upper()))
    for name, pred in preds.items():
        gold = {(k, v.strip().upper()) for k, vs in labels.get(name, {}).items() if k != "file" for v in vs}
        tp += len(pred & gold)
        fp += len(pred - gold)
        fn += len(gold - pred)
    for name, lab in labels.items():
        if name not in seen:
            fn += sum(len(v) for k, v in lab.items() if k != "file")
    p = tp / max(1, tp + fp)
    r = tp / max(1, tp + fn)
    f1 = 2 * p * r / (p + r) if p + r > 0 else 0.0
    out = {"records": statuses, "chunked_documents": chunked, "tp": tp, "fp": fp, "fn": fn,
           "precision": round(p, 3), "recall": round(r, 3), "f1": round(f1, 3)}
    if a.texts:
        out["printed_in_text"] = presence(a.texts, labels)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
