// Prompt templates of a model folder (prompts.json) and the chat messages built from them.
//
// prompts.json: {"kie": {"system": S, "user": U}, "rag": {"system": S, "user": U}}; in U, "{document}"
// is replaced by the document's text and (rag) "{question}" by the question. The system prompt comes
// first and the document before the question, so requests that share a document share a prefix.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/tokenizer/tokenizer.hpp"

namespace quarry::run {

class PromptTemplates {
 public:
  /// Reads prompts.json. Throws std::runtime_error naming the file on a missing file, malformed
  /// JSON or a missing/non-string "system"/"user" of "kie".
  static PromptTemplates load(const std::filesystem::path& path);

  std::vector<engine::ChatMessage> kie_messages(const std::string& document) const;
  /// Throws std::runtime_error when the file had no "rag" templates.
  std::vector<engine::ChatMessage> rag_messages(const std::string& document, const std::string& question) const;

 private:
  std::filesystem::path file_;
  std::string kie_system_, kie_user_, rag_system_, rag_user_;
  bool has_rag_ = false;
};

/// `text` with every "{name}" replaced by `value`.
std::string fill_placeholder(std::string text, const std::string& name, const std::string& value);

/// Questions: one per line (blank lines skipped; ids "q1", "q2", ... by line number), or JSON lines
/// with a "question" string and an optional "id" (string or number). Returns [{"id", "question"}].
/// Throws std::runtime_error naming the file and line on a malformed line.
std::vector<nlohmann::json> read_question_file(const std::filesystem::path& path);

}  // namespace quarry::run
