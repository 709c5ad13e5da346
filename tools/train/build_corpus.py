#!/usr/bin/python3
"""Build the training corpus of quarry's default model from synthetic documents.

Documents come from tools/samples (seeded generator: invoices in hu/en/de/fr as PDF, HTML, XML and
text), are written to disk and read back through quarry's own extractors (`quarry ingest`), so that
the model is trained on exactly the text the pipeline shows it at run time. Each document gives:
  - one "kie" example: the document text -> the expected invoice JSON (compact, keys in
    schemas/invoice.schema.json property order);
  - a few "qa" examples: a question about a printed value -> a rag_answer JSON (answer, evidence =
    the line quoting it, pages).
Prompts come from tools/train/prompts.json, which is shipped with the model (prompts.json) so that
run time uses the prompts the model was trained with.

The held-out split uses a disjoint seed namespace. Nothing from the real-document corpora is used.

Usage: /usr/bin/python3 tools/train/build_corpus.py --quarry build/quarry --count 20000 \
           --heldout 600 --out corpus.jsonl.gz
"""
import argparse
import gzip
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools", "samples"))

import invoicegen  # noqa: E402

QUESTIONS = {
    "/invoice_number": {"en": "What is the invoice number?", "hu": "Mi a számla sorszáma?",
                        "de": "Wie lautet die Rechnungsnummer?", "fr": "Quel est le numéro de la facture ?"},
    "/issue_date": {"en": "When was the invoice issued?", "hu": "Mikor állították ki a számlát?",
                    "de": "Wann wurde die Rechnung ausgestellt?", "fr": "Quelle est la date de la facture ?"},
    "/due_date": {"en": "When is payment due?", "hu": "Mi a fizetési határidő?",
                  "de": "Wann ist die Zahlung fällig?", "fr": "Quelle est la date d'échéance ?"},
    "/seller/name": {"en": "Who is the seller?", "hu": "Ki az eladó?", "de": "Wer ist der Verkäufer?",
                     "fr": "Qui est le vendeur ?"},
    "/buyer/name": {"en": "Who is the buyer?", "hu": "Ki a vevő?", "de": "Wer ist der Käufer?",
                    "fr": "Qui est l'acheteur ?"},
    "/totals/gross": {"en": "What is the gross total?", "hu": "Mennyi a bruttó végösszeg?",
                      "de": "Wie hoch ist der Bruttobetrag?", "fr": "Quel est le montant TTC ?"},
    "/totals/vat": {"en": "How much VAT is charged?", "hu": "Mennyi az ÁFA összege?",
                    "de": "Wie hoch ist die Umsatzsteuer?", "fr": "Quel est le montant de la TVA ?"},
    "/seller/tax_id": {"en": "What is the seller's tax number?", "hu": "Mi az eladó adószáma?",
                       "de": "Wie lautet die Steuernummer des Verkäufers?",
                       "fr": "Quel est le numéro fiscal du vendeur ?"},
}
UNANSWERABLE = {"en": "What is the name of the project manager?", "hu": "Ki a projektvezető?",
                "de": "Wie heißt der Projektleiter?", "fr": "Qui est le chef de projet ?"}


def ordered(value, schema, defs):
    """The value with object keys in the schema's property order (recursively)."""
    if "$ref" in schema:
        schema = defs[schema["$ref"].split("/")[-1]]
    if isinstance(value, dict):
        props = schema.get("properties", {})
        out = {k: ordered(value[k], props.get(k, {}), defs) for k in props if k in value}
        for k in value:
            if k not in out:
                out[k] = value[k]
        return out
    if isinstance(value, list):
        return [ordered(v, schema.get("items", {}), defs) for v in value]
    return value


def compact(obj):
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def qa_examples(rng, lang, text, printed, prompts, n):
    """Questions whose answer is a printed value; the evidence is the first line that quotes it."""
    pages = text.split("\f")
    out = []
    keys = [k for k in QUESTIONS if k in printed]
    rng.shuffle(keys)
    for key in keys[:n]:
        value = printed[key]
        evidence, page = None, None
        for p, page_text in enumerate(pages, 1):
            for line in page_text.split("\n"):
                if value in line:
                    evidence, page = line.strip(), p
                    break
            if evidence:
                break
        if not evidence:
            continue
        q_lang = lang if rng.random() < 0.7 else "en"
        answer = {"answer": value, "evidence": [evidence], "pages": [page]}
        out.append(("qa", prompts["rag"]["user"].format(document=text, question=QUESTIONS[key][q_lang]),
                    compact(answer)))
    if n and rng.random() < 0.15:
        out.append(("qa", prompts["rag"]["user"].format(document=text, question=UNANSWERABLE[lang]),
                    compact({"answer": None, "evidence": [], "pages": []})))
    return out


def build(quarry, count, seed, split, prompts, schema, workdir, rng):
    samples = []
    for i in range(count):
        lang = rng.choice(invoicegen.LANGUAGES)
        fmt = rng.choice(["pdf", "pdf", "html", "txt", "xml"])
        try:
            s = invoicegen.generate("%s/%s-%d" % (split, seed, i), lang, fmt)
        except ValueError:
            continue
        path = os.path.join(workdir, "%s-%06d.%s" % (split, i, s.extension))
        with open(path, "wb") as f:
            f.write(s.data)
        samples.append((path, s))
    res = subprocess.run([quarry, "--log-level", "error", "ingest"] + [p for p, _ in samples],
                         capture_output=True, text=True)
    if res.returncode not in (0, 2):
        raise SystemExit("quarry ingest failed: " + res.stderr)
    by_source = {}
    for line in res.stdout.splitlines():
        rec = json.loads(line)
        by_source[rec["source"]] = rec
    defs = schema.get("$defs", schema.get("definitions", {}))
    examples, skipped = [], 0
    for path, s in samples:
        rec = by_source.get(path)
        if not rec or rec.get("status") != "ok" or not rec.get("text"):
            skipped += 1
            continue
        text = rec["text"]
        target = compact(ordered(s.expected, schema, defs))
        base = {"lang": s.language, "split": split, "format": s.fmt, "layout": s.layout}
        examples.append(dict(base, kind="kie", system=prompts["kie"]["system"],
                             user=prompts["kie"]["user"].format(document=text), assistant=target))
        n_qa = 1 if rng.random() < 0.5 else 0
        for kind, user, assistant in qa_examples(rng, s.language, text, s.printed, prompts, n_qa):
            examples.append(dict(base, kind=kind, system=prompts["rag"]["system"], user=user, assistant=assistant))
        os.unlink(path)
    return examples, skipped


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quarry", default=os.path.join(ROOT, "build", "quarry"))
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--heldout", type=int, default=600)
    ap.add_argument("--seed", default="1")
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=500, help="documents per ingest call")
    a = ap.parse_args()
    prompts = json.load(open(os.path.join(HERE, "prompts.json"), encoding="utf-8"))
    schema = json.load(open(os.path.join(ROOT, "schemas", "invoice.schema.json"), encoding="utf-8"))
    rng = random.Random("quarry-corpus/" + a.seed)
    n_ex, n_skip = 0, 0
    with tempfile.TemporaryDirectory() as work, gzip.open(a.out, "wt", encoding="utf-8") as out:
        for split, total in (("heldout", a.heldout), ("train", a.count)):
            for start in range(0, total, a.batch):
                exs, skipped = build(a.quarry, min(a.batch, total - start), "%s-%d" % (a.seed, start), split,
                                     prompts, schema, work, rng)
                for e in exs:
                    out.write(json.dumps(e, ensure_ascii=False) + "\n")
                n_ex += len(exs)
                n_skip += skipped
                print("%s: %d/%d documents, %d examples so far, %d skipped" % (split, start + min(a.batch, total - start),
                                                                               total, n_ex, n_skip), flush=True)


if __name__ == "__main__":
    main()
