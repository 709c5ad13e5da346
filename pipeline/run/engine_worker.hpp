// The engine worker of `quarry run`: owns the Engine (one thread drives it) and turns task messages
// (ModelTaskMsg: prompt ids, max_tokens, attempt) into generated messages (GeneratedMsg: text, finish,
// stats or error).
//
// Sampling per attempt: attempt 0 uses engine.temperature and seed engine.seed; attempt i > 0 (a retry
// after validation failed) uses engine.retry_temperature and seed engine.seed + i. Every request is
// constrained to JSON valid for the job's schema (engine/grammar).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/runtime/engine.hpp"
#include "pipeline/run/job.hpp"
#include "pipeline/run/messages.hpp"

namespace quarry::run {

class EngineWorker {
 public:
  /// Loads the model and compiles the schema's grammar. Throws std::runtime_error naming the model
  /// folder or the schema on failure.
  EngineWorker(const JobSpec& job, std::shared_ptr<const engine::Tokenizer> tokenizer, const std::string& schema_text,
               const std::function<void(const std::string&)>& log);
  ~EngineWorker();

  /// The model's context length (max_position_embeddings).
  std::size_t context_tokens() const;

  /// Submits a task (prompt ids, max_tokens, attempt) to the engine's continuous batch
  /// (Engine::submit); a request the engine refuses finishes at the next step() with its error.
  /// A chunked task (ModelTaskMsg::chunks) is one request per window, each grounded in its window's
  /// text; it finishes when all of them have, with one ChunkOutput each (in window order), the summed
  /// stats (chunked_stats) and the first window's error, if any.
  void submit(ModelTaskMsg task);
  /// Tasks submitted and not yet returned by step().
  std::size_t in_flight() const;
  /// One scheduler iteration (Engine::step: at most one forward call): returns the tasks that
  /// finished, each with its text, finish reason, record stats and error (empty unless the request failed).
  std::vector<GeneratedMsg> step();
  /// Cancels every task in flight (Engine::cancel) and drops them; returns how many.
  std::size_t cancel_all();

  /// Record stats of one request: prompt_tokens, prefill_tokens, cached_tokens, decode_tokens,
  /// forced_tokens, ttft_ms, decode_tok_s (+ draft_tokens, accepted_tokens, verify_steps when drafting).
  static nlohmann::json stats_json(const engine::RequestStats& s);

 private:
  const JobSpec& job_;
  std::shared_ptr<const engine::Tokenizer> tokenizer_;
  std::string schema_text_;
  std::unique_ptr<engine::Engine> engine_;
  std::unordered_map<engine::RequestId, ModelTaskMsg> running_;
  /// A chunked task in flight: its windows' outputs as they finish.
  struct Chunked {
    ModelTaskMsg task;
    std::vector<ChunkOutput> outputs;
    std::size_t left = 0;  ///< windows not finished yet
  };
  std::unordered_map<std::uint64_t, Chunked> chunked_;  ///< by serial
  std::unordered_map<engine::RequestId, std::pair<std::uint64_t, std::size_t>> window_of_;  ///< request -> (serial, window)
  std::uint64_t next_serial_ = 0;
  void submit_chunked(ModelTaskMsg task);
  GeneratedMsg finish_chunked(Chunked c);
  std::vector<GeneratedMsg> refused_;  ///< submit() threw: returned by the next step()
  engine::GenerationRequest make_request(const ModelTaskMsg& task);
  /// A request with the job's sampling for `attempt`, grounded in `text` (when grounding is on and it is non-empty).
  engine::GenerationRequest job_request(std::vector<std::int32_t> prompt, std::size_t max_tokens, std::size_t attempt,
                                        const std::string& text);
};

}  // namespace quarry::run
