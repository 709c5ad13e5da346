# -*- coding: utf-8 -*-
"""The invoice model: parties, lines, VAT and totals with exact decimal arithmetic, the expected JSON
(schemas/invoice.schema.json) and the printed forms of its values."""
import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal, ROUND_HALF_UP
from typing import List, Optional

from . import data, ids

CURRENCY_RATE = {"EUR": Decimal("1"), "HUF": Decimal("390"), "USD": Decimal("1.10"), "GBP": Decimal("0.86")}
STANDARD_RATES = {"HU": [Decimal(27), Decimal(18), Decimal(5)], "DE": [Decimal(19), Decimal(7)],
                  "FR": [Decimal(20), Decimal(10), Decimal("5.5")], "GB": [Decimal(20), Decimal(5)]}


def decimals(currency):
    return 0 if currency == "HUF" else 2


def rnd(x, currency):
    q = Decimal(1) if decimals(currency) == 0 else Decimal("0.01")
    return x.quantize(q, rounding=ROUND_HALF_UP)


def num(x):
    """A Decimal as a JSON number: int when integral, else float with the Decimal's digits."""
    if x is None:
        return None
    if x == x.to_integral_value():
        return int(x)
    return float(x)


@dataclass
class Party:
    name: str
    street: str
    postal_code: str
    city: str
    country: str
    tax_id: Optional[str] = None      # printed national tax number (HU adószám, DE Steuernummer)
    vat_id: Optional[str] = None      # printed VAT id with country prefix
    extra: Optional[str] = None       # printed but not extracted (SIREN, company register)
    account: Optional[str] = None     # HU giro account as printed
    iban: Optional[str] = None
    bic: Optional[str] = None

    def json(self):
        return {"name": self.name, "tax_id": self.tax_id, "vat_id": self.vat_id,
                "address": {"street": self.street, "city": self.city, "postal_code": self.postal_code,
                            "country": self.country}}


@dataclass
class LineItem:
    description: str
    unit_key: str
    unit: str                 # printed unit word
    quantity: Decimal
    unit_price: Decimal
    discount: Optional[Decimal]  # percent
    net: Decimal
    category: str             # S, AE, E
    rate: Optional[Decimal]   # None for exempt
    vat: Decimal              # line VAT (used when the layout prints it)


@dataclass
class Invoice:
    lang: str
    doc_type: str
    number: str
    issue: dt.date
    delivery: dt.date
    due: Optional[dt.date]
    currency: str
    seller: Party
    buyer: Party
    lines: List[LineItem]
    regime: str                     # standard, mixed, reverse_charge, intra_eu, exempt
    line_vat: bool                  # lines carry a VAT amount (printed)
    payment_means: str              # transfer, card, cash
    order_reference: Optional[str] = None
    preceding_invoice: Optional[str] = None
    prepaid: Decimal = Decimal(0)
    breakdown: list = field(default_factory=list)  # [(category, rate, taxable, vat)]
    net: Decimal = Decimal(0)
    vat: Decimal = Decimal(0)
    gross: Decimal = Decimal(0)
    due_amount: Decimal = Decimal(0)

    def compute(self):
        groups = {}
        order = []
        for li in self.lines:
            key = (li.category, li.rate)
            if key not in groups:
                groups[key] = [Decimal(0), Decimal(0)]
                order.append(key)
            groups[key][0] += li.net
            groups[key][1] += li.vat
        self.breakdown = []
        for cat, rate in order:
            taxable, line_vat_sum = groups[(cat, rate)]
            if rate is None or cat != "S":
                v = rnd(Decimal(0), self.currency)
            elif self.line_vat:
                v = line_vat_sum
            else:
                v = rnd(taxable * rate / 100, self.currency)
            self.breakdown.append((cat, rate, taxable, v))
        self.net = sum((li.net for li in self.lines), Decimal(0))
        self.vat = sum((b[3] for b in self.breakdown), Decimal(0))
        self.gross = self.net + self.vat
        self.due_amount = self.gross - self.prepaid

    def expected(self, structured=False):
        """The invoice JSON. `structured`: the document is UBL/CII XML, where EN 16931 gives exempt
        lines a 0 rate, units are UN/ECE codes and line VAT amounts do not exist."""
        def rate_json(cat, rate):
            if rate is None:
                return 0 if structured else None
            return num(rate)
        items = []
        for li in self.lines:
            items.append({
                "description": li.description,
                "quantity": num(li.quantity),
                "unit": data.UNECE[li.unit_key] if structured else li.unit,
                "unit_price": num(li.unit_price),
                "net_amount": num(li.net),
                "vat_rate": rate_json(li.category, li.rate),
                "vat_amount": num(li.vat) if (self.line_vat and not structured) else None,
            })
        pay_iban = self.seller.iban if self.payment_means == "transfer" and self.seller.iban else None
        pay_acct = self.seller.account if self.payment_means == "transfer" and self.seller.account else None
        return {
            "document_type": self.doc_type,
            "invoice_number": self.number,
            "issue_date": self.issue.isoformat(),
            "due_date": self.due.isoformat() if self.due else None,
            "delivery_date": self.delivery.isoformat() if self.delivery else None,
            "currency": self.currency,
            "buyer_reference": None,
            "order_reference": self.order_reference,
            "preceding_invoice": self.preceding_invoice,
            "seller": self.seller.json(),
            "buyer": self.buyer.json(),
            "line_items": items,
            "vat_breakdown": [{"category": c, "rate": rate_json(c, r), "taxable_amount": num(t), "vat_amount": num(v)}
                              for c, r, t, v in self.breakdown],
            "totals": {"net": num(self.net), "vat": num(self.vat), "gross": num(self.gross),
                       "amount_due": num(self.due_amount)},
            "payment": {"means": self.payment_means, "iban": pay_iban, "account_number": pay_acct,
                        "bic": self.seller.bic if self.payment_means == "transfer" else None,
                        "due_date": self.due.isoformat() if self.due else None},
        }


# --- random construction -------------------------------------------------------------------------

def company_name(rng, lang):
    stem = rng.choice(data.NAME_STEMS[lang])
    trade = rng.choice(data.NAME_TRADES[lang])
    form = rng.choice(data.LEGAL_FORMS[lang])
    if lang == "hu":
        return "%s %s %s" % (stem, trade, form)
    if lang == "de":
        # "Rhein Logistik GmbH" or the compound "Rhein Logistiktechnik GmbH"
        compound = rng.random() < 0.25 and not trade.endswith("s")
        return "%s %s%s %s" % (stem, trade, "technik" if compound else "", form)
    if lang == "en":
        return "%s %s %s" % (stem, trade, form)
    return "%s %s %s" % (form, stem, trade) if rng.random() < 0.4 else "%s %s %s" % (stem, trade, form)


def address(rng, lang):
    street = rng.choice(data.STREETS[lang])
    no = rng.randrange(1, 180)
    if lang == "hu":
        s = "%s %d." % (street, no)
        if rng.random() < 0.3:
            s += " %d. em. %d." % (rng.randrange(1, 8), rng.randrange(1, 12))
    elif lang == "de":
        s = "%s %d" % (street, no) + (rng.choice(["", "", "a", "b"]))
    elif lang == "en":
        s = "%d %s" % (no, street)
        if rng.random() < 0.3:
            s = "Unit %d, %s" % (rng.randrange(1, 30), s)
    else:
        s = "%d %s" % (no, street)
    pc, city = rng.choice(data.CITIES[lang])
    return s, pc, city


def make_party(rng, lang, need_vat_id):
    name = company_name(rng, lang)
    street, pc, city = address(rng, lang)
    country = data.COUNTRY_OF[lang]
    p = Party(name=name, street=street, postal_code=pc, city=city, country=country)
    if lang == "hu":
        p.tax_id, vat = ids.hu_tax_number(rng)
        p.vat_id = vat if need_vat_id else None
        p.account, p.iban = ids.hu_account(rng)
        p.bic = rng.choice(["OTPVHUHB", "GIBAHUHB", "OKHBHUHB", "UBRTHUHB", "BUDAHUHB", "MKKBHUHB"])
    elif lang == "de":
        st, vat = ids.de_ids(rng)
        p.tax_id = st if (rng.random() < 0.5 or not need_vat_id) else None
        p.vat_id = vat if (need_vat_id or p.tax_id is None or rng.random() < 0.5) else None
        p.iban = ids.iban(rng, "DE")
        p.bic = rng.choice(["COBADEFFXXX", "DEUTDEFFXXX", "GENODEF1S10", "BYLADEM1001", "HYVEDEMMXXX"])
    elif lang == "fr":
        siren, vat = ids.fr_ids(rng)
        p.extra = "SIREN %s %s %s" % (siren[:3], siren[3:6], siren[6:])
        p.vat_id = vat
        p.iban = ids.iban(rng, "FR")
        p.bic = rng.choice(["BNPAFRPPXXX", "SOGEFRPPXXX", "AGRIFRPP882", "CCBPFRPPNAN"])
    else:
        p.vat_id = ids.gb_vat(rng)
        p.extra = "Registered in England and Wales No. %s" % ids.digits(rng, 8)
        p.iban = ids.iban(rng, "GB")
        p.bic = rng.choice(["BARCGB22", "NWBKGB2L", "LOYDGB2L", "HBUKGB4B", "MIDLGB22"])
    return p


def invoice_number(rng, lang, year):
    n = rng.randrange(1, 9999)
    pats = {
        "hu": ["%d/%06d" % (year, n), "SZ-%d-%04d" % (year, n), "%s-%d/%05d" % (rng.choice(["ABC", "DKT", "BP", "E"]), year, n)],
        "de": ["RE-%d-%04d" % (year, n), "%d-%05d" % (year, n), "R%d%04d" % (year % 100, n)],
        "en": ["INV-%05d" % n, "INV/%d/%04d" % (year, n), "%d-%04d" % (year, n)],
        "fr": ["FA-%d-%04d" % (year, n), "F%d-%03d" % (year, n % 1000), "%d%04d" % (year, n)],
    }
    return rng.choice(pats[lang])


def build(rng, lang, opts):
    """A random invoice. `opts` may force: doc_type, currency, regime, n_lines, line_vat,
    discount (bool), payment_means, hu_account (print the HU 3x8 account instead of the IBAN)."""
    country = data.COUNTRY_OF[lang]
    regime = opts.get("regime") or rng.choice(["standard"] * 5 + ["mixed", "mixed", "reverse_charge", "exempt"])
    doc_type = opts.get("doc_type") or ("credit_note" if rng.random() < 0.12 else "invoice")
    if "currency" in opts:
        currency = opts["currency"]
    else:
        currency = {"hu": rng.choice(["HUF"] * 4 + ["EUR"]), "de": "EUR", "fr": "EUR",
                    "en": rng.choice(["GBP", "GBP", "EUR", "USD"])}[lang]
    foreign_buyer = regime in ("reverse_charge",) or rng.random() < 0.1
    seller = make_party(rng, lang, need_vat_id=foreign_buyer or lang != "hu" or rng.random() < 0.3)
    buyer_lang = lang
    if foreign_buyer:
        buyer_lang = rng.choice([l for l in ("hu", "de", "fr", "en") if l != lang and not (lang == "en" and l == "en")])
    buyer = make_party(rng, buyer_lang, need_vat_id=foreign_buyer or rng.random() < 0.4)
    if lang == "hu" and buyer_lang == "hu" and rng.random() < 0.3:
        buyer.vat_id = None
    if regime == "exempt" and lang == "hu":
        # alanyi adómentes seller: VAT status code 1
        base = seller.tax_id.split("-")[0]
        seller.tax_id = base + "-1-" + seller.tax_id.split("-")[2]
        seller.vat_id = None

    year = rng.randrange(2019, 2026)
    issue = dt.date(year, 1, 1) + dt.timedelta(days=rng.randrange(0, 360))
    delivery = issue - dt.timedelta(days=rng.choice([0, 0, 0, 1, 2, 5, 10]))
    means = opts.get("payment_means") or rng.choice(["transfer"] * 8 + ["card", "cash"])
    due = issue + dt.timedelta(days=rng.choice([8, 14, 15, 30, 30, 45, 60])) if means == "transfer" else issue

    n_lines = opts.get("n_lines") or rng.choice([1, 2, 3, 3, 4, 5, 6, 8])
    if "n_lines" not in opts and rng.random() < 0.04:  # now and then a multi-page invoice
        n_lines = rng.randrange(26, 61)
    line_vat = opts["line_vat"] if "line_vat" in opts else rng.random() < 0.5
    use_discount = opts["discount"] if "discount" in opts else rng.random() < 0.25
    rates = STANDARD_RATES[country]
    scale = CURRENCY_RATE[currency]
    lines = []
    pool = list(data.ITEMS[lang])
    for i in range(n_lines):
        desc, unit_key, (lo, hi), frac = pool[rng.randrange(len(pool))] if n_lines > len(pool) else pool.pop(rng.randrange(len(pool)))
        if n_lines > len(data.ITEMS[lang]):
            desc = "%s (%s %d)" % (desc, {"hu": "tétel", "de": "Pos.", "en": "ref.", "fr": "réf."}[lang], i + 1)
        unit = rng.choice(data.UNITS[lang][unit_key])
        if frac:
            quantity = Decimal(rng.randrange(1, 80)) / 2
        else:
            quantity = Decimal(rng.choice([1, 1, 1, 2, 3, 4, 5, 6, 10, 12, 20, 24, 50]))
        price = Decimal(rng.uniform(lo, hi)) * scale
        price = rnd(price, currency) if currency != "HUF" else (price / 10).quantize(Decimal(1), rounding=ROUND_HALF_UP) * 10
        if price <= 0:
            price = Decimal(1)
        discount = Decimal(rng.choice([5, 10, 10, 15, 20])) if use_discount and (i % 2 == 0 or n_lines == 1) else None
        net = rnd(quantity * price * (100 - (discount or 0)) / 100, currency)
        if regime == "reverse_charge":
            cat, rate = "AE", Decimal(0)
        elif regime == "exempt":
            cat, rate = "E", None
        elif regime == "mixed":
            cat, rate = "S", rates[0] if i % 3 != 1 else rates[-1]
        else:
            cat, rate = "S", rates[0]
        vat = rnd(net * rate / 100, currency) if (cat == "S") else rnd(Decimal(0), currency)
        lines.append(LineItem(desc, unit_key, unit, quantity, price, discount, net, cat, rate, vat))
    inv = Invoice(lang=lang, doc_type=doc_type, number=invoice_number(rng, lang, year), issue=issue,
                  delivery=delivery, due=due, currency=currency, seller=seller, buyer=buyer, lines=lines,
                  regime=regime, line_vat=line_vat, payment_means=means)
    if rng.random() < 0.35:
        inv.order_reference = rng.choice(["PO-", "BE-", "", "ORD"]) + ids.digits(rng, rng.choice([5, 6, 7]))
    if doc_type == "credit_note":
        inv.preceding_invoice = invoice_number(rng, lang, year)
    if opts.get("hu_account") is not None and lang == "hu":
        if opts["hu_account"]:
            seller.iban = None
        else:
            seller.account = None
    elif lang == "hu":
        if rng.random() < 0.5:
            seller.iban = None
        else:
            seller.account = None
    inv.compute()
    return inv
