#include "pipeline/serve/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

namespace quarry::serve {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), value);  // first bound >= value
  ++counts_[static_cast<std::size_t>(it - bounds_.begin())];
  ++count_;
  sum_ += value;
}

std::vector<std::uint64_t> Histogram::cumulative() const {
  std::vector<std::uint64_t> out(bounds_.size());
  std::uint64_t c = 0;
  for (std::size_t i = 0; i < bounds_.size(); ++i) out[i] = c += counts_[i];
  return out;
}

namespace {

// vLLM's buckets (vllm/v1/metrics/loggers.py), with finer ones below 10 ms for small models on CPUs.
std::vector<double> ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
          80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> itl_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
          10.0, 20.0, 40.0, 80.0};
}
std::vector<double> latency_buckets() {
  return {0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
          240.0, 480.0, 960.0, 1920.0, 7680.0};
}
std::vector<double> token_buckets() {
  return {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000};
}

std::string num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  // The shortest text that reads back as the same double (0.1, not 0.10000000000000001).
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

/// A label value with \, " and newline escaped as the format requires.
std::string label_value(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

}  // namespace

Metrics::Metrics(std::string model_name)
    : model_(std::move(model_name)), ttft_(ttft_buckets()), itl_(itl_buckets()), e2e_(latency_buckets()),
      queue_(latency_buckets()), prompt_len_(token_buckets()), gen_len_(token_buckets()) {}

void Metrics::count_response(int status) {
  std::lock_guard lock(mu_);
  ++responses_[status];
}

void Metrics::finished(const std::string& finish_reason, std::size_t prompt_tokens, std::size_t generation_tokens,
                       std::size_t cached_tokens, double queue_s, double e2e_s) {
  std::lock_guard lock(mu_);
  ++finished_[finish_reason];
  prompt_tokens_ += prompt_tokens;
  generation_tokens_ += generation_tokens;
  prefix_queries_ += prompt_tokens;
  prefix_hits_ += cached_tokens;
  queue_.observe(queue_s);
  e2e_.observe(e2e_s);
  prompt_len_.observe(static_cast<double>(prompt_tokens));
  gen_len_.observe(static_cast<double>(generation_tokens));
}

void Metrics::first_token(double ttft_s) {
  std::lock_guard lock(mu_);
  ttft_.observe(ttft_s);
}

void Metrics::inter_token(double seconds) {
  std::lock_guard lock(mu_);
  itl_.observe(seconds);
}

void Metrics::set_engine(const EngineSnapshot& s) {
  std::lock_guard lock(mu_);
  engine_ = s;
}

std::string Metrics::render() const {
  std::lock_guard lock(mu_);
  const std::string model = "model_name=\"" + label_value(model_) + "\"";
  std::string out;
  auto head = [&](const std::string& name, const char* type, const char* help) {
    out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  auto sample = [&](const std::string& name, const std::string& labels, double v) {
    out += name + "{" + labels + "} " + num(v) + "\n";
  };
  auto gauge = [&](const char* name, const char* help, double v) {
    head(name, "gauge", help);
    sample(name, model, v);
  };
  auto counter = [&](const char* name, const char* help, double v) {
    head(name, "counter", help);
    sample(name, model, v);
  };
  auto histogram = [&](const std::string& name, const char* help, const Histogram& h) {
    head(name, "histogram", help);
    const auto cum = h.cumulative();
    for (std::size_t i = 0; i < cum.size(); ++i)
      sample(name + "_bucket", model + ",le=\"" + num(h.bounds()[i]) + "\"", static_cast<double>(cum[i]));
    sample(name + "_bucket", model + ",le=\"+Inf\"", static_cast<double>(h.count()));
    sample(name + "_sum", model, h.sum());
    sample(name + "_count", model, static_cast<double>(h.count()));
  };

  gauge("quarry:num_requests_running", "Requests in the engine's running set (one continuous batch).",
        static_cast<double>(engine_.running));
  gauge("quarry:num_requests_waiting", "Requests waiting to be admitted into the running set.",
        static_cast<double>(engine_.waiting));
  gauge("quarry:kv_cache_usage_perc", "Fraction of KV-cache blocks used by running requests (1 = full).",
        engine_.kv_max_blocks ? static_cast<double>(engine_.kv_used_blocks) / static_cast<double>(engine_.kv_max_blocks)
                              : 0.0);
  gauge("quarry:kv_cache_cached_blocks", "KV-cache blocks holding a prefix-cache entry.",
        static_cast<double>(engine_.kv_cached_blocks));
  counter("quarry:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
          static_cast<double>(prefix_queries_));
  counter("quarry:prefix_cache_hits_total", "Prompt tokens served by the prefix cache.", static_cast<double>(prefix_hits_));
  gauge("quarry:prefix_cache_hit_rate", "Prefix-cache hits / queries over the server's life (tokens).",
        prefix_queries_ ? static_cast<double>(prefix_hits_) / static_cast<double>(prefix_queries_) : 0.0);
  counter("quarry:prompt_tokens_total", "Prompt tokens of finished requests.", static_cast<double>(prompt_tokens_));
  counter("quarry:generation_tokens_total", "Generated tokens of finished requests.",
          static_cast<double>(generation_tokens_));
  counter("quarry:spec_decode_num_draft_tokens_total", "MTP draft tokens proposed.",
          static_cast<double>(engine_.draft_tokens));
  counter("quarry:spec_decode_num_accepted_tokens_total", "MTP draft tokens accepted by verification.",
          static_cast<double>(engine_.accepted_tokens));
  gauge("quarry:spec_decode_draft_acceptance_rate", "Accepted / proposed MTP drafts over the server's life.",
        engine_.draft_tokens ? static_cast<double>(engine_.accepted_tokens) / static_cast<double>(engine_.draft_tokens)
                             : 0.0);

  head("quarry:request_success_total", "counter", "Finished generations by finish reason.");
  for (const char* reason : {"stop", "length", "abort"}) {
    const auto it = finished_.find(reason);
    sample("quarry:request_success_total", model + ",finished_reason=\"" + reason + "\"",
           static_cast<double>(it == finished_.end() ? 0 : it->second));
  }
  head("quarry:http_responses_total", "counter", "HTTP responses of the API endpoints by status code.");
  std::set<int> codes = {200, 400, 401, 404, 413, 429, 500, 503};
  for (const auto& [code, n] : responses_) codes.insert(code);
  for (int code : codes) {
    const auto it = responses_.find(code);
    sample("quarry:http_responses_total", model + ",code=\"" + std::to_string(code) + "\"",
           static_cast<double>(it == responses_.end() ? 0 : it->second));
  }
  histogram("quarry:time_to_first_token_seconds", "Time to the first generated token, from the request's arrival.", ttft_);
  histogram("quarry:inter_token_latency_seconds", "Time between two generated tokens of a request.", itl_);
  histogram("quarry:e2e_request_latency_seconds", "Request latency from arrival to the last token.", e2e_);
  histogram("quarry:request_queue_time_seconds", "Time a request waited before the engine admitted it.", queue_);
  histogram("quarry:request_prompt_tokens", "Prompt tokens per finished request.", prompt_len_);
  histogram("quarry:request_generation_tokens", "Generated tokens per finished request.", gen_len_);
  return out;
}

}  // namespace quarry::serve
