# -*- coding: utf-8 -*-
"""PDF invoices with reportlab (platypus), text embedded with DejaVu TrueType subsets so that
Hungarian ő/ű and other Latin-2 letters extract as text. Variants: 0 classic with a ruled item grid,
1 modern with striped rows and 'page x of n' footers, 2 compact with 'Label: value' paragraphs.
Output is deterministic: reportlab's invariant mode fixes the creation date and document id."""
import io
from xml.sax.saxutils import escape as E

from reportlab import rl_config
from reportlab.lib import colors
from reportlab.lib.enums import TA_RIGHT
from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import ParagraphStyle
from reportlab.lib.units import mm
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.ttfonts import TTFont
from reportlab.platypus import Paragraph, SimpleDocTemplate, Spacer, Table, TableStyle

from . import layout as LY

rl_config.invariant = 1
FONT_DIR = "/usr/share/fonts/truetype/dejavu/"
FAMILIES = {"sans": ("DejaVuSans", "DejaVuSans-Bold"), "serif": ("DejaVuSerif", "DejaVuSerif-Bold"),
            "cond": ("DejaVuSansCondensed", "DejaVuSansCondensed-Bold")}
RIGHT = {"quantity", "unit_price", "discount", "net_amount", "vat_rate", "vat_amount", "gross_amount", "no"}


def register_fonts():
    for reg, bold in FAMILIES.values():
        for name in (reg, bold):
            if name not in pdfmetrics.getRegisteredFontNames():
                pdfmetrics.registerFont(TTFont(name, FONT_DIR + name + ".ttf"))


def build_pdf(story_fn, title, author, page_label=None, lang="en"):
    """Builds twice when pages are numbered 'x of n' (the first pass counts the pages)."""
    register_fonts()
    total = [0]

    def footer(canvas, doc):
        total[0] = max(total[0], doc.page)
        if page_label:
            canvas.saveState()
            canvas.setFont("DejaVuSans", 7.5)
            canvas.drawRightString(A4[0] - 18 * mm, 10 * mm, page_label.format(p=doc.page, n=n_pages[0] or "?"))
            canvas.restoreState()

    n_pages = [0]
    for _ in range(2 if page_label else 1):
        buf = io.BytesIO()
        doc = SimpleDocTemplate(buf, pagesize=A4, leftMargin=18 * mm, rightMargin=18 * mm, topMargin=16 * mm,
                                bottomMargin=18 * mm, title=title, author=author, subject=title,
                                creator="quarry sample generator", lang=lang)
        doc.build(story_fn(), onFirstPage=footer, onLaterPages=footer)
        n_pages[0] = total[0]
    return buf.getvalue()


def fit_widths(rows, cols, font, bold, size, avail):
    """Column widths: each column as wide as its widest cell and its header's longest word (headers
    wrap between words only); the description takes the rest."""
    w = []
    for k, c in enumerate(cols):
        if c == "description":
            w.append(None)
            continue
        w.append(max(pdfmetrics.stringWidth(r[k], font, size) for r in rows[1:]) + 10)
        words = max(pdfmetrics.stringWidth(x, bold, size) for x in rows[0][k].split()) + 8
        hdr = pdfmetrics.stringWidth(rows[0][k], bold, size) + 8
        w[-1] = max(w[-1], words, min(hdr, 62))
    rest = avail - sum(x for x in w if x)
    need = max(pdfmetrics.stringWidth(r[cols.index("description")], font, size) for r in rows[1:]) + 10
    return w, rest, need


def items_table(inv, lay, fam, variant, avail):
    reg, bold = FAMILIES[fam]
    cols = list(lay.columns)
    size = 8.5
    while True:
        rows = [[LY.header(c, lay) for c in cols]]
        rows += [[LY.cell(li, c, i, inv, lay) for c in cols] for i, li in enumerate(inv.lines)]
        w, rest, need = fit_widths(rows, cols, reg, bold, size, avail)
        if rest >= need or size <= 6.5:
            break
        size -= 0.5
    if rest < need:
        raise ValueError("item table does not fit: %s" % inv.number)
    w[cols.index("description")] = rest
    hstyle = ParagraphStyle("h", fontName=bold, fontSize=size, leading=size + 2)
    hstyle_r = ParagraphStyle("hr", parent=hstyle, alignment=TA_RIGHT)
    data = [[Paragraph(E(h), hstyle_r if c in RIGHT else hstyle) for h, c in zip(rows[0], cols)]] + rows[1:]
    t = Table(data, colWidths=w, repeatRows=1)
    st = [("FONT", (0, 1), (-1, -1), reg, size), ("VALIGN", (0, 0), (-1, -1), "TOP"),
          ("LEFTPADDING", (0, 0), (-1, -1), 3), ("RIGHTPADDING", (0, 0), (-1, -1), 3)]
    for k, c in enumerate(cols):
        if c in RIGHT:
            st.append(("ALIGN", (k, 1), (k, -1), "RIGHT"))
    if variant == 0:
        st += [("GRID", (0, 0), (-1, -1), 0.4, colors.grey), ("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#e8e8e8"))]
    elif variant == 1:
        st += [("LINEBELOW", (0, 0), (-1, 0), 1, colors.HexColor("#1f4e79")),
               ("ROWBACKGROUNDS", (0, 1), (-1, -1), [colors.white, colors.HexColor("#f2f6fa")])]
    else:
        st += [("LINEBELOW", (0, 0), (-1, 0), 0.5, colors.black), ("LINEBELOW", (0, -1), (-1, -1), 0.5, colors.black)]
    t.setStyle(TableStyle(st))
    return t


def kv_table(rows, fam, size=9, right=False, widths=None, bold_last=False):
    reg, bold = FAMILIES[fam]
    t = Table([list(r) for r in rows], colWidths=widths, hAlign="RIGHT" if right else "LEFT")
    st = [("FONT", (0, 0), (-1, -1), reg, size), ("FONT", (0, 0), (0, -1), bold, size),
          ("LEFTPADDING", (0, 0), (-1, -1), 2), ("RIGHTPADDING", (0, 0), (-1, -1), 6),
          ("TOPPADDING", (0, 0), (-1, -1), 1), ("BOTTOMPADDING", (0, 0), (-1, -1), 1)]
    if right:
        st.append(("ALIGN", (1, 0), (1, -1), "RIGHT"))
    if bold_last:
        st += [("FONT", (0, -1), (-1, -1), bold, size + 1), ("LINEABOVE", (0, -1), (-1, -1), 0.6, colors.black)]
    t.setStyle(TableStyle(st))
    return t


def party_par(label, p, lay, style, bstyle):
    lines = LY.party_lines(p, lay)
    return [Paragraph(E(label), bstyle), Paragraph("<b>%s</b><br/>%s" % (E(lines[0]), "<br/>".join(E(x) for x in lines[1:])), style)]


def render(inv, lay, rng):
    v = lay.variant % 3
    fam = ["sans", "serif", "cond"][rng.randrange(3)] if v != 1 else "sans"
    reg, bold = FAMILIES[fam]
    avail = A4[0] - 36 * mm
    body = ParagraphStyle("b", fontName=reg, fontSize=9, leading=11.5)
    small = ParagraphStyle("s", parent=body, fontSize=7.5, leading=9.5, textColor=colors.HexColor("#444444"))
    lab = ParagraphStyle("l", parent=body, fontName=bold, fontSize=9, textColor=colors.HexColor("#1f4e79"))
    ttl = ParagraphStyle("t", fontName=bold, fontSize=18 if v != 2 else 14, leading=22)
    title = LY.title(inv, lay)
    show_breakdown = len(inv.breakdown) > 1 or rng.random() < 0.5
    page_label = lay.L("page_of") if (v == 1 or len(inv.lines) > 25) else None

    def story():
        s = []
        meta = LY.meta_rows(inv, lay)
        if v == 0:
            head = Table([[Paragraph("<b>%s</b><br/>%s" % (E(inv.seller.name), "<br/>".join(E(x) for x in LY.party_lines(inv.seller, lay)[1:])), body),
                           Paragraph(E(title), ParagraphStyle("tr", parent=ttl, alignment=TA_RIGHT))]],
                         colWidths=[avail * 0.6, avail * 0.4])
            head.setStyle(TableStyle([("VALIGN", (0, 0), (-1, -1), "TOP")]))
            s += [head, Spacer(1, 8 * mm)]
            buyer = party_par(lay.L("buyer"), inv.buyer, lay, body, lab)
            t = Table([[buyer, kv_table(meta, fam, 8.5)]], colWidths=[avail * 0.5, avail * 0.5])
            t.setStyle(TableStyle([("VALIGN", (0, 0), (-1, -1), "TOP"), ("BOX", (0, 0), (0, 0), 0.4, colors.grey)]))
            s += [t, Spacer(1, 6 * mm)]
        elif v == 1:
            s += [Paragraph(E(title), ttl), Spacer(1, 2 * mm)]
            s.append(kv_table(meta, fam, 8.5))
            s.append(Spacer(1, 5 * mm))
            sp = party_par(lay.L("seller"), inv.seller, lay, body, lab)
            bp = party_par(lay.L("buyer"), inv.buyer, lay, body, lab)
            if lay.parties_side_by_side:
                t = Table([[sp, bp]], colWidths=[avail / 2, avail / 2])
                t.setStyle(TableStyle([("VALIGN", (0, 0), (-1, -1), "TOP")]))
                s.append(t)
            else:
                s += sp + [Spacer(1, 3 * mm)] + bp
            s.append(Spacer(1, 6 * mm))
        else:
            s += [Paragraph("%s &nbsp; %s" % (E(title), E(inv.number)), ttl), Spacer(1, 3 * mm)]
            for k, val in meta[1:]:
                s.append(Paragraph("<b>%s:</b> %s" % (E(k), E(val)), body))
            s.append(Spacer(1, 3 * mm))
            s += party_par(lay.L("seller"), inv.seller, lay, body, lab)
            s.append(Spacer(1, 2 * mm))
            s += party_par(lay.L("buyer"), inv.buyer, lay, body, lab)
            s.append(Spacer(1, 4 * mm))
        s.append(items_table(inv, lay, fam, v, avail))
        s.append(Spacer(1, 5 * mm))
        if show_breakdown:
            hdr = {"hu": ["ÁFA-kulcs", "Nettó", "ÁFA", "Bruttó"], "de": ["Steuersatz", "Netto", "USt.", "Brutto"],
                   "en": ["Rate", "Net", "VAT", "Gross"], "fr": ["Taux", "HT", "TVA", "TTC"]}[lay.lang]
            s.append(Paragraph(E(lay.L("vat_breakdown")), lab))
            t = Table([hdr] + [list(r) for r in LY.breakdown_rows(inv, lay)], hAlign="LEFT")
            t.setStyle(TableStyle([("FONT", (0, 0), (-1, -1), reg, 8), ("FONT", (0, 0), (-1, 0), bold, 8),
                                   ("ALIGN", (1, 0), (-1, -1), "RIGHT"), ("LINEBELOW", (0, 0), (-1, 0), 0.4, colors.grey)]))
            s += [t, Spacer(1, 4 * mm)]
        s.append(kv_table(LY.total_rows(inv, lay), fam, 9.5, right=True, bold_last=True))
        s.append(Spacer(1, 6 * mm))
        pay = LY.payment_rows(inv, lay)
        if pay:
            s.append(kv_table(pay, fam, 8.5))
            s.append(Spacer(1, 4 * mm))
        for n in LY.notes(inv, lay):
            s.append(Paragraph(E(n), small))
        return s

    return build_pdf(story, "%s %s" % (title, inv.number), inv.seller.name, page_label, lay.lang)
