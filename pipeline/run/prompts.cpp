#include "pipeline/run/prompts.hpp"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace quarry::run {

std::string fill_placeholder(std::string text, const std::string& name, const std::string& value) {
  const std::string key = "{" + name + "}";
  std::size_t pos = 0;
  while ((pos = text.find(key, pos)) != std::string::npos) {
    text.replace(pos, key.size(), value);
    pos += value.size();
  }
  return text;
}

PromptTemplates PromptTemplates::load(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path.string() + ": cannot open the prompt templates");
  const auto j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw std::runtime_error(path.string() + ": malformed JSON (expected an object)");
  PromptTemplates p;
  p.file_ = path;
  const auto get = [&](const char* task, const char* key, std::string& out) {
    if (!j.contains(task) || !j[task].is_object() || !j[task].contains(key) || !j[task][key].is_string()) return false;
    out = j[task][key].get<std::string>();
    return true;
  };
  if (!get("kie", "system", p.kie_system_) || !get("kie", "user", p.kie_user_))
    throw std::runtime_error(path.string() + ": needs string \"kie\".\"system\" and \"kie\".\"user\"");
  if (j.contains("schema") && (!get("schema", "system", p.schema_system_) || !get("schema", "user", p.schema_user_)))
    throw std::runtime_error(path.string() + ": \"schema\" needs string \"system\" and \"user\"");
  return p;
}

std::vector<engine::ChatMessage> PromptTemplates::schema_messages(const std::string& document,
                                                                  const std::string& schema_text) const {
  // {schema} first: a document may contain the text "{schema}" itself.
  return {{"system", schema_system_},
          {"user", fill_placeholder(fill_placeholder(schema_user_, "schema", schema_text), "document", document)}};
}

namespace {

using ojson = nlohmann::ordered_json;

const ojson* resolve_ref(const ojson& root, const std::string& ref) {
  if (ref.rfind("#/", 0) != 0) return nullptr;
  try {
    const auto ptr = ojson::json_pointer(ref.substr(1));
    return root.contains(ptr) ? &root.at(ptr) : nullptr;
  } catch (const std::exception&) {
    return nullptr;
  }
}

ojson strip_for_prompt(const ojson& s, const ojson& root, int depth) {
  if (!s.is_object() || depth > 32) return s.is_object() ? ojson::object() : s;
  if (auto it = s.find("$ref"); it != s.end() && it->is_string()) {
    const ojson* target = resolve_ref(root, it->get<std::string>());
    ojson merged = target && target->is_object() ? *target : ojson::object();
    for (const auto& [k, v] : s.items())  // sibling keywords beside $ref (2019-09 on) come after
      if (k != "$ref") merged[k] = v;
    return strip_for_prompt(merged, root, depth + 1);
  }
  static const char* kKeep[] = {"type", "properties", "required", "items", "enum", "format", "title", "description"};
  ojson out = ojson::object();
  for (const auto& [k, v] : s.items()) {
    if (std::find(std::begin(kKeep), std::end(kKeep), k) == std::end(kKeep)) continue;
    if (k == "properties" && v.is_object()) {
      ojson props = ojson::object();
      for (const auto& [name, p] : v.items()) props[name] = strip_for_prompt(p, root, depth + 1);
      out[k] = std::move(props);
    } else if (k == "items") {
      out[k] = strip_for_prompt(v, root, depth + 1);
    } else {
      out[k] = v;
    }
  }
  return out;
}

}  // namespace

std::string schema_for_prompt(const nlohmann::ordered_json& schema) {
  return strip_for_prompt(schema, schema, 0).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::vector<engine::ChatMessage> PromptTemplates::kie_messages(const std::string& document) const {
  return {{"system", kie_system_}, {"user", fill_placeholder(kie_user_, "document", document)}};
}

}  // namespace quarry::run
