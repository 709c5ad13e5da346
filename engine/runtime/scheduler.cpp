#include "engine/runtime/scheduler.hpp"

#include <algorithm>

namespace quarry::engine {

namespace {
/// A waiting request that was passed over this many times is admitted before any other (no starvation).
constexpr std::size_t kMaxPassed = 16;
/// Above this many waiting requests the queue is served first come first served (LPM's matching
/// cost grows with the queue; SGLang makes the same switch).
constexpr std::size_t kMaxLpmQueue = 128;
}  // namespace

Scheduler::Scheduler(KvCache& kv, const SchedulerOptions& options, EngineStats& stats, const Stopwatch& clock)
    : kv_(kv), options_(options), stats_(stats), clock_(clock) {
  options_.max_num_seqs = options_.running_limit();
  if (options_.max_batch_tokens == 0) options_.max_batch_tokens = 1;
}

void Scheduler::add(std::unique_ptr<Sequence> s) { waiting_.push_back(std::move(s)); }

void Scheduler::cancel(RequestId id) {
  for (auto* list : {&waiting_, &running_})
    for (auto& s : *list)
      if (s->id == id && !s->done) s->cancelled = true;
}

void Scheduler::drop(RequestId id) {
  for (auto* list : {&waiting_, &running_}) {
    auto it = std::find_if(list->begin(), list->end(), [&](const auto& s) { return s->id == id; });
    if (it == list->end()) continue;
    kv_.free_sequence((*it)->kv);
    list->erase(it);
  }
}

void Scheduler::finish(Sequence& s, FinishReason why, std::string error) {
  s.done = true;
  s.result.finish = why;
  s.error = std::move(error);
  s.result.stats.generated_tokens = s.result.tokens.size();
  s.result.stats.decode_s = s.t_first >= 0 ? clock_.seconds() - s.t_first : 0.0;
  kv_.free_sequence(s.kv);
  s.kv = -1;
}

void Scheduler::finish_cancelled() {
  for (auto* list : {&waiting_, &running_})
    for (auto& s : *list)
      if (s->cancelled && !s->done) finish(*s, FinishReason::cancelled, "cancelled");
}

void Scheduler::retire(std::vector<FinishedRequest>& out) {
  for (auto* list : {&waiting_, &running_}) {
    auto keep = list->begin();
    for (auto it = list->begin(); it != list->end(); ++it) {
      if ((*it)->done) {
        out.push_back(FinishedRequest{(*it)->id, std::move((*it)->result), std::move((*it)->error)});
        ++stats_.requests_finished;
      } else {
        if (keep != it) *keep = std::move(*it);
        ++keep;
      }
    }
    list->erase(keep, list->end());
  }
}

std::size_t Scheduler::reserved_blocks_left() const {
  std::size_t n = 0;
  for (const auto& s : running_) {
    if (s->done) continue;
    const std::size_t want = kv_.blocks_for(s->reserve_tokens), have = kv_.block_table(s->kv).size();
    if (want > have) n += want - have;
  }
  return n;
}

std::vector<Sequence*> Scheduler::admit() {
  std::vector<Sequence*> admitted;
  if (waiting_.empty() || running_.size() >= options_.max_num_seqs) return admitted;
  const std::size_t bs = kv_.spec().block_size;
  const std::size_t max_blocks = kv_.allocator().max_blocks();
  const bool caching = kv_.prefix_options().enabled;
  // The cached prefix usable by a request: whole blocks, leaving at least the last prompt token to
  // compute (its logits give the first output token).
  auto usable_blocks = [&](const Sequence& s) { return (s.n_prompt() - 1) / bs; };
  auto match = [&](const Sequence& s) { return kv_.match_prefix(s.req.prompt, s.prompt_keys, usable_blocks(s)); };

  // Candidate order: the longest cached prefix first (LPM), ties by submission; first come first
  // served when the queue is long or its head has been passed over kMaxPassed times.
  std::vector<std::size_t> order(waiting_.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::vector<std::vector<BlockId>> matched(waiting_.size());
  std::vector<bool> have_match(waiting_.size(), false);
  const bool lpm = caching && waiting_.size() <= kMaxLpmQueue && waiting_.front()->n_passed < kMaxPassed;
  if (lpm) {
    for (std::size_t i = 0; i < waiting_.size(); ++i) {
      matched[i] = match(*waiting_[i]);
      have_match[i] = true;
    }
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return matched[a].size() > matched[b].size(); });
  }

  std::size_t reserved = reserved_blocks_left();
  for (std::size_t i : order) {
    Sequence& s = *waiting_[i];
    if (s.done || s.cancelled) continue;
    if (running_.size() >= options_.max_num_seqs) break;
    if (kv_.blocks_for(s.n_prompt()) > max_blocks) {
      s.result.stats.queue_s = clock_.seconds() - s.t_submit;
      finish(s, FinishReason::length,
             "prompt of " + std::to_string(s.n_prompt()) + " tokens does not fit the KV cache (" +
                 std::to_string(max_blocks * bs) + " tokens; raise max_kv_tokens / kv_cache_mb)");
      continue;
    }
    if (!have_match[i]) matched[i] = match(s);
    const auto& blocks = matched[i];
    // In-flight sharing: a running request still prefilling will commit blocks this one could reuse
    // beyond what is cached now; wait for them instead of computing them twice.
    if (caching) {
      const std::size_t usable = std::min(usable_blocks(s), s.prompt_keys.size());
      bool wait = false;
      for (const auto& r : running_) {
        if (r->done || !r->prefilling()) continue;
        std::size_t common = 0;
        const std::size_t n = std::min(usable, r->prompt_keys.size());
        while (common < n && r->prompt_keys[common] == s.prompt_keys[common]) ++common;
        if (common > blocks.size()) {
          wait = true;
          break;
        }
      }
      if (wait) continue;
    }
    // KV budget: blocks for the prompt and every output token (capped at the whole cache), counting
    // what running requests may still claim, so that a running request never runs out.
    const std::size_t target = std::min(s.n_prompt() + s.req.max_tokens, max_blocks * bs);
    const std::size_t new_blocks = kv_.blocks_for(target) - blocks.size();
    const std::size_t free_now = kv_.allocator().n_free() - kv_.n_unreferenced(blocks);
    if (free_now < reserved || free_now - reserved < new_blocks) break;  // wait for blocks; keep the order

    s.kv = kv_.create_sequence();
    kv_.attach_prefix(s.kv, blocks, s.prompt_keys);
    s.n_computed = blocks.size() * bs;
    s.reserve_tokens = target;
    s.result.stats.cached_tokens = s.n_computed;
    s.result.stats.prefill_tokens = s.n_prompt() - s.n_computed;
    s.result.stats.queue_s = clock_.seconds() - s.t_submit;
    stats_.prefix_hit_tokens += s.n_computed;
    reserved += new_blocks;
    for (std::size_t j = 0; j < i; ++j)
      if (waiting_[j]) ++waiting_[j]->n_passed;
    admitted.push_back(waiting_[i].get());
    running_.push_back(std::move(waiting_[i]));  // leaves a null in waiting_, erased below
  }
  std::erase_if(waiting_, [](const auto& p) { return p == nullptr; });
  return admitted;
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  Batch& batch = out.batch;
  std::size_t budget = options_.max_batch_tokens;
  const std::size_t bytes_per_token = kv_.bytes_per_token();
  auto kv_full = [&](Sequence& s) {
    finish(s, FinishReason::length,
           "KV cache full (" + std::to_string(kv_.allocator().max_blocks() * kv_.spec().block_size) +
               " tokens; raise max_kv_tokens / kv_cache_mb)");
  };
  // The committed tokens n_computed .. n_computed + n - 1 of a sequence (its last one, the end of the
  // tokens known so far, wants logits), then its drafts. Returns false when its KV blocks ran out.
  auto add_rows = [&](Sequence& s, std::size_t n, std::size_t k, bool prefill) {
    const std::size_t end = prefill ? s.n_prompt() : s.tokens.size();
    if (!kv_.reserve(s.kv, s.n_computed + n)) {
      kv_full(s);
      return false;
    }
    ScheduledSequence& e = out.scheduled.emplace_back();
    e.seq = &s;
    e.first_row = s.row_first = batch.size();
    e.first_position = s.pos_first = s.n_computed;
    e.n_tokens = n;
    e.n_drafts = k;
    e.prefill = prefill;
    s.n_rows = n + k;
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t p = s.n_computed + i;
      const bool last = p + 1 == end;
      if (last) {
        s.has_logits = e.wants_logits = true;
        s.logit_first = batch.n_logits();
      }
      batch.add(s.tokens[p], static_cast<std::int32_t>(p), s.kv, last);
      if (last) out.logit_owners.push_back(&s);
      if (!prefill) out.kv_read_bytes += (p + 1) * bytes_per_token;
    }
    // The drafts (speculative: not counted in n_computed, never committed to the prefix cache).
    for (std::size_t i = 0; i < k; ++i) {
      batch.add(s.job.drafts[i], static_cast<std::int32_t>(end + i), s.kv, true);
      out.kv_read_bytes += (end + i + 1) * bytes_per_token;
    }
    s.n_computed += n;
    return true;
  };
  // Decode first: each sequence past its prompt feeds its uncached output tokens (the last sampled
  // one, plus any forced by jump-forward).
  for (auto& sp : running_) {
    Sequence& s = *sp;
    if (s.done || s.prefilling() || budget == 0) continue;
    const std::size_t n = std::min(s.tokens.size() - s.n_computed, budget);
    if (n == 0) continue;
    const std::size_t k = s.n_drafts();  // KV for them reserved when drafting
    if (!add_rows(s, n, k, /*prefill=*/false)) continue;
    out.draft_rows += k;
    budget -= std::min(budget, n + k);
  }
  // Then prefill chunks, in admission order, with what budget is left.
  for (auto& sp : running_) {
    Sequence& s = *sp;
    if (s.done || !s.prefilling() || budget == 0) continue;
    std::size_t n = std::min(s.n_prompt() - s.n_computed, budget);
    if (const std::size_t a = options_.prefill_align)  // end at the next snapshot point at most
      n = std::min(n, (s.n_computed / a + 1) * a - s.n_computed);
    if (!add_rows(s, n, 0, /*prefill=*/true)) continue;
    budget -= n;
    out.prefill_tokens += n;
  }
  return out;
}

bool Scheduler::fail_stuck_head() {
  if (!running_.empty() || waiting_.empty()) return false;
  finish(*waiting_.front(), FinishReason::length, "request could not be scheduled");
  return true;
}

}  // namespace quarry::engine
