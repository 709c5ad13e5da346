# -*- coding: utf-8 -*-
"""HTML invoices: 0 table-based page, 1 div/definition-list page with CSS, 2 e-mail style receipt
with inline styles and nested tables."""
from html import escape as E

from . import layout as LY

RIGHT = {"quantity", "unit_price", "discount", "net_amount", "vat_rate", "vat_amount", "gross_amount", "no"}


def party_html(p, lay, tag="div"):
    return "".join("<%s>%s</%s>" % (tag, E(x), tag) for x in LY.party_lines(p, lay))


def items_table(inv, lay, attrs=' class="items"', cell_style=""):
    cols = lay.columns
    h = ["<table%s>" % attrs, "<thead><tr>"]
    h += ['<th%s>%s</th>' % (' class="r"' if c in RIGHT else "", E(LY.header(c, lay))) for c in cols]
    h.append("</tr></thead><tbody>")
    for i, li in enumerate(inv.lines):
        h.append("<tr>" + "".join('<td%s%s>%s</td>' % (' class="r"' if c in RIGHT else "",
                                                      ' style="%s"' % cell_style if cell_style else "",
                                                      E(LY.cell(li, c, i, inv, lay))) for c in cols) + "</tr>")
    h.append("</tbody></table>")
    return "\n".join(h)


def breakdown_table(inv, lay):
    hdr = {"hu": ["ÁFA-kulcs", "Nettó", "ÁFA", "Bruttó"], "de": ["Steuersatz", "Netto", "USt.", "Brutto"],
           "en": ["Rate", "Net", "VAT", "Gross"], "fr": ["Taux", "HT", "TVA", "TTC"]}[lay.lang]
    h = ['<table class="vat"><caption>%s</caption><tr>%s</tr>' % (E(lay.L("vat_breakdown")),
                                                                   "".join("<th>%s</th>" % E(x) for x in hdr))]
    for row in LY.breakdown_rows(inv, lay):
        h.append("<tr>%s</tr>" % "".join('<td class="r">%s</td>' % E(x) for x in row))
    h.append("</table>")
    return "\n".join(h)


def kv_rows(rows, tag="tr"):
    if tag == "tr":
        return "\n".join("<tr><th>%s</th><td>%s</td></tr>" % (E(k), E(v)) for k, v in rows)
    return "\n".join("<dt>%s</dt><dd>%s</dd>" % (E(k), E(v)) for k, v in rows)


CSS = """body{font-family:Arial,Helvetica,sans-serif;font-size:13px;color:#222;margin:24px}
table{border-collapse:collapse}.items{width:100%;margin:16px 0}.items th,.items td{border:1px solid #999;padding:4px 6px}
.r{text-align:right}.vat td,.vat th{padding:2px 8px}h1{font-size:22px}.parties td{vertical-align:top;padding-right:48px}
dl{display:grid;grid-template-columns:max-content auto;gap:2px 12px}dt{font-weight:bold}.box{border:1px solid #ccc;padding:8px;margin:8px 0}
.totals{margin-left:auto}.totals th{text-align:left;padding-right:24px}.notes{font-size:11px;color:#555}"""


def render(inv, lay, rng):
    v = lay.variant % 3
    lang = lay.lang
    title = LY.title(inv, lay)
    b = ['<!DOCTYPE html>', '<html lang="%s">' % lang, "<head>", '<meta charset="utf-8">',
         "<title>%s %s</title>" % (E(title), E(inv.number))]
    if v != 2:
        b.append("<style>%s</style>" % CSS)
    b += ["</head>", "<body>"]
    totals = '<table class="totals">%s</table>' % kv_rows(LY.total_rows(inv, lay))
    pay = LY.payment_rows(inv, lay)
    show_breakdown = len(inv.breakdown) > 1 or rng.random() < 0.5
    if v == 0:
        b.append("<h1>%s</h1>" % E(title))
        b.append('<table class="parties"><tr><td><h3>%s</h3>%s</td><td><h3>%s</h3>%s</td></tr></table>' % (
            E(lay.L("seller")), party_html(inv.seller, lay), E(lay.L("buyer")), party_html(inv.buyer, lay)))
        b.append('<table class="meta">%s</table>' % kv_rows(LY.meta_rows(inv, lay)))
        b.append(items_table(inv, lay))
        if show_breakdown:
            b.append(breakdown_table(inv, lay))
        b.append(totals)
        if pay:
            b.append('<table class="pay">%s</table>' % kv_rows(pay))
    elif v == 1:
        b.append('<header><div class="box seller"><strong>%s</strong>%s</div></header>' % (
            E(lay.L("seller")), party_html(inv.seller, lay, "p")))
        b.append("<main><h1>%s <span>%s</span></h1>" % (E(title), E(inv.number)))
        b.append("<dl>%s</dl>" % kv_rows(LY.meta_rows(inv, lay)[1:], "dl"))
        b.append('<section class="box buyer"><h2>%s</h2>%s</section>' % (E(lay.L("buyer")), party_html(inv.buyer, lay, "p")))
        b.append(items_table(inv, lay))
        b.append('<section class="sum">')
        if show_breakdown:
            b.append(breakdown_table(inv, lay))
        b.append(totals + "</section>")
        if pay:
            b.append("<footer><dl>%s</dl></footer>" % kv_rows(pay, "dl"))
        b.append("</main>")
    else:
        st = 'style="font-family:Verdana,sans-serif;font-size:12px"'
        b.append('<table width="640" cellpadding="0" cellspacing="0" %s><tr><td>' % st)
        b.append('<table width="100%%"><tr><td style="font-size:20px;font-weight:bold">%s</td>'
                 '<td align="right">%s<br>%s</td></tr></table>' % (E(inv.seller.name), E(title), E(inv.number)))
        b.append('<table width="100%"><tr>')
        b.append('<td valign="top"><b>%s</b><br>%s</td>' % (E(lay.L("seller")), "<br>".join(E(x) for x in LY.party_lines(inv.seller, lay))))
        b.append('<td valign="top"><b>%s</b><br>%s</td>' % (E(lay.L("buyer")), "<br>".join(E(x) for x in LY.party_lines(inv.buyer, lay))))
        b.append("</tr></table>")
        b.append('<table>%s</table>' % kv_rows(LY.meta_rows(inv, lay)[1:]))
        b.append(items_table(inv, lay, ' width="100%" cellpadding="4" border="1"', "border-bottom:1px solid #ddd"))
        if show_breakdown:
            b.append(breakdown_table(inv, lay))
        b.append('<table align="right">%s</table>' % kv_rows(LY.total_rows(inv, lay)))
        b.append('<p style="clear:both">%s</p>' % "<br>".join("%s: %s" % (E(k), E(v)) for k, v in pay))
        b.append("</td></tr></table>")
    nts = LY.notes(inv, lay)
    if nts:
        b.append('<div class="notes">%s</div>' % "".join("<p>%s</p>" % E(n) for n in nts))
    b += ["</body>", "</html>", ""]
    return "\n".join(b)
