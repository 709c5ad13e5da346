#!/usr/bin/python3
"""Field-level evaluation of invoice extraction by a model, run through quarry itself.

For each document: `quarry ingest` gives the text the pipeline sees, the model's prompts
(MODEL/prompts.json, the ones it was trained with) make the chat messages, `quarry generate` (greedy)
writes the JSON (constrained by schemas/invoice.schema.json unless --unconstrained), and the core fields are compared with the truth:

  invoice_number, issue_date, currency, seller.name, seller.tax_id, buyer.name,
  totals.net, totals.vat, totals.gross          (numbers equal within 0.005)

Sets:
  samples   samples/invoices with samples/expected (all formats, the model path)
  heldout   fresh documents from the generator with the held-out seed namespace of
            tools/train/build_corpus.py (never trained on; needs tools/setup-tools.sh for PDFs)
  free      free-layout invoices (tools/samples/invoicegen/freeform.py, eight languages, pdf / html / txt)
            from a seed namespace of their own, every party named with dictionary words
            (names.DICT_NAMES = 1) and half of them printing the document facts above the parties
            (freeform.META_FIRST = 0.5): whether the model copies names it cannot have seen
  nav       ../shared/corpora/nav/pdf/{hu,en,de}: real NAV invoices; truth = the matching InvoiceData
            XML mapped by quarry's e-invoice mapper

  zugferd   the ZUGFeRD / Factur-X PDFs of ../shared/corpora (zugferd, zugferd-corpus); truth = their
            embedded XML mapped by quarry's e-invoice mapper (the model reads the visible text)

--via-run on|off: instead of one `quarry generate` per document, one `quarry run --prefer model
--retries 0 --grounding on|off` over copies of the documents (the main job as users run it: grounded
decoding, records' data whatever their status).

Usage: tools/eval/eval_kie.py --set samples [--model DIR] [--limit N] [--out report.json]
Prints a Markdown table; --out writes the JSON report (per language: documents, parsed, fields, exact,
exact_match; plus every mismatch).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from kie_fields import CORE_FIELDS, get_field, same_value

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def ingest(quarry, paths):
    res = subprocess.run([quarry, "--log-level", "error", "ingest"] + list(paths), capture_output=True, text=True)
    out = {}
    for line in res.stdout.splitlines():
        rec = json.loads(line)
        out[rec["source"]] = rec
    return out


def generate(quarry, model, prompts, text, threads, max_tokens, schema):
    messages = [{"role": "system", "content": prompts["kie"]["system"]},
                {"role": "user", "content": prompts["kie"]["user"].format(document=text)}]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
        json.dump(messages, f, ensure_ascii=False)
        path = f.name
    try:
        res = subprocess.run([quarry, "--log-level", "error", "generate", "--model", model, "--messages", path,
                              "--max-tokens", str(max_tokens), "--temperature", "0", "--threads", str(threads)]
                             + (["--json-schema", schema] if schema else []),
                             capture_output=True, text=True)
    finally:
        os.unlink(path)
    if res.returncode != 0:
        raise SystemExit("quarry generate failed: " + res.stderr)
    return res.stdout.strip()


def items_samples(limit, names):
    manifest = json.load(open(os.path.join(ROOT, "samples", "manifest.json"), encoding="utf-8"))
    if names:
        manifest = [m for m in manifest if m["name"] in names]
    for m in manifest[:limit]:
        truth = json.load(open(os.path.join(ROOT, "samples", m["expected"]), encoding="utf-8"))
        yield m["language"], os.path.join(ROOT, "samples", m["file"]), truth


def items_heldout(limit, workdir):
    sys.path.insert(0, os.path.join(ROOT, "tools", "samples"))
    import random
    import invoicegen
    rng = random.Random("quarry-eval/heldout")
    for i in range(limit):
        lang = rng.choice(invoicegen.LANGUAGES)
        fmt = rng.choice(["pdf", "pdf", "html", "txt", "xml"])
        try:
            s = invoicegen.generate("heldout/eval-%d" % i, lang, fmt)
        except ValueError:
            continue
        path = os.path.join(workdir, "heldout-%04d.%s" % (i, s.extension))
        with open(path, "wb") as f:
            f.write(s.data)
        yield lang, path, s.expected


def items_free(limit, workdir):
    sys.path.insert(0, os.path.join(ROOT, "tools", "samples"))
    from invoicegen import freeform, lexicon, names
    # pinned, so that the set does not move with the generator's defaults (as defined on 2026-11-30)
    freeform.META_FIRST, names.DICT_NAMES = 0.5, 1.0
    freeform.FORM_ITEMS, freeform.WIDE_GAPS = 0.0, 0.0
    names.ACCENT_INITIAL, names.LABEL_NAMES, names.LABEL_PREFIX = 0.0, 0.0, 0.0
    for i in range(limit):
        lang = lexicon.LANGS[i % len(lexicon.LANGS)]
        fmt = ("pdf", "pdf", "txt", "html")[i % 4]
        s = freeform.generate("quarry-eval/free-%d" % i, lang, fmt)
        path = os.path.join(workdir, "free-%04d.%s" % (i, fmt))
        with open(path, "wb") as f:
            f.write(s.data)
        yield lang, path, s.expected


def items_nav(quarry, limit, shared):
    nav = os.path.join(shared, "corpora", "nav")
    truths = {os.path.splitext(os.path.basename(k))[0]: v.get("einvoice")
              for k, v in ingest(quarry, [os.path.join(nav, "xml")]).items()}
    n = 0
    for lang in ("hu", "en", "de"):
        folder = os.path.join(nav, "pdf", lang)
        for name in sorted(os.listdir(folder)):
            truth = truths.get(os.path.splitext(name)[0])
            if truth is None or n >= limit:
                continue
            n += 1
            yield lang, os.path.join(folder, name), truth


def items_zugferd(quarry, limit, shared):
    n = 0
    for folder in ("zugferd", "zugferd-corpus"):
        d = os.path.join(shared, "corpora", folder)
        if not os.path.isdir(d):
            continue
        paths = sorted(os.path.join(r, f) for r, _, fs in os.walk(d) for f in fs if f.lower().endswith(".pdf"))
        recs = ingest(quarry, paths)
        for p in paths:
            truth = (recs.get(p) or {}).get("einvoice")
            if truth is None or n >= limit:
                continue
            n += 1
            yield (recs[p].get("language") or "xx"), p, truth


def run_predictions(a, items, work, grounding):
    """{path: data} from one `quarry run` over copies of the items' documents."""
    import shutil
    src = os.path.join(work, "run-in")
    os.makedirs(src, exist_ok=True)
    names = {}
    for i, (_, path, _) in enumerate(items):
        name = "%04d-%s" % (i, os.path.basename(path))
        shutil.copyfile(path, os.path.join(src, name))
        names[name] = path
    out = os.path.join(work, "run-out")
    subprocess.run([a.quarry, "--log-level", "error", "run", src, "-o", out, "--model", a.model, "--prefer", "model",
                    "--retries", "0", "--grounding", grounding, "--threads", str(a.threads),
                    "--max-tokens", str(a.max_tokens), "--schema", a.schema], capture_output=True, text=True)
    preds = {}
    with open(os.path.join(out, "results.jsonl"), encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            base = os.path.basename(rec.get("source", ""))
            if base in names and isinstance(rec.get("data"), dict):
                preds[names[base]] = rec["data"]
    return preds


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", choices=["samples", "heldout", "free", "nav", "zugferd"], required=True)
    ap.add_argument("--via-run", choices=["on", "off"], help="one quarry run with grounding on / off")
    ap.add_argument("--quarry", default=os.path.join(ROOT, "build", "quarry"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "quarry-extract-11m"))
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    ap.add_argument("--limit", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--max-tokens", type=int, default=2048)
    ap.add_argument("--out")
    ap.add_argument("--schema", default=os.path.join(ROOT, "schemas", "invoice.schema.json"),
                    help="JSON Schema that constrains decoding (quarry generate --json-schema)")
    ap.add_argument("--unconstrained", action="store_true", help="plain greedy decoding, no grammar")
    ap.add_argument("--names", help="samples set: only these sample names (comma-separated)")
    ap.add_argument("--min-exact", type=float,
                    help="exit 1 when the overall field exact match is below this fraction (for tests)")
    a = ap.parse_args()
    prompts = json.load(open(os.path.join(a.model, "prompts.json"), encoding="utf-8"))
    with tempfile.TemporaryDirectory() as work:
        if a.set == "samples":
            items = list(items_samples(a.limit, a.names.split(",") if a.names else None))
        elif a.set == "heldout":
            items = list(items_heldout(a.limit, work))
        elif a.set == "free":
            items = list(items_free(a.limit, work))
        elif a.set == "nav":
            items = list(items_nav(a.quarry, a.limit, a.shared))
        else:
            items = list(items_zugferd(a.quarry, a.limit, a.shared))
        docs = ingest(a.quarry, [p for _, p, _ in items])
        preds = run_predictions(a, items, work, a.via_run) if a.via_run else None
        per_lang, mismatches = {}, []
        for lang, path, truth in items:
            st = per_lang.setdefault(lang, {"documents": 0, "parsed": 0, "fields": 0, "exact": 0})
            st["documents"] += 1
            rec = docs.get(path)
            pred = {}
            if preds is not None:
                pred = preds.get(path, {})
                st["parsed"] += int(bool(pred))
            elif rec and rec.get("status") == "ok":
                out = generate(a.quarry, a.model, prompts, rec["text"], a.threads, a.max_tokens,
                               None if a.unconstrained else a.schema)
                try:
                    pred = json.loads(out)
                    st["parsed"] += 1
                except json.JSONDecodeError:
                    pred = {}
            for f in CORE_FIELDS:
                st["fields"] += 1
                ok = same_value(get_field(pred, f), get_field(truth, f))
                st["exact"] += int(ok)
                if not ok:
                    mismatches.append({"document": os.path.relpath(path, ROOT) if a.set not in ("heldout", "free") else
                                       os.path.basename(path), "field": f, "expected": get_field(truth, f),
                                       "got": get_field(pred, f)})
    for st in per_lang.values():
        st["exact_match"] = st["exact"] / max(1, st["fields"])
    total = {k: sum(st[k] for st in per_lang.values()) for k in ("documents", "parsed", "fields", "exact")}
    total["exact_match"] = total["exact"] / max(1, total["fields"])
    report = {"set": a.set, "model": os.path.basename(os.path.normpath(a.model)), "fields": CORE_FIELDS,
              "constrained": not a.unconstrained, "via_run": a.via_run,
              "per_language": per_lang, "total": total, "mismatches": mismatches}
    print("| set | language | documents | parsed | field exact match |")
    print("| --- | --- | ---: | ---: | ---: |")
    for lang, st in sorted(per_lang.items()) + [("all", total)]:
        print("| %s | %s | %d | %d | %.1f%% (%d/%d) |" % (a.set, lang, st["documents"], st["parsed"],
                                                         100 * st["exact_match"], st["exact"], st["fields"]))
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump(report, f, ensure_ascii=False, indent=1)
            f.write("\n")
    if a.min_exact is not None and (total["exact_match"] < a.min_exact or total["documents"] == 0):
        print("field exact match %.3f is below %.3f" % (total["exact_match"], a.min_exact), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
