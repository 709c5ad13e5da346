// A job spread over machines on NATS JetStream: three roles over one job name.
//
//   quarry submit  --queue URL --job NAME INPUTS...   discovers the inputs (as `quarry run` does) and
//                  publishes one task per document to the work-queue stream QUARRY_<NAME>_TASKS;
//   quarry worker  --queue URL --job NAME [run options] pulls tasks (any number of workers, on any
//                  machines), runs extract -> build -> engine -> validate (the stages of `quarry run`,
//                  runner.hpp StageHooks) and publishes each record to QUARRY_<NAME>_RESULTS, then acks;
//   quarry collect --queue URL --job NAME -o OUTDIR    reads the results into OUTDIR (results.jsonl, the
//                  ledger, report.json / report.md) exactly once, and ends when every task has its record.
//
// Streams and consumer (created by whichever role comes first, with that role's settings; existing
// ones are used as they are):
//   QUARRY_<NAME>_TASKS    subject quarry.<NAME>.tasks; work-queue retention (a task is deleted when
//                          acked), file storage, duplicate window dedupe_window_s.
//     consumer "workers"   durable pull consumer shared by all workers: explicit ack, AckWait ack_wait_s,
//                          MaxDeliver max_deliver, deliver all, MaxAckPending 10000.
//   QUARRY_<NAME>_RESULTS  subjects quarry.<NAME>.results (records) and quarry.<NAME>.submitted (one
//                          summary per finished submit); limits retention, file storage, same window.
//
// A task's message id (Nats-Msg-Id) is the SHA-256 of (the document's sha256, the task, the schema id,
// the source name): submitting the same documents again within the duplicate window stores nothing new,
// a changed document (another sha256) or another schema is new work, and two files with the same bytes
// under two names are two documents (as in a local run, where the ledger key is the name). The record
// of a task is published to the results stream with the same message id, so a record published twice
// (a worker that finished but died before its ack, and the one that redid the task) is stored once; the
// collector's ledger skips any record (source, sha256) it already holds, beyond the window too.
//
// Task message: headers Nats-Msg-Id and Quarry-Task, a compact JSON object {"v": 1, "source",
// ["source_base64",] "path" | "path_base64", "sha256", "size", "task", "schema", ["problem"],
// "inline"}; the body holds the document's bytes when "inline" is true (documents of at most inline_kb
// KiB and the server's max payload), else it is empty and workers read "path" (an absolute path on
// storage every worker sees). "problem": the submit could not read the file (the worker makes the
// `error` record with this reason).
// Result message: header Nats-Msg-Id (the task's), body {"task_seq", "key", "tokens", "record"}.
// Submit summary: {"tasks_last_seq", "discovered", "published", "duplicates"}.
//
// Acks and redelivery: a worker acks a task only after the record's publish was acknowledged by the
// stream (so a record is never lost); while a task is in the pipeline it sends a progress ack
// (natsMsg_InProgress) every ack_wait_s / 4, so a long document is not redelivered while it is worked
// on. A worker killed (-9) leaves its tasks unacked: they are redelivered after ack_wait_s to another
// worker. A task delivered max_deliver times (each earlier worker died or hung on it) is not tried again:
// that delivery publishes an `error` record (rule `crash`) and acks it.
//
// Completion: collect reads the results stream from its start (a fresh consumer each time: resuming
// is re-reading, with the ledger skipping what is done) and ends when it has seen a submit summary and
// a record for every task sequence number up to the largest summary's tasks_last_seq.
//
// Limits: the kie task only (rag and batch jobs run with `quarry run`, or split with --shard); one
// submit at a time per job name (collect ends with the summaries it has seen), and one collect (each
// recreates the "collect" consumer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "pipeline/run/job.hpp"
#include "pipeline/run/runner.hpp"

namespace quarry::queue {

/// The schema id a task carries: "sha256:" and the first 16 hex digits of the SHA-256 of the schema
/// file's bytes. A worker whose schema has another id refuses the job.
std::string schema_id(const std::string& schema_text);

/// The message id of a document's task and record (see above): 64 hex digits.
std::string task_id(const std::string& sha256, const std::string& task, const std::string& schema, const std::string& source);

/// Checks a job for the queue roles: queue url and job name set, job name valid, task kie, no shard.
/// Throws std::runtime_error with the reason.
void check_queue_job(const run::JobSpec& job);

struct SubmitResult {
  std::size_t discovered = 0;   ///< inputs found
  std::size_t published = 0;    ///< new tasks stored
  std::size_t duplicates = 0;   ///< tasks the stream already had (same message id within the window)
  std::size_t inline_docs = 0;  ///< of published + duplicates: documents that travel in the task
  std::uint64_t tasks_last_seq = 0;
  double wall_s = 0;
};

/// `quarry submit`: discovers job.inputs (discover_stage) and publishes one task per document, then the
/// summary. Publishing is retried through reconnects (the message ids make retries harmless) for up to
/// queue.reconnect_s. Throws QueueError (nats_client.hpp) when the server is unreachable at the start
/// or is lost for longer, std::runtime_error for a setup error (schema missing). `control`: a stop
/// ends it early (without a summary: collect then waits for a later submit).
SubmitResult submit(const run::JobSpec& job, run::RunControl& control,
                    const std::function<void(const std::string&)>& log = {});

/// What a worker needs besides the job.
struct WorkerOptions {
  std::function<void(const std::string&)> log;
  /// Called after each record published and acked (and every ~0.25 s); may be empty.
  std::function<void(const run::Progress&)> on_progress;
};

/// `quarry worker`: runs until `control` stops it (or queue.idle_exit_s without a task). Connects with
/// backoff until the server is up, and reconnects for as long as it takes. job.output is its scratch
/// folder (an empty ledger, documents that came inline); the caller makes and removes it. Returns this
/// worker's counts (records published). Throws std::runtime_error on a setup error (model, schema, a
/// schema that differs from the submitted tasks').
run::RunMetrics run_worker(const run::JobSpec& job, run::RunControl& control, const WorkerOptions& options);

/// `quarry collect`: consumes the results stream into job.output (OUTDIR, locked by the caller or here;
/// the ledger's commit protocol, ledger.hpp) and returns when every submitted task has its record, or
/// when `control` stops it. Progress through options.on_progress. Throws QueueError when the server is
/// unreachable at the start or lost for longer than queue.reconnect_s (what was committed stays).
run::RunMetrics collect(const run::JobSpec& job, run::RunControl& control, const run::RunOptions& options);

}  // namespace quarry::queue
