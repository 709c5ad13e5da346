// The committed samples (samples/) are consistent: every expected JSON parses and has the invoice
// schema's shape, its arithmetic holds, its identifiers carry valid check digits, and every value
// the manifest says is printed is found in the document's text and means the expected value. The
// long document's answers are on the pages the answers file names.
//
// The check-digit code here is written independently of the generator (tools/samples, Python) and
// is itself checked against published identifiers and the NAV sample invoices in the shared corpora.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

// The invoice schema's validator (valijson) arrives with schemas/validate.hpp; until it is in the
// tree, the schema test below is not compiled.
#if __has_include("schemas/validate.hpp")
#include "tests/common/run_command.hpp"
#include "schemas/validate.hpp"
#define QUARRY_HAVE_SCHEMA_VALIDATOR 1
#endif

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path kSamples = fs::path(QUARRY_SOURCE_DIR) / "samples";

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + p.string());
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool have_pdftotext() { return std::system("pdftotext -v > /dev/null 2>&1") == 0; }

std::string pdftotext(const fs::path& pdf, int page = 0) { return quarry::test_support::pdftotext_layout(pdf, page).out; }

// Decodes the character references that appear in our HTML and XML (named basics and numeric).
std::string decode_entities(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    std::size_t semi = s.find(';', i);
    if (semi == std::string::npos || semi - i > 10) {
      out += s[i];
      continue;
    }
    std::string ent = s.substr(i + 1, semi - i - 1);
    static const std::map<std::string, std::string> named{
        {"amp", "&"}, {"lt", "<"}, {"gt", ">"}, {"quot", "\""}, {"apos", "'"}, {"nbsp", "\xC2\xA0"}};
    if (auto it = named.find(ent); it != named.end()) {
      out += it->second;
    } else if (!ent.empty() && ent[0] == '#') {
      unsigned long cp = ent.size() > 1 && (ent[1] == 'x' || ent[1] == 'X') ? std::stoul(ent.substr(2), nullptr, 16)
                                                                            : std::stoul(ent.substr(1));
      if (cp < 0x80) {
        out += static_cast<char>(cp);
      } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      } else {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      }
    } else {
      out += s[i];
      continue;
    }
    i = semi;
  }
  return out;
}

// Collapses runs of blanks (space, tab, no-break space) and, with `newlines`, line breaks too.
std::string collapse(const std::string& s, bool newlines) {
  std::string out;
  bool blank = false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    bool b = s[i] == ' ' || s[i] == '\t' || (newlines && (s[i] == '\n' || s[i] == '\f' || s[i] == '\r'));
    if (!b && i + 1 < s.size() && static_cast<unsigned char>(s[i]) == 0xC2 &&
        static_cast<unsigned char>(s[i + 1]) == 0xA0) {
      b = true;
      ++i;
    }
    if (b) {
      if (!blank) out += ' ';
      blank = true;
    } else {
      out += s[i];
      blank = false;
    }
  }
  return out;
}

// ---- identifiers --------------------------------------------------------------------------------

// ISO 13616 IBAN: country-specific length, then mod 97 of the rearranged number == 1 (ISO 7064).
bool iban_valid(std::string iban) {
  std::string s;
  for (char c : iban)
    if (c != ' ') s += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  static const std::map<std::string, std::size_t> len{{"HU", 28}, {"DE", 22}, {"FR", 27}, {"GB", 22}, {"AT", 20},
                                                      {"NL", 18}, {"BE", 16}, {"IT", 27}, {"NO", 15}};
  if (s.size() < 15 || s.size() > 34) return false;
  auto it = len.find(s.substr(0, 2));
  if (it == len.end() || it->second != s.size()) return false;
  std::string r = s.substr(4) + s.substr(0, 4);
  unsigned rem = 0;
  for (char c : r) {
    if (std::isdigit(static_cast<unsigned char>(c))) {
      rem = (rem * 10 + static_cast<unsigned>(c - '0')) % 97;
    } else if (std::isupper(static_cast<unsigned char>(c))) {
      unsigned v = static_cast<unsigned>(c - 'A' + 10);
      rem = (rem * 100 + v) % 97;
    } else {
      return false;
    }
  }
  return rem == 1;
}

// Hungarian tax number base: digits 1-7 weighted 9,7,3,1,9,7,3; check = (10 - sum mod 10) mod 10.
bool hu_base_valid(const std::string& base8) {
  if (base8.size() != 8) return false;
  static constexpr int w[7] = {9, 7, 3, 1, 9, 7, 3};
  int sum = 0;
  for (int i = 0; i < 7; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(base8[i]))) return false;
    sum += (base8[i] - '0') * w[i];
  }
  return std::isdigit(static_cast<unsigned char>(base8[7])) && (10 - sum % 10) % 10 == base8[7] - '0';
}

// adószám "xxxxxxxy-z-ww": valid base, VAT code 1-5, county code.
bool hu_tax_number_valid(const std::string& t) {
  static const std::regex re("^([0-9]{8})-([1-5])-([0-9]{2})$");
  std::smatch m;
  return std::regex_match(t, m, re) && hu_base_valid(m[1]);
}

// Hungarian giro account (8, 16 or 24 digits in groups of 8): each of the bank/branch part (first 8)
// and the account part (the rest) has a check digit with weights 9,7,3,1 repeating, making the
// weighted sum divisible by 10.
bool hu_giro_group_valid(const std::string& d) {
  static constexpr int w[4] = {9, 7, 3, 1};
  int sum = 0;
  for (std::size_t i = 0; i < d.size(); ++i) sum += (d[i] - '0') * w[i % 4];
  return sum % 10 == 0;
}
bool hu_account_valid(const std::string& a) {
  static const std::regex re("^([0-9]{8})-([0-9]{8})(?:-([0-9]{8}))?$");
  std::smatch m;
  if (!std::regex_match(a, m, re)) return false;
  return hu_giro_group_valid(m[1]) && hu_giro_group_valid(m[2].str() + m[3].str());
}

// German USt-IdNr: ISO 7064 MOD 11,10 over the first 8 digits.
bool de_vat_valid(const std::string& d) {
  if (d.size() != 9) return false;
  int product = 10;
  for (int i = 0; i < 8; ++i) {
    int s = (d[i] - '0' + product) % 10;
    if (s == 0) s = 10;
    product = (2 * s) % 11;
  }
  return (11 - product) % 10 == d[8] - '0';
}

bool luhn_valid(const std::string& d) {
  int sum = 0;
  for (std::size_t i = 0; i < d.size(); ++i) {
    int n = d[d.size() - 1 - i] - '0';
    if (i % 2 == 1) {
      n *= 2;
      if (n > 9) n -= 9;
    }
    sum += n;
  }
  return sum % 10 == 0;
}

bool vat_id_valid(const std::string& v) {
  if (v.size() < 4) return false;
  std::string cc = v.substr(0, 2), rest = v.substr(2);
  for (char c : rest)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  if (cc == "HU") return hu_base_valid(rest);
  if (cc == "DE") return de_vat_valid(rest);
  if (cc == "FR") {  // key = (12 + 3 * (SIREN mod 97)) mod 97, SIREN passes Luhn
    if (rest.size() != 11) return false;
    const std::string siren = rest.substr(2);
    return luhn_valid(siren) && std::stoi(rest.substr(0, 2)) == (12 + 3 * static_cast<int>(std::stoll(siren) % 97)) % 97;
  }
  if (cc == "GB") {  // weights 8..2 over 7 digits, plus the last two, divisible by 97 (or with +55)
    if (rest.size() != 9) return false;
    int sum = 0;
    for (int i = 0; i < 7; ++i) sum += (rest[i] - '0') * (8 - i);
    sum += std::stoi(rest.substr(7));
    return sum % 97 == 0 || (sum + 55) % 97 == 0;
  }
  return false;
}

// ---- printed forms ------------------------------------------------------------------------------

// "1 234,56" / "1.234,56" / "1,234.56" / "1234.56" / "-12" -> number. The decimal separator is the
// last '.' or ',' followed by exactly one or two digits; other '.', ',' and blanks are grouping.
std::optional<double> parse_amount(std::string s) {
  s = collapse(s, true);
  std::string digits;
  bool neg = false;
  std::size_t dec = std::string::npos;
  for (std::size_t i = s.size(); i-- > 0;) {
    if (s[i] == '.' || s[i] == ',') {
      std::size_t after = s.size() - i - 1;
      if (after >= 1 && after <= 2) dec = i;
      break;
    }
  }
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '-' && digits.empty()) neg = true;
    else if (std::isdigit(static_cast<unsigned char>(c))) digits += c;
    else if (i == dec) digits += '.';
    else if (c == '.' || c == ',' || c == ' ') continue;
    else return std::nullopt;
  }
  if (digits.empty()) return std::nullopt;
  double v = std::stod(digits);
  return neg ? -v : v;
}

int month_of(const std::string& name) {
  static const std::vector<std::vector<std::string>> months{
      {"January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November",
       "December"},
      {"Januar", "Februar", "März", "April", "Mai", "Juni", "Juli", "August", "September", "Oktober", "November",
       "Dezember"},
      {"január", "február", "március", "április", "május", "június", "július", "augusztus", "szeptember", "október",
       "november", "december"},
      {"janvier", "février", "mars", "avril", "mai", "juin", "juillet", "août", "septembre", "octobre", "novembre",
       "décembre"}};
  for (const auto& lang : months)
    for (std::size_t i = 0; i < lang.size(); ++i)
      if (lang[i] == name) return static_cast<int>(i) + 1;
  return 0;
}

// The printed date forms of Hungarian, German, English and French invoices -> YYYY-MM-DD.
std::optional<std::string> parse_date(const std::string& s) {
  std::smatch m;
  int y = 0, mo = 0, d = 0;
  if (std::regex_match(s, m, std::regex(R"((\d{4})\. ?(\d{2})\. ?(\d{2})\.?)")) ||
      std::regex_match(s, m, std::regex(R"((\d{4})-(\d{2})-(\d{2}))"))) {
    y = std::stoi(m[1]), mo = std::stoi(m[2]), d = std::stoi(m[3]);
  } else if (std::regex_match(s, m, std::regex(R"((\d{2})[./](\d{2})[./](\d{4}))"))) {
    d = std::stoi(m[1]), mo = std::stoi(m[2]), y = std::stoi(m[3]);
  } else if (std::regex_match(s, m, std::regex(R"((\d{4})\. (\S+) (\d{1,2})\.)"))) {
    y = std::stoi(m[1]), mo = month_of(m[2]), d = std::stoi(m[3]);
  } else if (std::regex_match(s, m, std::regex(R"((\d{1,2})\.? (\S+) (\d{4}))"))) {
    d = std::stoi(m[1]), mo = month_of(m[2]), y = std::stoi(m[3]);
  } else if (std::regex_match(s, m, std::regex(R"((\S+) (\d{1,2}), (\d{4}))"))) {
    mo = month_of(m[1]), d = std::stoi(m[2]), y = std::stoi(m[3]);
  } else {
    return std::nullopt;
  }
  if (mo == 0) return std::nullopt;
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02d", y, mo, d);
  return std::string(buf);
}

struct Sample {
  std::string name;
  fs::path file, expected;
  std::string format;
  json entry;
};

std::vector<Sample> load_manifest() {
  json m = json::parse(read_file(kSamples / "manifest.json"));
  std::vector<Sample> out;
  for (const auto& e : m)
    out.push_back({e.at("name"), kSamples / e.at("file").get<std::string>(),
                   kSamples / e.at("expected").get<std::string>(), e.at("format"), e});
  return out;
}

double num(const json& j) { return j.get<double>(); }

}  // namespace

// ---- the check-digit code against identifiers we did not make ----------------------------------

TEST(Identifiers, PublishedIbansAreValid) {
  // Examples from the IBAN registry / bank documentation, and from the EN 16931 example invoices.
  for (const char* i : {"DE89370400440532013000", "GB82WEST12345698765432", "FR1420041010050500013M02606",
                        "HU42117730161111101800000000", "BE91000000143476", "IT64W0100003245243300306301",
                        "NL13RABO0377815500", "NL57 RABO 0107307510", "NO9386011117947"})
    EXPECT_TRUE(iban_valid(i)) << i;
  for (const char* i : {"DE89370400440532013001", "GB82WEST12345698765423", "HU42117730161111101800000001",
                        "DE8937040044053201300", "XX89370400440532013000"})
    EXPECT_FALSE(iban_valid(i)) << i;
}

TEST(Identifiers, PublishedVatIdsAreValid) {
  for (const char* v : {"DE136695976", "FR40303265045", "GB980780684"}) EXPECT_TRUE(vat_id_valid(v)) << v;
  for (const char* v : {"DE136695977", "FR41303265045", "GB980780685", "HU12345678"}) EXPECT_FALSE(vat_id_valid(v)) << v;
}

TEST(Identifiers, NavSampleTaxNumbersAreValid) {
  const fs::path dir = fs::path(QUARRY_SHARED_DIR) / "corpora" / "nav" / "xml";
  if (!fs::is_directory(dir)) GTEST_SKIP() << dir << " not present";
  std::regex re("<(?:[a-z]+:)?taxpayerId>([0-9]{8})</");
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string x = read_file(e.path());
    for (auto it = std::sregex_iterator(x.begin(), x.end(), re); it != std::sregex_iterator(); ++it, ++n)
      EXPECT_TRUE(hu_base_valid((*it)[1])) << e.path() << ": " << (*it)[1];
  }
  EXPECT_GT(n, 0);
  EXPECT_TRUE(hu_account_valid("11773016-11111018-00000000"));  // the giro part of HU42 1177 3016 ...
  EXPECT_FALSE(hu_account_valid("11773016-11111018-00000001"));
}

// ---- the samples --------------------------------------------------------------------------------

TEST(Samples, ManifestListsTheCommittedFiles) {
  auto samples = load_manifest();
  EXPECT_GE(samples.size(), 24u);
  std::set<std::string> langs, formats;
  for (const auto& s : samples) {
    EXPECT_TRUE(fs::is_regular_file(s.file)) << s.file;
    EXPECT_TRUE(fs::is_regular_file(s.expected)) << s.expected;
    langs.insert(s.entry.at("language"));
    formats.insert(s.format);
  }
  EXPECT_EQ(langs, (std::set<std::string>{"de", "en", "fr", "hu"}));
  EXPECT_EQ(formats, (std::set<std::string>{"html", "pdf", "txt", "xml"}));
  // every expected file belongs to a manifest entry
  std::set<fs::path> listed;
  for (const auto& s : samples) listed.insert(s.expected);
  for (const auto& e : fs::directory_iterator(kSamples / "expected")) EXPECT_TRUE(listed.count(e.path())) << e.path();
}

TEST(Samples, ExpectedJsonShapeAndArithmetic) {
  for (const auto& s : load_manifest()) {
    SCOPED_TRACE(s.name);
    json e;
    ASSERT_NO_THROW(e = json::parse(read_file(s.expected)));
    for (const char* k : {"document_type", "invoice_number", "issue_date", "due_date", "delivery_date", "currency",
                          "buyer_reference", "order_reference", "preceding_invoice", "seller", "buyer", "line_items",
                          "vat_breakdown", "totals", "payment"})
      EXPECT_TRUE(e.contains(k)) << k;
    ASSERT_TRUE(e["line_items"].is_array() && !e["line_items"].empty());
    const bool huf = e["currency"] == "HUF";
    const double half_unit = (huf ? 0.5 : 0.005) + 1e-6;  // rounding half up, plus float slack
    const auto& t = e["totals"];

    double lines = 0, line_vat = 0;
    bool have_line_vat = true;
    for (const auto& li : e["line_items"]) {
      const double net = num(li["net_amount"]), q = num(li["quantity"]), p = num(li["unit_price"]);
      lines += net;
      // a line's net is quantity x price, less a discount of at most 20 %
      EXPECT_LE(net, q * p + half_unit) << li.dump();
      EXPECT_GE(net, 0.8 * q * p - half_unit) << li.dump();
      if (huf) {
        EXPECT_EQ(net, std::round(net)) << "HUF amounts are whole forints";
      }
      if (li["vat_amount"].is_null()) {
        have_line_vat = false;
      } else {
        const double rate = li["vat_rate"].is_null() ? 0 : num(li["vat_rate"]);
        EXPECT_NEAR(num(li["vat_amount"]), net * rate / 100, half_unit + 1e-9) << li.dump();
        line_vat += num(li["vat_amount"]);
      }
    }
    EXPECT_NEAR(lines, num(t["net"]), 0.01) << "sum of line net amounts != totals.net";
    EXPECT_NEAR(num(t["net"]) + num(t["vat"]), num(t["gross"]), 0.01) << "net + vat != gross";
    EXPECT_NEAR(num(t["amount_due"]), num(t["gross"]), 0.01);
    if (have_line_vat) {
      EXPECT_NEAR(line_vat, num(t["vat"]), 0.01) << "sum of line VAT != totals.vat";
    }

    double taxable = 0, vat = 0;
    for (const auto& b : e["vat_breakdown"]) {
      taxable += num(b["taxable_amount"]);
      vat += num(b["vat_amount"]);
      const double rate = b["rate"].is_null() ? 0 : num(b["rate"]);
      // category VAT is taxable x rate, rounded once, or (where lines carry VAT) the sum of rounded lines
      EXPECT_NEAR(num(b["vat_amount"]), num(b["taxable_amount"]) * rate / 100,
                  half_unit * static_cast<double>(e["line_items"].size()) + 1e-9);
      if (b["category"] != "S") {
        EXPECT_EQ(num(b["vat_amount"]), 0.0);
      }
    }
    EXPECT_NEAR(taxable, num(t["net"]), 0.01);
    EXPECT_NEAR(vat, num(t["vat"]), 0.01);
    EXPECT_EQ(e["payment"]["due_date"], e["due_date"]);
  }
}

TEST(Samples, IdentifiersHaveValidCheckDigits) {
  int checked = 0;
  for (const auto& s : load_manifest()) {
    SCOPED_TRACE(s.name);
    json e = json::parse(read_file(s.expected));
    for (const char* who : {"seller", "buyer"}) {
      const auto& p = e[who];
      if (p["address"]["country"] == "HU" && p["tax_id"].is_string()) {
        EXPECT_TRUE(hu_tax_number_valid(p["tax_id"])) << p["tax_id"];
        ++checked;
      }
      if (p["vat_id"].is_string()) {
        EXPECT_TRUE(vat_id_valid(p["vat_id"])) << p["vat_id"];
        ++checked;
      }
    }
    const auto& pay = e["payment"];
    if (pay["iban"].is_string()) {
      EXPECT_TRUE(iban_valid(pay["iban"])) << pay["iban"];
      ++checked;
    }
    if (pay["account_number"].is_string()) {
      EXPECT_TRUE(hu_account_valid(pay["account_number"])) << pay["account_number"];
      ++checked;
    }
  }
  EXPECT_GT(checked, 40);
}

TEST(Samples, PrintedValuesAreInTheDocumentAndMeanTheExpectedValue) {
  const bool pdf_ok = have_pdftotext();
  int checked = 0;
  for (const auto& s : load_manifest()) {
    SCOPED_TRACE(s.name);
    std::string text;
    if (s.format == "pdf") {
      if (!pdf_ok) continue;
      text = pdftotext(s.file);
    } else {
      text = read_file(s.file);
      if (s.format == "html" || s.format == "xml") text = decode_entities(text);
    }
    text = collapse(text, false);
    json e = json::parse(read_file(s.expected));
    for (const auto& [ptr, printed_j] : s.entry.at("printed").items()) {
      const std::string printed = printed_j.get<std::string>();
      EXPECT_NE(text.find(collapse(printed, false)), std::string::npos) << ptr << " printed as '" << printed << "'";
      const json& v = e.at(json::json_pointer(ptr));
      if (v.is_number()) {
        auto parsed = parse_amount(printed);
        ASSERT_TRUE(parsed) << ptr << ": cannot read '" << printed << "' as a number";
        EXPECT_NEAR(*parsed, v.get<double>(), 1e-6) << ptr;
      } else if (ptr.find("date") != std::string::npos) {
        EXPECT_EQ(parse_date(printed), v.get<std::string>()) << ptr << " printed as '" << printed << "'";
      } else if (ptr == "/payment/iban") {
        std::string compact;
        for (char c : printed)
          if (c != ' ') compact += c;
        EXPECT_EQ(compact, v.get<std::string>());
      } else {
        EXPECT_EQ(printed, v.get<std::string>()) << ptr;
      }
      ++checked;
    }
    // the expected values that must be printed are in the manifest's list
    for (const char* must : {"/invoice_number", "/totals/gross", "/seller/name"})
      EXPECT_TRUE(s.entry["printed"].contains(must)) << must;
  }
  EXPECT_GT(checked, 300);
}

TEST(Samples, LongDocumentAnswersAreOnTheirPages) {
  if (!have_pdftotext()) GTEST_SKIP() << "pdftotext not installed";
  const fs::path pdf = kSamples / "long" / "services-agreement.pdf";
  std::vector<std::string> questions;
  {
    std::istringstream in(read_file(kSamples / "questions" / "services-agreement.txt"));
    for (std::string l; std::getline(in, l);) questions.push_back(l);
  }
  std::vector<json> answers;
  {
    std::istringstream in(read_file(kSamples / "questions" / "services-agreement.answers.jsonl"));
    for (std::string l; std::getline(in, l);) answers.push_back(json::parse(l));
  }
  ASSERT_EQ(questions.size(), answers.size());
  {
    std::istringstream in(read_file(kSamples / "questions" / "services-agreement.hu.txt"));
    std::size_t n = 0;
    for (std::string l; std::getline(in, l); ++n) EXPECT_FALSE(l.empty());
    EXPECT_EQ(n, questions.size()) << "the Hungarian questions must match the English ones line for line";
  }
  EXPECT_GE(questions.size(), 30u);
  const std::string all = pdftotext(pdf);
  const int pages = static_cast<int>(std::count(all.begin(), all.end(), '\f'));
  EXPECT_GE(pages, 15);
  EXPECT_LE(pages, 30);
  std::map<int, std::string> page_text;
  for (std::size_t i = 0; i < answers.size(); ++i) {
    const auto& a = answers[i];
    SCOPED_TRACE(questions[i]);
    EXPECT_EQ(a["question"], questions[i]);
    const int page = a["page"];
    ASSERT_GE(page, 1);
    ASSERT_LE(page, pages);
    if (!page_text.count(page)) page_text[page] = collapse(pdftotext(pdf, page), true);
    EXPECT_NE(page_text[page].find(a["evidence"].get<std::string>()), std::string::npos);
    EXPECT_NE(page_text[page].find(a["answer"].get<std::string>()), std::string::npos);
  }
}

// The committed samples are exactly what the generator makes (when its tools are installed): no
// hand edits, and no generator change without regenerating.
TEST(Samples, RegenerateByteForByte) {
  if (std::system("/usr/bin/python3 -c 'import reportlab' > /dev/null 2>&1") != 0 || !have_pdftotext())
    GTEST_SKIP() << "python3-reportlab or poppler-utils not installed (tools/setup-tools.sh)";
  const fs::path out = fs::temp_directory_path() / ("quarry-samples-" + std::to_string(::getpid()));
  fs::remove_all(out);
  const std::string cmd = "/usr/bin/python3 '" + (fs::path(QUARRY_SOURCE_DIR) / "tools" / "samples" / "generate.py").string() +
                          "' --preset samples --seed 1 --out '" + out.string() + "' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::size_t compared = 0;
  for (const auto& e : fs::recursive_directory_iterator(out)) {
    if (!e.is_regular_file()) continue;
    const fs::path rel = fs::relative(e.path(), out);
    const fs::path committed = kSamples / rel;
    ASSERT_TRUE(fs::is_regular_file(committed)) << rel << " is generated but not committed";
    EXPECT_TRUE(read_file(committed) == read_file(e.path())) << rel << " differs from the generator's output";
    ++compared;
  }
  std::size_t committed_files = 0;
  // Job files (*.toml) are hand-written configuration for `quarry run`, not generated data.
  for (const auto& e : fs::recursive_directory_iterator(kSamples))
    if (e.is_regular_file() && e.path().extension() != ".toml") ++committed_files;
  EXPECT_EQ(compared, committed_files) << "samples/ holds files the generator does not make";
  fs::remove_all(out);
}

#ifdef QUARRY_HAVE_SCHEMA_VALIDATOR
// Every expected JSON conforms to schemas/invoice.schema.json (valijson, through the project's
// validator).
TEST(Samples, ExpectedJsonConformsToInvoiceSchema) {
  quarry::schemas::SchemaCache cache;
  auto validator = cache.get("invoice.schema.json");
  for (const auto& s : load_manifest()) {
    SCOPED_TRACE(s.name);
    for (const auto& v : validator->validate(json::parse(read_file(s.expected))))
      ADD_FAILURE() << v.pointer << " [" << v.keyword << "] " << v.message;
  }
}
#endif
