#!/usr/bin/python3
# -*- coding: utf-8 -*-
"""Checks the training-data generators against quarry's own extractor: renders documents of every
language and format (free-layout invoices, docgen documents, long ones included), reads them back with
`quarry ingest`, and fails (exit 1, one line per problem naming the document) when

  - a value the generator says is printed is not a span of the ingested text (whitespace-insensitive,
    the rule of grounded decoding's "copy");
  - a string of an invoice JSON target that must be copied (invoice number, names, tax and VAT ids,
    IBAN, account, order reference, street, city) is not such a span;
  - a random schema's answer does not conform to the schema (types, nullability, enums, date format,
    required keys, key order) or a string answer is not a span of the text;
  - a QA answer's evidence is not a verbatim line part of the text, or the answer is not in it.

  /usr/bin/python3 tools/samples/check_training_data.py [--quarry build/quarry] [--count 96]
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))

import docgen  # noqa: E402
from invoicegen import freeform, lexicon  # noqa: E402

COPY_POINTERS = ("invoice_number", "seller/name", "buyer/name", "seller/tax_id", "buyer/tax_id", "seller/vat_id",
                 "buyer/vat_id", "payment/iban", "payment/account_number", "order_reference",
                 "seller/address/street", "seller/address/city", "buyer/address/street", "buyer/address/city")
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def squash(s):
    return re.sub(r"\s+", "", s)


def get(obj, ptr):
    for part in ptr.split("/"):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def conforms(value, s, text, where, problems):
    t = s.get("type")
    types = t if isinstance(t, list) else [t]
    if value is None:
        if "null" not in types:
            problems.append("%s: null for a non-nullable property" % where)
        return
    if "enum" in s and value not in s["enum"]:
        problems.append("%s: %r not in enum" % (where, value))
    if isinstance(value, bool):
        problems.append("%s: boolean" % where)
    elif isinstance(value, str):
        if "string" not in types:
            problems.append("%s: string for %s" % (where, types))
        elif s.get("format") == "date" and not DATE.match(value):
            problems.append("%s: %r is not YYYY-MM-DD" % (where, value))
        elif "enum" not in s and s.get("format") != "date" and squash(value) not in text:
            problems.append("%s: %r is not a span of the text" % (where, value))
    elif isinstance(value, (int, float)):
        if not ({"number", "integer"} & set(types)) or ("integer" in types and "number" not in types and value != int(value)):
            problems.append("%s: number for %s" % (where, types))
    elif isinstance(value, list):
        if "array" not in types:
            problems.append("%s: array for %s" % (where, types))
        for i, v in enumerate(value):
            conforms(v, s.get("items", {}), text, "%s/%d" % (where, i), problems)
    elif isinstance(value, dict):
        if "object" not in types:
            problems.append("%s: object for %s" % (where, types))
        props = s.get("properties", {})
        if list(value) != list(props):
            problems.append("%s: keys %s, schema order %s" % (where, list(value), list(props)))
        for k, v in value.items():
            conforms(v, props.get(k, {}), text, "%s/%s" % (where, k), problems)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quarry", default=os.path.join(ROOT, "build", "quarry"))
    ap.add_argument("--count", type=int, default=96, help="documents of each generator")
    a = ap.parse_args()
    import build_corpus as BC
    prompts = json.load(open(os.path.join(ROOT, "tools", "train", "prompts.json"), encoding="utf-8"))
    rng = random.Random("quarry-check")
    problems = []
    with tempfile.TemporaryDirectory() as work:
        items = []
        for i in range(a.count):
            lang = lexicon.LANGS[i % len(lexicon.LANGS)]
            fmt = ("pdf", "html", "txt")[i % 3]
            items.append(("free", freeform.generate("check/%d" % i, lang, fmt)))
            items.append(("doc", docgen.generate("check/%d" % i, lang, fmt, kind=docgen.KINDS[i % len(docgen.KINDS)],
                                                 long=i % 3 == 0)))
        paths = []
        for n, (src, s) in enumerate(items):
            p = os.path.join(work, "%04d-%s.%s" % (n, src, s.extension))
            with open(p, "wb") as f:
                f.write(s.data)
            paths.append(p)
        res = subprocess.run([a.quarry, "--log-level", "error", "ingest"] + paths, capture_output=True, text=True)
        recs = {json.loads(l)["source"]: json.loads(l) for l in res.stdout.splitlines()}
        for p, (src, s) in zip(paths, items):
            name = "%s (%s %s %s)" % (os.path.basename(p), src, getattr(s, "lang", None) or s.language, s.fmt)
            rec = recs.get(p)
            if not rec or rec.get("status") != "ok":
                problems.append("%s: ingest failed: %s" % (name, rec and rec.get("error")))
                continue
            text = rec["text"]
            flat = squash(text)
            if src == "free":
                for ptr, v in s.printed.items():
                    if squash(v) not in flat:
                        problems.append("%s: printed %s %r not in the text" % (name, ptr, v))
                for ptr in COPY_POINTERS:
                    v = get(s.expected, ptr)
                    if isinstance(v, str) and squash(v) not in flat:
                        problems.append("%s: target %s %r not a span of the text" % (name, ptr, v))
                doc = BC.invoice_as_doc(s)
            else:
                doc = s
                for k, f in s.facts.items():
                    if f.printed is None or f.type == "array":
                        continue
                    if squash(f.printed) not in flat:
                        problems.append("%s: printed %s %r not in the text" % (name, k, f.printed))
            for _ in range(3):
                schema, answer = docgen.random_schema(rng, doc)
                conforms(answer, schema, flat, name + " schema", problems)
                json.loads(docgen.schema_for_prompt(schema))
            qa = BC.qa_doc(rng, s, text, prompts) if src == "doc" else BC.qa_invoice(rng, s.language, text, s.printed, prompts)
            if qa:
                ans = json.loads(qa[1])
                for ev in ans["evidence"]:
                    if ev not in text:
                        problems.append("%s: evidence %r not verbatim in the text" % (name, ev))
                    if ans["answer"] not in ev:
                        problems.append("%s: answer %r not in its evidence" % (name, ans["answer"]))
                    if len(ev) > BC.EVIDENCE_MAX:
                        problems.append("%s: evidence of %d characters" % (name, len(ev)))
    for p in problems:
        print(p)
    print("%d documents checked, %d problems" % (2 * a.count, len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
