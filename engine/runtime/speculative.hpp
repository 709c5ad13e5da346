// Speculative decoding with the model's own MTP module: drafting (grammar-aware, batched over
// sequences) and lossless verification.
//
// Verification (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding";
// Chen et al. 2023, "Accelerating LLM Decoding with Speculative Sampling"): the target model scores the
// last committed token plus k drafts in one forward call (k + 1 rows). Greedy: drafts are accepted while
// each equals the target's argmax (under the grammar bitmask of that position), then the target's token
// follows. Sampling: draft x_j, drawn from q_j, is accepted with probability min(1, p_j(x_j) / q_j(x_j));
// at the first rejection the next token is drawn from norm(max(0, p_j - q_j)); if all k are accepted a
// bonus token is drawn from p_{k+1}. The emitted tokens are then distributed exactly as tokens sampled
// one by one from p.
//
// Drafting (ARCHITECTURE.md "MTP"; the recursion of tools/train/train.py): depth d of the MTP module has
// its own KV layer, where row i holds x = fc([norm_e(embed(t[i+d])), norm_h(g_{d-1}[i])]) with g_0 the
// main model's hidden state and g_{d-1} the previous depth's output -- exactly the training's causal pass
// per depth. With C committed tokens (t[C-1] the newest, not yet in the main KV), depth d runs rows
// r_d..C-2: rows i <= C-1-d read committed tokens only and stay valid; rows i > C-1-d read drafts and are
// recomputed in the next round (r_d becomes C-d). Draft d is predicted by depth d at row C-2.
// Grammar-aware: a draft position where the bitmask allows exactly one token takes that token without
// running the MTP module (the depth passes it skips are caught up the next time a deeper draft needs
// them; the rows they cover stay exact).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/models/model.hpp"
#include "engine/core/batch.hpp"
#include "engine/memory/kv_cache.hpp"
#include "engine/runtime/sampler.hpp"

namespace quarry::engine {

class TokenConstraint;

/// Outcome of verifying one sequence's drafts.
struct VerifyResult {
  std::size_t n_accepted = 0;  ///< drafts accepted (a prefix of them)
  /// The token after the accepted drafts: the target's own at the first rejection, or the bonus token
  /// when all were accepted (unless want_bonus was false); -1 when none (no bonus, or the bitmask
  /// allows nothing).
  TokenId next = -1;
};

/// Verifies `drafts` (k tokens) against target logits [k + 1, V] f32 (row j scores the token after the
/// committed prefix and drafts 0..j-1). masks[j] is the bitmask at row j (empty: everything allowed);
/// draft_dists[j] is the distribution draft j was drawn from (ignored for greedy sampling). With
/// want_bonus false (e.g. the last draft ended the sequence), no bonus token is drawn after k accepted
/// drafts. Uses `sampler`'s parameters and random stream. Throws std::invalid_argument on mismatched sizes.
VerifyResult verify_drafts(Sampler& sampler, std::span<const float> target_logits, std::size_t vocab,
                           std::span<const std::vector<std::uint32_t>> masks, std::span<const TokenId> drafts,
                           std::span<const TokenDistribution> draft_dists, bool want_bonus = true);

/// verify_drafts() for greedy sampling from the rows' argmax ids alone (target_argmax [k + 1]: each
/// row's first largest allowed logit, -1 where its bitmask allows nothing; Backend::argmax_rows): the
/// same result as verify_drafts() with a greedy sampler over those rows. Throws std::invalid_argument
/// when fewer than k + 1 ids are given.
VerifyResult verify_greedy(std::span<const TokenId> target_argmax, std::span<const TokenId> drafts,
                           bool want_bonus = true);

/// Per-sequence MTP drafting state (one per running sequence with drafting on).
class MtpState {
 public:
  /// `max_depth`: deepest draft position (KV layers available); `start_row`: first position whose MTP
  /// entries are still to compute (0, or the prompt tokens served from a prefix cache).
  MtpState(std::size_t max_depth, std::size_t hidden_size, std::size_t start_row = 0);

  /// Records main-model hidden states [n, hidden_size] of consecutive positions (prefill chunks,
  /// verified rows), which must continue the rows recorded so far.
  void push_main_hidden(const float* rows, std::size_t n, std::size_t first_position);
  /// Position after the last main hidden state recorded.
  std::size_t main_hidden_end() const { return next_row_[0] + pending_rows(0); }
  /// Positions 0..n-1 whose MTP rows are final at every depth (the prefix cache shares a block only
  /// when all its layers, MTP ones included, hold final values).
  std::size_t complete_rows() const { return *std::min_element(next_row_.begin(), next_row_.end()); }

  /// Draft depth for the next round from recent acceptance (at most `cap`): the deepest position whose
  /// estimated probability of being reached and accepted is >= 0.3; 0 (no drafting) while the first
  /// position's acceptance is below 0.3, except for a 1-draft probe every 8th round so that the
  /// estimate can recover.
  std::size_t choose_depth(std::size_t cap);
  /// Updates the acceptance estimates after a verification: `proposed` drafts, `accepted` of them.
  void record(std::size_t proposed, std::size_t accepted);

 private:
  friend class MtpDrafter;
  std::size_t pending_rows(std::size_t j) const { return pending_[j].size() / hidden_; }
  std::size_t max_depth_, hidden_;
  std::vector<std::size_t> next_row_;         ///< r_d for d = 1..max_depth (index d - 1)
  std::vector<std::vector<float>> pending_;   ///< [j]: g_j rows from next_row_[j], committed inputs only
  std::vector<double> accept_rate_;           ///< per position: P(accepted | reached), moving average
  std::size_t idle_rounds_ = 0;               ///< rounds without drafting since the last probe
};

/// One sequence's drafting job for a round.
struct DraftJob {
  SeqId seq = -1;
  MtpState* state = nullptr;
  /// The committed tokens t[0..C-1] (prompt then output); t[C-1] is not yet in the main KV cache.
  std::function<TokenId(std::size_t)> token_at;
  std::size_t n_committed = 0;  ///< C
  std::size_t max_drafts = 0;   ///< k at most
  Sampler* sampler = nullptr;
  TokenConstraint* constraint = nullptr;  ///< optional; advanced through the drafts (roll back later)
  std::function<bool(TokenId)> ends_sequence;  ///< true for EOS / stop ids: drafting stops after it
  std::size_t mask_words = 0;

  // Outputs.
  std::vector<TokenId> drafts;
  std::vector<TokenDistribution> dists;       ///< q_j of each draft (a point mass for forced ones)
  std::vector<std::vector<std::uint32_t>> masks;  ///< drafts.size() + 1 bitmasks (empty: no constraint)
  std::size_t n_forced = 0;                   ///< drafts the grammar forced (no MTP run)
  bool ended = false;                         ///< the last draft ends the sequence (no bonus token)
};

/// Runs drafting rounds for many sequences: depth by depth, one mtp_forward call per depth over all
/// sequences that need it.
class MtpDrafter {
 public:
  /// `draft_vocab`: drafts are chosen among token ids 0..draft_vocab-1 only (0: the whole vocabulary;
  /// see Model::mtp_forward). Forced drafts are not limited. Verification stays exact either way.
  MtpDrafter(Model& model, KvCache& kv, std::size_t draft_vocab = 0)
      : model_(model), kv_(kv), draft_vocab_(draft_vocab) {}
  /// Fills each job's drafts / dists / masks. The caller must have reserved KV for n_committed +
  /// max_drafts positions. Returns the number of MTP rows computed (for stats).
  std::size_t draft(std::span<DraftJob* const> jobs);

  /// Advances the job's MTP caches over rows that read committed tokens only (depth e: rows up to
  /// n_committed - 2 - e; the last rows stay for the next drafting round, which needs their outputs):
  /// the MTP module's share of processing a prompt, run with the prefill so that it counts in the
  /// time to first token, not in decoding (EAGLE / vLLM prefill the draft module with the target).
  /// Uses only seq, state, token_at and n_committed of the job. Returns the MTP rows computed.
  std::size_t catch_up(DraftJob& job);

 private:
  Model& model_;
  KvCache& kv_;
  std::size_t draft_vocab_;
};

}  // namespace quarry::engine
