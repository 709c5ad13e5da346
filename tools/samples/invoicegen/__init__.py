# -*- coding: utf-8 -*-
"""Synthetic invoice generator.

    sample = generate(seed, language, fmt, layout=None, **options)

returns a Sample: the document's bytes, the expected invoice JSON (schemas/invoice.schema.json) and
the printed form of each expected value (JSON pointer -> string found in the document's text).
The same (seed, language, fmt, layout, options) always gives the same bytes.

language: hu, en, de, fr.  fmt: pdf, html, xml, txt.  layout: an int picking the variant of the
format (see each renderer; XML layout 2, NAV InvoiceData, is for Hungarian invoices only), or None
to draw one from the seed. options force parts of the invoice
(see model.build): doc_type, currency, regime, n_lines, line_vat, discount, payment_means, hu_account.
"""
import json
import random
from dataclasses import dataclass

from . import fmt as F
from . import layout as LY
from . import model, render_html, render_pdf, render_txt, render_xml

LANGUAGES = ("hu", "en", "de", "fr")
FORMATS = ("pdf", "html", "xml", "txt")
VARIANTS = {"pdf": 3, "html": 3, "xml": 2, "txt": 3}
EXTENSIONS = {"pdf": "pdf", "html": "html", "xml": "xml", "txt": "txt"}


@dataclass
class Sample:
    language: str
    fmt: str
    layout: int
    data: bytes
    expected: dict
    printed: dict
    features: list

    @property
    def extension(self):
        return EXTENSIONS[self.fmt]

    def expected_json(self):
        return json.dumps(self.expected, ensure_ascii=False, indent=2) + "\n"


def generate(seed, language, fmt, layout=None, **options):
    if language not in LANGUAGES:
        raise ValueError("language must be one of %s" % (LANGUAGES,))
    if fmt not in FORMATS:
        raise ValueError("fmt must be one of %s" % (FORMATS,))
    rng = random.Random("quarry-invoice/%s/%s/%s/%s/%s" % (seed, language, fmt, layout, sorted(options.items())))
    if layout is None:
        layout = rng.randrange(VARIANTS[fmt] if (fmt, language) != ("xml", "hu") else 3)
    nav = fmt == "xml" and layout == 2
    if nav:
        # NAV InvoiceData: Hungarian, normal invoices (a credit is a modifying invoice there), with
        # line VAT amounts; no intra-EU reverse charge.
        if language != "hu" or options.get("doc_type", "invoice") != "invoice" or options.get("regime") == "reverse_charge":
            raise ValueError("NAV InvoiceData layout: Hungarian invoices, regime standard, mixed or exempt")
        options = dict(options, doc_type="invoice", line_vat=True)
        options.setdefault("regime", rng.choice(["standard", "standard", "mixed", "exempt"]))
    inv = model.build(rng, language, options)
    lay = LY.choose(rng, language, layout, inv)
    if fmt == "xml":
        lay.style = F.machine_style()
        text = render_xml.render(inv, lay, rng)
        data = text.encode("utf-8")
        if nav:
            expected = render_xml.nav_expected(inv, inv.expected(structured=False))
            printed = render_xml.nav_printed(inv)
        else:
            expected = inv.expected(structured=True)
            printed = render_xml.printed(inv)
    else:
        expected = inv.expected(structured=False)
        if not lay.print_delivery:
            expected["delivery_date"] = None
        if not lay.flags["bic"]:
            expected["payment"]["bic"] = None
        printed = LY.printed(inv, lay)
        if fmt == "pdf":
            data = render_pdf.render(inv, lay, rng)
        elif fmt == "html":
            data = render_html.render(inv, lay, rng).encode("utf-8")
        else:
            data = render_txt.render(inv, lay, rng).encode("utf-8")
    features = [inv.doc_type, inv.regime, inv.currency, inv.payment_means]
    if any(li.discount for li in inv.lines):
        features.append("discount")
    if len(inv.lines) > 25:
        features.append("multi_page")
    if inv.line_vat and fmt != "xml":
        features.append("line_vat")
    if fmt == "xml":
        features.append("nav" if nav else ("ubl" if layout % 2 == 0 else "cii"))
    return Sample(language, fmt, layout, data, expected, printed, features)
