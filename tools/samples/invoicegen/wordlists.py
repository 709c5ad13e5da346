# -*- coding: utf-8 -*-
"""Words of real languages for open-vocabulary names: the system word lists Debian ships (packages
wamerican, wngerman, wfrench, witalian, wspanish, wpolish, wdutch, hunspell-hu; tools/setup-tools.sh
installs them).

Names made only of the generator's own syllables taught the model that syllable inventory: it wrote
generator-like words for real names (`Kovył` for `Kovács`, `Cszerző` for `Beszerző`) instead of
copying them. Dictionary words have the spelling of each language, far more of it than any made-up
inventory, so a model can only get them right by reading them from the document."""

import os

# language -> word list files, the first that exists is read (one word a line; hunspell .dic: word/flags)
_FILES = {
    "en": ["/usr/share/dict/american-english", "/usr/share/dict/british-english"],
    "de": ["/usr/share/dict/ngerman"],
    "fr": ["/usr/share/dict/french"],
    "it": ["/usr/share/dict/italian"],
    "es": ["/usr/share/dict/spanish"],
    "pl": ["/usr/share/dict/polish"],
    "nl": ["/usr/share/dict/dutch"],
    "hu": ["/usr/share/hunspell/hu_HU.dic"],
}
# every n-th line only (Polish lists each inflected form: 4.3 million lines)
_STRIDE = {"pl": 8}
_CACHE = {}


def words(lang):
    """The language's words of 3 to 14 letters (letters only, as listed: case kept), sorted and without
    repeats, so that a draw depends on the seed alone. Raises RuntimeError naming the packages if the
    list is not installed."""
    if lang in _CACHE:
        return _CACHE[lang]
    path = next((p for p in _FILES[lang] if os.path.exists(p)), None)
    if path is None:
        raise RuntimeError("no word list for %r (%s): run tools/setup-tools.sh" % (lang, " or ".join(_FILES[lang])))
    out = set()
    with open(path, encoding="utf-8", errors="replace") as f:
        for i, line in enumerate(f):
            if i % _STRIDE.get(lang, 1):
                continue
            w = line.split("/", 1)[0].split("\t", 1)[0].strip()
            if path.endswith(".dic") and i == 0 and w.isdigit():
                continue  # hunspell: the first line counts the words
            if 3 <= len(w) <= 14 and w.isalpha():
                out.add(w)
    _CACHE[lang] = sorted(out)
    return _CACHE[lang]


_ACCENTED = {}


def accented(lang):
    """The language's words whose first letter is not ASCII (`Értékes`, `Übung`, `école`, `śruba`): names
    that start with such a letter are rare among dictionary draws (about 5% of Hungarian words), and a
    model that has seen few of them cannot start copying one. Empty for a language with none."""
    if lang not in _ACCENTED:
        _ACCENTED[lang] = [w for w in words(lang) if ord(w[0]) > 127]
    return _ACCENTED[lang]
