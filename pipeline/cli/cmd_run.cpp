// `quarry run` and `quarry ask`: the batch job (pipeline/run/runner.hpp).
//
// run:  quarry run PATH... [--task kie|rag|batch] [--schema FILE] [--model DIR] -o OUTDIR
//       (an OpenAI Batch .jsonl file selects --task batch by itself: OUTDIR/output.jsonl)
//       quarry run JOBFILE.toml [overrides]
// ask:  quarry ask DOC... --questions FILE [--schema FILE] [-o OUTDIR]      (task rag)
//
// Progress goes to stderr: a bar on a terminal, log lines otherwise. Ctrl-C (or SIGTERM) once stops
// within 5 s: nothing new starts, the documents in flight get 2 s to finish, then they are cancelled
// and the report is written; twice exits at once. Either way everything reported done is in OUTDIR,
// and rerunning the same command resumes.
// Exit codes: 0 every record of OUTDIR ok; 2 some records of OUTDIR are invalid or errors, or OUTDIR is in
// use by another run; 1 setup failure; 130 interrupted (rerun to resume).
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <tuple>
#include <thread>
#include <vector>

#include "pipeline/cli/commands.hpp"
#include "pipeline/cli/run_args.hpp"
#include "pipeline/run/job.hpp"
#include "pipeline/run/report.hpp"
#include "pipeline/run/runner.hpp"

namespace quarry::cli {

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:+,") ==
                        std::string::npos)
    return s;
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

namespace {



int execute(qr::JobSpec job, const RunArgs& a, const std::string& resume_cmd) {
  qr::resolve_defaults(job);
  qr::raise_open_file_limit();
  const auto [m, report] = run_and_report(job, a, resume_cmd, [&](qr::RunControl& control, const qr::RunOptions& opts) {
    return qr::run_job(job, control, opts);
  });
  if (job.task == qr::Task::batch) std::printf("output:  %s (OpenAI Batch output)\n", (job.output / "output.jsonl").c_str());
  std::printf("%zu record(s) written in %.1f s: %zu ok, %zu invalid, %zu error; %zu already done\n", m.written, m.wall_s,
              m.ok, m.invalid, m.error, m.skipped);
  std::fflush(stdout);
  if (m.interrupted) {
    std::fprintf(stderr,
                 "quarry: interrupted with %zu of %zu record(s) not done; everything reported is saved.\n"
                 "Resume with: %s\n",
                 m.expected - m.written - m.skipped, m.expected, resume_cmd.c_str());
    return 130;
  }
  // The status of the output folder as a whole (a resumed run reports the failures of earlier runs too).
  return status_exit_code(report);
}

}  // namespace

FinishedRun run_and_report(const qr::JobSpec& job, const RunArgs& a, const std::string& resume_cmd,
                           const std::function<qr::RunMetrics(qr::RunControl&, const qr::RunOptions&)>& body) {
  qr::RunControl control;
  ProgressPrinter printer(a.progress);
  qr::RunOptions opts;
  opts.on_progress = [&](const qr::Progress& p) { printer(p); };
  opts.log = [&](const std::string& m) {
    printer.end_line();
    spdlog::info("{}", m);
  };
  // OUTDIR is this run's alone until the report is written.
  qr::OutdirLock lock(job.output);
  opts.lock = &lock;
  FinishedRun f;
  {
    SignalWatcher watcher(control, resume_cmd);
    f.metrics = body(control, opts);
  }
  printer.end_line();
  f.report = qr::write_report(job, f.metrics);
  std::printf("results: %s\nreport:  %s (and report.json)\n", (job.output / qr::Ledger::results_name).c_str(),
              (job.output / "report.md").c_str());
  return f;
}

int status_exit_code(const nlohmann::json& report) {
  const auto& by = report["by_status"];
  return (by.value("invalid", 0) + by.value("error", 0)) > 0 ? 2 : 0;
}

/// The per-document limits of extraction (README "Limits and safety"); same names in `quarry ingest`.
static void add_extract_limit_options(CLI::App* sub, RunArgs& a) {
  const auto* g = "Limits (per document; a document past one becomes an error record and the batch goes on)";
  sub->add_flag("--no-isolation", a.no_isolation,
                "Extract in quarry's own threads instead of worker processes: no time or memory limit, and a parser "
                "crash ends the run (for benchmarks) [isolation on]")
      ->group(g);
  sub->add_option("--extract-timeout", a.extract_timeout, "Wall time per document, seconds (0: none) [30]")
      ->check(CLI::Range(0.0, 86400.0))
      ->group(g);
  sub->add_option("--extract-memory-mb", a.extract_memory_mb, "Memory of an extraction worker, MiB (0: none) [1024]")
      ->group(g);
  sub->add_option("--max-file-mb", a.max_file_mb, "Larger input files are refused, MiB [256]")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 20))
      ->group(g);
  sub->add_option("--max-text-mb", a.max_text_mb, "Extracted text per document, MiB [64]")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 20))
      ->group(g);
  sub->add_option("--max-page-text-mb", a.max_page_text_mb, "Extracted text per page, MiB [4]")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 20))
      ->group(g);
  sub->add_option("--max-attachment-mb", a.max_attachment_mb, "An embedded file's bytes as really inflated, MiB [32]")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 20))
      ->group(g);
  sub->add_option("--max-pages", a.max_pages, "Pages per document [5000]")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 20))
      ->group(g);
  sub->add_option("--max-content-mb", a.max_content_mb,
                  "PDF content streams a document may decode (pages, forms, annotations), MiB [256]")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 20))
      ->group(g);
  sub->add_option("--max-page-content-mb", a.max_page_content_mb, "PDF content streams one page may decode, MiB [64]")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 20))
      ->group(g);
}

void add_common_options(CLI::App* sub, RunArgs& a) {
  sub->add_option("--schema", a.schema, "JSON Schema of the output; default: the shipped invoice (kie) or rag_answer (rag) schema")
      ->check(CLI::ExistingFile);
  sub->add_option("--prompts", a.prompts, "Prompt templates (JSON: kie/rag system+user); default: MODEL/prompts.json")
      ->check(CLI::ExistingFile);
  sub->add_option("--model", a.model, "Model folder; default: models/quarry-extract-11m")->check(CLI::ExistingDirectory);
  sub->add_option("-o,--output", a.output, "Output folder: results.jsonl, report.json, report.md, ledger.sqlite");
  sub->add_option("--prefer", a.prefer, "auto: structured e-invoices take the deterministic mapper; model: everything goes to the model")
      ->check(CLI::IsMember({"auto", "model"}));
  sub->add_flag("--cross-check", a.cross_check,
                "With --prefer model: a document that carries an e-invoice XML is read by the model too, and each "
                "field is compared with the XML's value; disagreements are the record's warnings (rule:cross_check), "
                "counted in the report. `data` stays the model's, the XML's values are in the record's cross_check");
  sub->add_option("--retries", a.retries, "Extra model attempts (another seed and temperature) before a record is invalid [2]");
  sub->add_flag("--retry-errors", a.retry_errors,
                "Redo every `error` record of OUTDIR (errors caused by the run's settings, such as a KV cache or context too "
                "small, are always redone)");
  sub->add_option("--shard", a.shard,
                  "I/N: do only the documents of shard I of N (0 <= I < N, by their sha256), for a job split over a "
                  "batch scheduler's array; `quarry merge` combines the shards' output folders")
      ->check([](const std::string& v) {
        try {
          qr::parse_shard(v);
          return std::string();
        } catch (const std::invalid_argument& e) {
          return std::string(e.what());
        }
      });
  sub->add_option("--threads", a.threads, "Engine threads (0: all cores; more than the machine has are clamped, with a warning) [0]");
  sub->add_option("--max-tokens", a.max_tokens, "Output tokens per request at most [2048]");
  sub->add_option("--max-inflight", a.max_inflight, "Requests the engine keeps in flight (one continuous batch) [4]");
  sub->add_option("--extract-threads", a.extract_threads,
                  "Extraction threads (clamped, with a warning, to 4 per hardware thread and to what the open-file limit allows) [2]");
  sub->add_option("--pdf-password", a.pdf_password, "Password for encrypted PDFs (tried as owner and user password)");
  add_extract_limit_options(sub, a);
  sub->add_option("--mtp,--mtp-depth", a.mtp_depth, "MTP speculative decoding: draft depth cap, adaptive below it (0: off) [0]");
  sub->add_option("--kv-cache-mb", a.kv_cache_mb, "KV-cache budget in MiB (0: engine default) [0]");
  sub->add_option("--max-context", a.max_context,
                  "Context the prompts are planned for, tokens (0: the model's; larger is clamped to it). A document "
                  "longer than it (prompt + output) is extracted over windows and merged; rag retrieves within it [0]");
  sub->add_option("--compute", a.compute,
                  "auto (the checkpoint's dtype: bf16 for a bf16 checkpoint on CPUs with AMX or AVX512_BF16 and on "
                  "GPUs), exact (f32) or bf16 [auto]")
      ->check(CLI::IsMember({"auto", "exact", "bf16"}));
  sub->add_option("--device", a.device,
                  "cpu, cuda, cuda:N, or auto (the first GPU when this build has the CUDA backend and a GPU is "
                  "present, else the CPU) [auto]");
  sub->add_option("--tensor-parallel", a.tensor_parallel,
                  "Split the model over N devices (tensor parallelism: cuda:I .. cuda:I+N-1 from --device cuda:I) [1]")
      ->check(CLI::Range(1, 64));
  sub->add_option("--temperature", a.temperature, "Sampling temperature of the first attempt (0: greedy) [0]")
      ->check(CLI::Range(0.0, 100.0));
  sub->add_option("--retry-temperature", a.retry_temperature, "Sampling temperature of retries [0.7]")
      ->check(CLI::Range(0.0, 100.0));
  sub->add_option("--seed", a.seed, "Seed of the first attempt; attempt i uses seed + i [0]");
  sub->add_option("--grounding", a.grounding,
                  "on: values at the schema's x-quarry-source locations can only be what the document says, and "
                  "records carry evidence (rule:evidence); off: the annotation is ignored [on]")
      ->check(CLI::IsMember({"on", "off"}));
  sub->add_option("--progress", a.progress, "auto (a bar on a terminal, log lines otherwise), bar, log or none")
      ->check(CLI::IsMember({"auto", "bar", "log", "none"}))
      ->capture_default_str();
}

/// Options given on the command line override the job file's values.
void apply_overrides(qr::JobSpec& job, const RunArgs& a, const CLI::App* sub) {
  const auto given = [&](const char* name) { return sub->get_option(name)->count() > 0; };
  if (!a.task.empty()) {
    job.task = a.task == "rag" ? qr::Task::rag : a.task == "batch" ? qr::Task::batch : qr::Task::kie;
    job.task_set = true;
  }
  if (given("--schema")) job.schema = a.schema;
  if (given("--prompts")) job.prompts = a.prompts;
  if (given("--model")) job.model = a.model;
  if (given("--output")) job.output = a.output;
  if (given("--prefer")) job.prefer = a.prefer == "model" ? qr::Prefer::model : qr::Prefer::automatic;
  if (a.cross_check) job.cross_check = true;
  if (given("--retries")) job.retries = a.retries;
  if (a.retry_errors) job.retry_errors = true;
  if (!a.shard.empty()) std::tie(job.shard_index, job.shard_count) = qr::parse_shard(a.shard);
  if (given("--threads")) job.engine.threads = a.threads;
  if (given("--max-tokens")) job.engine.max_tokens = a.max_tokens;
  if (given("--max-inflight")) job.engine.max_inflight = a.max_inflight;
  if (given("--extract-threads")) job.extract_threads = a.extract_threads;
  if (given("--pdf-password")) job.extract.pdf_password = a.pdf_password;
  if (a.no_isolation) job.extract.isolation = false;
  if (given("--extract-timeout")) job.extract.timeout_s = a.extract_timeout;
  if (given("--extract-memory-mb")) job.extract.memory_mb = a.extract_memory_mb;
  if (given("--max-file-mb")) job.extract.max_file_mb = a.max_file_mb;
  if (given("--max-text-mb")) job.extract.max_text_mb = a.max_text_mb;
  if (given("--max-page-text-mb")) job.extract.max_page_text_mb = a.max_page_text_mb;
  if (given("--max-content-mb")) job.extract.max_content_mb = a.max_content_mb;
  if (given("--max-page-content-mb")) job.extract.max_page_content_mb = a.max_page_content_mb;
  if (given("--max-attachment-mb")) job.extract.max_attachment_mb = a.max_attachment_mb;
  if (given("--max-pages")) job.extract.max_pages = a.max_pages;
  if (given("--mtp")) job.engine.mtp_depth = a.mtp_depth;
  if (given("--kv-cache-mb")) job.engine.kv_cache_mb = a.kv_cache_mb;
  if (given("--max-context")) job.engine.max_context = a.max_context;
  if (given("--compute")) job.engine.compute = a.compute;
  if (given("--tensor-parallel")) job.engine.tensor_parallel = a.tensor_parallel;
  if (given("--device")) job.engine.device = a.device;
  if (given("--temperature")) job.engine.temperature = a.temperature;
  if (given("--retry-temperature")) job.engine.retry_temperature = a.retry_temperature;
  if (given("--seed")) job.engine.seed = a.seed;
  if (given("--grounding")) job.engine.grounding = a.grounding == "on";
  if (!a.questions.empty()) job.questions = a.questions;
  // The queue options, on the commands that have them.
  const auto given_q = [&](const char* name) {
    const auto* o = sub->get_option_no_throw(name);
    return o && o->count() > 0;
  };
  auto& q = job.queue;
  if (given_q("--queue")) q.url = a.queue.url;
  if (given_q("--job")) q.job = a.queue.job;
  if (given_q("--creds")) q.creds = a.queue.creds;
  if (given_q("--user")) q.user = a.queue.user;
  if (given_q("--password")) q.password = a.queue.password;
  if (given_q("--token")) q.token = a.queue.token;
  if (given_q("--tls")) q.tls = true;
  if (given_q("--tls-ca")) q.tls_ca = a.queue.tls_ca;
  if (given_q("--tls-cert")) q.tls_cert = a.queue.tls_cert;
  if (given_q("--tls-key")) q.tls_key = a.queue.tls_key;
  if (given_q("--ack-wait")) q.ack_wait_s = a.queue.ack_wait_s;
  if (given_q("--max-deliver")) q.max_deliver = a.queue.max_deliver;
  if (given_q("--inline-kb")) q.inline_kb = a.queue.inline_kb;
  if (given_q("--dedupe-window")) q.dedupe_window_s = a.queue.dedupe_window_s;
  if (given_q("--reconnect")) q.reconnect_s = a.queue.reconnect_s;
  if (given_q("--idle-exit")) q.idle_exit_s = a.queue.idle_exit_s;
}

/// The command line as given, quoted for a POSIX shell.
std::string command_line(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& x : argv) s += (s.empty() ? "" : " ") + shell_quote(x);
  return s;
}

void add_run_command(CLI::App& app, Context& ctx) {
  auto a = std::make_shared<RunArgs>();
  auto* sub = app.add_subcommand("run", "Extract one schema-valid JSON record per document: resumable, with a report");
  sub->footer(
      "Inputs: files, folders (walked recursively, hidden files skipped) and glob patterns; or one TOML job\n"
      "file (keys: inputs, task, schema, prompts, questions, model, output, prefer, cross_check, retries, retry_errors,\n"
      "[engine] threads, "
      "max_tokens, max_inflight, mtp_depth, kv_cache_mb, max_context, compute, device, tensor_parallel, state_snapshot_tokens, max_state_snapshots, temperature, retry_temperature, seed, grounding, [extract]\n"
      "threads, "
      "pdf_password, isolation, timeout_s, memory_mb, max_file_mb, max_text_mb, max_page_text_mb, max_attachment_mb,\n"
      "max_pages, max_content_mb, max_page_content_mb, [queue] url, job and the queue options).\n"
      "With --queue URL --job NAME (or [queue]): submit the inputs to NATS JetStream, then collect the records\n"
      "that `quarry worker`s make (see `quarry submit --help`).\n"
      "Rerunning the same command resumes: documents already in OUTDIR are skipped.\n"
      "OpenAI Batch files (.jsonl, one {custom_id, method, url, body} request per line) run as task batch:\n"
      "OUTDIR/output.jsonl holds one OpenAI Batch output line per request, in the file's order.\n"
      "Exit codes: 0 all ok; 2 some records invalid or errors, or OUTDIR in use by another run; 1 setup error;\n"
      "130 interrupted.");
  sub->add_option("inputs", a->inputs, "Files, folders, glob patterns, or one JOBFILE.toml")->required();
  sub->add_option("--task", a->task,
                  "kie (one record per document), rag (needs --questions) or batch (OpenAI Batch .jsonl files: one "
                  "record per request, OUTDIR/output.jsonl; chosen by itself for such a file)")
      ->check(CLI::IsMember({"kie", "rag", "batch"}));
  sub->add_option("--questions", a->questions, "rag: questions file (one per line, or JSON lines with \"question\")")
      ->check(CLI::ExistingFile);
  add_common_options(sub, *a);
  add_queue_options(sub, *a, false, true);
  sub->callback([a, sub, &ctx] {
    try {
      qr::JobSpec job;
      const bool job_file = a->inputs.size() == 1 && std::filesystem::path(a->inputs[0]).extension() == ".toml";
      if (job_file) job = qr::load_job_file(a->inputs[0]);
      else job.inputs = a->inputs;
      apply_overrides(job, *a, sub);
      ctx.exit_code = job.queue.enabled() ? execute_over_queue(std::move(job), *a, command_line(ctx.argv))
                                          : execute(std::move(job), *a, command_line(ctx.argv));
    } catch (const qr::OutdirBusy& e) {
      spdlog::error("run: {}", e.what());
      ctx.exit_code = 2;
    } catch (const std::exception& e) {
      spdlog::error("run: {}", e.what());
      ctx.exit_code = 1;
    }
  });
}

void add_ask_command(CLI::App& app, Context& ctx) {
  auto a = std::make_shared<RunArgs>();
  auto* sub = app.add_subcommand("ask", "Answer a batch of questions about each document (one record per document x question)");
  sub->footer("Same outputs, ledger and resume as `quarry run` (task rag). Exit codes as for run.");
  sub->add_option("documents", a->inputs, "Files, folders or glob patterns")->required();
  sub->add_option("--questions", a->questions, "Questions: one per line, or JSON lines with \"question\" (and \"id\")")
      ->check(CLI::ExistingFile)
      ->required();
  add_common_options(sub, *a);
  sub->callback([a, sub, &ctx] {
    try {
      qr::JobSpec job;
      job.inputs = a->inputs;
      job.task = qr::Task::rag;
      apply_overrides(job, *a, sub);
      if (job.output.empty()) job.output = "quarry-ask-out";
      ctx.exit_code = execute(std::move(job), *a, command_line(ctx.argv));
    } catch (const qr::OutdirBusy& e) {
      spdlog::error("ask: {}", e.what());
      ctx.exit_code = 2;
    } catch (const std::exception& e) {
      spdlog::error("ask: {}", e.what());
      ctx.exit_code = 1;
    }
  });
}

}  // namespace quarry::cli
