# -*- coding: utf-8 -*-
"""Synthetic business documents other than invoices, with their facts, for the "schema" and "qa"
training tasks of quarry's default model.

    doc = generate(seed, lang, fmt, kind=None, long=False)

kind: contract, nda, letter, form, receipt, report, order (an order confirmation); lang: one of
invoicegen.lexicon.LANGS; fmt: pdf, html, txt. Returns a Doc: the rendered bytes, the language and
kind, and its facts: key -> Fact(type, value (the JSON answer), printed (the string the document
prints, None when the document leaves the fact out)). Arrays (receipt / order items, report regions)
are facts of type "array" whose value is the JSON list. `long` adds boilerplate clauses until the
document runs over several pages (for question answering over long documents).

random_schema(rng, doc) draws a JSON Schema over some of the document's facts (property names,
titles, descriptions, types, nesting, nullability all random; facts the document leaves out answer
null) and returns (schema, answer). Every document, name and number is made up; the sentence
templates were written for this generator."""
import datetime as dt
import random
import re
from dataclasses import dataclass, field
from decimal import Decimal

from invoicegen import freeform as FF
from invoicegen import ids, lexicon as LX, names

KINDS = ("contract", "nda", "letter", "form", "receipt", "report", "order")


@dataclass
class Fact:
    type: str            # string, number, integer, date, enum, array
    value: object        # JSON answer
    printed: object      # printed string, or None when the document leaves it out
    enum: list = None    # enum: the allowed values
    item_types: dict = None  # array of objects: property -> type


@dataclass
class Doc:
    lang: str
    kind: str
    fmt: str
    data: bytes
    facts: dict = field(default_factory=dict)
    features: list = field(default_factory=list)

    @property
    def extension(self):
        return self.fmt


# --- labels of facts (form-like blocks) ------------------------------------------------------------
# key -> (hu, de, en, fr, it, es, nl, pl)
_FL = {
    "contract_number": ("Szerződésszám", "Vertragsnummer", "Contract No.", "N° de contrat", "Contratto n.", "N.º de contrato", "Contractnummer", "Nr umowy"),
    "party_a": ("Megbízó", "Auftraggeber", "Client", "Client", "Committente", "Cliente", "Opdrachtgever", "Zamawiający"),
    "party_b": ("Megbízott", "Auftragnehmer", "Contractor", "Prestataire", "Appaltatore", "Contratista", "Opdrachtnemer", "Wykonawca"),
    "effective_date": ("Hatálybalépés", "Inkrafttreten", "Effective date", "Date d'effet", "Decorrenza", "Fecha de entrada en vigor", "Ingangsdatum", "Data wejścia w życie"),
    "end_date": ("Lejárat", "Vertragsende", "Expiry date", "Date d'expiration", "Scadenza", "Fecha de vencimiento", "Einddatum", "Data zakończenia"),
    "fee": ("Díj", "Vergütung", "Fee", "Rémunération", "Corrispettivo", "Honorarios", "Vergoeding", "Wynagrodzenie"),
    "currency": ("Pénznem", "Währung", "Currency", "Devise", "Valuta", "Moneda", "Valuta", "Waluta"),
    "payment_days": ("Fizetési határidő (nap)", "Zahlungsziel (Tage)", "Payment terms (days)", "Délai de paiement (jours)", "Termini di pagamento (giorni)", "Plazo de pago (días)", "Betalingstermijn (dagen)", "Termin płatności (dni)"),
    "governing_law": ("Irányadó jog", "Anwendbares Recht", "Governing law", "Droit applicable", "Legge applicabile", "Ley aplicable", "Toepasselijk recht", "Prawo właściwe"),
    "city": ("Helység", "Ort", "Place", "Lieu", "Luogo", "Lugar", "Plaats", "Miejscowość"),
    "signatory": ("Aláíró", "Unterzeichner", "Signed by", "Signataire", "Firmatario", "Firmante", "Ondertekenaar", "Podpisujący"),
    "notice_days": ("Felmondási idő (nap)", "Kündigungsfrist (Tage)", "Notice period (days)", "Préavis (jours)", "Preavviso (giorni)", "Preaviso (días)", "Opzegtermijn (dagen)", "Okres wypowiedzenia (dni)"),
    "term_years": ("Titoktartás időtartama (év)", "Geheimhaltungsdauer (Jahre)", "Confidentiality term (years)", "Durée de confidentialité (ans)", "Durata riservatezza (anni)", "Duración de confidencialidad (años)", "Duur geheimhouding (jaren)", "Okres poufności (lata)"),
    "sender": ("Feladó", "Absender", "From", "Expéditeur", "Mittente", "Remitente", "Afzender", "Nadawca"),
    "recipient": ("Címzett", "Empfänger", "To", "Destinataire", "Destinatario", "Destinatario", "Geadresseerde", "Adresat"),
    "letter_date": ("Dátum", "Datum", "Date", "Date", "Data", "Fecha", "Datum", "Data"),
    "subject": ("Tárgy", "Betreff", "Subject", "Objet", "Oggetto", "Asunto", "Onderwerp", "Dotyczy"),
    "reference_number": ("Iktatószám", "Aktenzeichen", "Our ref.", "Notre réf.", "Ns. rif.", "Nuestra ref.", "Ons kenmerk", "Znak sprawy"),
    "deadline": ("Határidő", "Frist", "Deadline", "Date limite", "Termine", "Plazo", "Uiterste datum", "Termin"),
    "contact_person": ("Ügyintéző", "Ansprechpartner", "Contact", "Contact", "Referente", "Contacto", "Contactpersoon", "Osoba kontaktowa"),
    "phone": ("Telefon", "Telefon", "Phone", "Téléphone", "Telefono", "Teléfono", "Telefoon", "Telefon"),
    "email": ("E-mail", "E-Mail", "Email", "Courriel", "E-mail", "Correo electrónico", "E-mail", "E-mail"),
    "applicant": ("Kérelmező neve", "Name des Antragstellers", "Applicant name", "Nom du demandeur", "Nome del richiedente", "Nombre del solicitante", "Naam aanvrager", "Imię i nazwisko wnioskodawcy"),
    "birth_date": ("Születési dátum", "Geburtsdatum", "Date of birth", "Date de naissance", "Data di nascita", "Fecha de nacimiento", "Geboortedatum", "Data urodzenia"),
    "postal_code": ("Irányítószám", "PLZ", "Postcode", "Code postal", "CAP", "Código postal", "Postcode", "Kod pocztowy"),
    "id_number": ("Azonosító szám", "Ausweisnummer", "ID number", "N° d'identité", "N. documento", "N.º de documento", "Identiteitsnummer", "Nr dowodu"),
    "membership": ("Tagság típusa", "Mitgliedschaft", "Membership type", "Type d'adhésion", "Tipo di iscrizione", "Tipo de afiliación", "Soort lidmaatschap", "Rodzaj członkostwa"),
    "start_date": ("Kezdő dátum", "Beginn", "Start date", "Date de début", "Data di inizio", "Fecha de inicio", "Startdatum", "Data rozpoczęcia"),
    "store": ("Üzlet", "Geschäft", "Store", "Magasin", "Negozio", "Tienda", "Winkel", "Sklep"),
    "receipt_date": ("Dátum", "Datum", "Date", "Date", "Data", "Fecha", "Datum", "Data"),
    "receipt_number": ("Nyugtaszám", "Beleg-Nr.", "Receipt no.", "Ticket n°", "Scontrino n.", "Ticket n.º", "Bonnummer", "Nr paragonu"),
    "total": ("Összesen", "Summe", "Total", "Total", "Totale", "Total", "Totaal", "Suma"),
    "vat": ("ÁFA", "MwSt.", "VAT", "TVA", "IVA", "IVA", "Btw", "VAT"),
    "payment_method": ("Fizetés módja", "Zahlungsart", "Payment", "Paiement", "Pagamento", "Forma de pago", "Betaling", "Płatność"),
    "author": ("Készítette", "Verfasser", "Prepared by", "Rédigé par", "Redatto da", "Elaborado por", "Opgesteld door", "Sporządził"),
    "report_date": ("Dátum", "Datum", "Date", "Date", "Data", "Fecha", "Datum", "Data"),
    "period_start": ("Időszak kezdete", "Zeitraum von", "Period from", "Période du", "Periodo dal", "Periodo desde", "Periode van", "Okres od"),
    "period_end": ("Időszak vége", "Zeitraum bis", "Period to", "Période au", "Periodo al", "Periodo hasta", "Periode tot", "Okres do"),
    "revenue": ("Árbevétel", "Umsatz", "Revenue", "Chiffre d'affaires", "Fatturato", "Ingresos", "Omzet", "Przychody"),
    "employees": ("Létszám", "Mitarbeiter", "Headcount", "Effectif", "Dipendenti", "Empleados", "Medewerkers", "Zatrudnienie"),
    "growth": ("Növekedés", "Wachstum", "Growth", "Croissance", "Crescita", "Crecimiento", "Groei", "Wzrost"),
    "order_number": ("Rendelésszám", "Auftragsnummer", "Order number", "N° de commande", "Ordine n.", "N.º de pedido", "Ordernummer", "Nr zamówienia"),
    "order_date": ("Rendelés dátuma", "Auftragsdatum", "Order date", "Date de commande", "Data ordine", "Fecha del pedido", "Orderdatum", "Data zamówienia"),
    "customer": ("Vevő", "Kunde", "Customer", "Client", "Cliente", "Cliente", "Klant", "Klient"),
    "delivery_date": ("Szállítási dátum", "Liefertermin", "Delivery date", "Date de livraison", "Data di consegna", "Fecha de entrega", "Leverdatum", "Termin dostawy"),
}
_LI = {l: i for i, l in enumerate(("hu", "de", "en", "fr", "it", "es", "nl", "pl"))}


def label(key, lang):
    return _FL[key][_LI[lang]]


TITLES = {
    "contract": ("SZOLGÁLTATÁSI SZERZŐDÉS", "DIENSTLEISTUNGSVERTRAG", "SERVICES AGREEMENT", "CONTRAT DE PRESTATION DE SERVICES", "CONTRATTO DI SERVIZI", "CONTRATO DE PRESTACIÓN DE SERVICIOS", "DIENSTVERLENINGSOVEREENKOMST", "UMOWA O ŚWIADCZENIE USŁUG"),
    "nda": ("TITOKTARTÁSI MEGÁLLAPODÁS", "GEHEIMHALTUNGSVEREINBARUNG", "NON-DISCLOSURE AGREEMENT", "ACCORD DE CONFIDENTIALITÉ", "ACCORDO DI RISERVATEZZA", "ACUERDO DE CONFIDENCIALIDAD", "GEHEIMHOUDINGSOVEREENKOMST", "UMOWA O ZACHOWANIU POUFNOŚCI"),
    "form": ("Jelentkezési lap", "Anmeldeformular", "Application form", "Formulaire d'inscription", "Modulo di iscrizione", "Formulario de inscripción", "Aanmeldformulier", "Formularz zgłoszeniowy"),
    "receipt": ("NYUGTA", "KASSENBON", "RECEIPT", "TICKET DE CAISSE", "SCONTRINO", "TICKET", "KASSABON", "PARAGON"),
    "report": ("Éves jelentés", "Jahresbericht", "Annual report", "Rapport annuel", "Relazione annuale", "Informe anual", "Jaarverslag", "Raport roczny"),
    "order": ("RENDELÉSVISSZAIGAZOLÁS", "AUFTRAGSBESTÄTIGUNG", "ORDER CONFIRMATION", "CONFIRMATION DE COMMANDE", "CONFERMA D'ORDINE", "CONFIRMACIÓN DE PEDIDO", "ORDERBEVESTIGING", "POTWIERDZENIE ZAMÓWIENIA"),
}

# Sentences stating facts; {x} is the printed form of fact x. A sentence is used only when all its
# facts are printed.
SENT = {
    "contract": {
        "en": ["This Services Agreement (No. {contract_number}) is made between {party_a} (the \"Client\") and {party_b} (the \"Contractor\").",
               "This Agreement takes effect on {effective_date} and ends on {end_date}.",
               "The Client shall pay the Contractor a fee of {fee} per month.",
               "Invoices are payable within {payment_days} days of receipt.",
               "Either party may terminate this Agreement by giving {notice_days} days' written notice.",
               "This Agreement is governed by the laws of {governing_law}.",
               "Signed at {city} on {effective_date}. For the Client: {signatory}."],
        "de": ["Dieser Dienstleistungsvertrag (Nr. {contract_number}) wird zwischen {party_a} (\"Auftraggeber\") und {party_b} (\"Auftragnehmer\") geschlossen.",
               "Der Vertrag tritt am {effective_date} in Kraft und endet am {end_date}.",
               "Der Auftraggeber zahlt dem Auftragnehmer eine monatliche Vergütung von {fee}.",
               "Rechnungen sind innerhalb von {payment_days} Tagen nach Eingang zu bezahlen.",
               "Jede Partei kann den Vertrag mit einer Frist von {notice_days} Tagen schriftlich kündigen.",
               "Es gilt das Recht von {governing_law}.",
               "{city}, den {effective_date}. Für den Auftraggeber: {signatory}."],
        "fr": ["Le présent contrat de prestation (n° {contract_number}) est conclu entre {party_a} (le « Client ») et {party_b} (le « Prestataire »).",
               "Le contrat prend effet le {effective_date} et expire le {end_date}.",
               "Le Client verse au Prestataire une rémunération mensuelle de {fee}.",
               "Les factures sont payables sous {payment_days} jours à compter de leur réception.",
               "Chaque partie peut résilier le contrat moyennant un préavis écrit de {notice_days} jours.",
               "Le contrat est soumis au droit de {governing_law}.",
               "Fait à {city}, le {effective_date}. Pour le Client : {signatory}."],
        "hu": ["Jelen szolgáltatási szerződés ({contract_number} számú) létrejött {party_a} (Megbízó) és {party_b} (Megbízott) között.",
               "A szerződés {effective_date} napján lép hatályba, és {end_date} napján jár le.",
               "A Megbízó havonta {fee} díjat fizet a Megbízottnak.",
               "A számlák a kézhezvételtől számított {payment_days} napon belül esedékesek.",
               "Bármelyik fél {notice_days} napos írásbeli felmondási idővel felmondhatja a szerződést.",
               "A szerződésre {governing_law} joga irányadó.",
               "Kelt: {city}, {effective_date}. A Megbízó részéről: {signatory}."],
        "it": ["Il presente contratto di servizi (n. {contract_number}) è stipulato tra {party_a} (il \"Committente\") e {party_b} (l'\"Appaltatore\").",
               "Il contratto decorre dal {effective_date} e scade il {end_date}.",
               "Il Committente corrisponde all'Appaltatore un compenso mensile di {fee}.",
               "Le fatture sono pagabili entro {payment_days} giorni dal ricevimento.",
               "Ciascuna parte può recedere con un preavviso scritto di {notice_days} giorni.",
               "Il contratto è regolato dalla legge di {governing_law}.",
               "Letto e sottoscritto a {city}, il {effective_date}. Per il Committente: {signatory}."],
        "es": ["El presente contrato de servicios (n.º {contract_number}) se celebra entre {party_a} (el \"Cliente\") y {party_b} (el \"Contratista\").",
               "El contrato entra en vigor el {effective_date} y finaliza el {end_date}.",
               "El Cliente abonará al Contratista unos honorarios mensuales de {fee}.",
               "Las facturas se pagarán en un plazo de {payment_days} días desde su recepción.",
               "Cualquiera de las partes podrá resolver el contrato con un preaviso escrito de {notice_days} días.",
               "El contrato se rige por la legislación de {governing_law}.",
               "En {city}, a {effective_date}. Por el Cliente: {signatory}."],
        "nl": ["Deze dienstverleningsovereenkomst (nr. {contract_number}) wordt gesloten tussen {party_a} (\"Opdrachtgever\") en {party_b} (\"Opdrachtnemer\").",
               "De overeenkomst gaat in op {effective_date} en eindigt op {end_date}.",
               "Opdrachtgever betaalt Opdrachtnemer een maandelijkse vergoeding van {fee}.",
               "Facturen dienen binnen {payment_days} dagen na ontvangst te worden voldaan.",
               "Elke partij kan de overeenkomst opzeggen met een schriftelijke opzegtermijn van {notice_days} dagen.",
               "Op deze overeenkomst is het recht van {governing_law} van toepassing.",
               "Getekend te {city} op {effective_date}. Namens Opdrachtgever: {signatory}."],
        "pl": ["Niniejsza umowa o świadczenie usług (nr {contract_number}) zostaje zawarta pomiędzy {party_a} (\"Zamawiający\") a {party_b} (\"Wykonawca\").",
               "Umowa wchodzi w życie z dniem {effective_date} i wygasa z dniem {end_date}.",
               "Zamawiający zapłaci Wykonawcy miesięczne wynagrodzenie w wysokości {fee}.",
               "Faktury są płatne w terminie {payment_days} dni od ich otrzymania.",
               "Każda ze stron może wypowiedzieć umowę z zachowaniem {notice_days}-dniowego okresu wypowiedzenia.",
               "Umowa podlega prawu {governing_law}.",
               "Sporządzono w {city}, dnia {effective_date}. W imieniu Zamawiającego: {signatory}."],
    },
    "nda": {
        "en": ["This Non-Disclosure Agreement is entered into on {effective_date} by {party_a} (the \"Disclosing Party\") and {party_b} (the \"Receiving Party\").",
               "The Receiving Party shall keep the Confidential Information secret for {term_years} years from the date of disclosure.",
               "This Agreement shall be governed by and construed in accordance with the laws of {governing_law}.",
               "Executed in {city}. Signature of the Disclosing Party: {signatory}."],
        "de": ["Diese Geheimhaltungsvereinbarung wird am {effective_date} zwischen {party_a} (\"offenlegende Partei\") und {party_b} (\"empfangende Partei\") geschlossen.",
               "Die empfangende Partei hält die vertraulichen Informationen für die Dauer von {term_years} Jahren geheim.",
               "Diese Vereinbarung unterliegt dem Recht von {governing_law}.",
               "Unterzeichnet in {city}. Für die offenlegende Partei: {signatory}."],
        "fr": ["Le présent accord de confidentialité est conclu le {effective_date} entre {party_a} (la « Partie divulgatrice ») et {party_b} (la « Partie destinataire »).",
               "La Partie destinataire s'engage à garder les Informations confidentielles secrètes pendant {term_years} ans.",
               "Le présent accord est régi par le droit de {governing_law}.",
               "Fait à {city}. Pour la Partie divulgatrice : {signatory}."],
        "hu": ["Jelen titoktartási megállapodást {effective_date} napján kötötte {party_a} (Átadó Fél) és {party_b} (Átvevő Fél).",
               "Az Átvevő Fél a bizalmas információkat {term_years} évig köteles titokban tartani.",
               "A megállapodásra {governing_law} joga irányadó.",
               "Kelt {city} városában. Az Átadó Fél képviseletében: {signatory}."],
        "it": ["Il presente accordo di riservatezza è concluso il {effective_date} tra {party_a} (la \"Parte Divulgante\") e {party_b} (la \"Parte Ricevente\").",
               "La Parte Ricevente manterrà riservate le Informazioni per {term_years} anni.",
               "L'accordo è regolato dalla legge di {governing_law}.",
               "Firmato a {city}. Per la Parte Divulgante: {signatory}."],
        "es": ["El presente acuerdo de confidencialidad se suscribe el {effective_date} entre {party_a} (la \"Parte Reveladora\") y {party_b} (la \"Parte Receptora\").",
               "La Parte Receptora mantendrá la Información Confidencial en secreto durante {term_years} años.",
               "Este acuerdo se rige por la legislación de {governing_law}.",
               "Firmado en {city}. Por la Parte Reveladora: {signatory}."],
        "nl": ["Deze geheimhoudingsovereenkomst wordt op {effective_date} gesloten tussen {party_a} (\"Verstrekkende Partij\") en {party_b} (\"Ontvangende Partij\").",
               "De Ontvangende Partij houdt de vertrouwelijke informatie gedurende {term_years} jaar geheim.",
               "Op deze overeenkomst is het recht van {governing_law} van toepassing.",
               "Getekend te {city}. Namens de Verstrekkende Partij: {signatory}."],
        "pl": ["Niniejsza umowa o zachowaniu poufności zostaje zawarta w dniu {effective_date} pomiędzy {party_a} (\"Strona Ujawniająca\") a {party_b} (\"Strona Otrzymująca\").",
               "Strona Otrzymująca zachowa Informacje Poufne w tajemnicy przez okres {term_years} lat.",
               "Umowa podlega prawu {governing_law}.",
               "Sporządzono w {city}. W imieniu Strony Ujawniającej: {signatory}."],
    },
    "letter": {
        "en": ["Dear {recipient},", "we refer to your enquiry and ask you to send the signed documents by {deadline}.",
               "If you have any questions, please contact {contact_person} on {phone} or at {email}.", "Yours sincerely,"],
        "de": ["Sehr geehrte Damen und Herren, sehr geehrte(r) {recipient},", "bezugnehmend auf Ihre Anfrage bitten wir Sie, uns die unterschriebenen Unterlagen bis zum {deadline} zurückzusenden.",
               "Für Rückfragen steht Ihnen {contact_person} unter {phone} oder {email} zur Verfügung.", "Mit freundlichen Grüßen"],
        "fr": ["Madame, Monsieur {recipient},", "suite à votre demande, nous vous prions de nous retourner les documents signés avant le {deadline}.",
               "Pour toute question, vous pouvez joindre {contact_person} au {phone} ou par courriel à {email}.", "Veuillez agréer nos salutations distinguées."],
        "hu": ["Tisztelt {recipient}!", "Megkeresésére hivatkozva kérjük, hogy az aláírt dokumentumokat {deadline} napjáig juttassa vissza.",
               "Kérdés esetén keresse {contact_person} kollégánkat a {phone} telefonszámon vagy a {email} címen.", "Üdvözlettel:"],
        "it": ["Gentile {recipient},", "facendo seguito alla Sua richiesta, La preghiamo di restituirci i documenti firmati entro il {deadline}.",
               "Per informazioni può contattare {contact_person} al numero {phone} o all'indirizzo {email}.", "Distinti saluti"],
        "es": ["Estimado/a {recipient}:", "en relación con su consulta, le rogamos nos remita los documentos firmados antes del {deadline}.",
               "Para cualquier duda puede contactar con {contact_person} en el {phone} o en {email}.", "Atentamente,"],
        "nl": ["Geachte {recipient},", "naar aanleiding van uw verzoek vragen wij u de ondertekende stukken vóór {deadline} terug te sturen.",
               "Voor vragen kunt u contact opnemen met {contact_person} via {phone} of {email}.", "Met vriendelijke groet,"],
        "pl": ["Szanowny Panie / Szanowna Pani {recipient},", "w nawiązaniu do Pana/Pani zapytania prosimy o odesłanie podpisanych dokumentów do dnia {deadline}.",
               "W razie pytań prosimy o kontakt z {contact_person}, tel. {phone}, e-mail {email}.", "Z poważaniem"],
    },
    "report": {
        "en": ["In the reporting period the company generated revenue of {revenue}, a growth of {growth} on the previous year.",
               "At the end of the period the company employed {employees} people."],
        "de": ["Im Berichtszeitraum erzielte das Unternehmen einen Umsatz von {revenue}, ein Wachstum von {growth} gegenüber dem Vorjahr.",
               "Zum Ende des Zeitraums beschäftigte das Unternehmen {employees} Mitarbeiter."],
        "fr": ["Sur la période, la société a réalisé un chiffre d'affaires de {revenue}, soit une croissance de {growth} par rapport à l'exercice précédent.",
               "À la fin de la période, l'effectif s'élevait à {employees} salariés."],
        "hu": ["A beszámolási időszakban a társaság árbevétele {revenue} volt, ami {growth} növekedés az előző évhez képest.",
               "Az időszak végén a társaság {employees} főt foglalkoztatott."],
        "it": ["Nel periodo la società ha realizzato un fatturato di {revenue}, con una crescita del {growth} rispetto all'anno precedente.",
               "Alla fine del periodo la società contava {employees} dipendenti."],
        "es": ["En el periodo la empresa obtuvo unos ingresos de {revenue}, un crecimiento del {growth} respecto al año anterior.",
               "Al cierre del periodo la plantilla era de {employees} empleados."],
        "nl": ["In de verslagperiode realiseerde het bedrijf een omzet van {revenue}, een groei van {growth} ten opzichte van vorig jaar.",
               "Aan het einde van de periode had het bedrijf {employees} medewerkers."],
        "pl": ["W okresie sprawozdawczym spółka osiągnęła przychody w wysokości {revenue}, co oznacza wzrost o {growth} w porównaniu z rokiem poprzednim.",
               "Na koniec okresu spółka zatrudniała {employees} osób."],
    },
}

# Boilerplate clauses for long documents: {A} / {B} party roles, {n} a number of days.
CLAUSES = {
    "en": ["Each party shall bear its own costs in connection with the negotiation of this document.",
           "No amendment shall be valid unless made in writing and signed by both parties.",
           "Neither party may assign its rights without the prior written consent of the other party, which shall not be unreasonably withheld.",
           "If any provision is held invalid, the remaining provisions shall continue in full force and effect.",
           "Notices shall be sent by registered mail or e-mail to the addresses stated above and are deemed received {n} days after dispatch.",
           "The parties shall first attempt to settle any dispute amicably within {n} days.",
           "Neither party shall be liable for delays caused by events beyond its reasonable control.",
           "All information exchanged shall be used solely for the purpose of the cooperation described herein.",
           "The obligations in this section survive the termination of the agreement.",
           "Headings are for convenience only and do not affect the interpretation.",
           "This document constitutes the entire agreement of the parties on its subject matter."],
    "de": ["Jede Partei trägt ihre eigenen Kosten im Zusammenhang mit diesem Dokument.",
           "Änderungen und Ergänzungen bedürfen der Schriftform.",
           "Keine Partei darf Rechte ohne vorherige schriftliche Zustimmung der anderen Partei übertragen.",
           "Sollte eine Bestimmung unwirksam sein, bleibt die Wirksamkeit der übrigen Bestimmungen unberührt.",
           "Mitteilungen gelten {n} Tage nach Absendung als zugegangen.",
           "Die Parteien bemühen sich, Streitigkeiten innerhalb von {n} Tagen gütlich beizulegen.",
           "Keine Partei haftet für Verzögerungen infolge höherer Gewalt.",
           "Ausgetauschte Informationen dürfen nur für den hier beschriebenen Zweck verwendet werden.",
           "Die Pflichten dieses Abschnitts gelten über das Vertragsende hinaus.",
           "Überschriften dienen nur der Übersicht."],
    "fr": ["Chaque partie supporte ses propres frais liés au présent document.",
           "Toute modification doit faire l'objet d'un avenant écrit signé par les deux parties.",
           "Aucune partie ne peut céder ses droits sans l'accord écrit préalable de l'autre partie.",
           "Si une clause est déclarée nulle, les autres clauses conservent leur plein effet.",
           "Les notifications sont réputées reçues {n} jours après leur envoi.",
           "Les parties s'efforcent de régler tout différend à l'amiable dans un délai de {n} jours.",
           "Aucune partie n'est responsable des retards dus à un cas de force majeure.",
           "Les informations échangées ne peuvent être utilisées qu'aux fins décrites aux présentes.",
           "Les titres n'ont qu'une valeur indicative."],
    "hu": ["A felek a jelen dokumentummal kapcsolatos költségeiket maguk viselik.",
           "A módosítás csak írásban, mindkét fél aláírásával érvényes.",
           "Egyik fél sem ruházhatja át jogait a másik fél előzetes írásbeli hozzájárulása nélkül.",
           "Ha valamely rendelkezés érvénytelen, az a többi rendelkezés érvényességét nem érinti.",
           "Az értesítések a feladástól számított {n} nap elteltével kézbesítettnek minősülnek.",
           "A felek vitáikat elsősorban {n} napon belül tárgyalás útján rendezik.",
           "Egyik fél sem felel a vis maior okozta késedelemért.",
           "A kicserélt információk kizárólag az itt leírt célra használhatók fel.",
           "A fejezetcímek csak a tájékozódást segítik."],
    "it": ["Ciascuna parte sostiene i propri costi relativi al presente documento.",
           "Ogni modifica deve risultare da atto scritto firmato da entrambe le parti.",
           "Nessuna parte può cedere i propri diritti senza il consenso scritto dell'altra parte.",
           "L'eventuale invalidità di una clausola non pregiudica la validità delle restanti.",
           "Le comunicazioni si intendono ricevute {n} giorni dopo l'invio.",
           "Le parti tenteranno di risolvere amichevolmente ogni controversia entro {n} giorni.",
           "Nessuna parte risponde dei ritardi dovuti a cause di forza maggiore."],
    "es": ["Cada parte asumirá sus propios gastos en relación con el presente documento.",
           "Cualquier modificación deberá constar por escrito y ser firmada por ambas partes.",
           "Ninguna parte podrá ceder sus derechos sin el consentimiento previo por escrito de la otra.",
           "La nulidad de una cláusula no afectará a la validez de las restantes.",
           "Las notificaciones se entenderán recibidas {n} días después de su envío.",
           "Las partes intentarán resolver amistosamente cualquier controversia en un plazo de {n} días.",
           "Ninguna parte será responsable de los retrasos debidos a fuerza mayor."],
    "nl": ["Elke partij draagt haar eigen kosten in verband met dit document.",
           "Wijzigingen zijn slechts geldig indien schriftelijk overeengekomen.",
           "Geen der partijen mag haar rechten overdragen zonder voorafgaande schriftelijke toestemming van de andere partij.",
           "Indien een bepaling nietig is, blijven de overige bepalingen van kracht.",
           "Kennisgevingen worden geacht {n} dagen na verzending te zijn ontvangen.",
           "Partijen trachten geschillen binnen {n} dagen in der minne te schikken.",
           "Geen der partijen is aansprakelijk voor vertraging door overmacht."],
    "pl": ["Każda ze stron ponosi własne koszty związane z niniejszym dokumentem.",
           "Zmiany wymagają formy pisemnej pod rygorem nieważności.",
           "Żadna ze stron nie może przenieść swoich praw bez uprzedniej pisemnej zgody drugiej strony.",
           "Nieważność jednego z postanowień nie wpływa na ważność pozostałych.",
           "Zawiadomienia uważa się za doręczone po upływie {n} dni od ich wysłania.",
           "Strony będą dążyć do polubownego rozwiązania sporów w terminie {n} dni.",
           "Żadna ze stron nie odpowiada za opóźnienia spowodowane siłą wyższą."],
}
SECTION = {"hu": "{n}. §", "de": "§ {n}", "en": "{n}.", "fr": "Article {n}", "it": "Art. {n}", "es": "Cláusula {n}.ª", "nl": "Artikel {n}", "pl": "§ {n}"}
MEMBERSHIP = {"basic": ("Alap", "Basis", "Basic", "Essentiel", "Base", "Básica", "Basis", "Podstawowa"),
              "standard": ("Normál", "Standard", "Standard", "Standard", "Standard", "Estándar", "Standaard", "Standardowa"),
              "premium": ("Prémium", "Premium", "Premium", "Premium", "Premium", "Prémium", "Premium", "Premium")}
METHODS = {"cash": ("Készpénz", "Bar", "Cash", "Espèces", "Contanti", "Efectivo", "Contant", "Gotówka"),
           "card": ("Bankkártya", "Karte", "Card", "Carte bancaire", "Carta", "Tarjeta", "Pin", "Karta"),
           "voucher": ("Utalvány", "Gutschein", "Voucher", "Bon d'achat", "Buono", "Vale", "Tegoedbon", "Bon")}
REGIONS = {"hu": ["Közép-Magyarország", "Észak-Alföld", "Dél-Dunántúl", "Nyugat-Dunántúl"], "de": ["Nord", "Süd", "West", "Ost", "DACH"],
           "en": ["North", "South", "Midlands", "Scotland", "Wales"], "fr": ["Île-de-France", "Occitanie", "Bretagne", "Grand Est"],
           "it": ["Nord-Ovest", "Nord-Est", "Centro", "Sud"], "es": ["Norte", "Levante", "Andalucía", "Cataluña"],
           "nl": ["Randstad", "Noord", "Zuid", "Oost"], "pl": ["Mazowsze", "Małopolska", "Pomorze", "Śląsk"]}


def _person(rng, lang):
    return names.person(rng, lang) if rng.random() < 0.7 else rng.choice(LX.PEOPLE[lang])


def _ref(rng):
    return rng.choice(["", "A", "K-", "REF ", "Z/", "No. "]).strip() + rng.choice(["%s/%s" % (ids.digits(rng, 3), rng.randrange(2018, 2027)),
                                                                                  ids.digits(rng, rng.choice([5, 6, 7])),
                                                                                  "%s-%s" % (ids.digits(rng, 2), ids.digits(rng, 4))])


def _date(rng):
    return dt.date(rng.randrange(2015, 2027), 1, 1) + dt.timedelta(days=rng.randrange(0, 364))


def make_facts(rng, lang, kind, st):
    """key -> Fact for one document (printed forms from Style st); some facts are left out."""
    F = {}

    def put(key, type_, value, printed, p_absent=0.12, **kw):
        F[key] = Fact(type_, value, None if rng.random() < p_absent else printed, **kw)

    def put_date(key, d, p_absent=0.1):
        put(key, "date", d.isoformat(), st.date(d), p_absent)

    def put_money(key, x, p_absent=0.1):
        put(key, "number", float(x) if x != x.to_integral_value() else int(x), st.money(x), p_absent)

    company = lambda: FF.make_party(rng, rng.choice([lang] * 3 + list(LX.LANGS))).name  # noqa: E731
    d0 = _date(rng)
    if kind in ("contract", "nda"):
        put("party_a", "string", None, None, 0)
        a, b = company(), company()
        F["party_a"] = Fact("string", a, a)
        F["party_b"] = Fact("string", b, b)
        put_date("effective_date", d0, 0.05)
        gov_c = rng.choice(list(LX.COUNTRY_NAMES))
        gov = LX.COUNTRY_NAMES[gov_c][lang]
        put("governing_law", "string", gov, gov)
        put("city", "string", None, None, 0)
        city = rng.choice(FF._lists(lang)[4])[1]
        F["city"] = Fact("string", city, city if rng.random() < 0.85 else None)
        p = _person(rng, lang)
        put("signatory", "string", p, p)
        if kind == "contract":
            n = _ref(rng)
            put("contract_number", "string", n, n, 0.2)
            months = rng.choice([6, 12, 12, 24, 36])
            put_date("end_date", d0 + dt.timedelta(days=30 * months), 0.25)
            cur = rng.choice(["EUR", LX.HOME_CURRENCY[lang], "USD"])
            fst = FF.Style(rng, lang, cur)
            fee = Decimal(rng.randrange(5, 900) * 100) * Decimal(LX.CURRENCY_RATE[cur]).quantize(Decimal(1))
            F["fee"] = Fact("number", int(fee), fst.money(fee) if rng.random() < 0.9 else None)
            F["currency"] = Fact("enum", cur, cur if F["fee"].printed and fst.display != "none" else None,
                                 enum=sorted(set(["EUR", "USD", "GBP", "HUF", "PLN", cur])))
            put("payment_days", "integer", rng.choice([8, 14, 15, 30, 45, 60]), None, 0.2)
            F["payment_days"].printed = str(F["payment_days"].value) if F["payment_days"].printed is not None or rng.random() < 0.8 else None
            nd = rng.choice([15, 30, 60, 90])
            F["notice_days"] = Fact("integer", nd, str(nd) if rng.random() < 0.8 else None)
        else:
            ty = rng.choice([1, 2, 3, 5, 7, 10])
            F["term_years"] = Fact("integer", ty, str(ty) if rng.random() < 0.85 else None)
    elif kind == "letter":
        s = company()
        F["sender"] = Fact("string", s, s)
        r = _person(rng, lang)
        F["recipient"] = Fact("string", r, r)
        put_date("letter_date", d0, 0.05)
        subj = rng.choice(["Offer", "Angebot", "Ajánlat", "Offre", "Offerta", "Oferta", "Offerte", "Oferta"]) + " " + _ref(rng)
        put("subject", "string", subj, subj, 0.1)
        n = _ref(rng)
        put("reference_number", "string", n, n, 0.3)
        put_date("deadline", d0 + dt.timedelta(days=rng.choice([7, 10, 14, 21, 30])), 0.15)
        c = _person(rng, lang)
        put("contact_person", "string", c, c, 0.1)
        ph = "+%d %s %s" % (rng.randrange(30, 49), ids.digits(rng, 2), ids.digits(rng, 7))
        put("phone", "string", ph, ph, 0.1)
        em = "%s@%s.example" % (c.split()[0].lower(), s.split()[0].lower())
        em = re.sub(r"[^a-z0-9@.]", "", em.encode("ascii", "ignore").decode())
        put("email", "string", em, em, 0.15)
    elif kind == "form":
        a = _person(rng, lang)
        F["applicant"] = Fact("string", a, a)
        put_date("birth_date", dt.date(rng.randrange(1950, 2006), rng.randrange(1, 13), rng.randrange(1, 29)), 0.1)
        pc, city = rng.choice(FF._lists(lang)[4])
        put("city", "string", city, city, 0.05)
        put("postal_code", "string", pc, pc, 0.1)
        ph = "+%d %s %s" % (rng.randrange(30, 49), ids.digits(rng, 3), ids.digits(rng, 6))
        put("phone", "string", ph, ph, 0.2)
        em = "%s.%s@mail.example" % tuple((a.split() + ["x"])[:2])
        em = re.sub(r"[^a-z0-9@.]", "", em.lower().encode("ascii", "ignore").decode())
        put("email", "string", em, em, 0.2)
        idn = rng.choice(["", "ID", "AB", "X"]) + ids.digits(rng, rng.choice([6, 8, 9]))
        put("id_number", "string", idn, idn, 0.2)
        m = rng.choice(list(MEMBERSHIP))
        F["membership"] = Fact("enum", m, MEMBERSHIP[m][_LI[lang]] if rng.random() < 0.9 else None, enum=list(MEMBERSHIP))
        put_date("start_date", d0, 0.15)
    elif kind in ("receipt", "order"):
        cur = LX.HOME_CURRENCY[lang] if rng.random() < 0.8 else rng.choice(list(LX.CURRENCY_RATE))
        fst = FF.Style(rng, lang, cur)
        items = FF._lists(lang)[5]
        n = rng.randrange(1, 7 if kind == "receipt" else 9)
        rows, total = [], Decimal(0)
        for it in rng.sample(items, min(n, len(items))):
            desc, _, (lo, hi), _ = it
            price = (Decimal(rng.uniform(lo, hi)) * Decimal(LX.CURRENCY_RATE[cur])).quantize(Decimal(1) if cur == "HUF" else Decimal("0.01"))
            q = rng.choice([1, 1, 1, 2, 3, 5, 10])
            rows.append((desc, q, price))
            total += price * q
        if kind == "receipt":
            s = company()
            F["store"] = Fact("string", s, s)
            put_date("receipt_date", d0, 0.05)
            rn = ids.digits(rng, rng.choice([4, 5, 6]))
            put("receipt_number", "string", rn, rn, 0.15)
            F["total"] = Fact("number", _num(total), fst.money(total))
            rate = Decimal(rng.choice(LX.STANDARD_RATES[LX.COUNTRY[lang]]))
            vat = (total * rate / (100 + rate)).quantize(Decimal("0.01") if cur != "HUF" else Decimal(1))
            F["vat"] = Fact("number", _num(vat), fst.amount(vat) if rng.random() < 0.8 else None)
            m = rng.choice(list(METHODS))
            F["payment_method"] = Fact("enum", m, METHODS[m][_LI[lang]] if rng.random() < 0.9 else None, enum=list(METHODS))
            F["items"] = Fact("array", [{"name": d, "price": _num(p * q)} for d, q, p in rows],
                              [(d, fst.amount(p * q), q, fst.amount(p)) for d, q, p in rows], item_types={"name": "string", "price": "number"})
        else:
            n_ = _ref(rng)
            F["order_number"] = Fact("string", n_, n_)
            put_date("order_date", d0, 0.05)
            c = company()
            F["customer"] = Fact("string", c, c)
            put_date("delivery_date", d0 + dt.timedelta(days=rng.randrange(2, 40)), 0.25)
            F["total"] = Fact("number", _num(total), fst.money(total))
            F["currency"] = Fact("enum", cur, cur if rng.random() < 0.85 else None, enum=sorted(set(["EUR", "USD", "GBP", cur])))
            F["items"] = Fact("array", [{"description": d, "quantity": q, "unit_price": _num(p)} for d, q, p in rows],
                              [(d, fst.amount(p * q), q, fst.amount(p)) for d, q, p in rows],
                              item_types={"description": "string", "quantity": "number", "unit_price": "number"})
        F["_style"] = fst
    elif kind == "report":
        cur = LX.HOME_CURRENCY[lang]
        fst = FF.Style(rng, lang, cur)
        a = _person(rng, lang)
        put("author", "string", a, a, 0.1)
        put_date("report_date", d0, 0.1)
        ps = dt.date(d0.year - 1, 1, 1)
        put_date("period_start", ps, 0.2)
        put_date("period_end", dt.date(d0.year - 1, 12, 31), 0.2)
        rev = Decimal(rng.randrange(100, 99999) * 1000) * Decimal(LX.CURRENCY_RATE[cur]).quantize(Decimal(1))
        F["revenue"] = Fact("number", int(rev), fst.money(rev) if rng.random() < 0.9 else None)
        emp = rng.randrange(5, 4000)
        F["employees"] = Fact("integer", emp, str(emp) if rng.random() < 0.85 else None)
        g = Decimal(rng.randrange(-150, 400)) / 10
        F["growth"] = Fact("number", _num(g), (st.number(g, 1) + rng.choice([" %", "%"])) if rng.random() < 0.85 else None)
        regs = rng.sample(REGIONS[lang], rng.randrange(2, 4))
        F["regions"] = Fact("array", regs, regs if rng.random() < 0.85 else None, item_types=None)
        F["_style"] = fst
        s = company()
        F["company"] = Fact("string", s, s)
    return F


def _num(x):
    return int(x) if x == x.to_integral_value() else float(x)


def _p(F, key):
    f = F.get(key)
    return f.printed if f else None


def blocks_for(rng, lang, kind, F, long):
    """The document as pages of blocks (the freeform block language)."""
    title = TITLES.get(kind, [None] * 8)[_LI[lang]]
    B = []
    kv_mode = rng.choice(["colon", "left", "above", "colon"])
    sep = rng.choice([":", ":", ""])

    def kv(keys):
        items = [(label(k, lang) + sep, F[k].printed) for k in keys if k in F and F[k].printed is not None and not isinstance(F[k].printed, list)]
        if items:
            B.append(("kv", items, kv_mode))

    def sentences(keys_done):
        out = []
        for s in SENT[kind][lang]:
            keys = re.findall(r"\{(\w+)\}", s)
            if all(_p(F, k) is not None for k in keys):
                out.append(s.format(**{k: F[k].printed for k in keys}))
                keys_done.update(keys)
        return out

    section = [1]

    def filler(n):
        cl = CLAUSES[lang]
        for i in range(n):
            section[0] += 1
            B.append(("line", SECTION[lang].format(n=section[0]), "l"))
            txt = " ".join(rng.sample(cl, rng.randrange(2, min(5, len(cl)))))
            B.append(("para", txt.replace("{n}", str(rng.choice([5, 8, 10, 14, 30])))))

    if kind in ("contract", "nda"):
        B.append(("line", title, rng.choice("lc")))
        B.append(("blank",))
        done = set()
        sents = sentences(done)
        if rng.random() < (0.1 if long else 0.35):  # a cover block with the key data as well
            kv([k for k in F if not k.startswith("_") and k not in ("signatory",)])
        B.append(("para", sents[0] if sents else "", "fact"))
        middle = sents[1:-1]
        if long:
            rng.shuffle(middle)  # facts spread over the pages, between clauses
        for s in middle:
            if long and rng.random() < 0.8:
                filler(rng.randrange(1, 4))
            B.append(("para", s, "fact"))
        if long:
            filler(rng.randrange(2, 7))
        if len(sents) > 1:
            B.append(("para", sents[-1], "fact"))
        rest = [k for k in F if not k.startswith("_") and k not in done and F[k].printed is not None]
        if rest:
            kv(rest)
    elif kind == "letter":
        B.append(("line", F["sender"].printed, "l"))
        if rng.random() < 0.5:
            B.append(("line", rng.choice(LX.TAGLINES[lang]), "l"))
        B.append(("blank",))
        B.append(("line", F["recipient"].printed, "l"))
        B.append(("blank",))
        kv([k for k in ("letter_date", "reference_number", "subject") if k in F])
        B.append(("blank",))
        done = {"sender", "recipient", "letter_date", "reference_number", "subject"}
        for s in sentences(done):
            if long and rng.random() < 0.7:
                filler(rng.randrange(1, 5))
            B.append(("para", s, "fact"))
        if long:
            filler(rng.randrange(2, 6))
        rest = [k for k in F if not k.startswith("_") and k not in done and F[k].printed is not None]
        kv(rest)
    elif kind == "form":
        B.append(("line", title, "c"))
        B.append(("blank",))
        if long and rng.random() < 0.5:  # conditions first, the filled-in fields after them
            filler(rng.randrange(4, 9))
            long = False
        keys = [k for k in F if not k.startswith("_")]
        rng.shuffle(keys)
        if rng.random() < 0.5:
            B.append(("cols", ["%s%s %s" % (label(k, lang), sep, F[k].printed) for k in keys[:len(keys) // 2] if F[k].printed],
                      ["%s%s %s" % (label(k, lang), sep, F[k].printed) for k in keys[len(keys) // 2:] if F[k].printed]))
        else:
            kv(keys)
        if long:
            filler(rng.randrange(5, 12))
    elif kind in ("receipt", "order"):
        head = F["store"].printed if kind == "receipt" else (TITLES["order"][_LI[lang]])
        B.append(("line", head, "c" if kind == "receipt" else "l"))
        if kind == "order":
            B.append(("cols", [label("customer", lang) + sep, F["customer"].printed], []))
        B.append(("blank",))
        if long and rng.random() < 0.5:
            filler(rng.randrange(4, 9))
            long = False
        kv([k for k in ("receipt_date", "receipt_number", "order_number", "order_date", "delivery_date") if k in F])
        B.append(("blank",))
        rows = F["items"].printed
        hdr = {"hu": ["Megnevezés", "Menny.", "Egységár", "Összeg"], "de": ["Artikel", "Menge", "Preis", "Betrag"],
               "en": ["Item", "Qty", "Price", "Amount"], "fr": ["Article", "Qté", "Prix", "Montant"], "it": ["Articolo", "Q.tà", "Prezzo", "Importo"],
               "es": ["Artículo", "Cant.", "Precio", "Importe"], "nl": ["Artikel", "Aantal", "Prijs", "Bedrag"], "pl": ["Towar", "Ilość", "Cena", "Wartość"]}[lang]
        if kind == "receipt" and rng.random() < 0.6:
            B.append(("table", None, [[d, a] for d, a, q, p in rows], [False, True], rng.choice(["grid", "merged", "tabs"])))
        else:
            B.append(("table", hdr, [[d, str(q), p, a] for d, a, q, p in rows], [False, True, True, True], rng.choice(["grid", "pipes", "tabs", "merged"])))
        B.append(("blank",))
        kv([k for k in ("total", "vat", "currency", "payment_method") if k in F])
        if long:
            filler(rng.randrange(5, 12))
    elif kind == "report":
        B.append(("line", "%s – %s" % (title, F["company"].printed), "l"))
        kv([k for k in ("author", "report_date", "period_start", "period_end") if k in F])
        B.append(("blank",))
        done = set()
        if long:
            filler(rng.randrange(1, 4))
        for s in sentences(done):
            B.append(("para", s, "fact"))
            if long:
                filler(rng.randrange(1, 4))
        if F["regions"].printed:
            B.append(("line", rng.choice(["Regions", "Régions", "Regionen", "Régiók", "Regioni", "Regiones", "Regio's", "Regiony"]) + ": " + ", ".join(F["regions"].printed), "l"))
        done.update(("author", "report_date", "period_start", "period_end", "company"))
        rest = [k for k in F if not k.startswith("_") and k not in done and k != "regions" and F[k].printed is not None]
        kv([k for k in rest if k in _FL])
        if long:
            filler(rng.randrange(4, 9))
    # pages: split after a number of blocks
    pages, cur, size = [], [], 0
    per = rng.randrange(900, 2200)
    for b in B:
        n = len(b[1]) if b[0] in ("para", "line") else 200
        if cur and size + n > per and long:
            pages.append(cur)
            cur, size = [], 0
        cur.append(b)
        size += n
    pages.append(cur)
    if len(pages) > 1 or rng.random() < 0.5:
        fmt_ = rng.choice(LX.L["page_of"][lang])
        for i, pg in enumerate(pages):
            pg.append(("line", fmt_.format(p=i + 1, n=len(pages)), "r"))
    return pages


def generate(seed, lang, fmt, kind=None, long=False):
    rng = random.Random("quarry-doc/%s/%s/%s/%s/%s" % (seed, lang, fmt, kind, long))
    kind = kind or rng.choice(KINDS)
    st = FF.Style(rng, lang, "EUR")
    F = make_facts(rng, lang, kind, st)
    pages = blocks_for(rng, lang, kind, F, long)
    F.pop("_style", None)
    if fmt == "txt":
        data = FF.render_txt(pages, rng, rng.random() < 0.2).encode("utf-8")
    elif fmt == "html":
        data = FF.render_html(pages, rng).encode("utf-8")
    else:
        data = FF.render_pdf(pages, rng, TITLES.get(kind, ["Document"] * 8)[_LI[lang]] or "Document")
    return Doc(lang, kind, fmt, data, F, [kind] + (["long"] if long else []))


# --- random schemas --------------------------------------------------------------------------------

NAMES = {
    "contract_number": ["contract_number", "contract_no", "agreement_id", "reference", "contract_ref"],
    "party_a": ["client", "party_a", "first_party", "customer_name", "disclosing_party", "principal"],
    "party_b": ["contractor", "party_b", "second_party", "supplier_name", "receiving_party", "provider"],
    "effective_date": ["effective_date", "start_date", "date_signed", "commencement", "valid_from"],
    "end_date": ["end_date", "expiry_date", "valid_until", "termination_date"],
    "fee": ["monthly_fee", "fee", "amount", "price_per_month", "compensation"],
    "currency": ["currency", "currency_code", "fee_currency"],
    "payment_days": ["payment_terms_days", "payment_days", "days_to_pay"],
    "governing_law": ["governing_law", "jurisdiction", "applicable_law", "law_country"],
    "city": ["city", "place", "place_of_signing", "location", "town"],
    "signatory": ["signatory", "signed_by", "signer_name", "representative"],
    "notice_days": ["notice_period_days", "notice_days", "termination_notice"],
    "term_years": ["term_years", "confidentiality_years", "duration_years", "term"],
    "sender": ["sender", "from_company", "author_org", "issuer"],
    "recipient": ["recipient", "addressee", "to_person", "recipient_name"],
    "letter_date": ["date", "letter_date", "sent_on"],
    "subject": ["subject", "topic", "regarding", "title"],
    "reference_number": ["reference_number", "our_ref", "file_number", "ref"],
    "deadline": ["deadline", "reply_by", "due_date", "respond_before"],
    "contact_person": ["contact_person", "contact", "handled_by"],
    "phone": ["phone", "telephone", "phone_number", "tel"],
    "email": ["email", "e_mail", "email_address", "contact_email"],
    "applicant": ["applicant_name", "name", "full_name", "applicant"],
    "birth_date": ["date_of_birth", "birth_date", "dob", "born"],
    "postal_code": ["postal_code", "zip", "postcode", "zip_code"],
    "id_number": ["id_number", "document_number", "identity_no"],
    "membership": ["membership_type", "membership", "plan", "tier"],
    "start_date": ["start_date", "membership_start", "begins"],
    "store": ["store", "merchant", "shop_name", "seller"],
    "receipt_date": ["date", "purchase_date", "receipt_date"],
    "receipt_number": ["receipt_number", "receipt_no", "transaction_id"],
    "total": ["total", "total_amount", "grand_total", "sum"],
    "vat": ["vat", "tax", "vat_amount", "tax_included"],
    "payment_method": ["payment_method", "paid_with", "payment_type"],
    "items": ["items", "lines", "products", "positions"],
    "author": ["author", "prepared_by", "writer"],
    "report_date": ["report_date", "date", "published"],
    "period_start": ["period_start", "from_date", "period_from"],
    "period_end": ["period_end", "to_date", "period_to"],
    "revenue": ["revenue", "turnover", "sales", "total_revenue"],
    "employees": ["employees", "headcount", "staff_count", "number_of_employees"],
    "growth": ["growth_percent", "growth", "yoy_growth", "growth_rate"],
    "regions": ["regions", "markets", "areas"],
    "company": ["company", "company_name", "organisation", "entity"],
    "order_number": ["order_number", "order_id", "order_no"],
    "order_date": ["order_date", "ordered_on", "date"],
    "customer": ["customer", "customer_name", "buyer", "client"],
    "delivery_date": ["delivery_date", "ship_date", "expected_delivery"],
}
ITEM_NAMES = {"name": ["name", "item", "product", "description"], "price": ["price", "amount", "line_total"],
              "description": ["description", "item", "product", "name"], "quantity": ["quantity", "qty", "count"],
              "unit_price": ["unit_price", "price", "price_each"]}
DESCR = {
    "contract_number": "Contract number as printed", "party_a": "Name of the client / first party", "party_b": "Name of the contractor / second party",
    "effective_date": "Date the agreement takes effect", "end_date": "Date the agreement ends", "fee": "Monthly fee as a number",
    "currency": "Currency of the fee", "payment_days": "Days allowed for payment", "governing_law": "Country whose law governs the agreement",
    "city": "City named in the document", "signatory": "Person who signs", "notice_days": "Notice period in days",
    "term_years": "Years the information stays confidential", "sender": "Organisation sending the letter", "recipient": "Person the letter is addressed to",
    "letter_date": "Date of the letter", "subject": "Subject line", "reference_number": "Reference or file number", "deadline": "Date by which a reply is requested",
    "contact_person": "Contact person", "phone": "Phone number as printed", "email": "E-mail address", "applicant": "Full name of the applicant",
    "birth_date": "Date of birth", "postal_code": "Postal code", "id_number": "Identity document number", "membership": "Chosen membership tier",
    "start_date": "Start date", "store": "Shop or merchant name", "receipt_date": "Date of purchase", "receipt_number": "Receipt number",
    "total": "Total amount paid", "vat": "VAT included in the total", "payment_method": "How the purchase was paid", "items": "Purchased items",
    "author": "Author of the report", "report_date": "Date of the report", "period_start": "First day of the reporting period",
    "period_end": "Last day of the reporting period", "revenue": "Revenue in the period", "employees": "Number of employees",
    "growth": "Growth in percent", "regions": "Regions mentioned", "company": "Company the report is about", "order_number": "Order number",
    "order_date": "Date of the order", "customer": "Customer name", "delivery_date": "Planned delivery date",
}


def _case(rng, name):
    style = rng.choice(["snake", "snake", "camel", "pascal", "spaced", "upper"])
    parts = name.split("_")
    if style == "camel":
        return parts[0] + "".join(p.capitalize() for p in parts[1:])
    if style == "pascal":
        return "".join(p.capitalize() for p in parts)
    if style == "spaced":
        return " ".join(parts)
    if style == "upper":
        return name.upper()
    return name


def _prop(rng, fact, key, lang, nullable):
    t = fact.type
    s = {}
    if rng.random() < 0.3:
        s["title"] = rng.choice([label(key, lang), DESCR[key]]) if key in _FL else DESCR[key]
    if t == "date":
        s["type"] = ["string", "null"] if nullable else "string"
        s["format"] = "date"
    elif t == "enum":
        s["type"] = ["string", "null"] if nullable else "string"
        s["enum"] = list(fact.enum) + ([None] if nullable else [])
    elif t in ("number", "integer"):
        s["type"] = ([t, "null"] if nullable else t) if rng.random() < 0.8 else (["number", "null"] if nullable else "number")
    elif t == "array":
        s["type"] = "array"
        if fact.item_types:
            names = {k: rng.choice(ITEM_NAMES[k]) for k in fact.item_types}
            if len(set(names.values())) < len(names):
                names = {k: k for k in fact.item_types}
            s["items"] = {"type": "object", "properties": {names[k]: {"type": v} for k, v in fact.item_types.items()},
                          "required": [names[k] for k in fact.item_types]}
            s["_names"] = names
        else:
            s["items"] = {"type": "string"}
    else:
        s["type"] = ["string", "null"] if nullable else "string"
    if rng.random() < 0.5:
        d = DESCR[key]
        if t == "date" and rng.random() < 0.5:
            d += " (YYYY-MM-DD)"
        s["description"] = d
    return s


def random_schema(rng, doc):
    """(schema, answer) over a random subset of the document's facts."""
    keys = [k for k in doc.facts if not k.startswith("_")]
    rng.shuffle(keys)
    present = [k for k in keys if doc.facts[k].printed is not None]
    absent = [k for k in keys if doc.facts[k].printed is None]
    chosen = present[:rng.randrange(max(1, min(2, len(present))), len(present) + 1)] + absent[:rng.randrange(0, min(2, len(absent)) + 1)]
    if rng.random() < 0.6:
        chosen.sort(key=keys.index)
    props, answer, used = {}, {}, set()
    for k in chosen:
        f = doc.facts[k]
        name = _case(rng, rng.choice(NAMES[k]))
        if name in used:
            name = _case(rng, k)
        if name in used:
            continue
        used.add(name)
        nullable = f.printed is None or rng.random() < 0.5
        s = _prop(rng, f, k, doc.lang, nullable)
        names = s.pop("_names", None)
        props[name] = s
        if f.printed is None:
            answer[name] = [] if f.type == "array" else None
        elif f.type == "array" and names:
            answer[name] = [{names[ik]: row[ik] for ik in f.item_types} for row in f.value]
        else:
            answer[name] = f.value
    # now and then group two scalar facts in a nested object
    if len(props) > 3 and rng.random() < 0.2:
        a, b = [n for n in props if props[n].get("type") != "array"][:2]
        grp = rng.choice(["details", "info", "meta", "key_facts", "general"])
        if grp not in props:
            sub = {"type": "object", "properties": {a: props.pop(a), b: props.pop(b)}, "required": [a, b]}
            sub_ans = {a: answer.pop(a), b: answer.pop(b)}
            props = dict([(grp, sub)] + list(props.items()))
            answer = dict([(grp, sub_ans)] + list(answer.items()))
    schema = {}
    if rng.random() < 0.3:
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    if rng.random() < 0.5:
        schema["title"] = rng.choice(["Extraction", "Document facts", doc.kind.capitalize(), "Record", "Fields"])
    if rng.random() < 0.3:
        schema["description"] = rng.choice(["Facts stated in the document.", "Extract these fields; null when absent.",
                                            "Key data of the %s." % doc.kind])
    schema["type"] = "object"
    schema["properties"] = props
    schema["required"] = list(props)
    if rng.random() < 0.4:
        schema["additionalProperties"] = False
    return schema, answer


KEEP = ("type", "properties", "required", "items", "enum", "format", "title", "description")


def schema_for_prompt(schema):
    """The {schema} text of the "schema" prompt: the schema with only the keys in KEEP, in the schema's
    own key order, recursively (inside "properties" every property name is kept), as compact JSON
    (separators ',' and ':', non-ASCII characters written as themselves)."""
    import json

    def strip(s):
        if not isinstance(s, dict):
            return s
        out = {}
        for k, v in s.items():
            if k not in KEEP:
                continue
            if k == "properties":
                out[k] = {n: strip(p) for n, p in v.items()}
            elif k == "items":
                out[k] = strip(v)
            else:
                out[k] = v
        return out
    return json.dumps(strip(schema), ensure_ascii=False, separators=(",", ":"))
