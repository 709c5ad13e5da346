#include "pipeline/run/prompts.hpp"

#include <fstream>
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
  p.has_rag_ = get("rag", "system", p.rag_system_) && get("rag", "user", p.rag_user_);
  return p;
}

std::vector<engine::ChatMessage> PromptTemplates::kie_messages(const std::string& document) const {
  return {{"system", kie_system_}, {"user", fill_placeholder(kie_user_, "document", document)}};
}

std::vector<engine::ChatMessage> PromptTemplates::rag_messages(const std::string& document, const std::string& question) const {
  if (!has_rag_) throw std::runtime_error(file_.string() + ": no \"rag\" prompt templates");
  return {{"system", rag_system_},
          {"user", fill_placeholder(fill_placeholder(rag_user_, "document", document), "question", question)}};
}

std::vector<nlohmann::json> read_question_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path.string() + ": cannot open the questions file");
  std::vector<nlohmann::json> out;
  std::string line;
  std::size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    if (line[first] == '{') {
      const auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.contains("question") || !j["question"].is_string())
        throw std::runtime_error(path.string() + ":" + std::to_string(n) + ": expected a JSON object with a \"question\" string");
      std::string id = "q" + std::to_string(n);
      if (j.contains("id")) {
        if (j["id"].is_string()) id = j["id"].get<std::string>();
        else if (j["id"].is_number_integer()) id = std::to_string(j["id"].get<long long>());
        else throw std::runtime_error(path.string() + ":" + std::to_string(n) + ": \"id\" must be a string or an integer");
      }
      out.push_back({{"id", id}, {"question", j["question"]}});
    } else {
      out.push_back({{"id", "q" + std::to_string(n)}, {"question", line.substr(first)}});
    }
  }
  return out;
}

}  // namespace quarry::run
