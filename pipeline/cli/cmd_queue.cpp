// The roles of a job spread over machines on NATS JetStream (pipeline/queue/queue.hpp):
//
//   quarry submit  PATH... | JOB.toml --queue nats://HOST:4222 --job NAME   one task per document
//   quarry worker  [JOB.toml] --queue nats://HOST:4222 --job NAME [--idle-exit S]   any number, anywhere
//   quarry collect [JOB.toml] --queue nats://HOST:4222 --job NAME -o OUTDIR   results, ledger, report
//   quarry run     PATH... --queue ... --job NAME -o OUTDIR                 submit, then collect
//
// Exit codes: submit 0 submitted, 1 setup error or the server unreachable; worker 0 stopped (a signal, or
// --idle-exit), 1 setup error; collect (and run --queue) as `quarry run`: 0 every record of OUTDIR ok,
// 2 some invalid or error (or OUTDIR in use), 1 setup error or the server unreachable, 130 interrupted.
#include <spdlog/spdlog.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "pipeline/cli/commands.hpp"
#include "pipeline/cli/run_args.hpp"
#include "pipeline/queue/nats_client.hpp"
#include "pipeline/queue/queue.hpp"
#include "pipeline/run/outdir.hpp"
#include "pipeline/run/report.hpp"

namespace quarry::cli {

namespace fs = std::filesystem;

void add_queue_options(CLI::App* sub, RunArgs& a, bool worker, bool submit) {
  const auto* g = "Queue (a job spread over machines on NATS JetStream)";
  auto& q = a.queue;
  sub->add_option("--queue", q.url, "NATS server: nats://HOST:4222 (tls://HOST:PORT for TLS; several, comma-separated)")
      ->group(g);
  sub->add_option("--job", q.job, "Job name: the streams QUARRY_<NAME>_TASKS and _RESULTS ([A-Za-z0-9_-])")->group(g);
  sub->add_option("--creds", q.creds, "NATS credentials file (JWT and NKey seed)")->check(CLI::ExistingFile)->group(g);
  sub->add_option("--user", q.user, "NATS user")->group(g);
  sub->add_option("--password", q.password, "NATS password (or the environment's QUARRY_NATS_PASSWORD)")
      ->envname("QUARRY_NATS_PASSWORD")
      ->group(g);
  sub->add_option("--token", q.token, "NATS token (or the environment's QUARRY_NATS_TOKEN)")
      ->envname("QUARRY_NATS_TOKEN")
      ->group(g);
  sub->add_flag("--tls", q.tls, "Require TLS (on by itself with a tls:// URL or any --tls-* file)")->group(g);
  sub->add_option("--tls-ca", q.tls_ca, "CA certificates (PEM) to verify the server with")->check(CLI::ExistingFile)->group(g);
  sub->add_option("--tls-cert", q.tls_cert, "Client certificate chain (PEM), for mutual TLS")->check(CLI::ExistingFile)->group(g);
  sub->add_option("--tls-key", q.tls_key, "Client private key (PEM)")->check(CLI::ExistingFile)->group(g);
  sub->add_option("--ack-wait", q.ack_wait_s,
                  "Seconds a task may go without an ack or progress ack before it is redelivered (set when the job's "
                  "consumer is created) [60]")
      ->check(CLI::Range(1.0, 86400.0))
      ->group(g);
  sub->add_option("--max-deliver", q.max_deliver,
                  "Deliveries of a task at most; the last one becomes an `error` record (set when the consumer is "
                  "created) [4]")
      ->check(CLI::Range(2, 1000))
      ->group(g);
  sub->add_option("--dedupe-window", q.dedupe_window_s,
                  "Seconds the streams remember message ids, to drop a task or record published twice [7200]")
      ->check(CLI::Range(1.0, 30 * 86400.0))
      ->group(g);
  sub->add_option("--reconnect", q.reconnect_s,
                  "Seconds to keep reconnecting to a lost server before failing (submit, collect) [60]")
      ->check(CLI::Range(0.0, 86400.0))
      ->group(g);
  if (submit)
    sub->add_option("--inline-kb", q.inline_kb,
                    "Documents up to this size travel in the task; larger ones by path (storage every worker "
                    "sees) [512]")
        ->group(g);
  if (worker)
    sub->add_option("--idle-exit", q.idle_exit_s, "Exit after this many seconds without a task (0: never) [0]")
        ->check(CLI::Range(0.0, 30 * 86400.0))
        ->group(g);
}

namespace {

/// The job of a role: a job file (its [queue] too) or the inputs, with the command line's overrides.
qr::JobSpec job_of(const RunArgs& a, const CLI::App* sub) {
  qr::JobSpec job;
  const bool job_file = a.inputs.size() == 1 && fs::path(a.inputs[0]).extension() == ".toml";
  if (job_file) job = qr::load_job_file(a.inputs[0]);
  else job.inputs = a.inputs;
  apply_overrides(job, a, sub);
  return job;
}

/// Removes the scratch folders of workers that are gone (killed with -9, or crashed): a live worker
/// holds the lock of its folder (OutdirLock, taken by the run), so a folder whose lock can be taken is
/// nobody's.
void remove_stale_scratch(const fs::path& tmp) {
  std::error_code ec;
  for (fs::directory_iterator it(tmp, ec), end; !ec && it != end; it.increment(ec)) {
    const auto name = it->path().filename().string();
    if (name.rfind("quarry-worker-", 0) != 0 || !it->is_directory(ec) || it->is_symlink(ec)) continue;
    if (!fs::exists(it->path() / qr::OutdirLock::lock_name)) continue;  // not started yet, or not ours
    bool stale = false;
    try {
      const qr::OutdirLock probe(it->path());
      stale = true;
    } catch (const std::exception&) {
      // in use (OutdirBusy), or not a folder we can lock: left alone
    }
    std::error_code rm;
    if (stale) fs::remove_all(it->path(), rm);
  }
}

std::string queue_label(const qr::JobSpec& job) { return "queue " + job.queue.url + " job " + job.queue.job; }

/// Collects into job.output and writes the report; the exit code of `quarry run`.
int collect_and_report(const qr::JobSpec& job, const RunArgs& a, const std::string& resume_cmd) {
  const auto [m, report] = run_and_report(job, a, resume_cmd, [&](qr::RunControl& control, const qr::RunOptions& opts) {
    return queue::collect(job, control, opts);
  });
  std::printf("%zu record(s) collected in %.1f s: %zu ok, %zu invalid, %zu error; %zu already in OUTDIR\n", m.written,
              m.wall_s, m.ok, m.invalid, m.error, m.skipped);
  std::fflush(stdout);
  if (m.interrupted) {
    std::fprintf(stderr, "quarry: collect interrupted; everything reported is saved.\nResume with: %s\n", resume_cmd.c_str());
    return 130;
  }
  return status_exit_code(report);
}

int submit_and_print(qr::JobSpec job) {
  qr::RunControl control;
  queue::SubmitResult r;
  {
    SignalWatcher watcher(control, "quarry submit (again: published tasks are not duplicated)");
    r = queue::submit(job, control, [](const std::string& m) { spdlog::info("{}", m); });
  }
  std::printf("submitted %zu document(s) to job %s: %zu new task(s), %zu already in the queue (%zu inline); tasks 1..%llu\n",
              r.discovered, job.queue.job.c_str(), r.published, r.duplicates, r.inline_docs,
              static_cast<unsigned long long>(r.tasks_last_seq));
  std::fflush(stdout);
  return control.stop_level.load() > 0 ? 130 : 0;
}

/// Runs `body`, mapping the errors to exit codes (OutdirBusy 2, anything else 1).
template <class F>
void guarded_command(const char* name, Context& ctx, F&& body) {
  try {
    ctx.exit_code = body();
  } catch (const qr::OutdirBusy& e) {
    spdlog::error("{}: {}", name, e.what());
    ctx.exit_code = 2;
  } catch (const std::exception& e) {
    spdlog::error("{}: {}", name, e.what());
    ctx.exit_code = 1;
  }
}

}  // namespace

int execute_over_queue(qr::JobSpec job, const RunArgs& a, const std::string& resume_cmd) {
  qr::resolve_defaults(job);
  queue::check_queue_job(job);
  const int rc = submit_and_print(job);
  if (rc != 0) return rc;
  return collect_and_report(job, a, resume_cmd);
}

void add_queue_commands(CLI::App& app, Context& ctx) {
  {
    auto a = std::make_shared<RunArgs>();
    auto* sub = app.add_subcommand("submit", "Publish one task per document to a job on NATS JetStream (workers do them)");
    sub->footer("Inputs as for `quarry run` (files, folders, glob patterns, or one JOBFILE.toml with [queue]).\n"
                "Submitting again publishes only what is new (tasks are de-duplicated by sha256, task, schema, name).\n"
                "Exit codes: 0 submitted; 1 setup error or the server unreachable; 130 interrupted.");
    sub->add_option("inputs", a->inputs, "Files, folders, glob patterns, or one JOBFILE.toml")->required();
    add_common_options(sub, *a);
    add_queue_options(sub, *a, false, true);
    sub->callback([a, sub, &ctx] {
      guarded_command("submit", ctx, [&] {
        auto job = job_of(*a, sub);
        qr::resolve_defaults(job, false);
        queue::check_queue_job(job);
        return submit_and_print(std::move(job));
      });
    });
  }
  {
    auto a = std::make_shared<RunArgs>();
    auto* sub = app.add_subcommand("worker", "Do the tasks of a job on NATS JetStream: extract, generate, validate, publish");
    sub->footer("Run as many as you like, on any machines that reach the server; each pulls tasks, runs the\n"
                "stages of `quarry run` and publishes the records. Options as for `quarry run` (the schema must be\n"
                "the submit's). A stopped or killed worker's tasks go to the others.\n"
                "Exit codes: 0 stopped (a signal, or --idle-exit); 1 setup error.");
    sub->add_option("jobfile", a->inputs, "JOBFILE.toml (optional: its [engine], [extract], [queue] and schema)");
    add_common_options(sub, *a);
    sub->get_option("--output")->group("");  // hidden: a worker writes to the queue, not to a folder
    add_queue_options(sub, *a, true, false);
    sub->callback([a, sub, &ctx] {
      guarded_command("worker", ctx, [&] {
        if (a->inputs.size() > 1 || (a->inputs.size() == 1 && fs::path(a->inputs[0]).extension() != ".toml"))
          throw std::runtime_error("a worker takes no inputs (they come from the queue), only a JOBFILE.toml");
        if (sub->get_option("--output")->count() > 0)
          throw std::runtime_error("a worker writes its records to the queue: -o OUTDIR is for `quarry collect`");
        auto job = job_of(*a, sub);
        // A scratch folder of its own: the run's lock and ledger, and the documents that came inline.
        remove_stale_scratch(fs::temp_directory_path());
        std::string tmpl = (fs::temp_directory_path() / "quarry-worker-XXXXXX").string();
        if (!::mkdtemp(tmpl.data())) throw std::runtime_error("cannot make a scratch folder in " + fs::temp_directory_path().string());
        job.output = tmpl;
        struct Cleanup {
          fs::path dir;
          ~Cleanup() {
            std::error_code ec;
            fs::remove_all(dir, ec);
          }
        } cleanup{job.output};
        if (job.inputs.empty()) job.inputs = {queue_label(job)};
        qr::resolve_defaults(job);
        queue::check_queue_job(job);
        qr::raise_open_file_limit();
        qr::RunControl control;
        ProgressPrinter printer(a->progress);
        queue::WorkerOptions wo;
        wo.on_progress = [&](const qr::Progress& p) { printer(p); };
        wo.log = [&](const std::string& m) {
          printer.end_line();
          spdlog::info("{}", m);
        };
        qr::RunMetrics m;
        {
          SignalWatcher watcher(control, command_line({"quarry", "worker"}));
          m = queue::run_worker(job, control, wo);
        }
        printer.end_line();
        std::printf("worker: %zu record(s) published in %.1f s: %zu ok, %zu invalid, %zu error\n", m.written, m.wall_s, m.ok,
                    m.invalid, m.error);
        std::fflush(stdout);
        return 0;
      });
    });
  }
  {
    auto a = std::make_shared<RunArgs>();
    auto* sub = app.add_subcommand("collect",
                                   "Write the records of a job on NATS JetStream into OUTDIR (results, ledger, report), "
                                   "exactly once; ends when every submitted task has its record");
    sub->footer("Run it again to resume: what OUTDIR holds is skipped. Exit codes as for `quarry run`.");
    sub->add_option("jobfile", a->inputs, "JOBFILE.toml (optional: its output, schema and [queue])");
    add_common_options(sub, *a);
    add_queue_options(sub, *a, false, false);
    sub->callback([a, sub, &ctx] {
      guarded_command("collect", ctx, [&] {
        if (a->inputs.size() > 1 || (a->inputs.size() == 1 && fs::path(a->inputs[0]).extension() != ".toml"))
          throw std::runtime_error("collect takes no inputs (the records come from the queue), only a JOBFILE.toml");
        auto job = job_of(*a, sub);
        if (job.inputs.empty()) job.inputs = {queue_label(job)};
        qr::resolve_defaults(job);
        queue::check_queue_job(job);
        return collect_and_report(job, *a, command_line(ctx.argv));
      });
    });
  }
}

}  // namespace quarry::cli
