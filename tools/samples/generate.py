#!/usr/bin/python3
# -*- coding: utf-8 -*-
"""Generates synthetic invoices with their expected JSON, and the long document with its questions.

  # the committed sample set (samples/), byte for byte:
  /usr/bin/python3 tools/samples/generate.py --preset samples --out samples --seed 1
  # a training corpus: N random invoices (language, format, layout and features drawn per document)
  /usr/bin/python3 tools/samples/generate.py --out /tmp/corpus --seed 7 --count 5000 [--languages hu,en] [--formats pdf,txt]

Each document is checked after rendering: every printed form of an expected value must occur in the
document's text (PDF via `pdftotext -layout` when poppler-utils is installed); a miss is an error.
"""
import argparse
import json
import os
import random
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import invoicegen  # noqa: E402
import longdoc  # noqa: E402
import verify  # noqa: E402

# The committed set: (language, format, layout, options). Names are <language>-<format>-<n>.
PRESET = [
    ("hu", "pdf", 0, {"hu_account": True, "line_vat": True, "currency": "HUF", "regime": "standard"}),
    ("hu", "pdf", 1, {"n_lines": 40, "currency": "HUF", "regime": "mixed", "payment_means": "transfer"}),
    ("hu", "html", 0, {"currency": "HUF", "discount": True, "payment_means": "transfer", "regime": "standard"}),
    ("hu", "html", 2, {"doc_type": "credit_note", "currency": "HUF", "payment_means": "transfer"}),
    ("hu", "xml", 0, {"currency": "HUF", "regime": "mixed", "hu_account": False, "payment_means": "transfer"}),
    ("hu", "xml", 1, {"currency": "EUR", "regime": "reverse_charge", "payment_means": "transfer"}),
    ("hu", "txt", 0, {"currency": "HUF", "regime": "exempt", "payment_means": "transfer", "hu_account": True}),
    ("hu", "txt", 1, {"currency": "HUF", "discount": True, "payment_means": "cash", "regime": "standard"}),
    ("de", "pdf", 0, {"regime": "mixed", "payment_means": "transfer"}),
    ("de", "pdf", 2, {"doc_type": "credit_note", "payment_means": "transfer", "regime": "standard"}),
    ("de", "html", 1, {"discount": True, "payment_means": "transfer", "regime": "standard"}),
    ("de", "html", 0, {"regime": "reverse_charge", "payment_means": "transfer"}),
    ("de", "xml", 1, {"regime": "standard", "payment_means": "transfer"}),
    ("de", "xml", 0, {"doc_type": "credit_note", "regime": "mixed", "payment_means": "transfer"}),
    ("de", "txt", 2, {"regime": "exempt", "payment_means": "transfer"}),
    ("de", "txt", 0, {"n_lines": 30, "regime": "standard", "payment_means": "transfer", "line_vat": False}),
    ("en", "pdf", 1, {"currency": "USD", "regime": "standard", "payment_means": "transfer"}),
    ("en", "pdf", 2, {"currency": "GBP", "regime": "reverse_charge", "payment_means": "transfer"}),
    ("en", "html", 2, {"currency": "GBP", "payment_means": "card", "regime": "standard"}),
    ("en", "html", 1, {"currency": "EUR", "discount": True, "payment_means": "transfer", "regime": "standard"}),
    ("en", "xml", 0, {"currency": "USD", "regime": "standard", "payment_means": "transfer"}),
    ("en", "xml", 1, {"currency": "GBP", "doc_type": "credit_note", "payment_means": "transfer", "regime": "standard"}),
    ("en", "txt", 1, {"currency": "GBP", "regime": "standard", "payment_means": "transfer"}),
    ("en", "txt", 2, {"currency": "EUR", "regime": "mixed", "payment_means": "transfer", "discount": True}),
    ("fr", "pdf", 0, {"regime": "mixed", "payment_means": "transfer"}),
    ("fr", "html", 1, {"regime": "standard", "payment_means": "transfer", "doc_type": "credit_note"}),
    ("hu", "xml", 2, {"currency": "HUF", "regime": "mixed", "discount": True, "payment_means": "transfer", "hu_account": True}),
    ("hu", "xml", 2, {"currency": "EUR", "regime": "standard", "payment_means": "transfer", "hu_account": False}),
]


def can_verify(fmt):
    return fmt != "pdf" or shutil.which("pdftotext") is not None


def check(sample, name):
    if not can_verify(sample.fmt):
        return
    miss = verify.missing(sample.data, sample.fmt, sample.printed)
    if miss:
        raise SystemExit("%s: printed values not found in the document's text: %s" % (name, miss))


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8"))


def preset_samples(out, seed):
    manifest = []
    counters = {}
    for i, (lang, fmt, layout, opts) in enumerate(PRESET):
        counters[(lang, fmt)] = counters.get((lang, fmt), 0) + 1
        name = "%s-%s-%d" % (lang, fmt, counters[(lang, fmt)])
        s = invoicegen.generate("%s-%d" % (seed, i), lang, fmt, layout, **opts)
        check(s, name)
        fname = "invoices/%s.%s" % (name, s.extension)
        write(os.path.join(out, fname), s.data)
        write(os.path.join(out, "expected", name + ".json"), s.expected_json())
        manifest.append({"name": name, "file": fname, "expected": "expected/%s.json" % name, "language": lang,
                         "format": fmt, "layout": layout, "seed": "%s-%d" % (seed, i), "options": opts,
                         "features": s.features, "printed": s.printed})
    write(os.path.join(out, "manifest.json"), json.dumps(manifest, ensure_ascii=False, indent=1) + "\n")
    n_pages, n_questions = longdoc.write_all(out, seed)
    write(os.path.join(out, "README.md"), readme(manifest, seed, n_pages, n_questions))


def readme(manifest, seed, n_pages, n_questions):
    rows = "\n".join("| `%s` | %s | %s | %s | %s |" % (m["file"], m["language"], m["format"], m["layout"],
                                                       ", ".join(m["features"])) for m in manifest)
    return README % {"seed": seed, "rows": rows, "n": len(manifest), "pages": n_pages, "questions": n_questions,
                     "long": longdoc.NAME}


README = """# Sample documents

Synthetic documents made by `tools/samples/generate.py`: every company, person, address, tax number
and bank account in them is made up (with valid check digits). Nothing here comes from a real document.

Regenerate byte for byte (Debian 12 with `tools/setup-tools.sh` run once):

    /usr/bin/python3 tools/samples/generate.py --preset samples --out samples --seed %(seed)s

## Invoices (%(n)d)

`invoices/<language>-<format>-<n>.<ext>`, each with its expected output `expected/<same name>.json`
following `schemas/invoice.schema.json`. `manifest.json` lists, for every invoice, its generator
arguments, its features and `printed`: for each expected value (JSON pointer) the exact string the
document shows (as `pdftotext -layout` renders PDFs; HTML/XML with character references decoded).

Conventions of the expected JSON: every property present, `null` where the document does not state
the value (e.g. `delivery_date` when no delivery date is printed, `bic` when no BIC is printed);
credit notes keep positive amounts; `vat_rate` is `null` for an exempt line of a printed invoice and
`0` in UBL/CII (where EN 16931 requires a rate); `unit` is the printed word (db, Std., hrs) or the
UN/ECE code in UBL/CII; `vat_amount` of a line is set only where the document prints it. HUF amounts
are whole forints; other currencies have two decimals. `totals.net` is the sum of the line net
amounts, `totals.vat` the sum of the VAT breakdown, `totals.gross` = net + vat.

| file | language | format | layout | features |
| --- | --- | --- | --- | --- |
%(rows)s

Layouts: PDF 0 classic ruled grid, 1 modern with page footers, 2 compact; HTML 0 table page,
1 div/definition lists with CSS, 2 e-mail style with inline styles; XML 0 UBL 2.1, 1 UN/CEFACT CII
(D16B), 2 NAV Online Számla InvoiceData 3.0 (units are NAV's unitOfMeasure, or the own unit text;
no BIC; a domestic buyer is identified by its tax number only); text 0 fixed-width columns, 1 "Label: value" with numbered items, 2 Markdown-like table.

## Long document

`long/%(long)s.pdf`: a made-up data platform services agreement, %(pages)d pages (English).
`questions/%(long)s.txt`: %(questions)d questions, one per line, each answered in the document;
`questions/%(long)s.hu.txt`: the same questions in Hungarian, line for line.
`questions/%(long)s.answers.jsonl`: per question (same order) the `answer` text, an `evidence`
string that occurs on exactly one page, and that `page` (1-based), found with `pdftotext -layout`.
"""


def corpus(out, seed, count, languages, formats):
    rng = random.Random("quarry-corpus/%s" % seed)
    with_pdf_check = can_verify("pdf")
    lines = []
    for i in range(count):
        lang = rng.choice(languages)
        fmt = rng.choice(formats)
        s = invoicegen.generate("%s-%d" % (seed, i), lang, fmt)
        name = "%06d" % i
        if fmt != "pdf" or with_pdf_check:
            check(s, name)
        write(os.path.join(out, "%s.%s" % (name, s.extension)), s.data)
        write(os.path.join(out, "expected", name + ".json"), s.expected_json())
        lines.append(json.dumps({"name": name, "file": "%s.%s" % (name, s.extension), "language": lang, "format": fmt,
                                 "layout": s.layout, "features": s.features}, ensure_ascii=False))
    write(os.path.join(out, "manifest.jsonl"), "\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--seed", default="1", help="seed (any string); the same seed gives the same bytes")
    ap.add_argument("--preset", choices=["samples"], help="generate the committed sample set")
    ap.add_argument("--count", type=int, default=0, help="number of random invoices (corpus mode)")
    ap.add_argument("--languages", default="hu,en,de,fr")
    ap.add_argument("--formats", default="pdf,html,xml,txt")
    a = ap.parse_args()
    if a.preset:
        preset_samples(a.out, a.seed)
    elif a.count > 0:
        corpus(a.out, a.seed, a.count, a.languages.split(","), a.formats.split(","))
    else:
        ap.error("give --preset samples or --count N")


if __name__ == "__main__":
    main()
