# -*- coding: utf-8 -*-
"""Plain-text invoices: 0 fixed-width columns, 1 'Label: value' with numbered item blocks,
2 Markdown-like pipe table. Long item lists are cut into pages separated by form feeds."""
from . import layout as LY

RIGHT = {"quantity", "unit_price", "discount", "net_amount", "vat_rate", "vat_amount", "gross_amount", "no"}


def width(s):
    return len(s)


def pad(s, w, right=False):
    return s.rjust(w) if right else s.ljust(w)


def render(inv, lay, rng):
    v = lay.variant % 3
    out = []
    title = LY.title(inv, lay)
    if v == 0:
        out += [title.center(78).rstrip(), ""]
        left = [LY.L_upper(lay.L("seller"))] + LY.party_lines(inv.seller, lay)
        right = [LY.L_upper(lay.L("buyer"))] + LY.party_lines(inv.buyer, lay)
        if lay.parties_side_by_side:
            w = max(width(x) for x in left) + 4
            for i in range(max(len(left), len(right))):
                a = left[i] if i < len(left) else ""
                b = right[i] if i < len(right) else ""
                out.append((pad(a, w) + b).rstrip())
        else:
            out += left + [""] + right
        out.append("")
        kw = max(width(k) for k, _ in LY.meta_rows(inv, lay)) + 2
        out += [pad(k + ":", kw) + val for k, val in LY.meta_rows(inv, lay)]
        out.append("")
        out += table_fixed(inv, lay)
    elif v == 1:
        out += [title, "=" * len(title), ""]
        out += ["%s: %s" % (k, val) for k, val in LY.meta_rows(inv, lay)]
        out += ["", lay.L("seller") + ":"] + ["  " + x for x in LY.party_lines(inv.seller, lay)]
        out += ["", lay.L("buyer") + ":"] + ["  " + x for x in LY.party_lines(inv.buyer, lay)]
        out.append("")
        s = lay.style
        for i, li in enumerate(inv.lines):
            out.append("%d. %s" % (i + 1, li.description))
            parts = ["%s %s x %s" % (s.quantity(li.quantity), li.unit, s.unit_price(li.unit_price, inv.currency))]
            if li.discount:
                parts.append("%s -%s" % (lay.L("discount"), s.rate(li.discount)))
            parts.append("%s: %s" % (lay.L("net_amount"), s.amount(li.net, inv.currency)))
            parts.append("%s: %s" % (lay.L("vat_rate"), LY.rate_text(li, lay)))
            if "vat_amount" in lay.columns:
                parts.append("%s: %s" % (lay.L("vat_amount"), s.amount(li.vat, inv.currency)))
            out.append("   " + ", ".join(parts))
    else:
        out += ["# " + title + " " + inv.number, ""]
        out += ["**%s:** %s  " % (k, val) for k, val in LY.meta_rows(inv, lay)]
        out += ["", "## " + lay.L("seller"), ""] + [x + "  " for x in LY.party_lines(inv.seller, lay)]
        out += ["", "## " + lay.L("buyer"), ""] + [x + "  " for x in LY.party_lines(inv.buyer, lay)]
        out.append("")
        hdr = [LY.header(c, lay) for c in lay.columns]
        out.append("| " + " | ".join(hdr) + " |")
        out.append("|" + "|".join("---:" if c in RIGHT else "---" for c in lay.columns) + "|")
        for i, li in enumerate(inv.lines):
            out.append("| " + " | ".join(LY.cell(li, c, i, inv, lay) for c in lay.columns) + " |")
    out.append("")
    if len(inv.breakdown) > 1 or rng.random() < 0.4:
        out.append(lay.L("vat_breakdown") + ":")
        for row in LY.breakdown_rows(inv, lay):
            out.append("  %-14s %16s %14s %16s" % row)
        out.append("")
    tw = max(width(k) for k, _ in LY.total_rows(inv, lay)) + 2
    for k, val in LY.total_rows(inv, lay):
        out.append(pad(k + ":", tw) + val.rjust(20))
    out.append("")
    for k, val in LY.payment_rows(inv, lay):
        out.append("%s: %s" % (k, val))
    out += [""] + LY.notes(inv, lay)
    text = "\n".join(out).rstrip() + "\n"
    return paginate(text, lay) if len(inv.lines) > 25 else text


def table_fixed(inv, lay):
    cols = lay.columns
    rows = [[LY.header(c, lay) for c in cols]]
    for i, li in enumerate(inv.lines):
        rows.append([LY.cell(li, c, i, inv, lay) for c in cols])
    w = [max(width(r[k]) for r in rows) for k in range(len(cols))]
    lines = []
    for n, r in enumerate(rows):
        lines.append("  ".join(pad(r[k], w[k], cols[k] in RIGHT) for k in range(len(cols))).rstrip())
        if n == 0:
            lines.append("-" * len(lines[0]))
    lines.append("-" * len(lines[0]))
    return lines


def paginate(text, lay, per_page=56):
    lines = text.split("\n")
    pages = [lines[i:i + per_page] for i in range(0, len(lines), per_page)]
    n = len(pages)
    out = []
    for p, chunk in enumerate(pages):
        footer = lay.L("page_of").format(p=p + 1, n=n)
        out.append("\n".join(chunk).rstrip("\n") + "\n\n" + footer.rjust(78) + "\n")
    return "\f".join(out)
