#include "pipeline/run/prompts.hpp"

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
  return p;
}

std::vector<engine::ChatMessage> PromptTemplates::kie_messages(const std::string& document) const {
  return {{"system", kie_system_}, {"user", fill_placeholder(kie_user_, "document", document)}};
}

}  // namespace quarry::run
