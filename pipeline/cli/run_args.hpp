// The options and helpers `quarry run`, `quarry ask` and the queue roles (`submit`, `worker`,
// `collect`) share: the run's options, the progress display on stderr and the signal handling.
#pragma once

#include <CLI/CLI.hpp>
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "pipeline/run/job.hpp"
#include "pipeline/run/runner.hpp"

namespace quarry::cli {

namespace qr = quarry::run;

/// The options of `quarry run` / `ask` and of the queue roles, as given on the command line.
struct RunArgs {
  std::vector<std::string> inputs;
  std::string task, schema, prompts, model, output, prefer, questions, progress = "auto", compute = "auto", pdf_password,
      device = "auto", grounding = "on";
  std::size_t retries = 0, threads = 0, max_tokens = 0, max_inflight = 0, extract_threads = 0, mtp_depth = 0,
              kv_cache_mb = 0, tensor_parallel = 1, max_context = 0;
  float temperature = 0, retry_temperature = 0;
  std::uint64_t seed = 0;
  bool retry_errors = false;
  bool cross_check = false;
  std::string shard;
  bool no_isolation = false;
  double extract_timeout = 30;
  std::uint64_t extract_memory_mb = 1024, max_file_mb = 256, max_text_mb = 64, max_page_text_mb = 4,
                max_attachment_mb = 32, max_pages = 5000, max_content_mb = 256, max_page_content_mb = 64;
  run::QueueSettings queue;  ///< --queue, --job and the other queue options (add_queue_options)
};

/// `s` quoted for a POSIX shell (as it is when it needs no quotes).
std::string shell_quote(const std::string& s);

/// The command line as given, quoted for a POSIX shell.
std::string command_line(const std::vector<std::string>& argv);

/// The options every job takes (schema, model, engine, extraction limits, progress).
void add_common_options(CLI::App* sub, RunArgs& a);

/// The queue options (NATS server, job name, credentials, TLS, ack wait, max deliveries, ...); `worker`
/// adds --idle-exit, `submit` the inline size (the caller decides with the flags).
void add_queue_options(CLI::App* sub, RunArgs& a, bool worker, bool submit);

/// `quarry run` with a queue (--queue / [queue]): submit the inputs, then collect into OUTDIR while
/// workers elsewhere do the tasks (cmd_queue.cpp). Returns the exit code of `quarry run`.
int execute_over_queue(qr::JobSpec job, const RunArgs& a, const std::string& resume_cmd);

/// Options given on the command line override the job file's values.
void apply_overrides(qr::JobSpec& job, const RunArgs& a, const CLI::App* sub);

/// Progress on stderr: a one-line bar redrawn in place on a terminal, a log line every 5 s otherwise.
class ProgressPrinter {
 public:
  explicit ProgressPrinter(const std::string& mode) {
    const bool tty = ::isatty(STDERR_FILENO) == 1;
    bar_ = mode == "bar" || (mode == "auto" && tty);
    enabled_ = mode != "none";
  }
  void operator()(const qr::Progress& p) {
    if (!enabled_) return;
    const double rate = p.elapsed_s > 0 ? static_cast<double>(p.written) / p.elapsed_s : 0;
    const double tok_s = p.elapsed_s > 0 ? static_cast<double>(p.decode_tokens) / p.elapsed_s : 0;
    const std::size_t left = p.total > p.done ? p.total - p.done : 0;
    std::string eta = "?";
    if (rate > 0 && p.total_known) {
      const auto s = static_cast<long>(static_cast<double>(left) / rate);
      char buf[32];
      std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
      eta = buf;
    }
    const std::string total = std::to_string(p.total) + (p.total_known ? "" : "+");
    if (bar_) {
      constexpr int width = 28;
      const int filled = p.total ? static_cast<int>(width * static_cast<double>(p.done) / static_cast<double>(p.total)) : 0;
      std::string bar(static_cast<std::size_t>(filled), '#');
      bar.resize(width, '.');
      std::fprintf(stderr, "\r[%s] %zu/%s  %.2f docs/s  %.0f tok/s  ETA %s  (ok %zu, invalid %zu, error %zu, skipped %zu) ",
                   bar.c_str(), p.done, total.c_str(), rate, tok_s, eta.c_str(), p.ok, p.invalid, p.error, p.skipped);
      std::fflush(stderr);
      drawn_ = true;
    } else if (p.elapsed_s - last_log_ >= 5.0 || (p.total_known && p.done == p.total && !final_logged_)) {
      last_log_ = p.elapsed_s;
      if (p.total_known && p.done == p.total) final_logged_ = true;
      spdlog::info("run: {}/{} done ({:.2f} docs/s, {:.0f} tok/s, ETA {}; ok {}, invalid {}, error {}, skipped {})", p.done,
                   total, rate, tok_s, eta, p.ok, p.invalid, p.error, p.skipped);
    }
  }
  void end_line() {
    if (drawn_) std::fprintf(stderr, "\n");
    drawn_ = false;
  }

 private:
  bool bar_ = false, enabled_ = true, drawn_ = false, final_logged_ = false;
  double last_log_ = -10;
};

/// SIGINT/SIGTERM are blocked in every thread of the run and taken by one thread with sigtimedwait:
/// no handler, no global state. The first signal stops the run (stop_level 1: nothing new starts, the
/// model requests in flight get RunOptions::stop_grace_s, then are cancelled; then the report). A
/// second signal, or a run still going k_hard_stop_s after the first, exits at once with 130:
/// everything reported done is already durable (the ledger's commit protocol), the next run repairs
/// a torn last line, and the extraction workers die with quarry (PR_SET_PDEATHSIG).
class SignalWatcher {
 public:
  static constexpr double k_hard_stop_s = 4.5;

  SignalWatcher(qr::RunControl& control, std::string resume_cmd) : control_(control), resume_(std::move(resume_cmd)) {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, &old_);
    thread_ = std::thread([this] {
      const timespec timeout{0, 100 * 1000 * 1000};
      int signals = 0;
      std::chrono::steady_clock::time_point first;
      while (!done_) {
        const int sig = sigtimedwait(&set_, nullptr, &timeout);
        if (sig > 0 && ++signals == 1) {
          first = std::chrono::steady_clock::now();
          int zero = 0;
          control_.stop_level.compare_exchange_strong(zero, 1);
          std::fprintf(stderr,
                       "\nquarry: stopping (%s): nothing new starts; the documents in flight get %.0f s to finish"
                       " (press Ctrl-C again to exit at once)\n",
                       sig == SIGTERM ? "SIGTERM" : "SIGINT", qr::RunOptions{}.stop_grace_s);
        } else if (sig > 0) {
          exit_now("a second signal");
        } else if (signals > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - first).count() >
                                      k_hard_stop_s) {
          exit_now("still running 4.5 s after the stop");
        }
      }
    });
  }
  ~SignalWatcher() {
    done_ = true;
    thread_.join();
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  [[noreturn]] void exit_now(const char* why) const {
    std::fprintf(stderr, "\nquarry: exiting at once (%s); everything reported done is saved.\nResume with: %s\n", why,
                 resume_.c_str());
    std::fflush(stderr);
    std::_Exit(130);
  }

  qr::RunControl& control_;
  std::string resume_;
  sigset_t set_{}, old_{};
  std::atomic<bool> done_{false};
  std::thread thread_;
};

/// What a finished run or collect measured and the report it wrote.
struct FinishedRun {
  qr::RunMetrics metrics;
  nlohmann::json report;
};
/// Runs `body` (the local run, or a collect) into job.output with the progress display, the OUTDIR
/// lock and the signal watcher (whose second signal prints `resume_cmd`), then writes the report and
/// prints where results and report are.
FinishedRun run_and_report(const qr::JobSpec& job, const RunArgs& a, const std::string& resume_cmd,
                           const std::function<qr::RunMetrics(qr::RunControl&, const qr::RunOptions&)>& body);
/// The exit code of an output folder as a whole: 2 when a record is invalid or an error, else 0.
int status_exit_code(const nlohmann::json& report);

}  // namespace quarry::cli
