# -*- coding: utf-8 -*-
"""Word lists of the free-layout generator (freeform.py): label words and their synonyms for eight
languages (hu, de, en, fr, it, es, nl, pl), the noise blocks of business documents (letterheads,
registration lines, terms, bank blocks), and the company / address / goods lists of the four
languages that data.py does not cover. Every word list was written for this generator; every
company, person and address produced from them is made up."""
from . import data

LANGS = ("hu", "de", "en", "fr", "it", "es", "nl", "pl")
COUNTRY = {"hu": "HU", "de": "DE", "en": "GB", "fr": "FR", "it": "IT", "es": "ES", "nl": "NL", "pl": "PL"}
COUNTRY_NAMES = {
    "HU": {"hu": "Magyarország", "de": "Ungarn", "en": "Hungary", "fr": "Hongrie", "it": "Ungheria", "es": "Hungría", "nl": "Hongarije", "pl": "Węgry"},
    "DE": {"hu": "Németország", "de": "Deutschland", "en": "Germany", "fr": "Allemagne", "it": "Germania", "es": "Alemania", "nl": "Duitsland", "pl": "Niemcy"},
    "GB": {"hu": "Egyesült Királyság", "de": "Vereinigtes Königreich", "en": "United Kingdom", "fr": "Royaume-Uni", "it": "Regno Unito", "es": "Reino Unido", "nl": "Verenigd Koninkrijk", "pl": "Wielka Brytania"},
    "FR": {"hu": "Franciaország", "de": "Frankreich", "en": "France", "fr": "France", "it": "Francia", "es": "Francia", "nl": "Frankrijk", "pl": "Francja"},
    "IT": {"hu": "Olaszország", "de": "Italien", "en": "Italy", "fr": "Italie", "it": "Italia", "es": "Italia", "nl": "Italië", "pl": "Włochy"},
    "ES": {"hu": "Spanyolország", "de": "Spanien", "en": "Spain", "fr": "Espagne", "it": "Spagna", "es": "España", "nl": "Spanje", "pl": "Hiszpania"},
    "NL": {"hu": "Hollandia", "de": "Niederlande", "en": "Netherlands", "fr": "Pays-Bas", "it": "Paesi Bassi", "es": "Países Bajos", "nl": "Nederland", "pl": "Holandia"},
    "PL": {"hu": "Lengyelország", "de": "Polen", "en": "Poland", "fr": "Pologne", "it": "Polonia", "es": "Polonia", "nl": "Polen", "pl": "Polska"},
}
STANDARD_RATES = {"HU": ["27", "18", "5"], "DE": ["19", "7"], "FR": ["20", "10", "5.5"], "GB": ["20", "5"],
                  "IT": ["22", "10", "4"], "ES": ["21", "10", "4"], "NL": ["21", "9"], "PL": ["23", "8", "5"]}
CURRENCY_RATE = {"EUR": "1", "HUF": "390", "USD": "1.10", "GBP": "0.86", "PLN": "4.30", "CHF": "0.95",
                 "CZK": "25.0", "SEK": "11.5"}
SYMBOL = {"EUR": "€", "USD": "$", "GBP": "£", "HUF": "Ft", "PLN": "zł", "CHF": "CHF", "CZK": "Kč", "SEK": "kr"}
HOME_CURRENCY = {"hu": "HUF", "de": "EUR", "en": "GBP", "fr": "EUR", "it": "EUR", "es": "EUR", "nl": "EUR", "pl": "PLN"}

MONTHS = {
    "it": ["gennaio", "febbraio", "marzo", "aprile", "maggio", "giugno", "luglio", "agosto", "settembre",
           "ottobre", "novembre", "dicembre"],
    "es": ["enero", "febrero", "marzo", "abril", "mayo", "junio", "julio", "agosto", "septiembre", "octubre",
           "noviembre", "diciembre"],
    "nl": ["januari", "februari", "maart", "april", "mei", "juni", "juli", "augustus", "september", "oktober",
           "november", "december"],
    "pl": ["stycznia", "lutego", "marca", "kwietnia", "maja", "czerwca", "lipca", "sierpnia", "września",
           "października", "listopada", "grudnia"],
}

# --- companies, addresses, goods of it / es / nl / pl -------------------------------------------
NAME_STEMS = {
    "it": ["Adriatica", "Dolomiti", "Ventura", "Collina", "Aurora", "Toscana", "Marecchia", "Sole", "Ponte",
           "Vesuvio", "Lario", "Stella", "Cedro", "Brera", "Olivo"],
    "es": ["Ibérica", "Levante", "Sierra", "Mirador", "Alameda", "Guadiana", "Cantábrica", "Solana",
           "Almendro", "Tajo", "Olivar", "Brisa", "Montaña", "Faro"],
    "nl": ["Polder", "Dijkstra", "Zeeland", "Windmolen", "Grachten", "Tulp", "Veluwe", "Hollands", "Eemland",
           "Duinzicht", "Rijnmond", "Brabant", "Kempen", "Waddenzee"],
    "pl": ["Wisła", "Tatry", "Mazowsze", "Bursztyn", "Orzeł", "Karpaty", "Warta", "Podlasie", "Sokół",
           "Kaszuby", "Bieszczady", "Dąbrowa", "Zorza", "Pomorze"],
}
NAME_TRADES = {
    "it": ["Costruzioni", "Informatica", "Logistica", "Servizi", "Impianti", "Consulenze", "Trasporti",
           "Elettronica", "Arredamenti", "Tipografia"],
    "es": ["Construcciones", "Informática", "Logística", "Servicios", "Instalaciones", "Consultores",
           "Transportes", "Distribuciones", "Ingeniería", "Gráficas"],
    "nl": ["Bouw", "Automatisering", "Logistiek", "Techniek", "Installatie", "Advies", "Transport",
           "Handel", "Drukwerk", "Software"],
    "pl": ["Budownictwo", "Informatyka", "Logistyka", "Usługi", "Instalacje", "Doradztwo", "Transport",
           "Handel", "Poligrafia", "Systemy"],
}
LEGAL_FORMS = {"it": ["S.r.l.", "S.r.l.", "S.p.A.", "S.n.c.", "S.a.s."],
               "es": ["S.L.", "S.L.", "S.A.", "S.L.U.", "S.Coop."],
               "nl": ["B.V.", "B.V.", "N.V.", "V.O.F."],
               "pl": ["Sp. z o.o.", "Sp. z o.o.", "S.A.", "Sp.k.", "Sp. j."]}
STREETS = {
    "it": ["Via Roma", "Via Garibaldi", "Corso Italia", "Via Mazzini", "Piazza del Duomo", "Via Dante Alighieri",
           "Viale Europa", "Via dei Mille", "Via Cavour", "Via San Marco"],
    "es": ["Calle Mayor", "Avenida de la Constitución", "Calle Real", "Paseo del Prado", "Calle de Alcalá",
           "Avenida Diagonal", "Plaza de España", "Calle San Vicente", "Ronda de Toledo"],
    "nl": ["Dorpsstraat", "Kerkstraat", "Stationsweg", "Molenweg", "Industrieweg", "Keizersgracht",
           "Parallelweg", "Schoolstraat", "Nieuwe Gracht", "Marktplein"],
    "pl": ["ul. Marszałkowska", "ul. Długa", "ul. Kwiatowa", "al. Jana Pawła II", "ul. Piłsudskiego",
           "ul. Mickiewicza", "ul. Słoneczna", "ul. Polna", "ul. Kościuszki", "pl. Grunwaldzki"],
}
CITIES = {
    "it": [("00184", "Roma"), ("20121", "Milano"), ("10121", "Torino"), ("40121", "Bologna"), ("50123", "Firenze"),
           ("80133", "Napoli"), ("35121", "Padova"), ("16121", "Genova"), ("37121", "Verona")],
    "es": [("28013", "Madrid"), ("08002", "Barcelona"), ("46002", "Valencia"), ("41001", "Sevilla"),
           ("48001", "Bilbao"), ("50001", "Zaragoza"), ("29015", "Málaga"), ("15003", "A Coruña")],
    "nl": [("1012 AB", "Amsterdam"), ("3011 AD", "Rotterdam"), ("2511 CV", "Den Haag"), ("3511 LX", "Utrecht"),
           ("5611 AZ", "Eindhoven"), ("9711 LM", "Groningen"), ("6811 KL", "Arnhem"), ("2311 EZ", "Leiden")],
    "pl": [("00-001", "Warszawa"), ("30-001", "Kraków"), ("50-001", "Wrocław"), ("60-101", "Poznań"),
           ("80-001", "Gdańsk"), ("90-001", "Łódź"), ("20-001", "Lublin"), ("40-001", "Katowice")],
}
ITEMS = {
    "it": [("Sviluppo software", "hour", (50, 120), True), ("Canone di manutenzione mensile", "month", (200, 2000), False),
           ("Carta per fotocopie A4, 80 g", "pack", (3, 8), False), ("Supporto monitor regolabile", "piece", (30, 120), False),
           ("Spese di spedizione", "piece", (5, 40), False), ("Consulenza in sede", "hour", (70, 160), True),
           ("Vernice per interni, bianca, 10 l", "piece", (25, 70), False), ("Manodopera elettricista", "hour", (35, 70), True),
           ("Caffè in grani, 1 kg", "kg", (12, 28), True), ("Traduzione tecnica", "page", (18, 40), False),
           ("Cavo di rete Cat6, 305 m", "piece", (70, 160), False)],
    "es": [("Desarrollo de software", "hour", (45, 110), True), ("Cuota de mantenimiento mensual", "month", (180, 1900), False),
           ("Papel de copia A4, 80 g", "pack", (3, 7), False), ("Soporte para monitor", "piece", (30, 110), False),
           ("Gastos de envío", "piece", (5, 35), False), ("Consultoría presencial", "hour", (60, 150), True),
           ("Pintura plástica blanca, 10 l", "piece", (22, 65), False), ("Mano de obra, electricista", "hour", (30, 65), True),
           ("Café en grano, 1 kg", "kg", (11, 26), True), ("Traducción técnica", "page", (15, 38), False),
           ("Tornillería de acero inoxidable", "piece", (5, 25), False)],
    "nl": [("Softwareontwikkeling", "hour", (60, 130), True), ("Onderhoudscontract, maandelijks", "month", (200, 2200), False),
           ("Kopieerpapier A4, 80 g", "pack", (3, 8), False), ("Monitorarm, verstelbaar", "piece", (35, 130), False),
           ("Verzendkosten", "piece", (5, 40), False), ("Advies op locatie", "hour", (80, 170), True),
           ("Muurverf wit, 10 l", "piece", (28, 75), False), ("Arbeidsloon elektricien", "hour", (40, 80), True),
           ("Koffiebonen, 1 kg", "kg", (12, 28), True), ("Technische vertaling", "page", (20, 42), False),
           ("Netwerkkabel Cat6, 305 m", "piece", (75, 165), False)],
    "pl": [("Usługa programistyczna", "hour", (120, 380), True), ("Abonament serwisowy, miesięczny", "month", (800, 8000), False),
           ("Papier ksero A4, 80 g", "pack", (12, 30), False), ("Uchwyt do monitora", "piece", (120, 450), False),
           ("Koszty wysyłki", "piece", (15, 120), False), ("Doradztwo na miejscu", "hour", (200, 600), True),
           ("Farba biała, 10 l", "piece", (90, 260), False), ("Robocizna elektryka", "hour", (80, 200), True),
           ("Kawa ziarnista, 1 kg", "kg", (45, 110), True), ("Tłumaczenie techniczne", "page", (50, 140), False),
           ("Kabel sieciowy Cat6, 305 m", "piece", (300, 650), False)],
}
UNITS = {
    "it": {"hour": ["ore", "h"], "month": ["mese"], "pack": ["conf."], "piece": ["pz", "n."], "kg": ["kg"], "page": ["pag."], "week": ["sett."], "year": ["anno"]},
    "es": {"hour": ["h", "horas"], "month": ["mes"], "pack": ["paq."], "piece": ["ud.", "uds."], "kg": ["kg"], "page": ["pág."], "week": ["semana"], "year": ["año"]},
    "nl": {"hour": ["uur", "u"], "month": ["mnd"], "pack": ["pak"], "piece": ["st.", "stuks"], "kg": ["kg"], "page": ["pag."], "week": ["week"], "year": ["jaar"]},
    "pl": {"hour": ["godz.", "h"], "month": ["mies."], "pack": ["opak."], "piece": ["szt."], "kg": ["kg"], "page": ["str."], "week": ["tydz."], "year": ["rok"]},
}
PEOPLE = {
    "hu": ["Varga Katalin", "Molnár István", "Farkas Judit", "Balogh Tamás", "Papp Réka", "Takács László"],
    "de": ["Sabine Krüger", "Thomas Neumann", "Julia Schwarz", "Markus Zimmermann", "Katrin Braun"],
    "en": ["Rachel Moore", "Daniel Reid", "Hannah Price", "Matthew Cole", "Laura Bennett"],
    "fr": ["Isabelle Moreau", "Nicolas Petit", "Élodie Roux", "Antoine Fournier", "Claire Girard"],
    "it": ["Giulia Ricci", "Marco Esposito", "Francesca Romano", "Luca Colombo", "Sara Bruno"],
    "es": ["Lucía García", "Javier Martínez", "Carmen López", "Pablo Sánchez", "Elena Romero"],
    "nl": ["Sanne de Vries", "Bram Jansen", "Femke Visser", "Thijs Bakker", "Lotte Smit"],
    "pl": ["Anna Nowak", "Piotr Kowalski", "Katarzyna Wiśniewska", "Tomasz Wójcik", "Magdalena Kamińska"],
}

# --- label words: key -> synonyms per language ---------------------------------------------------
L = {}
L["invoice"] = {
    "hu": ["SZÁMLA", "Számla", "Számla (eredeti)", "Elektronikus számla", "Számla – eredeti példány"],
    "de": ["RECHNUNG", "Rechnung", "Rechnung Nr.", "Faktura", "Ausgangsrechnung"],
    "en": ["INVOICE", "Invoice", "Tax Invoice", "Sales Invoice", "VAT Invoice", "Commercial Invoice"],
    "fr": ["FACTURE", "Facture", "Facture n°", "Note de facturation"],
    "it": ["FATTURA", "Fattura", "Fattura di vendita", "Fattura n."],
    "es": ["FACTURA", "Factura", "Factura de venta", "Factura n.º"],
    "nl": ["FACTUUR", "Factuur", "Verkoopfactuur", "Nota"],
    "pl": ["FAKTURA", "Faktura VAT", "FAKTURA VAT", "Faktura"],
}
L["credit_note"] = {
    "hu": ["JÓVÁÍRÓ SZÁMLA", "Jóváíró számla", "Helyesbítő számla (jóváírás)"],
    "de": ["GUTSCHRIFT", "Gutschrift", "Rechnungskorrektur", "Stornorechnung"],
    "en": ["CREDIT NOTE", "Credit Note", "Credit Memo"],
    "fr": ["AVOIR", "Avoir", "Facture d'avoir"],
    "it": ["NOTA DI CREDITO", "Nota di credito"],
    "es": ["FACTURA RECTIFICATIVA", "Nota de crédito", "Abono"],
    "nl": ["CREDITNOTA", "Creditnota", "Creditfactuur"],
    "pl": ["FAKTURA KORYGUJĄCA", "Faktura korygująca", "Nota uznaniowa"],
}
L["invoice_number"] = {
    "hu": ["Számla sorszáma", "Számlaszám", "Sorszám", "Számla száma", "Bizonylatszám", "Számla sorsz."],
    "de": ["Rechnungsnummer", "Rechnungs-Nr.", "Beleg-Nr.", "Rechnung Nr.", "Re.-Nr.", "Belegnummer", "Nr."],
    "en": ["Invoice No.", "Invoice number", "Invoice #", "Inv. No.", "Invoice ID", "Document No.", "Reference", "No."],
    "fr": ["Numéro de facture", "Facture n°", "N° de facture", "Réf. facture", "Numéro", "N°"],
    "it": ["Numero fattura", "Fattura n.", "N. documento", "Numero", "Nr. fattura", "Documento n."],
    "es": ["Número de factura", "Factura n.º", "N.º factura", "Nº", "Número", "Serie/Número"],
    "nl": ["Factuurnummer", "Factuurnr.", "Nummer", "Factuur nr.", "Documentnummer"],
    "pl": ["Numer faktury", "Faktura nr", "Nr faktury", "Nr dokumentu", "Numer"],
}
L["issue_date"] = {
    "hu": ["Számla kelte", "Kiállítás dátuma", "Kelt", "Kiállítás kelte", "Kelte", "Számla kiállításának dátuma"],
    "de": ["Rechnungsdatum", "Datum", "Belegdatum", "Ausstellungsdatum", "Rechnungstag"],
    "en": ["Invoice date", "Date of issue", "Date", "Issue date", "Issued", "Invoice Date", "Dated"],
    "fr": ["Date de facture", "Date d'émission", "Date", "Émise le", "Date de facturation"],
    "it": ["Data fattura", "Data di emissione", "Data", "Data documento", "Emessa il"],
    "es": ["Fecha de factura", "Fecha de emisión", "Fecha", "Fecha de expedición"],
    "nl": ["Factuurdatum", "Datum", "Datum factuur", "Uitgiftedatum"],
    "pl": ["Data wystawienia", "Data", "Data faktury", "Wystawiono dnia"],
}
L["delivery_date"] = {
    "hu": ["Teljesítés dátuma", "Teljesítés kelte", "Teljesítés", "Teljesítési időpont", "Szállítás dátuma"],
    "de": ["Lieferdatum", "Leistungsdatum", "Liefertag", "Leistungszeitpunkt", "Datum der Lieferung"],
    "en": ["Delivery date", "Supply date", "Tax point", "Date of supply", "Shipped", "Service date"],
    "fr": ["Date de livraison", "Date de la prestation", "Livré le", "Date d'exécution"],
    "it": ["Data consegna", "Data di consegna", "Data prestazione", "Data spedizione"],
    "es": ["Fecha de entrega", "Fecha de la operación", "Fecha de servicio", "Entregado el"],
    "nl": ["Leverdatum", "Leveringsdatum", "Datum levering", "Prestatiedatum"],
    "pl": ["Data sprzedaży", "Data dostawy", "Data wykonania usługi", "Data dostawy/wykonania usługi"],
}
L["due_date"] = {
    "hu": ["Fizetési határidő", "Esedékesség", "Fizetési határidő napja", "Esedékesség dátuma", "Fiz. hat."],
    "de": ["Fällig am", "Zahlbar bis", "Zahlungsziel", "Fälligkeit", "Fälligkeitsdatum", "Zahlbar bis zum"],
    "en": ["Due date", "Payment due", "Pay by", "Due", "Payment date", "Due by"],
    "fr": ["Date d'échéance", "Échéance", "À régler avant le", "Payable le", "Date limite de paiement"],
    "it": ["Scadenza", "Data scadenza", "Pagamento entro il", "Scadenza pagamento"],
    "es": ["Fecha de vencimiento", "Vencimiento", "Pagar antes del", "Fecha de pago"],
    "nl": ["Vervaldatum", "Te betalen voor", "Uiterste betaaldatum", "Betalen vóór"],
    "pl": ["Termin płatności", "Płatne do", "Data płatności", "Termin zapłaty"],
}
L["seller"] = {
    "hu": ["Eladó", "Szállító", "Kibocsátó", "Számlakibocsátó", "Eladó adatai", "Szolgáltató"],
    "de": ["Rechnungssteller", "Verkäufer", "Lieferant", "Absender", "Auftragnehmer", "Leistender"],
    "en": ["From", "Supplier", "Seller", "Vendor", "Issued by", "Billed by", "Service provider"],
    "fr": ["Vendeur", "Fournisseur", "Émetteur", "Prestataire", "Expéditeur"],
    "it": ["Cedente", "Fornitore", "Venditore", "Cedente/Prestatore", "Mittente"],
    "es": ["Emisor", "Proveedor", "Vendedor", "Datos del emisor", "Prestador"],
    "nl": ["Leverancier", "Verkoper", "Afzender", "Van", "Dienstverlener"],
    "pl": ["Sprzedawca", "Sprzedający", "Wystawca", "Dostawca", "Usługodawca"],
}
L["buyer"] = {
    "hu": ["Vevő", "Megrendelő", "Vevő adatai", "Címzett", "Ügyfél"],
    "de": ["Rechnungsempfänger", "Kunde", "Käufer", "Empfänger", "Auftraggeber", "Rechnungsadresse"],
    "en": ["Bill to", "Customer", "Invoice to", "Buyer", "Sold to", "Client", "Billed to"],
    "fr": ["Client", "Acheteur", "Facturé à", "Destinataire", "Adresse de facturation"],
    "it": ["Cessionario", "Cliente", "Committente", "Destinatario", "Cessionario/Committente", "Spett.le"],
    "es": ["Cliente", "Comprador", "Facturar a", "Destinatario", "Datos del cliente"],
    "nl": ["Klant", "Afnemer", "Factuuradres", "Aan", "Koper", "Opdrachtgever"],
    "pl": ["Nabywca", "Kupujący", "Odbiorca", "Zamawiający", "Płatnik"],
}
L["tax_id"] = {
    "hu": ["Adószám", "Adószáma", "Adóazonosító", "Adószám (HU)"],
    "de": ["Steuernummer", "St.-Nr.", "Steuer-Nr.", "StNr"],
    "en": ["Tax ID", "Tax number", "Tax reference", "TIN"],
    "fr": ["N° fiscal", "Identifiant fiscal", "Numéro fiscal"],
    "it": ["Codice fiscale", "C.F.", "Cod. fiscale"],
    "es": ["NIF", "CIF", "N.I.F.", "NIF/CIF"],
    "nl": ["KvK-nummer", "KvK", "Kamer van Koophandel", "KvK nr."],
    "pl": ["NIP", "Numer NIP", "NIP nabywcy"],
}
L["vat_id"] = {
    "hu": ["Közösségi adószám", "EU adószám", "Közösségi adószáma", "EU ÁFA-szám"],
    "de": ["USt-IdNr.", "USt-ID", "Umsatzsteuer-ID", "UID", "USt.-Id.-Nr."],
    "en": ["VAT No.", "VAT reg. no.", "VAT number", "VAT ID", "VAT Registration"],
    "fr": ["N° TVA intracom.", "TVA intracommunautaire", "N° de TVA", "Identifiant TVA"],
    "it": ["Partita IVA", "P.IVA", "P. IVA", "Part. IVA"],
    "es": ["NIF-IVA", "N.º IVA", "IVA intracomunitario", "VAT"],
    "nl": ["Btw-nummer", "BTW-nr.", "Btw-id", "BTW nummer"],
    "pl": ["NIP UE", "VAT UE", "Numer VAT-UE", "NIP-UE"],
}
L["description"] = {
    "hu": ["Megnevezés", "Termék / szolgáltatás", "Tétel", "Termék megnevezése", "Leírás"],
    "de": ["Bezeichnung", "Beschreibung", "Artikel / Leistung", "Leistung", "Artikel", "Text"],
    "en": ["Description", "Item", "Details", "Product / service", "Particulars", "Service"],
    "fr": ["Désignation", "Description", "Libellé", "Article", "Prestation"],
    "it": ["Descrizione", "Articolo", "Descrizione articolo", "Prestazione"],
    "es": ["Descripción", "Concepto", "Artículo", "Detalle"],
    "nl": ["Omschrijving", "Artikel", "Beschrijving", "Product"],
    "pl": ["Nazwa towaru lub usługi", "Nazwa", "Opis", "Towar/usługa"],
}
L["quantity"] = {
    "hu": ["Mennyiség", "Menny.", "Db"], "de": ["Menge", "Anz.", "Anzahl", "Mng."], "en": ["Qty", "Quantity", "Units", "Qty."],
    "fr": ["Qté", "Quantité", "Qte"], "it": ["Quantità", "Q.tà", "Qtà"], "es": ["Cantidad", "Cant.", "Uds."],
    "nl": ["Aantal", "Hoeveelheid", "Aant."], "pl": ["Ilość", "Ilość szt.", "Il."],
}
L["unit"] = {
    "hu": ["Egység", "Me.", "Mértékegység", "ME"], "de": ["Einheit", "ME", "Eh."], "en": ["Unit", "UoM", "Per"],
    "fr": ["Unité", "U.", "Un."], "it": ["U.M.", "Unità", "UM"], "es": ["Unidad", "Ud.", "U.M."],
    "nl": ["Eenheid", "Eenh."], "pl": ["J.m.", "Jedn.", "Jm"],
}
L["unit_price"] = {
    "hu": ["Egységár", "Nettó egységár", "Egységár (nettó)", "Ár"], "de": ["Einzelpreis", "E-Preis", "Preis/Einheit", "EP netto", "Preis"],
    "en": ["Unit price", "Rate", "Price", "Unit cost", "Price each"], "fr": ["Prix unitaire", "P.U. HT", "PU", "Prix unit. HT"],
    "it": ["Prezzo unitario", "Prezzo", "Prezzo unit."], "es": ["Precio unitario", "Precio", "P. unit."],
    "nl": ["Prijs", "Stukprijs", "Eenheidsprijs", "Prijs per stuk"], "pl": ["Cena jedn. netto", "Cena netto", "Cena jedn."],
}
L["net_amount"] = {
    "hu": ["Nettó érték", "Nettó ár", "Nettó", "Nettó összeg", "Érték"], "de": ["Gesamt netto", "Betrag", "Netto", "Gesamtpreis", "Summe"],
    "en": ["Amount", "Net", "Line total", "Total", "Net amount", "Ext. price"], "fr": ["Montant HT", "Total HT", "Montant", "HT"],
    "it": ["Importo", "Imponibile", "Totale", "Importo netto"], "es": ["Importe", "Base imponible", "Total", "Importe neto"],
    "nl": ["Bedrag", "Totaal", "Netto", "Bedrag excl. btw"], "pl": ["Wartość netto", "Wartość", "Netto"],
}
L["vat_rate"] = {
    "hu": ["ÁFA %", "ÁFA-kulcs", "Adókulcs", "ÁFA"], "de": ["USt.", "MwSt.-Satz", "USt-Satz", "MwSt. %", "St.-Satz"],
    "en": ["VAT %", "VAT rate", "Tax", "Tax rate"], "fr": ["TVA", "Taux TVA", "TVA %"],
    "it": ["IVA", "Aliquota IVA", "% IVA", "Aliq."], "es": ["IVA", "% IVA", "Tipo IVA"],
    "nl": ["Btw", "Btw %", "Btw-tarief"], "pl": ["Stawka VAT", "VAT %", "St. VAT"],
}
L["vat_amount"] = {
    "hu": ["ÁFA összeg", "ÁFA érték", "ÁFA"], "de": ["USt.-Betrag", "MwSt.", "Steuer"], "en": ["VAT", "VAT amount", "Tax amount"],
    "fr": ["Montant TVA", "TVA"], "it": ["Importo IVA", "IVA"], "es": ["Cuota IVA", "IVA"], "nl": ["Btw-bedrag", "Btw"],
    "pl": ["Kwota VAT", "VAT"],
}
L["gross_amount"] = {
    "hu": ["Bruttó érték", "Bruttó"], "de": ["Brutto", "Gesamt brutto"], "en": ["Gross", "Total incl. VAT"], "fr": ["TTC", "Montant TTC"],
    "it": ["Totale", "Lordo"], "es": ["Total", "Importe total"], "nl": ["Incl. btw", "Totaal incl."], "pl": ["Wartość brutto", "Brutto"],
}
L["total_net"] = {
    "hu": ["Nettó összesen", "Összesen nettó", "Nettó végösszeg", "Nettó érték összesen", "Részösszeg"],
    "de": ["Summe netto", "Nettobetrag", "Zwischensumme", "Gesamt netto", "Warenwert netto", "Nettosumme"],
    "en": ["Subtotal", "Net total", "Total excl. VAT", "Total net", "Sub-total", "Net amount"],
    "fr": ["Total HT", "Montant HT", "Sous-total HT", "Total hors taxes"],
    "it": ["Totale imponibile", "Imponibile", "Totale netto", "Subtotale"],
    "es": ["Base imponible", "Subtotal", "Total sin IVA", "Importe neto"],
    "nl": ["Subtotaal", "Totaal excl. btw", "Netto totaal", "Totaal exclusief btw"],
    "pl": ["Razem netto", "Wartość netto", "Suma netto"],
}
L["total_vat"] = {
    "hu": ["ÁFA összesen", "Összes ÁFA", "ÁFA érték összesen", "Áfa"],
    "de": ["Umsatzsteuer", "zzgl. USt.", "MwSt. gesamt", "zzgl. MwSt.", "USt.-Betrag"],
    "en": ["VAT", "Total VAT", "Tax", "VAT total", "Sales tax"],
    "fr": ["TVA", "Total TVA", "Montant TVA"],
    "it": ["IVA", "Totale IVA", "Imposta"],
    "es": ["IVA", "Cuota IVA", "Total IVA"],
    "nl": ["Btw", "Totaal btw", "Btw-bedrag"],
    "pl": ["Razem VAT", "Kwota VAT", "VAT"],
}
L["total_gross"] = {
    "hu": ["Bruttó összesen", "Számla végösszege", "Bruttó végösszeg", "Végösszeg", "Összesen"],
    "de": ["Gesamtbetrag", "Rechnungsbetrag", "Summe brutto", "Endbetrag", "Gesamtsumme"],
    "en": ["Total", "Invoice total", "Total incl. VAT", "Grand total", "Total amount"],
    "fr": ["Total TTC", "Montant TTC", "Net à payer TTC", "Total"],
    "it": ["Totale fattura", "Totale documento", "Totale", "Totale IVA inclusa"],
    "es": ["Total factura", "Total", "Importe total", "Total con IVA"],
    "nl": ["Totaal", "Totaal incl. btw", "Factuurbedrag", "Totaalbedrag"],
    "pl": ["Razem brutto", "Wartość brutto", "Suma brutto", "Razem"],
}
L["amount_due"] = {
    "hu": ["Fizetendő", "Fizetendő összeg", "Fizetendő végösszeg"], "de": ["Zahlbetrag", "Zu zahlen", "Offener Betrag", "Zahlbetrag brutto"],
    "en": ["Amount due", "Balance due", "Total due", "Please pay"], "fr": ["Net à payer", "Reste à payer", "Montant dû"],
    "it": ["Netto a pagare", "Totale da pagare"], "es": ["Total a pagar", "Importe a pagar"], "nl": ["Te betalen", "Openstaand bedrag"],
    "pl": ["Do zapłaty", "Kwota do zapłaty"],
}
L["payment_means"] = {
    "hu": ["Fizetési mód", "Fizetés módja"], "de": ["Zahlungsart", "Zahlungsweise", "Zahlung"], "en": ["Payment method", "Payment terms", "Paid by"],
    "fr": ["Mode de paiement", "Règlement", "Conditions de règlement"], "it": ["Modalità di pagamento", "Pagamento"],
    "es": ["Forma de pago", "Método de pago"], "nl": ["Betaalwijze", "Betaling"], "pl": ["Sposób płatności", "Forma płatności"],
}
MEANS = {
    "transfer": {"hu": ["átutalás", "Átutalás", "Banki átutalás"], "de": ["Überweisung", "Banküberweisung"], "en": ["Bank transfer", "BACS", "Transfer"],
                 "fr": ["Virement", "Virement bancaire"], "it": ["Bonifico bancario", "Bonifico"], "es": ["Transferencia", "Transferencia bancaria"],
                 "nl": ["Overboeking", "Bankoverschrijving"], "pl": ["Przelew", "przelew"]},
    "card": {"hu": ["Bankkártya"], "de": ["Kartenzahlung", "EC-Karte"], "en": ["Card", "Credit card"], "fr": ["Carte bancaire", "CB"],
             "it": ["Carta di credito"], "es": ["Tarjeta"], "nl": ["Pin", "Pinbetaling"], "pl": ["Karta płatnicza", "Karta"]},
    "cash": {"hu": ["Készpénz"], "de": ["Barzahlung", "bar"], "en": ["Cash"], "fr": ["Espèces"], "it": ["Contanti"], "es": ["Efectivo", "Contado"],
             "nl": ["Contant"], "pl": ["Gotówka"]},
}
L["iban"] = {k: ["IBAN", "IBAN", "IBAN-Nr." if k == "de" else "IBAN:"] for k in LANGS}
L["bic"] = {k: ["BIC", "SWIFT", "BIC/SWIFT", "SWIFT code" if k == "en" else "BIC"] for k in LANGS}
L["account"] = {
    "hu": ["Bankszámlaszám", "Bankszámla", "Számlaszám (bank)", "Bankszámla száma"], "de": ["Konto", "Kontonummer"], "en": ["Account number", "Account no."],
    "fr": ["Compte", "RIB"], "it": ["Conto corrente", "C/C"], "es": ["Cuenta", "N.º de cuenta"], "nl": ["Rekeningnummer", "Rekening"],
    "pl": ["Nr konta", "Numer rachunku", "Rachunek bankowy"],
}
L["bank"] = {
    "hu": ["Bank", "Számlavezető bank", "Bankadatok"], "de": ["Bankverbindung", "Bank"], "en": ["Bank details", "Bank", "Remittance details"],
    "fr": ["Coordonnées bancaires", "Banque"], "it": ["Coordinate bancarie", "Banca d'appoggio"], "es": ["Datos bancarios", "Banco"],
    "nl": ["Bankgegevens", "Bank"], "pl": ["Dane bankowe", "Bank"],
}
L["order_reference"] = {
    "hu": ["Megrendelés száma", "Rendelésszám", "Megrendelés", "Rendelés azonosító"], "de": ["Bestellnummer", "Ihre Bestellung", "Bestell-Nr.", "Auftrag"],
    "en": ["PO number", "Purchase order", "Your reference", "Order no.", "PO #"], "fr": ["Bon de commande", "Votre commande", "N° de commande"],
    "it": ["Ordine n.", "Rif. ordine", "Vs. ordine"], "es": ["Pedido n.º", "Su pedido", "N.º de pedido"],
    "nl": ["Ordernummer", "Uw bestelling", "Inkoopordernr."], "pl": ["Nr zamówienia", "Zamówienie"],
}
L["preceding_invoice"] = {
    "hu": ["Eredeti számla száma", "Helyesbített számla", "Hivatkozott számla"], "de": ["zu Rechnung", "Ursprungsrechnung", "Bezug: Rechnung"],
    "en": ["Original invoice", "Relates to invoice", "Credit against invoice"], "fr": ["Facture d'origine", "Avoir sur facture"],
    "it": ["Fattura di riferimento", "Rif. fattura"], "es": ["Factura rectificada", "Rectifica a la factura"],
    "nl": ["Oorspronkelijke factuur", "Betreft factuur"], "pl": ["Faktura korygowana", "Dotyczy faktury"],
}
L["currency"] = {
    "hu": ["Pénznem", "Deviza"], "de": ["Währung"], "en": ["Currency"], "fr": ["Devise", "Monnaie"], "it": ["Valuta"],
    "es": ["Moneda", "Divisa"], "nl": ["Valuta", "Munteenheid"], "pl": ["Waluta"],
}
L["vat_breakdown"] = {
    "hu": ["ÁFA-összesítő", "Adókulcsonkénti összesítő", "ÁFA kimutatás"], "de": ["Umsatzsteueraufstellung", "USt.-Übersicht", "Steueraufstellung"],
    "en": ["VAT summary", "VAT analysis", "Tax summary"], "fr": ["Récapitulatif TVA", "Détail TVA", "Base / Taux / TVA"],
    "it": ["Riepilogo IVA", "Castelletto IVA"], "es": ["Desglose de IVA", "Resumen IVA"], "nl": ["Btw-specificatie", "Btw-overzicht"],
    "pl": ["Podsumowanie VAT", "Zestawienie VAT"],
}
L["rate_col"] = {"hu": ["Kulcs", "ÁFA-kulcs"], "de": ["Satz", "Steuersatz"], "en": ["Rate", "VAT rate"], "fr": ["Taux"], "it": ["Aliquota"],
                 "es": ["Tipo"], "nl": ["Tarief"], "pl": ["Stawka"]}
L["base_col"] = {"hu": ["Alap", "Nettó"], "de": ["Netto", "Bemessungsgrundlage"], "en": ["Net", "Taxable"], "fr": ["Base HT", "HT"],
                 "it": ["Imponibile"], "es": ["Base"], "nl": ["Grondslag", "Netto"], "pl": ["Netto"]}
L["tax_col"] = {"hu": ["ÁFA"], "de": ["Steuer", "USt."], "en": ["VAT", "Tax"], "fr": ["TVA"], "it": ["Imposta", "IVA"], "es": ["Cuota"],
                "nl": ["Btw"], "pl": ["VAT"]}
L["gross_col"] = {"hu": ["Bruttó"], "de": ["Brutto"], "en": ["Gross", "Total"], "fr": ["TTC"], "it": ["Totale"], "es": ["Total"],
                  "nl": ["Bruto", "Totaal"], "pl": ["Brutto"]}
L["exempt"] = {"hu": ["AAM", "adómentes", "mentes"], "de": ["steuerfrei", "befreit", "0 % (frei)"], "en": ["Exempt", "VAT exempt", "E"],
               "fr": ["Exonéré", "Exo."], "it": ["Esente", "Es. art. 10"], "es": ["Exento"], "nl": ["Vrijgesteld", "Vrij"], "pl": ["zw", "ZW"]}
L["reverse_charge"] = {"hu": ["Fordított adózás", "FAD"], "de": ["Reverse Charge", "§13b"], "en": ["Reverse charge", "RC"],
                       "fr": ["Autoliquidation"], "it": ["Inversione contabile", "Reverse charge"], "es": ["Inversión del sujeto pasivo", "ISP"],
                       "nl": ["Btw verlegd", "Verlegd"], "pl": ["Odwrotne obciążenie", "oo"]}
L["page_of"] = {"hu": ["{p}/{n}. oldal", "{p}. oldal / {n}", "Oldal: {p}/{n}"], "de": ["Seite {p} von {n}", "Seite {p}/{n}", "- {p} -"],
                "en": ["Page {p} of {n}", "Page {p}/{n}", "p. {p}"], "fr": ["Page {p} sur {n}", "Page {p}/{n}", "{p}/{n}"],
                "it": ["Pagina {p} di {n}", "Pag. {p}/{n}"], "es": ["Página {p} de {n}", "Pág. {p}/{n}"],
                "nl": ["Pagina {p} van {n}", "Blad {p}/{n}"], "pl": ["Strona {p} z {n}", "Str. {p}/{n}"]}
L["carried"] = {"hu": ["Átvitel", "Áthozat", "Folytatás a következő oldalon"], "de": ["Übertrag", "Zwischensumme Übertrag"],
                "en": ["Carried forward", "Continued overleaf", "Brought forward"], "fr": ["Report", "À reporter", "Suite page suivante"],
                "it": ["Riporto", "A riportare", "Segue"], "es": ["Suma y sigue", "Continúa"], "nl": ["Transport", "Vervolg"],
                "pl": ["Z przeniesienia", "Do przeniesienia", "Ciąg dalszy"]}
L["no"] = {"hu": ["#", "Ssz.", "Sor"], "de": ["Pos.", "Pos", "#"], "en": ["#", "No.", "Line"], "fr": ["N°", "Ligne", "#"],
           "it": ["N.", "Riga", "#"], "es": ["N.º", "Línea", "#"], "nl": ["Nr.", "Regel", "#"], "pl": ["Lp.", "L.p.", "#"]}
# extra columns that carry no extracted value
L["sku"] = {"hu": ["Cikkszám", "Kód"], "de": ["Art.-Nr.", "Artikelnr."], "en": ["SKU", "Code", "Item code"], "fr": ["Réf.", "Code article"],
            "it": ["Codice", "Cod. art."], "es": ["Código", "Ref."], "nl": ["Artikelnr.", "Code"], "pl": ["Kod", "Indeks"]}
L["vat_code"] = {"hu": ["VTSZ/SZJ", "TESZOR"], "de": ["Steuerschl.", "St.-Kz."], "en": ["Tax code", "VAT code"], "fr": ["Code TVA"],
                 "it": ["Cod. IVA"], "es": ["Cód. IVA"], "nl": ["Btw-code"], "pl": ["PKWiU", "GTU"]}
L["delivery_note"] = {"hu": ["Szállítólevél", "Szállítólevél száma"], "de": ["Lieferschein", "Lieferschein-Nr."], "en": ["Delivery note", "Despatch note"],
                      "fr": ["Bon de livraison", "BL n°"], "it": ["DDT n.", "Documento di trasporto"], "es": ["Albarán", "Albarán n.º"],
                      "nl": ["Pakbon", "Afleverbon"], "pl": ["WZ", "Dokument WZ"]}
L["customer_no"] = {"hu": ["Vevőkód", "Ügyfélszám", "Partnerkód"], "de": ["Kundennummer", "Kunden-Nr.", "Debitor"], "en": ["Customer no.", "Account ref.", "Customer ID"],
                    "fr": ["N° client", "Code client"], "it": ["Cod. cliente", "Codice cliente"], "es": ["N.º de cliente", "Código cliente"],
                    "nl": ["Klantnummer", "Debiteurnr."], "pl": ["Nr klienta", "Kod klienta"]}
L["phone"] = {"hu": ["Tel.", "Telefon"], "de": ["Tel.", "Telefon", "Fon"], "en": ["Tel", "Phone", "T:"], "fr": ["Tél.", "Téléphone"],
              "it": ["Tel.", "Telefono"], "es": ["Tel.", "Teléfono"], "nl": ["Tel.", "Telefoon", "T"], "pl": ["Tel.", "Telefon"]}
L["email"] = {k: ["E-mail", "Email", "e-mail", "Mail"] for k in LANGS}
L["web"] = {k: ["Web", "www", "Internet"] for k in LANGS}
L["contact"] = {"hu": ["Ügyintéző", "Kapcsolattartó"], "de": ["Ansprechpartner", "Bearbeiter", "Sachbearbeiter"], "en": ["Contact", "Account manager", "Your contact"],
                "fr": ["Contact", "Interlocuteur", "Suivi par"], "it": ["Referente", "Rif. interno"], "es": ["Contacto", "Atendido por"],
                "nl": ["Contactpersoon", "Behandeld door"], "pl": ["Osoba kontaktowa", "Wystawił"]}
L["register"] = {"hu": ["Cégjegyzékszám", "Cg."], "de": ["Handelsregister", "HRB", "Amtsgericht"], "en": ["Company No.", "Registered in England No.", "Reg. no."],
                 "fr": ["RCS", "SIRET", "SIREN"], "it": ["REA", "Reg. Imprese", "Cap. soc."], "es": ["Registro Mercantil", "Inscrita en el R.M."],
                 "nl": ["KvK", "Handelsregister"], "pl": ["KRS", "REGON"]}
L["director"] = {"hu": ["Ügyvezető", "Cégvezető"], "de": ["Geschäftsführer", "Geschäftsführung", "Vorstand"], "en": ["Directors", "Director"],
                 "fr": ["Gérant", "Président"], "it": ["Amministratore", "Legale rappresentante"], "es": ["Administrador", "Gerente"],
                 "nl": ["Directeur", "Directie"], "pl": ["Prezes Zarządu", "Zarząd"]}

TERMS = {
    "hu": ["A számla kiegyenlítésekor kérjük, tüntesse fel a számla sorszámát.", "Késedelmes fizetés esetén a Ptk. szerinti késedelmi kamatot számítjuk fel.",
           "A termék a vételár teljes kiegyenlítéséig az eladó tulajdonát képezi.", "Köszönjük, hogy minket választott!",
           "Reklamációt a kézhezvételtől számított 8 napon belül fogadunk el.", "A számla elektronikus úton került kiállításra, aláírás nélkül is érvényes."],
    "de": ["Bitte geben Sie bei der Zahlung die Rechnungsnummer an.", "Die Ware bleibt bis zur vollständigen Bezahlung unser Eigentum.",
           "Vielen Dank für Ihren Auftrag!", "Es gelten unsere Allgemeinen Geschäftsbedingungen.", "Zahlbar ohne Abzug innerhalb der angegebenen Frist.",
           "Bei Rückfragen stehen wir Ihnen gern zur Verfügung.", "Skonto wird nicht gewährt."],
    "en": ["Please quote the invoice number with your payment.", "Thank you for your business.", "Goods remain our property until paid in full.",
           "Interest may be charged on overdue accounts.", "All queries must be raised within 14 days.", "Terms and conditions apply; see our website.",
           "This invoice was generated electronically and is valid without signature."],
    "fr": ["Merci de rappeler le numéro de facture lors de votre règlement.", "Pas d'escompte pour paiement anticipé.",
           "En cas de retard, une indemnité forfaitaire pour frais de recouvrement sera exigée.", "Merci de votre confiance.",
           "Les marchandises restent notre propriété jusqu'au paiement intégral.", "Conditions générales de vente disponibles sur demande."],
    "it": ["Si prega di indicare il numero della fattura nella causale.", "Grazie per averci scelto.", "La merce viaggia a rischio e pericolo del committente.",
           "In caso di ritardato pagamento saranno applicati gli interessi di mora.", "Documento valido ai fini fiscali."],
    "es": ["Indique el número de factura en la transferencia.", "Gracias por su confianza.", "La mercancía sigue siendo propiedad del vendedor hasta su pago total.",
           "Los pagos fuera de plazo devengarán intereses de demora.", "Condiciones generales disponibles en nuestra web."],
    "nl": ["Vermeld bij betaling het factuurnummer.", "Bedankt voor uw opdracht.", "Op al onze leveringen zijn de algemene voorwaarden van toepassing.",
           "Bij niet tijdige betaling wordt wettelijke rente in rekening gebracht.", "Klachten binnen 8 dagen na ontvangst melden."],
    "pl": ["Prosimy o podanie numeru faktury w tytule przelewu.", "Dziękujemy za zakupy.", "Towar pozostaje własnością sprzedawcy do czasu zapłaty.",
           "Za opóźnienie w płatności naliczane będą odsetki ustawowe.", "Faktura wystawiona elektronicznie, nie wymaga podpisu."],
}
NOTES = {  # regime notes
    "reverse": {"hu": "Fordított adózás – az adót a vevő fizeti.", "de": "Steuerschuldnerschaft des Leistungsempfängers.",
                "en": "Reverse charge: the customer accounts for the VAT.", "fr": "Autoliquidation : TVA due par le preneur.",
                "it": "Operazione in inversione contabile.", "es": "Operación con inversión del sujeto pasivo.",
                "nl": "Btw verlegd naar de afnemer.", "pl": "Odwrotne obciążenie – podatek rozlicza nabywca."},
    "exempt": {"hu": "Alanyi adómentes.", "de": "Umsatzsteuerfrei.", "en": "Exempt supply, no VAT charged.", "fr": "TVA non applicable.",
               "it": "Operazione esente IVA.", "es": "Operación exenta de IVA.", "nl": "Vrijgesteld van btw.", "pl": "Zwolnione z VAT."},
}
TAGLINES = {
    "hu": ["Minőség és megbízhatóság", "Partnere a fejlődésben", "Szakértelem 1998 óta"],
    "de": ["Qualität seit 1987", "Ihr Partner für Technik", "Service aus einer Hand"],
    "en": ["Quality you can rely on", "Est. 2004", "Solutions that work"],
    "fr": ["Votre partenaire depuis 1995", "Qualité et proximité"],
    "it": ["Qualità dal 1978", "Il vostro partner di fiducia"],
    "es": ["Calidad y servicio", "Desde 1990 a su lado"],
    "nl": ["Kwaliteit sinds 1985", "Uw partner in techniek"],
    "pl": ["Jakość od 1992 roku", "Twój partner w biznesie"],
}
# labelled party lines ("Name: ...", "Address: ...") and the sum row of a VAT summary table
L["party_name"] = {"hu": ["Név", "Cégnév", "Megnevezés", "Neve"], "de": ["Name", "Firma", "Firmenname", "Name/Firma"],
                   "en": ["Name", "Company", "Company name", "Business name"], "fr": ["Nom", "Raison sociale", "Société"],
                   "it": ["Denominazione", "Ragione sociale", "Nome"], "es": ["Nombre", "Razón social", "Empresa"],
                   "nl": ["Naam", "Bedrijfsnaam", "Firma"], "pl": ["Nazwa", "Nazwa firmy", "Firma"]}
L["address"] = {"hu": ["Cím", "Székhely", "Címe"], "de": ["Anschrift", "Adresse", "Sitz"], "en": ["Address", "Registered address"],
                "fr": ["Adresse", "Siège social"], "it": ["Indirizzo", "Sede legale", "Sede"], "es": ["Dirección", "Domicilio"],
                "nl": ["Adres", "Vestigingsadres"], "pl": ["Adres", "Siedziba"]}
L["sum_row"] = {"hu": ["Összesen", "Mindösszesen", "Végösszeg", "Összesen:"], "de": ["Summe", "Gesamt", "Gesamtsumme", "Summen"],
                "en": ["Total", "Totals", "Grand total", "Sum"], "fr": ["Total", "Totaux", "Total général"],
                "it": ["Totale", "Totali", "Totale generale"], "es": ["Total", "Totales", "Suma"], "nl": ["Totaal", "Totalen", "Som"],
                "pl": ["Razem", "Ogółem", "Suma"]}
L["in_home"] = {"hu": ["Forintban", "HUF-ban", "Forintban kifejezve"], "de": ["in EUR", "Gegenwert in EUR", "umgerechnet in EUR"],
                "en": ["in GBP", "GBP equivalent", "Sterling equivalent"], "fr": ["en EUR", "Contre-valeur en EUR"],
                "it": ["in EUR", "Controvalore in EUR"], "es": ["en EUR", "Contravalor en EUR"], "nl": ["in EUR", "Tegenwaarde in EUR"],
                "pl": ["w PLN", "Równowartość w PLN", "w złotych"]}
L["exchange_rate"] = {"hu": ["Árfolyam", "Átváltási árfolyam", "MNB árfolyam"], "de": ["Wechselkurs", "Umrechnungskurs", "Kurs"],
                      "en": ["Exchange rate", "Rate of exchange", "FX rate"], "fr": ["Taux de change", "Cours"],
                      "it": ["Tasso di cambio", "Cambio"], "es": ["Tipo de cambio", "Cambio"], "nl": ["Wisselkoers", "Koers"],
                      "pl": ["Kurs waluty", "Kurs NBP", "Kurs"]}


def word_lists(lang):
    """(name stems, name trades, legal forms, streets, cities, items, units) of a language: this module's
    lists for it, else data.py's."""
    if lang in NAME_STEMS:
        return NAME_STEMS[lang], NAME_TRADES[lang], LEGAL_FORMS[lang], STREETS[lang], CITIES[lang], ITEMS[lang], UNITS[lang]
    return (data.NAME_STEMS[lang], data.NAME_TRADES[lang], data.LEGAL_FORMS[lang], data.STREETS[lang], data.CITIES[lang],
            data.ITEMS[lang], data.UNITS[lang])
