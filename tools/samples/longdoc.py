# -*- coding: utf-8 -*-
"""The long document for question batches: a made-up services agreement of about twenty pages
(English, PDF), with a questions file and the expected answers (answer text and page).

Every fact a question asks about is stated once, in a sentence that holds an evidence string; the
page of each answer is found afterwards by searching `pdftotext -layout` output page by page, so
that it is the page a reader (and our extractor) sees, not a guess from the layout engine."""
import json
import os
import random
import re
import subprocess
from xml.sax.saxutils import escape as E

from reportlab.lib import colors
from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import ParagraphStyle
from reportlab.lib.units import mm
from reportlab.platypus import PageBreak, Paragraph, Spacer, Table, TableStyle

import invoicegen.render_pdf as RP

NAME = "services-agreement"

SERVICES = [
    ("Data ingestion", "collection of shipment, warehouse and customs records from the Customer's source systems"),
    ("Data quality monitoring", "automated checks of completeness, timeliness and consistency of the ingested records"),
    ("Reporting", "a library of operational and financial reports refreshed at agreed intervals"),
    ("Demand forecasting", "weekly forecasts of inbound and outbound volumes per site and product group"),
    ("Route optimisation", "daily proposals for the allocation of consignments to vehicles and routes"),
    ("Document processing", "extraction of key fields from invoices, delivery notes and customs declarations"),
    ("Service desk", "the single point of contact for incidents, requests and questions"),
    ("Platform operations", "monitoring, patching, backup and capacity management of the platform"),
    ("Security operations", "log review, vulnerability management and incident response"),
    ("Training", "courses and workshops for the Customer's users and administrators"),
    ("Archive", "long-term storage and retrieval of documents and datasets"),
    ("Change management", "assessment, scheduling and implementation of changes to the platform"),
]
TEAMS = ["Ingestion Team", "Quality Team", "Reporting Team", "Forecasting Team", "Optimisation Team",
         "Document Team", "Service Desk", "Operations Team", "Security Team", "Academy", "Archive Team", "Change Board"]
CITIES = [("Budapest", "Váci út 141."), ("Győr", "Ipari park utca 7."), ("Debrecen", "Határ út 22."),
          ("Szeged", "Budapesti út 85."), ("Miskolc", "Zsolcai kapu 30."), ("Pécs", "Megyeri út 64."),
          ("Székesfehérvár", "Berényi út 12."), ("Kecskemét", "Kiskőrösi út 40."),
          ("Nyíregyháza", "Debreceni út 210."), ("Szombathely", "Zanati út 18.")]
PEOPLE = [("Eszter Varga", "Customer Project Director"), ("Thomas Reed", "Supplier Account Executive"),
          ("Gábor Fekete", "Customer Data Protection Officer"), ("Hannah Moore", "Supplier Service Delivery Manager"),
          ("Zoltán Balogh", "Customer Head of IT Operations"), ("Priya Shah", "Supplier Security Lead")]
IO = [
    ("the export files and interfaces of the source systems", "validated, timestamped records in the platform's staging area", "keep the source system interfaces available and announce planned outages of source systems"),
    ("the records in the staging area", "a daily data quality scorecard per source system", "name a data owner for each source system who decides on the correction of faulty records"),
    ("the curated data sets of the Platform", "scheduled reports in PDF and spreadsheet form and an interactive dashboard", "approve the layout of each new report before it is released"),
    ("three years of shipment history and the Customer's promotion calendar", "volume forecasts with prediction intervals", "send the promotion calendar by the last Business Day of each Month"),
    ("the next day's consignments, vehicle availability and driver shifts", "route proposals with estimated arrival times", "keep the vehicle master data in its transport system complete"),
    ("scanned or electronic invoices, delivery notes and customs declarations", "structured records of the key fields with a confidence score for each field", "deliver documents as PDF, image or XML files of no more than 25 MB each"),
    ("calls, e-mails and portal tickets from authorised users", "tickets with a priority, an owner and a documented resolution", "keep its list of authorised users up to date"),
    ("monitoring data of the Platform's components", "capacity reports and a quarterly patch compliance statement", "agree Maintenance Windows for work on shared infrastructure"),
    ("security logs of the Platform and threat intelligence feeds", "a monthly security report and incident reports", "report suspected security incidents on its side to the Security Team"),
    ("the training needs notified by the Customer", "course materials, attendance lists and evaluation summaries", "nominate participants at least ten Business Days before each course"),
    ("documents and data sets marked for archiving", "an index of archived items and retrieval receipts", "classify documents by retention category before they are archived"),
    ("Change Requests from either party", "impact assessments, change schedules and post-implementation reviews", "appoint a member of the Change Board with authority to approve changes"),
]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]


# The questions in Hungarian (same order and answers): the document is English, the questions of
# the seed's question-answering workload are Hungarian.
QUESTIONS_HU = {
    'On what date was the Data Platform Services Agreement made?': 'Melyik napon kötötték meg az adatplatform-szolgáltatási szerződést?',
    'What is the registered office address of the Supplier?': 'Mi a Szolgáltató székhelyének címe?',
    'What is the Hungarian tax number of the Customer?': 'Mi a Megrendelő magyar adószáma?',
    'What is the Commencement Date of the operational Services?': 'Mikor kezdődik az üzemeltetési szolgáltatások nyújtása?',
    'How long is the initial period of the Agreement?': 'Milyen hosszú a szerződés kezdeti időtartama?',
    'Which team of the Supplier provides the Demand forecasting Service?': 'A Szolgáltató melyik csapata nyújtja a keresletelőrejelzési szolgáltatást?',
    'How many named specialists are assigned to the Route optimisation Service?': 'Hány megnevezett szakembert rendelnek az útvonal-optimalizálási szolgáltatáshoz?',
    'What is the telephone number of the service desk?': 'Mi az ügyfélszolgálat (service desk) telefonszáma?',
    'How often are backups of the platform taken?': 'Milyen gyakran készül mentés a platformról?',
    'Within how many hours must critical vulnerabilities be remediated?': 'Hány órán belül kell a kritikus sérülékenységeket elhárítani?',
    'How many training days per contract year are included without additional charge?': 'Szerződéses évenként hány képzési nap jár külön díj nélkül?',
    'By what time are next-day route proposals published?': 'Hány óráig teszik közzé a másnapi útvonaljavaslatokat?',
    'What availability target applies to the Platform operations Service?': 'Milyen rendelkezésre állási cél vonatkozik a platformüzemeltetési szolgáltatásra?',
    'What is the maximum total of Service Credits in one Month?': 'Legfeljebb mekkora lehet egy hónapban a szolgáltatási jóváírások összege?',
    'By which Business Day of each Month is the service report due?': 'A hónap hányadik munkanapjáig kell megküldeni a szolgáltatási jelentést?',
    'How many users of the Services does the Szeged Site have?': 'Hány felhasználója van a szolgáltatásoknak a szegedi telephelyen?',
    "Which Site hosts the disaster recovery location for the Platform's on-premises components?": 'Melyik telephelyen van a platform helyszíni összetevőinek katasztrófa-helyreállítási helyszíne?',
    'When is milestone M4 (Data migration) due?': 'Mikor esedékes az M4 (adatmigráció) mérföldkő?',
    'What milestone payment may be invoiced on Acceptance of milestone M6?': 'Mekkora mérföldkő-díj számlázható az M6 mérföldkő átvétele után?',
    'How many years of historical data are migrated in milestone M4?': 'Hány évnyi korábbi adatot migrálnak az M4 mérföldkőben?',
    'What liquidated damages apply per Business Day when a milestone is late?': 'Mekkora kötbér jár munkanaponként, ha egy mérföldkő késik?',
    'What is the monthly service fee, excluding VAT?': 'Mennyi a havi szolgáltatási díj áfa nélkül?',
    'What is the cap on the annual increase of the Fees?': 'Legfeljebb mennyivel emelhetők évente a díjak?',
    'To which e-mail address are invoices sent?': 'Melyik e-mail-címre küldik a számlákat?',
    'Within how many days must the Customer pay an undisputed invoice?': 'Hány napon belül kell a Megrendelőnek kifizetnie a nem vitatott számlát?',
    'What interest rate applies to late payments?': 'Milyen kamat terheli a késedelmes fizetést?',
    "Who is the Customer's Data Protection Officer?": 'Ki a Megrendelő adatvédelmi tisztviselője?',
    'Who acts as the Supplier Security Lead?': 'Ki a Szolgáltató biztonsági vezetője?',
    'When does the Steering Committee meet during the implementation?': 'Mikor ülésezik az irányítóbizottság a bevezetés alatt?',
    'Within how many hours must the Supplier notify the Customer of a personal data breach?': 'Hány órán belül kell a Szolgáltatónak értesítenie a Megrendelőt egy adatvédelmi incidensről?',
    'For how long are invoices and accounting documents retained?': 'Meddig őrzik meg a számlákat és a számviteli bizonylatokat?',
    'For how long are system logs kept?': 'Meddig őrzik meg a rendszernaplókat?',
    "What is each party's liability cap per contract year?": 'Mekkora a felek felelősségének felső határa szerződéses évenként?',
    'What is the minimum cover of the professional indemnity insurance?': 'Legalább mekkora fedezetű szakmai felelősségbiztosítást kell fenntartani?',
    'How much notice is needed to prevent the automatic renewal?': 'Mennyi idővel előre kell jelezni, hogy a szerződés ne hosszabbodjon meg automatikusan?',
    'Which court decides disputes that are not settled within 45 days?': 'Melyik bíróság dönt a 45 napon belül nem rendezett vitákban?',
    'What is the day rate of a Data scientist?': 'Mennyi egy adattudós (Data scientist) napidíja?',
    'What is the price of an additional custom report?': 'Mennyibe kerül egy további egyedi riport?',
    'What is the maximum duration of maintenance window W2?': 'Legfeljebb meddig tarthat a W2 karbantartási ablak?',
    'Which sub-processor provides optical character recognition?': 'Melyik alvállalkozó adatfeldolgozó végzi az optikai karakterfelismerést?',
    "Who may declare a disaster on the Customer's side?": 'Ki jelentheti be a katasztrófahelyzetet a Megrendelő oldaláról?',
    'What is the frequency of report R17?': 'Milyen gyakran készül az R17-es riport?',
    'Who is the audience of the report Carbon emissions by site?': 'Kinek szól a „Carbon emissions by site” riport?',
}


def money(x):
    return "EUR {:,.2f}".format(x)


def date(d):
    return "%d %s %d" % (d[2], MONTHS[d[1] - 1], d[0])


class Doc:
    def __init__(self):
        self.story = []
        self.qa = []   # (question, answer, evidence)
        body = ParagraphStyle("b", fontName="DejaVuSerif", fontSize=10.5, leading=15, spaceAfter=7)
        self.s = {"body": body,
                  "h1": ParagraphStyle("h1", fontName="DejaVuSans-Bold", fontSize=14, leading=18, spaceBefore=10, spaceAfter=8),
                  "h2": ParagraphStyle("h2", fontName="DejaVuSans-Bold", fontSize=11, leading=14, spaceBefore=6, spaceAfter=4),
                  "title": ParagraphStyle("t", fontName="DejaVuSans-Bold", fontSize=22, leading=28, spaceAfter=14),
                  "cell": ParagraphStyle("c", fontName="DejaVuSans", fontSize=8.5, leading=10.5)}

    def h1(self, t):
        self.story.append(Paragraph(E(t), self.s["h1"]))

    def h2(self, t):
        self.story.append(Paragraph(E(t), self.s["h2"]))

    def p(self, t):
        self.story.append(Paragraph(E(t), self.s["body"]))

    def q(self, question, answer, evidence=None):
        self.qa.append((question, answer, evidence or answer))

    def table(self, rows, widths):
        data = [[Paragraph(E(c), self.s["cell"]) for c in r] for r in rows]
        t = Table(data, colWidths=widths, repeatRows=1)
        t.setStyle(TableStyle([("GRID", (0, 0), (-1, -1), 0.4, colors.grey),
                               ("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#e6e6e6")),
                               ("VALIGN", (0, 0), (-1, -1), "TOP")]))
        self.story += [t, Spacer(1, 4 * mm)]


def content(rng):
    d = Doc()
    supplier, customer = "Bluestone Analytics Ltd", "Northwind Logistics Kft."
    sign = (2024, rng.randrange(1, 13), rng.randrange(1, 28))
    start = (sign[0] + 1, 1, 1) if sign[1] == 12 else (sign[0], sign[1] + 1, 1)
    term_years = rng.choice([3, 4, 5])
    d.story.append(Paragraph("Data Platform Services Agreement", d.s["title"]))
    d.p("This Data Platform Services Agreement (the \u201cAgreement\u201d) is made on %s between %s, a company "
        "registered in England and Wales with company number 09417752, whose registered office is at 40 Canal Wharf, "
        "Leeds LS11 5PS (the \u201cSupplier\u201d), and %s, a company registered in Hungary with tax number "
        "26417358-2-41, whose registered office is at Váci út 141., 1138 Budapest (the \u201cCustomer\u201d)." % (
            date(sign), supplier, customer))
    d.q("On what date was the Data Platform Services Agreement made?", date(sign), "is made on " + date(sign))
    d.q("What is the registered office address of the Supplier?", "40 Canal Wharf, Leeds LS11 5PS")
    d.q("What is the Hungarian tax number of the Customer?", "26417358-2-41")
    d.h2("Background")
    d.p("The Customer operates road freight and contract logistics services from ten sites in Hungary and wishes to "
        "consolidate the data produced by its warehouse, transport and finance systems on one platform. The Supplier "
        "designs and operates data platforms for logistics companies and has offered to provide the services described "
        "in this Agreement. The parties have agreed that the services will be provided on the terms set out below, "
        "which supersede the letter of intent exchanged between them.")
    d.p("The Agreement consists of these clauses and of the Annexes. If a clause and an Annex conflict, the clause "
        "prevails, except that the prices in Annex A prevail over any price stated elsewhere.")

    d.h1("1. Definitions and interpretation")
    terms = [
        ("Acceptance", "the written confirmation by the Customer that a Deliverable meets its acceptance criteria"),
        ("Business Day", "a day other than a Saturday, a Sunday or a public holiday in Hungary"),
        ("Change Request", "a written request by either party to change the Services, the Fees or the Plan"),
        ("Commencement Date", "the date on which the Supplier starts to provide the operational Services"),
        ("Customer Data", "all data, documents and records supplied by or on behalf of the Customer"),
        ("Deliverable", "any item that the Supplier is to deliver under the Implementation Plan"),
        ("Fees", "the charges payable by the Customer for the Services as set out in Annex A"),
        ("Incident", "an unplanned interruption of a Service or a reduction in its quality"),
        ("Maintenance Window", "a period agreed in Annex B during which planned work may interrupt a Service"),
        ("Month", "a calendar month"),
        ("Personal Data", "personal data as defined in Article 4 of Regulation (EU) 2016/679"),
        ("Platform", "the hardware, software and cloud resources used by the Supplier to provide the Services"),
        ("Service Credit", "the amount by which the Fees are reduced when a Service Level is missed"),
        ("Service Level", "a measurable target for the performance of a Service, as set out in clause 4"),
        ("Services", "the services described in clause 3 and any services added by a Change Request"),
        ("Site", "a location of the Customer listed in clause 5"),
        ("Steering Committee", "the body described in clause 8 that oversees the Agreement"),
        ("Term", "the period described in clause 11"),
    ]
    for t, meaning in terms:
        d.p("\u201c%s\u201d means %s." % (t, meaning))
    d.p("Headings are for convenience only. Words in the singular include the plural and the other way round. "
        "A reference to a statute includes that statute as amended or re-enacted. The words \u201cincluding\u201d and "
        "\u201cin particular\u201d illustrate and do not limit the words before them.")

    d.h1("2. Term of the services")
    d.p("The Supplier shall provide the operational Services from the Commencement Date, which the parties have set "
        "at %s, for an initial period of %d years." % (date(start), term_years))
    d.q("What is the Commencement Date of the operational Services?", date(start), "have set at " + date(start))
    d.q("How long is the initial period of the Agreement?", "%d years" % term_years, "initial period of %d years" % term_years)
    d.p("Before the Commencement Date the Supplier shall carry out the implementation described in clause 6. The "
        "implementation is complete when the Customer has given Acceptance of the last Deliverable of the "
        "Implementation Plan, or when it is treated as having given Acceptance under clause 6.")

    d.h1("3. The Services")
    d.p("The Supplier shall provide the following Services. Each Service is provided by the named team of the "
        "Supplier, during the service hours stated, and is measured by the Service Levels in clause 4.")
    hours = ["Monday to Friday, 07:00 to 19:00 CET", "24 hours a day, 7 days a week", "Monday to Saturday, 06:00 to 22:00 CET",
             "Business Days, 08:00 to 17:00 CET"]
    svc_facts = []
    for i, ((name, what), team) in enumerate(zip(SERVICES, TEAMS)):
        h = hours[(i * 3 + rng.randrange(2)) % len(hours)]
        staff = rng.randrange(2, 15)
        d.h2("3.%d %s" % (i + 1, name))
        d.p("The %s Service covers %s. It is provided by the Supplier's %s, which will assign %d named "
            "specialists to the Customer, and it is available %s. Requests outside these hours are handled on the "
            "next working period unless the request concerns a priority 1 Incident." % (name, what, team, staff, h))
        extra = {
            0: "New source systems are connected through a Change Request; the first five connections are included in the Fees.",
            1: "Each failed check raises an alert in the service desk tool within the hour and is reported in the monthly service report.",
            2: "The report library holds at least 40 standard reports at the Commencement Date; further reports are priced per Annex A.",
            3: "Forecasts are delivered each Monday by 09:00 CET and cover the following twelve weeks.",
            4: "Route proposals for the next day are published by 18:00 CET and may be overridden by the Customer's dispatchers.",
            5: "Documents are processed in Hungarian, English and German; a document that cannot be read is returned with the reason within one Business Day.",
            6: "The service desk may be reached by telephone on +36 1 555 0142 and by e-mail at servicedesk@bluestone-analytics.example.",
            7: "Backups are taken every four hours and restored in a test environment at least once a quarter.",
            8: "Critical vulnerabilities are remediated within 72 hours of publication of a fix.",
            9: "The Supplier shall deliver up to 24 training days per contract year without additional charge.",
            10: "Archived documents are retrievable within two Business Days and kept for the retention periods in clause 9.",
            11: "Standard changes are implemented within ten Business Days of approval by the Change Board.",
        }[i]
        d.p(extra)
        io_ = IO[i]
        d.p("Inputs and outputs. The %s Service takes as its input %s and produces %s. The Customer shall %s, and "
            "shall tell the Supplier without delay of any change on its side that may affect the Service." % (name, *io_))
        svc_facts.append((name, team, staff, h))
    d.q("Which team of the Supplier provides the Demand forecasting Service?", TEAMS[3],
        "Demand forecasting Service covers")
    d.q("How many named specialists are assigned to the Route optimisation Service?", "%d named specialists" % svc_facts[4][2],
        "assign %d named specialists" % svc_facts[4][2])
    d.q("What is the telephone number of the service desk?", "+36 1 555 0142")
    d.q("How often are backups of the platform taken?", "every four hours", "Backups are taken every four hours")
    d.q("Within how many hours must critical vulnerabilities be remediated?", "72 hours", "remediated within 72 hours")
    d.q("How many training days per contract year are included without additional charge?", "24 training days")
    d.q("By what time are next-day route proposals published?", "18:00 CET", "are published by 18:00 CET")

    d.h1("4. Service levels and service credits")
    d.p("The Supplier shall meet the Service Levels in the table below in each Month. Availability is measured at "
        "the Customer's network boundary and excludes Maintenance Windows. Response and resolution times run during "
        "the service hours of the Service concerned.")
    avail = ["99.5%", "99.7%", "99.9%", "99.0%", "99.8%", "99.5%", "99.9%", "99.95%", "99.9%", "98.0%", "99.5%", "99.0%"]
    rows = [["Service", "Availability", "P1 response", "P1 resolution", "Credit per missed level"]]
    credits = []
    for i, (name, _) in enumerate(SERVICES):
        cr = rng.choice([2, 3, 4, 5])
        credits.append(cr)
        rows.append([name, avail[i], "%d minutes" % rng.choice([15, 30, 30, 60]), "%d hours" % rng.choice([4, 4, 8, 12]),
                     "%d%% of the monthly Fee" % cr])
    d.table(rows, [45 * mm, 25 * mm, 25 * mm, 27 * mm, 45 * mm])
    d.q("What availability target applies to the Platform operations Service?", avail[7])
    d.p("If the Supplier misses a Service Level in a Month, the Customer is entitled to the Service Credit stated for "
        "that Service Level. Service Credits for one Month shall not exceed 12% of the Fees for that Month in total. "
        "Service Credits are deducted from the next invoice and are the Customer's only financial remedy for the "
        "missed Service Level, without prejudice to its right to terminate under clause 11.")
    d.q("What is the maximum total of Service Credits in one Month?", "12% of the Fees", "shall not exceed 12% of the Fees")
    d.p("Where the Supplier misses the same Service Level in three consecutive Months, the parties shall agree a "
        "remediation plan within ten Business Days, and the Supplier shall report on its progress at every meeting of "
        "the Steering Committee until the Service Level has been met for two consecutive Months.")
    d.p("The Supplier shall send a service report to the Customer by the fifth Business Day of each Month. The report "
        "shows, for each Service, the Service Levels achieved, the Incidents and their causes, the changes made and the "
        "Service Credits that apply.")
    d.q("By which Business Day of each Month is the service report due?", "the fifth Business Day",
        "by the fifth Business Day of each Month")

    d.h1("5. Sites")
    d.p("The Services are provided to the following Sites. The Customer shall give the Supplier's staff access to "
        "each Site during its opening hours on reasonable notice, and shall provide a desk and a network connection "
        "for visiting staff.")
    site_rows = [["Site", "Address", "Opening hours", "Users"]]
    site_users = []
    for i, (city, street) in enumerate(CITIES):
        users = rng.randrange(20, 400)
        site_users.append(users)
        oh = rng.choice(["06:00-22:00", "00:00-24:00", "07:00-19:00", "05:00-23:00"])
        site_rows.append(["%s %s" % (city, "hub" if i % 3 == 0 else ("depot" if i % 3 == 1 else "warehouse")),
                          "%s, %s" % (street, city), oh, "%d" % users])
        d.p("The %s Site at %s operates from %s and has %d users of the Services. %s" % (
            city, street, oh, users,
            ["Its loading docks are shared with a third party, and the Supplier's staff shall follow the third party's safety rules.",
             "It holds the Customer's bonded warehouse, and access to it requires a customs escort.",
             "It is the Customer's main cross-docking site for western Hungary.",
             "It hosts the Customer's second data room, which is the disaster recovery location for the Platform's on-premises components.",
             "It serves as the Customer's training centre.",
             "It runs a temperature-controlled zone for pharmaceutical goods.",
             "It is scheduled to move to a new building during the Term, and the move is a planned Change Request.",
             "It handles the Customer's returns processing.",
             "It is the operations base for the Customer's eastern routes.",
             "It is the smallest Site and is staffed only on weekdays."][i]))
    d.q("How many users of the Services does the Szeged Site have?", "%d users" % site_users[3], "has %d users" % site_users[3])
    d.q("Which Site hosts the disaster recovery location for the Platform's on-premises components?", "Szeged",
        "It hosts the Customer's second data room")
    d.table(site_rows, [38 * mm, 62 * mm, 30 * mm, 20 * mm])

    d.h1("6. Implementation")
    d.p("The Supplier shall carry out the implementation in the milestones below. For each milestone the Supplier "
        "shall deliver the Deliverables listed, and the Customer shall test them against their acceptance criteria "
        "within ten Business Days of delivery. If the Customer neither gives Acceptance nor reports a defect within that "
        "period, it is treated as having given Acceptance.")
    ms = [("M1", "Project initiation", "project plan, risk register and communication plan"),
          ("M2", "Platform build", "production and test environments with security hardening"),
          ("M3", "Source connections", "connections to the warehouse, transport and finance systems"),
          ("M4", "Data migration", "historical data for the last five years loaded and reconciled"),
          ("M5", "Reporting release", "the standard report library and the first ten custom reports"),
          ("M6", "Forecasting release", "the demand forecasting model with back-testing results"),
          ("M7", "Document processing release", "the document extraction workflow for invoices and delivery notes"),
          ("M8", "Service transition", "operational handover, runbooks and trained service desk")]
    ms_rows = [["Milestone", "Name", "Due date", "Milestone payment"]]
    ms_pay = []
    y, m = sign[0], sign[1]
    for i, (code, name, deliv) in enumerate(ms):
        m += rng.choice([1, 1, 2])
        if m > 12:
            y, m = y + 1, m - 12
        due = (y, m, rng.randrange(5, 28))
        pay = rng.randrange(20, 120) * 1000 + 500 * rng.randrange(2)
        ms_pay.append((code, name, due, pay))
        ms_rows.append([code, name, date(due), money(pay)])
        d.p("Milestone %s (%s) is due on %s. Its Deliverables are the %s. On Acceptance the Supplier may invoice a "
            "milestone payment of %s." % (code, name, date(due), deliv, money(pay)))
    d.table(ms_rows, [22 * mm, 60 * mm, 35 * mm, 40 * mm])
    d.q("When is milestone M4 (Data migration) due?", date(ms_pay[3][2]), "Milestone M4 (Data migration) is due on " + date(ms_pay[3][2]))
    d.q("What milestone payment may be invoiced on Acceptance of milestone M6?", money(ms_pay[5][3]),
        "milestone payment of " + money(ms_pay[5][3]))
    d.q("How many years of historical data are migrated in milestone M4?", "the last five years",
        "historical data for the last five years")
    d.p("If a milestone is late by more than 20 Business Days for reasons attributable to the Supplier, the Supplier "
        "shall pay liquidated damages of 0.5% of the milestone payment for each further Business Day, capped at 10% "
        "of that milestone payment.")
    d.q("What liquidated damages apply per Business Day when a milestone is late?", "0.5% of the milestone payment",
        "liquidated damages of 0.5% of the milestone payment")

    d.h1("7. Fees and payment")
    monthly = rng.randrange(30, 90) * 1000 + 750
    d.p("In consideration of the operational Services the Customer shall pay a monthly service fee of %s, excluding "
        "VAT, from the Commencement Date. The monthly service fee covers the Services for up to %d users in total; "
        "each further user is charged at the price in Annex A." % (money(monthly), 2000))
    d.q("What is the monthly service fee, excluding VAT?", money(monthly), "monthly service fee of " + money(monthly))
    idx = rng.choice(["3.0%", "3.5%", "4.0%"])
    d.p("The Fees are fixed for the first contract year. From the second contract year the Supplier may increase the "
        "Fees once a year, on the anniversary of the Commencement Date, by the change in the harmonised index of "
        "consumer prices for the euro area published by Eurostat for the previous calendar year, but by no more than "
        "%s in any one year." % idx)
    d.q("What is the cap on the annual increase of the Fees?", idx, "by no more than %s in any one year" % idx)
    d.p("The Supplier shall invoice the monthly service fee in advance on the first Business Day of each Month, and "
        "all other Fees monthly in arrears. Invoices are issued electronically in EN 16931 format and sent to "
        "invoices@northwind-logistics.example. The Customer shall pay each undisputed invoice within 30 days of receipt "
        "by transfer to the account stated on the invoice.")
    d.q("To which e-mail address are invoices sent?", "invoices@northwind-logistics.example")
    d.q("Within how many days must the Customer pay an undisputed invoice?", "30 days", "within 30 days of receipt")
    d.p("If the Customer disputes an invoice in good faith, it shall notify the Supplier within 15 days of receipt, "
        "stating the reasons, and pay the undisputed part. Late payments bear interest at the rate of 8 percentage "
        "points above the base rate of the European Central Bank from the due date until payment.")
    d.q("What interest rate applies to late payments?", "8 percentage points above the base rate of the European Central Bank",
        "at the rate of 8 percentage points above")
    d.p("All Fees are stated in euro and exclude value added tax, which the Customer shall pay in addition at the "
        "rate in force at the time of supply where the Supplier is obliged to charge it. Where the reverse charge "
        "mechanism applies, the Customer shall account for the tax.")

    d.h1("8. Personnel and governance")
    d.p("Each party appoints the following key persons. A party may replace a key person by giving the other party "
        "written notice of at least 30 days, except where the person leaves its employment.")
    for n, role in PEOPLE:
        d.p("%s acts as %s and is the first point of escalation for matters within that role." % (n, role))
    d.q("Who is the Customer's Data Protection Officer?", "Gábor Fekete")
    d.q("Who acts as the Supplier Security Lead?", "Priya Shah")
    sc = rng.choice(["first Tuesday", "second Wednesday", "last Thursday"])
    d.p("The Steering Committee consists of the Customer Project Director, the Supplier Account Executive and one "
        "further member appointed by each party. It meets on the %s of every Month during the implementation and "
        "quarterly afterwards. Decisions of the Steering Committee require the agreement of at least one member of "
        "each party and are recorded in minutes circulated within five Business Days." % sc)
    d.q("When does the Steering Committee meet during the implementation?", "the %s of every Month" % sc,
        "It meets on the %s of every Month" % sc)
    d.p("The Supplier shall ensure that its staff working at the Sites comply with the Customer's site rules, "
        "including its health and safety, security and environmental policies, copies of which the Customer shall "
        "provide before the first visit.")

    d.h1("9. Data protection and security")
    d.p("To the extent that the Supplier processes Personal Data on behalf of the Customer, it does so as a processor "
        "under the data processing terms in Annex C, which comply with Article 28 of Regulation (EU) 2016/679. The "
        "Supplier shall process Customer Data only in data centres located in the European Economic Area.")
    d.p("The Supplier shall notify the Customer of a personal data breach without undue delay and in any event within "
        "24 hours of becoming aware of it, with the information the Customer needs to meet its own obligations.")
    d.q("Within how many hours must the Supplier notify the Customer of a personal data breach?", "24 hours",
        "in any event within 24 hours")
    d.p("Customer Data is kept for the following retention periods unless the Customer instructs otherwise: "
        "operational records for 3 years, invoices and accounting documents for 8 years as required by Hungarian "
        "accounting law, customs documents for 5 years, and system logs for 13 months.")
    d.q("For how long are invoices and accounting documents retained?", "8 years", "accounting documents for 8 years")
    d.q("For how long are system logs kept?", "13 months", "system logs for 13 months")
    d.p("The Supplier shall maintain a certification to ISO/IEC 27001 for the Platform throughout the Term and shall "
        "provide the Customer with its certificate and the summary of its latest surveillance audit on request. The "
        "Customer may audit the Supplier's compliance with this clause once a year on 20 Business Days' notice.")

    d.h1("10. Liability and insurance")
    cap = rng.choice([100, 125, 150])
    d.p("Each party's total liability arising out of or in connection with this Agreement in any contract year is "
        "limited to %d%% of the Fees paid or payable in that contract year. The limit does not apply to liability for "
        "death or personal injury caused by negligence, for fraud, or for breach of clause 9." % cap)
    d.q("What is each party's liability cap per contract year?", "%d%% of the Fees" % cap, "limited to %d%% of the Fees" % cap)
    d.p("Neither party is liable for loss of profit, loss of revenue or any indirect or consequential loss. The "
        "Supplier shall maintain professional indemnity insurance with cover of at least EUR 5,000,000 per claim and "
        "cyber insurance with cover of at least EUR 2,000,000 per claim, and shall produce evidence of cover on request.")
    d.q("What is the minimum cover of the professional indemnity insurance?", "EUR 5,000,000 per claim",
        "cover of at least EUR 5,000,000 per claim")

    d.h1("11. Renewal and termination")
    d.p("After the initial period the Agreement renews automatically for successive periods of 12 months unless either "
        "party gives notice of non-renewal at least 6 months before the end of the current period.")
    d.q("How much notice is needed to prevent the automatic renewal?", "6 months", "at least 6 months before the end")
    d.p("Either party may terminate the Agreement with immediate effect by written notice if the other party commits a "
        "material breach that is not remedied within 30 days of a notice describing it, or if the other party becomes "
        "insolvent. The Customer may also terminate if the Supplier misses the same Service Level in four Months of any "
        "six-month period.")
    d.p("On termination the Supplier shall provide exit assistance for up to 6 months at the rates in Annex A, return "
        "all Customer Data in an open, documented format within 30 days, and then delete its copies, confirming the "
        "deletion in writing.")

    d.h1("12. General")
    d.p("This Agreement is governed by Hungarian law. The parties shall try to settle any dispute through the Steering "
        "Committee and then through their chief executives; a dispute not settled within 45 days shall be decided by "
        "the Budapest-Capital Regional Court.")
    d.q("Which court decides disputes that are not settled within 45 days?", "the Budapest-Capital Regional Court")
    d.p("Notices under this Agreement must be in writing and are sent to the registered office of the other party, "
        "for the attention of its key person named in clause 8, with a copy by e-mail. A notice is received on the "
        "Business Day after it is delivered.")
    d.p("Neither party may assign this Agreement without the consent of the other, which shall not be unreasonably "
        "withheld. The Supplier may use subcontractors only with the Customer's prior consent; the Supplier remains "
        "responsible for its subcontractors as for itself.")

    d.story.append(PageBreak())
    d.h1("Annex A \u2013 Price list")
    d.p("All prices exclude VAT. Day rates apply to work ordered through a Change Request and to exit assistance.")
    roles = ["Solution architect", "Data engineer", "Senior data engineer", "Data scientist", "Report developer",
             "Project manager", "Security consultant", "Trainer", "Service desk analyst", "Platform engineer"]
    price_rows = [["Item", "Unit", "Price"]]
    prices = {}
    for r in roles:
        v = rng.randrange(55, 140) * 10
        prices[r] = v
        price_rows.append([r, "day", money(v)])
    extras = [("Additional user above 2,000", "user / month", rng.randrange(3, 9) + 0.5),
              ("Additional custom report", "report", rng.randrange(9, 30) * 100),
              ("Additional source connection", "connection", rng.randrange(40, 90) * 100),
              ("Document processing above 50,000 pages", "1,000 pages", rng.randrange(20, 60)),
              ("Archive storage above 10 TB", "TB / month", rng.randrange(15, 40)),
              ("Training day above the included days", "day", rng.randrange(70, 110) * 10)]
    for n, u, v in extras:
        prices[n] = v
        price_rows.append([n, u, money(v)])
    d.table(price_rows, [85 * mm, 35 * mm, 35 * mm])
    d.q("What is the day rate of a Data scientist?", money(prices["Data scientist"]))
    d.q("What is the price of an additional custom report?", money(prices["Additional custom report"]))

    d.h1("Annex B \u2013 Maintenance windows")
    d.p("Planned work that may interrupt a Service is carried out only in the following Maintenance Windows. The "
        "Supplier shall announce each use of a Maintenance Window at least five Business Days in advance.")
    mw_rows = [["Window", "When", "Maximum duration", "Services affected"]]
    for i, (when, dur, aff) in enumerate([
            ("Every Sunday, 01:00-05:00 CET", "4 hours", "All Services except the Service desk"),
            ("First Saturday of each quarter, 22:00-06:00 CET", "8 hours", "Platform operations, Archive"),
            ("Each Wednesday, 21:00-22:00 CET", "1 hour", "Reporting"),
            ("Second Sunday of January and July, 00:00-12:00 CET", "12 hours", "All Services")]):
        mw_rows.append(["W%d" % (i + 1), when, dur, aff])
    d.table(mw_rows, [18 * mm, 70 * mm, 30 * mm, 52 * mm])
    d.q("What is the maximum duration of maintenance window W2?", "8 hours", "First Saturday of each quarter")

    d.h1("Annex C \u2013 Data processing terms")
    clauses = [
        "The subject matter of the processing is the provision of the Services; its duration is the Term and the exit period.",
        "The categories of data subjects are the Customer's employees, drivers, customers' contact persons and consignees.",
        "The types of Personal Data are names, business contact details, vehicle registration numbers, delivery addresses and signatures on delivery notes.",
        "The Supplier shall process Personal Data only on the Customer's documented instructions, including those in this Agreement.",
        "The Supplier shall ensure that persons authorised to process Personal Data are bound by confidentiality.",
        "The Supplier shall implement the technical and organisational measures described in its security schedule, as updated from time to time without reducing the overall level of protection.",
        "The Supplier may engage the sub-processors listed below; it shall inform the Customer of any intended change at least 30 days in advance, giving the Customer the opportunity to object.",
        "The Supplier shall assist the Customer in responding to requests from data subjects and in meeting its obligations under Articles 32 to 36 of Regulation (EU) 2016/679.",
        "At the end of the provision of the Services the Supplier shall delete or return all Personal Data, at the Customer's choice, and delete existing copies unless law requires their storage.",
        "The Supplier shall make available to the Customer all information necessary to demonstrate compliance with these terms and allow for and contribute to audits.",
    ]
    for i, c in enumerate(clauses):
        d.p("C.%d %s" % (i + 1, c))
    sub_rows = [["Sub-processor", "Service", "Location"],
                ["Helix Cloud Services B.V.", "Infrastructure hosting", "Amsterdam, Netherlands"],
                ["Tarn Document Systems GmbH", "Optical character recognition", "Frankfurt am Main, Germany"],
                ["Kestrel Support s.r.o.", "Second-line service desk", "Brno, Czech Republic"]]
    d.table(sub_rows, [60 * mm, 55 * mm, 50 * mm])
    d.q("Which sub-processor provides optical character recognition?", "Tarn Document Systems GmbH")

    d.h1("Annex D \u2013 Business continuity")
    d.p("The Supplier shall maintain a business continuity plan for the Services and test it at least once a year "
        "together with the Customer. The recovery point objective (RPO) is the maximum period of data that may be "
        "lost; the recovery time objective (RTO) is the maximum time to restore a Service after a disaster is declared.")
    bc_rows = [["Service", "RPO", "RTO"]]
    rto = {}
    for i, (name, _) in enumerate(SERVICES):
        r = rng.choice([1, 2, 4, 8, 24])
        t = rng.choice([4, 8, 12, 24, 48])
        rto[name] = t
        bc_rows.append([name, "%d hours" % r, "%d hours" % t])
    d.table(bc_rows, [70 * mm, 35 * mm, 35 * mm])
    d.p("A disaster may be declared by the Supplier Service Delivery Manager or by the Customer Head of IT Operations. "
        "After a declaration the Supplier shall report on the recovery every two hours until all Services are restored, "
        "and shall deliver a written post-incident review within ten Business Days.")
    d.q("Who may declare a disaster on the Customer's side?", "the Customer Head of IT Operations",
        "or by the Customer Head of IT Operations")
    d.p("The annual test covers at least the failover of the Platform to the secondary region and the restoration of "
        "the Archive from backup. The Supplier shall share the test report with the Steering Committee, including the "
        "RPO and RTO achieved and the actions it will take where an objective was missed.")

    d.h1("Annex E \u2013 Report catalogue")
    d.p("The standard report library at the Commencement Date contains the reports below. Reports marked \u201cdaily\u201d "
        "are refreshed by 06:00 CET; weekly reports on Mondays; monthly reports on the second Business Day of the Month.")
    subjects = ["Inbound volumes", "Outbound volumes", "Dock utilisation", "Vehicle utilisation", "On-time delivery",
                "Damaged goods", "Returns", "Inventory accuracy", "Picking productivity", "Fuel consumption",
                "Carbon emissions", "Customs clearance time", "Invoice accuracy", "Debtor days", "Route deviation",
                "Driver hours", "Claims", "Overtime", "Temperature excursions", "Customer complaints"]
    freqs = ["daily", "weekly", "monthly"]
    aud = ["Site managers", "Transport planners", "Finance", "Executive board", "Quality team", "Customer service"]
    rep_rows = [["No.", "Report", "Frequency", "Audience"]]
    rep = []
    for i, sub in enumerate(subjects):
        for k in range(2):
            f = freqs[(i + k) % 3]
            a = aud[(i * 2 + k) % len(aud)]
            title = "%s %s" % (sub, ["by site", "trend"][k])
            rep.append((title, f, a))
            rep_rows.append(["R%02d" % len(rep), title, f, a])
    d.table(rep_rows, [15 * mm, 75 * mm, 30 * mm, 45 * mm])
    d.q("What is the frequency of report R17?", rep[16][1], rep[16][0])
    d.q("Who is the audience of the report Carbon emissions by site?", [r for r in rep if r[0] == "Carbon emissions by site"][0][2],
        "Carbon emissions by site")

    d.h1("Annex F \u2013 Glossary of logistics terms")
    gloss = [
        ("Cross-docking", "unloading goods from an inbound vehicle and loading them onto an outbound vehicle with little or no storage in between"),
        ("Consignment", "a quantity of goods sent together from one consignor to one consignee under one transport document"),
        ("CMR note", "the consignment note used for international road carriage under the CMR Convention"),
        ("Dock door", "an opening in a warehouse wall where vehicles are loaded and unloaded"),
        ("Drop trailer", "a trailer left at a site for loading or unloading while the tractor unit moves on"),
        ("FTL", "full truck load: a shipment that uses the whole capacity of a vehicle"),
        ("LTL", "less than truck load: a shipment that shares a vehicle with other shipments"),
        ("Milk run", "a fixed route on which one vehicle collects from or delivers to several locations in turn"),
        ("Pallet space", "the floor area occupied by one standard pallet in a vehicle or a rack"),
        ("Proof of delivery", "the signed record that a consignment was received by the consignee"),
        ("Slotting", "the assignment of products to storage locations to reduce travel during picking"),
        ("SKU", "stock keeping unit: a distinct item held in inventory"),
        ("Wave picking", "releasing groups of orders for picking at set times to balance the workload"),
        ("Yard management", "the control of the movement of vehicles and trailers within a site's yard"),
        ("Bonded warehouse", "a warehouse where imported goods may be stored under customs control before duties are paid"),
        ("Demurrage", "a charge for holding a container or trailer beyond the agreed free time"),
        ("Backhaul", "the return journey of a vehicle, used to carry goods instead of running empty"),
        ("Cycle count", "counting a part of the inventory on a rotating schedule instead of a full stocktake"),
    ]
    for t, m in gloss:
        d.p("%s: %s." % (t, m))

    d.h1("Signatures")
    d.p("Signed for and on behalf of %s by Thomas Reed, Account Executive, and for and on behalf of %s by "
        "Eszter Varga, Project Director, on the date stated at the beginning of this Agreement." % (supplier, customer))
    return d


def pages_text(pdf_bytes):
    out = subprocess.run(["pdftotext", "-layout", "-enc", "UTF-8", "-", "-"], input=pdf_bytes, capture_output=True,
                         check=True).stdout.decode("utf-8")
    return [re.sub(r"\s+", " ", p) for p in out.split("\f")]


def generate(seed):
    rng = random.Random("quarry-longdoc/%s" % seed)
    holder = {}

    def story():
        holder["d"] = content(random.Random(rng.random()))
        return holder["d"].story
    pdf = RP.build_pdf(story, "Data Platform Services Agreement", "Bluestone Analytics Ltd", "Page {p} of {n}", "en")
    d = holder["d"]
    pages = pages_text(pdf)
    answers = []
    for q, a, ev in d.qa:
        hits = [i + 1 for i, t in enumerate(pages) if ev in t]
        if len(hits) != 1:
            raise SystemExit("long document: evidence %r found on pages %s (need exactly one)" % (ev, hits))
        if a not in pages[hits[0] - 1]:
            raise SystemExit("long document: answer %r not on page %d" % (a, hits[0]))
        answers.append({"question": q, "answer": a, "evidence": ev, "page": hits[0]})
    return pdf, answers, len(pages) - (1 if pages and not pages[-1].strip() else 0)


def write_all(out, seed):
    pdf, answers, n_pages = generate(seed)
    os.makedirs(os.path.join(out, "long"), exist_ok=True)
    os.makedirs(os.path.join(out, "questions"), exist_ok=True)
    with open(os.path.join(out, "long", NAME + ".pdf"), "wb") as f:
        f.write(pdf)
    with open(os.path.join(out, "questions", NAME + ".txt"), "w", encoding="utf-8") as f:
        f.write("".join(a["question"] + "\n" for a in answers))
    with open(os.path.join(out, "questions", NAME + ".hu.txt"), "w", encoding="utf-8") as f:
        f.write("".join(QUESTIONS_HU[a["question"]] + "\n" for a in answers))
    with open(os.path.join(out, "questions", NAME + ".answers.jsonl"), "w", encoding="utf-8") as f:
        f.write("".join(json.dumps(a, ensure_ascii=False) + "\n" for a in answers))
    return n_pages, len(answers)
