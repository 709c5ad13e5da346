// `quarry run`: the pipeline stages, connected by ZeroMQ inproc PUSH/PULL sockets with small
// high-water marks, so that a slow stage blocks the ones before it (backpressure) and the number of
// documents held in memory stays bounded whatever the number of inputs:
//
//   discover (1 thread) -> extract (thread pool) -> build task (1) -> engine worker (1) -> validate (1) -> write (1)
//                                                     \__ e-invoice mapper records ______/      |  ^
//                                                                                                 retry (another seed /
//                                                                                                 temperature)
// One file per stage (stage_*.cpp, declared in stages.hpp) behind a small coordinator (runner.cpp);
// the stages exchange the typed messages of messages.hpp. Every discovered input ends in exactly one
// message to the writer per record key (a record, a "skipped: already in the ledger" notice or,
// after a cancel, a "cancelled" notice); the writer ends the run when discovery is over and every
// expected key was accounted for.
//
// Records: one JSON line each in OUTDIR/results.jsonl (records.hpp gives the format).
//
// The batch task (OpenAI Batch files, batch.hpp) skips extract: discover reads the request lines and
// sends them to build, which parses each body (pipeline/openai); the engine worker and validate use the
// request's own schema and sampling; at the end of the run OUTDIR/output.jsonl is rebuilt.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include <zmq.hpp>

#include "pipeline/run/job.hpp"
#include "pipeline/run/ledger.hpp"
#include "pipeline/run/outdir.hpp"

namespace quarry::run {

/// Set from outside (the CLI's signal thread). 1 = stop: nothing new starts (documents not yet in the
/// engine, extractions in progress and retries are cancelled); the model requests in flight get
/// RunOptions::stop_grace_s to finish, then the run moves to 2 by itself. 2 = cancel everything in
/// flight. Documents not finished are simply not in the ledger: a rerun does them.
struct RunControl {
  std::atomic<int> stop_level{0};
};

/// Seconds of work per stage (summed over the stage's threads) and totals of this run.
struct RunMetrics {
  double wall_s = 0;
  double discover_s = 0, extract_s = 0, build_s = 0, engine_s = 0, validate_s = 0, write_s = 0;
  std::size_t discovered = 0;     ///< input files found
  std::size_t expected = 0;       ///< record keys expected (files x questions for rag)
  std::size_t written = 0;        ///< records committed by this run
  std::size_t ok = 0, invalid = 0, error = 0;
  std::size_t retryable = 0;      ///< of `error`: caused by the run's settings (not done: the next run redoes them)
  std::size_t skipped = 0;        ///< already in the ledger
  std::size_t other_shards = 0;   ///< documents of the other shards (JobSpec::shard_count > 1): not this run's
  std::size_t cancelled = 0;
  std::size_t retries = 0;        ///< extra model attempts
  std::size_t model_requests = 0;
  std::uint64_t prompt_tokens = 0, prefill_tokens = 0, cached_tokens = 0, decode_tokens = 0;
  std::uint64_t draft_tokens = 0, accepted_tokens = 0;
  bool interrupted = false;
  Recovery recovery;
};

/// A progress snapshot for display.
struct Progress {
  std::size_t done = 0, total = 0;  ///< records handled (written + skipped + cancelled) / expected so far
  bool total_known = false;         ///< discovery finished
  std::size_t written = 0, ok = 0, invalid = 0, error = 0, skipped = 0;
  double elapsed_s = 0;
  std::uint64_t decode_tokens = 0;
};

namespace stages {
struct Shared;
}

/// Another source and sink for the run's stages (the queue worker, pipeline/queue/queue.hpp): `source`
/// replaces discover (it sends InputMsg to `to_extract`, counts Shared::discovered, and may open its own
/// sockets on `zctx`, e.g. to ep_write); `sink` replaces write (it receives every RecordMsg and NoticeMsg
/// from `in` and returns when the run is over, or when Shared::failed). Neither uses OUTDIR's ledger.
/// Extract, build, engine and validate run as in a local run.
struct StageHooks {
  std::function<void(stages::Shared& sh, zmq::socket_t& to_extract, zmq::context_t& zctx)> source;
  std::function<void(stages::Shared& sh, zmq::socket_t& in, RunMetrics& m)> sink;
};

struct RunOptions {
  /// Called from the writer thread after each commit and every ~0.25 s; may be empty.
  std::function<void(const Progress&)> on_progress;
  /// One-line log messages (model loaded, recovery, warnings); may be empty.
  std::function<void(const std::string&)> log;
  /// The caller's lock on job.output (held beyond the run, e.g. while the report is written); null:
  /// run_job takes the lock itself for the run.
  const OutdirLock* lock = nullptr;
  /// After a stop (stop_level 1), seconds the model requests in flight get before they are cancelled.
  double stop_grace_s = 2.0;
  /// Null: discover and write (a local run). Else the hooks replace them (kie and rag tasks only).
  const StageHooks* hooks = nullptr;
};

/// Runs the job to completion (or until `control` stops it). Throws std::runtime_error for setup
/// failures (model, schema, output folder) and OutdirBusy when another process holds job.output;
/// every per-document problem becomes a record instead.
RunMetrics run_job(const JobSpec& job, RunControl& control, const RunOptions& options = {});

}  // namespace quarry::run
