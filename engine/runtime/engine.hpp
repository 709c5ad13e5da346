// The engine's public API: load a model folder, run generation requests (batched together), read stats.
//
//   auto tok = Tokenizer::from_dir(dir);
//   auto engine = Engine::open(dir, tok, {.n_threads = 4});
//   GenerationRequest req;
//   req.prompt = tok->encode(tok->apply_chat_template(messages));
//   req.max_tokens = 256;
//   GenerationResult r = engine->generate(req);   // r.tokens, r.text, r.finish, r.stats
//
// Continuous batching (Orca, Yu et al. 2022; vLLM's scheduler): requests are submitted at any time,
// wait in a queue, are admitted into the running set as KV blocks and max_num_seqs allow, and every
// step() is one forward call carrying the decode token of each running sequence plus prefill chunks
// of the others (chunked prefill, Sarathi-Serve; up to max_batch_tokens tokens per call):
//
//   RequestId a = engine->submit(req_a), b = engine->submit(req_b);
//   while (engine->has_unfinished())
//     for (FinishedRequest& f : engine->step()) use(f.id, f.result);
//
// generate() is submit-all + step-until-done. Prompts that start with token blocks computed before
// (by a finished or running request) reuse their KV blocks instead of recomputing them (prefix
// caching, see engine/memory/kv_cache.hpp); the waiting queue is ordered by longest cached prefix first
// (SGLang's LPM policy), with a bound on how often a request can be passed over.
//
// Engine is a thin facade (vLLM v1's EngineCore) over the runtime's parts: the Scheduler (queues,
// admission, the typed schedule of each step), the ModelRunner (model, backend, KV cache), the
// StructuredOutput manager (grammars and token bitmasks), the MTP drafter and the Sampler.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/backend/backend.hpp"
#include "engine/core/constraint.hpp"
#include "engine/core/stopwatch.hpp"
#include "engine/models/model.hpp"
#include "engine/runtime/sampler.hpp"
#include "engine/runtime/stats.hpp"
#include "engine/tokenizer/tokenizer.hpp"

namespace quarry::engine {

namespace grammar {
class TokenizerInfo;
}  // namespace grammar
class ModelRunner;
struct BackendSampling;
class Scheduler;
class StructuredOutput;
struct Sequence;
struct SchedulerOutput;

/// EngineOptions::max_batch_tokens when 0: on the CPU (host memory) and on a GPU.
inline constexpr std::size_t kHostBatchTokens = 256, kDeviceBatchTokens = 2048;

struct EngineOptions {
  /// Where the model runs (Engine::open): cpu, cuda:N (engine/backend/backend.hpp parse_device).
  DeviceSpec device;
  std::size_t n_threads = 0;            ///< CPU worker threads incl. the caller; 0: all hardware threads
  /// Devices the model is split over (tensor parallelism, engine/models/parallel.hpp): 1 runs it on
  /// `device`; N > 1 on cuda:index .. cuda:index+N-1 (N simulated ranks on the CPU, each with
  /// n_threads / N threads: the same split, for tests). The KV-cache budget (kv_cache_mb) is per device.
  std::size_t tensor_parallel = 1;
  std::size_t max_kv_tokens = 65536;    ///< KV-cache capacity in tokens over all sequences (allocated on use)
  /// Tokens per forward call (bounds a prefill chunk); 0: the backend's default, kHostBatchTokens on the
  /// CPU, kDeviceBatchTokens on a GPU (whose products read every weight once per call: quantized ones are
  /// dequantized once per call, so short chunks multiply that cost).
  std::size_t max_batch_tokens = 0;
  /// KV-cache budget in MiB (2^20 bytes) of K and V over all layers (in the cache's dtype); 0:
  /// max_kv_tokens alone decides. With both set, the smaller capacity wins. Blocks are allocated on use up to it.
  /// Hybrid models: the budget holds the recurrent states first (max_num_seqs of them, twice with MTP,
  /// plus max_state_snapshots), the K/V blocks get the rest; Engine::open throws std::invalid_argument when
  /// nothing is left.
  std::size_t kv_cache_mb = 0;
  /// Keep full blocks of committed tokens after their requests end and reuse them for prompts that
  /// start with the same tokens (vLLM automatic prefix caching). Outputs are unchanged by it.
  bool enable_prefix_caching = true;
  /// Hybrid models (recurrent state): a prefix is resumable only where a snapshot of the state was kept.
  /// Prefill chunks end at every multiple of this many tokens (rounded up to whole KV blocks) and the
  /// state there is kept (at most max_state_snapshots, least recently used dropped), so a later prompt
  /// with the same start recomputes fewer than this many of its shared tokens. 0: no snapshots (no
  /// prefix reuse for such models).
  std::size_t state_snapshot_tokens = 1024;
  /// Snapshots kept at most; 0: as many as fit in 2 GiB of the device's memory, between 1 and 32 (a
  /// snapshot holds KvSpec::state_floats f32 values: about 156 MB for Qwen3.5-122B-A10B, 79 MB for
  /// Qwen3-Next-80B-A3B).
  std::size_t max_state_snapshots = 0;
  /// Sequences in the running set at most (more wait in the queue); clamped to [1, max_batch_tokens].
  std::size_t max_num_seqs = 64;
  /// MTP speculative decoding: the most drafts per verify step (0: off). The depth used per sequence
  /// adapts to its recent acceptance up to this cap, which is also capped by the model's MTP module
  /// (Model::mtp_depths(); no module: off). Output is unchanged (lossless), only faster.
  std::size_t mtp_depth = 0;
  /// MTP drafts are chosen among the first token ids only (byte-level BPE ids run roughly by frequency;
  /// FR-Spec, Zhao et al. 2025): 0 = auto (max(vocab / 4, min(vocab, 4096))); >= vocab: all ids.
  std::size_t mtp_draft_vocab = 0;
  /// How the model computes (engine/models/model.hpp Compute): automatic = in the checkpoint's dtype
  /// (bf16 on the AMX tiles for a bf16 checkpoint where available), exact = f32, bf16 = bf16 where available.
  Compute compute = Compute::automatic;
  /// When every logit row of a step is constrained, the LM head is computed only for the groups of 16
  /// token ids that hold an allowed one (Model::forward lm_head_groups; where the backend computes them
  /// bit-identically to the full product: the CPU under bf16 compute). Output unchanged; false computes
  /// every logit.
  bool grammar_lm_head = true;
  /// Greedy sampling where the logits are: a step whose logit rows are all greedy (temperature 0, with
  /// drafts or not) has each row's argmax among the ids its token bitmask allows taken by the backend
  /// (Backend::argmax_rows, the masks of the whole batch in one upload), and only the ids come back
  /// instead of every logit row. Output unchanged (the sampler's order: the first of the largest).
  /// automatic: on for backends whose memory is not the host's (GPUs); on: on every backend; off: never.
  enum class OnBackend : std::uint8_t { automatic, on, off };
  OnBackend greedy_on_backend = OnBackend::automatic;
  /// Sampling where the logits are: a step with rows of temperature > 0 (and no MTP drafting, whose
  /// lossless verification needs the distributions on the host) has every row's id drawn by the backend
  /// (Backend::sample_rows: the sampler's filters, a Gumbel-max draw keyed from the request's seeded
  /// stream, the masks of the whole batch in one upload) and only the ids come back. The draws follow
  /// the same distribution as the host sampler's but are other draws: a seeded request gives the same
  /// tokens on every backend that samples (up to the last bit of the logits), not those of the host
  /// sampler. automatic: on for backends whose memory is not the host's (GPUs); on: everywhere; off: never.
  OnBackend sample_on_backend = OnBackend::automatic;
  /// Grounded decoding: with a request's document text (GenerationRequest::document_pages), values of
  /// schema locations annotated `x-quarry-source` can only be what the document says
  /// (engine/grammar/grounding.hpp). false ignores the annotation.
  bool grounding = true;
  /// Run every forward call op by op: no decode step is recorded and replayed (CUDA graphs), as vLLM's
  /// enforce_eager. For debugging and for measuring what the recording saves; output unchanged.
  bool enforce_eager = false;
  /// Optional log sink for one-line messages (model loaded, cache sizes); the engine has no logger.
  std::function<void(std::string_view)> log = {};
};

struct GenerationRequest {
  std::vector<TokenId> prompt;          ///< token ids, non-empty, each < vocab_size
  std::size_t max_tokens = 256;         ///< generated tokens at most (the stop token counts)
  SamplingParams sampling;
  std::vector<std::string> stop;        ///< stop strings (matched on the decoded text; needs a tokenizer)
  std::vector<TokenId> stop_token_ids;  ///< extra stop tokens besides the model's EOS ids
  bool ignore_eos = false;              ///< do not stop at EOS ids (benchmarks)
  std::shared_ptr<TokenConstraint> constraint;  ///< optional
  /// Optional JSON Schema text (used when `constraint` is null): the output is constrained to JSON
  /// valid for it (compact, properties in schema order; engine/grammar/json_schema.hpp). Needs a
  /// tokenizer. A schema the compiler rejects fails generate() with std::invalid_argument carrying
  /// the compiler's message -- never silently unconstrained. Compiled grammars are cached per engine.
  std::string json_schema;
  bool json_schema_lenient = false;  ///< ignore unsupported schema keywords (with a warning) instead of failing
  /// The document the output is about, one string per page (grounded decoding of `json_schema`'s
  /// `x-quarry-source` locations; see EngineOptions::grounding). Empty: not grounded.
  std::vector<std::string> document_pages;
  /// Jump-forward (with a constraint): text the grammar forces is tokenized and appended without
  /// sampling (RequestStats::forced_tokens). Faster, but the tokens then differ from the model's own
  /// choices, so off by default (greedy output stays the argmax over the allowed tokens).
  bool jump_forward = false;
  /// Optional: called after each generated token with its id (streaming).
  std::function<void(TokenId)> on_token;
  /// Per-request MTP draft depth cap (see EngineOptions::mtp_depth, which bounds it); unset: the engine's.
  std::optional<std::size_t> mtp_depth;
};

enum class FinishReason { length, eos, stop_string, constraint, cancelled };
const char* finish_reason_name(FinishReason r);

struct GenerationResult {
  std::vector<TokenId> tokens;  ///< generated ids, including the EOS / stop token that ended it
  std::string text;             ///< decoded text of the tokens (special tokens skipped), cut before a stop string
  FinishReason finish = FinishReason::length;
  RequestStats stats;
};

/// What a compiled JSON Schema leaves to a validator after generation ("<pointer>: <message>" each).
struct JsonSchemaNotes {
  std::vector<std::string> warnings;        ///< keywords ignored while decoding (lenient compile)
  std::vector<std::string> not_enforced;    ///< constraints the grammar does not enforce exactly
};

/// Handle of a submitted request (unique per Engine, from 1).
using RequestId = std::uint64_t;

/// A request that left the engine in a step(): done, cancelled or failed.
struct FinishedRequest {
  RequestId id = 0;
  GenerationResult result;  ///< tokens/text/finish/stats as generate() returns them
  /// Non-empty: the request failed (e.g. its prompt does not fit the KV cache, "cancelled" for
  /// cancel()); `result` holds what was generated until then.
  std::string error;
};

/// Not thread-safe: one thread drives an Engine (the scheduler); its backend parallelises each op.
class Engine {
 public:
  /// Loads the model in `dir` (see load_model) on options.device. `tokenizer` may be null: then stop
  /// strings are not available and `text` stays empty. Throws std::runtime_error naming the file on load
  /// errors, or the device when it cannot be used.
  static std::unique_ptr<Engine> open(const std::filesystem::path& dir, std::shared_ptr<const Tokenizer> tokenizer,
                                      const EngineOptions& options = {});
  /// An engine over a loaded model (on the model's backend; options.device and n_threads are not used).
  Engine(std::unique_ptr<Model> model, std::shared_ptr<const Tokenizer> tokenizer, const EngineOptions& options,
         std::vector<TokenId> eos_ids = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Runs one request to completion. Throws std::invalid_argument on an empty prompt, an id out of
  /// the vocabulary, stop strings without a tokenizer, a JSON Schema that does not compile;
  /// std::runtime_error if the KV cache cannot hold the sequence.
  GenerationResult generate(const GenerationRequest& request);

  /// Runs all requests together as one continuous batch (submit all, step until they are done);
  /// results in request order. All requests are validated before any runs. Other requests already
  /// submitted keep running alongside; their FinishedRequests are returned by the next step().
  /// Throws like generate(request); on a failure the call's other requests are dropped.
  std::vector<GenerationResult> generate(std::span<const GenerationRequest> requests);

  // ---- continuous batching ----
  /// Queues a request; it runs in the following step() calls. Validates now: throws
  /// std::invalid_argument like generate(). Its stats' TTFT counts from this call.
  RequestId submit(GenerationRequest request);
  /// One scheduler iteration: finishes cancelled requests, admits waiting ones (KV budget,
  /// max_num_seqs, longest cached prefix first), then runs at most one forward call over the running
  /// set and samples. Returns the requests that finished in it (in no particular order). A request
  /// that can never fit the KV cache finishes with an error instead of waiting forever. If the
  /// model's forward call throws, the exception propagates and the running requests are left
  /// mid-step: cancel them (or discard the engine).
  std::vector<FinishedRequest> step();
  /// Anything waiting or running (or finished but not yet returned by step()).
  bool has_unfinished() const;
  std::size_t n_running() const;
  std::size_t n_waiting() const;
  /// Finishes the request at the next step() with FinishReason::cancelled and error "cancelled"
  /// (partial result). Unknown or already finished ids are ignored.
  void cancel(RequestId id);

  const Model& model() const;
  /// The options in force: those given, with the defaults that depend on the backend resolved
  /// (max_batch_tokens 0 -> kHostBatchTokens or kDeviceBatchTokens).
  const EngineOptions& options() const { return options_; }
  /// The backend the model runs on.
  Backend& backend() const;
  /// Token ids that end generation (config.json, generation_config.json and the tokenizer's).
  const std::vector<TokenId>& eos_ids() const { return eos_ids_; }
  /// Totals since construction (kv_* fields: the cache's state after the last step()).
  const EngineStats& stats() const { return stats_; }
  /// The paged KV cache (block tables, allocator state, prefix-cache counters).
  const KvCache& kv_cache() const;
  /// The grammar vocabulary of this engine (the tokenizer's byte strings; EOS = eos_ids()), built on
  /// first use. Throws std::invalid_argument without a tokenizer.
  std::shared_ptr<const grammar::TokenizerInfo> grammar_vocabulary();
  /// A fresh constraint for `schema_text` (compiled once per schema text and options, then cached).
  /// Throws std::invalid_argument with the compiler's message if the schema cannot be compiled.
  std::shared_ptr<TokenConstraint> json_schema_constraint(std::string_view schema_text, bool lenient = false);
  /// The same, grounded in a document (one string per page) when EngineOptions::grounding is on, the pages
  /// are not empty and the schema has `x-quarry-source` locations (engine/grammar/grounding.hpp: the
  /// per-request structure is built here, milliseconds for ten pages).
  std::shared_ptr<TokenConstraint> json_schema_constraint(std::string_view schema_text, bool lenient,
                                                          const std::vector<std::string>& document_pages);
  /// What the compiled grammar of `schema_text` leaves to a validator (compiled as
  /// json_schema_constraint(schema_text, lenient) compiles it, cached). Throws like it.
  JsonSchemaNotes json_schema_notes(std::string_view schema_text, bool lenient = false);

 private:
  void validate(const GenerationRequest& r) const;
  /// MTP drafting state of a newly admitted sequence (when drafting is on and its constraint can roll back).
  void start_drafting(Sequence& s);
  /// MTP drafts for the running sequences in decode (before the scheduler adds them to the batch).
  void draft_step();
  /// MTP rows of a prompt chunk just computed (MtpDrafter::catch_up), before its first token is timed.
  void mtp_catch_up(Sequence& s);
  /// Samples / verifies each sequence's logit rows and appends its tokens; returns the tokens emitted.
  /// `ids` (when not empty): every logit row's id picked by the backend (its argmax, or its draw, among
  /// its allowed ids), used instead of the logits.
  std::size_t sample_outputs(const SchedulerOutput& sched, std::span<const float> logits, std::span<const TokenId> ids,
                             std::span<const float> hidden);
  /// BackendSampling for this step when the backend may pick every logit row's id: every row greedy and
  /// greedy_on_backend applies, or sample_on_backend applies and no sequence with rows of temperature > 0
  /// drafts (with constrained rows: a build_masks that writes the step's masks into step_masks_); null
  /// otherwise.
  BackendSampling* backend_sampling(const SchedulerOutput& sched, BackendSampling& out);
  /// Appends `tok` to the output (callbacks, text, stop conditions); true if the sequence finished.
  /// `constraint_seen`: the constraint already accepted it (an accepted draft).
  bool append_token(Sequence& s, TokenId tok, bool sampled, bool constraint_seen = false);
  /// EOS (unless ignore_eos) or one of the request's stop ids.
  bool is_end_token(const Sequence& s, TokenId tok) const;

  std::shared_ptr<const Tokenizer> tokenizer_;
  EngineOptions options_;
  std::vector<TokenId> eos_ids_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<StructuredOutput> structured_;
  std::size_t mtp_depth_ = 0;        ///< MTP draft depth cap (KV layers reserved for it)
  std::size_t mtp_draft_vocab_ = 0;  ///< drafts among token ids below this
  std::size_t snapshot_every_ = 0;   ///< hybrid models: prompt positions between recurrent-state snapshots (0: none)
  bool greedy_on_backend_ = false;   ///< EngineOptions::greedy_on_backend resolved for the backend
  bool sample_on_backend_ = false;   ///< EngineOptions::sample_on_backend resolved for the backend
  std::vector<std::uint32_t> step_masks_;  ///< the step's bitmasks of every logit row (ids picked by the backend)
  std::vector<RowSampling> step_rows_;     ///< the step's sampling of every logit row (drawn by the backend)
  EngineStats stats_;
  Stopwatch clock_;
  RequestId next_request_id_ = 1;
  std::vector<FinishedRequest> backlog_;  ///< finished inside generate() for other callers
  double step_draft_s_ = 0.0;             ///< seconds spent drafting this step
};

}  // namespace quarry::engine
