# -*- coding: utf-8 -*-
"""Open-vocabulary names for the free-layout generator: company names, person names and invoice
numbers drawn from distributions far too large to memorise, so that a model trained on them has to copy
the name the document prints instead of writing one it has seen in training.

The first model trained on freeform.py's closed lists (a few dozen stems x trades x legal forms per
language) wrote those list names for parties of real invoices that print something else. Here a name is
built from made-up words (syllables with each language's letters), words of the generator's lexicon of
any language, people's names, role words used as names ("Supplier Ltd", "Kunde AG": test and sample
invoices are full of them), placeholder words ("Sample", "Muster", "Minta"), web domains and initials, in
any letter case. Every name produced is made up.

Made-up words alone were not enough: the model learned the syllable inventory and wrote its words for
real names it had to copy. DICT_NAMES of the company names (and half as many surnames) are built from
words of real languages instead (wordlists.py: Debian's word lists), joined as names are: one to three
words, a connective, a hyphen, a legal form or none."""

import bisect
import re

from . import lexicon as LX
from . import wordlists

# Share of company names built from dictionary words. 0 draws nothing, so that corpora built before this
# option existed come out byte-identical (build_corpus.py --dict-names 0).
DICT_NAMES = 0.5
# Share of the dictionary words of names that start with a non-ASCII letter (wordlists.accented), from the
# language's own list where it has one, else from a language that has. 0 draws nothing, so that corpora
# built before this option existed come out byte-identical (build_corpus.py --accent-initial 0).
ACCENT_INITIAL = 0.2
_ACCENT_LANGS = ["hu", "de", "fr", "pl", "es"]
# Share of company names whose first word is a label word of the lexicon (`Total Ltd`, `Summe GmbH`,
# `Érték Kft`) or a dictionary word that starts with one (`Értékesítő Kft`, `Betragsberatung GmbH`). The
# model had learned such words as labels only: with a label word as its name, a party was not copied
# (`Total Ltd` as seller gave a city; `Summe GmbH` a label), and real companies bear such names. 0 draws
# nothing, so that corpora built before this option existed come out byte-identical
# (build_corpus.py --label-names 0).
LABEL_NAMES = 0.1
# Share of those label-word names whose first word only begins like a label word: a dictionary word
# sharing the label's first three or more letters (`Bestia` after `Bestellnummer`, `Adóbér` after
# `Adószám`). Stage 7 copied names that begin with a whole label word but still wrote `Beszerző Kft`,
# `Bestia Kft`, `Adóbér Kft` or `Bruttovár Kft` as labels. 0 draws nothing, so that corpora built before
# this option existed come out byte-identical (build_corpus.py --label-prefix 0).
LABEL_PREFIX = 0.0
_LABEL_STEMS = []
_AND = {"hu": ["és", "és Társa", "és Fia"], "de": ["und", "& Söhne"], "en": ["and", "& Co"], "fr": ["et", "et Cie"],
        "it": ["e", "e Figli"], "es": ["y", "e Hijos"], "nl": ["en", "& Zn."], "pl": ["i", "i Syn"]}

# Syllable material per language: onsets, vowels, codas. Written for this generator.
_SYL = {
    "hu": (["b", "cs", "d", "f", "g", "gy", "h", "k", "l", "m", "n", "ny", "p", "r", "s", "sz", "t", "v", "z", "zs"],
           ["a", "á", "e", "é", "i", "o", "ó", "ö", "ő", "u", "ü", "ű"], ["", "", "n", "r", "l", "s", "k", "t", "ny", "sz"]),
    "de": (["b", "br", "d", "f", "g", "gr", "h", "k", "kl", "l", "m", "n", "p", "r", "s", "sch", "st", "t", "w", "z"],
           ["a", "ä", "e", "ei", "i", "o", "ö", "u", "ü", "au"], ["", "n", "r", "l", "ch", "ck", "ng", "tz", "st", "rg"]),
    "en": (["b", "br", "c", "cr", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "st", "t", "th", "w"],
           ["a", "e", "i", "o", "u", "ea", "oo", "ai"], ["", "n", "r", "l", "ck", "ng", "ss", "ll", "nd", "x"]),
    "fr": (["b", "c", "ch", "d", "f", "g", "j", "l", "m", "n", "p", "r", "s", "t", "v"],
           ["a", "e", "é", "è", "i", "o", "ou", "au", "eau", "u"], ["", "", "n", "r", "l", "s", "x", "t"]),
    "it": (["b", "c", "d", "f", "g", "l", "m", "n", "p", "r", "s", "t", "v", "z", "gl", "sc"],
           ["a", "e", "i", "o", "u"], ["", "", "", "n", "l", "r"]),
    "es": (["b", "c", "d", "f", "g", "j", "l", "ll", "m", "n", "ñ", "p", "r", "s", "t", "v"],
           ["a", "e", "i", "o", "u", "á", "é", "í", "ó", "ue", "ia"], ["", "", "n", "r", "l", "s"]),
    "nl": (["b", "d", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "sch", "t", "v", "w", "z"],
           ["a", "aa", "e", "ee", "i", "ij", "o", "oo", "u", "ui", "oe"], ["", "n", "r", "l", "k", "ck", "rt", "nd"]),
    "pl": (["b", "ch", "cz", "d", "g", "k", "l", "ł", "m", "n", "p", "r", "rz", "s", "sz", "ś", "t", "w", "z", "ż"],
           ["a", "ą", "e", "ę", "i", "o", "ó", "u", "y"], ["", "", "n", "k", "ł", "sz", "r", "ch"]),
}
_FORMS = {
    "hu": ["Kft.", "Kft", "Zrt.", "Bt.", "Nyrt.", "Kkt.", "e.v.", "KFT"],
    "de": ["GmbH", "AG", "GmbH & Co. KG", "KG", "e.K.", "OHG", "UG (haftungsbeschränkt)", "GbR", "SE"],
    "en": ["Ltd", "Ltd.", "Limited", "PLC", "LLP", "Inc.", "LLC", "Corp.", "Corporation", "& Sons", "Group"],
    "fr": ["SARL", "SAS", "SA", "SASU", "EURL", "SNC", "et Fils"],
    "it": ["S.r.l.", "S.p.A.", "S.n.c.", "S.a.s.", "Srl", "SpA"],
    "es": ["S.L.", "S.A.", "S.L.U.", "SL", "SA", "S.Coop."],
    "nl": ["B.V.", "N.V.", "V.O.F.", "BV", "Holding B.V."],
    "pl": ["Sp. z o.o.", "S.A.", "Sp.k.", "Sp. j.", "sp. z o.o."],
}
_PLACEHOLDER = {"hu": ["Minta", "Példa", "Teszt", "Próba"], "de": ["Muster", "Beispiel", "Test", "Demo", "Musterfirma"],
                "en": ["Sample", "Example", "Test", "Demo", "Acme", "Dummy"], "fr": ["Exemple", "Modèle", "Test", "Démo"],
                "it": ["Esempio", "Prova", "Test", "Demo"], "es": ["Ejemplo", "Muestra", "Prueba", "Demo"],
                "nl": ["Voorbeeld", "Test", "Demo", "Proef"], "pl": ["Przykład", "Wzór", "Test", "Demo"]}
_TLD = ["com", "de", "hu", "eu", "io", "net", "fr", "it", "es", "nl", "pl", "co.uk", "org", "shop"]


def _word(rng, lang, syllables=None):
    onsets, vowels, codas = _SYL[lang]
    n = syllables or rng.choice([1, 2, 2, 2, 3, 3, 4])
    w = "".join(rng.choice(onsets) + rng.choice(vowels) + (rng.choice(codas) if k == n - 1 or rng.random() < 0.25 else "")
                for k in range(n))
    if rng.random() < 0.2:
        w = rng.choice(vowels) + w
    return w.capitalize()


def _any_word(rng, lang):
    """A capitalised word: made up (most often), or a stem / trade / street word of any language."""
    r = rng.random()
    if r < 0.6:
        return _word(rng, lang)
    other = rng.choice(LX.LANGS) if rng.random() < 0.3 else lang
    stems, trades, _, streets, _, _, _ = LX.word_lists(other)
    if r < 0.8:
        return rng.choice(stems)
    if r < 0.9:
        return rng.choice(trades)
    street = rng.choice(streets).split()
    return max(street, key=len).capitalize()


def _dict_word(rng, lang):
    """A word of the language's dictionary (a third of the time another language's), mostly capitalised."""
    if ACCENT_INITIAL > 0 and rng.random() < ACCENT_INITIAL:
        pool = wordlists.accented(lang) if lang in _ACCENT_LANGS and rng.random() < 0.7 else []
        w = rng.choice(pool or wordlists.accented(rng.choice(_ACCENT_LANGS)))
    else:
        other = rng.choice(LX.LANGS) if rng.random() < 0.35 else lang
        w = rng.choice(wordlists.words(other))
    r = rng.random()
    if r < 0.78:
        return w[:1].upper() + w[1:]
    return w.upper() if r < 0.9 else w


def _dict_company(rng, lang, form):
    """A company name of dictionary words: 'W form', 'W W form', 'W and W form', 'W-W form', 'W W W form',
    'W trade form', or words without a legal form."""
    w = lambda: _dict_word(rng, lang)  # noqa: E731
    r = rng.random()
    if r < 0.32:
        return "%s %s" % (w(), form)
    if r < 0.52:
        return "%s %s %s" % (w(), w(), form)
    if r < 0.64:
        return "%s %s %s %s" % (w(), rng.choice(_AND[lang]), w(), form)
    if r < 0.70:
        return "%s-%s %s" % (w(), w(), form)
    if r < 0.78:
        return "%s %s %s %s" % (w(), w(), w(), form)
    if r < 0.88:
        return "%s %s %s" % (w(), rng.choice(LX.word_lists(lang)[1]), form)
    return "%s %s" % (w(), w()) if rng.random() < 0.6 else w()


def _label_stems():
    """The words (3+ letters) of every label of the lexicon, every language, sorted."""
    if not _LABEL_STEMS:
        out = set()
        for per_lang in LX.L.values():
            for vals in per_lang.values():
                for v in vals:
                    for w in re.split(r"\W+", v):
                        if len(w) >= 3 and w.isalpha():
                            out.add(w)
        _LABEL_STEMS.extend(sorted(out))
    return _LABEL_STEMS


def _label_word(rng, lang):
    """A label word as a name's first word: as it is, or a dictionary word (of the language, or of any) that
    starts with it (`Érték` -> `Értékesítő`), in the case names have."""
    stem = rng.choice(_label_stems())
    w = stem
    part = LABEL_PREFIX > 0 and len(stem) > 3 and rng.random() < LABEL_PREFIX
    if part:
        stem = stem[:rng.randrange(3, len(stem))]
    if part or rng.random() < 0.5:
        low = stem.lower()
        # a prefix is looked up lower-case and capitalised (German nouns); whole label words lower-case
        # only, as the stage 7 corpora were built
        heads = [low, low[:1].upper() + low[1:]] if part else [low]
        for other in (lang, rng.choice(LX.LANGS)):
            ws = wordlists.words(other)
            cands = []
            for head in heads:
                i = bisect.bisect_left(ws, head)
                while i < len(ws) and ws[i].startswith(head) and len(cands) < 64:
                    if len(ws[i]) > len(head):
                        cands.append(ws[i])
                    i += 1
            if cands:
                w = rng.choice(cands)
                break
    r = rng.random()
    if r < 0.8:
        return w[:1].upper() + w[1:]
    return w.upper() if r < 0.93 else w


def surname(rng, lang):
    if DICT_NAMES > 0 and rng.random() < DICT_NAMES / 2:
        return _dict_word(rng, lang)
    return _word(rng, lang, rng.choice([2, 2, 3]))


def person(rng, lang):
    """A made-up person's name in the language's order (family name first in Hungarian)."""
    first, last = _word(rng, lang, rng.choice([1, 2, 2, 3])), surname(rng, lang)
    if rng.random() < 0.15:
        first = first[0] + "."
    return "%s %s" % (last, first) if lang == "hu" else "%s %s" % (first, last)


def company(rng, lang, role=None):
    """A made-up company name. role ("seller" / "buyer") lets the role words of that side serve as the name,
    as sample and test invoices do."""
    forms = _FORMS[lang] if rng.random() < 0.9 else _FORMS[rng.choice(LX.LANGS)]
    form = rng.choice(forms)
    stems, trades = LX.word_lists(lang)[:2]
    r = rng.random()
    if LABEL_NAMES > 0 and rng.random() < LABEL_NAMES:
        x = rng.random()
        w = _label_word(rng, lang)
        if x < 0.45:
            name = "%s %s" % (w, form)
        elif x < 0.7:
            name = "%s %s %s" % (w, rng.choice(trades), form)
        else:
            more = _dict_word(rng, lang) if DICT_NAMES > 0 else _any_word(rng, lang)
            name = "%s %s %s" % (w, more, form) if x < 0.85 else "%s %s" % (w, more)
    elif DICT_NAMES > 0 and rng.random() < DICT_NAMES:
        name = _dict_company(rng, lang, form)
    elif r < 0.22:
        name = "%s %s" % (_any_word(rng, lang), form)
    elif r < 0.42:
        name = "%s %s %s" % (_any_word(rng, lang), rng.choice(trades) if rng.random() < 0.6 else _any_word(rng, lang), form)
    elif r < 0.50:
        name = "%s %s %s %s" % (_any_word(rng, lang), _any_word(rng, lang), rng.choice(trades), form)
    elif r < 0.58:
        name = "%s & %s %s" % (surname(rng, lang), surname(rng, lang), form)
    elif r < 0.64:
        name = "%s %s" % (person(rng, lang), form)
    elif r < 0.74 and role:
        words = [w for w in LX.L[role][lang] if " " not in w and "/" not in w] or LX.L[role][lang]
        w = rng.choice(words)
        name = "%s %s" % (w, form) if rng.random() < 0.7 else "%s %s %s" % (w, _any_word(rng, lang), form)
    elif r < 0.80:
        name = "%s %s %s" % (rng.choice(_PLACEHOLDER[lang]), rng.choice(trades) if rng.random() < 0.5 else _any_word(rng, lang), form)
    elif r < 0.84:
        name = "%s.%s" % (_word(rng, "en", rng.choice([2, 3])).lower(), rng.choice(_TLD))
    elif r < 0.88:
        letters = "".join(rng.choice("ABCDEFGHIJKLMNOPRSTUVWZ") for _ in range(rng.choice([2, 3, 3, 4])))
        name = "%s %s" % (letters, form) if rng.random() < 0.5 else "%s %s %s" % (letters, rng.choice(trades), form)
    elif r < 0.92:
        name = "%s %s" % (_any_word(rng, lang), _any_word(rng, lang))
    else:
        name = "%s %s %s" % (rng.choice(stems), rng.choice(trades), form)
    if lang == "fr" and rng.random() < 0.25:
        parts = name.rsplit(" ", 1)
        if parts[-1] in _FORMS["fr"]:
            name = "%s %s" % (parts[-1], parts[0])
    if rng.random() < 0.12:
        name = name.upper()
    return name


def invoice_number(rng, lang, year):
    """Invoice numbers of many shapes: prefixes of made-up letters, years, separators, zero-padded runs."""
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    pre = "".join(rng.choice(letters) for _ in range(rng.choice([0, 1, 2, 2, 3, 3, 4])))
    sep = rng.choice(["-", "/", "", "", "_", ".", " "])
    w = rng.choice([3, 4, 5, 6, 6, 7, 8, 9, 10, 12])
    n = rng.randrange(1, 10 ** w)
    num = ("%0*d" % (w, n)) if rng.random() < 0.6 else "%d" % n
    yy = rng.choice(["%d" % year, "%02d" % (year % 100)])
    pats = [pre + sep + num, pre + sep + yy + sep + num, yy + sep + num, num, pre + num,
            "%s%s%s%s%02d%s%s" % (pre, sep, yy, sep, rng.randrange(1, 13), sep, num),
            "%s%s%s%s%s" % (pre, sep, num, sep, "".join(rng.choice(letters) for _ in range(rng.choice([1, 2]))))]
    s = rng.choice(pats).strip("-/._ ")
    return s or num
