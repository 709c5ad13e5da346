#include "pipeline/run/engine_worker.hpp"

#include <ctime>
#include <stdexcept>

#include "engine/grammar/grounding.hpp"
#include "pipeline/openai/openai_api.hpp"
#include "pipeline/run/chunked.hpp"

namespace quarry::run {

using nlohmann::json;
namespace eng = quarry::engine;


EngineWorker::EngineWorker(const JobSpec& job, std::shared_ptr<const eng::Tokenizer> tokenizer,
                           const std::string& schema_text, const std::function<void(const std::string&)>& log)
    : job_(job), tokenizer_(std::move(tokenizer)), schema_text_(schema_text) {
  eng::EngineOptions opt;
  opt.n_threads = job.engine.threads;
  opt.max_num_seqs = job.engine.max_inflight;
  opt.kv_cache_mb = job.engine.kv_cache_mb;
  opt.mtp_depth = job.engine.mtp_depth;
  opt.compute = eng::parse_compute(job.engine.compute);
  opt.device = eng::parse_device(job.engine.device);
  opt.tensor_parallel = job.engine.tensor_parallel;
  opt.state_snapshot_tokens = job.engine.state_snapshot_tokens;
  opt.max_state_snapshots = job.engine.max_state_snapshots;
  opt.grounding = job.engine.grounding;
  if (log) opt.log = [log](std::string_view m) { log(std::string(m)); };
  engine_ = eng::Engine::open(job.model, tokenizer_, opt);
  // Lenient: keywords the grammar cannot enforce (e.g. uniqueItems) are left to the validator,
  // which checks every output against the full schema afterwards.
  try {
    const auto notes = engine_->json_schema_notes(schema_text_, /*lenient=*/true);
    if (log)
      for (const auto& w : notes.warnings) log(job.schema.string() + ": not enforced while decoding (checked after): " + w);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(job.schema.string() + ": " + e.what());
  }
}

EngineWorker::~EngineWorker() = default;

std::size_t EngineWorker::context_tokens() const { return engine_->model().config().max_position_embeddings; }


json EngineWorker::stats_json(const eng::RequestStats& s) {
  json j = {{"prompt_tokens", s.prompt_tokens},
            {"prefill_tokens", s.prefill_tokens},
            {"cached_tokens", s.cached_tokens},
            {"decode_tokens", s.generated_tokens},
            {"forced_tokens", s.forced_tokens},
            {"ttft_ms", s.ttft_s * 1e3},
            {"decode_tok_s", s.decode_tok_s()}};
  if (s.verify_steps > 0) {  // speculative decoding ran
    j["draft_tokens"] = s.draft_tokens;
    j["accepted_tokens"] = s.accepted_tokens;
    j["verify_steps"] = s.verify_steps;
    j["mean_acceptance_length"] = s.mean_acceptance_length();
  }
  return j;
}

eng::GenerationRequest EngineWorker::make_request(const ModelTaskMsg& task) {
  eng::GenerationRequest r;
  r.prompt = task.prompt;
  r.max_tokens = task.max_tokens;
  const std::size_t attempt = task.attempt;
  if (const auto& b = task.batch) {
    // A batch request's own sampling, stop strings and response_format; a retry (its output failed the
    // schema) resamples at the job's retry temperature with the next seed.
    r.sampling.temperature = attempt == 0 ? b->temperature : job_.engine.retry_temperature;
    r.sampling.top_p = b->top_p;
    r.sampling.top_k = b->top_k;
    r.sampling.min_p = b->min_p;
    r.sampling.seed = b->seed.value_or(job_.engine.seed) + attempt;
    r.stop = b->stop;
    // Compiled grammars are cached per schema text by the engine: requests sharing a schema share it.
    if (!b->schema_text.empty()) r.constraint = engine_->json_schema_constraint(b->schema_text, true);
    return r;
  }
  return job_request(task.prompt, task.max_tokens, attempt, task.document_text);
}

eng::GenerationRequest EngineWorker::job_request(std::vector<std::int32_t> prompt, std::size_t max_tokens,
                                                 std::size_t attempt, const std::string& text) {
  eng::GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = attempt == 0 ? job_.engine.temperature : job_.engine.retry_temperature;
  r.sampling.seed = job_.engine.seed + attempt;
  // Grounded decoding over the document's (or the window's) pages (EngineOptions::grounding decides).
  if (job_.engine.grounding && !text.empty())
    r.constraint = engine_->json_schema_constraint(schema_text_, true, eng::grammar::split_pages(text));
  else
    r.constraint = engine_->json_schema_constraint(schema_text_, true);
  return r;
}

namespace {

GeneratedMsg generated(ModelTaskMsg task, const eng::GenerationResult* r, const std::string& error) {
  GeneratedMsg g;
  if (r) {
    g.text = r->text;
    g.finish = eng::finish_reason_name(r->finish);
    g.stats = EngineWorker::stats_json(r->stats);
  } else {
    g.finish = "error";
    g.stats = EngineWorker::stats_json(eng::RequestStats{});
    g.stats["prompt_tokens"] = task.prompt.size();
  }
  g.error = error;
  if (r && task.batch && error.empty()) {
    openai::Request req;  // what response_body reads of the request: the endpoint and the model's name
    req.endpoint = task.batch->url == openai::endpoint_url(openai::Endpoint::completions) ? openai::Endpoint::completions
                                                                                           : openai::Endpoint::chat_completions;
    req.model = task.batch->model;
    g.response = openai::response_body(
        req, openai::make_id(req.endpoint == openai::Endpoint::completions ? "cmpl-" : "chatcmpl-"),
        static_cast<std::int64_t>(std::time(nullptr)), *r);
  }
  g.task = std::move(task);
  return g;
}

}  // namespace

void EngineWorker::submit_chunked(ModelTaskMsg task) {
  const std::uint64_t serial = next_serial_++;
  Chunked c;
  c.outputs.resize(task.chunks.size());
  c.left = task.chunks.size();
  for (std::size_t w = 0; w < task.chunks.size(); ++w) {
    const auto& part = task.chunks[w];
    try {
      const auto id = engine_->submit(job_request(part.prompt, task.max_tokens, task.attempt, part.text));
      window_of_.emplace(id, std::make_pair(serial, w));
    } catch (const std::exception& e) {
      auto& o = c.outputs[w];
      o.finish = "error";
      o.stats = stats_json(eng::RequestStats{});
      o.stats["prompt_tokens"] = part.prompt.size();
      o.error = e.what();
      --c.left;
    }
  }
  c.task = std::move(task);
  if (c.left == 0) refused_.push_back(finish_chunked(std::move(c)));
  else chunked_.emplace(serial, std::move(c));
}

GeneratedMsg EngineWorker::finish_chunked(Chunked c) {
  GeneratedMsg g;
  std::vector<nlohmann::ordered_json> stats;
  bool cut = false;
  for (const auto& o : c.outputs) {
    stats.push_back(o.stats);
    if (g.error.empty() && !o.error.empty()) g.error = o.error;
    cut = cut || o.finish == "length";
  }
  g.finish = !g.error.empty() ? "error" : cut ? "length" : "stop";
  g.stats = chunked_stats(stats);
  g.chunk_outputs = std::move(c.outputs);
  g.task = std::move(c.task);
  return g;
}

void EngineWorker::submit(ModelTaskMsg task) {
  if (!task.chunks.empty() && !task.batch) {
    submit_chunked(std::move(task));
    return;
  }
  try {
    const auto id = engine_->submit(make_request(task));
    running_.emplace(id, std::move(task));
  } catch (const std::invalid_argument& e) {
    // The request itself is refused (a batch request's schema the grammar compiler rejects).
    refused_.push_back(generated(std::move(task), nullptr, e.what()));
    refused_.back().bad_request = refused_.back().task.batch.has_value();
  } catch (const std::exception& e) {
    refused_.push_back(generated(std::move(task), nullptr, e.what()));
  }
}

std::size_t EngineWorker::in_flight() const { return running_.size() + chunked_.size() + refused_.size(); }

std::size_t EngineWorker::cancel_all() {
  const std::size_t n = in_flight();
  for (const auto& [id, _] : running_) engine_->cancel(id);
  for (const auto& [id, _] : window_of_) engine_->cancel(id);
  while (engine_->has_unfinished()) (void)engine_->step();
  running_.clear();
  chunked_.clear();
  window_of_.clear();
  refused_.clear();
  return n;
}

std::vector<GeneratedMsg> EngineWorker::step() {
  std::vector<GeneratedMsg> out;
  out.swap(refused_);
  if (!engine_->has_unfinished()) return out;
  for (auto& f : engine_->step()) {
    if (auto w = window_of_.find(f.id); w != window_of_.end()) {
      const auto [serial, index] = w->second;
      window_of_.erase(w);
      auto c = chunked_.find(serial);
      if (c == chunked_.end()) continue;
      auto& o = c->second.outputs[index];
      o.text = f.result.text;
      o.finish = f.error.empty() ? eng::finish_reason_name(f.result.finish) : "error";
      o.stats = stats_json(f.result.stats);
      o.error = f.error;
      if (--c->second.left == 0) {
        out.push_back(finish_chunked(std::move(c->second)));
        chunked_.erase(c);
      }
      continue;
    }
    auto it = running_.find(f.id);
    if (it == running_.end()) continue;
    out.push_back(generated(std::move(it->second), &f.result, f.error));
    running_.erase(it);
  }
  return out;
}

}  // namespace quarry::run
