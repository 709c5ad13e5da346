#include "schemas/rules.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <string_view>

#include "quarry/iso_codes.inc"

namespace quarry::schemas {
namespace {

using nlohmann::json;

// --- Access that never throws: a value of the expected type, else nothing. -----------------------

const json* member(const json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

std::optional<double> number(const json* v) {
  if (!v || !v->is_number()) return std::nullopt;
  double d = v->get<double>();
  if (!std::isfinite(d)) return std::nullopt;
  return d;
}

std::optional<double> number_at(const json& obj, std::string_view key) { return number(member(obj, key)); }

std::optional<std::string_view> string_at(const json& obj, std::string_view key) {
  const json* v = member(obj, key);
  if (!v || !v->is_string()) return std::nullopt;
  return std::string_view(v->get_ref<const std::string&>());
}

const json& empty_array() {
  static const json kEmpty = json::array();
  return kEmpty;
}

const json& array_at(const json& obj, std::string_view key) {
  const json* v = member(obj, key);
  return v && v->is_array() ? *v : empty_array();
}

const json& object_at(const json& obj, std::string_view key) {
  static const json kNull;
  const json* v = member(obj, key);
  return v && v->is_object() ? *v : kNull;
}

// Concatenation by append (GCC 12 warns falsely, -Wrestrict, on `"literal" + std::string`).
std::string cat(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (auto p : parts) out.append(p);
  return out;
}

std::string fmt_amount(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

// --- Rounding tolerance (see rules.hpp). ----------------------------------------------------------

void collect_amounts(const json& v, bool& all_integral) {
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && d != std::nearbyint(d)) all_integral = false;
  } else if (v.is_object() || v.is_array()) {
    for (const auto& c : v) collect_amounts(c, all_integral);
  }
}

// The rounding quantum of the document's amounts: 1 when every amount is whole, else 0.01. Only the
// amount-bearing parts (lines, breakdown, totals) count; quantities and rates are not amounts, so
// only the amount members of lines are looked at.
double quantum(const json& doc) {
  bool all_integral = true;
  for (const auto& line : array_at(doc, "line_items"))
    for (const char* k : {"unit_price", "net_amount", "vat_amount"})
      if (const json* v = member(line, k)) collect_amounts(*v, all_integral);
  collect_amounts(array_at(doc, "vat_breakdown"), all_integral);
  collect_amounts(object_at(doc, "totals"), all_integral);
  return all_integral ? 1.0 : 0.01;
}

bool close(double a, double b, double tol) {
  double scale = std::max({std::fabs(a), std::fabs(b), 1.0});
  return std::fabs(a - b) <= tol + 1e-9 * scale;
}

// --- Individual rules. ---------------------------------------------------------------------------

struct Ctx {
  const json& doc;
  std::vector<Violation>& out;
  double q;
  void add(std::string pointer, const char* rule, std::string message) {
    out.push_back(Violation{std::move(pointer), rule, std::move(message)});
  }
};

// An optional document-level amount (totals.allowance_total, totals.charge_total): 0 when absent or
// null (the document states none), nullopt when it holds a value of another type (unknown).
std::optional<double> optional_amount(const json& totals, std::string_view key) {
  const json* v = member(totals, key);
  if (!v || v->is_null()) return 0.0;
  return number(v);
}

void rule_line_sum(Ctx& c) {
  const json& lines = array_at(c.doc, "line_items");
  const json& totals = object_at(c.doc, "totals");
  auto net = number_at(totals, "net");
  auto allowances = optional_amount(totals, "allowance_total");
  auto charges = optional_amount(totals, "charge_total");
  if (lines.empty() || !net || !allowances || !charges) return;
  double sum = 0;
  for (const auto& line : lines) {
    auto a = number_at(line, "net_amount");
    if (!a) return;  // a line without a stated net amount: the sum is unknown
    sum += *a;
  }
  const double expected = sum - *allowances + *charges;
  // N rounded line amounts, the rounded total, and each stated allowance / charge total.
  const double terms = static_cast<double>(lines.size()) + 1 + (*allowances != 0) + (*charges != 0);
  const double tol = terms * c.q / 2;
  if (close(expected, *net, tol)) return;
  std::string what = cat({"the sum of the ", std::to_string(lines.size()), " line net amounts ", fmt_amount(sum)});
  if (*allowances != 0) what += cat({" less the document-level allowances ", fmt_amount(*allowances)});
  if (*charges != 0) what += cat({" plus the document-level charges ", fmt_amount(*charges)});
  if (*allowances != 0 || *charges != 0) what += cat({" (", fmt_amount(expected), ")"});
  c.add("/totals/net", "rule:line_sum",
        cat({"totals.net ", fmt_amount(*net), " differs from ", what, " by more than the rounding tolerance ",
             fmt_amount(tol)}));
}

void rule_gross(Ctx& c) {
  const json& t = object_at(c.doc, "totals");
  auto net = number_at(t, "net"), vat = number_at(t, "vat"), gross = number_at(t, "gross");
  if (!net || !vat || !gross) return;
  double tol = 3 * c.q / 2;
  if (!close(*net + *vat, *gross, tol))
    c.add("/totals/gross", "rule:gross",
          cat({"totals.gross ", fmt_amount(*gross), " is not totals.net + totals.vat = ", fmt_amount(*net + *vat)}));
}

void rule_breakdown(Ctx& c) {
  const json& vb = array_at(c.doc, "vat_breakdown");
  if (vb.empty()) return;
  const json& t = object_at(c.doc, "totals");
  const std::size_t n_lines = array_at(c.doc, "line_items").size();
  double vat_sum = 0, taxable_sum = 0;
  bool vat_known = true, taxable_known = true;
  for (std::size_t i = 0; i < vb.size(); ++i) {
    auto taxable = number_at(vb[i], "taxable_amount"), vat = number_at(vb[i], "vat_amount");
    if (vat) vat_sum += *vat; else vat_known = false;
    if (taxable) taxable_sum += *taxable; else taxable_known = false;
  }
  double tol = (static_cast<double>(vb.size()) + 1) * c.q / 2;
  if (auto tv = number_at(t, "vat"); tv && vat_known && !close(vat_sum, *tv, tol))
    c.add("/totals/vat", "rule:vat_sum",
          cat({"totals.vat ", fmt_amount(*tv), " differs from the sum of the VAT breakdown amounts ",
               fmt_amount(vat_sum)}));
  if (auto tn = number_at(t, "net"); tn && taxable_known && !close(taxable_sum, *tn, tol))
    c.add("/totals/net", "rule:taxable_sum",
          cat({"totals.net ", fmt_amount(*tn), " differs from the sum of the VAT breakdown taxable amounts ",
               fmt_amount(taxable_sum)}));
  for (std::size_t i = 0; i < vb.size(); ++i) {
    auto taxable = number_at(vb[i], "taxable_amount"), vat = number_at(vb[i], "vat_amount");
    auto rate = number_at(vb[i], "rate");
    if (!taxable || !vat || !rate) continue;
    double expected = *taxable * *rate / 100;
    // VAT rounded once (q/2), the base's rounding scaled by the rate, and per-line VAT summation.
    double etol = c.q / 2 + c.q / 2 * *rate / 100 + static_cast<double>(n_lines) * c.q / 2;
    if (!close(*vat, expected, etol))
      c.add(cat({"/vat_breakdown/", std::to_string(i), "/vat_amount"}), "rule:vat_rate",
            cat({"VAT amount ", fmt_amount(*vat), " is not ", fmt_amount(*rate), "% of the taxable amount ",
                 fmt_amount(*taxable), " (", fmt_amount(expected), ")"}));
  }
}

void rule_line_vat(Ctx& c) {
  const json& lines = array_at(c.doc, "line_items");
  for (std::size_t i = 0; i < lines.size(); ++i) {
    auto net = number_at(lines[i], "net_amount"), vat = number_at(lines[i], "vat_amount");
    auto rate = number_at(lines[i], "vat_rate");
    if (!net || !vat || !rate) continue;
    double expected = *net * *rate / 100;
    double tol = c.q / 2 + c.q / 2 * *rate / 100;
    if (!close(*vat, expected, tol))
      c.add(cat({"/line_items/", std::to_string(i), "/vat_amount"}), "rule:line_vat",
            cat({"line VAT amount ", fmt_amount(*vat), " is not ", fmt_amount(*rate), "% of the line net amount ",
                 fmt_amount(*net), " (", fmt_amount(expected), ")"}));
  }
}

struct DateField {
  const char* pointer;
  std::optional<std::string_view> value;
  bool valid = false;
};

void rule_dates(Ctx& c) {
  const json& pay = object_at(c.doc, "payment");
  std::array<DateField, 4> f{{{"/issue_date", string_at(c.doc, "issue_date")},
                              {"/due_date", string_at(c.doc, "due_date")},
                              {"/delivery_date", string_at(c.doc, "delivery_date")},
                              {"/payment/due_date", string_at(pay, "due_date")}}};
  for (auto& d : f) {
    if (!d.value) continue;
    d.valid = calendar_date_valid(*d.value);
    // A value that is not even YYYY-MM-DD shaped is the schema's "pattern" violation; only a
    // well-shaped non-date (2023-02-30) is this rule's.
    bool shaped = d.value->size() == 10 && (*d.value)[4] == '-' && (*d.value)[7] == '-' &&
                  std::all_of(d.value->begin(), d.value->end(), [](char ch) { return ch == '-' || (ch >= '0' && ch <= '9'); });
    if (!d.valid && shaped)
      c.add(d.pointer, "rule:date", cat({"\"", *d.value, "\" is not a calendar date"}));
  }
  // ISO 8601 YYYY-MM-DD strings of valid dates order as the dates do.
  const auto& issue = f[0];
  for (int k : {1, 3}) {
    const auto& due = f[k];
    if (issue.valid && due.valid && *due.value < *issue.value)
      c.add(due.pointer, "rule:date_order",
            cat({due.pointer + 1, " ", *due.value, " is before the issue date ", *issue.value}));
  }
  if (f[1].valid && f[3].valid && *f[1].value != *f[3].value)
    c.add("/payment/due_date", "rule:due_date_match",
          cat({"payment.due_date ", *f[3].value, " differs from due_date ", *f[1].value}));
}

// The schema's IBAN pattern, ^[A-Z]{2}[0-9]{2}[A-Z0-9]{10,30}$: a value of another shape is the
// schema's violation ("pattern"), not this rule's.
bool iban_shaped(std::string_view s) {
  if (s.size() < 14 || s.size() > 34) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char ch = s[i];
    const bool upper = ch >= 'A' && ch <= 'Z', digit = ch >= '0' && ch <= '9';
    if (i < 2 ? !upper : i < 4 ? !digit : !(upper || digit)) return false;
  }
  return true;
}

void rule_iban(Ctx& c) {
  auto iban = string_at(object_at(c.doc, "payment"), "iban");
  if (iban && iban_shaped(*iban) && !iban_valid(*iban))
    c.add("/payment/iban", "rule:iban", cat({"\"", *iban, "\" is not a valid IBAN (ISO 13616 mod-97)"}));
}

bool is_digit(char ch) { return ch >= '0' && ch <= '9'; }

// The parts of an adószám written "NNNNNNNN", "NNNNNNNN-V", "NNNNNNNN-V-CC" or as 11 digits.
struct HuTaxNumber {
  std::string_view base;  // 8 digits
  char vat_code = 0;      // 0 when not written
};

std::optional<HuTaxNumber> parse_hu_tax_number(std::string_view s) {
  auto digits = [](std::string_view t) { return !t.empty() && std::all_of(t.begin(), t.end(), is_digit); };
  if (s.size() == 11 && digits(s)) return HuTaxNumber{s.substr(0, 8), s[8]};
  if (s.size() < 8 || !digits(s.substr(0, 8))) return std::nullopt;
  if (s.size() == 8) return HuTaxNumber{s, 0};
  if (s[8] != '-' || s.size() < 10 || !is_digit(s[9])) return std::nullopt;
  if (s.size() == 10) return HuTaxNumber{s.substr(0, 8), s[9]};
  if (s.size() == 13 && s[10] == '-' && digits(s.substr(11))) return HuTaxNumber{s.substr(0, 8), s[9]};
  return std::nullopt;
}

// The printed shape of an adószám, NNNNNNNN-V-CC: taken as Hungarian whatever the party's country.
// (Not 11 bare digits: an Italian partita IVA has that shape too.)
bool looks_like_hu_tax_number(std::string_view s) { return s.size() == 13 && parse_hu_tax_number(s).has_value(); }

void rule_parties(Ctx& c) {
  for (const char* party : {"seller", "buyer"}) {
    const json& p = object_at(c.doc, party);
    if (!p.is_object()) continue;
    const std::string base = cat({"/", party});
    auto tax_id = string_at(p, "tax_id");
    auto vat_id = string_at(p, "vat_id");
    auto country = string_at(object_at(p, "address"), "country");
    bool hungarian = (country && *country == "HU") || (vat_id && vat_id->starts_with("HU"));
    bool tax_ok = false;
    // For a Hungarian party, a tax_id with 8 or 11 digits is meant as an adószám (other identifiers,
    // such as a private person's 10-digit adóazonosító jel, are not this rule's).
    const auto digits_in = [](std::string_view t) { return std::count_if(t.begin(), t.end(), is_digit); };
    if (tax_id && ((hungarian && (digits_in(*tax_id) == 8 || digits_in(*tax_id) == 11)) ||
                   looks_like_hu_tax_number(*tax_id))) {
      if (auto err = hu_tax_number_error(*tax_id))
        c.add(base + "/tax_id", "rule:hu_tax_number", cat({"\"", *tax_id, "\": ", *err}));
      else
        tax_ok = true;
    }
    if (vat_id && vat_id->starts_with("HU")) {
      // As printed: "HU12345678", also "HU 12345678" or "HU-12345678".
      std::string_view digits = vat_id->substr(2);
      if (!digits.empty() && (digits.front() == ' ' || digits.front() == '-')) digits.remove_prefix(1);
      if (digits.size() != 8 || !std::all_of(digits.begin(), digits.end(), is_digit)) {
        c.add(base + "/vat_id", "rule:hu_vat_id", cat({"\"", *vat_id, "\" is not HU followed by 8 digits"}));
      } else if (!hu_tax_base_valid(digits)) {
        c.add(base + "/vat_id", "rule:hu_vat_id", cat({"\"", *vat_id, "\": wrong check digit"}));
      } else if (tax_ok) {
        auto hu = parse_hu_tax_number(*tax_id);
        if (hu && hu->vat_code != '4' && hu->vat_code != '5' && hu->base != digits)
          c.add(base + "/vat_id", "rule:hu_vat_id",
                cat({"\"", *vat_id, "\" does not match the tax number ", *tax_id}));
      }
    }
  }
}

void rule_codes(Ctx& c) {
  if (auto cur = string_at(c.doc, "currency"); cur && !iso4217_valid(*cur))
    c.add("/currency", "rule:currency", cat({"\"", *cur, "\" is not an ISO 4217 currency code"}));
  for (const char* party : {"seller", "buyer"}) {
    auto country = string_at(object_at(object_at(c.doc, party), "address"), "country");
    if (country && !iso3166_alpha2_valid(*country))
      c.add(cat({"/", party, "/address/country"}), "rule:country",
            cat({"\"", *country, "\" is not an ISO 3166-1 alpha-2 country code"}));
  }
}

template <std::size_t N>
bool in_sorted(const std::array<std::string_view, N>& list, std::string_view code) {
  return std::binary_search(list.begin(), list.end(), code);
}

}  // namespace

bool iso4217_valid(std::string_view code) { return in_sorted(kIso4217, code); }

bool iso3166_alpha2_valid(std::string_view code) { return in_sorted(kIso3166Alpha2, code); }

bool calendar_date_valid(std::string_view s) {
  if (s.size() != 10 || s[4] != '-' || s[7] != '-') return false;
  for (std::size_t i : {0, 1, 2, 3, 5, 6, 8, 9})
    if (!is_digit(s[i])) return false;
  auto num = [&](std::size_t pos, std::size_t len) {
    int v = 0;
    for (std::size_t i = pos; i < pos + len; ++i) v = v * 10 + (s[i] - '0');
    return v;
  };
  int y = num(0, 4), m = num(5, 2), d = num(8, 2);
  if (y < 1 || m < 1 || m > 12 || d < 1) return false;
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  int max_day = kDays[m - 1] + (m == 2 && leap ? 1 : 0);
  return d <= max_day;
}

bool iban_valid(std::string_view iban) {
  if (iban.size() < 5 || iban.size() > 34) return false;
  auto upper = [](char ch) { return ch >= 'A' && ch <= 'Z'; };
  if (!upper(iban[0]) || !upper(iban[1]) || !is_digit(iban[2]) || !is_digit(iban[3])) return false;
  if (!iso3166_alpha2_valid(iban.substr(0, 2))) return false;
  // Remainder mod 97 of the rearranged string, digit by digit (letters expand to two digits).
  int rem = 0;
  for (std::size_t k = 0; k < iban.size(); ++k) {
    char ch = iban[(k + 4) % iban.size()];
    if (is_digit(ch)) {
      rem = (rem * 10 + (ch - '0')) % 97;
    } else if (upper(ch)) {
      int v = ch - 'A' + 10;
      rem = (rem * 100 + v) % 97;
    } else {
      return false;
    }
  }
  return rem == 1;
}

bool hu_tax_base_valid(std::string_view base) {
  if (base.size() != 8 || !std::all_of(base.begin(), base.end(), is_digit)) return false;
  static constexpr int kWeights[7] = {9, 7, 3, 1, 9, 7, 3};
  int sum = 0;
  for (int i = 0; i < 7; ++i) sum += (base[i] - '0') * kWeights[i];
  return (10 - sum % 10) % 10 == base[7] - '0';
}

std::optional<std::string> hu_tax_number_error(std::string_view s) {
  auto hu = parse_hu_tax_number(s);
  if (!hu) return "not a Hungarian tax number (NNNNNNNN-N-NN)";
  if (!hu_tax_base_valid(hu->base)) return cat({"wrong check digit (8th digit of ", hu->base, ")"});
  if (hu->vat_code && (hu->vat_code < '1' || hu->vat_code > '5'))
    return cat({"VAT code ", std::string_view(&hu->vat_code, 1), " is not 1..5"});
  return std::nullopt;
}

std::vector<Violation> check_invoice_rules(const nlohmann::json& doc) {
  std::vector<Violation> out;
  if (!doc.is_object()) return out;
  try {
    Ctx c{doc, out, quantum(doc)};
    rule_line_sum(c);
    rule_gross(c);
    rule_breakdown(c);
    rule_line_vat(c);
    rule_dates(c);
    rule_iban(c);
    rule_parties(c);
    rule_codes(c);
  } catch (const std::exception& e) {  // only std::bad_alloc can reach here; never propagate
    out.push_back(Violation{"", "rule:internal", e.what()});
  }
  return out;
}

void add_invoice_rules(Validator& v) {
  v.add_check([](const nlohmann::json& doc, std::vector<Violation>& out) {
    auto found = check_invoice_rules(doc);
    out.insert(out.end(), std::make_move_iterator(found.begin()), std::make_move_iterator(found.end()));
  });
}

}  // namespace quarry::schemas
