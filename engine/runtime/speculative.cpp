#include "engine/runtime/speculative.hpp"

#include <algorithm>
#include <bit>
#include <stdexcept>
#include <string>

#include "engine/core/constraint.hpp"

namespace quarry::engine {

VerifyResult verify_drafts(Sampler& sampler, std::span<const float> target_logits, std::size_t vocab,
                           std::span<const std::vector<std::uint32_t>> masks, std::span<const TokenId> drafts,
                           std::span<const TokenDistribution> draft_dists, bool want_bonus) {
  const std::size_t k = drafts.size();
  const bool greedy = sampler.params().temperature == 0.f;
  if (target_logits.size() < (k + 1) * vocab)
    throw std::invalid_argument("verify_drafts: " + std::to_string(k + 1) + " rows of logits needed");
  if (!masks.empty() && masks.size() < k + 1)
    throw std::invalid_argument("verify_drafts: " + std::to_string(k + 1) + " bitmasks needed");
  if (!greedy && draft_dists.size() < k)
    throw std::invalid_argument("verify_drafts: the draft distributions are needed for sampling");
  auto row = [&](std::size_t j) { return target_logits.subspan(j * vocab, vocab); };
  auto mask = [&](std::size_t j) {
    return masks.empty() ? std::span<const std::uint32_t>() : std::span<const std::uint32_t>(masks[j]);
  };
  TokenDistribution p;
  for (std::size_t j = 0; j < k; ++j) {
    sampler.distribution(row(j), mask(j), p);
    if (p.empty()) return {j, -1};
    const TokenId x = drafts[j];
    if (greedy) {
      if (x == p.ids[0]) continue;
      return {j, p.ids[0]};
    }
    const double px = p.prob(x), qx = draft_dists[j].prob(x);
    const double u = sampler.uniform();
    if (px > 0.0 && (qx <= 0.0 || u * qx < px)) continue;  // accept with probability min(1, p/q)
    // Rejected: draw from the residual norm(max(0, p - q)).
    std::vector<double> q_dense(vocab, 0.0);
    for (std::size_t i = 0; i < draft_dists[j].ids.size(); ++i)
      q_dense[static_cast<std::size_t>(draft_dists[j].ids[i])] = draft_dists[j].probs[i];
    TokenDistribution r;
    for (std::size_t i = 0; i < p.ids.size(); ++i) {
      const double d = p.probs[i] - q_dense[static_cast<std::size_t>(p.ids[i])];
      if (d > 0.0) {
        r.ids.push_back(p.ids[i]);
        r.probs.push_back(d);
      }
    }
    return {j, sampler.sample_from(r.empty() ? p : r)};
  }
  if (!want_bonus) return {k, -1};
  sampler.distribution(row(k), mask(k), p);
  return {k, sampler.sample_from(p)};
}

VerifyResult verify_greedy(std::span<const TokenId> target_argmax, std::span<const TokenId> drafts, bool want_bonus) {
  const std::size_t k = drafts.size();
  if (target_argmax.size() < k + 1)
    throw std::invalid_argument("verify_greedy: " + std::to_string(k + 1) + " argmax ids needed");
  for (std::size_t j = 0; j < k; ++j) {
    const TokenId t = target_argmax[j];
    if (t < 0) return {j, -1};
    if (drafts[j] != t) return {j, t};
  }
  if (!want_bonus) return {k, -1};
  return {k, target_argmax[k]};
}

MtpState::MtpState(std::size_t max_depth, std::size_t hidden_size, std::size_t start_row)
    : max_depth_(max_depth),
      hidden_(hidden_size),
      next_row_(max_depth, start_row),
      pending_(max_depth),
      accept_rate_(max_depth, 0.9) {
  if (max_depth == 0 || hidden_size == 0) throw std::invalid_argument("MtpState: zero depth or hidden size");
}

void MtpState::push_main_hidden(const float* rows, std::size_t n, std::size_t first_position) {
  if (first_position != main_hidden_end()) {
    // Not a continuation (e.g. a jump-forward run fed without hidden rows): restart the MTP caches at
    // this position; earlier MTP rows keep what they hold (may lower acceptance, never the output).
    std::fill(next_row_.begin(), next_row_.end(), first_position);
    for (auto& p : pending_) p.clear();
  }
  pending_[0].insert(pending_[0].end(), rows, rows + n * hidden_);
}

std::size_t MtpState::choose_depth(std::size_t cap) {
  double reach = 1.0;
  std::size_t k = 0;
  for (std::size_t j = 0; j < std::min(cap, max_depth_); ++j) {
    reach *= accept_rate_[j];
    if (reach < 0.3) break;
    k = j + 1;
  }
  if (k > 0 || cap == 0) {
    idle_rounds_ = 0;
    return k;
  }
  if (++idle_rounds_ >= 8) {  // probe
    idle_rounds_ = 0;
    return 1;
  }
  return 0;
}

void MtpState::record(std::size_t proposed, std::size_t accepted) {
  for (std::size_t j = 0; j < proposed && j <= accepted && j < max_depth_; ++j)
    accept_rate_[j] = 0.8 * accept_rate_[j] + 0.2 * (j < accepted ? 1.0 : 0.0);
}

namespace {

std::size_t popcount(const std::vector<std::uint32_t>& m, TokenId* only) {
  std::size_t n = 0;
  for (std::size_t w = 0; w < m.size(); ++w)
    if (m[w]) {
      n += static_cast<std::size_t>(std::popcount(m[w]));
      if (only) *only = static_cast<TokenId>(w * 32 + static_cast<std::size_t>(std::countr_zero(m[w])));
      if (n > 1) return n;
    }
  return n;
}

}  // namespace

std::size_t MtpDrafter::catch_up(DraftJob& j) {
  MtpState& st = *j.state;
  const std::size_t H = model_.config().hidden_size, C = j.n_committed;
  std::size_t rows = 0;
  Batch batch;
  std::vector<float> hin, hout;
  for (std::size_t e = 1; e <= st.max_depth_ && C >= e + 2; ++e) {
    const std::size_t r = st.next_row_[e - 1], np = st.pending_rows(e - 1);
    if (np == 0 || r > C - 2 - e) continue;
    const std::size_t end = std::min(C - 1 - e, r + np);  // rows r..end-1
    batch.clear();
    hin.assign(st.pending_[e - 1].begin(), st.pending_[e - 1].begin() + static_cast<std::ptrdiff_t>((end - r) * H));
    for (std::size_t i = r; i < end; ++i) batch.add(j.token_at(i + e), static_cast<std::int32_t>(i), j.seq, false);
    hout.resize(batch.size() * H);
    model_.mtp_forward(e, batch, hin.data(), kv_, hout.data(), nullptr, draft_vocab_);
    rows += batch.size();
    if (e < st.max_depth_) st.pending_[e].insert(st.pending_[e].end(), hout.begin(), hout.end());
    auto& in = st.pending_[e - 1];
    in.erase(in.begin(), in.begin() + static_cast<std::ptrdiff_t>((end - r) * H));
    st.next_row_[e - 1] = end;
  }
  return rows;
}

std::size_t MtpDrafter::draft(std::span<DraftJob* const> jobs) {
  const std::size_t H = model_.config().hidden_size;
  const std::size_t V = draft_vocab_ > 0 ? std::min(draft_vocab_, model_.config().vocab_size) : model_.config().vocab_size;
  struct Work {
    DraftJob* job = nullptr;
    bool active = false;
    std::size_t ran = 0;                    // depths run this round
    std::vector<std::vector<float>> outs;   // [d]: depth d outputs this round, rows out_first[d]..C-2
    std::vector<std::size_t> out_first;
    std::size_t logit_row = 0;
  };
  std::vector<Work> work;
  work.reserve(jobs.size());
  std::size_t max_k = 0, mtp_rows = 0;
  for (DraftJob* j : jobs) {
    j->drafts.clear();
    j->dists.clear();
    j->masks.clear();
    j->n_forced = 0;
    j->ended = false;
    Work w;
    w.job = j;
    const std::size_t C = j->n_committed;
    const std::size_t K = std::min(j->max_drafts, j->state ? j->state->max_depth_ : 0);
    if (j->constraint) {
      j->masks.emplace_back(j->mask_words, 0u);
      j->constraint->fill_bitmask(j->masks.back());
    }
    w.active = K > 0 && C >= 2 && j->state->main_hidden_end() == C - 1 &&
               !(j->constraint && (j->constraint->is_terminated() || !j->constraint->supports_rollback()));
    j->max_drafts = w.active ? K : 0;
    w.outs.resize(K + 1);
    w.out_first.resize(K + 1, 0);
    max_k = std::max(max_k, j->max_drafts);
    work.push_back(std::move(w));
  }

  Batch batch;
  std::vector<float> hin, hout, logits;
  std::vector<Work*> needers, in_batch;
  std::vector<std::vector<std::int32_t>> cands;  // per logit row: the allowed draft ids, or empty (all)
  // Above this many allowed ids the whole draft head (one streaming GEMM) is cheaper than dot products.
  constexpr std::size_t kMaxCandidates = 512;
  for (std::size_t round = 1; round <= max_k; ++round) {
    needers.clear();
    for (auto& w : work) {
      DraftJob& j = *w.job;
      if (!w.active || round > j.max_drafts) {
        w.active = false;
        continue;
      }
      TokenId forced = -1;
      if (j.constraint && popcount(j.masks.back(), &forced) == 1) {
        j.drafts.push_back(forced);
        j.dists.push_back(TokenDistribution{{forced}, {1.0}});
        ++j.n_forced;
        continue;
      }
      // Text the grammar forces (a key, punctuation) whose canonical tokenization has more than one
      // token: its first token is a draft without the MTP module (a token inside forced text cannot
      // merge with free text after it). Proposed as a point mass, which keeps rejection sampling exact.
      if (j.constraint) {
        const std::vector<TokenId> text = j.constraint->forced_text_tokens();
        if (text.size() >= 2 && bitmask_allows(j.masks.back(), text[0])) {
          j.drafts.push_back(text[0]);
          j.dists.push_back(TokenDistribution{{text[0]}, {1.0}});
          ++j.n_forced;
          continue;
        }
      }
      needers.push_back(&w);
    }
    // Depth passes the needers lack, shallowest first, each batched over the sequences.
    for (std::size_t e = 1; e <= round && !needers.empty(); ++e) {
      batch.clear();
      hin.clear();
      in_batch.clear();
      for (Work* w : needers) {
        if (w->ran >= e) continue;
        DraftJob& j = *w->job;
        MtpState& st = *j.state;
        const std::size_t C = j.n_committed, r = st.next_row_[e - 1];
        const std::size_t np = st.pending_rows(e - 1);
        for (std::size_t i = r; i + 2 <= C; ++i) {
          const std::size_t ti = i + e;
          const TokenId tok = ti < C ? j.token_at(ti) : j.drafts[ti - C];
          const bool want = e == round && i + 2 == C;
          if (want) w->logit_row = batch.n_logits();
          batch.add(tok, static_cast<std::int32_t>(i), j.seq, want);
          const float* src;
          if (i < r + np) src = st.pending_[e - 1].data() + (i - r) * H;
          else src = w->outs[e - 1].data() + (i - w->out_first[e - 1]) * H;
          hin.insert(hin.end(), src, src + H);
        }
        in_batch.push_back(w);
      }
      if (batch.size() == 0) continue;
      hout.resize(batch.size() * H);
      logits.resize(batch.n_logits() * V);
      // Grammar-aware draft logits: where the position's bitmask allows few tokens of the draft
      // vocabulary, only those rows of the LM head are read.
      cands.assign(batch.n_logits(), {});
      if (e == round)
        for (Work* w : in_batch) {
          const DraftJob& j = *w->job;
          if (!j.constraint || j.masks.empty()) continue;
          auto& c = cands[w->logit_row];
          const auto& m = j.masks.back();
          for (std::size_t word = 0; word < m.size() && word * 32 < V && c.size() <= kMaxCandidates; ++word)
            for (std::uint32_t bits = m[word]; bits != 0; bits &= bits - 1) {
              const std::size_t id = word * 32 + static_cast<std::size_t>(std::countr_zero(bits));
              if (id < V) c.push_back(static_cast<std::int32_t>(id));
            }
          if (c.size() > kMaxCandidates) c.clear();
        }
      model_.mtp_forward(e, batch, hin.data(), kv_, hout.data(), logits.data(), V, cands);
      mtp_rows += batch.size();
      // Keep the outputs; commit the rows that read committed tokens only.
      std::size_t at = 0;
      for (Work* w : in_batch) {
        DraftJob& j = *w->job;
        MtpState& st = *j.state;
        const std::size_t C = j.n_committed, r = st.next_row_[e - 1], n = C - 1 - r;
        w->outs[e].assign(hout.begin() + static_cast<std::ptrdiff_t>(at * H),
                          hout.begin() + static_cast<std::ptrdiff_t>((at + n) * H));
        w->out_first[e] = r;
        at += n;
        // Rows r..C-1-e read committed tokens only (none on a short sequence): final.
        const std::size_t n_commit = C > e + r ? C - e - r : 0;
        if (e < st.max_depth_)  // g_e of those rows feeds depth e + 1 in later rounds
          st.pending_[e].insert(st.pending_[e].end(), w->outs[e].begin(),
                                w->outs[e].begin() + static_cast<std::ptrdiff_t>(n_commit * H));
        const std::size_t new_r = r + n_commit;  // first row of depth e that read a draft
        auto& in = st.pending_[e - 1];
        const std::size_t drop = std::min(new_r - r, in.size() / H);
        in.erase(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(drop * H));
        st.next_row_[e - 1] = new_r;
        w->ran = e;
      }
    }
    for (Work* w : needers) {
      DraftJob& j = *w->job;
      std::span<const std::uint32_t> mask;
      if (j.constraint) mask = j.masks.back();
      TokenDistribution q;
      j.sampler->distribution(std::span<const float>(logits.data() + w->logit_row * V, V), mask, q);
      const TokenId x = j.sampler->sample_from(q);
      if (x < 0) {
        w->active = false;
        continue;
      }
      j.drafts.push_back(x);
      j.dists.push_back(std::move(q));
    }
    // Advance the constraint through this round's drafts; stop where the sequence would end.
    for (auto& w : work) {
      DraftJob& j = *w.job;
      if (!w.active || j.drafts.size() != round) continue;
      const TokenId x = j.drafts.back();
      if (j.constraint) {
        j.constraint->accept(x);
        j.masks.emplace_back(j.mask_words, 0u);
        j.constraint->fill_bitmask(j.masks.back());
      }
      if ((j.ends_sequence && j.ends_sequence(x)) || (j.constraint && j.constraint->is_terminated())) {
        j.ended = true;
        w.active = false;
      } else if (j.constraint && popcount(j.masks.back(), nullptr) == 0) {
        w.active = false;
      }
    }
  }
  return mtp_rows;
}

}  // namespace quarry::engine
