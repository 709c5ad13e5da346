# -*- coding: utf-8 -*-
"""Structured e-invoices: 0 UBL 2.1 Invoice / CreditNote, 1 UN/CEFACT CII (D16B, as in Factur-X /
ZUGFeRD 2.x), both along the EN 16931 syntax bindings; 2 (Hungarian invoices only) NAV Online
Számla InvoiceData 3.0."""
from decimal import Decimal
from xml.sax.saxutils import escape as E

from . import data

MEANS = {"transfer": "58", "card": "48", "cash": "10"}


def amt(x, cur):
    return "%.2f" % x if cur != "HUF" else "%.2f" % x


def q(x):
    return "{:f}".format(x.normalize()) if x != x.to_integral_value() else "%d" % x


def pct(r):
    return "0" if r is None else q(Decimal(r))


def exemption(inv):
    return {"E": {"hu": "AAM Alanyi adómentes", "de": "Steuerfrei gemäß § 4 UStG", "en": "Exempt", "fr": "Exonération de TVA"},
            "AE": {"hu": "Fordított adózás", "de": "Reverse Charge", "en": "Reverse charge", "fr": "Autoliquidation"}}


def render(inv, lay, rng):
    if lay.variant == 2:
        return nav(inv)
    return ubl(inv) if lay.variant % 2 == 0 else cii(inv)


def ubl_party(p, ind):
    s = ind
    out = [s + "<cac:Party>"]
    out.append(s + "  <cac:PartyName><cbc:Name>%s</cbc:Name></cac:PartyName>" % E(p.name))
    out += [s + "  <cac:PostalAddress>", s + "    <cbc:StreetName>%s</cbc:StreetName>" % E(p.street),
            s + "    <cbc:CityName>%s</cbc:CityName>" % E(p.city), s + "    <cbc:PostalZone>%s</cbc:PostalZone>" % E(p.postal_code),
            s + "    <cac:Country><cbc:IdentificationCode>%s</cbc:IdentificationCode></cac:Country>" % p.country,
            s + "  </cac:PostalAddress>"]
    if p.vat_id:
        out.append(s + "  <cac:PartyTaxScheme><cbc:CompanyID>%s</cbc:CompanyID><cac:TaxScheme><cbc:ID>VAT</cbc:ID></cac:TaxScheme></cac:PartyTaxScheme>" % p.vat_id)
    if p.tax_id:
        out.append(s + "  <cac:PartyTaxScheme><cbc:CompanyID>%s</cbc:CompanyID><cac:TaxScheme><cbc:ID>FC</cbc:ID></cac:TaxScheme></cac:PartyTaxScheme>" % p.tax_id)
    out.append(s + "  <cac:PartyLegalEntity><cbc:RegistrationName>%s</cbc:RegistrationName></cac:PartyLegalEntity>" % E(p.name))
    out.append(s + "</cac:Party>")
    return out


def ubl(inv):
    cn = inv.doc_type == "credit_note"
    root = "CreditNote" if cn else "Invoice"
    c = inv.currency
    x = ['<?xml version="1.0" encoding="UTF-8"?>',
         '<%s xmlns="urn:oasis:names:specification:ubl:schema:xsd:%s-2"' % (root, root),
         '  xmlns:cac="urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2"',
         '  xmlns:cbc="urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2">',
         "  <cbc:CustomizationID>urn:cen.eu:en16931:2017</cbc:CustomizationID>",
         "  <cbc:ID>%s</cbc:ID>" % E(inv.number),
         "  <cbc:IssueDate>%s</cbc:IssueDate>" % inv.issue.isoformat()]
    if not cn:
        x.append("  <cbc:DueDate>%s</cbc:DueDate>" % inv.due.isoformat())
        x.append("  <cbc:InvoiceTypeCode>380</cbc:InvoiceTypeCode>")
    else:
        x.append("  <cbc:CreditNoteTypeCode>381</cbc:CreditNoteTypeCode>")
    x.append("  <cbc:DocumentCurrencyCode>%s</cbc:DocumentCurrencyCode>" % c)
    if inv.order_reference:
        x.append("  <cac:OrderReference><cbc:ID>%s</cbc:ID></cac:OrderReference>" % E(inv.order_reference))
    if inv.preceding_invoice:
        x.append("  <cac:BillingReference><cac:InvoiceDocumentReference><cbc:ID>%s</cbc:ID></cac:InvoiceDocumentReference></cac:BillingReference>" % E(inv.preceding_invoice))
    x.append("  <cac:AccountingSupplierParty>")
    x += ubl_party(inv.seller, "    ")
    x.append("  </cac:AccountingSupplierParty>")
    x.append("  <cac:AccountingCustomerParty>")
    x += ubl_party(inv.buyer, "    ")
    x.append("  </cac:AccountingCustomerParty>")
    x.append("  <cac:Delivery><cbc:ActualDeliveryDate>%s</cbc:ActualDeliveryDate></cac:Delivery>" % inv.delivery.isoformat())
    x.append("  <cac:PaymentMeans>")
    x.append("    <cbc:PaymentMeansCode>%s</cbc:PaymentMeansCode>" % MEANS[inv.payment_means])
    if cn:
        x.append("    <cbc:PaymentDueDate>%s</cbc:PaymentDueDate>" % inv.due.isoformat())
    if inv.payment_means == "transfer":
        x.append("    <cac:PayeeFinancialAccount>")
        x.append("      <cbc:ID>%s</cbc:ID>" % (inv.seller.iban or inv.seller.account))
        if inv.seller.bic:
            x.append("      <cac:FinancialInstitutionBranch><cbc:ID>%s</cbc:ID></cac:FinancialInstitutionBranch>" % inv.seller.bic)
        x.append("    </cac:PayeeFinancialAccount>")
    x.append("  </cac:PaymentMeans>")
    x.append("  <cac:TaxTotal>")
    x.append('    <cbc:TaxAmount currencyID="%s">%s</cbc:TaxAmount>' % (c, amt(inv.vat, c)))
    for cat, rate, taxable, vat in inv.breakdown:
        x += ["    <cac:TaxSubtotal>",
              '      <cbc:TaxableAmount currencyID="%s">%s</cbc:TaxableAmount>' % (c, amt(taxable, c)),
              '      <cbc:TaxAmount currencyID="%s">%s</cbc:TaxAmount>' % (c, amt(vat, c)),
              "      <cac:TaxCategory>", "        <cbc:ID>%s</cbc:ID>" % cat, "        <cbc:Percent>%s</cbc:Percent>" % pct(rate)]
        if cat in ("E", "AE"):
            x.append("        <cbc:TaxExemptionReason>%s</cbc:TaxExemptionReason>" % E(exemption(inv)[cat][inv.lang]))
        x += ["        <cac:TaxScheme><cbc:ID>VAT</cbc:ID></cac:TaxScheme>", "      </cac:TaxCategory>", "    </cac:TaxSubtotal>"]
    x.append("  </cac:TaxTotal>")
    x += ["  <cac:LegalMonetaryTotal>",
          '    <cbc:LineExtensionAmount currencyID="%s">%s</cbc:LineExtensionAmount>' % (c, amt(inv.net, c)),
          '    <cbc:TaxExclusiveAmount currencyID="%s">%s</cbc:TaxExclusiveAmount>' % (c, amt(inv.net, c)),
          '    <cbc:TaxInclusiveAmount currencyID="%s">%s</cbc:TaxInclusiveAmount>' % (c, amt(inv.gross, c)),
          '    <cbc:PayableAmount currencyID="%s">%s</cbc:PayableAmount>' % (c, amt(inv.due_amount, c)),
          "  </cac:LegalMonetaryTotal>"]
    line_tag = "CreditNoteLine" if cn else "InvoiceLine"
    qty_tag = "CreditedQuantity" if cn else "InvoicedQuantity"
    for i, li in enumerate(inv.lines):
        x += ["  <cac:%s>" % line_tag, "    <cbc:ID>%d</cbc:ID>" % (i + 1),
              '    <cbc:%s unitCode="%s">%s</cbc:%s>' % (qty_tag, data.UNECE[li.unit_key], q(li.quantity), qty_tag),
              '    <cbc:LineExtensionAmount currencyID="%s">%s</cbc:LineExtensionAmount>' % (c, amt(li.net, c))]
        if li.discount:
            allowance = li.quantity * li.unit_price - li.net
            x += ["    <cac:AllowanceCharge>", "      <cbc:ChargeIndicator>false</cbc:ChargeIndicator>",
                  "      <cbc:AllowanceChargeReasonCode>95</cbc:AllowanceChargeReasonCode>",
                  "      <cbc:MultiplierFactorNumeric>%s</cbc:MultiplierFactorNumeric>" % q(li.discount),
                  '      <cbc:Amount currencyID="%s">%s</cbc:Amount>' % (c, amt(allowance, c)),
                  '      <cbc:BaseAmount currencyID="%s">%s</cbc:BaseAmount>' % (c, amt(li.quantity * li.unit_price, c)),
                  "    </cac:AllowanceCharge>"]
        x += ["    <cac:Item>", "      <cbc:Name>%s</cbc:Name>" % E(li.description),
              "      <cac:ClassifiedTaxCategory>", "        <cbc:ID>%s</cbc:ID>" % li.category,
              "        <cbc:Percent>%s</cbc:Percent>" % pct(li.rate),
              "        <cac:TaxScheme><cbc:ID>VAT</cbc:ID></cac:TaxScheme>", "      </cac:ClassifiedTaxCategory>",
              "    </cac:Item>",
              '    <cac:Price><cbc:PriceAmount currencyID="%s">%s</cbc:PriceAmount></cac:Price>' % (c, amt(li.unit_price, c)),
              "  </cac:%s>" % line_tag]
    x += ["</%s>" % root, ""]
    return "\n".join(x)


def d102(d):
    return '<udt:DateTimeString format="102">%s</udt:DateTimeString>' % d.strftime("%Y%m%d")


def cii_party(tag, p, ind):
    s = ind
    out = [s + "<ram:%s>" % tag, s + "  <ram:Name>%s</ram:Name>" % E(p.name),
           s + "  <ram:PostalTradeAddress>", s + "    <ram:PostcodeCode>%s</ram:PostcodeCode>" % E(p.postal_code),
           s + "    <ram:LineOne>%s</ram:LineOne>" % E(p.street), s + "    <ram:CityName>%s</ram:CityName>" % E(p.city),
           s + "    <ram:CountryID>%s</ram:CountryID>" % p.country, s + "  </ram:PostalTradeAddress>"]
    if p.tax_id:
        out.append(s + '  <ram:SpecifiedTaxRegistration><ram:ID schemeID="FC">%s</ram:ID></ram:SpecifiedTaxRegistration>' % p.tax_id)
    if p.vat_id:
        out.append(s + '  <ram:SpecifiedTaxRegistration><ram:ID schemeID="VA">%s</ram:ID></ram:SpecifiedTaxRegistration>' % p.vat_id)
    out.append(s + "</ram:%s>" % tag)
    return out


def cii(inv):
    c = inv.currency
    code = "381" if inv.doc_type == "credit_note" else "380"
    x = ['<?xml version="1.0" encoding="UTF-8"?>',
         '<rsm:CrossIndustryInvoice xmlns:rsm="urn:un:unece:uncefact:data:standard:CrossIndustryInvoice:100"',
         '  xmlns:ram="urn:un:unece:uncefact:data:standard:ReusableAggregateBusinessInformationEntity:100"',
         '  xmlns:udt="urn:un:unece:uncefact:data:standard:UnqualifiedDataType:100">',
         "  <rsm:ExchangedDocumentContext>",
         "    <ram:GuidelineSpecifiedDocumentContextParameter><ram:ID>urn:cen.eu:en16931:2017</ram:ID></ram:GuidelineSpecifiedDocumentContextParameter>",
         "  </rsm:ExchangedDocumentContext>",
         "  <rsm:ExchangedDocument>", "    <ram:ID>%s</ram:ID>" % E(inv.number), "    <ram:TypeCode>%s</ram:TypeCode>" % code,
         "    <ram:IssueDateTime>%s</ram:IssueDateTime>" % d102(inv.issue), "  </rsm:ExchangedDocument>",
         "  <rsm:SupplyChainTradeTransaction>"]
    for i, li in enumerate(inv.lines):
        x += ["    <ram:IncludedSupplyChainTradeLineItem>",
              "      <ram:AssociatedDocumentLineDocument><ram:LineID>%d</ram:LineID></ram:AssociatedDocumentLineDocument>" % (i + 1),
              "      <ram:SpecifiedTradeProduct><ram:Name>%s</ram:Name></ram:SpecifiedTradeProduct>" % E(li.description),
              "      <ram:SpecifiedLineTradeAgreement>",
              "        <ram:NetPriceProductTradePrice><ram:ChargeAmount>%s</ram:ChargeAmount></ram:NetPriceProductTradePrice>" % amt(li.unit_price, c),
              "      </ram:SpecifiedLineTradeAgreement>",
              '      <ram:SpecifiedLineTradeDelivery><ram:BilledQuantity unitCode="%s">%s</ram:BilledQuantity></ram:SpecifiedLineTradeDelivery>' % (data.UNECE[li.unit_key], q(li.quantity)),
              "      <ram:SpecifiedLineTradeSettlement>",
              "        <ram:ApplicableTradeTax><ram:TypeCode>VAT</ram:TypeCode><ram:CategoryCode>%s</ram:CategoryCode><ram:RateApplicablePercent>%s</ram:RateApplicablePercent></ram:ApplicableTradeTax>" % (li.category, pct(li.rate))]
        if li.discount:
            x.append("        <ram:SpecifiedTradeAllowanceCharge><ram:ChargeIndicator><udt:Indicator>false</udt:Indicator></ram:ChargeIndicator>"
                     "<ram:CalculationPercent>%s</ram:CalculationPercent><ram:BasisAmount>%s</ram:BasisAmount><ram:ActualAmount>%s</ram:ActualAmount>"
                     "<ram:ReasonCode>95</ram:ReasonCode></ram:SpecifiedTradeAllowanceCharge>" % (
                         q(li.discount), amt(li.quantity * li.unit_price, c), amt(li.quantity * li.unit_price - li.net, c)))
        x += ["        <ram:SpecifiedTradeSettlementLineMonetarySummation><ram:LineTotalAmount>%s</ram:LineTotalAmount></ram:SpecifiedTradeSettlementLineMonetarySummation>" % amt(li.net, c),
              "      </ram:SpecifiedLineTradeSettlement>", "    </ram:IncludedSupplyChainTradeLineItem>"]
    x.append("    <ram:ApplicableHeaderTradeAgreement>")
    x += cii_party("SellerTradeParty", inv.seller, "      ")
    x += cii_party("BuyerTradeParty", inv.buyer, "      ")
    if inv.order_reference:
        x.append("      <ram:BuyerOrderReferencedDocument><ram:IssuerAssignedID>%s</ram:IssuerAssignedID></ram:BuyerOrderReferencedDocument>" % E(inv.order_reference))
    x.append("    </ram:ApplicableHeaderTradeAgreement>")
    x += ["    <ram:ApplicableHeaderTradeDelivery>",
          "      <ram:ActualDeliverySupplyChainEvent><ram:OccurrenceDateTime>%s</ram:OccurrenceDateTime></ram:ActualDeliverySupplyChainEvent>" % d102(inv.delivery),
          "    </ram:ApplicableHeaderTradeDelivery>",
          "    <ram:ApplicableHeaderTradeSettlement>",
          "      <ram:InvoiceCurrencyCode>%s</ram:InvoiceCurrencyCode>" % c,
          "      <ram:SpecifiedTradeSettlementPaymentMeans>", "        <ram:TypeCode>%s</ram:TypeCode>" % MEANS[inv.payment_means]]
    if inv.payment_means == "transfer":
        if inv.seller.iban:
            x.append("        <ram:PayeePartyCreditorFinancialAccount><ram:IBANID>%s</ram:IBANID></ram:PayeePartyCreditorFinancialAccount>" % inv.seller.iban)
        else:
            x.append("        <ram:PayeePartyCreditorFinancialAccount><ram:ProprietaryID>%s</ram:ProprietaryID></ram:PayeePartyCreditorFinancialAccount>" % inv.seller.account)
        if inv.seller.bic:
            x.append("        <ram:PayeeSpecifiedCreditorFinancialInstitution><ram:BICID>%s</ram:BICID></ram:PayeeSpecifiedCreditorFinancialInstitution>" % inv.seller.bic)
    x.append("      </ram:SpecifiedTradeSettlementPaymentMeans>")
    for cat, rate, taxable, vat in inv.breakdown:
        x.append("      <ram:ApplicableTradeTax>")
        x.append("        <ram:CalculatedAmount>%s</ram:CalculatedAmount>" % amt(vat, c))
        x.append("        <ram:TypeCode>VAT</ram:TypeCode>")
        if cat in ("E", "AE"):
            x.append("        <ram:ExemptionReason>%s</ram:ExemptionReason>" % E(exemption(inv)[cat][inv.lang]))
        x += ["        <ram:BasisAmount>%s</ram:BasisAmount>" % amt(taxable, c),
              "        <ram:CategoryCode>%s</ram:CategoryCode>" % cat,
              "        <ram:RateApplicablePercent>%s</ram:RateApplicablePercent>" % pct(rate),
              "      </ram:ApplicableTradeTax>"]
    if inv.preceding_invoice:
        x.append("      <ram:InvoiceReferencedDocument><ram:IssuerAssignedID>%s</ram:IssuerAssignedID></ram:InvoiceReferencedDocument>" % E(inv.preceding_invoice))
    x += ["      <ram:SpecifiedTradePaymentTerms><ram:DueDateDateTime>%s</ram:DueDateDateTime></ram:SpecifiedTradePaymentTerms>" % d102(inv.due),
          "      <ram:SpecifiedTradeSettlementHeaderMonetarySummation>",
          "        <ram:LineTotalAmount>%s</ram:LineTotalAmount>" % amt(inv.net, c),
          "        <ram:TaxBasisTotalAmount>%s</ram:TaxBasisTotalAmount>" % amt(inv.net, c),
          '        <ram:TaxTotalAmount currencyID="%s">%s</ram:TaxTotalAmount>' % (c, amt(inv.vat, c)),
          "        <ram:GrandTotalAmount>%s</ram:GrandTotalAmount>" % amt(inv.gross, c),
          "        <ram:DuePayableAmount>%s</ram:DuePayableAmount>" % amt(inv.due_amount, c),
          "      </ram:SpecifiedTradeSettlementHeaderMonetarySummation>",
          "    </ram:ApplicableHeaderTradeSettlement>",
          "  </rsm:SupplyChainTradeTransaction>",
          "</rsm:CrossIndustryInvoice>", ""]
    return "\n".join(x)


def printed(inv):
    """JSON pointer -> the text (unescaped) of the XML element holding the value."""
    c = inv.currency
    p = {"/invoice_number": inv.number, "/seller/name": inv.seller.name, "/buyer/name": inv.buyer.name,
         "/totals/net": amt(inv.net, c), "/totals/vat": amt(inv.vat, c), "/totals/gross": amt(inv.gross, c),
         "/totals/amount_due": amt(inv.due_amount, c)}
    for who, party in (("seller", inv.seller), ("buyer", inv.buyer)):
        if party.tax_id:
            p["/%s/tax_id" % who] = party.tax_id
        if party.vat_id:
            p["/%s/vat_id" % who] = party.vat_id
    if inv.payment_means == "transfer":
        if inv.seller.iban:
            p["/payment/iban"] = inv.seller.iban
        else:
            p["/payment/account_number"] = inv.seller.account
    for i, li in enumerate(inv.lines):
        p["/line_items/%d/description" % i] = li.description
        p["/line_items/%d/net_amount" % i] = amt(li.net, c)
    return p


# --- NAV Online Számla InvoiceData 3.0 (Hungarian tax authority's invoice data report) ----------

NAV_UNITS = {"hour": "HOUR", "month": "MONTH", "pack": "PACK", "piece": "PIECE", "kg": "KILOGRAM"}
NAV_MEANS = {"transfer": "TRANSFER", "card": "CARD", "cash": "CASH"}
NAV_RATE_HUF = {"HUF": Decimal(1), "EUR": Decimal("391.45"), "USD": Decimal("356.20"), "GBP": Decimal("452.80")}


def nav_unit(li):
    """(unitOfMeasure, unitOfMeasureOwn or None): NAV's enumeration, else OWN with the printed word."""
    if li.unit_key in NAV_UNITS:
        return NAV_UNITS[li.unit_key], None
    return "OWN", li.unit


def nav_tax_number(tag, tax_id, ind):
    base, code, county = tax_id.split("-")
    return [ind + "<%s>" % tag, ind + "  <base:taxpayerId>%s</base:taxpayerId>" % base,
            ind + "  <base:vatCode>%s</base:vatCode>" % code, ind + "  <base:countyCode>%s</base:countyCode>" % county,
            ind + "</%s>" % tag]


def nav_address(tag, p, ind):
    return [ind + "<%s>" % tag, ind + "  <base:simpleAddress>",
            ind + "    <base:countryCode>%s</base:countryCode>" % p.country,
            ind + "    <base:postalCode>%s</base:postalCode>" % E(p.postal_code),
            ind + "    <base:city>%s</base:city>" % E(p.city),
            ind + "    <base:additionalAddressDetail>%s</base:additionalAddressDetail>" % E(p.street),
            ind + "  </base:simpleAddress>", ind + "</%s>" % tag]


def nav_vat_rate(tag, category, rate, ind):
    if category == "E":
        return [ind + "<%s>" % tag, ind + "  <vatExemption>", ind + "    <case>AAM</case>",
                ind + "    <reason>Alanyi adómentes</reason>", ind + "  </vatExemption>", ind + "</%s>" % tag]
    return [ind + "<%s><vatPercentage>%s</vatPercentage></%s>" % (tag, q(Decimal(rate) / 100), tag)]


def nav_buyer_is_domestic(inv):
    return inv.buyer.country == "HU"


def nav(inv):
    """InvoiceData 3.0 of a normal (not modifying) invoice; regimes standard, mixed and exempt."""
    c = inv.currency
    fx = NAV_RATE_HUF[c]

    def huf(x):
        return "%.2f" % (x * fx).quantize(Decimal("0.01"))
    x = ['<?xml version="1.0" encoding="UTF-8"?>',
         '<InvoiceData xmlns="http://schemas.nav.gov.hu/OSA/3.0/data" xmlns:base="http://schemas.nav.gov.hu/OSA/3.0/base"'
         ' xmlns:common="http://schemas.nav.gov.hu/NTCA/1.0/common">',
         "  <invoiceNumber>%s</invoiceNumber>" % E(inv.number),
         "  <invoiceIssueDate>%s</invoiceIssueDate>" % inv.issue.isoformat(),
         "  <completenessIndicator>false</completenessIndicator>",
         "  <invoiceMain>", "    <invoice>", "      <invoiceHead>", "        <supplierInfo>"]
    s = inv.seller
    x += nav_tax_number("supplierTaxNumber", s.tax_id, "          ")
    if s.vat_id:
        x.append("          <communityVatNumber>%s</communityVatNumber>" % s.vat_id)
    x.append("          <supplierName>%s</supplierName>" % E(s.name))
    x += nav_address("supplierAddress", s, "          ")
    if inv.payment_means == "transfer":
        x.append("          <supplierBankAccountNumber>%s</supplierBankAccountNumber>" % (s.account or s.iban))
    x += ["        </supplierInfo>", "        <customerInfo>"]
    b = inv.buyer
    if nav_buyer_is_domestic(inv):
        x.append("          <customerVatStatus>DOMESTIC</customerVatStatus>")
        x.append("          <customerVatData>")
        x += nav_tax_number("customerTaxNumber", b.tax_id, "            ")
        x.append("          </customerVatData>")
    else:
        x.append("          <customerVatStatus>OTHER</customerVatStatus>")
        x.append("          <customerVatData><communityVatNumber>%s</communityVatNumber></customerVatData>" % b.vat_id)
    x.append("          <customerName>%s</customerName>" % E(b.name))
    x += nav_address("customerAddress", b, "          ")
    x += ["        </customerInfo>", "        <invoiceDetail>", "          <invoiceCategory>NORMAL</invoiceCategory>",
          "          <invoiceDeliveryDate>%s</invoiceDeliveryDate>" % inv.delivery.isoformat(),
          "          <currencyCode>%s</currencyCode>" % c, "          <exchangeRate>%s</exchangeRate>" % q(fx),
          "          <paymentMethod>%s</paymentMethod>" % NAV_MEANS[inv.payment_means],
          "          <paymentDate>%s</paymentDate>" % inv.due.isoformat(),
          "          <invoiceAppearance>ELECTRONIC</invoiceAppearance>"]
    if inv.order_reference:
        x.append("          <conventionalInvoiceInfo><orderNumbers><orderNumber>%s</orderNumber></orderNumbers></conventionalInvoiceInfo>"
                 % E(inv.order_reference))
    x += ["        </invoiceDetail>", "      </invoiceHead>", "      <invoiceLines>",
          "        <mergedItemIndicator>false</mergedItemIndicator>"]
    for i, li in enumerate(inv.lines):
        uom, own = nav_unit(li)
        x += ["        <line>", "          <lineNumber>%d</lineNumber>" % (i + 1),
              "          <lineExpressionIndicator>true</lineExpressionIndicator>",
              "          <lineNatureIndicator>%s</lineNatureIndicator>" % ("SERVICE" if li.unit_key in ("hour", "month", "page", "week", "year") else "PRODUCT"),
              "          <lineDescription>%s</lineDescription>" % E(li.description),
              "          <quantity>%s</quantity>" % q(li.quantity), "          <unitOfMeasure>%s</unitOfMeasure>" % uom]
        if own:
            x.append("          <unitOfMeasureOwn>%s</unitOfMeasureOwn>" % E(own))
        x += ["          <unitPrice>%s</unitPrice>" % amt(li.unit_price, c),
              "          <unitPriceHUF>%s</unitPriceHUF>" % huf(li.unit_price)]
        if li.discount:
            x.append("          <lineDiscountData><discountDescription>Kedvezmény</discountDescription>"
                     "<discountValue>%s</discountValue><discountRate>%s</discountRate></lineDiscountData>" % (
                         amt(li.quantity * li.unit_price - li.net, c), q(li.discount / 100)))
        x += ["          <lineAmountsNormal>",
              "            <lineNetAmountData><lineNetAmount>%s</lineNetAmount><lineNetAmountHUF>%s</lineNetAmountHUF></lineNetAmountData>" % (amt(li.net, c), huf(li.net))]
        x += nav_vat_rate("lineVatRate", li.category, li.rate, "            ")
        x += ["            <lineVatData><lineVatAmount>%s</lineVatAmount><lineVatAmountHUF>%s</lineVatAmountHUF></lineVatData>" % (amt(li.vat, c), huf(li.vat)),
              "            <lineGrossAmountData><lineGrossAmountNormal>%s</lineGrossAmountNormal><lineGrossAmountNormalHUF>%s</lineGrossAmountNormalHUF></lineGrossAmountData>" % (amt(li.net + li.vat, c), huf(li.net + li.vat)),
              "          </lineAmountsNormal>", "        </line>"]
    x += ["      </invoiceLines>", "      <invoiceSummary>", "        <summaryNormal>"]
    for cat, rate, taxable, vat in inv.breakdown:
        x.append("          <summaryByVatRate>")
        x += nav_vat_rate("vatRate", cat, rate, "            ")
        x += ["            <vatRateNetData><vatRateNetAmount>%s</vatRateNetAmount><vatRateNetAmountHUF>%s</vatRateNetAmountHUF></vatRateNetData>" % (amt(taxable, c), huf(taxable)),
              "            <vatRateVatData><vatRateVatAmount>%s</vatRateVatAmount><vatRateVatAmountHUF>%s</vatRateVatAmountHUF></vatRateVatData>" % (amt(vat, c), huf(vat)),
              "          </summaryByVatRate>"]
    x += ["          <invoiceNetAmount>%s</invoiceNetAmount>" % amt(inv.net, c),
          "          <invoiceNetAmountHUF>%s</invoiceNetAmountHUF>" % huf(inv.net),
          "          <invoiceVatAmount>%s</invoiceVatAmount>" % amt(inv.vat, c),
          "          <invoiceVatAmountHUF>%s</invoiceVatAmountHUF>" % huf(inv.vat),
          "        </summaryNormal>",
          "        <summaryGrossData><invoiceGrossAmount>%s</invoiceGrossAmount><invoiceGrossAmountHUF>%s</invoiceGrossAmountHUF></summaryGrossData>" % (amt(inv.gross, c), huf(inv.gross)),
          "      </invoiceSummary>", "    </invoice>", "  </invoiceMain>", "</InvoiceData>", ""]
    return "\n".join(x)


def nav_expected(inv, expected):
    """Adjusts the printed-invoice expectation to what InvoiceData states: NAV units, no BIC, the
    buyer identified by its tax number (domestic) or its community VAT number (other)."""
    for item, li in zip(expected["line_items"], inv.lines):
        uom, own = nav_unit(li)
        item["unit"] = own or uom
    expected["payment"]["bic"] = None
    if inv.payment_means == "transfer":
        acct = inv.seller.account or inv.seller.iban
        expected["payment"]["account_number"] = inv.seller.account
        expected["payment"]["iban"] = None if inv.seller.account else acct
    if nav_buyer_is_domestic(inv):
        expected["buyer"]["vat_id"] = None
    else:
        expected["buyer"]["tax_id"] = None
    return expected


def nav_printed(inv):
    """Printed forms in InvoiceData; tax numbers are left out, as InvoiceData splits them into
    taxpayerId, vatCode and countyCode elements (the JSON holds them joined)."""
    p = printed(inv)
    p.pop("/seller/tax_id", None)
    p.pop("/buyer/tax_id", None)
    if nav_buyer_is_domestic(inv):
        p.pop("/buyer/vat_id", None)
    for i, li in enumerate(inv.lines):
        p["/line_items/%d/vat_amount" % i] = amt(li.vat, inv.currency)
    return p
