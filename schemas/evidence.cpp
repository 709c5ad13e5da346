#include "schemas/evidence.hpp"

#include <cmath>
#include <map>
#include <set>

#include "engine/grammar/grounding.hpp"

namespace quarry::schemas {

namespace {

namespace gr = quarry::engine::grammar;
using json = nlohmann::json;

std::string escape_token(const std::string& k) {
  std::string o;
  for (char c : k) {
    if (c == '~') o += "~0";
    else if (c == '/') o += "~1";
    else o += c;
  }
  return o;
}

struct Walker {
  const json& root;
  std::map<std::string, gr::SourceKind> found;  // pointer -> kind
  std::set<std::pair<const json*, std::string>> seen;
  int depth = 0;

  const json* resolve(const json& s) {
    const json* cur = &s;
    for (int hops = 0; hops < 64 && cur->is_object() && cur->contains("$ref"); ++hops) {
      const auto& r = (*cur)["$ref"];
      if (!r.is_string()) return cur;
      const std::string ref = r.get<std::string>();
      if (ref.empty() || ref[0] != '#') return nullptr;
      try {
        const json::json_pointer p(ref.substr(1));
        if (!root.contains(p)) return nullptr;
        cur = &root.at(p);
      } catch (const std::exception&) {
        return nullptr;
      }
    }
    return cur;
  }

  void walk(const json& schema_in, const json& data, const std::string& ptr) {
    if (depth > 256) return;
    const json* sp = resolve(schema_in);
    if (!sp || !sp->is_object()) return;
    const json& s = *sp;
    if (!seen.insert({sp, ptr}).second) return;
    ++depth;
    if (s.contains("x-quarry-source") && s["x-quarry-source"].is_string()) {
      const auto k = gr::parse_source_kind(s["x-quarry-source"].get<std::string>());
      if (k && *k != gr::SourceKind::kFree) {
        const bool fits = (*k == gr::SourceKind::kNumber) ? data.is_number() : data.is_string();
        if (fits) found.emplace(ptr, *k);
      }
    }
    for (const char* key : {"allOf", "anyOf", "oneOf"})
      if (s.contains(key) && s[key].is_array())
        for (const auto& b : s[key]) walk(b, data, ptr);
    if (data.is_object() && s.contains("properties") && s["properties"].is_object())
      for (auto it = s["properties"].begin(); it != s["properties"].end(); ++it)
        if (data.contains(it.key())) walk(it.value(), data[it.key()], ptr + "/" + escape_token(it.key()));
    if (data.is_array()) {
      std::size_t first = 0;
      if (s.contains("prefixItems") && s["prefixItems"].is_array()) {
        for (std::size_t i = 0; i < s["prefixItems"].size() && i < data.size(); ++i)
          walk(s["prefixItems"][i], data[i], ptr + "/" + std::to_string(i));
        first = s["prefixItems"].size();
      }
      if (s.contains("items") && s["items"].is_object())
        for (std::size_t i = first; i < data.size(); ++i) walk(s["items"], data[i], ptr + "/" + std::to_string(i));
    }
    --depth;
  }
};

json span_entry(const std::vector<std::string>& pages, const gr::TextSpan& sp) {
  json e = json::object();
  e["page"] = sp.page + 1;
  e["start"] = sp.start;
  e["end"] = sp.end;
  e["text"] = pages[sp.page].substr(sp.start, sp.end - sp.start);
  return e;
}

// Sums of one number field over the elements of each array of the record: "/a/*/f" -> sum.
void array_sums(const json& v, const std::string& ptr, std::map<std::string, double>& out, int depth = 0) {
  if (depth > 64) return;
  if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it) array_sums(it.value(), ptr + "/" + escape_token(it.key()), out, depth + 1);
  } else if (v.is_array()) {
    std::map<std::string, double> sums;
    for (const auto& el : v) {
      if (el.is_object())
        for (auto it = el.begin(); it != el.end(); ++it)
          if (it.value().is_number()) sums[ptr + "/*/" + escape_token(it.key())] += it.value().get<double>();
      array_sums(el, ptr + "/*", out, depth + 1);
    }
    for (auto& [k, s] : sums) out[k] = s;
  }
}

}  // namespace

bool has_grounded_locations(const json& schema) {
  if (schema.is_object()) {
    if (schema.contains("x-quarry-source") && schema["x-quarry-source"].is_string()) {
      const auto k = gr::parse_source_kind(schema["x-quarry-source"].get<std::string>());
      if (k && *k != gr::SourceKind::kFree) return true;
    }
    for (const auto& [k, v] : schema.items())
      if (has_grounded_locations(v)) return true;
  } else if (schema.is_array()) {
    for (const auto& v : schema)
      if (has_grounded_locations(v)) return true;
  }
  return false;
}

EvidenceResult find_evidence(const json& schema, const json& data, const std::vector<std::string>& pages) {
  EvidenceResult r;
  Walker w{schema, {}, {}, 0};
  w.walk(schema, data, "");
  std::vector<gr::NumberOccurrence> numbers;
  std::vector<gr::DateOccurrence> dates;
  bool have_numbers = false, have_dates = false;
  std::map<std::string, double> sums;
  bool have_sums = false;
  for (const auto& [ptr, kind] : w.found) {
    const json& v = data.at(json::json_pointer(ptr));
    std::optional<json> entry;
    if (kind == gr::SourceKind::kCopy) {
      const std::string s = v.get<std::string>();
      bool blank = true;
      for (char c : s)
        if (!(c == ' ' || c == '\t' || c == '\n' || c == '\r')) blank = false;
      if (blank) continue;
      if (auto sp = gr::find_copy_span(pages, s)) entry = span_entry(pages, *sp);
    } else if (kind == gr::SourceKind::kDate) {
      if (!have_dates) { dates = gr::find_dates(pages); have_dates = true; }
      const std::string s = v.get<std::string>();
      for (const auto& d : dates)
        if (d.iso == s) { entry = span_entry(pages, d.span); break; }
    } else {
      if (!have_numbers) { numbers = gr::find_numbers(pages); have_numbers = true; }
      const auto canon = gr::canonical_decimal(v.dump());
      if (canon)
        for (const auto& n : numbers)
          if (n.decimal == *canon) { entry = span_entry(pages, n.span); break; }
      if (!entry) {
        if (!have_sums) { array_sums(data, "", sums); have_sums = true; }
        const double x = v.get<double>();
        for (const auto& [of, s] : sums)
          if (std::fabs(s - x) <= 1e-6 * std::max(1.0, std::fabs(x))) {
            entry = json{{"derived", "sum"}, {"of", of}};
            break;
          }
      }
    }
    ++r.grounded;
    if (entry) {
      r.evidence[ptr] = *entry;
    } else {
      r.violations.push_back({ptr, "rule:evidence",
                              std::string("the value is not printed in the document (x-quarry-source: ") +
                                  gr::source_kind_name(kind) + ")"});
    }
  }
  return r;
}

}  // namespace quarry::schemas
