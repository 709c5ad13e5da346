// Counters of the runtime, counted where the work happens (tokens, seconds, bytes moved).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/core/stopwatch.hpp"

namespace quarry::engine {

/// One request's figures.
struct RequestStats {
  std::size_t prompt_tokens = 0;
  std::size_t cached_tokens = 0;   ///< of prompt_tokens: served by the prefix cache (not computed)
  std::size_t prefill_tokens = 0;  ///< of prompt_tokens: computed (prompt_tokens - cached_tokens)
  std::size_t generated_tokens = 0;
  std::size_t forced_tokens = 0;  ///< of generated_tokens: appended by jump-forward, not sampled
  double queue_s = 0.0;   ///< from submit() (or the start of generate()) to admission into the running set
  double ttft_s = 0.0;    ///< from submit() (or the start of generate()) to the first sampled token
  double decode_s = 0.0;  ///< from the first sampled token to the last
  /// Decode speed: tokens after the first / decode_s (0 when fewer than two tokens).
  double decode_tok_s() const {
    return generated_tokens > 1 && decode_s > 0 ? static_cast<double>(generated_tokens - 1) / decode_s : 0.0;
  }
  /// Prefill speed: prompt tokens / TTFT.
  double prefill_tok_s() const { return ttft_s > 0 ? static_cast<double>(prompt_tokens) / ttft_s : 0.0; }

  // Speculative decoding (MTP drafts; engine/runtime/speculative.hpp).
  std::size_t draft_tokens = 0;     ///< drafts proposed (MTP-drafted and grammar-forced)
  std::size_t forced_drafts = 0;    ///< of draft_tokens: forced by the grammar (no MTP run)
  std::size_t accepted_tokens = 0;  ///< drafts accepted by verification
  std::size_t verify_steps = 0;     ///< main-model steps of this request that scored drafts (or could have)
  std::vector<std::size_t> draft_proposed;  ///< [j]: drafts proposed at draft position j + 1
  std::vector<std::size_t> draft_accepted;  ///< [j]: of those, accepted
  /// Mean acceptance length: tokens emitted per verify step (accepted drafts + the target's token).
  double mean_acceptance_length() const {
    return verify_steps ? static_cast<double>(accepted_tokens + verify_steps) / static_cast<double>(verify_steps) : 0.0;
  }
};

/// Engine-wide totals over forward calls. A forward call that carries any prompt (prefill) token is a
/// prefill step; one with only decode tokens is a decode step.
struct EngineStats {
  std::size_t prefill_tokens = 0, prefill_steps = 0;  ///< prompt tokens computed (prefix-cache hits excluded)
  double prefill_s = 0.0;
  std::size_t decode_tokens = 0, decode_steps = 0;
  std::size_t replayed_steps = 0;  ///< forward steps replayed from a recording (CUDA graphs)
  std::size_t forced_tokens = 0;  ///< output tokens appended by jump-forward (not sampled)
  /// Forward steps whose LM head was computed only for the grammar's allowed groups of ids
  /// (EngineOptions::grammar_lm_head), and the LM-head groups of 16 rows they computed / skipped.
  std::size_t grammar_lm_head_steps = 0, lm_head_groups_computed = 0, lm_head_groups_skipped = 0;
  /// Steps whose greedy rows were picked by the backend (EngineOptions::greedy_on_backend): only ids came back.
  std::size_t greedy_on_backend_steps = 0;
  /// Steps whose rows were drawn by the backend (EngineOptions::sample_on_backend): only ids came back.
  std::size_t sampled_on_backend_steps = 0;
  double decode_s = 0.0;
  /// Bytes decode steps read: weights once per step + the K/V of every context position attended (+ the
  /// recurrent state of each sequence, read and written, in hybrid models).
  std::uint64_t decode_bytes = 0;
  std::size_t requests_finished = 0;
  // Prefix cache.
  std::size_t prefix_hit_tokens = 0;   ///< prompt tokens served from cached blocks (sum of RequestStats::cached_tokens)
  std::size_t state_snapshots = 0;     ///< hybrid models: recurrent-state snapshots kept for prefix reuse
  std::uint64_t kv_evictions = 0;      ///< cached blocks evicted to make room
  std::size_t kv_cached_blocks = 0;    ///< blocks holding a prefix-cache key now (after the last step)
  std::size_t kv_used_blocks = 0;      ///< blocks referenced by running sequences now
  std::size_t kv_max_blocks = 0;       ///< capacity of the cache in blocks

  // Speculative decoding totals (see RequestStats); draft_s: MTP passes, draft sampling and grammar
  // masks; verify_s: main-model forward calls that scored drafts, plus acceptance.
  std::size_t draft_tokens = 0, forced_drafts = 0, accepted_tokens = 0, verify_steps = 0, mtp_rows = 0;
  std::vector<std::size_t> draft_proposed, draft_accepted;
  double draft_s = 0.0, verify_s = 0.0;
  double mean_acceptance_length() const {
    return verify_steps ? static_cast<double>(accepted_tokens + verify_steps) / static_cast<double>(verify_steps) : 0.0;
  }

  double prefill_tok_s() const { return prefill_s > 0 ? static_cast<double>(prefill_tokens) / prefill_s : 0.0; }
  double decode_tok_s() const { return decode_s > 0 ? static_cast<double>(decode_tokens) / decode_s : 0.0; }
  /// Achieved memory bandwidth of decode (zeux/calm style): decode_bytes / decode_s, in GB/s (1e9 B/s).
  double decode_gb_s() const { return decode_s > 0 ? static_cast<double>(decode_bytes) / decode_s / 1e9 : 0.0; }
};

}  // namespace quarry::engine
