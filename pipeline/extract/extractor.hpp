// Crash-isolated, resource-limited document extraction for `quarry run`, `ask` and `ingest`.
//
// Document parsing (poppler, libxml2, the HTML and text decoders, attachments) runs in a worker
// process, one per extracting thread, kept between documents and started again after it dies. As
// Apache Tika does (ForkParser / the tika-server watchdog: parse in forked child processes, each with
// a per-file timeout and memory limit, restarted when they fail), a document that crashes the parser,
// runs past its time or memory, or extracts past a limit costs that one document, never the batch:
//
//   wall time    Limits::timeout_s per document (default 30 s): the parent waits with poll(2) and
//                SIGKILLs the worker at the deadline            -> "timeout after 30 s"
//   memory       Limits::memory_mb (default 1024 MiB): RLIMIT_AS in the worker (allocations fail
//                beyond it), and the parent reads the worker's RSS every 50 ms and SIGKILLs it
//                beyond the limit (the backstop that holds where RLIMIT_AS cannot be used, e.g.
//                under AddressSanitizer)                        -> "memory limit 1024 MiB"
//   crash        the worker died by a signal                     -> "crashed: SIGSEGV"
//   extracted    ExtractOptions caps checked on what the extractors return: text per page
//   text/pages/  (max_page_text_bytes), per document (max_text_bytes), pages (max_pages), every
//   attachments  attachment's inflated bytes (max_attachment_bytes), file size (max_file_bytes)
//                (the extractors apply them too, where they can stop early)
//
// Why fork + exec of the program itself (`PROGRAM extract-worker FD`) and not fork alone: the parent
// is multithreaded (ZeroMQ I/O threads, the engine's thread pool, spdlog), and a forked copy of a
// multithreaded process may only call async-signal-safe functions until it execs (a lock held by
// another thread at fork time, e.g. inside malloc, stays locked forever in the child). After exec the
// worker is a fresh single-threaded process that holds nothing of the parent: no model weights, no
// ledger, no OUTDIR lock (every descriptor but the channel is closed), its own process group (a
// Ctrl-C at the terminal reaches quarry, which stops its workers), and PR_SET_PDEATHSIG so that it
// dies with the thread that started it. A small separate helper binary would do as well, but would
// have to be found next to quarry at run time; the program itself is always at /proc/self/exe.
//
// Protocol over a socketpair (AF_UNIX, SOCK_STREAM), frames of [u64 length][MessagePack payload]:
//   parent -> worker: the settings once; then per document a request {source} carrying the open file
//                     descriptor (SCM_RIGHTS): the worker reads the very file the parent checked.
//   worker -> parent: "ready" once; then per document a reply {status, rule, reason, sha256,
//                     media_type, size} and, when ok, a second frame with the Document
//                     (document_codec.hpp).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "extractors/document.hpp"
#include "pipeline/extract/document_codec.hpp"

namespace quarry::extract {

/// The limits the parent enforces on a worker, per document.
struct Limits {
  double timeout_s = 30;            ///< wall time per document, seconds (0: none)
  std::uint64_t memory_mb = 1024;   ///< worker address space / resident memory, MiB (0: none)
};

struct Settings {
  ExtractOptions options;  ///< what the extractors take: caps, PDF password, e-invoice mapping
  Limits limits;
  bool isolation = true;   ///< false: extract in the calling thread (no time or memory limit; for benchmarks)
  /// The worker program: it must call maybe_run_worker() first thing in main(). Empty: /proc/self/exe
  /// (the running program, e.g. `quarry`).
  std::string worker_program;
};

/// What extracting one document gave.
struct Outcome {
  enum class Status { ok, failed, cancelled };
  Status status = Status::failed;
  ExtractedDocument extracted;  ///< ok: the document
  std::string sha256;           ///< of the bytes extracted (empty when they could not be read)
  std::string media_type;       ///< detected from the content, when known
  std::uint64_t size = 0;       ///< file size in bytes
  /// failed: "read" (the file), "extract" (the extractor refused it), "limit" (timeout, memory, caps)
  /// or "crash" (the worker died).
  std::string rule;
  std::string reason;           ///< failed: in words a user can act on (e.g. "timeout after 30 s")
  double ms = 0;                ///< wall time, milliseconds
};

/// No worker process can be started at all (the program cannot be run, or it does not answer): a
/// setup problem of the run, not of a document.
class WorkerStartError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Extracts documents one at a time, in a worker process (Settings::isolation) or in the calling
/// thread. One per thread, not thread-safe: the worker dies with the thread that started it
/// (PR_SET_PDEATHSIG), so an Extractor used from another thread starts a worker of its own.
class Extractor {
 public:
  explicit Extractor(Settings settings);
  ~Extractor();  ///< kills the worker (SIGKILL) and reaps it
  Extractor(const Extractor&) = delete;
  Extractor& operator=(const Extractor&) = delete;

  /// Extracts the regular file open at `fd` (read from offset 0; the descriptor stays the caller's).
  /// `source` names the document in errors. `cancelled` is polled every 50 ms while a worker runs:
  /// when it says true the worker is killed and the outcome is `cancelled`. Throws WorkerStartError
  /// only when no worker can be started at all (a setup problem, e.g. the program cannot be run).
  Outcome extract(int fd, const std::string& source, const std::function<bool()>& cancelled = {});

  /// The running worker's pid (0 when none): for tests.
  pid_t worker_pid() const;

 private:
  struct Worker;
  /// Starts a worker: socketpair, fork, exec `program extract-worker 3`, settings, wait for "ready".
  static std::unique_ptr<Worker> spawn(const Settings& settings);
  Settings settings_;
  std::unique_ptr<Worker> worker_;
};

/// The caps of ExtractOptions checked on an extracted document: empty when within them, else the
/// reason ("page 3: 5000000 bytes of text, more than the limit of 4 MiB per page", ...).
std::string check_caps(const Document& doc, const ExtractOptions& options);

/// If argv[1] is "extract-worker": runs the worker loop on the descriptor argv[2] and returns its exit
/// status (0 when the parent closed the channel). Otherwise nullopt. Call first thing in main().
std::optional<int> maybe_run_worker(int argc, char** argv);

}  // namespace quarry::extract
