// The coordinator of `quarry run`: sets the run up (lock, ledger, schema, prompts, model), binds the
// stages' sockets, starts one thread per stage (stage_*.cpp), runs the writer, then shuts down.
#include "pipeline/run/runner.hpp"

#include <fstream>
#include <optional>
#include <stdexcept>
#include <thread>

#include "engine/tokenizer/tokenizer.hpp"
#include "pipeline/run/batch.hpp"
#include "pipeline/run/engine_worker.hpp"
#include "pipeline/run/stages.hpp"
#include "schemas/rules.hpp"
#include "schemas/validate.hpp"

namespace quarry::run {

namespace eng = quarry::engine;
using json = nlohmann::ordered_json;
using namespace stages;

zmq::socket_t stages::make_socket(zmq::context_t& ctx, zmq::socket_type type, int hwm) {
  zmq::socket_t s(ctx, type);
  s.set(zmq::sockopt::sndhwm, hwm);
  s.set(zmq::sockopt::rcvhwm, hwm);
  s.set(zmq::sockopt::linger, 0);
  return s;
}

RunMetrics run_job(const JobSpec& job_in, RunControl& control, const RunOptions& options) {
  JobSpec job = job_in;
  resolve_defaults(job);
  const auto start = std::chrono::steady_clock::now();
  RunMetrics metrics;
  Shared sh(job, control, options);
  const auto log = [&](const std::string& s) { sh.log(s); };
  for (const auto& w : fit_to_this_machine(job)) log("warning: " + w);

  // Setup (errors here are the run's errors, not a document's). OUTDIR is locked before anything in
  // it is opened: the ledger's repair must never cut another run's lines.
  std::optional<OutdirLock> own_lock;
  if (!options.lock) own_lock.emplace(job.output);
  Ledger ledger(job.output);
  metrics.recovery = ledger.recovery();
  if (metrics.recovery.recovered_lines || metrics.recovery.truncated_bytes || metrics.recovery.dropped_rows)
    log("ledger: recovered " + std::to_string(metrics.recovery.recovered_lines) + " record(s) written before a stop, cut " +
        std::to_string(metrics.recovery.truncated_bytes) + " byte(s) of a torn last line, dropped " +
        std::to_string(metrics.recovery.dropped_rows) + " row(s) past the end of results.jsonl");
  if (metrics.recovery.ledger_rows)
    log("resuming: " + std::to_string(metrics.recovery.ledger_rows) + " record(s) already in " +
        (job.output / Ledger::results_name).string());

  std::string schema_text;
  nlohmann::json schema_checked;
  json schema_json;
  {
    std::ifstream in(job.schema, std::ios::binary);
    if (!in) throw std::runtime_error(job.schema.string() + ": cannot open the schema");
    schema_text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    // Size, JSON depth and keys per object are checked while parsing, before anything recurses
    // over the schema; the Validator then refuses $ref cycles and patterns RE2 cannot run.
    schema_checked = schemas::parse_schema_text(schema_text, job.schema.string());
    schema_json = json::parse(schema_text);
  }
  schemas::Validator validator(schema_checked, job.schema.string());
  if (schema_json.value("$id", "") == "https://quarry.invalid/schemas/invoice.schema.json") add_invoice_rules(validator);

  BuildContext bc;
  bc.prompts = PromptTemplates::load(job.prompts);
  const bool invoice_schema = schema_json.value("$id", "") == "https://quarry.invalid/schemas/invoice.schema.json";
  if (job.task == Task::kie && !invoice_schema && bc.prompts.has_schema_template()) {
    bc.schema_prompt = schema_for_prompt(nlohmann::ordered_json::parse(schema_text));
    log("run: the prompt shows the schema " + job.schema.string() + " (the \"schema\" template of " +
        job.prompts.string() + ")");
  }
  // The e-invoice mappers write the invoice schema: only its records can be compared with them.
  bc.cross_check = job.cross_check && invoice_schema;
  if (job.cross_check && !invoice_schema)
    log("run: --cross-check compares with e-invoices mapped to the shipped invoice schema; with the schema " +
        job.schema.string() + " nothing is compared");
  if (job.task == Task::rag) {
    auto qs = rag::read_questions(job.questions);
    if (!qs) throw std::runtime_error(qs.error().message());
    bc.rag_questions = std::move(*qs);
    for (const auto& q : bc.rag_questions) sh.questions.push_back(QuestionRef{q.id, q.text});
    bc.rag_template = rag::load_rag_template(job.prompts);
    sh.units_per_doc = sh.questions.size();
  }
  bc.tokenizer = eng::Tokenizer::from_dir(job.model);
  EngineWorker worker(job, bc.tokenizer, schema_text, log);
  bc.context_tokens = worker.context_tokens();
  if (job.engine.max_context > 0 && job.engine.max_context < bc.context_tokens) bc.context_tokens = job.engine.max_context;

  zmq::context_t zctx;
  // Receiving ends are bound here, before the stage threads start (then handed over to them).
  auto discover_out = make_socket(zctx, zmq::socket_type::push, 2);
  discover_out.bind(ep_extract);
  std::vector<zmq::socket_t> extract_in;
  const bool batch = job.task == Task::batch;  // batch files are read by discover: nothing to extract
  if (batch && options.hooks) throw std::runtime_error("the batch task has no other source than its files");
  for (std::size_t i = 0; i < (batch ? 0 : job.extract_threads); ++i) {
    extract_in.push_back(make_socket(zctx, zmq::socket_type::pull, 1));
    extract_in.back().connect(ep_extract);
  }
  auto build_in = make_socket(zctx, zmq::socket_type::pull, 4);
  build_in.bind(ep_build);
  auto engine_in = make_socket(zctx, zmq::socket_type::pull, 4);
  engine_in.bind(ep_engine);
  auto retry_in = make_socket(zctx, zmq::socket_type::pull, 0);
  retry_in.bind(ep_retry);
  auto validate_in = make_socket(zctx, zmq::socket_type::pull, 8);
  validate_in.bind(ep_validate);
  auto writer_in = make_socket(zctx, zmq::socket_type::pull, 64);
  writer_in.bind(ep_write);
  // batch: discover sends request lines to build and line errors to write, through sockets that stay
  // open until the context is shut down (as discover_out does).
  auto batch_to_build = make_socket(zctx, zmq::socket_type::push, 4);
  auto batch_to_writer = make_socket(zctx, zmq::socket_type::push, 16);
  if (batch) {
    batch_to_build.connect(ep_build);
    batch_to_writer.connect(ep_write);
  }

  std::vector<std::thread> threads;
  for (auto& s : extract_in)
    threads.emplace_back([&sh, &zctx, sock = std::move(s)]() mutable {
      guarded(sh, "extract", [&] { extract_stage(sh, std::move(sock), zctx); });
    });
  threads.emplace_back([&sh, &zctx, &bc, sock = std::move(build_in)]() mutable {
    guarded(sh, "build", [&] { build_stage(sh, std::move(sock), zctx, bc); });
  });
  threads.emplace_back([&sh, &zctx, &worker, a = std::move(engine_in), b = std::move(retry_in)]() mutable {
    guarded(sh, "engine", [&] { engine_stage(sh, std::move(a), std::move(b), zctx, worker); });
  });
  const json schema_ordered = json::parse(schema_text);
  threads.emplace_back([&sh, &zctx, &validator, &schema_ordered, sock = std::move(validate_in)]() mutable {
    guarded(sh, "validate", [&] { validate_stage(sh, std::move(sock), zctx, validator, schema_ordered); });
  });
  std::thread discover_thread([&] {
    guarded(sh, "discover", [&] {
      if (options.hooks) options.hooks->source(sh, discover_out, zctx);
      else if (batch) batch_discover_stage(sh, batch_to_build, batch_to_writer);
      else discover_stage(sh, discover_out);
    });
    sh.discover_done = true;
  });

  guarded(sh, "write", [&] {
    if (options.hooks) options.hooks->sink(sh, writer_in, metrics);
    else write_stage(sh, writer_in, ledger, metrics, start);
  });
  // Everything is accounted for (or the run failed): stop the stages.
  zctx.shutdown();
  discover_thread.join();
  for (auto& t : threads) t.join();
  discover_out.close();
  batch_to_build.close();
  batch_to_writer.close();
  writer_in.close();
  zctx.close();

  metrics.wall_s = seconds_since(start);
  metrics.discovered = sh.discovered.load();
  metrics.expected = metrics.discovered * sh.units_per_doc;
  metrics.discover_s = sh.discover_clock.seconds();
  metrics.extract_s = sh.extract_clock.seconds();
  metrics.build_s = sh.build_clock.seconds();
  metrics.engine_s = sh.engine_clock.seconds();
  metrics.validate_s = sh.validate_clock.seconds();
  metrics.write_s = sh.write_clock.seconds();
  metrics.interrupted = control.stop_level.load() > 0 && !sh.failed;
  if (sh.failed) throw std::runtime_error(sh.fatal);
  if (batch) {
    // Every run (an interrupted one too) leaves output.jsonl matching results.jsonl; a run killed
    // before this point leaves the previous one, and the next run rebuilds it.
    const auto lines = rebuild_batch_output(job);
    log("batch: " + std::to_string(lines) + " line(s) in " + (job.output / k_batch_output_name).string());
  }
  return metrics;
}

}  // namespace quarry::run
