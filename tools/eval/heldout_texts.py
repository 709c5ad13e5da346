#!/usr/bin/env python3
"""Writes held-out kie examples in the training format, for measuring a model on examples it was not
trained on: `bench_engine --perplexity MODEL_DIR --texts OUT_DIR --ctx 4096 --quant int8,int4,fp8` scores
each example's answer given its prompt.

Each line of OUT_DIR/heldout-kie.jsonl is {"prompt": the engine's generation prompt (system and user
messages of MODEL_DIR's prompts.json "kie" entry around the document text, thinking off, as
tools/train/chat.py renders it for training), "target": the invoice JSON as training writes it (schema key order,
compact) followed by <|im_end|>}. The documents are text invoices from the training data's generator
(tools/samples/invoicegen) under a seed namespace of their own ("quarry-eval/perplexity/..."), so none is
a training document; the languages are drawn at random from the generator's.

Usage: python3 tools/eval/heldout_texts.py MODEL_DIR OUT_DIR [--limit 60]
"""
import argparse
import json
import os
import random
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--limit", type=int, default=60)
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
    import build_corpus  # the training data's ordering and compact JSON (imports invoicegen)
    from chat import render_prompt  # the engine's generation prompt, as training renders it
    import invoicegen
    prompts = json.load(open(os.path.join(a.model, "prompts.json"), encoding="utf-8"))["kie"]
    schema = json.load(open(os.path.join(ROOT, "schemas", "invoice.schema.json"), encoding="utf-8"))
    defs = schema.get("$defs", schema.get("definitions", {}))
    os.makedirs(a.out, exist_ok=True)
    rng = random.Random("quarry-eval/perplexity")
    written = 0
    with open(os.path.join(a.out, "heldout-kie.jsonl"), "w", encoding="utf-8") as out:
        for i in range(a.limit):
            lang = rng.choice(invoicegen.LANGUAGES)
            try:
                s = invoicegen.generate("quarry-eval/perplexity/%d" % i, lang, "txt")
            except ValueError:
                continue
            text = s.data.decode("utf-8")
            prompt = render_prompt(prompts["system"], prompts["user"].format(document=text))
            target = build_corpus.compact(build_corpus.ordered(s.expected, schema, defs)) + "<|im_end|>"
            out.write(json.dumps({"prompt": prompt, "target": target, "language": lang}, ensure_ascii=False) + "\n")
            written += 1
    print("wrote", written, "examples to", os.path.join(a.out, "heldout-kie.jsonl"))


if __name__ == "__main__":
    main()
