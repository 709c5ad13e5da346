// validate: JSON Schema + business rules (+ the evidence check for rag); the retry policy; the record.
// Batch requests: the output is checked against the request's own response_format schema (one
// Validator per schema text, cached); text responses are not validated.
#include <limits>
#include <memory>
#include <optional>
#include <unordered_map>

#include "engine/grammar/grounding.hpp"
#include "pipeline/openai/batch_format.hpp"
#include "pipeline/run/batch.hpp"
#include "pipeline/run/chunked.hpp"
#include "pipeline/run/stages.hpp"
#include "schemas/evidence.hpp"

namespace quarry::run::stages {

namespace {

using json = nlohmann::ordered_json;

TokenCounts tokens_of(const json& stats) {
  TokenCounts t;
  t.prompt = stats.value("prompt_tokens", std::uint64_t{0});
  t.prefill = stats.value("prefill_tokens", std::uint64_t{0});
  t.cached = stats.value("cached_tokens", std::uint64_t{0});
  t.decode = stats.value("decode_tokens", std::uint64_t{0});
  t.draft = stats.value("draft_tokens", std::uint64_t{0});
  t.accepted = stats.value("accepted_tokens", std::uint64_t{0});
  return t;
}

/// The engine's message names its own settings ("raise max_kv_tokens / kv_cache_mb"): say which
/// option of `quarry run` sets them.
std::string with_run_option_names(std::string message) {
  static const std::string engine_hint = "max_kv_tokens / kv_cache_mb";
  if (const auto at = message.find(engine_hint); at != std::string::npos)
    message.replace(at, engine_hint.size(), "--kv-cache-mb (engine.kv_cache_mb in a job file)");
  return message;
}

/// One compiled Validator per response_format schema text (build checked that it compiles).
class BatchValidators {
 public:
  const schemas::Validator& get(const std::string& schema_text) {
    if (auto it = cache_.find(schema_text); it != cache_.end()) return *it->second;
    if (cache_.size() >= 1024) cache_.clear();  // bounded: many distinct schemas compile again
    auto v = std::make_unique<schemas::Validator>(
        schemas::parse_schema_text(schema_text, "response_format.json_schema.schema"),
        "response_format.json_schema.schema");
    return *cache_.emplace(schema_text, std::move(v)).first->second;
  }

 private:
  std::unordered_map<std::string, std::unique_ptr<schemas::Validator>> cache_;
};

/// The output line of a batch request the engine failed (500; the record is retryable when the run's
/// settings caused it) or refused (400).
json failed_output(const BatchSpec& b, bool bad_request, const std::string& message) {
  const openai::ApiError e = bad_request ? openai::ApiError(400, "invalid_request_error", message, "response_format")
                                         : openai::ApiError(500, "server_error", message);
  return openai::batch_response_line(b.custom_id, e.status, openai::error_body(e));
}

/// The model's output parsed as JSON and checked against `validator` (errors appended); null when the
/// output is not complete JSON (then one "json" error says so).
json parse_and_validate(const GeneratedMsg& g, const schemas::Validator& validator, json& errors) {
  json data = json::parse(g.text, nullptr, false);
  if (data.is_discarded()) {
    errors.push_back(error_entry("", "json",
                                 "the model output is not complete JSON (finish: " + g.finish + ", " +
                                     std::to_string(g.text.size()) + " bytes)"));
    return nullptr;
  }
  for (const auto& v : validator.validate(to_plain(data))) errors.push_back(error_entry(v.pointer, v.keyword, v.message));
  return data;
}

/// A chunked task's record: each window's output parsed (one "json" error per window whose output is
/// not complete JSON) and its evidence found in the window's text and moved to the document's pages;
/// the windows merged (merge_window_records, refine_merge); the merged data checked against the schema and, for a
/// grounded schema, its evidence over the whole document (the window's entry kept where the merge took
/// the value from a window that has one).
void validate_chunked(const GeneratedMsg& g, const schemas::Validator& validator, const nlohmann::json& schema_plain,
                      bool grounded_schema, bool grounding, json& data, std::optional<json>& evidence, json& errors) {
  std::vector<WindowRecord> windows;
  const auto& parts = g.task.chunks;
  for (std::size_t w = 0; w < g.chunk_outputs.size() && w < parts.size(); ++w) {
    const auto& o = g.chunk_outputs[w];
    WindowRecord r;
    r.text = parts[w].text;
    r.data = json::parse(o.text, nullptr, false);
    if (r.data.is_discarded()) {
      errors.push_back(error_entry("", "json",
                                   "window " + std::to_string(w + 1) + " of " + std::to_string(parts.size()) +
                                       " (from page " + std::to_string(parts[w].first_page) +
                                       "): the model output is not complete JSON (finish: " + o.finish + ", " +
                                       std::to_string(o.text.size()) + " bytes)"));
      r.data = nullptr;
    } else if (grounded_schema) {
      const auto ev = schemas::find_evidence(schema_plain, to_plain(r.data), engine::grammar::split_pages(r.text));
      r.evidence = shift_evidence(json(ev.evidence), parts[w].first_page, parts[w].first_offset);
    }
    windows.push_back(std::move(r));
  }
  auto merged = merge_window_records(windows);
  // The validators choose where the first supported value breaks a rule (e.g. totals guessed in an
  // early window against the line items of all of them).
  refine_merge(merged, windows, [&](const json& d) {
    std::vector<std::string> pointers;
    for (const auto& v : validator.validate(to_plain(d))) pointers.push_back(v.pointer);
    return pointers;
  });
  data = std::move(merged.data);
  if (data.is_null()) {
    if (errors.empty()) errors.push_back(error_entry("", "json", "no window gave a record"));
    return;
  }
  for (const auto& v : validator.validate(to_plain(data))) errors.push_back(error_entry(v.pointer, v.keyword, v.message));
  if (grounded_schema && !g.task.document_text.empty()) {
    auto ev = schemas::find_evidence(schema_plain, to_plain(data), engine::grammar::split_pages(g.task.document_text));
    json all = json(ev.evidence);
    for (const auto& [ptr, e] : merged.evidence.items())
      if (e.is_object() && e.contains("page") && all.contains(ptr)) all[ptr] = e;
    evidence = std::move(all);
    if (grounding)
      for (const auto& v : ev.violations) errors.push_back(error_entry(v.pointer, v.keyword, v.message));
  }
}

/// Whether record `a` is worse than `b` to keep after retries: no data at all, or more errors.
bool worse(const json& a, const json& b) {
  const auto badness = [](const json& r) {
    if (!r.contains("data") || r["data"].is_null()) return std::numeric_limits<std::size_t>::max();
    return r.contains("errors") && r["errors"].is_array() ? r["errors"].size() : std::size_t{0};
  };
  return badness(a) > badness(b);
}

/// A kie document whose output ran past max_tokens, back to build to be cut into smaller windows
/// (ExtractedMsg::output_splits).
ExtractedMsg document_to_split(const ModelTaskMsg& t) {
  ExtractedMsg m;
  m.doc = t.subject;
  m.text = t.document_text;
  if (t.cross_check) {  // kept for --cross-check (build does not map it: output_splits > 0)
    m.einvoice = t.cross_check;
    m.einvoice_format = t.cross_check_method.starts_with("einvoice-") ? t.cross_check_method.substr(9) : t.cross_check_method;
  }
  m.output_splits = t.output_splits + 1;
  return m;
}

}  // namespace

void validate_stage(Shared& sh, zmq::socket_t in, zmq::context_t& zctx, const schemas::Validator& validator,
                    const json& schema_ordered) {
  auto to_writer = make_socket(zctx, zmq::socket_type::push, 16);
  to_writer.connect(ep_write);
  auto to_retry = make_socket(zctx, zmq::socket_type::push, 0);  // unbounded: never blocks (no cycle)
  to_retry.connect(ep_retry);
  auto to_build = make_socket(zctx, zmq::socket_type::push, 0);  // unbounded too
  to_build.connect(ep_build);
  // A kie output cut at max_tokens before its JSON closed: the document goes back to build, to be cut
  // into smaller windows whose outputs fit (resampling would not help); not once build found it too
  // short to cut (split, yet whole).
  const auto may_split = [&](const GeneratedMsg& g) {
    const bool cut_further = g.task.output_splits == 0 || !g.task.chunks.empty();
    return sh.job.task == Task::kie && g.finish == "length" && g.task.output_splits < kMaxOutputSplits &&
           cut_further && !g.task.document_text.empty();
  };
  const std::size_t retries = sh.job.retries;
  BatchValidators batch_validators;
  const nlohmann::json schema_plain = to_plain(schema_ordered);
  const bool grounded_schema = schemas::has_grounded_locations(schema_plain);
  for (;;) {
    auto m = recv(in);
    if (!m) continue;
    const auto t0 = std::chrono::steady_clock::now();
    if (auto* mp = std::get_if<MappedMsg>(&*m)) {
      RecordMsg out;
      try {
        json data = order_like_schema(mp->data, schema_ordered);
        json errors = json::array();
        for (const auto& v : validator.validate(to_plain(data))) errors.push_back(error_entry(v.pointer, v.keyword, v.message));
        out = make_record(mp->subject, errors.empty() ? "ok" : "invalid", mp->method, data, errors,
                          stats_without_model(mp->subject, 0));
      } catch (const std::exception& e) {
        out = error_record(mp->subject, mp->method, "internal", e.what());
      }
      sh.validate_clock.add(seconds_since(t0));
      send(to_writer, out);
      continue;
    }
    auto* g = std::get_if<GeneratedMsg>(&*m);
    if (!g) throw std::runtime_error("validate: unexpected message");
    const Subject& subject = g->task.subject;
    const std::size_t attempt = g->task.attempt;
    json stats = g->stats;
    stats["attempts"] = attempt + 1;
    stats["extract_ms"] = subject.extract_ms;
    if (g->task.output_splits > 0) stats["output_splits"] = g->task.output_splits;
    // Token totals for the run's throughput (every attempt counts).
    const TokenCounts tokens = tokens_of(stats);
    RecordMsg out;
    bool retry = false, split = false;
    const BatchSpec* batch = g->task.batch ? &*g->task.batch : nullptr;
    // A model record with errors: cut into smaller windows (an output cut at max_tokens), else retried
    // with another seed and temperature while attempts are left, unless the output was cut at
    // max_tokens (resampling does not make it shorter).
    const auto next_step = [&](const json& errors) {
      if (errors.empty()) return;
      if (may_split(*g)) split = true;
      else if (attempt < retries && g->finish != "length") retry = true;
    };
    try {
      json errors = json::array();
      if (batch && !g->error.empty()) {
        const std::string message = with_run_option_names(g->error);
        out = make_record(subject, "error", "model", nullptr,
                          json::array({g->bad_request ? error_entry("", "request", message)
                                                      : settings_error_entry("engine", message)}),
                          stats);
        out = batch_record(std::move(out), batch->line, batch->custom_id, failed_output(*batch, g->bad_request, message));
      } else if (batch) {
        json data = nullptr;
        if (batch->format != static_cast<int>(openai::ResponseFormat::text))
          data = parse_and_validate(*g, batch_validators.get(batch->schema_text), errors);
        if (!errors.empty() && attempt < retries && g->finish != "length") {
          retry = true;
        } else {
          // OpenAI semantics: the request was answered (200 with the text) even when the text fails
          // the schema; the record says invalid.
          out = make_record(subject, errors.empty() ? "ok" : "invalid", "model", data, errors, stats);
          out = batch_record(std::move(out), batch->line, batch->custom_id,
                             openai::batch_response_line(batch->custom_id, 200, g->response));
        }
      } else if (!g->error.empty()) {
        // The engine refuses or fails a request for the run's settings (KV cache, context): retryable.
        out = make_record(subject, "error", "model", nullptr,
                          json::array({settings_error_entry("engine", with_run_option_names(g->error))}), stats);
      } else if (!g->chunk_outputs.empty()) {
        // A document longer than the context: the windows' records merged, then validated as one.
        json data;
        std::optional<json> evidence;
        validate_chunked(*g, validator, schema_plain, grounded_schema, sh.job.engine.grounding, data, evidence, errors);
        out = make_record(subject, errors.empty() ? "ok" : "invalid", "model", data, errors, stats);
        if (evidence) out.record["evidence"] = std::move(*evidence);
        next_step(errors);
      } else {
        json data = parse_and_validate(*g, validator, errors);
        std::optional<json> evidence;
        if (!data.is_null()) {
          if (sh.job.task == Task::rag && !g->task.document_text.empty()) {
            const Document d = document_from_text(subject.source, g->task.document_text);
            // Grounded quotes (x-quarry-source on the evidence): the pages are where they are printed,
            // not the model's guess.
            if (grounded_schema && sh.job.engine.grounding && data.is_object() && data.contains("pages"))
              if (auto pages = rag::evidence_pages(to_plain(data), engine::grammar::split_pages(g->task.document_text)))
                data["pages"] = *pages;
            for (const auto& v : rag::check_evidence(to_plain(data), d))
              errors.push_back(error_entry(v.pointer, v.keyword, v.message));
          } else if (sh.job.task == Task::kie && grounded_schema && !g->task.document_text.empty()) {
            // Grounded values (x-quarry-source): where each is printed; none is rule:evidence (only
            // with grounding on, where the decoder promised it).
            auto ev = schemas::find_evidence(schema_plain, to_plain(data),
                                             engine::grammar::split_pages(g->task.document_text));
            evidence = json(ev.evidence);
            if (sh.job.engine.grounding)
              for (const auto& v : ev.violations) errors.push_back(error_entry(v.pointer, v.keyword, v.message));
          }
        }
        out = make_record(subject, errors.empty() ? "ok" : "invalid", "model", data, errors, stats);
        if (evidence) out.record["evidence"] = std::move(*evidence);
        // --cross-check: compared with the e-invoice XML (which never decides a retry: the record shows
        // what the model read).
        if (g->task.cross_check)
          add_cross_check(out.record, schema_plain, schema_ordered, data, *g->task.cross_check,
                          g->task.cross_check_method);
        next_step(errors);
      }
    } catch (const std::exception& e) {
      out = make_record(subject, "error", "model", nullptr, json::array({error_entry("", "internal", e.what())}),
                        stats_without_model(subject, 0));
      if (batch) out = batch_record(std::move(out), batch->line, batch->custom_id, failed_output(*batch, false, e.what()));
      retry = split = false;
    }
    sh.validate_clock.add(seconds_since(t0));
    if ((retry || split) && sh.stop() >= 1) {
      // Stopping: the retry would be new work. Not recorded (a record after fewer attempts would
      // differ from a full run's): the rerun does the document again.
      send(to_writer, NoticeMsg{NoticeMsg::Kind::retry, 1, tokens});
      send(to_writer, NoticeMsg{NoticeMsg::Kind::cancelled, 1, std::nullopt});
    } else if (split) {
      send(to_writer, NoticeMsg{NoticeMsg::Kind::retry, 1, tokens});
      send(to_build, document_to_split(g->task));
    } else if (retry) {
      send(to_writer, NoticeMsg{NoticeMsg::Kind::retry, 1, tokens});
      ModelTaskMsg t = std::move(g->task);
      t.attempt = attempt + 1;
      if (!t.batch && (!t.best_record || worse(*t.best_record, out.record))) t.best_record = std::move(out.record);
      send(to_retry, t);
    } else {
      // After retries: the attempt with the fewest errors, not the last one drawn (an `error` record,
      // which the next run redoes, stays as it is).
      if (!batch && g->task.best_record && out.record.value("status", "") == "invalid" &&
          worse(out.record, *g->task.best_record)) {
        json kept = std::move(*g->task.best_record);
        kept["stats"]["kept_attempt"] = kept["stats"].value("attempts", std::size_t{0});
        kept["stats"]["attempts"] = attempt + 1;
        out.record = std::move(kept);
      }
      out.tokens = tokens;
      send(to_writer, out);
    }
  }
}

}  // namespace quarry::run::stages
