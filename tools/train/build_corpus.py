#!/usr/bin/python3
"""Build the training corpus of quarry's default model from synthetic documents.

Documents are drawn from seeded generators, written to disk as PDF, HTML, text (and, for the
fixed-layout invoices, XML) and read back through quarry's own extractors (`quarry ingest`), so that
the model is trained on exactly the text the pipeline shows it at run time. Three tasks:

  - "kie" (about 55% of the examples by default): an invoice's text -> the invoice JSON of
    schemas/invoice.schema.json (compact, keys in schema property order, null for what the document
    does not print). Most invoices come from tools/samples/invoicegen/freeform.py (a layout drawn per
    document, eight languages: hu, de, en, fr, it, es, nl, pl); --legacy-share of them from the
    fixed-layout generator (invoicegen.generate: four languages, UBL / CII / NAV XML included).
  - "schema" (about 25%): a document of another kind (contract, NDA, letter, form, receipt, report,
    order confirmation: tools/samples/docgen.py), or now and then a free-layout invoice, with a
    RANDOM JSON Schema over its facts -> the JSON answer (keys in schema order, dates YYYY-MM-DD,
    numbers as JSON numbers, strings as printed, facts the document leaves out null, arrays empty).
  - "qa" (about 20%): a question about a long multi-page document (docgen's long variants) or an
    invoice -> a rag_answer JSON {"answer", "evidence", "pages"}: the answer is the printed value, the
    evidence the line that quotes it (verbatim, cut to at most EVIDENCE_MAX characters around the
    value at word boundaries), pages its 1-based page; a question about a fact the document leaves
    out answers {"answer": null, "evidence": [], "pages": []}.

Prompts come from tools/train/prompts.json (shipped with the model as prompts.json). The "schema"
template has two placeholders: {document} (the ingested text) and {schema}, rendered by
docgen.schema_for_prompt() as follows, and the C++ side renders a user's schema the same way:

    Keep, recursively, only these keys of each schema object, in the schema's own key order:
    type, properties, required, items, enum, format, title, description (inside "properties" every
    property name is kept and its value treated the same way; "$ref" is resolved by the caller
    beforehand; everything else, e.g. "$schema", "$id", "additionalProperties", "pattern",
    "minimum", is dropped). Write the result as compact JSON: separators "," and ":", no spaces or
    newlines, non-ASCII characters as themselves (Python json.dumps(..., ensure_ascii=False,
    separators=(",", ":"))).

Each example is counted in tokens with a byte-level BPE tokenizer (--tokenizer, by default the
shipped model's tokenizer.json: the recipe train.py trains) over the ChatML rendering train.py uses,
and examples over --max-tokens are dropped here (train.py would drop them too).

The held-out split uses a disjoint seed namespace ("heldout/..." against "train/..."), and is written
first, its kie examples first. Nothing from the real-document corpora is used, read or imitated.

Usage: /usr/bin/python3 tools/train/build_corpus.py --count 30000 --heldout 600 --seed 1 \\
           --out .corpus/corpus.jsonl.gz
"""
import argparse
import gzip
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools", "samples"))

import docgen  # noqa: E402
import invoicegen  # noqa: E402
from invoicegen import freeform, lexicon, names  # noqa: E402

EVIDENCE_MAX = 200

QUESTIONS = {
    "/invoice_number": {"en": "What is the invoice number?", "hu": "Mi a számla sorszáma?",
                        "de": "Wie lautet die Rechnungsnummer?", "fr": "Quel est le numéro de la facture ?",
                        "it": "Qual è il numero della fattura?", "es": "¿Cuál es el número de factura?",
                        "nl": "Wat is het factuurnummer?", "pl": "Jaki jest numer faktury?"},
    "/issue_date": {"en": "When was the invoice issued?", "hu": "Mikor állították ki a számlát?",
                    "de": "Wann wurde die Rechnung ausgestellt?", "fr": "Quelle est la date de la facture ?",
                    "it": "Qual è la data della fattura?", "es": "¿Cuál es la fecha de la factura?",
                    "nl": "Wat is de factuurdatum?", "pl": "Kiedy wystawiono fakturę?"},
    "/due_date": {"en": "When is payment due?", "hu": "Mi a fizetési határidő?",
                  "de": "Wann ist die Zahlung fällig?", "fr": "Quelle est la date d'échéance ?",
                  "it": "Qual è la scadenza del pagamento?", "es": "¿Cuándo vence el pago?",
                  "nl": "Wat is de vervaldatum?", "pl": "Jaki jest termin płatności?"},
    "/seller/name": {"en": "Who is the seller?", "hu": "Ki az eladó?", "de": "Wer ist der Verkäufer?",
                     "fr": "Qui est le vendeur ?", "it": "Chi è il fornitore?", "es": "¿Quién es el emisor?",
                     "nl": "Wie is de leverancier?", "pl": "Kto jest sprzedawcą?"},
    "/buyer/name": {"en": "Who is the buyer?", "hu": "Ki a vevő?", "de": "Wer ist der Käufer?",
                    "fr": "Qui est l'acheteur ?", "it": "Chi è il cliente?", "es": "¿Quién es el cliente?",
                    "nl": "Wie is de klant?", "pl": "Kto jest nabywcą?"},
    "/totals/gross": {"en": "What is the gross total?", "hu": "Mennyi a bruttó végösszeg?",
                      "de": "Wie hoch ist der Bruttobetrag?", "fr": "Quel est le montant TTC ?",
                      "it": "Qual è il totale della fattura?", "es": "¿Cuál es el importe total?",
                      "nl": "Wat is het totaalbedrag?", "pl": "Jaka jest wartość brutto?"},
    "/totals/vat": {"en": "How much VAT is charged?", "hu": "Mennyi az ÁFA összege?",
                    "de": "Wie hoch ist die Umsatzsteuer?", "fr": "Quel est le montant de la TVA ?",
                    "it": "A quanto ammonta l'IVA?", "es": "¿Cuánto IVA se cobra?",
                    "nl": "Hoeveel btw wordt berekend?", "pl": "Ile wynosi VAT?"},
    "/seller/tax_id": {"en": "What is the seller's tax number?", "hu": "Mi az eladó adószáma?",
                       "de": "Wie lautet die Steuernummer des Verkäufers?", "fr": "Quel est le numéro fiscal du vendeur ?",
                       "it": "Qual è il codice fiscale del fornitore?", "es": "¿Cuál es el NIF del emisor?",
                       "nl": "Wat is het fiscale nummer van de leverancier?", "pl": "Jaki jest NIP sprzedawcy?"},
    "/payment/iban": {"en": "Which IBAN should the payment go to?", "hu": "Melyik IBAN-ra kell fizetni?",
                      "de": "Auf welche IBAN soll gezahlt werden?", "fr": "Sur quel IBAN faut-il payer ?",
                      "it": "Su quale IBAN va effettuato il pagamento?", "es": "¿A qué IBAN se debe pagar?",
                      "nl": "Naar welk IBAN moet worden betaald?", "pl": "Na jaki numer IBAN należy zapłacić?"},
    "/order_reference": {"en": "What is the purchase order number?", "hu": "Mi a megrendelés száma?",
                         "de": "Wie lautet die Bestellnummer?", "fr": "Quel est le numéro de commande ?",
                         "it": "Qual è il numero d'ordine?", "es": "¿Cuál es el número de pedido?",
                         "nl": "Wat is het ordernummer?", "pl": "Jaki jest numer zamówienia?"},
}
UNANSWERABLE = {"en": ["What is the name of the project manager?", "Which warehouse shipped the goods?"],
                "hu": ["Ki a projektvezető?"], "de": ["Wie heißt der Projektleiter?"], "fr": ["Qui est le chef de projet ?"],
                "it": ["Chi è il responsabile del progetto?"], "es": ["¿Quién es el jefe de proyecto?"],
                "nl": ["Wie is de projectleider?"], "pl": ["Kto jest kierownikiem projektu?"]}
# Questions about docgen facts in the document's language: a frame around the fact's label.
FRAMES = {"en": ["What is the {l}?", "{L}?"], "hu": ["Mi szerepel a dokumentumban: {l}?", "{L}?"],
          "de": ["Was steht im Dokument zu: {l}?", "{L}?"], "fr": ["Que dit le document : {l} ?", "{L} ?"],
          "it": ["Cosa indica il documento: {l}?", "{L}?"], "es": ["¿Qué indica el documento: {l}?", "¿{L}?"],
          "nl": ["Wat vermeldt het document: {l}?", "{L}?"], "pl": ["Co podaje dokument: {l}?", "{L}?"]}


def ordered(value, schema, defs):
    """The value with object keys in the schema's property order (recursively)."""
    if "$ref" in schema:
        schema = defs[schema["$ref"].split("/")[-1]]
    if isinstance(value, dict):
        props = schema.get("properties", {})
        out = {k: ordered(value[k], props.get(k, {}), defs) for k in props if k in value}
        for k in value:
            if k not in out:
                out[k] = value[k]
        return out
    if isinstance(value, list):
        return [ordered(v, schema.get("items", {}), defs) for v in value]
    return value


def compact(obj):
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def evidence_of(text, value):
    """(evidence, page) for the first line of the text that prints `value`, cut to EVIDENCE_MAX
    characters around it at word boundaries; (None, None) when no single line holds it."""
    for p, page_text in enumerate(text.split("\f"), 1):
        for line in page_text.split("\n"):
            k = line.find(value)
            if k < 0:
                continue
            line = line.strip()
            if len(line) > EVIDENCE_MAX:
                k = line.find(value)
                room = max(0, EVIDENCE_MAX - len(value))
                a = max(0, k - room // 2)
                b = min(len(line), k + len(value) + room // 2)
                if a > 0:
                    sp = line.find(" ", a, k)
                    a = sp + 1 if sp >= 0 else a
                if b < len(line):
                    sp = line.rfind(" ", k + len(value), b)
                    b = sp if sp >= 0 else b
                line = line[a:b].strip()
            return line, p
    return None, None


def qa_invoice(rng, lang, text, printed, prompts):
    keys = [k for k in QUESTIONS if k in printed]
    rng.shuffle(keys)
    if rng.random() < 0.15 or not keys:
        q_lang = lang if rng.random() < 0.7 else "en"
        return prompts["rag"]["user"].format(document=text, question=rng.choice(UNANSWERABLE[q_lang])), \
            compact({"answer": None, "evidence": [], "pages": []})
    for key in keys:
        ev, page = evidence_of(text, printed[key])
        if ev:
            q_lang = lang if rng.random() < 0.7 else "en"
            return prompts["rag"]["user"].format(document=text, question=QUESTIONS[key][q_lang]), \
                compact({"answer": printed[key], "evidence": [ev], "pages": [page]})
    return None


EN_QUESTIONS = {
    "contract_number": "What is the contract number?", "party_a": "Who is the client (the first party)?",
    "party_b": "Who is the contractor (the second party)?", "effective_date": "When does the agreement take effect?",
    "end_date": "When does the agreement end?", "fee": "How much is the monthly fee?", "currency": "In which currency is the fee paid?",
    "payment_days": "Within how many days must invoices be paid?", "governing_law": "Which country's law governs the agreement?",
    "city": "Which city does the document name?", "signatory": "Who signed the document?",
    "notice_days": "How many days' notice are needed to terminate?", "term_years": "For how many years must the information be kept confidential?",
    "sender": "Who sent the letter?", "recipient": "To whom is the letter addressed?", "letter_date": "What is the date of the letter?",
    "subject": "What is the subject of the letter?", "reference_number": "What is the reference number?",
    "deadline": "By when must the documents be returned?", "contact_person": "Who is the contact person?",
    "phone": "What phone number is given?", "email": "What e-mail address is given?", "applicant": "What is the applicant's name?",
    "birth_date": "What is the applicant's date of birth?", "postal_code": "What is the postal code?", "id_number": "What is the ID number?",
    "membership": "Which membership type was chosen?", "start_date": "When does it start?", "store": "Which shop issued the receipt?",
    "receipt_date": "When was the purchase made?", "receipt_number": "What is the receipt number?", "total": "What is the total amount?",
    "vat": "How much VAT is included?", "payment_method": "How was the purchase paid?", "author": "Who prepared the report?",
    "report_date": "What is the date of the report?", "period_start": "When does the reporting period start?",
    "period_end": "When does the reporting period end?", "revenue": "What was the revenue?", "employees": "How many employees are there?",
    "growth": "By how much did it grow?", "company": "Which company is the report about?", "order_number": "What is the order number?",
    "order_date": "When was the order placed?", "customer": "Who is the customer?", "delivery_date": "When is the delivery planned?",
}


def question_for(rng, key, lang):
    if rng.random() < 0.5 or lang == "en":
        d = docgen.DESCR[key]
        return rng.choice([EN_QUESTIONS[key], EN_QUESTIONS[key], "%s?" % d])
    lab = docgen.label(key, lang) if key in docgen._FL else docgen.DESCR[key]
    return rng.choice(FRAMES[lang]).format(l=lab, L=lab)


def qa_doc(rng, doc, text, prompts):
    keys = [k for k, f in doc.facts.items() if f.type != "array"]
    rng.shuffle(keys)
    absent = [k for k in keys if doc.facts[k].printed is None]
    if absent and rng.random() < 0.2:
        k = absent[0]
        return prompts["rag"]["user"].format(document=text, question=question_for(rng, k, doc.lang)), \
            compact({"answer": None, "evidence": [], "pages": []})
    by_page = {}
    for k in keys:
        pr = doc.facts[k].printed
        if pr is None:
            continue
        ev, page = evidence_of(text, pr)
        if ev:
            by_page.setdefault(page, []).append((k, pr, ev))
    if not by_page:
        return None
    page = rng.choice(sorted(by_page))  # every page as likely as the first, whatever it holds
    k, pr, ev = rng.choice(by_page[page])
    return prompts["rag"]["user"].format(document=text, question=question_for(rng, k, doc.lang)), \
        compact({"answer": pr, "evidence": [ev], "pages": [page]})


INVOICE_FACTS = {  # pointer -> (fact key, type)
    "/invoice_number": ("invoice_number", "string"), "/issue_date": ("issue_date", "date"), "/due_date": ("due_date", "date"),
    "/seller/name": ("seller_name", "string"), "/buyer/name": ("buyer_name", "string"), "/totals/gross": ("gross", "number"),
    "/totals/net": ("net", "number"), "/totals/vat": ("vat_total", "number"), "/seller/vat_id": ("seller_vat", "string"),
    "/payment/iban": ("iban", "string"), "/order_reference": ("po", "string"), "/seller/address/city": ("seller_city", "string"),
}
docgen.NAMES.update({"invoice_number": ["invoice_number", "invoice_no", "number", "document_number"],
                     "issue_date": ["issue_date", "invoice_date", "date", "issued_on"],
                     "due_date": ["due_date", "payment_due", "pay_by"], "seller_name": ["seller", "supplier", "vendor_name", "issuer"],
                     "buyer_name": ["buyer", "customer", "client_name", "bill_to"], "gross": ["total", "gross_total", "amount_payable", "total_incl_vat"],
                     "net": ["net_total", "subtotal", "total_excl_vat"], "vat_total": ["vat", "tax_total", "vat_amount"],
                     "seller_vat": ["seller_vat_id", "vat_number", "supplier_vat"], "iban": ["iban", "bank_account", "payee_iban"],
                     "po": ["purchase_order", "po_number", "order_ref"], "seller_city": ["seller_city", "supplier_town", "city"],
                     "currency_code": ["currency", "currency_code"]})
docgen.DESCR.update({"invoice_number": "Invoice number as printed", "issue_date": "Date of issue", "due_date": "Payment due date",
                     "seller_name": "Name of the seller", "buyer_name": "Name of the buyer", "gross": "Total including VAT",
                     "net": "Total excluding VAT", "vat_total": "Total VAT", "seller_vat": "VAT id of the seller",
                     "iban": "IBAN for payment", "po": "Purchase order number", "seller_city": "City of the seller",
                     "currency_code": "Currency code (ISO 4217)"})


def invoice_as_doc(s):
    """A free-layout invoice sample as a docgen.Doc (its facts), for random schemas over invoices."""
    facts = {}
    for ptr, (key, typ) in INVOICE_FACTS.items():
        value = s.expected
        for part in ptr.strip("/").split("/"):
            value = value.get(part) if isinstance(value, dict) else None
        printed = s.printed.get(ptr)
        facts[key] = docgen.Fact(typ, value if printed is not None else None, printed)
    cur = s.expected["currency"]
    facts["currency_code"] = docgen.Fact("enum", cur, cur, enum=sorted(set(["EUR", "USD", "GBP", "HUF", "PLN", cur])))
    return docgen.Doc(s.language, "invoice", s.fmt, b"", facts, [])


def plan(rng, n, mix):
    """The task and source of each of n documents."""
    out = []
    for _ in range(n):
        r = rng.random()
        if r < mix["kie"]:
            out.append("kie")
        elif r < mix["kie"] + mix["schema"]:
            out.append("schema")
        else:
            out.append("qa")
    return out


def build(quarry, count, seed, split, prompts, schema, workdir, rng, mix, legacy_share):
    samples = []
    for i, task in enumerate(plan(rng, count, mix)):
        doc_seed = "%s/%s-%d" % (split, seed, i)
        fmt = rng.choice(["pdf", "pdf", "pdf", "html", "txt", "txt"])
        if task == "qa" and rng.random() < 0.5:  # long documents are mostly PDFs: pages to cite
            fmt = "pdf"
        lang = rng.choice(lexicon.LANGS)
        try:
            if task == "kie" and rng.random() < legacy_share:
                s = invoicegen.generate(doc_seed, rng.choice(invoicegen.LANGUAGES), rng.choice(["pdf", "pdf", "html", "txt", "xml"]))
                src = "fixed"
            elif task == "kie" or (task == "schema" and rng.random() < 0.15) or (task == "qa" and rng.random() < 0.25):
                s = freeform.generate(doc_seed, lang, fmt)
                src = "free"
            else:
                s = docgen.generate(doc_seed, lang, fmt, long=(task == "qa" or rng.random() < 0.2))
                src = "doc"
        except ValueError:
            continue
        path = os.path.join(workdir, "%s-%06d.%s" % (split, i, s.extension))
        with open(path, "wb") as f:
            f.write(s.data)
        samples.append((path, task, src, s))
    res = subprocess.run([quarry, "--log-level", "error", "ingest", "-j", "1"] + [p for p, _, _, _ in samples],
                         capture_output=True, text=True)
    if res.returncode not in (0, 2):
        raise SystemExit("quarry ingest failed: " + res.stderr)
    by_source = {}
    for line in res.stdout.splitlines():
        rec = json.loads(line)
        by_source[rec["source"]] = rec
    defs = schema.get("$defs", schema.get("definitions", {}))
    examples, skipped = [], 0
    for path, task, src, s in samples:
        rec = by_source.get(path)
        os.unlink(path)
        if not rec or rec.get("status") != "ok" or not rec.get("text"):
            skipped += 1
            continue
        text = rec["text"]
        lang = s.lang if src == "doc" else s.language
        base = {"lang": lang, "split": split, "format": s.fmt, "source": src,
                "doc": s.kind if src == "doc" else "invoice", "features": s.features}
        if task == "kie":
            target = compact(ordered(s.expected, schema, defs))
            examples.append(dict(base, kind="kie", system=prompts["kie"]["system"],
                                 user=prompts["kie"]["user"].format(document=text), assistant=target))
        elif task == "schema":
            doc = s if src == "doc" else invoice_as_doc(s)
            sch, answer = docgen.random_schema(rng, doc)
            examples.append(dict(base, kind="schema", system=prompts["schema"]["system"],
                                 user=prompts["schema"]["user"].format(schema=docgen.schema_for_prompt(sch), document=text),
                                 assistant=compact(answer)))
        else:
            qa = qa_doc(rng, s, text, prompts) if src == "doc" else qa_invoice(rng, lang, text, s.printed, prompts)
            if qa is None:
                skipped += 1
                continue
            examples.append(dict(base, kind="qa", system=prompts["rag"]["system"], user=qa[0], assistant=qa[1]))
    return examples, skipped


def chat_text(e):
    """The text train.py tokenizes (render_prompt + answer), special tokens as in ChatML."""
    return "system\n%s\nuser\n%s\nassistant\n\n\n\n%s" % (e["system"], e["user"], e["assistant"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quarry", default=os.path.join(ROOT, "build", "quarry"))
    ap.add_argument("--count", type=int, default=30000, help="training documents (one example each)")
    ap.add_argument("--heldout", type=int, default=600, help="held-out documents (disjoint seed namespace)")
    ap.add_argument("--seed", default="1")
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=400, help="documents per ingest call")
    ap.add_argument("--mix", default="kie=0.55,schema=0.25,qa=0.20", help="share of documents per task")
    ap.add_argument("--legacy-share", type=float, default=0.15,
                    help="share of kie documents from the fixed-layout generator (XML included)")
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "models", "quarry-extract-11m", "tokenizer.json"),
                    help="tokenizer.json used to count tokens ('' to skip counting and length filtering)")
    ap.add_argument("--max-tokens", type=int, default=3072, help="drop examples longer than this (train.py's --max-len)")
    # the generator's options: (flag, module, attribute, help); each defaults to the module's value
    new_opt = "(0: none, and the generator draws as before this option existed)"
    options = [
        ("--party-labels", freeform, "PARTY_LABELS", "share of free-layout invoices with labelled party lines (Name: / Address:)"),
        ("--meta-first", freeform, "META_FIRST",
         "share of free-layout invoices printing the document facts above the parties " + new_opt),
        ("--dict-names", names, "DICT_NAMES",
         "share of made-up company names built from dictionary words (wordlists.py) " + new_opt),
        ("--form-items", freeform, "FORM_ITEMS",
         "share of free-layout invoices printing each item as a small form and the totals in a summary grid "
         "labelled like the items " + new_opt),
        ("--accent-initial", names, "ACCENT_INITIAL",
         "share of the dictionary words of names that start with a non-ASCII letter " + new_opt),
        ("--label-names", names, "LABEL_NAMES",
         "share of company names whose first word is a label word or starts with one " + new_opt),
        ("--wide-gaps", freeform, "WIDE_GAPS",
         "share of free-layout invoices setting the values of their label: value blocks in a far column " + new_opt),
        ("--label-prefix", names, "LABEL_PREFIX",
         "share of those label-word names whose first word only shares a label's first letters " + new_opt),
    ]
    for flag, module, attr, text in options:
        ap.add_argument(flag, type=float, default=getattr(module, attr), help=text)
    a = ap.parse_args()
    for flag, module, attr, _ in options:
        setattr(module, attr, getattr(a, flag[2:].replace("-", "_")))
    mix = {k: float(v) for k, v in (x.split("=") for x in a.mix.split(","))}
    total_share = sum(mix.values())
    mix = {k: v / total_share for k, v in mix.items()}
    prompts = json.load(open(os.path.join(HERE, "prompts.json"), encoding="utf-8"))
    schema = json.load(open(os.path.join(ROOT, "schemas", "invoice.schema.json"), encoding="utf-8"))
    bpe = None
    if a.tokenizer:
        from estimate_check import Bpe
        bpe = Bpe(a.tokenizer)
    rng = random.Random("quarry-corpus/" + a.seed)
    stats = {}
    n_ex, n_skip, n_long = 0, 0, 0
    t0 = time.time()
    with tempfile.TemporaryDirectory() as work, gzip.open(a.out, "wt", encoding="utf-8") as out:
        for split, total in (("heldout", a.heldout), ("train", a.count)):
            held = []
            for start in range(0, total, a.batch):
                exs, skipped = build(a.quarry, min(a.batch, total - start), "%s-%d" % (a.seed, start), split,
                                     prompts, schema, work, rng, mix, a.legacy_share)
                for e in exs:
                    if bpe:
                        e["tokens"] = bpe.count(chat_text(e)) + 12
                        if e["tokens"] > a.max_tokens:
                            n_long += 1
                            continue
                    st = stats.setdefault((split, e["kind"]), {"examples": 0, "tokens": 0, "answer_chars": 0})
                    st["examples"] += 1
                    st["tokens"] += e.get("tokens", 0)
                    st["answer_chars"] += len(e["assistant"])
                    if split == "heldout":
                        held.append(e)
                    else:
                        out.write(json.dumps(e, ensure_ascii=False) + "\n")
                    n_ex += 1
                n_skip += skipped
                print("%s: %d/%d documents, %d examples so far, %d skipped, %d over %d tokens, %.0f s" %
                      (split, start + min(a.batch, total - start), total, n_ex, n_skip, n_long, a.max_tokens,
                       time.time() - t0), flush=True)
            held.sort(key=lambda e: ["kie", "schema", "qa"].index(e["kind"]))
            for e in held:
                out.write(json.dumps(e, ensure_ascii=False) + "\n")
    print(json.dumps({"%s/%s" % k: v for k, v in sorted(stats.items())}, indent=1))


if __name__ == "__main__":
    main()
