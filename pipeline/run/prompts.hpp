// KIE prompt templates of a model folder (prompts.json) and the chat messages built from them.
//
// prompts.json: {"kie": {"system": S, "user": U}, ...}; in U, "{document}" is replaced by the
// document's text. (The "rag" entry is read by pipeline/rag/rag.hpp, load_rag_template.)
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.hpp"

namespace quarry::run {

class PromptTemplates {
 public:
  /// Reads prompts.json. Throws std::runtime_error naming the file on a missing file, malformed
  /// JSON or a missing/non-string "system"/"user" of "kie".
  static PromptTemplates load(const std::filesystem::path& path);

  std::vector<engine::ChatMessage> kie_messages(const std::string& document) const;

 private:
  std::filesystem::path file_;
  std::string kie_system_, kie_user_;
};

/// `text` with every "{name}" replaced by `value`.
std::string fill_placeholder(std::string text, const std::string& name, const std::string& value);

}  // namespace quarry::run
