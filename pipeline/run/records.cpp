#include "pipeline/run/records.hpp"

#include "schemas/cross_check.hpp"

namespace quarry::run {

using json = nlohmann::ordered_json;

json error_entry(const std::string& pointer, const std::string& rule, const std::string& message) {
  return json{{"pointer", pointer}, {"rule", rule}, {"message", message}};
}

json settings_error_entry(const std::string& rule, const std::string& message) {
  json e = error_entry("", rule, message);
  e["retryable"] = true;
  return e;
}

RecordMsg make_record(const Subject& s, const std::string& status, const json& method, const json& data,
                      const json& errors, const json& stats) {
  json rec = json::object();
  rec["source"] = s.source;
  if (!s.source_b64.empty()) rec["source_base64"] = s.source_b64;
  rec["sha256"] = s.sha256;
  if (s.has_question()) {
    rec["question_id"] = s.question_id;
    rec["question"] = s.question;
  }
  rec["status"] = status;
  rec["method"] = method;
  rec["data"] = data;
  rec["errors"] = errors;
  rec["stats"] = stats;
  RecordMsg m;
  m.key = s.key.empty() ? s.source : s.key;
  m.record = std::move(rec);
  return m;
}

RecordMsg error_record(const Subject& s, const json& method, const std::string& rule, const std::string& message) {
  return make_record(s, "error", method, nullptr, json::array({error_entry("", rule, message)}),
                     stats_without_model(s, 0));
}

json stats_without_model(const Subject& s, std::size_t attempts) {
  return json{{"prompt_tokens", 0},      {"prefill_tokens", 0},    {"cached_tokens", 0}, {"decode_tokens", 0},
              {"ttft_ms", nullptr},      {"decode_tok_s", nullptr}, {"attempts", attempts},
              {"extract_ms", s.extract_ms}};
}

std::string record_key(const std::string& source, const std::string& question_id) {
  return question_id.empty() ? source : source + "#" + question_id;
}

json order_like_schema(const json& data, const json& schema) {
  if (!schema.is_object()) return data;
  if (data.is_object() && schema.contains("properties") && schema["properties"].is_object()) {
    json out = json::object();
    const auto& props = schema["properties"];
    for (const auto& [k, sub] : props.items())
      if (data.contains(k)) out[k] = order_like_schema(data[k], sub);
    for (const auto& [k, v] : data.items())
      if (!props.contains(k)) out[k] = v;
    return out;
  }
  if (data.is_array() && schema.contains("items")) {
    json out = json::array();
    for (const auto& x : data) out.push_back(order_like_schema(x, schema["items"]));
    return out;
  }
  return data;
}

nlohmann::json to_plain(const json& j) { return nlohmann::json::from_msgpack(json::to_msgpack(j)); }

Document document_from_text(const std::string& source, const std::string& text) {
  Document d;
  d.source = source;
  std::size_t start = 0;
  int number = 1;
  for (;;) {
    const auto end = text.find('\f', start);
    const std::string_view page =
        std::string_view(text).substr(start, end == std::string::npos ? std::string::npos : end - start);
    Page p;
    p.number = number++;
    std::size_t ls = 0;
    for (;;) {
      const auto le = page.find('\n', ls);
      p.lines.push_back(
          Line{std::string(page.substr(ls, le == std::string_view::npos ? std::string_view::npos : le - ls)), {}, 0});
      if (le == std::string_view::npos) break;
      ls = le + 1;
    }
    d.pages.push_back(std::move(p));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return d;
}

void add_cross_check(json& record, const nlohmann::json& schema, const json& schema_ordered, const json& data,
                     const json& xml, const std::string& method) {
  json summary = json::object();
  summary["against"] = method;
  json warnings = json::array();
  if (!data.is_object()) {
    summary["fields_compared"] = 0;
    summary["skipped"] = "the model's output is not a JSON object: nothing to compare";
  } else {
    const auto r = schemas::cross_check(schema, data, xml);
    const auto shown = [](const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); };
    json by_field = json::object();
    for (const auto& f : r.fields) {
      json& c = by_field[f.field][schemas::field_outcome_name(f.outcome)];
      c = (c.is_null() ? 0 : c.get<std::size_t>()) + 1;
      if (f.outcome != schemas::FieldOutcome::disagree) continue;
      std::string message;
      if (f.count)
        message = "the model lists " + shown(f.model) + " element(s); the e-invoice XML (" + method + ") lists " +
                  shown(f.xml);
      else if (f.model.is_null())
        message = "the model gives no value; the e-invoice XML (" + method + ") says " + shown(f.xml);
      else
        message = "the model read " + shown(f.model) + "; the e-invoice XML (" + method + ") says " + shown(f.xml);
      json w = error_entry(f.pointer, "rule:cross_check", message);
      w["model"] = f.model;
      w["xml"] = f.xml;
      warnings.push_back(std::move(w));
    }
    summary["fields_compared"] = r.compared();
    summary["fields_agreeing"] = r.agree;
    summary["fields_disagreeing"] = r.disagree;
    summary["fields_model_only"] = r.model_only;
    summary["by_field"] = std::move(by_field);
  }
  summary["xml"] = order_like_schema(xml, schema_ordered);
  record["warnings"] = std::move(warnings);
  record["cross_check"] = std::move(summary);
}

}  // namespace quarry::run
