// A job of `quarry run` / `quarry ask`: what to read, what to extract, with which model, where to write.
//
// Built from command-line options or from a TOML job file (toml++). Job file keys (all optional except
// `inputs` and `output`; relative paths are relative to the job file's folder):
//
//   inputs  = ["invoices", "more/*.pdf"]   # files, folders (walked recursively), or glob(3) patterns
//   task    = "kie"                        # "kie" (one record per document), "rag" (per document x question) or
//                                          # "batch" (OpenAI Batch files: one record per request line; chosen by
//                                          # itself when an input is such a .jsonl file and no task is given)
//   schema  = "schemas/invoice.schema.json"  # default: invoice (kie) or rag_answer (rag) of the shipped schemas
//   prompts = "prompts.json"               # prompt templates; default: the model folder's prompts.json
//   questions = "questions.txt"            # rag only: one question per line, or JSON lines with "question"
//   model   = "models/quarry-extract-11m"  # default: the shipped default model
//   output  = "out"                        # the output folder (results.jsonl, report.json, report.md, ledger)
//   prefer  = "auto"                       # "auto": structured e-invoices take the mapper; "model": all go to the model
//   cross_check = false                    # with prefer = "model": compare the model's values of a document that
//                                          # carries an e-invoice XML with the XML's (schemas/cross_check.hpp)
//   retries = 2                            # extra model attempts (another seed and temperature) before `invalid`
//   retry_errors = false                   # redo every `error` record of OUTDIR (not only those caused by settings)
//   shard   = "0/3"                        # this run does shard I of N (0 <= I < N): the documents whose sha256 says so
//   [queue]   url, job, creds, user, password, token, tls, tls_ca, tls_cert, tls_key, ack_wait_s (60),
//             max_deliver (4), inline_kb (512), dedupe_window_s (7200), reconnect_s (60), idle_exit_s (0)
//             (the roles `quarry submit` / `worker` / `collect` on one NATS JetStream job: pipeline/queue/queue.hpp)
//   [engine]  threads, max_tokens, max_inflight, mtp_depth, temperature, retry_temperature, seed, grounding, kv_cache_mb,
//             compute, device, tensor_parallel, max_context, state_snapshot_tokens, max_state_snapshots
//   [extract] threads, pdf_password, isolation (true), timeout_s (30), memory_mb (1024), max_file_mb (256),
//             max_text_mb (64), max_page_text_mb (4), max_attachment_mb (32), max_pages (5000),
//             max_content_mb (256), max_page_content_mb (64)
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace quarry::run {

enum class Task { kie, rag, batch };
enum class Prefer { automatic, model };

const char* task_name(Task t);

struct EngineSettings {
  std::size_t threads = 0;          ///< engine worker threads (0: all hardware threads)
  std::size_t max_tokens = 2048;    ///< output tokens per request at most (clamped to the context left)
  std::size_t max_inflight = 4;     ///< requests the engine worker keeps in flight (one continuous batch)
  std::size_t mtp_depth = 0;        ///< MTP draft depth cap (0: off; EngineOptions::mtp_depth)
  std::size_t kv_cache_mb = 0;      ///< KV-cache budget in MiB (0: engine default)
  /// Context the run plans prompts for, in tokens (0: the model's max_position_embeddings; larger
  /// values are clamped to it). A kie document whose prompt and output do not fit it is extracted over
  /// windows and merged (pipeline/run/chunked.hpp); rag retrieves chunks within it.
  std::size_t max_context = 0;
  std::string compute = "auto";     ///< auto | exact | bf16 (engine/core/types.hpp Compute)
  std::string device = "auto";      ///< cpu | cuda | cuda:N | auto (a GPU when present; EngineOptions::device)
  std::size_t tensor_parallel = 1;  ///< devices the model is split over (EngineOptions::tensor_parallel)
  /// Hybrid models' prefix reuse: prompt positions between recurrent-state snapshots, and the most kept
  /// (EngineOptions::state_snapshot_tokens / max_state_snapshots; 0 tokens: no snapshots; 0 snapshots:
  /// as many as 2 GiB hold, at most 32).
  std::size_t state_snapshot_tokens = 1024, max_state_snapshots = 0;
  float temperature = 0.f;          ///< first attempt (0: greedy)
  float retry_temperature = 0.7f;   ///< later attempts
  std::uint64_t seed = 0;           ///< seed of attempt i is seed + i
  /// Grounded decoding (EngineOptions::grounding): values at `x-quarry-source` locations of the schema
  /// can only be what the document says; records get `evidence` checked by rule:evidence.
  bool grounding = true;
};

/// How documents are read: in worker processes with per-document limits (pipeline/extract/extractor.hpp)
/// and the caps of ExtractOptions (extractors/document.hpp). Defaults are the README's.
struct ExtractSettings {
  std::string pdf_password;          ///< tried as owner and user password of encrypted PDFs
  bool isolation = true;             ///< extract in worker processes (false: in the run's threads, no time/memory limit)
  double timeout_s = 30;             ///< wall time per document, seconds (0: none)
  std::uint64_t memory_mb = 1024;    ///< memory of an extraction worker, MiB (0: none)
  std::uint64_t max_file_mb = 256;   ///< larger inputs are refused, MiB
  std::uint64_t max_text_mb = 64;    ///< extracted text per document, MiB
  std::uint64_t max_page_text_mb = 4;   ///< extracted text per page, MiB
  std::uint64_t max_content_mb = 256;     ///< PDF content streams a document may decode, MiB
  std::uint64_t max_page_content_mb = 64; ///< PDF content streams one page may decode, MiB
  std::uint64_t max_attachment_mb = 32; ///< one embedded file's inflated bytes, MiB
  std::uint64_t max_pages = 5000;    ///< pages per document
};

/// A distributed job on NATS JetStream (`quarry submit`, `quarry worker`, `quarry collect`;
/// pipeline/queue/queue.hpp describes the streams and the consumer). Durations in seconds.
struct QueueSettings {
  std::string url;                 ///< nats://HOST:PORT (tls://HOST:PORT for TLS; several separated by commas)
  std::string job;                 ///< the job's name: [A-Za-z0-9_-], at most 64 characters
  std::string creds;               ///< a NATS credentials file (JWT and NKey seed), as `nsc` writes it
  std::string user, password;      ///< user and password authentication
  std::string token;               ///< token authentication
  bool tls = false;                ///< require TLS (also on with a tls:// URL or any tls_* file)
  std::string tls_ca;              ///< CA certificates (PEM) to verify the server with
  std::string tls_cert, tls_key;   ///< client certificate chain and key (PEM), for mutual TLS
  double ack_wait_s = 60;          ///< a task not acked (nor progress-acked) within this is redelivered
  std::size_t max_deliver = 4;     ///< deliveries of a task at most; the last one becomes an `error` record
  std::size_t inline_kb = 512;     ///< documents up to this size travel in the task (larger: by path, shared storage)
  double dedupe_window_s = 7200;   ///< the streams' duplicate window (message ids remembered this long)
  double reconnect_s = 60;         ///< submit / collect: how long to keep reconnecting before failing
  double idle_exit_s = 0;          ///< worker: exit after this long without a task (0: never)
  bool enabled() const { return !url.empty() || !job.empty(); }
};

struct JobSpec {
  std::vector<std::string> inputs;  ///< paths, folders, glob patterns (as the user wrote them)
  Task task = Task::kie;
  bool task_set = false;            ///< the task was given (job file or --task); else resolve_defaults may pick batch
  std::filesystem::path schema;     ///< empty: the shipped default for the task
  std::filesystem::path prompts;    ///< empty: model/prompts.json
  std::filesystem::path questions;  ///< rag: the questions file
  std::filesystem::path model;      ///< empty: quarry::default_model_dir()
  std::filesystem::path output;     ///< required
  Prefer prefer = Prefer::automatic;
  /// With prefer == model (task kie): a document that carries a structured e-invoice is read by the
  /// model as any other, and each field of its output is compared with the e-invoice's mapped value
  /// (schemas/cross_check.hpp). `data` stays the model's; disagreements are the record's warnings
  /// (rule:cross_check), its `cross_check` member holds the counts and the XML's values.
  bool cross_check = false;
  std::size_t retries = 2;
  bool retry_errors = false;        ///< redo every `error` record (errors caused by settings are always redone)
  std::size_t extract_threads = 2;
  ExtractSettings extract;
  EngineSettings engine;
  /// Deterministic sharding (Slurm arrays, Kubernetes indexed jobs): this run does the documents of shard
  /// shard_index of shard_count (shard_of_sha256); the others are left to the other shards' runs.
  std::size_t shard_index = 0, shard_count = 1;
  QueueSettings queue;  ///< the [queue] table: only the roles of a distributed job read it
};

/// Parses "I/N" (0 <= I < N, N >= 1) into (I, N). Throws std::invalid_argument with the reason.
std::pair<std::size_t, std::size_t> parse_shard(const std::string& text);
/// The shard of a document among `count`: the first 64 bits of its sha256 (hex) modulo count; a
/// document that could not be read (no sha256) goes by the FNV-1a hash of its name.
std::size_t shard_of(const std::string& sha256_hex, const std::string& source, std::size_t count);

/// Reads a TOML job file (format above). Throws std::runtime_error naming the file and the key on a
/// parse error, an unknown key, or a value of the wrong type or range.
JobSpec load_job_file(const std::filesystem::path& path);

/// Open files one extract thread may hold at once (SQLite ledger reader and its journals 3, ZeroMQ
/// sockets 3, extraction worker channel 1, the input 1, /proc reads 1, margin 3).
inline constexpr std::size_t k_open_files_per_extract_thread = 12;
/// Open files kept for everything else (engine, ledger, ZeroMQ context, standard streams).
inline constexpr std::size_t k_open_files_reserved = 256;
/// Extract threads per hardware thread at most (extraction is CPU-bound: more only add memory and files).
inline constexpr std::size_t k_extract_threads_per_core = 4;

/// Clamps the settings this machine cannot honour, each with a warning (returned, to be logged):
/// extract threads to min(4 x `hardware_threads`, (`open_files` - 256) / 12) and at least 1, so that
/// no thread fails with "Too many open files"; engine threads to `hardware_threads` (more only
/// oversubscribes the cores). `open_files`: the soft RLIMIT_NOFILE.
std::vector<std::string> fit_to_machine(JobSpec& job, std::size_t hardware_threads, std::uint64_t open_files);

/// fit_to_machine() with this machine's hardware threads and soft open-file limit.
std::vector<std::string> fit_to_this_machine(JobSpec& job);

/// Raises the soft open-file limit (RLIMIT_NOFILE) to the hard one; returns the soft limit now.
std::uint64_t raise_open_file_limit();

/// Fills the defaults that need the file system (model folder, schema, prompts) and checks the job.
/// Without a task given, picks `batch` when an input looks like an OpenAI Batch file
/// (openai::looks_like_batch_file); a batch job's inputs must be regular files (no folders or patterns).
/// throws std::runtime_error with a clear message for missing inputs/output, an unknown task, a
/// missing model folder, schema, prompts or questions file, and for cross_check without prefer =
/// "model" or with a task other than kie.
/// `needs_output` false: no output folder is required (`quarry submit`, which writes none).
void resolve_defaults(JobSpec& job, bool needs_output = true);

}  // namespace quarry::run
