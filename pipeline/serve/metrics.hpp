// The figures of `quarry serve` in the Prometheus text exposition format (version 0.0.4), under vLLM's
// metric names with the `quarry:` prefix where vLLM has one (vllm:time_to_first_token_seconds ->
// quarry:time_to_first_token_seconds), each sample labelled model_name="..." as vLLM labels them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace quarry::serve {

/// A cumulative histogram (Prometheus semantics: bucket i counts observations <= bounds[i]; +Inf is count).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  const std::vector<double>& bounds() const { return bounds_; }
  /// Observations <= bounds()[i] (cumulative), for i < bounds().size().
  std::vector<std::uint64_t> cumulative() const;
  std::uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;  ///< per bucket, not cumulative
  std::uint64_t count_ = 0;
  double sum_ = 0.0;
};

/// The engine's state as last seen by the engine thread (gauges and totals).
struct EngineSnapshot {
  std::size_t running = 0;            ///< sequences in the running set
  std::size_t waiting = 0;            ///< requests queued (in the server and in the engine)
  std::size_t kv_used_blocks = 0, kv_cached_blocks = 0, kv_max_blocks = 0;
  std::size_t prefix_hit_tokens = 0;  ///< prompt tokens served by the prefix cache (total)
  std::size_t draft_tokens = 0, accepted_tokens = 0;  ///< MTP drafts proposed / accepted (total)
  std::size_t prefill_tokens = 0, decode_tokens = 0;  ///< computed by forward calls (total)
};

/// Every figure /metrics reports; thread-safe (one mutex).
class Metrics {
 public:
  explicit Metrics(std::string model_name);

  /// A request answered with an HTTP status (200 for a completed generation, errors otherwise).
  void count_response(int status);
  /// A finished generation: finish reason ("stop", "length", "abort"), its prompt / generated tokens,
  /// prefix-cache hits, seconds queued (arrival -> engine admission) and end to end.
  void finished(const std::string& finish_reason, std::size_t prompt_tokens, std::size_t generation_tokens,
                std::size_t cached_tokens, double queue_s, double e2e_s);
  void first_token(double ttft_s);
  void inter_token(double seconds);
  void set_engine(const EngineSnapshot& s);

  /// The exposition text (Content-Type: text/plain; version=0.0.4).
  std::string render() const;

 private:
  mutable std::mutex mu_;
  std::string model_;
  std::map<int, std::uint64_t> responses_;               ///< HTTP status -> responses
  std::map<std::string, std::uint64_t> finished_;        ///< finish reason -> requests
  std::uint64_t prompt_tokens_ = 0, generation_tokens_ = 0, prefix_queries_ = 0, prefix_hits_ = 0;
  Histogram ttft_, itl_, e2e_, queue_, prompt_len_, gen_len_;
  EngineSnapshot engine_;
};

}  // namespace quarry::serve
