#!/usr/bin/python3
"""How often the bundled model's reading of a PDF's visible text agrees with the PDF's own e-invoice XML,
per field: one `quarry run --prefer model --cross-check` over the ZUGFeRD / Factur-X PDFs of
../shared/corpora (zugferd, zugferd-corpus; the documents of eval_kie.py --set zugferd).

For every record the cross-check (schemas/cross_check.hpp) compares each field the XML states with the
model's value (numbers by value, dates as ISO, text without white space and case). This script reports
 - per core field of eval_kie.py (kie_fields.CORE_FIELDS): documents where the XML states it, agree,
   disagree (of which the model gave no value), and, beside it, eval_kie's exact match on the same
   records (same_value: strings compared as they are), to show what the normalisation changes;
 - every field the cross-check compared, as report.json counts it;
 - the disagreements of the core fields, document by document.

Usage: tools/eval/eval_cross_check.py [--quarry build/quarry] [--model DIR] [--grounding on|off] [--out FILE]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

from eval_kie import ROOT, items_zugferd
from kie_fields import CORE_FIELDS, get_field, same_value


def pointer_of(dotted):
    return "/" + dotted.replace(".", "/")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quarry", default=os.path.join(ROOT, "build", "quarry"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "quarry-extract-11m"))
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    ap.add_argument("--grounding", choices=["on", "off"], default="on")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--max-tokens", type=int, default=2048)
    ap.add_argument("--out")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        items = list(items_zugferd(a.quarry, 100000, a.shared))
        src = os.path.join(work, "in")
        os.makedirs(src)
        names = {}
        for i, (_, path, _) in enumerate(items):
            name = "%04d-%s" % (i, os.path.basename(path))
            shutil.copyfile(path, os.path.join(src, name))
            names[name] = os.path.relpath(path, ROOT)
        out = os.path.join(work, "out")
        cmd = [a.quarry, "--log-level", "error", "run", src, "-o", out, "--model", a.model, "--prefer", "model",
               "--cross-check", "--retries", "0", "--grounding", a.grounding, "--threads", str(a.threads),
               "--max-tokens", str(a.max_tokens), "--progress", "none"]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode not in (0, 2):
            raise SystemExit("quarry run failed (%d): %s" % (res.returncode, res.stderr))
        with open(os.path.join(out, "report.json"), encoding="utf-8") as f:
            report = json.load(f)
        records = []
        with open(os.path.join(out, "results.jsonl"), encoding="utf-8") as f:
            for line in f:
                records.append(json.loads(line))

    core = {f: {"xml_states": 0, "agree": 0, "disagree": 0, "model_gave_none": 0, "exact_eval_kie": 0}
            for f in CORE_FIELDS}
    disagreements = []
    statuses = {}
    for rec in records:
        doc = names.get(os.path.basename(rec["source"]), rec["source"])
        statuses[rec["status"]] = statuses.get(rec["status"], 0) + 1
        cc = rec.get("cross_check") or {}
        xml = cc.get("xml") or {}
        data = rec.get("data") if isinstance(rec.get("data"), dict) else {}
        warned = {w["pointer"]: w for w in rec.get("warnings", [])}
        for f in CORE_FIELDS:
            truth = get_field(xml, f)
            if truth is None or truth == "":
                continue
            st = core[f]
            st["xml_states"] += 1
            st["exact_eval_kie"] += int(same_value(get_field(data, f), truth))
            w = warned.get(pointer_of(f))
            if w is None and "skipped" not in cc:
                st["agree"] += 1
            else:
                st["disagree"] += 1
                st["model_gave_none"] += int(w is None or w.get("model") is None)
                disagreements.append({"document": doc, "field": f, "model": None if w is None else w.get("model"),
                                      "xml": truth})
    tot = {k: sum(st[k] for st in core.values()) for k in ("xml_states", "agree", "disagree", "exact_eval_kie")}
    result = {
        "set": "zugferd",
        "model": os.path.basename(os.path.normpath(a.model)),
        "grounding": a.grounding,
        "command": "quarry run <copies of the set> --prefer model --cross-check --retries 0 --grounding " + a.grounding,
        "documents": len(records),
        "records_by_status": statuses,
        "core_fields": core,
        "core_total": tot,
        "all_fields": report.get("cross_check"),
        "core_disagreements": disagreements,
    }
    print("| field | XML states it | agree | disagree (model gave none) | eval_kie exact |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for f in CORE_FIELDS:
        st = core[f]
        print("| %s | %d | %d | %d (%d) | %d |" % (f, st["xml_states"], st["agree"], st["disagree"],
                                                 st["model_gave_none"], st["exact_eval_kie"]))
    print("| all core | %d | %d | %d | %d |" % (tot["xml_states"], tot["agree"], tot["disagree"], tot["exact_eval_kie"]))
    allf = report.get("cross_check") or {}
    print("\nall fields: %s documents, %s compared, %s agree, %s disagree, %s only in the model's output" % (
        allf.get("documents_compared"), allf.get("fields_compared"), allf.get("fields_agreeing"),
        allf.get("fields_disagreeing"), allf.get("fields_model_only")))
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump(result, f, ensure_ascii=False, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
