// The seed workloads (BENCH.md, seed 003's single-stream table) built from the project's samples/:
// nothing is downloaded, the choices (question, invoice) are fixed by a seed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.hpp"

namespace quarry::bench {

/// One workload's request, ready for a model's tokenizer.
struct Workload {
  std::string name;
  std::string description;  ///< what the prompt is, in words (for the report)
  std::vector<engine::TokenId> prompt;  ///< chat-templated, thinking off
  std::size_t max_tokens = 256;         ///< output length (fixed unless the grammar ends it)
  bool ignore_eos = true;               ///< fixed output length, as benchmark clients do
  std::string json_schema;              ///< non-empty: output constrained to JSON valid for it
  std::size_t target_prompt_tokens = 0;  ///< long-rag: the prompt length aimed at (context + question)
  /// Positions the workload needs at the seed's size (prompt + output unscaled: 7,756 for long-rag-8k,
  /// 30,256 for long-rag-32k; 0 for the short ones). A model with fewer positions does not run a
  /// scaled-down copy of it: the workload is skipped there.
  std::size_t seed_positions = 0;
};

/// Inputs shared by all workloads, read once.
struct WorkloadInputs {
  std::vector<std::string> questions_en, questions_hu;  ///< samples/questions/services-agreement{,.hu}.txt
  std::string long_document;     ///< text of samples/long/services-agreement.pdf (the extractor's)
  std::string invoice_text;      ///< one samples/invoices/hu-txt-*.txt, picked by the seed
  std::string invoice_name;
  std::string invoice_schema;    ///< schemas/invoice.schema.json
  std::string kie_system, rag_system;  ///< the model folder's prompts.json when present, else built in
  std::size_t qa_index = 0, rag_index = 0;  ///< questions picked by the seed
};

/// Reads the inputs. Throws std::runtime_error naming the file on a missing or unreadable input.
WorkloadInputs load_workload_inputs(const std::filesystem::path& samples_dir,
                                    const std::filesystem::path& invoice_schema, std::uint64_t seed);

/// Builds workload `name` for `tok`. `context_scale` multiplies the long-rag prompt lengths (7,500 and
/// 30,000 tokens), `output_scale` the output lengths (at least 2 tokens). `prompts_json` is the model
/// folder's prompts.json (optional; its "kie"/"rag" system prompts are used when present).
/// Throws std::invalid_argument on an unknown name.
Workload build_workload(const std::string& name, const WorkloadInputs& in, const engine::Tokenizer& tok,
                        double context_scale, double output_scale,
                        const std::filesystem::path& prompts_json = {});

/// `n` tokens of running text (the long document, repeated as needed) for the pp/tg sweep: real text
/// rather than random ids, so that drafting sees text it can predict.
std::vector<engine::TokenId> filler_tokens(const WorkloadInputs& in, const engine::Tokenizer& tok, std::size_t n);

}  // namespace quarry::bench
