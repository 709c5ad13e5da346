#include "schemas/cross_check.hpp"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <set>
#include <string_view>

#include "engine/grammar/grounding.hpp"

namespace quarry::schemas {

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
namespace gg = engine::grammar;

/// Deeper values are compared as one text (no JSON the schemas describe nests this deep).
constexpr int k_max_depth = 64;
/// $ref hops followed at one location at most (a cycle ends here).
constexpr int k_max_refs = 32;

// ---- The schema at a location -------------------------------------------------------------------

const json* resolve(const json& root, const json* s) {
  for (int i = 0; s && i < k_max_refs; ++i) {
    if (!s->is_object()) return nullptr;
    const auto ref = s->find("$ref");
    if (ref == s->end() || !ref->is_string()) return s;
    const std::string r = ref->get<std::string>();
    if (r.empty() || r[0] != '#') return nullptr;
    try {
      s = &root.at(json::json_pointer(r.substr(1)));
    } catch (const std::exception&) {
      return nullptr;
    }
  }
  return nullptr;
}

/// The schema of member `key` (properties) or of the elements (`key` empty: items) below `s`.
const json* child_schema(const json& root, const json* s, const std::string* key, int depth = 0) {
  s = resolve(root, s);
  if (!s || depth > k_max_depth) return nullptr;
  if (key) {
    if (const auto p = s->find("properties"); p != s->end() && p->is_object())
      if (const auto m = p->find(*key); m != p->end()) return &*m;
  } else if (const auto it = s->find("items"); it != s->end() && it->is_object()) {
    return &*it;
  }
  for (const char* comb : {"allOf", "anyOf", "oneOf"})
    if (const auto c = s->find(comb); c != s->end() && c->is_array())
      for (const auto& branch : *c)
        if (const json* r = child_schema(root, &branch, key, depth + 1)) return r;
  return nullptr;
}

bool type_is_number(const json& type) {
  const auto numeric = [](const json& t) { return t.is_string() && (t == "number" || t == "integer"); };
  if (numeric(type)) return true;
  if (!type.is_array()) return false;
  bool number = false, string = false;
  for (const auto& t : type) {
    number = number || numeric(t);
    string = string || t == "string";
  }
  return number && !string;
}

std::optional<CompareAs> compare_as_of(const json& root, const json* s, int depth = 0) {
  s = resolve(root, s);
  if (!s || depth > k_max_depth) return std::nullopt;
  if (const auto src = s->find("x-quarry-source"); src != s->end() && src->is_string()) {
    if (*src == "number") return CompareAs::number;
    if (*src == "date") return CompareAs::date;
  }
  if (const auto f = s->find("format"); f != s->end() && *f == "date") return CompareAs::date;
  if (const auto t = s->find("type"); t != s->end()) return type_is_number(*t) ? CompareAs::number : CompareAs::text;
  for (const char* comb : {"allOf", "anyOf", "oneOf"})
    if (const auto c = s->find(comb); c != s->end() && c->is_array())
      for (const auto& branch : *c)
        if (auto r = compare_as_of(root, &branch, depth + 1)) return r;
  return std::nullopt;
}

// ---- Normalisation --------------------------------------------------------------------------------

/// `s` without leading and trailing whitespace (grounding's whitespace set, ASCII part).
std::string_view trim(std::string_view s) {
  const auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return s;
}

/// NFKC_Casefold (ICU) with every white-space code point removed; on an ICU failure, the bytes
/// without ASCII white space.
std::string fold_text(std::string_view s) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfkc_cf = icu::Normalizer2::getNFKCCasefoldInstance(status);
  icu::UnicodeString folded;
  if (U_SUCCESS(status)) {
    const icu::UnicodeString in = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())));
    folded = nfkc_cf->normalize(in, status);
  }
  if (U_FAILURE(status)) {
    std::string out;
    for (char c : s)
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != '\v') out += c;
    return out;
  }
  icu::UnicodeString kept;
  for (int32_t i = 0; i < folded.length();) {
    const UChar32 cp = folded.char32At(i);
    if (!u_isUWhiteSpace(cp) && !gg::is_ground_space(static_cast<char32_t>(cp))) kept.append(cp);
    i += U16_LENGTH(cp);
  }
  std::string out;
  kept.toUTF8String(out);
  return out;
}

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

std::optional<std::string> as_date(std::string_view s) {
  if (s.size() == 10 && all_digits(s.substr(0, 4)) && s[4] == '-' && all_digits(s.substr(5, 2)) && s[7] == '-' &&
      all_digits(s.substr(8, 2)))
    return std::string(s);
  if (s.size() == 8 && all_digits(s)) {
    const int m = std::stoi(std::string(s.substr(4, 2))), d = std::stoi(std::string(s.substr(6, 2)));
    if (m >= 1 && m <= 12 && d >= 1 && d <= 31)
      return std::string(s.substr(0, 4)) + "-" + std::string(s.substr(4, 2)) + "-" + std::string(s.substr(6, 2));
  }
  // One date that is the whole string (a closing '.' aside: `2024. március 15.`), in a single
  // reading (03/04/2024 has two: left as text).
  const std::string_view body = !s.empty() && s.back() == '.' ? s.substr(0, s.size() - 1) : s;
  std::set<std::string> readings;
  for (const auto& d : gg::find_dates({std::string(s)}))
    if (d.span.start == 0 && (d.span.end == s.size() || d.span.end == body.size())) readings.insert(d.iso);
  if (readings.size() == 1) return *readings.begin();
  return std::nullopt;
}

bool is_absent(const ojson& v) {
  if (v.is_null()) return true;
  if (v.is_string()) return trim(v.get_ref<const std::string&>()).empty() || fold_text(v.get_ref<const std::string&>()).empty();
  if (v.is_array() || v.is_object()) return v.empty();
  return false;
}

const ojson& null_value() {
  static const ojson n = nullptr;  // immutable
  return n;
}

std::string escape_token(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

// ---- The walk -------------------------------------------------------------------------------------

struct Walker {
  const json& root;
  CrossCheckResult& out;

  void add(const std::string& pointer, const std::string& field, FieldOutcome o, const ojson& model, const ojson& xml,
           bool count = false) {
    FieldComparison f;
    f.pointer = pointer;
    f.field = field;
    f.outcome = o;
    f.count = count;
    f.model = model;
    f.xml = xml;
    if (o == FieldOutcome::agree) ++out.agree;
    else if (o == FieldOutcome::disagree) ++out.disagree;
    else ++out.model_only;
    out.fields.push_back(std::move(f));
  }

  CompareAs leaf_kind(const json* s, const ojson& model, const ojson& xml) const {
    if (auto k = compare_as_of(root, s)) return *k;
    return (xml.is_number() || model.is_number()) ? CompareAs::number : CompareAs::text;
  }

  void leaf(const json* s, const std::string& pointer, const std::string& field, const ojson& model, const ojson& xml) {
    const bool has_model = !is_absent(model), has_xml = !is_absent(xml);
    const CompareAs as = leaf_kind(s, model, xml);
    // A zero amount ("no allowance") is what a document that prints nothing says: zero and absent agree.
    const auto zero = [&](const ojson& v) { return normalise_for_compare(v, CompareAs::number) == std::optional<std::string>("0"); };
    if (as == CompareAs::number && has_xml && !has_model && zero(xml))
      return add(pointer, field, FieldOutcome::agree, null_value(), xml);
    if (as == CompareAs::number && !has_xml && has_model && zero(model)) return;
    if (!has_xml) {
      if (has_model) add(pointer, field, FieldOutcome::model_only, model, nullptr);
      return;
    }
    const auto a = normalise_for_compare(model, as), b = normalise_for_compare(xml, as);
    add(pointer, field, a && b && *a == *b ? FieldOutcome::agree : FieldOutcome::disagree,
        has_model ? model : null_value(), xml);
  }

  void walk(const json* s, const std::string& pointer, const std::string& field, const ojson& model, const ojson& xml,
            int depth) {
    if (depth > k_max_depth) return leaf(s, pointer, field, model, xml);
    // The container's shape comes from the reference when it has one, else from the model.
    const ojson& shape = is_absent(xml) ? model : xml;
    if (shape.is_object()) {
      const ojson& xo = xml.is_object() ? xml : null_value();
      const ojson& mo = model.is_object() ? model : null_value();
      if (!model.is_object() && !is_absent(model) && !is_absent(xml)) {
        // A scalar where the reference has an object: one disagreement, not one per member.
        return add(pointer, field, FieldOutcome::disagree, model, xml);
      }
      if (xo.is_object())
        for (const auto& [k, xv] : xo.items()) {
          const auto mit = mo.is_object() ? mo.find(k) : mo.end();
          walk(child_schema(root, s, &k), pointer + "/" + escape_token(k), field + "/" + escape_token(k),
               mo.is_object() && mit != mo.end() ? *mit : null_value(), xv, depth + 1);
        }
      if (mo.is_object())
        for (const auto& [k, mv] : mo.items()) {
          if (xo.is_object() && xo.contains(k)) continue;
          walk(child_schema(root, s, &k), pointer + "/" + escape_token(k), field + "/" + escape_token(k), mv, null_value(),
               depth + 1);
        }
      return;
    }
    if (shape.is_array()) {
      const json* items = child_schema(root, s, nullptr);
      const std::size_t nx = xml.is_array() ? xml.size() : 0, nm = model.is_array() ? model.size() : 0;
      if (nx > 0) {
        if (!model.is_array() && !is_absent(model)) return add(pointer, field, FieldOutcome::disagree, model, xml);
        add(pointer, field, nx == nm ? FieldOutcome::agree : FieldOutcome::disagree, ojson(nm), ojson(nx), true);
      }
      for (std::size_t i = 0; i < nm; ++i)
        walk(items, pointer + "/" + std::to_string(i), field + "/*", model[i], i < nx ? xml[i] : null_value(), depth + 1);
      return;
    }
    leaf(s, pointer, field, model, xml);
  }
};

}  // namespace

std::optional<std::string> normalise_for_compare(const ojson& value, CompareAs as) {
  if (is_absent(value)) return std::nullopt;
  try {
    if (value.is_object() || value.is_array()) return fold_text(value.dump());
    if (value.is_boolean()) return value.get<bool>() ? "true" : "false";
    if (value.is_number()) {
      if (auto d = gg::canonical_decimal(value.dump())) return *d;
      return fold_text(value.dump());
    }
    const std::string_view s = trim(value.get_ref<const std::string&>());
    if (as == CompareAs::number) {
      if (auto d = gg::canonical_decimal(s)) return *d;
    } else if (as == CompareAs::date) {
      if (auto d = as_date(s)) return *d;
    }
    return fold_text(s);
  } catch (const std::exception&) {
    return value.dump(-1, ' ', false, ojson::error_handler_t::replace);
  }
}

const char* field_outcome_name(FieldOutcome o) {
  switch (o) {
    case FieldOutcome::agree: return "agree";
    case FieldOutcome::disagree: return "disagree";
    case FieldOutcome::model_only: return "model_only";
  }
  return "?";
}

CrossCheckResult cross_check(const json& schema, const ojson& model, const ojson& reference) {
  CrossCheckResult r;
  Walker w{schema, r};
  try {
    w.walk(&schema, "", "", model, reference, 0);
  } catch (const std::exception&) {
    // Only allocation can fail here; what was compared so far stands.
  }
  return r;
}

}  // namespace quarry::schemas
