#include "pipeline/run/engine_worker.hpp"

#include <stdexcept>

namespace quarry::run {

using nlohmann::json;
namespace eng = quarry::engine;

EngineWorker::EngineWorker(const JobSpec& job, std::shared_ptr<const eng::Tokenizer> tokenizer,
                           const std::string& schema_text, const std::function<void(const std::string&)>& log)
    : job_(job), tokenizer_(std::move(tokenizer)), schema_text_(schema_text) {
  eng::EngineOptions opt;
  opt.n_threads = job.engine.threads;
  if (log) opt.log = [log](std::string_view m) { log(std::string(m)); };
  engine_ = eng::Engine::open(job.model, tokenizer_, opt);
  try {
    (void)engine_->json_schema_constraint(schema_text_);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(job.schema.string() + ": " + e.what());
  }
}

EngineWorker::~EngineWorker() = default;

std::size_t EngineWorker::context_tokens() const { return engine_->model().config().max_position_embeddings; }

json EngineWorker::stats_json(const eng::RequestStats& s) {
  json j = {{"prompt_tokens", s.prompt_tokens},
            // No prefix cache in this engine yet: every prompt token is computed.
            {"prefill_tokens", s.prompt_tokens},
            {"cached_tokens", 0},
            {"decode_tokens", s.generated_tokens},
            {"forced_tokens", s.forced_tokens},
            {"ttft_ms", s.ttft_s * 1e3},
            {"decode_tok_s", s.decode_tok_s()}};
  return j;
}

eng::GenerationRequest EngineWorker::make_request(const json& task) {
  eng::GenerationRequest r;
  r.prompt = task["prompt"].get<std::vector<eng::TokenId>>();
  r.max_tokens = task["max_tokens"].get<std::size_t>();
  const std::size_t attempt = task.value("attempt", std::size_t{0});
  r.sampling.temperature = attempt == 0 ? job_.engine.temperature : job_.engine.retry_temperature;
  r.sampling.seed = job_.engine.seed + attempt;
  r.constraint = engine_->json_schema_constraint(schema_text_);
  return r;
}

void EngineWorker::submit(json task) { queued_.push_back(std::move(task)); }

std::size_t EngineWorker::in_flight() const { return queued_.size(); }

std::size_t EngineWorker::cancel_all() {
  const std::size_t n = queued_.size();
  queued_.clear();
  return n;
}

std::vector<json> EngineWorker::step() {
  std::vector<json> out;
  if (queued_.empty()) return out;
  std::vector<json> batch;
  batch.swap(queued_);
  const auto finish = [&](json& t, const eng::GenerationResult* r, const std::string& error) {
    t["kind"] = "generated";
    if (r) {
      t["text"] = r->text;
      t["finish"] = eng::finish_reason_name(r->finish);
      t["stats"] = stats_json(r->stats);
    } else {
      t["text"] = "";
      t["finish"] = "error";
      t["stats"] = stats_json(eng::RequestStats{});
      t["stats"]["prompt_tokens"] = t["prompt"].size();
    }
    t["error"] = error;
    out.push_back(std::move(t));
  };
  std::vector<eng::GenerationRequest> reqs;
  try {
    for (const auto& t : batch) reqs.push_back(make_request(t));
    const auto results = engine_->generate(std::span<const eng::GenerationRequest>(reqs));
    for (std::size_t i = 0; i < batch.size(); ++i) finish(batch[i], &results[i], "");
  } catch (const std::exception&) {
    // One bad request fails the batch: run each alone so that only the bad one fails.
    out.clear();
    for (auto& t : batch) {
      try {
        const auto r = engine_->generate(make_request(t));
        finish(t, &r, "");
      } catch (const std::exception& e) {
        finish(t, nullptr, e.what());
      }
    }
  }
  return out;
}

}  // namespace quarry::run
