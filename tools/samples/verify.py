#!/usr/bin/python3
# -*- coding: utf-8 -*-
"""Checks that a generated document shows what its expected JSON says: every printed form of an
expected value occurs in the document's text (PDF through `pdftotext -layout`, HTML and XML with
character references decoded, text as is), comparing with runs of blanks collapsed."""
import html
import re
import subprocess


def document_text(data, fmt):
    if fmt == "pdf":
        r = subprocess.run(["pdftotext", "-layout", "-enc", "UTF-8", "-", "-"], input=data,
                           capture_output=True, check=True)
        return r.stdout.decode("utf-8")
    text = data.decode("utf-8")
    if fmt in ("html", "xml"):
        text = html.unescape(text)
    return text


def norm(s):
    return re.sub(r"[ \t\u00a0]+", " ", s)


def missing(data, fmt, printed):
    """The (pointer, printed form) pairs not found in the document's text."""
    text = norm(document_text(data, fmt))
    return [(k, v) for k, v in printed.items() if norm(v) not in text]
