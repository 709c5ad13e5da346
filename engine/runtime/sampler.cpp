#include "engine/runtime/sampler.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>

namespace quarry::engine {

namespace {

std::uint64_t seed_of(const SamplingParams& p) {
  if (p.seed) return *p.seed;
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}
}  // namespace

Sampler::Sampler(const SamplingParams& p) : params_(p), rng_(seed_of(p)) {
  if (!(p.temperature >= 0.f)) throw std::invalid_argument("sampling: temperature must be >= 0");
  if (!(p.top_p > 0.f && p.top_p <= 1.f)) throw std::invalid_argument("sampling: top_p must be in (0, 1]");
  if (!(p.min_p >= 0.f && p.min_p <= 1.f)) throw std::invalid_argument("sampling: min_p must be in [0, 1]");
}

TokenId Sampler::sample(std::span<const float> logits, std::span<const std::uint32_t> bitmask) {
  if (params_.temperature == 0.f) {
    distribution(logits, bitmask, dist_);
    return dist_.empty() ? -1 : dist_.ids[0];
  }
  distribution(logits, bitmask, dist_);
  return sample_from(dist_);
}

TokenId Sampler::sample_from(const TokenDistribution& d) {
  if (d.empty()) return -1;
  if (d.ids.size() == 1) {
    if (params_.temperature > 0.f) rng_.uniform();  // one draw per sample, whatever the support
    return d.ids[0];
  }
  double total = 0.0;
  for (double p : d.probs) total += p;
  double r = rng_.uniform() * total;
  for (std::size_t i = 0; i < d.ids.size(); ++i) {
    r -= d.probs[i];
    if (r < 0.0) return d.ids[i];
  }
  return d.ids.back();
}

void Sampler::distribution(std::span<const float> logits, std::span<const std::uint32_t> bitmask,
                           TokenDistribution& out) {
  out.ids.clear();
  out.probs.clear();
  const std::size_t V = logits.size();
  if (params_.temperature == 0.f) {
    // The first largest allowed logit (torch.argmax order), visiting only the allowed ids: whole
    // 32-id words when the bitmask allows all of them, set bits otherwise.
    TokenId best = -1;
    float best_v = 0.f;
    auto visit = [&](std::size_t i) {
      if (best < 0 || logits[i] > best_v) {
        best = static_cast<TokenId>(i);
        best_v = logits[i];
      }
    };
    if (bitmask.empty()) {
      for (std::size_t i = 0; i < V; ++i) visit(i);
    } else {
      for (std::size_t w = 0; w < bitmask.size() && w * 32 < V; ++w) {
        std::uint32_t bits = bitmask[w];
        if (bits == 0xffffffffu && w * 32 + 32 <= V) {
          for (std::size_t i = w * 32; i < w * 32 + 32; ++i) visit(i);
          continue;
        }
        for (; bits != 0; bits &= bits - 1) {
          const std::size_t i = w * 32 + static_cast<std::size_t>(std::countr_zero(bits));
          if (i < V) visit(i);
        }
      }
    }
    if (best >= 0) {
      out.ids.push_back(best);
      out.probs.push_back(1.0);
    }
    return;
  }
  cand_.clear();
  const float inv_t = 1.f / params_.temperature;
  for (std::size_t i = 0; i < V; ++i) {
    const auto t = static_cast<TokenId>(i);
    if (bitmask_allows(bitmask, t) && !std::isnan(logits[i])) cand_.emplace_back(logits[i] * inv_t, t);
  }
  if (cand_.empty()) return;
  // Sort by logit descending, ties by token id (deterministic).
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  std::size_t keep = cand_.size();
  if (params_.top_k > 0 && params_.top_k < keep) {
    std::partial_sort(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(params_.top_k), cand_.end(), by_logit);
    keep = params_.top_k;
    cand_.resize(keep);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  // Softmax over the kept candidates (in double for a stable cumulative sum).
  std::vector<double>& prob = out.probs;
  prob.resize(keep);
  const double mx = cand_[0].first;
  double sum = 0.0;
  for (std::size_t i = 0; i < keep; ++i) sum += prob[i] = std::exp(static_cast<double>(cand_[i].first) - mx);
  for (auto& p : prob) p /= sum;
  if (params_.top_p < 1.f) {
    double cum = 0.0;
    std::size_t n = 0;
    while (n < keep) {
      cum += prob[n++];
      if (cum >= params_.top_p) break;
    }
    keep = std::max<std::size_t>(n, 1);
  }
  if (params_.min_p > 0.f) {
    const double floor = params_.min_p * prob[0];
    std::size_t n = 1;
    while (n < keep && prob[n] >= floor) ++n;
    keep = n;
  }
  prob.resize(keep);
  double total = 0.0;
  for (double p : prob) total += p;
  out.ids.resize(keep);
  for (std::size_t i = 0; i < keep; ++i) {
    out.ids[i] = cand_[i].second;
    prob[i] /= total;
  }
}

}  // namespace quarry::engine
