#include "extractors/einvoice/common.hpp"

#include <cctype>
#include <charconv>
#include <cmath>

#include "extractors/xml/xml_safe.hpp"

namespace quarry::einvoice::detail {

void fail(const std::string& reason) { throw MapError(reason); }

Json empty_address() {
  return Json{{"street", nullptr}, {"city", nullptr}, {"postal_code", nullptr}, {"country", nullptr}};
}

Json skeleton() {
  auto party = [] {
    return Json{{"name", nullptr}, {"tax_id", nullptr}, {"vat_id", nullptr}, {"address", nullptr}};
  };
  return Json{
      {"document_type", "invoice"},
      {"invoice_number", nullptr},
      {"issue_date", nullptr},
      {"due_date", nullptr},
      {"delivery_date", nullptr},
      {"currency", nullptr},
      {"buyer_reference", nullptr},
      {"order_reference", nullptr},
      {"preceding_invoice", nullptr},
      {"seller", party()},
      {"buyer", party()},
      {"line_items", Json::array()},
      {"vat_breakdown", Json::array()},
      {"totals", Json{{"net", nullptr}, {"vat", nullptr}, {"gross", nullptr}, {"amount_due", nullptr},
                       {"allowance_total", nullptr}, {"charge_total", nullptr}}},
      {"payment", Json{{"means", nullptr}, {"iban", nullptr}, {"account_number", nullptr}, {"bic", nullptr},
                       {"due_date", nullptr}}},
  };
}

std::vector<xmlNode*> children(const xmlNode* n, std::string_view local) {
  std::vector<xmlNode*> out;
  if (!n) return out;
  for (xmlNode* c = n->children; c; c = c->next)
    if (c->type == XML_ELEMENT_NODE && xml::local_name(c) == local) out.push_back(c);
  return out;
}

xmlNode* first_path(const xmlNode* n, std::initializer_list<std::string_view> paths) {
  for (auto p : paths)
    if (xmlNode* r = xml::path(n, p)) return r;
  return nullptr;
}

Json str_or_null(const xmlNode* n) {
  if (!n) return nullptr;
  std::string s = xml::text(n);
  if (s.empty()) return nullptr;
  return s;
}

std::optional<double> number(const xmlNode* n, std::string_view what) {
  if (!n) return std::nullopt;
  std::string s = xml::text(n);
  if (s.empty()) return std::nullopt;
  // xsd:decimal: [+-]? digits with at most one '.', no exponent, no thousands separators.
  std::string_view v = s;
  if (!v.empty() && v.front() == '+') v.remove_prefix(1);
  bool digit = false, dot = false, ok = !v.empty();
  for (std::size_t i = 0; i < v.size() && ok; ++i) {
    char c = v[i];
    if (std::isdigit(static_cast<unsigned char>(c)))
      digit = true;
    else if (c == '.' && !dot)
      dot = true;
    else if (c == '-' && i == 0)
      continue;
    else
      ok = false;
  }
  double d = 0;
  if (ok && digit) {
    auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), d);
    ok = ec == std::errc() && ptr == v.data() + v.size() && std::isfinite(d);
  } else {
    ok = false;
  }
  if (!ok) fail(std::string(what) + ": '" + s + "' is not a decimal number");
  return d;
}

Json num_or_null(const xmlNode* n, std::string_view what) {
  auto d = number(n, what);
  if (!d) return nullptr;
  return *d;
}

namespace {

bool all_digits(std::string_view s) {
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return !s.empty();
}

bool calendar_date(int y, int m, int d) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (y < 1 || m < 1 || m > 12 || d < 1) return false;
  bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  int max = kDays[m - 1] + (m == 2 && leap ? 1 : 0);
  return d <= max;
}

}  // namespace

std::string iso_date(std::string_view s, std::string_view what) {
  std::string y, m, d;
  if (s.size() >= 10 && s[4] == '-' && s[7] == '-' && all_digits(s.substr(0, 4)) && all_digits(s.substr(5, 2)) &&
      all_digits(s.substr(8, 2)) && (s.size() == 10 || !std::isdigit(static_cast<unsigned char>(s[10])))) {
    y = s.substr(0, 4), m = s.substr(5, 2), d = s.substr(8, 2);
  } else if (s.size() == 8 && all_digits(s)) {
    y = s.substr(0, 4), m = s.substr(4, 2), d = s.substr(6, 2);
  } else {
    fail(std::string(what) + ": '" + std::string(s) + "' is not a date (expected YYYY-MM-DD or YYYYMMDD)");
  }
  if (!calendar_date(std::stoi(y), std::stoi(m), std::stoi(d)))
    fail(std::string(what) + ": '" + std::string(s) + "' is not a calendar date");
  return y + "-" + m + "-" + d;
}

Json date_or_null(const xmlNode* n, std::string_view what) {
  if (!n) return nullptr;
  std::string s = xml::text(n);
  if (s.empty()) return nullptr;
  return iso_date(s, what);
}

double fraction_to_percent(double f) { return std::round(f * 100.0 * 1e6) / 1e6; }

std::string document_type_from_untdid1001(std::string_view code, std::string_view fallback) {
  // Credit notes: 81 credit note related to goods or services, 83 credit note related to financial
  // adjustments, 261 self credit note, 262 consolidated credit note, 296 credit note for price
  // variation, 308 delcredere credit note, 381 credit note, 396 factored credit note, 420 optical
  // character reading (OCR) payment credit note, 458 reversal of debit, 532 forwarder's credit note.
  static constexpr std::string_view kCredit[] = {"81",  "83",  "261", "262", "296", "308",
                                                 "381", "396", "420", "458", "532"};
  for (auto c : kCredit)
    if (code == c) return "credit_note";
  if (code == "384") return "corrected_invoice";
  if (code == "386") return "prepayment_invoice";
  if (code == "380") return "invoice";
  // Other invoice codes (383 debit note, 389 self-billed invoice, 751 invoice information, ...)
  // and codes not in UNTDID 1001 take the document's own kind (UBL Invoice vs CreditNote root).
  return std::string(fallback);
}

Json means_from_untdid4461(std::string_view code) {
  if (code.empty()) return nullptr;
  // 30 credit transfer, 31 debit transfer, 42 payment to bank account, 58 SEPA credit transfer,
  // 1 instrument not defined -> other; 10 in cash; 48 bank card, 54 credit card, 55 debit card;
  // 49 direct debit, 59 SEPA direct debit.
  if (code == "30" || code == "31" || code == "42" || code == "58") return "transfer";
  if (code == "10") return "cash";
  if (code == "48" || code == "54" || code == "55") return "card";
  if (code == "49" || code == "59") return "direct_debit";
  return "other";
}

void set_account(Json& payment, const std::string& account) {
  if (account.empty()) return;
  std::string compact;
  for (char c : account)
    if (c != ' ') compact += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  bool iban = compact.size() >= 14 && compact.size() <= 34 && std::isalpha(static_cast<unsigned char>(compact[0])) &&
              std::isalpha(static_cast<unsigned char>(compact[1])) &&
              std::isdigit(static_cast<unsigned char>(compact[2])) && std::isdigit(static_cast<unsigned char>(compact[3]));
  for (char c : compact)
    if (!std::isalnum(static_cast<unsigned char>(c))) iban = false;
  if (iban)
    payment["iban"] = compact;
  else
    payment["account_number"] = account;
}

Json join_nonempty(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (const auto& p : parts) {
    if (p.empty()) continue;
    if (!out.empty()) out += sep;
    out += p;
  }
  if (out.empty()) return nullptr;
  return out;
}

}  // namespace quarry::einvoice::detail
