#!/usr/bin/env python3
"""Generates engine/tokenizer/unicode_tables.inc from the Unicode Character Database.

Input: the UCD text files (Debian package `unicode-data`, installed under /usr/share/unicode):
  UnicodeData.txt                 general category, canonical combining class, decompositions
  PropList.txt                    White_Space (the regex class \\s)
  DerivedCoreProperties.txt       Alphabetic (Rust char::is_alphanumeric, used for added tokens' single_word)
  DerivedNormalizationProps.txt   Full_Composition_Exclusion, NFC_Quick_Check
  CaseFolding.txt                 case-insensitive matching of the contraction alternatives ('s, 't, ...)

Output (C++ include, no dependencies):
  kUnicodeVersion                 "15.0.0" (the UCD version read from the files' headers)
  kPropStage1 / kPropStage2       two-stage table, one byte per code point:
                                  bits 0-4 general category (enum order below), bit 5 White_Space,
                                  bit 6 Alphabetic, bit 7 NFC_Quick_Check != Yes
  kCccStage1 / kCccStage2         two-stage table of canonical combining classes
  kDecompIndex / kDecompData      full canonical decomposition (recursively applied, Hangul excluded:
                                  it is algorithmic) of every code point that has one, sorted by code point
  kComposePairs                   primary composites: (first, second) -> composite, sorted by (first, second),
                                  Full_Composition_Exclusion removed (UAX #15 canonical composition)
  kFoldS, kFoldT, ...             code points that match an ASCII letter case-insensitively (simple folding)

usage: gen_unicode_tables.py [--ucd DIR] [--out FILE]
"""
import argparse
import os
import re
import sys

GC_NAMES = ["Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps",
            "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co"]
N_CP = 0x110000
BLOCK = 128
FOLD_LETTERS = "stremvld"  # letters of the contractions 's 't 're 've 'm 'll 'd


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                yield [p.strip() for p in line.split(";")]


def parse_range(s):
    if ".." in s:
        a, b = s.split("..")
        return int(a, 16), int(b, 16)
    return int(s, 16), int(s, 16)


def version_of(path):
    with open(path, encoding="utf-8") as f:
        m = re.search(r"-(\d+\.\d+\.\d+)\.txt", f.readline())
    if not m:
        sys.exit(f"gen_unicode_tables: no version in the first line of {path}")
    return m.group(1)


def two_stage(values, dtype):
    """Splits a per-code-point list into (stage1 block indices, stage2 unique blocks)."""
    blocks, index, stage1 = [], {}, []
    for start in range(0, N_CP, BLOCK):
        blk = tuple(values[start:start + BLOCK])
        if blk not in index:
            index[blk] = len(blocks)
            blocks.append(blk)
        stage1.append(index[blk])
    assert len(blocks) < 65536
    return stage1, [v for b in blocks for v in b]


def emit_array(out, ctype, name, values, per_line=16, fmt=str):
    out.append(f"inline constexpr {ctype} {name}[{len(values)}] = {{")
    for i in range(0, len(values), per_line):
        out.append("  " + ", ".join(fmt(v) for v in values[i:i + per_line]) + ",")
    out.append("};")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ucd", default="/usr/share/unicode")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "..", "engine", "tokenizer", "unicode_tables.inc"))
    args = ap.parse_args()
    ucd = args.ucd
    files = ["UnicodeData.txt", "PropList.txt", "DerivedCoreProperties.txt",
             "DerivedNormalizationProps.txt", "CaseFolding.txt"]
    for name in files:
        if not os.path.exists(os.path.join(ucd, name)):
            sys.exit(f"gen_unicode_tables: {os.path.join(ucd, name)} is missing (install the unicode-data package)")
    versions = {version_of(os.path.join(ucd, n)) for n in files[1:]}
    if len(versions) != 1:
        sys.exit(f"gen_unicode_tables: UCD files disagree on the version: {sorted(versions)}")
    version = versions.pop()

    gc = [0] * N_CP
    ccc = [0] * N_CP
    decomp = {}  # cp -> list of cps (canonical mappings only)
    range_first = None
    for f in read_lines(os.path.join(ucd, "UnicodeData.txt")):
        cp, name, cat, cc, dm = int(f[0], 16), f[1], f[2], int(f[3]), f[5]
        code = GC_NAMES.index(cat)
        if name.endswith(", First>"):
            range_first = cp
            continue
        if name.endswith(", Last>"):
            for c in range(range_first, cp + 1):
                gc[c] = code
                ccc[c] = cc
            continue
        gc[cp] = code
        ccc[cp] = cc
        if dm and not dm.startswith("<"):
            decomp[cp] = [int(x, 16) for x in dm.split()]

    white = [0] * N_CP
    for f in read_lines(os.path.join(ucd, "PropList.txt")):
        if f[1] == "White_Space":
            a, b = parse_range(f[0])
            for c in range(a, b + 1):
                white[c] = 1
    alpha = [0] * N_CP
    for f in read_lines(os.path.join(ucd, "DerivedCoreProperties.txt")):
        if f[1] == "Alphabetic":
            a, b = parse_range(f[0])
            for c in range(a, b + 1):
                alpha[c] = 1
    exclusion = set()
    nfc_qc = [0] * N_CP
    for f in read_lines(os.path.join(ucd, "DerivedNormalizationProps.txt")):
        a, b = parse_range(f[0])
        if f[1] == "Full_Composition_Exclusion":
            exclusion.update(range(a, b + 1))
        elif f[1] == "NFC_QC" and f[2] in ("N", "M"):
            for c in range(a, b + 1):
                nfc_qc[c] = 1

    # Full canonical decomposition (applied recursively).
    def full(cp):
        if cp not in decomp:
            return [cp]
        return [x for d in decomp[cp] for x in full(d)]
    full_decomp = {cp: full(cp) for cp in sorted(decomp)}

    # Primary composites: canonical decompositions of exactly two code points, not excluded.
    pairs = []
    for cp, d in decomp.items():
        if len(d) == 2 and cp not in exclusion:
            pairs.append((d[0], d[1], cp))
    pairs.sort()

    # Case folding for the contraction letters: every cp whose simple fold is the letter's fold.
    folds = {}
    for f in read_lines(os.path.join(ucd, "CaseFolding.txt")):
        if f[1] in ("C", "S"):
            folds[int(f[0], 16)] = int(f[2], 16)
        elif f[1] == "F":
            target = "".join(chr(int(x, 16)) for x in f[2].split())
            for seq in ("re", "ve", "ll"):
                if target == seq:
                    sys.exit(f"gen_unicode_tables: {f[0]} folds to '{seq}'; the contraction matcher must learn it")
    fold_sets = {}
    for letter in FOLD_LETTERS:
        lc = ord(letter)
        fold_sets[letter] = sorted({lc, ord(letter.upper())} | {c for c, t in folds.items() if t == lc})

    props = [gc[c] | (white[c] << 5) | (alpha[c] << 6) | (nfc_qc[c] << 7) for c in range(N_CP)]
    p1, p2 = two_stage(props, "uint8_t")
    c1, c2 = two_stage(ccc, "uint8_t")

    out = ["// Generated by tools/unicode/gen_unicode_tables.py from the Unicode Character Database " + version + ".",
           "// Do not edit by hand: regenerate with `python3 tools/unicode/gen_unicode_tables.py`.",
           "// clang-format off",
           f'inline constexpr char kUnicodeVersion[] = "{version}";',
           f"inline constexpr unsigned kUnicodeBlockShift = {BLOCK.bit_length() - 1};",
           "// General category codes, in the order of the low 5 bits of kPropStage2.",
           "enum GeneralCategory : std::uint8_t { " + ", ".join(f"k{n} = {i}" for i, n in enumerate(GC_NAMES)) + " };",
           "inline constexpr std::uint8_t kPropCategoryMask = 0x1F, kPropWhiteSpace = 0x20, kPropAlphabetic = 0x40,",
           "                              kPropNfcQcNotYes = 0x80;"]
    emit_array(out, "std::uint16_t", "kPropStage1", p1, 24)
    emit_array(out, "std::uint8_t", "kPropStage2", p2, 32)
    emit_array(out, "std::uint16_t", "kCccStage1", c1, 24)
    emit_array(out, "std::uint8_t", "kCccStage2", c2, 32)
    # Decompositions: index rows (cp, offset, length) into a flat data array.
    data, index = [], []
    for cp, d in full_decomp.items():
        index.append((cp, len(data), len(d)))
        data.extend(d)
    out.append("struct DecompEntry { std::uint32_t cp; std::uint16_t offset; std::uint8_t length; };")
    emit_array(out, "DecompEntry", "kDecompIndex", index, 6, lambda t: "{0x%X, %d, %d}" % t)
    emit_array(out, "std::uint32_t", "kDecompData", data, 12, lambda v: "0x%X" % v)
    out.append("struct ComposePair { std::uint32_t first, second, composite; };")
    emit_array(out, "ComposePair", "kComposePairs", pairs, 4, lambda t: "{0x%X, 0x%X, 0x%X}" % t)
    for letter in FOLD_LETTERS:
        emit_array(out, "std::uint32_t", "kFold" + letter.upper(), fold_sets[letter], 8, lambda v: "0x%X" % v)
    out.append("// clang-format on")
    with open(args.out, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
    print(f"gen_unicode_tables: UCD {version}: {len(p2) // BLOCK} property blocks, {len(c2) // BLOCK} ccc blocks, "
          f"{len(index)} decompositions, {len(pairs)} composition pairs -> {args.out}")


if __name__ == "__main__":
    main()
