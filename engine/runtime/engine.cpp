#include "engine/runtime/engine.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "engine/grammar/matcher.hpp"
#include "engine/models/tensor_parallel.hpp"
#include "engine/runtime/model_runner.hpp"
#include "engine/runtime/scheduler.hpp"
#include "engine/runtime/sequence.hpp"
#include "engine/runtime/speculative.hpp"
#include "engine/runtime/structured_output.hpp"

namespace quarry::engine {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::length: return "length";
    case FinishReason::eos: return "eos";
    case FinishReason::stop_string: return "stop";
    case FinishReason::constraint: return "constraint";
    case FinishReason::cancelled: return "cancelled";
  }
  return "?";
}

namespace {

/// eos_token_id of generation_config.json (int or list), if the file is there and has it.
std::vector<TokenId> generation_config_eos(const std::filesystem::path& dir) {
  std::vector<TokenId> ids;
  std::ifstream in(dir / "generation_config.json");
  if (!in) return ids;
  auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("eos_token_id")) return ids;
  const auto& e = j["eos_token_id"];
  if (e.is_number_integer()) ids.push_back(e.get<TokenId>());
  else if (e.is_array())
    for (const auto& v : e)
      if (v.is_number_integer()) ids.push_back(v.get<TokenId>());
  return ids;
}

/// Prefix-cache salt of a model: its config.json hyper-parameters and weight size, so that blocks
/// of two differently shaped or configured models never share keys. (Each Engine owns its KvCache,
/// so within one process blocks are never shared across engines in any case.)
std::uint64_t model_salt(const Model& m) {
  const auto& c = m.config();
  std::vector<TokenId> words;
  auto put = [&](std::uint64_t v) {
    words.push_back(static_cast<TokenId>(v & 0x7fffffff));
    words.push_back(static_cast<TokenId>((v >> 31) & 0x7fffffff));
  };
  for (char ch : c.architecture + "/" + c.model_type + "/" + c.torch_dtype + "/" + c.hidden_act) put(static_cast<unsigned char>(ch));
  for (std::size_t v : {c.vocab_size, c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.num_attention_heads,
                        c.num_key_value_heads, c.head_dim, c.max_position_embeddings, m.weight_bytes_per_step()})
    put(v);
  for (double d : {c.rms_norm_eps, c.rope_theta, c.partial_rotary_factor}) {
    std::uint64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    put(bits);
  }
  put(c.tie_word_embeddings);
  put(c.attention_bias);
  return hash_block(0x717561727279ULL, words);
}

}  // namespace

std::unique_ptr<Engine> Engine::open(const std::filesystem::path& dir, std::shared_ptr<const Tokenizer> tokenizer,
                                     const EngineOptions& options) {
  std::unique_ptr<Model> model;
  if (options.tensor_parallel <= 1) {
    model = load_model(dir, make_backend({options.device, options.n_threads}), options.compute);
  } else {
    const std::size_t N = options.tensor_parallel;
    std::vector<std::shared_ptr<Backend>> backends;
    for (std::size_t r = 0; r < N; ++r) {
      DeviceSpec d = options.device;
      if (d.kind == DeviceSpec::Kind::cuda) d.index += static_cast<int>(r);
      const std::size_t all = options.n_threads ? options.n_threads : std::thread::hardware_concurrency();
      const std::size_t threads = std::max<std::size_t>(1, all / N);  // CPU ranks share the cores
      backends.push_back(make_backend({d, threads}));
    }
    model = load_model_parallel(dir, std::move(backends), options.compute);
  }
  std::vector<TokenId> eos = generation_config_eos(dir);
  return std::make_unique<Engine>(std::move(model), std::move(tokenizer), options, std::move(eos));
}

Engine::Engine(std::unique_ptr<Model> model, std::shared_ptr<const Tokenizer> tokenizer, const EngineOptions& options,
               std::vector<TokenId> eos_ids)
    : tokenizer_(std::move(tokenizer)), options_(options), eos_ids_(std::move(eos_ids)) {
  for (auto id : model->config().eos_token_ids) eos_ids_.push_back(static_cast<TokenId>(id));
  if (tokenizer_)
    for (auto id : tokenizer_->eos_ids()) eos_ids_.push_back(id);
  std::sort(eos_ids_.begin(), eos_ids_.end());
  eos_ids_.erase(std::unique(eos_ids_.begin(), eos_ids_.end()), eos_ids_.end());
  // MTP draft depths beyond the cap get no KV layers.
  mtp_depth_ = std::min(options_.mtp_depth, model->mtp_depths());
  if (mtp_depth_ > 0) {
    stats_.draft_proposed.assign(mtp_depth_, 0);
    stats_.draft_accepted.assign(mtp_depth_, 0);
  }
  if (options_.max_batch_tokens == 0)
    options_.max_batch_tokens = model->backend().host_memory() ? kHostBatchTokens : kDeviceBatchTokens;
  const std::size_t V = model->config().vocab_size;
  greedy_on_backend_ = options_.greedy_on_backend == EngineOptions::OnBackend::on ||
                       (options_.greedy_on_backend == EngineOptions::OnBackend::automatic &&
                        !model->backend().host_memory());
  sample_on_backend_ = options_.sample_on_backend == EngineOptions::OnBackend::on ||
                       (options_.sample_on_backend == EngineOptions::OnBackend::automatic &&
                        !model->backend().host_memory());
  std::size_t draft_vocab = options_.mtp_draft_vocab;
  if (draft_vocab == 0) draft_vocab = std::max(V / 4, std::min<std::size_t>(V, 4096));
  mtp_draft_vocab_ = std::min(draft_vocab, V);
  ModelRunnerOptions ro;
  ro.max_kv_tokens = options_.max_kv_tokens;
  ro.kv_cache_mb = options_.kv_cache_mb;
  ro.mtp_layers = mtp_depth_;
  ro.enforce_eager = options_.enforce_eager;
  // A model with recurrent state (hybrid) resumes a cached prefix only from a snapshot of its state:
  // taken every state_snapshot_tokens positions of a prompt, where prefill chunks end.
  const KvSpec spec = model->kv_spec();
  const bool stateful = spec.state_floats > 0;
  if (stateful && options_.state_snapshot_tokens > 0)
    snapshot_every_ = (options_.state_snapshot_tokens + spec.block_size - 1) / spec.block_size * spec.block_size;
  ro.prefix.enabled = options_.enable_prefix_caching && (!stateful || snapshot_every_ > 0);
  ro.prefix.salt = model_salt(*model);
  ro.prefix.max_state_snapshots = options_.max_state_snapshots;
  if (stateful && ro.prefix.max_state_snapshots == 0)  // auto: what 2 GiB hold, 1 to 32
    ro.prefix.max_state_snapshots =
        std::clamp<std::size_t>((std::size_t{2} << 30) / (spec.state_floats * sizeof(float)), 1, 32);
  SchedulerOptions so;
  so.max_batch_tokens = options_.max_batch_tokens;
  so.max_num_seqs = options_.max_num_seqs;
  if (stateful)  // a state and its saved copy per running sequence, and the snapshots
    ro.state_slots =
        so.running_limit() * (mtp_depth_ > 0 ? 2 : 1) + (ro.prefix.enabled ? ro.prefix.max_state_snapshots : 0);
  runner_ = std::make_unique<ModelRunner>(std::move(model), ro);
  if (runner_->kv().prefix_options().enabled) so.prefill_align = snapshot_every_;
  scheduler_ = std::make_unique<Scheduler>(runner_->kv(), so, stats_, clock_);
  structured_ = std::make_unique<StructuredOutput>(tokenizer_, eos_ids_, V);
  stats_.kv_max_blocks = runner_->kv().allocator().max_blocks();
  if (options_.log) {
    const Model& m = runner_->model();
    const auto& c = m.config();
    const KvCache& kv = runner_->kv();
    options_.log("engine: " + c.architecture + ", " + std::to_string(c.num_hidden_layers) + " layers, hidden " +
                 std::to_string(c.hidden_size) + ", vocab " + std::to_string(c.vocab_size) + ", " +
                 std::to_string(m.weight_bytes_per_step() / 1000000) + " MB of weights per step, on " +
                 m.backend().description() + ", compute " + compute_name(m.compute()) + ", KV cache " +
                 std::to_string(kv.allocator().max_blocks() * kv.spec().block_size) + " tokens (" +
                 std::to_string(kv.allocator().max_blocks() * kv.bytes_per_block() >> 20) + " MiB " +
                 dtype_name(kv.spec().dtype) + "), prefix caching " +
                 (!kv.prefix_options().enabled ? (stateful ? "off (recurrent state, no snapshots)" : "off")
                  : stateful ? "on (recurrent state kept every " + std::to_string(snapshot_every_) +
                                   " prompt tokens, at most " + std::to_string(kv.prefix_options().max_state_snapshots) +
                                   " snapshots of " +
                                   std::to_string(kv.spec().state_floats * sizeof(float) >> 20) + " MiB)"
                             : "on"));
    if (!c.not_loaded.empty()) options_.log("engine: not loaded: " + c.not_loaded);
  }
}

Engine::~Engine() = default;

const Model& Engine::model() const { return runner_->model(); }
Backend& Engine::backend() const { return runner_->backend(); }
const KvCache& Engine::kv_cache() const { return runner_->kv(); }

std::shared_ptr<const grammar::TokenizerInfo> Engine::grammar_vocabulary() { return structured_->vocabulary(); }

std::shared_ptr<TokenConstraint> Engine::json_schema_constraint(std::string_view schema_text, bool lenient) {
  return structured_->json_schema_constraint(schema_text, lenient);
}

std::shared_ptr<TokenConstraint> Engine::json_schema_constraint(std::string_view schema_text, bool lenient,
                                                                const std::vector<std::string>& document_pages) {
  static const std::vector<std::string> kNone;
  return structured_->json_schema_constraint(schema_text, lenient, options_.grounding ? document_pages : kNone);
}

JsonSchemaNotes Engine::json_schema_notes(std::string_view schema_text, bool lenient) {
  return structured_->json_schema_notes(schema_text, lenient);
}

// ---------------------------------------------------------------- requests

void Engine::validate(const GenerationRequest& r) const {
  const std::size_t V = runner_->model().config().vocab_size;
  if (r.prompt.empty()) throw std::invalid_argument("generate: empty prompt");
  for (TokenId t : r.prompt)
    if (t < 0 || static_cast<std::size_t>(t) >= V)
      throw std::invalid_argument("generate: prompt token id " + std::to_string(t) + " outside the vocabulary (" +
                                  std::to_string(V) + ")");
  if (!r.stop.empty() && !tokenizer_) throw std::invalid_argument("generate: stop strings need a tokenizer");
}

RequestId Engine::submit(GenerationRequest request) {
  validate(request);
  std::shared_ptr<TokenConstraint> constraint = request.constraint;
  if (!constraint && !request.json_schema.empty())
    constraint = json_schema_constraint(request.json_schema, request.json_schema_lenient, request.document_pages);
  auto s = std::make_unique<Sequence>(next_request_id_++, std::move(request));
  s->constraint = std::move(constraint);
  s->t_submit = clock_.seconds();
  s->tokens = s->req.prompt;
  s->result.stats.prompt_tokens = s->n_prompt();
  if (runner_->kv().prefix_options().enabled) s->prompt_keys = runner_->kv().block_hashes(s->req.prompt);
  if (s->req.max_tokens == 0) {
    s->done = true;
    s->result.finish = FinishReason::length;
  }
  const RequestId id = s->id;
  scheduler_->add(std::move(s));
  return id;
}

bool Engine::has_unfinished() const { return scheduler_->has_unfinished() || !backlog_.empty(); }
std::size_t Engine::n_running() const { return scheduler_->running().size(); }
std::size_t Engine::n_waiting() const { return scheduler_->waiting().size(); }
void Engine::cancel(RequestId id) { scheduler_->cancel(id); }

// ---------------------------------------------------------------- drafting and outputs

void Engine::start_drafting(Sequence& s) {
  // MTP drafting from the first computed position (the cached prefix's MTP rows are reused as they
  // are: at worst lower acceptance, never other output).
  const std::size_t cap = std::min(s.req.mtp_depth.value_or(mtp_depth_), mtp_depth_);
  if (cap > 0 && !(s.constraint && !s.constraint->supports_rollback())) {
    s.mtp = std::make_unique<MtpState>(cap, runner_->model().config().hidden_size, s.n_computed);
    s.mtp_cap = cap;
    s.result.stats.draft_proposed.assign(cap, 0);
    s.result.stats.draft_accepted.assign(cap, 0);
  }
}

bool Engine::append_token(Sequence& s, TokenId tok, bool sampled, bool constraint_seen) {
  s.result.tokens.push_back(tok);
  s.tokens.push_back(tok);
  if (sampled && !constraint_seen && s.constraint) s.constraint->accept(tok);
  if (s.req.on_token) s.req.on_token(tok);
  if (tokenizer_ && !tokenizer_->is_special(tok) && static_cast<std::size_t>(tok) < tokenizer_->vocab_size())
    s.result.text += tokenizer_->token_bytes(tok);
  if (!sampled) return false;  // forced (jump-forward) tokens end nothing
  const bool is_eos = !s.req.ignore_eos && std::binary_search(eos_ids_.begin(), eos_ids_.end(), tok);
  const bool is_stop_id =
      std::find(s.req.stop_token_ids.begin(), s.req.stop_token_ids.end(), tok) != s.req.stop_token_ids.end();
  if (is_eos || is_stop_id) {
    scheduler_->finish(s, FinishReason::eos);
    return true;
  }
  // Stop strings: search only the tail that the new token can have completed.
  std::size_t longest = 0;
  for (const auto& stop : s.req.stop) {
    if (stop.empty()) continue;
    longest = std::max(longest, stop.size());
    const auto at = s.result.text.find(stop, s.stop_scan_from);
    if (at != std::string::npos) {
      s.result.text.resize(at);
      scheduler_->finish(s, FinishReason::stop_string);
      return true;
    }
  }
  if (longest > 0 && s.result.text.size() >= longest) s.stop_scan_from = s.result.text.size() - longest + 1;
  return false;
}

bool Engine::is_end_token(const Sequence& s, TokenId tok) const {
  const bool is_eos = !s.req.ignore_eos && std::binary_search(eos_ids_.begin(), eos_ids_.end(), tok);
  return is_eos ||
         std::find(s.req.stop_token_ids.begin(), s.req.stop_token_ids.end(), tok) != s.req.stop_token_ids.end();
}

void Engine::mtp_catch_up(Sequence& s) {
  const Stopwatch w;
  DraftJob j;
  j.seq = s.kv;
  j.state = s.mtp.get();
  j.token_at = [&s](std::size_t i) { return s.tokens[i]; };
  j.n_committed = s.tokens.size();
  MtpDrafter drafter(runner_->model(), runner_->kv(), mtp_draft_vocab_);
  stats_.mtp_rows += drafter.catch_up(j);
  stats_.prefill_s += w.seconds();
}

void Engine::draft_step() {
  step_draft_s_ = 0.0;
  std::vector<DraftJob*> jobs;
  std::size_t left = scheduler_->options().max_batch_tokens;  // decode rows come first, in running order
  for (const auto& sp : scheduler_->running()) {
    Sequence& s = *sp;
    s.drafted = false;
    s.has_logits = false;
    s.has_step_mask = false;
    s.n_rows = 0;
    if (s.done || s.prefilling() || left == 0) continue;
    const std::size_t need = s.tokens.size() - s.n_computed;
    left -= std::min(left, need);
    if (!s.mtp || need != 1) continue;
    std::size_t k = std::min({s.mtp->choose_depth(s.mtp_cap), s.req.max_tokens - s.result.tokens.size() - 1, left});
    if (k > 0 && !runner_->kv().reserve(s.kv, s.tokens.size() + k)) k = 0;
    left -= k;
    DraftJob& j = s.job;
    j.seq = s.kv;
    j.state = s.mtp.get();
    j.token_at = [&s](std::size_t i) { return s.tokens[i]; };
    j.n_committed = s.tokens.size();
    j.max_drafts = k;
    j.sampler = &s.sampler;
    j.constraint = s.constraint.get();
    j.ends_sequence = [this, &s](TokenId t) { return is_end_token(s, t); };
    j.mask_words = structured_->mask_words();
    s.drafted = true;
    jobs.push_back(&j);
  }
  if (jobs.empty()) return;
  const Stopwatch w;
  MtpDrafter drafter(runner_->model(), runner_->kv(), mtp_draft_vocab_);
  stats_.mtp_rows += drafter.draft(jobs);
  step_draft_s_ = w.seconds();
  stats_.draft_s += step_draft_s_;
}

BackendSampling* Engine::backend_sampling(const SchedulerOutput& sched, BackendSampling& out) {
  const std::size_t n_logits = sched.batch.n_logits();
  if (n_logits == 0) return nullptr;
  bool masked = false, sampled = false;
  for (const Sequence* s : sched.logit_owners) {
    if (s->sampler.params().temperature != 0.f) {
      if (!sample_on_backend_ || s->mtp) return nullptr;
      sampled = true;
    }
    masked = masked || (s->constraint && !s->done);
  }
  if (!sampled && !greedy_on_backend_) return nullptr;
  out = BackendSampling{};
  if (sampled) {  // one key a row from its sequence's seeded stream; greedy rows stay argmax
    step_rows_.assign(n_logits, RowSampling{});
    for (Sequence* s : sched.logit_owners) {
      const SamplingParams& p = s->sampler.params();
      if (p.temperature == 0.f || s->done) continue;
      step_rows_[s->logit_first] = RowSampling{p.temperature, static_cast<std::uint32_t>(std::min<std::size_t>(p.top_k, 0xffffffffu)),
                                               p.top_p, p.min_p, s->sampler.next_key()};
    }
    out.rows = step_rows_;
  }
  if (!masked) return &out;
  // Built while the device runs the step: every row allows everything but those of constrained
  // sequences, which take their k + 1 masks of this step.
  out.build_masks = [this, &sched, n_logits](BackendSampling& g) {
    const std::size_t W = structured_->mask_words();
    step_masks_.assign(n_logits * W, 0xffffffffu);
    for (Sequence* sp : sched.logit_owners) {
      Sequence& s = *sp;
      if (!s.constraint || s.done) continue;
      const auto masks = structured_->step_masks(s);
      const std::size_t rows = (s.drafted ? s.job.drafts.size() : 0) + 1;
      for (std::size_t j = 0; j < rows && j < masks.size(); ++j) {
        if (masks[j].size() < W) throw std::logic_error("backend_sampling: a step mask is shorter than the vocabulary");
        std::copy_n(masks[j].begin(), W, step_masks_.begin() + static_cast<std::ptrdiff_t>((s.logit_first + j) * W));
      }
    }
    g.masks = step_masks_;
    g.mask_words = W;
  };
  return &out;
}

std::size_t Engine::sample_outputs(const SchedulerOutput& sched, std::span<const float> logits,
                                   std::span<const TokenId> ids, std::span<const float> hidden) {
  const std::size_t V = runner_->model().config().vocab_size, H = runner_->model().config().hidden_size;
  std::size_t emitted = 0;
  // Prefill chunks before the prompt's end: only their hidden states (for the MTP module).
  for (const auto& sp : scheduler_->running()) {
    Sequence& s = *sp;
    if (!s.done && s.mtp && s.n_rows > 0 && !s.has_logits && !hidden.empty()) {
      s.mtp->push_main_hidden(hidden.data() + s.row_first * H, s.n_rows, s.pos_first);
      mtp_catch_up(s);
    }
  }
  for (Sequence* sp : sched.logit_owners) {
    Sequence& s = *sp;
    if (s.done) continue;
    const bool prefill_rows = s.pos_first < s.n_prompt();
    const std::size_t k = s.drafted ? s.job.drafts.size() : 0;
    const std::size_t C = s.tokens.size();  // committed tokens; the last one was just fed
    std::span<const std::vector<std::uint32_t>> masks;
    if (s.constraint) masks = structured_->step_masks(s);
    VerifyResult r;
    const bool want_bonus = !(s.drafted && s.job.ended && k > 0);
    if (!ids.empty()) {  // ids picked by the backend: argmax rows (with drafts or not) or one drawn row
      r = verify_greedy(ids.subspan(s.logit_first, k + 1), std::span<const TokenId>(s.job.drafts.data(), k), want_bonus);
    } else if (!s.mtp && !s.constraint) {
      const std::span<const float> rows(logits.data() + s.logit_first * V, V);
      r.next = s.sampler.sample(rows);
    } else {
      const std::span<const float> rows(logits.data() + s.logit_first * V, (k + 1) * V);
      r = verify_drafts(s.sampler, rows, V, masks, std::span<const TokenId>(s.job.drafts.data(), k),
                        std::span<const TokenDistribution>(s.job.dists.data(), s.drafted ? s.job.dists.size() : 0),
                        want_bonus);
    }
    const std::size_t m = r.n_accepted;
    if (s.mtp && !hidden.empty())  // main hidden states of the rows holding committed tokens
      s.mtp->push_main_hidden(hidden.data() + s.row_first * H, prefill_rows ? s.n_rows : s.n_rows - (k - m),
                              s.pos_first);
    if (s.mtp && prefill_rows) mtp_catch_up(s);
    if (s.t_first < 0) {
      s.t_first = clock_.seconds();
      s.result.stats.ttft_s = s.t_first - s.t_submit;
    }
    if (s.mtp && !prefill_rows) {
      auto& st = s.result.stats;
      ++st.verify_steps;
      ++stats_.verify_steps;
      st.draft_tokens += k;
      st.accepted_tokens += m;
      stats_.draft_tokens += k;
      stats_.accepted_tokens += m;
      if (s.drafted) {
        st.forced_drafts += s.job.n_forced;
        stats_.forced_drafts += s.job.n_forced;
      }
      for (std::size_t j = 0; j < k; ++j) {
        ++st.draft_proposed[j];
        ++stats_.draft_proposed[j];
        if (j < m) {
          ++st.draft_accepted[j];
          ++stats_.draft_accepted[j];
        }
      }
      if (k > 0) s.mtp->record(k, m);
    }
    if (s.constraint && k > m) s.constraint->rollback(k - m);
    // The accepted drafts (already seen by the constraint), then the target's token.
    bool finished = false;
    for (std::size_t j = 0; j < m && !finished; ++j) {
      finished = append_token(s, s.job.drafts[j], /*sampled=*/true, /*constraint_seen=*/true);
      ++emitted;
    }
    if (finished) continue;
    if (r.next >= 0) {
      ++emitted;
      if (append_token(s, r.next, /*sampled=*/true)) continue;
    } else if (!(s.drafted && s.job.ended && k > 0 && m == k)) {  // the constraint allows nothing
      scheduler_->finish(s, FinishReason::constraint);
      continue;
    }
    // Rejected drafts leave the KV cache (positions from C + m on); accepted ones are computed. A
    // hybrid model's recurrent state went through the rejected ones too: back to its copy from before
    // the step, and the rows from the step's first position are fed again (the accepted drafts with
    // the new token) -- their K/V rows are rewritten with the same values.
    s.n_computed = C + m;
    if (k > m && runner_->kv().spec().state_floats > 0) {
      runner_->kv().restore_state(s.kv);
      s.n_computed = s.pos_first;
    }
    if (k > m) runner_->kv().truncate(s.kv, s.n_computed);
    if (s.constraint && s.req.jump_forward && s.result.tokens.size() < s.req.max_tokens) {
      auto forced = s.constraint->take_forced_tokens();
      forced.resize(std::min(forced.size(), s.req.max_tokens - s.result.tokens.size()));
      for (TokenId f : forced) append_token(s, f, /*sampled=*/false);
      s.result.stats.forced_tokens += forced.size();
      stats_.forced_tokens += forced.size();
    }
    if (s.constraint && s.constraint->is_terminated()) {
      scheduler_->finish(s, FinishReason::constraint);
      continue;
    }
    if (s.result.tokens.size() >= s.req.max_tokens) scheduler_->finish(s, FinishReason::length);
  }
  return emitted;
}

// ---------------------------------------------------------------- step

std::vector<FinishedRequest> Engine::step() {
  std::vector<FinishedRequest> out = std::move(backlog_);
  backlog_.clear();
  scheduler_->finish_cancelled();
  scheduler_->retire(out);
  for (Sequence* s : scheduler_->admit()) start_drafting(*s);
  scheduler_->retire(out);

  draft_step();
  const SchedulerOutput sched = scheduler_->schedule();
  KvCache& kv = runner_->kv();
  if (!sched.empty()) {
    const Batch& batch = sched.batch;
    // Hidden states for the MTP module when a drafting sequence has rows in the batch.
    const bool want_hidden = std::any_of(sched.scheduled.begin(), sched.scheduled.end(),
                                         [](const ScheduledSequence& e) { return e.seq->mtp != nullptr; });
    const Stopwatch watch;
    std::vector<std::uint32_t> groups;
    if (options_.grammar_lm_head && runner_->model().supports_lm_head_groups())
      groups = structured_->lm_head_groups(sched.logit_owners, batch.n_logits());
    // Hybrid models: the recurrent state of each sequence verifying drafts is copied aside first.
    if (kv.spec().state_floats > 0)
      for (const auto& e : sched.scheduled)
        if (e.n_drafts > 0) kv.save_state(e.seq->kv);
    const std::size_t replays_before = runner_->replays();
    BackendSampling picks;
    BackendSampling* picks_here = backend_sampling(sched, picks);
    const ModelOutput result = runner_->execute(batch, want_hidden, groups, picks_here);
    if (picks_here && picks_here->rows.empty()) ++stats_.greedy_on_backend_steps;
    if (picks_here && !picks_here->rows.empty()) ++stats_.sampled_on_backend_steps;
    stats_.replayed_steps += runner_->replays() - replays_before;
    if (result.lm_head_restricted) {
      const std::size_t n_groups = (runner_->model().config().vocab_size + 15) / 16;
      ++stats_.grammar_lm_head_steps;
      stats_.lm_head_groups_computed += groups.size();
      stats_.lm_head_groups_skipped += n_groups - groups.size();
    }
    const double dt = watch.seconds();
    if (sched.prefill_tokens > 0) {
      stats_.prefill_tokens += sched.prefill_tokens;
      stats_.prefill_s += dt;
      ++stats_.prefill_steps;
    }
    // Every position computed so far holds a committed token (drafts are not counted in n_computed):
    // full blocks become shareable. With drafting, a block also waits for its MTP rows (computed in
    // later draft rounds).
    for (const auto& s : scheduler_->running())
      if (!s->done)
        kv.commit(s->kv, std::span<const TokenId>(s->tokens.data(), s->mtp ? std::min(s->n_computed, s->mtp->complete_rows())
                                                                            : s->n_computed));
    // Hybrid models: the recurrent state where a prefill chunk ended on a snapshot point (the state after
    // exactly the prompt's first n_computed tokens), for later prompts that start the same way.
    if (snapshot_every_ > 0 && kv.prefix_options().enabled)
      for (const auto& e : sched.scheduled) {
        const Sequence& s = *e.seq;
        const std::size_t n = s.n_computed, b = n / kv.spec().block_size;
        if (e.prefill && !s.done && n % snapshot_every_ == 0 && b > 0 && b <= s.prompt_keys.size()) {
          if (kv.save_state_snapshot(s.kv, s.prompt_keys[b - 1])) ++stats_.state_snapshots;
        }
      }
    const Stopwatch accept_watch;
    const std::size_t emitted = sample_outputs(sched, result.logits, result.ids, result.hidden);
    const double accept_s = accept_watch.seconds();
    if (sched.prefill_tokens == 0) {  // decode: output tokens, with the drafting and acceptance time
      stats_.decode_tokens += emitted;
      stats_.decode_s += dt + step_draft_s_ + accept_s;
      ++stats_.decode_steps;
      // Hybrid models also read and write each sequence's recurrent state once per step.
      const std::uint64_t state_bytes = 2 * sizeof(float) * runner_->kv().spec().state_floats * sched.scheduled.size();
      stats_.decode_bytes += runner_->model().weight_bytes_per_step() + sched.kv_read_bytes + state_bytes;
    }
    if (sched.draft_rows > 0) stats_.verify_s += dt + accept_s;
  } else {
    scheduler_->fail_stuck_head();
  }
  scheduler_->retire(out);
  stats_.kv_evictions = kv.allocator().n_evictions();
  stats_.kv_cached_blocks = kv.allocator().n_cached();
  stats_.kv_used_blocks = kv.allocator().n_used();
  return out;
}

// ---------------------------------------------------------------- generate

GenerationResult Engine::generate(const GenerationRequest& request) {
  return std::move(generate(std::span<const GenerationRequest>(&request, 1))[0]);
}

std::vector<GenerationResult> Engine::generate(std::span<const GenerationRequest> requests) {
  for (const auto& r : requests) validate(r);
  std::vector<RequestId> ids;
  ids.reserve(requests.size());
  std::vector<GenerationResult> results(requests.size());
  std::size_t left = requests.size();
  std::vector<FinishedRequest> others;  // other callers' requests that finished meanwhile
  auto drop_ours = [&] {
    for (RequestId id : ids) scheduler_->drop(id);
    for (auto& f : others) backlog_.push_back(std::move(f));
    others.clear();
  };
  try {
    for (const auto& r : requests) ids.push_back(submit(r));
    std::string error;
    while (left > 0) {
      for (auto& f : step()) {
        const auto it = std::lower_bound(ids.begin(), ids.end(), f.id);  // ids are increasing
        if (it == ids.end() || *it != f.id) {
          others.push_back(std::move(f));
          continue;
        }
        if (!f.error.empty() && error.empty()) error = f.error;
        results[static_cast<std::size_t>(it - ids.begin())] = std::move(f.result);
        --left;
      }
      if (!error.empty()) throw std::runtime_error("generate: " + error);  // the handler drops ours
    }
    for (auto& f : others) backlog_.push_back(std::move(f));
  } catch (...) {
    drop_ours();
    throw;
  }
  return results;
}

}  // namespace quarry::engine
