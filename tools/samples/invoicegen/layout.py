# -*- coding: utf-8 -*-
"""A layout: the label words, value forms and optional parts one document uses, and the printed
strings shared by the text, HTML and PDF renderers (so that what is printed and what the expected
JSON holds come from the same place)."""
from dataclasses import dataclass, field

from . import data, fmt, ids


@dataclass
class Layout:
    lang: str
    variant: int
    style: fmt.Style
    labels: dict
    columns: list                      # item table columns, in order
    print_delivery: bool
    parties_side_by_side: bool
    iban_grouped: bool
    flags: dict = field(default_factory=dict)

    def L(self, key):
        return self.labels[key]


def choose(rng, lang, variant, inv):
    labels = {k: rng.choice(v) for k, v in data.LABELS[lang].items()}
    # Item table: description always; the rest in one of the customary orders.
    cols = ["description", "quantity", "unit", "unit_price"]
    if any(li.discount for li in inv.lines):
        cols.append("discount")
    cols.append("net_amount")
    cols.append("vat_rate")
    if inv.line_vat:
        cols.append("vat_amount")
        if rng.random() < 0.5:
            cols.append("gross_amount")
    if rng.random() < 0.3:
        cols.insert(0, "no")
    if rng.random() < 0.3 and "vat_rate" in cols:
        cols.remove("vat_rate")
        cols.insert(cols.index("net_amount"), "vat_rate")
    return Layout(lang=lang, variant=variant, style=fmt.random_style(rng, lang), labels=labels, columns=cols,
                  print_delivery=lang == "hu" or rng.random() < 0.6,
                  parties_side_by_side=rng.random() < 0.6, iban_grouped=rng.random() < 0.6,
                  flags={"bic": rng.random() < 0.7, "notes": rng.random() < 0.8})


def title(inv, lay):
    return lay.L("credit_note") if inv.doc_type == "credit_note" else lay.L("invoice")


def rate_text(li, lay):
    if li.category == "E":
        return lay.L("exempt")
    return lay.style.rate(li.rate)


def cell(li, col, idx, inv, lay):
    s = lay.style
    if col == "no":
        return "%d" % (idx + 1)
    if col == "description":
        return li.description
    if col == "quantity":
        return s.quantity(li.quantity)
    if col == "unit":
        return li.unit
    if col == "unit_price":
        return s.unit_price(li.unit_price, inv.currency)
    if col == "discount":
        return (s.rate(li.discount) if li.discount else "")
    if col == "net_amount":
        return s.amount(li.net, inv.currency)
    if col == "vat_rate":
        return rate_text(li, lay)
    if col == "vat_amount":
        return s.amount(li.vat, inv.currency)
    if col == "gross_amount":
        return s.amount(li.net + li.vat, inv.currency)
    raise KeyError(col)


def header(col, lay):
    if col == "no":
        return {"hu": "#", "de": "Pos.", "en": "#", "fr": "N°"}[lay.lang]
    return lay.L(col)


def party_lines(p, lay, show_labels=True):
    out = [p.name, p.street, "%s %s" % (p.postal_code, p.city) if lay.lang != "en" else "%s %s" % (p.city, p.postal_code)]
    if p.country != data.COUNTRY_OF[lay.lang]:
        out.append({"HU": {"hu": "Magyarország", "de": "Ungarn", "en": "Hungary", "fr": "Hongrie"},
                    "DE": {"hu": "Németország", "de": "Deutschland", "en": "Germany", "fr": "Allemagne"},
                    "FR": {"hu": "Franciaország", "de": "Frankreich", "en": "France", "fr": "France"},
                    "GB": {"hu": "Egyesült Királyság", "de": "Vereinigtes Königreich", "en": "United Kingdom",
                           "fr": "Royaume-Uni"}}[p.country][lay.lang])
    if p.tax_id:
        out.append("%s: %s" % (tax_label(p, lay), p.tax_id))
    if p.vat_id:
        out.append("%s: %s" % (lay.L("vat_id"), p.vat_id))
    if p.extra:
        out.append(p.extra)
    return out


def tax_label(p, lay):
    # the label of a party's national tax number depends on its country, not the document's language
    if p.country == "HU":
        return {"hu": lay.L("tax_id"), "de": "Steuernummer (HU)", "en": "HU tax number", "fr": "N° fiscal (HU)"}[lay.lang].rstrip(":")
    if p.country == "DE":
        return {"hu": "Adószám (DE)", "de": lay.L("tax_id"), "en": "German tax no.", "fr": "N° fiscal (DE)"}[lay.lang]
    return lay.L("tax_id")


def meta_rows(inv, lay):
    s = lay.style
    rows = [(lay.L("invoice_number"), inv.number), (lay.L("issue_date"), s.date(inv.issue))]
    if lay.print_delivery:
        rows.append((lay.L("delivery_date"), s.date(inv.delivery)))
    rows.append((lay.L("due_date"), s.date(inv.due)))
    rows.append((lay.L("payment_means"), means_text(inv, lay)))
    if inv.order_reference:
        rows.append((lay.L("order_reference"), inv.order_reference))
    if inv.preceding_invoice:
        rows.append((lay.L("preceding_invoice"), inv.preceding_invoice))
    cur = {"hu": "Pénznem", "de": "Währung", "en": "Currency", "fr": "Devise"}[lay.lang]
    rows.append((cur, inv.currency))
    return rows


def means_text(inv, lay):
    if inv.payment_means == "transfer":
        return lay.L("transfer")
    return {"card": {"hu": "Bankkártya", "de": "Kartenzahlung", "en": "Card", "fr": "Carte bancaire"},
            "cash": {"hu": "Készpénz", "de": "Barzahlung", "en": "Cash", "fr": "Espèces"}}[inv.payment_means][lay.lang]


def iban_text(inv, lay):
    return ids.iban_groups(inv.seller.iban) if lay.iban_grouped else inv.seller.iban


def payment_rows(inv, lay):
    if inv.payment_means != "transfer":
        return []
    rows = []
    if inv.seller.account:
        rows.append((lay.L("account"), inv.seller.account))
    if inv.seller.iban:
        rows.append((lay.L("iban"), iban_text(inv, lay)))
    if inv.seller.bic and lay.flags["bic"]:
        rows.append((lay.L("bic"), inv.seller.bic))
    return rows


def total_rows(inv, lay):
    s, c = lay.style, inv.currency
    rows = [(lay.L("total_net"), s.money(inv.net, c)), (lay.L("total_vat"), s.money(inv.vat, c)),
            (lay.L("total_gross"), s.money(inv.gross, c))]
    if lay.L("amount_due") != lay.L("total_gross"):
        rows.append((lay.L("amount_due"), s.money(inv.due_amount, c)))
    return rows


def breakdown_rows(inv, lay):
    s, c = lay.style, inv.currency
    out = []
    for cat, rate, taxable, vat in inv.breakdown:
        label = lay.L("exempt") if cat == "E" else (lay.L("reverse_charge") if cat == "AE" else s.rate(rate))
        out.append((label, s.amount(taxable, c), s.amount(vat, c), s.amount(taxable + vat, c)))
    return out


def notes(inv, lay):
    out = []
    if inv.regime == "reverse_charge":
        out.append(lay.L("reverse_note"))
    if inv.regime == "exempt":
        out.append(lay.L("exempt_note"))
    if lay.flags["notes"]:
        out.append(lay.L("thanks"))
    return out


def printed(inv, lay):
    """JSON pointer -> the string the document prints for that value."""
    s, c = lay.style, inv.currency
    p = {"/invoice_number": inv.number, "/issue_date": s.date(inv.issue), "/due_date": s.date(inv.due),
         "/seller/name": inv.seller.name, "/buyer/name": inv.buyer.name,
         "/seller/address/postal_code": inv.seller.postal_code, "/seller/address/city": inv.seller.city,
         "/seller/address/street": inv.seller.street, "/buyer/address/street": inv.buyer.street,
         "/totals/net": s.amount(inv.net, c), "/totals/vat": s.amount(inv.vat, c),
         "/totals/gross": s.amount(inv.gross, c), "/totals/amount_due": s.amount(inv.due_amount, c)}
    if lay.print_delivery:
        p["/delivery_date"] = s.date(inv.delivery)
    for who, party in (("seller", inv.seller), ("buyer", inv.buyer)):
        if party.tax_id:
            p["/%s/tax_id" % who] = party.tax_id
        if party.vat_id:
            p["/%s/vat_id" % who] = party.vat_id
    if inv.payment_means == "transfer":
        if inv.seller.iban:
            p["/payment/iban"] = iban_text(inv, lay)
        if inv.seller.account:
            p["/payment/account_number"] = inv.seller.account
    if inv.order_reference:
        p["/order_reference"] = inv.order_reference
    if inv.preceding_invoice:
        p["/preceding_invoice"] = inv.preceding_invoice
    for i, li in enumerate(inv.lines):
        p["/line_items/%d/description" % i] = li.description
        p["/line_items/%d/net_amount" % i] = s.amount(li.net, c)
        if inv.line_vat:
            p["/line_items/%d/vat_amount" % i] = s.amount(li.vat, c)
    return p


def L_upper(s):
    return s.upper()
