# -*- coding: utf-8 -*-
"""Free-layout invoices for training data: every document draws its own layout instead of picking
one of a few fixed variants.

    sample = generate(seed, language, fmt)     # language in lexicon.LANGS, fmt in pdf / html / txt

returns a Sample (see __init__.py) whose `expected` is the invoice JSON of
schemas/invoice.schema.json (values the document does not print are null) and whose `printed` maps
JSON pointers to the exact strings printed. What one document draws:

  - label words: one synonym per key from lexicon.L, in its own case (as is / UPPER / Title) and
    with its own separator (':', ' :', none, '#');
  - label/value placement per block: 'Label: value', label left with values in a column (in WIDE_GAPS of
    the documents a far column), label above value, a one-row table whose header holds the labels;
  - header arrangement: seller letterhead + buyer below, seller and buyer side by side (their text
    lines interleave when extracted), meta block beside the parties, seller only in the footer;
    party lines bare or labelled ('Name: ...', 'Address: ...'); the document facts (number, dates,
    references) below the parties or, in META_FIRST of the documents, above them, the parties then
    under role headers;
  - names: 80% of the parties and 60% of the invoice numbers from names.py's open vocabulary (made-up
    words, dictionary words of eight languages, role and placeholder words as names, people, domains,
    initials), so names are copied, not recalled;
  - totals: label/value lines, a VAT summary closed by a sum row (sometimes the only place the totals
    are printed), home-currency equivalents and the exchange rate beside a foreign-currency invoice;
    credit notes with negative amounts or positive ones;
  - item table: columns shuffled within customary limits, renamed, extra columns (item code, tax
    code) added, unit / unit price / VAT rate / quantity dropped (-> null), table drawn as fixed-width
    columns, pipes, tabs, single spaces (merged columns) or one block per item; long tables broken
    over pages with or without a repeated header and a carried-forward line; in FORM_ITEMS of the
    documents each item printed as a small form (labels in a row, values below, the same label words
    as the summary grid that then carries the totals), maybe with each amount row again in the home
    currency;
  - noise: letterhead tagline and contacts, customer number, delivery note, contact person, terms,
    bank block, registration footer, page numbers;
  - number format (thousands ' ', '.', ',', "'", none; decimal ',' or '.'), date format (13 forms,
    numeric and with month names), currency display (code / symbol before or after / none), the
    currency itself (EUR, HUF, GBP, USD, PLN, CHF, CZK, SEK);
  - absent facts: due date, delivery date, tax ids, VAT ids, buyer address, IBAN, BIC, order
    reference may be left out; the expected JSON then holds null;
  - scanned-text artefacts (text output): doubled spaces, labels broken over two lines,
    hyphenated noise words, letters confused in noise text, long descriptions wrapped.

The invoice itself (parties, lines, VAT, totals) uses model.Invoice, so the arithmetic is the one
of the fixed-layout generator."""
import datetime as dt
import io
import os
import random
from decimal import Decimal, ROUND_HALF_UP
from html import escape as E

from . import data, ids, lexicon as LX, model, names

FORMATS = ("pdf", "html", "txt")
# Share of documents whose party lines carry labels ("Name: ...", "Address: ..."). Kept here so that a
# corpus stressing them can raise it (build_corpus.py --party-labels).
PARTY_LABELS = 0.3
# Share of documents that print the document facts (number, dates, references) above the parties, as
# many real invoices and data reports do, instead of below them. 0 draws nothing, so that corpora built
# before this choice existed come out byte-identical (build_corpus.py --meta-first 0).
META_FIRST = 0.35
# Share of documents that print each item as a small form (its fields' labels in a row, the values in the
# row below, a few fields a row, the line number and description above) and the totals only in a summary
# grid whose columns carry the same label words as the items' (the first "Net amount" under the title is
# then a line's, the invoice's is in the grid's sum row), as data reports and many ERP layouts do. 0 draws
# nothing, so that corpora built before this choice existed come out byte-identical
# (build_corpus.py --form-items 0).
FORM_ITEMS = 0.15
# Share of documents whose label: value blocks (facts, totals, bank) set the values in a far column, so that
# a label and its value are tens of spaces apart in the extracted text (as pages rendered from structured
# data, and many forms, are). 0 draws nothing, so that corpora built before this choice existed come out
# byte-identical (build_corpus.py --wide-gaps 0). Not used by a trained stage yet.
WIDE_GAPS = 0.0


# --- numbers, dates, money -------------------------------------------------------------------------

class Style:
    def __init__(self, rng, lang, currency):
        customary = {"hu": [(" ", ","), (".", ",")], "de": [(".", ","), ("", ",")], "en": [(",", "."), ("", ".")],
                     "fr": [(" ", ","), (".", ",")], "it": [(".", ","), ("", ",")], "es": [(".", ","), ("", ",")],
                     "nl": [(".", ","), ("", ",")], "pl": [(" ", ","), ("", ",")]}
        if rng.random() < 0.7:
            self.thousands, self.decimal = rng.choice(customary[lang])
        else:
            self.thousands, self.decimal = rng.choice([(" ", ","), (".", ","), (",", "."), ("", "."), ("", ","),
                                                       ("'", "."), (" ", "."), ("\u00a0", ",")])
        if self.thousands == "\u00a0":
            self.thousands = " "
        forms = ["dmy_dots", "dmy_slash", "dmy_dash", "iso", "ymd_dots", "ymd_slash", "d_month_y", "d_mon_y",
                 "dmy_dots_short"]
        home = {"hu": ["ymd_dots_sp", "ymd_dots", "y_month_d", "iso"], "de": ["dmy_dots", "d_dot_month_y"],
                "en": ["d_month_y", "month_d_y", "dmy_slash", "d_mon_y"], "fr": ["dmy_slash", "d_month_y"],
                "it": ["dmy_slash", "dmy_dash", "d_month_y"], "es": ["dmy_slash", "d_de_month_de_y"],
                "nl": ["dmy_dash", "d_month_y"], "pl": ["dmy_dots", "iso", "d_month_y"]}[lang]
        if currency == "USD" and lang == "en":
            home = home + ["mdy_slash", "month_d_y"]
        self.date_form = rng.choice(home) if rng.random() < 0.7 else rng.choice(forms)
        self.lang = lang
        self.currency = currency
        self.display = rng.choice(["code_after", "code_after", "code_before", "symbol_after", "symbol_before", "none", "none"])
        self.huf_decimals = rng.random() < 0.3
        self.rate_form = rng.choice(["{r}%", "{r} %", "{r}", "{r},00%" if self.decimal == "," else "{r}.00%"])

    def places(self):
        return 0 if self.currency == "HUF" and not self.huf_decimals else 2

    def number(self, x, places):
        neg = x < 0
        q = abs(x).quantize(Decimal(1).scaleb(-places)) if places else abs(x).quantize(Decimal(1))
        whole, _, frac = "{:f}".format(q).partition(".")
        groups = []
        while len(whole) > 3:
            groups.insert(0, whole[-3:])
            whole = whole[:-3]
        groups.insert(0, whole)
        out = self.thousands.join(groups)
        if places:
            out += self.decimal + frac
        return ("-" if neg else "") + out

    def amount(self, x):
        return self.number(x, self.places())

    def money(self, x):
        a = self.amount(x)
        c = self.currency
        sym = LX.SYMBOL[c]
        d = self.display
        if d == "code_after":
            return "%s %s" % (a, c)
        if d == "code_before":
            return "%s %s" % (c, a)
        if d == "symbol_before" and c in ("USD", "GBP", "EUR"):
            return ("%s%s" if c != "EUR" else "%s %s") % (sym, a)
        if d in ("symbol_after", "symbol_before"):
            return "%s %s" % (a, sym)
        return a

    def quantity(self, q):
        if q == q.to_integral_value():
            return "%d" % q
        return self.number(q, 1 if (q * 10) == (q * 10).to_integral_value() else 2)

    def rate(self, r):
        s = "%d" % r if r == r.to_integral_value() else ("%s" % r.normalize()).replace(".", self.decimal)
        if "00" in self.rate_form and r != r.to_integral_value():
            return s + "%"
        return self.rate_form.format(r=s)

    def date(self, d):
        months = LX.MONTHS.get(self.lang) or data.MONTHS[self.lang]
        f = self.date_form
        if f == "dmy_dots":
            return "%02d.%02d.%04d" % (d.day, d.month, d.year)
        if f == "dmy_dots_short":
            return "%d.%d.%04d" % (d.day, d.month, d.year)
        if f == "dmy_slash":
            return "%02d/%02d/%04d" % (d.day, d.month, d.year)
        if f == "mdy_slash":
            return "%02d/%02d/%04d" % (d.month, d.day, d.year)
        if f == "dmy_dash":
            return "%02d-%02d-%04d" % (d.day, d.month, d.year)
        if f == "iso":
            return d.isoformat()
        if f == "ymd_dots":
            return "%04d.%02d.%02d." % (d.year, d.month, d.day)
        if f == "ymd_dots_sp":
            return "%04d. %02d. %02d." % (d.year, d.month, d.day)
        if f == "ymd_slash":
            return "%04d/%02d/%02d" % (d.year, d.month, d.day)
        if f == "y_month_d":
            return "%04d. %s %d." % (d.year, months[d.month - 1], d.day)
        if f == "d_month_y":
            return "%d %s %04d" % (d.day, months[d.month - 1], d.year)
        if f == "d_dot_month_y":
            return "%d. %s %04d" % (d.day, months[d.month - 1], d.year)
        if f == "d_de_month_de_y":
            return "%d de %s de %04d" % (d.day, months[d.month - 1], d.year)
        if f == "month_d_y":
            return "%s %d, %04d" % (data.MONTHS["en"][d.month - 1], d.day, d.year)
        if f == "d_mon_y":
            m = months[d.month - 1]
            return "%d %s %04d" % (d.day, m[:3].capitalize() + ("." if len(m) > 4 and self.lang != "en" else ""), d.year)
        raise KeyError(f)


# --- the invoice -------------------------------------------------------------------------------------

_lists = LX.word_lists


def _iban(rng, country):
    if country in ("HU", "DE", "FR", "GB"):
        return ids.iban(rng, country)
    if country == "IT":
        bban = rng.choice("ABCDEFGHIJKLMNOPRSTUVWXYZ") + ids.digits(rng, 22)
    elif country == "ES":
        bban = ids.digits(rng, 20)
    elif country == "NL":
        bban = rng.choice(["ABNA", "INGB", "RABO", "SNSB", "TRIO"]) + ids.digits(rng, 10)
    else:
        bban = ids.digits(rng, 24)
    return country + ids.iban_check_digits(country, bban) + bban


BICS = {"HU": ["OTPVHUHB", "GIBAHUHB", "OKHBHUHB"], "DE": ["COBADEFFXXX", "DEUTDEFFXXX", "GENODEF1S10"],
        "FR": ["BNPAFRPPXXX", "SOGEFRPPXXX"], "GB": ["BARCGB22", "NWBKGB2L", "LOYDGB2L"], "IT": ["BCITITMM", "UNCRITMM", "BPMOIT22XXX"],
        "ES": ["CAIXESBBXXX", "BSCHESMM", "BBVAESMM"], "NL": ["ABNANL2A", "INGBNL2A", "RABONL2U"], "PL": ["PKOPPLPW", "BPKOPLPW", "INGBPLPW"]}


def make_party(rng, lang, role=None):
    stems, trades, forms, streets, cities, _, _ = _lists(lang)
    stem, trade, form = rng.choice(stems), rng.choice(trades), rng.choice(forms)
    if rng.random() < 0.8:  # open vocabulary (names.py): the name must be read, not recalled
        name = names.person(rng, lang) if role == "buyer" and rng.random() < 0.08 else names.company(rng, lang, role)
    elif lang == "fr" and rng.random() < 0.4:
        name = "%s %s %s" % (form, stem, trade)
    elif rng.random() < 0.12:
        name = "%s %s" % (stem, form)
    elif rng.random() < 0.1:
        name = "%s & %s %s" % (stem, rng.choice(stems), form)
    else:
        name = "%s %s %s" % (stem, trade, form)
    street = rng.choice(streets)
    no = rng.randrange(1, 180)
    if lang in ("en", "fr"):
        street = "%d %s" % (no, street) if lang == "en" or rng.random() < 0.8 else "%d, %s" % (no, street)
    elif lang == "hu":
        street = "%s %d." % (street, no)
    elif lang == "es":
        street = "%s, %d" % (street, no) if rng.random() < 0.7 else "%s %d, %dº" % (street, no, rng.randrange(1, 9))
    elif lang == "it":
        street = "%s, %d" % (street, no) if rng.random() < 0.7 else "%s %d" % (street, no)
    elif lang == "pl":
        street = "%s %d" % (street, no) + ("/%d" % rng.randrange(1, 40) if rng.random() < 0.4 else "")
    else:
        street = "%s %d" % (street, no)
    pc, city = rng.choice(cities)
    country = LX.COUNTRY[lang]
    p = model.Party(name=name, street=street, postal_code=pc, city=city, country=country)
    if country == "HU":
        p.tax_id, p.vat_id = ids.hu_tax_number(rng)
        if rng.random() < 0.5:
            p.vat_id = None
        p.account, p.iban = ids.hu_account(rng)
    elif country == "DE":
        st, vat = ids.de_ids(rng)
        p.tax_id = st if rng.random() < 0.5 else None
        p.vat_id = vat if (p.tax_id is None or rng.random() < 0.5) else None
    elif country == "FR":
        siren, p.vat_id = ids.fr_ids(rng)
        p.extra = "SIREN %s" % siren
    elif country == "GB":
        p.vat_id = ids.gb_vat(rng)
    elif country == "IT":
        piva = ids.digits(rng, 11)
        p.vat_id = "IT" + piva
        if rng.random() < 0.4:
            p.tax_id = piva
    elif country == "ES":
        nif = rng.choice("ABBBBCDEFGH") + ids.digits(rng, 8)
        p.tax_id = nif
        if rng.random() < 0.5:
            p.vat_id = "ES" + nif
    elif country == "NL":
        p.vat_id = "NL%s%sB%02d" % (ids.digits(rng, 9), "", rng.randrange(1, 20))
        p.extra = "KvK %s" % ids.digits(rng, 8)
    else:
        nip = ids.digits(rng, 10)
        p.tax_id = "%s-%s-%s-%s" % (nip[:3], nip[3:6], nip[6:8], nip[8:]) if rng.random() < 0.6 else nip
        if rng.random() < 0.4:
            p.vat_id = "PL" + nip
    if not p.iban:
        p.iban = _iban(rng, country)
    p.bic = rng.choice(BICS[country])
    return p


def invoice_number(rng, lang, year):
    if rng.random() < 0.6:
        return names.invoice_number(rng, lang, year)
    n = rng.randrange(1, 99999)
    pre = rng.choice(["", "", "INV", "RE", "FA", "F", "SZ", "FV", "FT", "R", "A", "2%d" % rng.randrange(10),
                      {"hu": "SZLA", "de": "RG", "en": "IN", "fr": "FAC", "it": "FT", "es": "FRA", "nl": "FACT", "pl": "FV"}[lang]])
    sep = rng.choice(["-", "/", "", "-", "/", "."])
    yy = rng.choice(["%d" % year, "%02d" % (year % 100)])
    w = rng.choice([3, 4, 5, 6])
    num = "%0*d" % (w, n % (10 ** w))
    pats = [pre + sep + yy + sep + num, pre + sep + num, num + "/" + yy, pre + num, yy + num,
            "%s/%s/%02d/%s" % (pre or "FV", num, rng.randrange(1, 13), year), "%s%s-%s" % (pre, yy, num)]
    s = rng.choice(pats).strip("-/.")
    return s or num


def build(rng, lang):
    country = LX.COUNTRY[lang]
    regime = rng.choice(["standard"] * 6 + ["mixed", "mixed", "reverse_charge", "exempt"])
    doc_type = "credit_note" if rng.random() < 0.1 else "invoice"
    currency = LX.HOME_CURRENCY[lang] if rng.random() < 0.75 else rng.choice(list(LX.CURRENCY_RATE))
    seller = make_party(rng, lang, "seller")
    foreign = regime == "reverse_charge" or rng.random() < 0.15
    buyer_lang = rng.choice([l for l in LX.LANGS if LX.COUNTRY[l] != country]) if foreign else lang
    buyer = make_party(rng, buyer_lang, "buyer")
    if regime == "reverse_charge":
        if not seller.vat_id:
            seller.vat_id = {"HU": "HU" + (seller.tax_id or "12345678")[:8]}.get(country, country + ids.digits(rng, 9))
        if not buyer.vat_id:
            buyer.vat_id = LX.COUNTRY[buyer_lang] + ids.digits(rng, 9)
    year = rng.randrange(2016, 2027)
    issue = dt.date(year, 1, 1) + dt.timedelta(days=rng.randrange(0, 364))
    delivery = issue - dt.timedelta(days=rng.choice([0, 0, 0, 1, 2, 3, 7, 14]))
    means = rng.choice(["transfer"] * 8 + ["card", "cash"])
    due = issue + dt.timedelta(days=rng.choice([0, 7, 8, 10, 14, 15, 21, 30, 30, 45, 60, 90])) if means == "transfer" else issue
    n_lines = rng.choice([1, 1, 2, 2, 3, 3, 4, 5, 6, 7, 8, 10, 12])
    if rng.random() < 0.08:
        n_lines = rng.randrange(14, 30)
    line_vat = rng.random() < 0.4
    use_discount = rng.random() < 0.15
    rates = [Decimal(r) for r in LX.STANDARD_RATES[country]]
    scale = Decimal(LX.CURRENCY_RATE[currency])
    _, _, _, _, _, items, units = _lists(lang)
    pool = list(items)
    lines = []
    for i in range(n_lines):
        desc, unit_key, (lo, hi), frac = pool.pop(rng.randrange(len(pool))) if pool else rng.choice(items)
        if not pool and i >= len(items):
            desc = "%s %s" % (desc, rng.choice(["(%d)" % (i + 1), "- %s" % ids.digits(rng, 4), "#%d" % (i + 1)]))
        unit = rng.choice(units[unit_key])
        quantity = Decimal(rng.randrange(1, 80)) / 2 if frac else Decimal(rng.choice([1, 1, 1, 2, 3, 4, 5, 6, 10, 12, 20, 25, 50, 100]))
        if lang == "pl" and currency == "PLN":
            price = Decimal(rng.uniform(lo, hi))
        else:
            price = Decimal(rng.uniform(lo, hi)) * scale
        price = model.rnd(price, currency) if currency != "HUF" else (price / 10).quantize(Decimal(1), rounding=ROUND_HALF_UP) * 10
        if price <= 0:
            price = Decimal(1)
        discount = Decimal(rng.choice([5, 10, 15, 20])) if use_discount and i % 2 == 0 else None
        net = model.rnd(quantity * price * (100 - (discount or 0)) / 100, currency)
        if regime == "reverse_charge":
            cat, rate = "AE", Decimal(0)
        elif regime == "exempt":
            cat, rate = "E", None
        elif regime == "mixed":
            cat, rate = "S", rates[0] if i % 3 != 1 else rates[-1]
        else:
            cat, rate = "S", rates[0]
        vat = model.rnd(net * rate / 100, currency) if cat == "S" else model.rnd(Decimal(0), currency)
        lines.append(model.LineItem(desc, unit_key, unit, quantity, price, discount, net, cat, rate, vat))
    if doc_type == "credit_note" and rng.random() < 0.6:  # a corrective invoice printing negative amounts
        for li in lines:
            li.quantity, li.net, li.vat = -li.quantity, -li.net, -li.vat
    inv = model.Invoice(lang=lang, doc_type=doc_type, number=invoice_number(rng, lang, year), issue=issue,
                        delivery=delivery, due=due, currency=currency, seller=seller, buyer=buyer, lines=lines,
                        regime=regime, line_vat=line_vat, payment_means=means)
    if rng.random() < 0.3:
        inv.order_reference = rng.choice(["PO-", "PO", "BE-", "", "ORD-", "B"]) + ids.digits(rng, rng.choice([4, 5, 6, 7]))
    if doc_type == "credit_note":
        inv.preceding_invoice = invoice_number(rng, lang, year)
    if country == "HU":
        if rng.random() < 0.5:
            seller.iban = None
        else:
            seller.account = None
    inv.compute()
    return inv


# --- the layout: a document as pages of blocks -------------------------------------------------------
# Block kinds: ("line", text, align) align in l/c/r; ("blank",); ("cols", [lines], [lines], ...);
# ("kv", [(label, value)], mode) mode in colon/left/above/table, or ("kv", [(label, value)], "grid", slot): labels
# in a row and values below them, in columns of a fixed slot width (characters); ("table", header|None, rows, right_flags,
# style) style in grid/pipes/tabs/merged/blocks; ("para", text).

class Draw:
    """The per-document layout choices."""

    def __init__(self, rng, lang):
        self.rng = rng
        self.lang = lang
        self.case = rng.choice(["as", "as", "as", "upper", "title"])
        self.sep = rng.choice([":", ":", ":", "", " :" if lang == "fr" else ":", "#" if rng.random() < 0.2 else ":"])
        self.labels = {}
        # party lines labelled ("Name: ...", "Address: ...") or bare
        self.party_labels = rng.random() < PARTY_LABELS

    def colon(self):
        return self.sep if self.sep and self.sep != "#" else ""

    def label(self, key, sep=True):
        if key not in self.labels:
            self.labels[key] = self.rng.choice(LX.L[key][self.lang])
        s = self.labels[key]
        if self.case == "upper":
            s = s.upper()
        elif self.case == "title" and s[:1].islower():
            s = s[:1].upper() + s[1:]
        if sep and self.sep and self.sep != "#" and not s.endswith(":"):
            s += self.sep
        return s


def party_lines(p, lay, st, show):
    if lay.party_labels:  # "Name: ...", "Address: street, postal code city"
        out = ["%s %s" % (lay.label("party_name"), p.name)]
        if show["address"]:
            town = "%s %s" % (p.postal_code, p.city)
            if p.country != LX.COUNTRY[lay.lang] or lay.rng.random() < 0.3:
                town = "%s-%s" % (p.country, town) if lay.rng.random() < 0.3 else "%s %s" % (p.country, town)
            if lay.rng.random() < 0.6:
                out.append("%s %s, %s" % (lay.label("address"), town, p.street) if lay.lang == "hu" and lay.rng.random() < 0.5
                           else "%s %s, %s" % (lay.label("address"), p.street, town))
            else:
                out += ["%s %s" % (lay.label("address"), p.street), town]
        if p.tax_id and show["tax_id"]:
            out.insert(lay.rng.choice([0, len(out)]), "%s %s" % (lay.label("tax_id"), p.tax_id))
        if p.vat_id and show["vat_id"]:
            out.append("%s %s" % (lay.label("vat_id"), p.vat_id))
        return out
    out = [p.name]
    if show["address"]:
        out.append(p.street)
        out.append("%s %s" % (p.postal_code, p.city) if lay.lang not in ("en",) or lay.rng.random() < 0.2 else "%s %s" % (p.city, p.postal_code))
        if p.country != LX.COUNTRY[lay.lang] or lay.rng.random() < 0.15:
            out.append(LX.COUNTRY_NAMES[p.country][lay.lang])
    if p.tax_id and show["tax_id"]:
        out.append("%s %s" % (lay.label("tax_id"), p.tax_id))
    if p.vat_id and show["vat_id"]:
        out.append("%s %s" % (lay.label("vat_id"), p.vat_id))
    if p.extra and lay.rng.random() < 0.6:
        out.append(p.extra)
    return out


def render_blocks(inv, rng):
    """The invoice as pages of blocks, and what it prints: (pages, expected, printed, features)."""
    lang = inv.lang
    lay = Draw(rng, lang)
    st = Style(rng, lang, inv.currency)
    # the home currency, the invoice currency's rate in it, and an amount converted (printed as a distractor)
    home = LX.HOME_CURRENCY[lang]
    fx = Decimal(LX.CURRENCY_RATE[home]) / Decimal(LX.CURRENCY_RATE[inv.currency])
    hp = 0 if home == "HUF" else 2

    def conv(x):
        return "%s %s" % (st.number(x * fx, hp), home)
    features = ["free", inv.doc_type, inv.regime, inv.currency]
    # which facts are printed
    show_s = {"address": True, "tax_id": rng.random() < 0.92, "vat_id": rng.random() < 0.9}
    show_b = {"address": rng.random() < 0.93, "tax_id": rng.random() < 0.85, "vat_id": rng.random() < 0.85}
    show = {"due": inv.payment_means == "transfer" and rng.random() < 0.85, "delivery": rng.random() < 0.55,
            "iban": inv.payment_means == "transfer" and rng.random() < 0.9, "bic": rng.random() < 0.6,
            "order": rng.random() < 0.9, "breakdown": rng.random() < 0.45, "vat_total": rng.random() < 0.95,
            "net_total": rng.random() < 0.93}
    if inv.regime == "mixed":
        show["breakdown"] = rng.random() < 0.7
    if inv.payment_means != "transfer":
        show["bic"] = False
    title = lay.label("credit_note" if inv.doc_type == "credit_note" else "invoice", sep=False)

    party_s = party_lines(inv.seller, lay, st, show_s)
    party_b = party_lines(inv.buyer, lay, st, show_b)
    if rng.random() < 0.25:  # contact line inside the buyer block
        party_b.insert(1, "%s %s" % (lay.label("contact"), rng.choice(LX.PEOPLE[lang])))

    meta = [(lay.label("invoice_number"), inv.number), (lay.label("issue_date"), st.date(inv.issue))]
    if show["delivery"]:
        meta.append((lay.label("delivery_date"), st.date(inv.delivery)))
    if show["due"]:
        meta.append((lay.label("due_date"), st.date(inv.due)))
    noise_meta = []
    if rng.random() < 0.4:
        noise_meta.append((lay.label("customer_no"), "%s%s" % (rng.choice(["K", "C", "", "D-"]), ids.digits(rng, rng.choice([4, 5, 6])))))
    if rng.random() < 0.25:
        noise_meta.append((lay.label("delivery_note"), "%s%s" % (rng.choice(["LS", "DN", "", "WZ/"]), ids.digits(rng, 6))))
    if inv.order_reference and show["order"]:
        meta.append((lay.label("order_reference"), inv.order_reference))
    if inv.preceding_invoice:
        meta.append((lay.label("preceding_invoice"), inv.preceding_invoice))
    means_printed = rng.random() < 0.5
    if means_printed:
        meta.append((lay.label("payment_means"), rng.choice(LX.MEANS[inv.payment_means][lang])))
    if rng.random() < 0.3:
        meta.append((lay.label("currency"), inv.currency))
    meta += noise_meta
    head = meta[:2]
    rest = meta[2:]
    rng.shuffle(rest)
    meta = head + rest if rng.random() < 0.7 else rest[:1] + head + rest[1:]

    blocks = []
    # letterhead noise
    if rng.random() < 0.5:
        blocks.append(("line", rng.choice(LX.TAGLINES[lang]), rng.choice("lcr")))
    contacts = "%s +%d %s %s  %s info@%s.example" % (lay.label("phone", False), rng.randrange(30, 49), ids.digits(rng, 2), ids.digits(rng, 7),
                                                   lay.label("email", False), inv.seller.name.split()[0].lower().replace("'", ""))
    arrangement = rng.choice(["stack", "side", "side", "meta_right", "footer_seller"])
    if lay.party_labels and rng.random() < 0.5:  # labelled parties are most often printed side by side
        arrangement = "side"
    kv_mode = rng.choice(["colon", "colon", "left", "above", "table"])
    wide = WIDE_GAPS > 0 and rng.random() < WIDE_GAPS
    if wide:
        kv_mode = "left"
        wide_at = rng.uniform(0.4, 0.75)  # where the values start, as a share of the line

    def kv(items, mode):
        return ("kv", items, mode, wide_at) if wide and mode == "left" else ("kv", items, mode)
    title_pos = rng.choice(["top", "top", "after_parties"])
    sl, bl = lay.label("seller", False), lay.label("buyer", False)
    seller_labelled = rng.random() < 0.6
    if title_pos == "top":
        blocks.append(("line", title if rng.random() < 0.6 else "%s %s" % (title, inv.number), rng.choice("lcl")))
        if title.endswith((" Nr.", " n°", " n.", " n.º", " nr")) or not blocks[-1][1] == title:
            pass
        blocks.append(("blank",))
    # the document facts above the parties: then the parties come under role headers ("Seller" / "Buyer"),
    # the first lines of the page are no party's
    meta_first = META_FIRST > 0 and rng.random() < META_FIRST
    if meta_first:
        if arrangement in ("meta_right", "footer_seller"):
            arrangement = "side" if lay.party_labels or arrangement == "meta_right" else "stack"
        seller_labelled = seller_labelled or lay.party_labels or rng.random() < 0.5
        blocks.append(kv(meta, kv_mode))
        blocks.append(("blank",))
    if arrangement == "stack":
        blocks.append(("line", sl if seller_labelled else party_s[0], "l"))
        blocks += [("line", x, "l") for x in (party_s if seller_labelled else party_s[1:])]
        if rng.random() < 0.5:
            blocks.append(("line", contacts, "l"))
        blocks.append(("blank",))
        blocks.append(("line", bl, "l"))
        blocks += [("line", x, "l") for x in party_b]
        if not meta_first:
            blocks.append(("blank",))
            blocks.append(kv(meta, kv_mode))
    elif arrangement == "side":
        left = ([sl] if seller_labelled else []) + party_s
        right = [bl] + party_b
        if rng.random() < 0.5:
            left, right = right, left
        blocks.append(("cols", left, right))
        if not meta_first:
            blocks.append(("blank",))
            blocks.append(kv(meta, kv_mode))
    elif arrangement == "meta_right":
        blocks += [("line", x, "l") for x in party_s]
        if rng.random() < 0.6:
            blocks.append(("line", contacts, "l"))
        blocks.append(("blank",))
        mlines = ["%s %s" % (k, v) for k, v in meta]
        blocks.append(("cols", [bl] + party_b, mlines))
    else:  # seller only in the footer (and maybe as a short letterhead)
        blocks.append(("line", inv.seller.name, "l"))
        blocks.append(("cols", [bl] + party_b, ["%s %s" % (k, v) for k, v in meta]))
    if title_pos == "after_parties":
        blocks.append(("blank",))
        blocks.append(("line", title, "l"))
    blocks.append(("blank",))

    # --- item table
    cols = ["description", "quantity", "unit", "unit_price"]
    if any(li.discount for li in inv.lines):
        cols.append("discount")
    cols += ["net_amount", "vat_rate"]
    if inv.line_vat:
        cols.append("vat_amount")
        if rng.random() < 0.5:
            cols.append("gross_amount")
    dropped = set()
    for c, p in (("unit", 0.25), ("unit_price", 0.12), ("vat_rate", 0.2), ("quantity", 0.06)):
        if rng.random() < p and not (c == "vat_rate" and inv.regime == "mixed" and not show["breakdown"]):
            cols.remove(c)
            dropped.add(c)
    if "unit" in cols and "quantity" in cols and rng.random() < 0.3:  # "3 db" in one cell
        cols.remove("unit")
        dropped.add("unit_joined")
    if rng.random() < 0.3:
        cols.insert(0, "no")
    if rng.random() < 0.2:
        cols.insert(1 if cols[0] == "no" else 0, "sku")
    if rng.random() < 0.1:
        cols.insert(len(cols) - 1, "vat_code")
    if rng.random() < 0.3 and "vat_rate" in cols:
        cols.remove("vat_rate")
        cols.insert(cols.index("net_amount"), "vat_rate")
    if rng.random() < 0.12:  # any order of the columns after the description
        k = cols.index("description") + 1
        tail_cols = cols[k:]
        rng.shuffle(tail_cols)
        cols = cols[:k] + tail_cols
    if rng.random() < 0.15 and "unit" in cols:
        cols.remove("unit")
        cols.insert(cols.index("quantity") if "quantity" in cols else 1, "unit")
    skus = {i: "%s%s" % (rng.choice(["", "A", "P-", "ART"]), ids.digits(rng, rng.choice([4, 5, 6]))) for i in range(len(inv.lines))}
    vcodes = {i: rng.choice(["S", "A", "1", "V1", "B"]) for i in range(len(inv.lines))}

    def cell(li, c, i):
        if c == "no":
            return "%d" % (i + 1) + ("." if lang in ("hu", "pl") and rng.random() < 0.3 else "")
        if c == "sku":
            return skus[i]
        if c == "vat_code":
            return vcodes[i]
        if c == "description":
            return li.description
        if c == "quantity":
            q = st.quantity(li.quantity)
            return "%s %s" % (q, li.unit) if "unit_joined" in dropped else q
        if c == "unit":
            return li.unit
        if c == "unit_price":
            return st.amount(li.unit_price)
        if c == "discount":
            return st.rate(li.discount) if li.discount else ""
        if c == "net_amount":
            return st.amount(li.net)
        if c == "vat_rate":
            if li.category == "E":
                return lay.label("exempt", False)
            if li.category == "AE":
                return rng.choice([st.rate(Decimal(0)), lay.label("reverse_charge", False)])
            return st.rate(li.rate)
        if c == "vat_amount":
            return st.amount(li.vat)
        if c == "gross_amount":
            return st.amount(li.net + li.vat)
        raise KeyError(c)

    def form_item(i):
        """Line i as a form: its number, its description, then label rows with the values below."""
        li = inv.lines[i]
        out = []
        if "no" in cols or rng.random() < 0.5:
            out.append(("kv", [(fc(lay.label("no", False)), "%d" % (i + 1))], "colon"))
        fields = [(c, fc(header[j]), cell(li, c, i)) for j, c in enumerate(cols) if c != "no"]
        desc = [(h, v) for c, h, v in fields if c == "description" and v]
        rest = [(h, v) for c, h, v in fields if c != "description" and v]
        if desc:
            out.append(("kv", desc, "grid", form_slot))
        for s in range(0, len(rest), form_per_row):
            out.append(("kv", rest[s:s + form_per_row], "grid", form_slot))
        if form_home:
            amounts = [(c, x) for c, x in (("unit_price", li.unit_price), ("net_amount", li.net), ("vat_amount", li.vat),
                                           ("gross_amount", li.net + li.vat)) if c in cols]
            if amounts:
                out.append(("kv", [(fc("%s %s" % (header[cols.index(c)], lay.label("in_home", False))),
                                    conv(x)) for c, x in amounts][:form_per_row + 1],
                            "grid", form_slot))
        out.append(("blank",))
        return out

    hdr_key = {"discount": "vat_rate"}
    header = []
    for c in cols:
        if c == "discount":
            header.append({"hu": "Kedv.", "de": "Rabatt", "en": "Disc.", "fr": "Remise", "it": "Sconto", "es": "Dto.",
                           "nl": "Korting", "pl": "Rabat"}[lang])
        else:
            header.append(lay.label(hdr_key.get(c, c), False) if c != "discount" else "")
    if lay.case == "upper":
        header = [h.upper() for h in header]
    right = [c not in ("description", "unit", "sku") for c in cols]
    rows = [[cell(li, c, i) for c in cols] for i, li in enumerate(inv.lines)]
    tstyle = rng.choice(["grid", "grid", "pipes", "tabs", "merged", "blocks"])
    if tstyle == "blocks" and len(rows) > 12:
        tstyle = "grid"
    form = FORM_ITEMS > 0 and rng.random() < FORM_ITEMS
    if form:  # items as forms, totals in a summary grid labelled like the items
        tstyle = "form"
        show["breakdown"] = True
        form_slot = rng.choice([18, 22, 26, 30, 37])
        form_per_row = rng.choice([2, 3, 4, 4])
        form_colon = lay.colon() if rng.random() < 0.7 else ""

        def fc(label):  # a form label with the form's separator (once)
            return label if not form_colon or label.endswith(form_colon.strip()) else label + form_colon
        form_home = rng.random() < 0.35  # every amount row again in the home currency (the same values when it is the invoice's)
    repeat_header = rng.random() < 0.75
    carried = rng.random() < 0.5
    page_no_fmt = rng.choice(LX.L["page_of"][lang]) if rng.random() < 0.6 else None

    # --- totals
    totals = []
    if show["net_total"]:
        totals.append((lay.label("total_net"), st.money(inv.net)))
    if show["vat_total"]:
        totals.append((lay.label("total_vat"), st.money(inv.vat)))
    totals.append((lay.label("total_gross"), st.money(inv.gross)))
    n_core = len(totals)
    if rng.random() < 0.4 and lay.labels.get("amount_due") != lay.labels.get("total_gross"):
        totals.append((lay.label("amount_due"), st.money(inv.due_amount)))
    tot_mode = rng.choice(["colon", "left", "left", "table"])
    if wide:
        tot_mode = "left"
    breakdown = None
    if show["breakdown"] and form:
        # the summary grid: a row a VAT rate, the sum row, each maybe again in the home currency
        bh = [lay.label("rate_col", False) if rng.random() < 0.5 else "",
              fc(lay.label("net_amount", False)), fc(lay.label("vat_amount", False)),
              fc(lay.label("gross_amount", False))]
        rate_label = rng.random() < 0.5
        brows = []

        def home_row(vals):
            return [fc(lay.label("in_home", False))] + [conv(x) for x in vals]
        for cat, rate, taxable, vat in inv.breakdown:
            r = lay.label("exempt", False) if cat == "E" else (lay.label("reverse_charge", False) if cat == "AE" else st.rate(rate))
            if rate_label:
                r = "%s %s" % (fc(lay.label("vat_rate", False)), r)
            brows.append([r, st.money(taxable), st.money(vat), st.money(taxable + vat)])
            if form_home:
                brows.append(home_row([taxable, vat, taxable + vat]))
        brows.append([fc(lay.label("sum_row", False)), st.money(inv.net), st.money(inv.vat), st.money(inv.gross)])
        if form_home:
            brows.append(home_row([inv.net, inv.vat, inv.gross]))
        if rng.random() < 0.6:
            totals = totals[n_core:]
        breakdown = (lay.label("vat_breakdown", False), bh, brows)
    elif show["breakdown"]:
        bh = [lay.label("rate_col", False), lay.label("base_col", False), lay.label("tax_col", False)]
        with_gross = rng.random() < 0.5
        if with_gross:
            bh.append(lay.label("gross_col", False))
        brows = []
        for cat, rate, taxable, vat in inv.breakdown:
            r = lay.label("exempt", False) if cat == "E" else (lay.label("reverse_charge", False) if cat == "AE" else st.rate(rate))
            row = [r, st.amount(taxable), st.amount(vat)]
            if with_gross:
                row.append(st.amount(taxable + vat))
            brows.append(row)
        if rng.random() < 0.5:  # a sum row closing the summary: the invoice totals may be printed only there
            money = st.money if rng.random() < 0.4 else st.amount
            row = [lay.label("sum_row", False), money(inv.net), money(inv.vat)]
            if with_gross:
                row.append(money(inv.gross))
            brows.append(row)
            if with_gross and rng.random() < 0.4:
                totals = totals[n_core:]
        breakdown = (lay.label("vat_breakdown", False), bh, brows)
    if inv.currency != home and not (form and form_home) and rng.random() < 0.6:
        # a foreign-currency invoice also states its VAT (or all totals) in the home currency: distractors
        fx_lines = [(lay.label("exchange_rate"), "1 %s = %s %s" % (inv.currency, st.number(fx, 4 if fx < 10 else 2), home)
                     if rng.random() < 0.6 else st.number(fx, 4 if fx < 10 else 2))]
        if rng.random() < 0.5:
            fx_lines.append(("%s %s" % (lay.label("total_vat", False), lay.label("in_home", False)) + lay.colon(), conv(inv.vat)))
        else:
            fx_lines += [("%s %s" % (lay.label(k, False), lay.label("in_home", False)) + lay.colon(), conv(v))
                         for k, v in (("total_net", inv.net), ("total_vat", inv.vat), ("total_gross", inv.gross))]
        totals = totals + fx_lines if rng.random() < 0.6 else fx_lines + totals

    # --- payment and noise
    pay = []
    if inv.payment_means == "transfer":
        if inv.seller.account and show["iban"]:
            pay.append((lay.label("account"), inv.seller.account))
        if inv.seller.iban and show["iban"]:
            iban_txt = ids.iban_groups(inv.seller.iban) if rng.random() < 0.6 else inv.seller.iban
            pay.append((lay.label("iban"), iban_txt))
        else:
            iban_txt = None
        if show["bic"]:
            pay.append((lay.label("bic"), inv.seller.bic))
        if pay and rng.random() < 0.5:
            pay.insert(0, (lay.label("bank"), rng.choice(["", ""]) or rng.choice(["Banca", "Bank", "Banco", "OTP", "ING", "Crédit"]) + " " + rng.choice(LX.NAME_STEMS.get(lang, data.NAME_STEMS.get(lang, ["Nord"])))))
    else:
        iban_txt = None
    notes = []
    if inv.regime == "reverse_charge":
        notes.append(LX.NOTES["reverse"][lang])
    if inv.regime == "exempt" and rng.random() < 0.8:
        notes.append(LX.NOTES["exempt"][lang])
    terms = rng.sample(LX.TERMS[lang], rng.randrange(0, 3))
    reg = "%s %s" % (lay.label("register", False), "%s %s" % (rng.choice(["", "B ", "HRB ", "Cg. "]), ids.digits(rng, rng.choice([6, 8, 10]))))
    footer_parts = [inv.seller.name] if arrangement == "footer_seller" else []
    if arrangement == "footer_seller":
        footer_parts += [inv.seller.street, "%s %s" % (inv.seller.postal_code, inv.seller.city)]
        if inv.seller.tax_id and show_s["tax_id"]:
            footer_parts.append("%s %s" % (lay.label("tax_id"), inv.seller.tax_id))
        if inv.seller.vat_id and show_s["vat_id"]:
            footer_parts.append("%s %s" % (lay.label("vat_id"), inv.seller.vat_id))
    if rng.random() < 0.5:
        footer_parts.append(reg)
    if rng.random() < 0.4:
        footer_parts.append("%s %s" % (lay.label("director", False), rng.choice(LX.PEOPLE[lang])))
    pay_in_footer = pay and rng.random() < 0.3
    if pay_in_footer:
        footer_parts += ["%s %s" % (k, v) for k, v in pay]
    footer = rng.choice([" | ", " · ", "  ", " - "]).join(footer_parts) if footer_parts and rng.random() < 0.5 else None
    footer_lines = footer_parts if footer_parts and footer is None else ([footer] if footer else [])

    # --- paginate the item table
    budget_first = max(4, 44 - sum(1 for b in blocks if b[0] != "blank") - 2 * len(meta) // 2)
    per_page = rng.randrange(26, 40)
    pages, cur = [], list(blocks)
    i = 0
    n = len(rows)
    chunks = []
    first = min(n, rng.randrange(max(3, budget_first - 8), max(4, budget_first)) if n > 12 else n)
    if n >= 4 and rng.random() < 0.12:  # the table starts low on the first page and runs over
        first = rng.randrange(1, n - 1)
        per_page = rng.randrange(max(2, n - first - 2), 40)
    chunks.append(rows[:first])
    i = first
    while i < n:
        chunks.append(rows[i:i + per_page])
        i += per_page
    running = Decimal(0)
    li_idx = 0
    for k, ch in enumerate(chunks):
        hdr = header if (k == 0 or repeat_header) else None
        if form:
            for j in range(len(ch)):
                cur += form_item(li_idx + j)
        else:
            cur.append(("table", hdr, ch, right, tstyle, cols.index("description")))
        for _ in ch:
            running += inv.lines[li_idx].net
            li_idx += 1
        if k < len(chunks) - 1:
            if carried:
                cur.append(("kv", [(lay.label("carried"), st.amount(running))], "colon"))
            pages.append(cur)
            cur = []
    cur.append(("blank",))
    tail = []
    if breakdown and rng.random() < 0.5:
        tail.append(("line", breakdown[0], "l"))
        tail.append(("table", breakdown[1], breakdown[2], [True] * len(breakdown[1]), "grid" if tstyle in ("blocks", "form") else tstyle))
        breakdown_done = True
    else:
        breakdown_done = False
    if totals:
        tail.append(kv(totals, tot_mode))
    if breakdown and not breakdown_done:
        tail.append(("blank",))
        tail.append(("line", breakdown[0], "l"))
        tail.append(("table", breakdown[1], breakdown[2], [True] * len(breakdown[1]), "grid" if tstyle in ("blocks", "form") else tstyle))
    tail.append(("blank",))
    if pay and not pay_in_footer:
        tail.append(kv(pay, rng.choice(["colon", "left", "colon"])))
        tail.append(("blank",))
    for t in notes + terms:
        tail.append(("para", t))
    if arrangement != "footer_seller" and rng.random() < 0.3:
        tail.append(("line", contacts, "l"))
    cur += tail
    pages.append(cur)
    n_pages = len(pages)
    for p, pg in enumerate(pages):
        if footer_lines and (p == n_pages - 1 or rng.random() < 0.7):
            pg.append(("blank",))
            pg += [("line", x, "c" if footer else "l") for x in footer_lines]
        if page_no_fmt:
            pg.append(("line", page_no_fmt.format(p=p + 1, n=n_pages), "r"))
    if n_pages > 1:
        features.append("multi_page")

    # --- expected and printed
    exp = inv.expected(structured=False)
    exp["delivery_date"] = inv.delivery.isoformat() if show["delivery"] else None
    if not show["due"]:
        exp["due_date"] = None
        exp["payment"]["due_date"] = None
    if not (inv.order_reference and show["order"]):
        exp["order_reference"] = None
    for who, party, sh in (("seller", inv.seller, show_s), ("buyer", inv.buyer, show_b)):
        e = exp[who]
        if not sh["tax_id"]:
            e["tax_id"] = None
        if not sh["vat_id"]:
            e["vat_id"] = None
        if not sh["address"]:
            e["address"] = None
    if not show["iban"]:
        exp["payment"]["iban"] = None
        exp["payment"]["account_number"] = None
    if not show["bic"]:
        exp["payment"]["bic"] = None
    if not means_printed:
        # a transfer shows in the printed bank account; card or cash cannot be told from the page
        exp["payment"]["means"] = "transfer" if (inv.payment_means == "transfer" and show["iban"]) else None
    for j, li in enumerate(inv.lines):
        e = exp["line_items"][j]
        if "unit" in dropped:
            e["unit"] = None
        if "unit_price" in dropped:
            e["unit_price"] = None
        if "quantity" in dropped:
            e["quantity"] = None
            if "unit" not in cols:
                e["unit"] = None
        if "vat_rate" in dropped:
            e["vat_rate"] = None
        if li.category == "AE":
            e["vat_rate"] = 0 if "vat_rate" not in dropped else None
        if "vat_amount" not in cols:
            e["vat_amount"] = None
    if not show["breakdown"]:
        # the breakdown is still derivable from the lines and totals when one rate applies
        if len(inv.breakdown) > 1 or "vat_rate" in dropped:
            exp["vat_breakdown"] = []
    for b in exp["vat_breakdown"]:
        if b["category"] == "AE":
            b["rate"] = 0
    if not show["net_total"]:
        exp["totals"]["net"] = exp["totals"]["net"]  # derivable: sum of line net amounts
    if not show["vat_total"]:
        exp["totals"]["vat"] = exp["totals"]["vat"]
    printed = {"/invoice_number": inv.number, "/issue_date": st.date(inv.issue), "/seller/name": inv.seller.name,
               "/buyer/name": inv.buyer.name, "/totals/gross": st.amount(inv.gross)}
    if show["net_total"]:
        printed["/totals/net"] = st.amount(inv.net)
    if show["vat_total"]:
        printed["/totals/vat"] = st.amount(inv.vat)
    if show["due"]:
        printed["/due_date"] = st.date(inv.due)
    if show["delivery"]:
        printed["/delivery_date"] = st.date(inv.delivery)
    for who, party, sh in (("seller", inv.seller, show_s), ("buyer", inv.buyer, show_b)):
        if party.tax_id and sh["tax_id"]:
            printed["/%s/tax_id" % who] = party.tax_id
        if party.vat_id and sh["vat_id"]:
            printed["/%s/vat_id" % who] = party.vat_id
        if sh["address"]:
            printed["/%s/address/street" % who] = party.street
            printed["/%s/address/city" % who] = party.city
    if iban_txt:
        printed["/payment/iban"] = iban_txt
    if inv.seller.account and show["iban"] and inv.payment_means == "transfer":
        printed["/payment/account_number"] = inv.seller.account
    if inv.order_reference and show["order"]:
        printed["/order_reference"] = inv.order_reference
    for j, li in enumerate(inv.lines):
        printed["/line_items/%d/description" % j] = li.description
        printed["/line_items/%d/net_amount" % j] = st.amount(li.net)
    features.append("table_" + tstyle)
    features.append("arr_" + arrangement)
    return pages, exp, printed, features, rng.random() < 0.35


# --- scanned-text artefacts (text output) -----------------------------------------------------------

OCR_SWAP = {"l": "1", "O": "0", "rn": "m", "e": "c", "i": "í", "S": "5"}


def ocr_noise(rng, s):
    """Letter confusions and hyphenation for noise text only (never values)."""
    out = s
    for a, b in OCR_SWAP.items():
        if a in out and rng.random() < 0.25:
            k = out.index(a)
            out = out[:k] + b + out[k + len(a):]
    return out


# --- renderers ---------------------------------------------------------------------------------------

def _w(s):
    return len(s)


def txt_table(hdr, rows, right, style, rng, gap, wrap_col=None):
    out = []
    allrows = ([hdr] if hdr else []) + rows
    if style == "blocks":
        for r in rows:
            first = True
            for k, v in enumerate(r):
                if not v:
                    continue
                if hdr and not first:
                    out.append("   %s %s" % (hdr[k], v))
                else:
                    out.append(("%s" % v) if first else "   " + v)
                first = False
            out.append("")
        return out
    if style == "tabs":
        return ["\t".join(r) for r in allrows]
    if style == "merged":
        return [" ".join(x for x in r if x) for r in allrows]
    widths = [max(_w(r[k]) for r in allrows) for k in range(len(allrows[0]))]
    sep = " | " if style == "pipes" else " " * gap

    def fmt_row(r):
        cells = [(r[k].rjust(widths[k]) if right[k] else r[k].ljust(widths[k])) for k in range(len(r))]
        s = sep.join(cells).rstrip()
        return ("| " + s + " |") if style == "pipes" else s
    for j, r in enumerate(allrows):
        out.append(fmt_row(r))
        if j == 0 and hdr and style in ("pipes", "grid") and rng.random() < 0.6:
            out.append(("-" if style == "grid" else "|") + "-" * (sum(widths) + len(sep) * (len(widths) - 1)))
    return out


def kv_text(items, mode, rng, width):
    if mode == "colon":
        return ["%s %s" % (k, v) for k, v in items]
    if mode == "left":
        w = max(_w(k) for k, _ in items) + rng.randrange(2, 8)
        return ["%s%s" % (k.ljust(w), v) for k, v in items]
    if mode == "above":
        out = []
        for k, v in items:
            out += [k, v]
        return out
    # table: labels as a header row, values below (split in rows of at most 4)
    out = []
    for s in range(0, len(items), 4):
        part = items[s:s + 4]
        ws = [max(_w(k), _w(v)) for k, v in part]
        out.append("   ".join(k.ljust(w) for (k, _), w in zip(part, ws)).rstrip())
        out.append("   ".join(v.ljust(w) for (_, v), w in zip(part, ws)).rstrip())
    return out


def grid_text(items, slot):
    """Labels in a row, values in the row below, each in a column of `slot` characters (wider where a
    label or value needs it)."""
    ws = [max(slot, _w(k) + 2, _w(v) + 2) for k, v in items]
    return ["".join(k.ljust(w) for (k, _), w in zip(items, ws)).rstrip(),
            "".join(v.ljust(w) for (_, v), w in zip(items, ws)).rstrip()]


def render_txt(pages, rng, scanned):
    width = rng.choice([72, 80, 90, 100])
    gap = rng.choice([1, 2, 2, 3, 4])
    out_pages = []
    for pg in pages:
        lines = []
        for b in pg:
            k = b[0]
            if k == "blank":
                lines.append("")
            elif k == "line":
                t = b[1]
                lines.append(t.center(width).rstrip() if b[2] == "c" else (t.rjust(width) if b[2] == "r" else t))
            elif k == "para":
                noisy = scanned and (len(b) < 3 or b[2] != "fact")  # ("para", text, "fact"): carries values
                t = ocr_noise(rng, b[1]) if noisy else b[1]
                if noisy and len(t) > 30 and rng.random() < 0.5:
                    cut = t.find(" ", len(t) // 2)
                    word_end = t.find(" ", cut + 1)
                    if cut > 0 and word_end > cut + 5:
                        w = t[cut + 1:word_end]
                        t = t[:cut + 1] + w[:len(w) // 2] + "-\n" + w[len(w) // 2:] + t[word_end:]
                lines += t.split("\n")
            elif k == "cols":
                cols = b[1:]
                cw = max(_w(x) for x in cols[0]) + rng.randrange(3, 12) if cols[0] else 10
                for r in range(max(len(c) for c in cols)):
                    a = cols[0][r] if r < len(cols[0]) else ""
                    c2 = cols[1][r] if r < len(cols[1]) else ""
                    lines.append((a.ljust(cw) + c2).rstrip())
            elif k == "kv" and b[2] == "grid":
                lines += grid_text(b[1], b[3])
            elif k == "kv" and b[2] == "left" and len(b) > 3:  # values in a far column
                col = max(max(_w(a) for a, _ in b[1]) + 2, int(width * b[3]))
                lines += ["%s%s" % (a.ljust(col), v) for a, v in b[1]]
            elif k == "kv":
                lines += kv_text(b[1], b[2], rng, width)
            elif k == "table":
                lines += txt_table(b[1], b[2], b[3], b[4], rng, gap, b[5] if len(b) > 5 else None)
        if scanned:
            broken = []
            for ln in lines:  # a label and its value broken over two lines
                k = ln.find(": ")
                if 0 < k < 30 and rng.random() < 0.1:
                    broken += [ln[:k + 1], ln[k + 2:]]
                else:
                    broken.append(ln)
            lines = broken
            lines = [(ln.replace(" ", "  ", 1) if rng.random() < 0.1 else ln) for ln in lines]
            lines = [(" " * rng.randrange(0, 3) + ln if rng.random() < 0.2 and ln else ln) for ln in lines]
        out_pages.append("\n".join(lines).rstrip() + "\n")
    return "\f".join(out_pages)


def render_html(pages, rng):
    css = rng.choice(["body{font-family:sans-serif}", "body{font:12px Arial}td{padding:2px 6px}", ""])
    h = ["<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>%s</title><style>%s</style></head><body>"
         % (rng.choice(["Invoice", "Document", "Doc"]), css)]
    for p, pg in enumerate(pages):
        if p:
            h.append('<hr class="page-break">')
        for b in pg:
            k = b[0]
            if k == "blank":
                h.append("<br>" if rng.random() < 0.5 else "")
            elif k == "line":
                tag = rng.choice(["p", "div"])
                h.append("<%s%s>%s</%s>" % (tag, ' style="text-align:%s"' % {"l": "left", "c": "center", "r": "right"}[b[2]] if b[2] != "l" else "",
                                            E(b[1]), tag))
            elif k == "para":
                h.append("<p>%s</p>" % E(b[1]))
            elif k == "cols":
                h.append("<table><tr>" + "".join("<td valign=\"top\">%s</td>" % "<br>".join(E(x) for x in c) for c in b[1:]) + "</tr></table>")
            elif k == "kv":
                if b[2] in ("table", "grid"):
                    h.append("<table><tr>%s</tr><tr>%s</tr></table>" % ("".join("<th>%s</th>" % E(a) for a, _ in b[1]),
                                                                       "".join("<td>%s</td>" % E(v) for _, v in b[1])))
                elif b[2] == "left":
                    h.append("<table>" + "".join("<tr><td>%s</td><td>%s</td></tr>" % (E(a), E(v)) for a, v in b[1]) + "</table>")
                elif b[2] == "above":
                    h.append("<dl>" + "".join("<dt>%s</dt><dd>%s</dd>" % (E(a), E(v)) for a, v in b[1]) + "</dl>")
                else:
                    h.append("".join("<div>%s %s</div>" % (E(a), E(v)) for a, v in b[1]))
            elif k == "table":
                hdr, rows, right, style = b[1], b[2], b[3], b[4]
                if style == "blocks":
                    for r in rows:
                        h.append("<div class=\"item\">" + "".join("<div>%s%s</div>" % ((E(hdr[j]) + " ") if hdr and j else "", E(v))
                                                                for j, v in enumerate(r) if v) + "</div>")
                    continue
                t = ["<table border=\"%d\">" % rng.choice([0, 1])]
                if hdr:
                    t.append("<tr>" + "".join("<th>%s</th>" % E(x) for x in hdr) + "</tr>")
                for r in rows:
                    t.append("<tr>" + "".join("<td%s>%s</td>" % (' align="right"' if right[j] else "", E(v)) for j, v in enumerate(r)) + "</tr>")
                t.append("</table>")
                h.append("\n".join(t))
    h.append("</body></html>")
    return "\n".join(h)


# More type faces than the fixed-layout generator's DejaVu families (other glyph widths give other
# gaps, and so other spacing, in the extracted text): (regular, bold) pairs and their files.
EXTRA_FONTS = [("LiberationSans-Regular", "LiberationSans-Bold"), ("LiberationSerif-Regular", "LiberationSerif-Bold"),
               ("LiberationMono-Regular", "LiberationMono-Bold"), ("FreeSans", "FreeSansBold"), ("FreeSerif", "FreeSerifBold"),
               ("FreeMono", "FreeMonoBold")]
EXTRA_FONT_FILES = {n: "/usr/share/fonts/truetype/%s/%s.ttf" % ("freefont" if n.startswith("Free") else "liberation2", n)
                    for pair in EXTRA_FONTS for n in pair}


def render_pdf(pages, rng, title):
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.ttfonts import TTFont
    from reportlab.pdfgen import canvas
    from . import render_pdf as RP
    RP.register_fonts()
    font, bold = rng.choice(list(RP.FAMILIES.values()) + list(EXTRA_FONTS))
    for name in (font, bold):
        if name not in pdfmetrics.getRegisteredFontNames():
            path = EXTRA_FONT_FILES[name]
            if not os.path.exists(path):
                raise RuntimeError("%s: font file missing (tools/setup-tools.sh installs it)" % path)
            pdfmetrics.registerFont(TTFont(name, path))
    size = rng.choice([8, 8.5, 9, 9.5, 10])
    lead = size * rng.choice([1.25, 1.35, 1.5])
    W, H = A4
    left = rng.choice([36, 45, 55, 65])
    right_edge = W - rng.choice([36, 45, 55])
    buf = io.BytesIO()
    c = canvas.Canvas(buf, pagesize=A4, invariant=1)
    c.setTitle(title)
    c.setAuthor("quarry training generator")

    def sw(s, f=font, sz=size):
        return pdfmetrics.stringWidth(s, f, sz)

    for pg in pages:
        y = H - rng.choice([40, 50, 60])
        first_line = True

        def newline(n=1):
            nonlocal y
            y -= lead * n
            if y < 30:
                c.showPage()
                y = H - 50

        for b in pg:
            k = b[0]
            if k == "blank":
                newline(0.6)
            elif k == "line":
                f = bold if first_line else font
                sz = size + (4 if first_line else 0)
                c.setFont(f, sz)
                parts, line = [], ""
                for wd in b[1].split(" "):
                    if line and sw(line + " " + wd, f, sz) > right_edge - left:
                        parts.append(line)
                        line = wd
                    else:
                        line = (line + " " + wd) if line else wd
                parts.append(line)
                for part in parts:
                    if b[2] == "c":
                        c.drawCentredString((left + right_edge) / 2, y, part)
                    elif b[2] == "r":
                        c.drawRightString(right_edge, y, part)
                    else:
                        c.drawString(left, y, part)
                    newline(1.3 if first_line else 1)
                first_line = False
            elif k == "para":
                c.setFont(font, size)
                words, line = b[1].split(), ""
                for wd in words:
                    if sw(line + " " + wd) > right_edge - left and line:
                        c.drawString(left, y, line)
                        newline()
                        line = wd
                    else:
                        line = (line + " " + wd).strip()
                if line:
                    c.drawString(left, y, line)
                    newline()
            elif k == "cols":
                c.setFont(font, size)
                cols = b[1:]
                xs = [left, left + (right_edge - left) * rng.choice([0.5, 0.55, 0.6])]
                xs[1] = min(max(xs[1], left + max([sw(x, bold) for x in cols[0]] + [0]) + 12), right_edge - 120)
                if xs[1] + max([sw(x, bold) for x in cols[1]] + [0]) > W - 12:  # no room side by side: stack
                    cols = [cols[0] + [""] + cols[1]]
                for r in range(max(len(cc) for cc in cols)):
                    for j, cc in enumerate(cols):
                        if r < len(cc):
                            c.setFont(bold if r == 0 else font, size)
                            c.drawString(xs[j], y, cc[r])
                    newline()
            elif k == "kv":
                items, mode = b[1], b[2]
                c.setFont(font, size)
                if mode == "colon":
                    for a, v in items:
                        c.drawString(left, y, "%s %s" % (a, v))
                        newline()
                elif mode == "left":
                    x2 = left + max(sw(a) for a, _ in items) + 12
                    if len(b) > 3:  # values in a far column
                        x2 = max(x2, left + (right_edge - left) * b[3])
                    for a, v in items:
                        c.setFont(bold, size)
                        c.drawString(left, y, a)
                        c.setFont(font, size)
                        c.drawString(x2, y, v)
                        newline()
                elif mode == "grid":
                    slot = b[3] * size * 0.5  # the slot's characters at about half the font size each
                    x = left
                    for a, v in items:
                        c.setFont(font, size)
                        c.drawString(x, y, a)
                        c.drawString(x, y - lead, v)
                        x += max(slot, sw(a) + 10, sw(v) + 10)
                    newline(2)
                elif mode == "above":
                    for a, v in items:
                        c.setFont(bold, size - 1)
                        c.drawString(left, y, a)
                        newline()
                        c.setFont(font, size)
                        c.drawString(left, y, v)
                        newline()
                else:
                    for s in range(0, len(items), 4):
                        part = items[s:s + 4]
                        x = left
                        ws = [max(sw(a, bold), sw(v)) + 14 for a, v in part]
                        for (a, v), wv in zip(part, ws):
                            c.setFont(bold, size)
                            c.drawString(x, y, a)
                            c.setFont(font, size)
                            c.drawString(x, y - lead, v)
                            x += wv
                        newline(2)
            elif k == "table":
                hdr, rows, right, style = b[1], b[2], b[3], b[4]
                allrows = ([hdr] if hdr else []) + rows
                if style == "blocks":
                    for r in rows:
                        for j, v in enumerate(r):
                            if v:
                                c.setFont(font, size)
                                c.drawString(left + (0 if j == 0 else 14), y, ("%s %s" % (hdr[j], v)) if hdr and j else v)
                                newline()
                        newline(0.4)
                    continue
                tsz = size
                ws = [max(sw(r[j], bold if hdr else font, tsz) for r in allrows) + (6 if style == "merged" else 14) for j in range(len(allrows[0]))]
                while sum(ws) > right_edge - left and tsz > 6:
                    tsz -= 0.5
                    ws = [max(sw(r[j], bold if hdr else font, tsz) for r in allrows) + (6 if style == "merged" else 12) for j in range(len(allrows[0]))]
                for ri, r in enumerate(allrows):
                    x = left
                    is_hdr = hdr is not None and ri == 0
                    c.setFont(bold if is_hdr else font, tsz)
                    for j, v in enumerate(r):
                        if right[j] and not is_hdr:
                            c.drawRightString(x + ws[j] - 6, y, v)
                        else:
                            c.drawString(x, y, v)
                        x += ws[j]
                    if is_hdr and style in ("grid", "pipes"):
                        c.line(left, y - 3, x, y - 3)
                    newline()
        c.showPage()
    c.save()
    return buf.getvalue()


def generate(seed, language, fmt):
    """A free-layout invoice (see the module doc). Deterministic in (seed, language, fmt)."""
    from . import Sample
    if language not in LX.LANGS:
        raise ValueError("language must be one of %s" % (LX.LANGS,))
    if fmt not in FORMATS:
        raise ValueError("fmt must be one of %s" % (FORMATS,))
    rng = random.Random("quarry-free-invoice/%s/%s/%s" % (seed, language, fmt))
    inv = build(rng, language)
    pages, expected, printed, features, scanned = render_blocks(inv, rng)
    if fmt == "txt":
        data_ = render_txt(pages, rng, scanned).encode("utf-8")
        if scanned:
            features.append("scanned")
    elif fmt == "html":
        data_ = render_html(pages, rng).encode("utf-8")
    else:
        data_ = render_pdf(pages, rng, "%s %s" % (LX.L["invoice"][language][0], inv.number))
    return Sample(language, fmt, -1, data_, expected, printed, features)
