# -*- coding: utf-8 -*-
"""How a document prints numbers, dates, rates and money: one Style per document, chosen by the
layout from the language's customary forms."""
import datetime as dt
from dataclasses import dataclass
from decimal import Decimal

from . import data


@dataclass
class Style:
    thousands: str          # " ", ".", ",", "" (none)
    decimal: str            # "," or "."
    date_format: str        # key of DATE_FORMATS
    currency_display: str   # "code_after", "code_before", "symbol_after", "symbol_before", "none"
    huf_decimals: bool      # print HUF amounts with ",00"
    rate_space: bool        # "27 %" instead of "27%"
    lang: str

    def number(self, x, places):
        """Decimal -> '1 234,56' (grouping by thousands, fixed places)."""
        neg = x < 0
        q = abs(x).quantize(Decimal(1).scaleb(-places)) if places else abs(x).quantize(Decimal(1))
        s = "{:f}".format(q)
        whole, _, frac = s.partition(".")
        groups = []
        while len(whole) > 3:
            groups.insert(0, whole[-3:])
            whole = whole[:-3]
        groups.insert(0, whole)
        out = self.thousands.join(groups)
        if places:
            out += self.decimal + frac
        return ("-" if neg else "") + out

    def amount(self, x, currency):
        places = 0 if currency == "HUF" and not self.huf_decimals else 2
        return self.number(x, places)

    def money(self, x, currency):
        a = self.amount(x, currency)
        sym = {"EUR": "€", "USD": "$", "GBP": "£", "HUF": "Ft"}[currency]
        d = self.currency_display
        if d == "code_after":
            return "%s %s" % (a, currency)
        if d == "code_before":
            return "%s %s" % (currency, a)
        if d == "symbol_before" and currency != "HUF":
            return ("%s%s" if currency in ("USD", "GBP") else "%s %s") % (sym, a)
        if d in ("symbol_after", "symbol_before"):
            return "%s %s" % (a, sym)
        return a

    def quantity(self, q):
        if q == q.to_integral_value():
            return "%d" % q
        return self.number(q, 1 if (q * 10) == (q * 10).to_integral_value() else 2)

    def unit_price(self, x, currency):
        return self.amount(x, currency)

    def rate(self, r):
        if r == r.to_integral_value():
            s = "%d" % r
        else:
            s = ("%s" % r.normalize()).replace(".", self.decimal)
        return s + (" %" if self.rate_space else "%")

    def date(self, d):
        return DATE_FORMATS[self.date_format](d, self.lang)


DATE_FORMATS = {
    "hu_dots_spaced": lambda d, l: "%04d. %02d. %02d." % (d.year, d.month, d.day),
    "hu_dots": lambda d, l: "%04d.%02d.%02d." % (d.year, d.month, d.day),
    "hu_month": lambda d, l: "%04d. %s %d." % (d.year, data.MONTHS["hu"][d.month - 1], d.day),
    "iso": lambda d, l: d.isoformat(),
    "dmy_dots": lambda d, l: "%02d.%02d.%04d" % (d.day, d.month, d.year),
    "dmy_slash": lambda d, l: "%02d/%02d/%04d" % (d.day, d.month, d.year),
    "mdy_long": lambda d, l: "%s %d, %04d" % (data.MONTHS["en"][d.month - 1], d.day, d.year),
    "dmy_long": lambda d, l: "%d %s %04d" % (d.day, data.MONTHS[l][d.month - 1], d.year),
    "de_long": lambda d, l: "%d. %s %04d" % (d.day, data.MONTHS["de"][d.month - 1], d.year),
}

DATE_CHOICES = {"hu": ["hu_dots_spaced", "hu_dots_spaced", "hu_dots", "hu_month", "iso"],
                "de": ["dmy_dots", "dmy_dots", "de_long"],
                "en": ["mdy_long", "dmy_long", "dmy_slash"],
                "fr": ["dmy_slash", "dmy_slash", "dmy_long"]}
NUMBER_CHOICES = {"hu": [(" ", ","), (" ", ","), (".", ",")],
                  "de": [(".", ","), (".", ","), ("", ",")],
                  "en": [(",", "."), (",", "."), ("", ".")],
                  "fr": [(" ", ","), (" ", ",")]}


def random_style(rng, lang):
    th, dec = rng.choice(NUMBER_CHOICES[lang])
    return Style(thousands=th, decimal=dec, date_format=rng.choice(DATE_CHOICES[lang]),
                 currency_display=rng.choice(["code_after", "code_after", "symbol_after", "symbol_before", "code_before"]),
                 huf_decimals=rng.random() < 0.3, rate_space=(lang in ("de", "fr") and rng.random() < 0.6) or rng.random() < 0.2,
                 lang=lang)


def machine_style():
    """The forms of UBL / CII XML: 1234.56, ISO dates."""
    return Style(thousands="", decimal=".", date_format="iso", currency_display="none", huf_decimals=True,
                 rate_space=False, lang="en")
