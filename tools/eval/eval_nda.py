#!/usr/bin/python3
"""F1 of a `quarry run` over the Kleister-NDA contracts against their labels, as the Kleister benchmark
scores it: per document the set of (key, value upper-cased) pairs; true / false positives and false
negatives summed over the documents (a document without a record counts all its labels as missed).

  quarry run ../shared/corpora/kleister-nda/pdf --schema ../shared/corpora/kleister-nda/nda.schema.json -o OUT
  tools/eval/eval_nda.py OUT/results.jsonl [--labels ../shared/corpora/kleister-nda/labels.jsonl]

The schema's `parties` array is scored as the labels' `party`.
"""
import argparse
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("--labels", default=os.path.join(HERE, "..", "..", "..", "shared", "corpora", "kleister-nda",
                                                     "labels.jsonl"))
    a = ap.parse_args()
    labels = {}
    with open(a.labels, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            labels[os.path.basename(r["file"])] = r
    tp = fp = fn = 0
    statuses, seen = {}, set()
    with open(a.results, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            name = os.path.basename(r.get("source", ""))
            seen.add(name)
            statuses[r["status"]] = statuses.get(r["status"], 0) + 1
            d = r.get("data") if isinstance(r.get("data"), dict) else {}
            pred = {("party", p.strip().upper()) for p in (d.get("parties") or []) if isinstance(p, str) and p.strip()}
            for k in ("effective_date", "jurisdiction", "term"):
                v = d.get(k)
                if isinstance(v, str) and v.strip():
                    pred.add((k, v.strip().upper()))
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
    print(json.dumps({"records": statuses, "tp": tp, "fp": fp, "fn": fn, "precision": round(p, 3),
                      "recall": round(r, 3), "f1": round(f1, 3)}))


if __name__ == "__main__":
    main()
