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

/// The distribution's order: the larger (scaled) logit first, ties by the smaller id (a function object,
/// so that the sorts inline it).
constexpr auto before = [](const std::pair<float, TokenId>& a, const std::pair<float, TokenId>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
};

/// Makes c[0, m) the first m candidates of c in the distribution's order, sorted, given that c[0, sorted)
/// already are (and come before every later one): a selection over the rest (std::nth_element), then a
/// sort of the new part only. A top-p or min-p cut keeps a short prefix of a 150K-token vocabulary, so
/// the whole vocabulary is not sorted.
void extend_sorted(std::vector<std::pair<float, TokenId>>& c, std::size_t& sorted, std::size_t m) {
  m = std::min(m, c.size());
  if (m <= sorted) return;
  if (m < c.size()) std::nth_element(c.begin() + static_cast<std::ptrdiff_t>(sorted), c.begin() + static_cast<std::ptrdiff_t>(m), c.end(), before);
  std::sort(c.begin() + static_cast<std::ptrdiff_t>(sorted), c.begin() + static_cast<std::ptrdiff_t>(m), before);
  sorted = m;
}
}  // namespace

Sampler::Sampler(const SamplingParams& p) : params_(p), rng_(seed_of(p)) {
  check_sampling(p.temperature, p.top_p, p.min_p, "sampling");
}

TokenId Sampler::sample(std::span<const float> logits, std::span<const std::uint32_t> bitmask) {
  if (params_.temperature == 0.f) {
    distribution(logits, bitmask, dist_);
    return dist_.empty() ? -1 : dist_.ids[0];
  }
  if (params_.top_k == 0 && params_.top_p >= 1.f && params_.min_p <= 0.f) return sample_whole(logits, bitmask);
  distribution(logits, bitmask, dist_);
  return sample_from(dist_);
}

float Sampler::collect(std::span<const float> logits, std::span<const std::uint32_t> bitmask) {
  cand_.clear();
  const float inv_t = 1.f / params_.temperature;
  float mx = -std::numeric_limits<float>::infinity();
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const auto t = static_cast<TokenId>(i);
    if (bitmask_allows(bitmask, t) && !std::isnan(logits[i])) {
      cand_.emplace_back(logits[i] * inv_t, t);
      mx = std::max(mx, cand_.back().first);
    }
  }
  return mx;
}

TokenId Sampler::sample_whole(std::span<const float> logits, std::span<const std::uint32_t> bitmask) {
  const float mx = collect(logits, bitmask);
  if (cand_.empty()) return -1;
  if (cand_.size() == 1) {
    rng_.uniform();  // one draw per sample, as sample_from
    return cand_[0].second;
  }
  // The candidates with their unnormalised probabilities exp(l - max).
  weighted_.resize(cand_.size());
  double total = 0.0;
  for (std::size_t i = 0; i < cand_.size(); ++i) {
    weighted_[i].c = cand_[i];
    total += weighted_[i].e = std::exp(static_cast<double>(cand_[i].first) - mx);
  }
  // The token where the cumulative probability in the distribution's order passes r: quickselect by
  // mass (partition around a pivot, keep the side holding r), then a walk over a short sorted rest.
  auto ord = [](const Weighted& a, const Weighted& b) { return before(a.c, b.c); };
  double r = rng_.uniform() * total;
  std::size_t lo = 0, hi = weighted_.size();
  const auto at = [&](std::size_t i) { return weighted_.begin() + static_cast<std::ptrdiff_t>(i); };
  for (int round = 0; hi - lo > 64 && round < 64; ++round) {
    Weighted a = weighted_[lo], b = weighted_[lo + (hi - lo) / 2], c = weighted_[hi - 1];  // median of three
    if (ord(b, a)) std::swap(a, b);
    if (ord(c, b)) std::swap(b, c);
    if (ord(b, a)) std::swap(a, b);
    const Weighted pivot = b;
    const std::size_t mid = static_cast<std::size_t>(
        std::partition(at(lo), at(hi), [&](const Weighted& x) { return ord(x, pivot); }) - weighted_.begin());
    double upper = 0.0;
    for (std::size_t i = lo; i < mid; ++i) upper += weighted_[i].e;
    if (r < upper) {
      hi = mid;
      continue;
    }
    r -= upper;
    std::iter_swap(at(mid), std::find_if(at(mid), at(hi), [&](const Weighted& x) { return x.c.second == pivot.c.second; }));
    if (r < weighted_[mid].e) return weighted_[mid].c.second;
    r -= weighted_[mid].e;
    lo = mid + 1;
  }
  std::sort(at(lo), at(hi), ord);
  for (std::size_t i = lo; i < hi; ++i) {
    r -= weighted_[i].e;
    if (r < 0.0) return weighted_[i].c.second;
  }
  return weighted_[hi - 1].c.second;  // rounding left r at or above the mass walked: the last one
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
  const float mx = collect(logits, bitmask);  // top-k below keeps the largest: the max stays
  if (cand_.empty()) return;
  // cand_[0, sorted) is always the start of the candidates in descending logit, ties by id.
  std::size_t sorted = 0;
  if (params_.top_k > 0 && params_.top_k < cand_.size()) {  // a heap of k: few of 150K candidates enter it
    std::partial_sort(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(params_.top_k), cand_.end(), before);
    sorted = params_.top_k;
    cand_.resize(sorted);
  }
  std::size_t keep = cand_.size();
  // Softmax over the kept candidates (in double for a stable cumulative sum).
  double sum = 0.0;
  for (const auto& c : cand_) sum += std::exp(static_cast<double>(c.first) - mx);
  const auto prob = [&](std::size_t i) { return std::exp(static_cast<double>(cand_[i].first) - mx) / sum; };
  if (params_.top_p < 1.f) {  // the shortest prefix reaching top_p, sorted 64, 256, ... at a time
    double cum = 0.0;
    std::size_t n = 0;
    bool reached = false;
    for (std::size_t want = 64; !reached && n < keep; want *= 4) {
      extend_sorted(cand_, sorted, want);
      while (n < sorted) {
        cum += prob(n++);
        if (cum >= params_.top_p) {
          reached = true;
          break;
        }
      }
    }
    keep = std::max<std::size_t>(n, 1);
  }
  if (params_.min_p > 0.f) {  // p >= min_p * p_max: a prefix, as p falls along the order
    const double floor = params_.min_p * (1.0 / sum);
    std::size_t n = 1;
    if (keep <= sorted) {
      while (n < keep && prob(n) >= floor) ++n;
    } else {
      n = 0;
      const double cut = std::log(static_cast<double>(params_.min_p)) - 1e-3;  // below: p < floor for certain
      for (std::size_t i = 0; i < cand_.size(); ++i)
        n += static_cast<double>(cand_[i].first) - mx >= cut && prob(i) >= floor ? 1 : 0;
      n = std::clamp<std::size_t>(n, 1, keep);
    }
    keep = n;
  }
  extend_sorted(cand_, sorted, keep);
  std::vector<double>& p = out.probs;
  p.resize(keep);
  double total = 0.0;
  for (std::size_t i = 0; i < keep; ++i) total += p[i] = prob(i);
  out.ids.resize(keep);
  for (std::size_t i = 0; i < keep; ++i) {
    out.ids[i] = cand_[i].second;
    p[i] /= total;
  }
}

}  // namespace quarry::engine
