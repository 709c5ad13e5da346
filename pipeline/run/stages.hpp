// The stages of `quarry run` (see runner.hpp for the picture), one file each (stage_*.cpp), and what
// they share: the run's state (Shared), the ZeroMQ endpoints and a few helpers. The coordinator
// (runner.cpp) binds the receiving sockets, starts one thread per stage (extract: one per
// --extract-threads), runs the writer on its own thread and stops everything with zmq ctx shutdown.
//
// Every stage loops "receive a Message, handle it, send Messages on" until the context is shut down
// (ETERM); a per-document problem becomes a record, anything else fails the run (Shared::set_fatal).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "engine/tokenizer/tokenizer.hpp"
#include "pipeline/extract/extractor.hpp"
#include "pipeline/rag/rag.hpp"
#include "pipeline/run/job.hpp"
#include "pipeline/run/ledger.hpp"
#include "pipeline/run/messages.hpp"
#include "pipeline/run/prompts.hpp"
#include "pipeline/run/records.hpp"
#include "pipeline/run/runner.hpp"
#include "schemas/validate.hpp"

namespace quarry::run {

class EngineWorker;

namespace stages {

// Endpoints: each is bound by its receiving stage (in the coordinator, before the threads start).
inline constexpr const char* ep_extract = "inproc://extract";
inline constexpr const char* ep_build = "inproc://build";
inline constexpr const char* ep_engine = "inproc://engine";
inline constexpr const char* ep_retry = "inproc://retry";
inline constexpr const char* ep_validate = "inproc://validate";
inline constexpr const char* ep_write = "inproc://write";

/// kie: a document whose output ran past max_tokens is cut into windows of at most half, then a
/// quarter, then an eighth of its text (ExtractedMsg::output_splits), and no further.
inline constexpr std::size_t kMaxOutputSplits = 3;

/// A socket with send and receive high-water marks `hwm` (0: unbounded) and no linger.
zmq::socket_t make_socket(zmq::context_t& ctx, zmq::socket_type type, int hwm);

inline bool is_term(const zmq::error_t& e) { return e.num() == ETERM; }

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Accumulates busy seconds of one stage across threads.
class StageClock {
 public:
  void add(double s) { us_.fetch_add(static_cast<std::int64_t>(s * 1e6), std::memory_order_relaxed); }
  double seconds() const { return static_cast<double>(us_.load()) * 1e-6; }

 private:
  std::atomic<std::int64_t> us_{0};
};

/// One question of a rag job, as records name it.
struct QuestionRef {
  std::string id, text;
};

/// Shared state of one run (owned by run_job; every stage thread gets a reference).
struct Shared {
  Shared(const JobSpec& j, RunControl& c, const RunOptions& o) : job(j), control(c), options(o) {}
  const JobSpec& job;
  RunControl& control;
  const RunOptions& options;
  std::vector<QuestionRef> questions;  ///< rag: the questions; empty for kie
  std::size_t units_per_doc = 1;       ///< record keys per document (questions for rag)
  std::atomic<std::size_t> discovered{0};
  std::atomic<bool> discover_done{false};
  StageClock discover_clock, extract_clock, build_clock, engine_clock, validate_clock, write_clock;
  std::mutex fatal_mu;
  std::string fatal;
  std::atomic<bool> failed{false};

  void set_fatal(const std::string& what) {
    std::lock_guard<std::mutex> lock(fatal_mu);
    if (fatal.empty()) fatal = what;
    failed = true;
    control.stop_level = 2;
  }
  void log(const std::string& msg) const {
    if (options.log) options.log(msg);
  }
  int stop() const { return control.stop_level.load(); }
  /// The subject of unit `q` (a question for rag, the document for kie) of a document.
  Subject unit(Subject doc, std::size_t q) const {
    if (!questions.empty()) {
      doc.question_id = questions[q].id;
      doc.question = questions[q].text;
    }
    doc.key = record_key(doc.source, doc.question_id);
    return doc;
  }
};

/// What the build stage needs besides the document.
struct BuildContext {
  std::shared_ptr<const engine::Tokenizer> tokenizer;
  PromptTemplates prompts;
  /// A user's own schema (not the invoice schema) with a model that has the "schema" template: the
  /// prompt shows this text (schema_for_prompt) and e-invoice XML is not mapped; empty otherwise.
  std::string schema_prompt;
  std::size_t context_tokens = 0;  ///< the model's max_position_embeddings
  /// --cross-check with the invoice schema: model tasks of documents with an e-invoice carry its mapping.
  bool cross_check = false;
  std::vector<rag::Question> rag_questions;
  rag::RagTemplate rag_template;
};

/// The extraction settings of a job (limits, caps, password, isolation).
extract::Settings extract_settings(const JobSpec& job);

/// discover: walks the inputs and sends one InputMsg per file to `out` (ep_extract).
void discover_stage(Shared& sh, zmq::socket_t& out);

/// discover (batch task): reads the batch files line by line (BatchScanner); per request line a
/// "skipped" notice (done in the ledger), an error record (a line that is not a request, a duplicate
/// custom_id) or a BatchRequestMsg to build. The sockets (connected to ep_build and ep_write) are the
/// coordinator's: they outlive the stage, so that nothing sent is dropped when it returns (linger 0).
void batch_discover_stage(Shared& sh, zmq::socket_t& to_build, zmq::socket_t& to_writer);

/// extract (one per extract thread): InputMsg -> ExtractedMsg (build), or a record / notice (write).
void extract_stage(Shared& sh, zmq::socket_t in, zmq::context_t& zctx);
/// build task: ExtractedMsg -> MappedMsg (validate), ModelTaskMsg(s) (engine) or records (write).
void build_stage(Shared& sh, zmq::socket_t in, zmq::context_t& zctx, const BuildContext& bc);
/// engine: ModelTaskMsg (new, and retries first) -> GeneratedMsg (validate); keeps up to max_inflight in flight.
void engine_stage(Shared& sh, zmq::socket_t tasks_in, zmq::socket_t retry_in, zmq::context_t& zctx,
                  EngineWorker& worker);
/// validate: MappedMsg / GeneratedMsg -> RecordMsg (write), or a retry ModelTaskMsg (engine).
void validate_stage(Shared& sh, zmq::socket_t in, zmq::context_t& zctx, const schemas::Validator& validator,
                    const nlohmann::ordered_json& schema);
/// write: group commits of records (results.jsonl + fdatasync, then the ledger), counts, progress.
/// Returns when every expected record key is accounted for (or the run failed).
void write_stage(Shared& sh, zmq::socket_t& in, Ledger& ledger, RunMetrics& m,
                 std::chrono::steady_clock::time_point start);

/// Runs a stage's body: nothing escapes it (ETERM is a normal end; anything else fails the run).
template <class F>
void guarded(Shared& sh, const char* stage, F&& body) {
  try {
    body();
  } catch (const zmq::error_t& e) {
    if (!is_term(e)) sh.set_fatal(std::string(stage) + ": " + e.what());
  } catch (const std::exception& e) {
    sh.set_fatal(std::string(stage) + ": " + e.what());
  } catch (...) {
    sh.set_fatal(std::string(stage) + ": unknown error");
  }
}

}  // namespace stages
}  // namespace quarry::run
