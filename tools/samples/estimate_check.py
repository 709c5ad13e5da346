#!/usr/bin/python3
# -*- coding: utf-8 -*-
"""Measures how the chunker's token estimate (pipeline/chunk.cpp: one token per ASCII digit and per
ideograph, ceil(other UTF-8 bytes / 3.5)) compares with a real byte-level BPE tokenizer on the sample documents' text.

  /usr/bin/python3 tools/samples/estimate_check.py --tokenizer PATH/tokenizer.json [--samples samples] [--extra FILE...]

Prints, per language and format, the real token count, the estimate and their ratio. The BPE here
is a plain reading of a Hugging Face tokenizer.json of type BPE with a Split pre-tokenizer and
ByteLevel (GPT-2 byte-to-unicode alphabet): NFC, split by the file's own regex, bytes mapped to
characters, merges applied by rank. Added/special tokens are ignored (the texts contain none).
Needs python3-regex (for \\p{L} classes)."""
import argparse
import glob
import json
import math
import os
import subprocess
import unicodedata

import regex


def byte_alphabet():
    """GPT-2's reversible byte -> printable character map."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


class Bpe:
    def __init__(self, path):
        t = json.load(open(path, encoding="utf-8"))
        m = t["model"]
        self.vocab = m["vocab"]
        merges = [tuple(x) if isinstance(x, list) else tuple(x.split(" ")) for x in m["merges"]]
        self.rank = {p: i for i, p in enumerate(merges)}
        pre = [p for p in t["pre_tokenizer"]["pretokenizers"] if p["type"] == "Split"][0]
        self.split = regex.compile(pre["pattern"]["Regex"])
        self.bytemap = byte_alphabet()
        self.cache = {}

    def word(self, w):
        if w in self.cache:
            return self.cache[w]
        parts = list(w)
        while len(parts) > 1:
            best = min(range(len(parts) - 1), key=lambda i: self.rank.get((parts[i], parts[i + 1]), math.inf))
            if (parts[best], parts[best + 1]) not in self.rank:
                break
            parts[best:best + 2] = [parts[best] + parts[best + 1]]
        self.cache[w] = len(parts)
        return len(parts)

    def count(self, text):
        text = unicodedata.normalize("NFC", text)
        n = 0
        for piece in self.split.findall(text):
            n += self.word("".join(self.bytemap[b] for b in piece.encode("utf-8")))
        return n


def is_ideographic(c):
    return (0x1100 <= c <= 0x11FF or 0x2E80 <= c <= 0x2FDF or 0x3000 <= c <= 0x4DBF or 0x4E00 <= c <= 0x9FFF
            or 0xA000 <= c <= 0xA4CF or 0xAC00 <= c <= 0xD7AF or 0xF900 <= c <= 0xFAFF
            or 0xFF00 <= c <= 0xFFEF or 0x20000 <= c <= 0x3FFFF)


def estimate(text):
    """EstimateTokenCounter (pipeline/chunk.cpp): digits + ideographs + ceil(other bytes / 3.5)."""
    other, singles = 0, 0
    for ch in text:
        b = len(ch.encode("utf-8"))
        if (b == 1 and "0" <= ch <= "9") or (b > 1 and is_ideographic(ord(ch))):
            singles += 1
        else:
            other += b
    return (2 * other + 6) // 7 + singles


def bytes_estimate(text):
    """The baseline: ceil(UTF-8 bytes / 3.5)."""
    return (2 * len(text.encode("utf-8")) + 6) // 7


def text_of(path):
    if path.endswith(".pdf"):
        return subprocess.run(["pdftotext", "-layout", "-enc", "UTF-8", path, "-"], capture_output=True,
                              check=True).stdout.decode("utf-8")
    return open(path, encoding="utf-8").read()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--samples", default=os.path.join(os.path.dirname(__file__), "..", "..", "samples"))
    ap.add_argument("--extra", nargs="*", default=[], metavar="FILE",
                    help="more documents (.pdf, .txt, .html, .xml) to measure, grouped as 'extra'")
    a = ap.parse_args()
    bpe = Bpe(a.tokenizer)
    groups = {}
    manifest = json.load(open(os.path.join(a.samples, "manifest.json"), encoding="utf-8"))
    docs = [(m["language"], m["format"], os.path.join(a.samples, m["file"])) for m in manifest]
    docs += [("en", "long-pdf", p) for p in glob.glob(os.path.join(a.samples, "long", "*.pdf"))]
    docs += [("extra", os.path.splitext(p)[1].lstrip(".").lower(), p) for p in a.extra]
    for lang, fmt, path in docs:
        t = text_of(path)
        g = groups.setdefault((lang, fmt), [0, 0, 0, 0])
        g[0] += bpe.count(t)
        g[1] += estimate(t)
        g[2] += len(t.encode("utf-8"))
        g[3] += bytes_estimate(t)
    print("| language | format | bytes | tokens (BPE) | estimate | estimate / tokens | bytes/3.5 / tokens | bytes / token |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    tot = [0, 0, 0, 0]
    for (lang, fmt), (tok, est, by, be) in sorted(groups.items()):
        print("| %s | %s | %d | %d | %d | %.2f | %.2f | %.2f |" % (lang, fmt, by, tok, est, est / tok, be / tok, by / tok))
        tot = [tot[0] + tok, tot[1] + est, tot[2] + by, tot[3] + be]
    print("| all | all | %d | %d | %d | %.2f | %.2f | %.2f |" % (tot[2], tot[0], tot[1], tot[1] / tot[0], tot[3] / tot[0],
                                                            tot[2] / tot[0]))


if __name__ == "__main__":
    main()
