// KIE prompt templates of a model folder (prompts.json) and the chat messages built from them.
//
// prompts.json: {"kie": {"system": S, "user": U}, ...}; in U, "{document}" is replaced by the
// document's text. (The "rag" entry is read by pipeline/rag/rag.hpp, load_rag_template.) An optional
// "schema" entry (user's own schemas over any document) has "{schema}" too: schema_for_prompt's text.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
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
  /// Whether the file has the "schema" template (models trained to follow a schema shown in the prompt).
  bool has_schema_template() const { return !schema_user_.empty(); }
  /// The "schema" template's messages: `schema_text` (schema_for_prompt) and the document filled in.
  std::vector<engine::ChatMessage> schema_messages(const std::string& document, const std::string& schema_text) const;

 private:
  std::filesystem::path file_;
  std::string kie_system_, kie_user_, schema_system_, schema_user_;
};

/// The {schema} text of the "schema" template, as the bundled model was trained on it
/// (tools/train/build_corpus.py): local "$ref"s ("#/$defs/..", "#/definitions/..") inlined, then only the
/// keys type, properties, required, items, enum, format, title and description of each schema object
/// kept, in the schema's own order (every property name kept), as compact JSON (no spaces, non-ASCII
/// characters as themselves). A $ref that points outside the document, or refs nested deeper than 32,
/// are dropped (their keys do not shape the prompt).
std::string schema_for_prompt(const nlohmann::ordered_json& schema);

/// `text` with every "{name}" replaced by `value`.
std::string fill_placeholder(std::string text, const std::string& name, const std::string& value);

}  // namespace quarry::run
