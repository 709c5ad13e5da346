// The scheduler of continuous batching (Orca, Yu et al. 2022; vLLM v1's scheduler): the waiting queue
// and the running set, admission under the KV budget, and each step's typed schedule -- which rows of
// which sequences the next forward call carries. It does bookkeeping on the KV cache (block tables,
// prefix matches) and never touches tensors (the model runner does).
//
// Admission, in one step: finish cancelled requests; admit waiting ones while max_num_seqs and the KV
// budget allow (a request reserves blocks for its prompt and max_tokens outputs, less its cached prefix,
// so a running request never runs out; no preemption), longest cached prefix first (SGLang LPM) with at
// most 16 pass-overs per request, deferring a request whose prefix another one is prefilling right now.
// Batch: one decode row per running sequence past its prompt (plus its drafts to verify) first, prefill
// chunks after it up to max_batch_tokens (chunked prefill, Sarathi-Serve).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/batch.hpp"
#include "engine/core/stopwatch.hpp"
#include "engine/memory/kv_cache.hpp"
#include "engine/runtime/engine.hpp"
#include "engine/runtime/sequence.hpp"
#include "engine/runtime/stats.hpp"

namespace quarry::engine {

struct SchedulerOptions {
  std::size_t max_batch_tokens = 256;  ///< tokens per forward call
  std::size_t max_num_seqs = 64;       ///< running sequences at most (see running_limit())
  /// Prefill chunks do not cross multiples of this many positions (0: no such limit): where a hybrid
  /// model's recurrent state is snapshotted for prefix reuse (a multiple of the KV block size).
  std::size_t prefill_align = 0;
  /// The running sequences the scheduler admits: max_num_seqs clamped to [1, max(max_batch_tokens, 1)].
  std::size_t running_limit() const {
    return std::clamp<std::size_t>(max_num_seqs, 1, std::max<std::size_t>(max_batch_tokens, 1));
  }
};

/// One sequence's rows in a step's batch.
struct ScheduledSequence {
  Sequence* seq = nullptr;
  std::size_t first_row = 0;       ///< its first row in the batch
  std::size_t first_position = 0;  ///< position of its first row
  std::size_t n_tokens = 0;        ///< committed tokens fed (prompt chunk, or decode tokens)
  std::size_t n_drafts = 0;        ///< draft rows after them (speculative verification)
  bool prefill = false;            ///< the tokens are prompt tokens
  bool wants_logits = false;       ///< its last committed row (and every draft row) has logits
};

/// What the next forward call runs: the flat batch and who owns its rows.
struct SchedulerOutput {
  Batch batch;
  std::vector<ScheduledSequence> scheduled;  ///< decode sequences first, then prefill chunks (batch order)
  std::vector<Sequence*> logit_owners;       ///< per sequence with logit rows, in logit-row order
  std::size_t prefill_tokens = 0;            ///< prompt tokens in the batch
  std::size_t draft_rows = 0;                ///< draft rows (verification) in the batch
  std::uint64_t kv_read_bytes = 0;           ///< K/V bytes the decode and draft rows attend over
  bool empty() const { return batch.size() == 0; }
};

class Scheduler {
 public:
  /// The scheduler of `kv` (whose block pool it manages); `stats` receives prefix hits and finished
  /// counts; `clock` times queueing.
  Scheduler(KvCache& kv, const SchedulerOptions& options, EngineStats& stats, const Stopwatch& clock);

  /// Queues a request (already validated).
  void add(std::unique_ptr<Sequence> s);
  /// Marks the request cancelled (finished at the next step). Unknown or finished ids are ignored.
  void cancel(RequestId id);
  /// Removes a request wherever it is, freeing its KV blocks (no FinishedRequest is produced).
  void drop(RequestId id);
  /// Finishes every cancelled request.
  void finish_cancelled();
  /// Moves finished requests to `out`.
  void retire(std::vector<FinishedRequest>& out);
  /// Admits waiting requests (see the file comment); returns the newly admitted ones.
  std::vector<Sequence*> admit();
  /// The next step's schedule over the running set. Each sequence's drafts (Sequence::drafted) must be
  /// set before; a sequence whose KV blocks run out is finished with an error.
  SchedulerOutput schedule();
  /// Ends a sequence: frees its KV blocks, records its reason and stats.
  void finish(Sequence& s, FinishReason why, std::string error = {});
  /// If nothing runs and nothing could be admitted (only a scheduler bug leads here), fails the head of
  /// the queue rather than spinning. Returns true if it did.
  bool fail_stuck_head();

  const std::vector<std::unique_ptr<Sequence>>& running() const { return running_; }
  const std::vector<std::unique_ptr<Sequence>>& waiting() const { return waiting_; }
  bool has_unfinished() const { return !waiting_.empty() || !running_.empty(); }
  const SchedulerOptions& options() const { return options_; }

 private:
  std::size_t reserved_blocks_left() const;

  KvCache& kv_;
  SchedulerOptions options_;
  EngineStats& stats_;
  const Stopwatch& clock_;
  std::vector<std::unique_ptr<Sequence>> waiting_;  ///< submission order
  std::vector<std::unique_ptr<Sequence>> running_;  ///< admission order
};

}  // namespace quarry::engine
