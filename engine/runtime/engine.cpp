#include "engine/runtime/engine.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "engine/backend/cpu/thread_pool.hpp"
#include "engine/grammar/constraint.hpp"
#include "engine/grammar/matcher.hpp"
#include "engine/runtime/speculative.hpp"

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

void TokenConstraint::rollback(std::size_t) {
  throw std::logic_error("TokenConstraint: this constraint does not support rollback");
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

/// Live state of one request from submit() until step() returns it.
struct Engine::Sequence {
  RequestId id = 0;
  GenerationRequest req;
  GenerationResult result;
  std::vector<TokenId> tokens;         ///< prompt followed by the output so far
  std::vector<BlockHash> prompt_keys;  ///< prefix-cache keys of the prompt's full blocks
  SeqId kv = -1;                       ///< KV-cache sequence; -1 while waiting and after finishing
  std::size_t n_computed = 0;          ///< leading positions whose K/V is in the cache (cache hits included)
  std::size_t reserve_tokens = 0;      ///< positions admission reserved KV blocks for
  std::size_t n_passed = 0;            ///< times a later request was admitted before this one
  Sampler sampler;
  std::shared_ptr<TokenConstraint> constraint;  ///< the request's, or one built from its json_schema
  bool done = false, cancelled = false;
  std::string error;
  double t_submit = 0.0, t_first = -1.0;
  std::size_t stop_scan_from = 0;
  // Speculative decoding (MTP drafts; engine/runtime/speculative.hpp).
  std::unique_ptr<MtpState> mtp;  ///< null: no drafting for this request
  std::size_t mtp_cap = 0;
  DraftJob job;          ///< this step's drafts
  bool drafted = false;  ///< job holds this step's draft round
  // This step's rows in the batch.
  std::size_t row_first = 0, n_rows = 0, pos_first = 0, logit_first = 0;
  bool has_logits = false;
  /// This step's bitmask of the constraint's current state when the drafter did not provide the masks
  /// (step_masks).
  std::vector<std::uint32_t> step_mask;
  bool has_step_mask = false;

  Sequence(RequestId i, GenerationRequest r) : id(i), req(std::move(r)), sampler(req.sampling) {}
  std::size_t n_prompt() const { return req.prompt.size(); }
  bool prefilling() const { return n_computed < req.prompt.size(); }
};

std::unique_ptr<Engine> Engine::open(const std::filesystem::path& dir, std::shared_ptr<const Tokenizer> tokenizer,
                                     const EngineOptions& options) {
  auto model = load_model(dir, options.compute);
  std::vector<TokenId> eos = generation_config_eos(dir);
  return std::make_unique<Engine>(std::move(model), std::move(tokenizer), options, std::move(eos));
}

Engine::Engine(std::unique_ptr<Model> model, std::shared_ptr<const Tokenizer> tokenizer, const EngineOptions& options,
               std::vector<TokenId> eos_ids)
    : model_(std::move(model)), tokenizer_(std::move(tokenizer)), options_(options), eos_ids_(std::move(eos_ids)) {
  for (auto id : model_->config().eos_token_ids) eos_ids_.push_back(static_cast<TokenId>(id));
  if (tokenizer_)
    for (auto id : tokenizer_->eos_ids()) eos_ids_.push_back(id);
  std::sort(eos_ids_.begin(), eos_ids_.end());
  eos_ids_.erase(std::unique(eos_ids_.begin(), eos_ids_.end()), eos_ids_.end());
  if (options_.max_batch_tokens == 0) options_.max_batch_tokens = 1;
  options_.max_num_seqs = std::clamp<std::size_t>(options_.max_num_seqs, 1, options_.max_batch_tokens);
  pool_ = std::make_unique<ThreadPool>(options_.n_threads);
  // MTP draft depths beyond the cap get no KV layers.
  mtp_depth_ = std::min(options_.mtp_depth, model_->mtp_depths());
  KvCacheShape shape = model_->kv_shape();
  shape.n_layers = model_->config().num_hidden_layers + mtp_depth_;
  if (mtp_depth_ > 0) {
    stats_.draft_proposed.assign(mtp_depth_, 0);
    stats_.draft_accepted.assign(mtp_depth_, 0);
  }
  std::size_t draft_vocab = options_.mtp_draft_vocab;
  const std::size_t V = model_->config().vocab_size;
  if (draft_vocab == 0) draft_vocab = std::max(V / 4, std::min<std::size_t>(V, 4096));
  mtp_draft_vocab_ = std::min(draft_vocab, V);
  std::size_t kv_tokens = options_.max_kv_tokens;
  if (options_.kv_cache_mb > 0) {
    const std::size_t block_bytes = shape.bytes_per_token() * shape.block_size;
    const std::size_t blocks = options_.kv_cache_mb * (std::size_t{1} << 20) / std::max<std::size_t>(block_bytes, 1);
    kv_tokens = std::min(kv_tokens, blocks * shape.block_size);
  }
  PrefixCacheOptions prefix;
  prefix.enabled = options_.enable_prefix_caching;
  prefix.salt = model_salt(*model_);
  kv_ = std::make_unique<KvCache>(shape, kv_tokens, prefix);
  stats_.kv_max_blocks = kv_->allocator().max_blocks();
  mask_.resize((model_->config().vocab_size + 31) / 32);
  if (options_.log) {
    const auto& c = model_->config();
    options_.log("engine: " + c.architecture + ", " + std::to_string(c.num_hidden_layers) + " layers, hidden " +
                 std::to_string(c.hidden_size) + ", vocab " + std::to_string(c.vocab_size) + ", " +
                 std::to_string(model_->weight_bytes_per_step() / 1000000) + " MB of weights per step, " +
                 std::to_string(pool_->size()) + " threads, gemm kernel " + cpu::gemm_kernel_name() + ", KV cache " +
                 std::to_string(kv_->allocator().max_blocks() * shape.block_size) + " tokens (" +
                 std::to_string(kv_->allocator().max_blocks() * kv_->bytes_per_block() >> 20) + " MiB), prefix caching " +
                 (options_.enable_prefix_caching ? "on" : "off"));
  }
}

Engine::~Engine() = default;

std::shared_ptr<const grammar::TokenizerInfo> Engine::grammar_vocabulary() {
  if (grammar_vocab_) return grammar_vocab_;
  if (!tokenizer_) throw std::invalid_argument("generate: a JSON Schema constraint needs a tokenizer");
  const std::size_t n = tokenizer_->vocab_size();
  std::vector<std::string> bytes(n);
  std::vector<grammar::TokenId> special, eos;
  for (std::size_t i = 0; i < n; ++i) {
    const auto id = static_cast<TokenId>(i);
    bytes[i] = tokenizer_->token_bytes(id);
    if (tokenizer_->is_special(id)) special.push_back(id);
  }
  // The engine's EOS ids (config.json, generation_config.json, tokenizer): the grammar allows them
  // exactly where the value may end.
  for (TokenId id : eos_ids_)
    if (id >= 0 && static_cast<std::size_t>(id) < n) eos.push_back(id);
  grammar_vocab_ = std::make_shared<const grammar::TokenizerInfo>(std::move(bytes), std::move(eos), std::move(special));
  return grammar_vocab_;
}

std::shared_ptr<TokenConstraint> Engine::json_schema_constraint(std::string_view schema_text, bool lenient) {
  auto vocab = grammar_vocabulary();
  if (vocab->vocab_size() > model_->config().vocab_size)
    throw std::invalid_argument("generate: tokenizer vocabulary (" + std::to_string(vocab->vocab_size()) +
                                ") larger than the model's (" + std::to_string(model_->config().vocab_size) + ")");
  if (!grammar_compiler_) grammar_compiler_ = std::make_unique<grammar::GrammarCompiler>(vocab);
  grammar::SchemaOptions opt;
  opt.lenient = lenient;
  try {
    return std::make_shared<grammar::GrammarConstraint>(grammar_compiler_->compile_json_schema(schema_text, opt),
                                                        tokenizer_);
  } catch (const grammar::SchemaError& e) {
    throw std::invalid_argument(std::string("generate: JSON Schema: ") + e.what());
  }
}

// ---------------------------------------------------------------- requests

void Engine::validate(const GenerationRequest& r) const {
  const std::size_t V = model_->config().vocab_size;
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
    constraint = json_schema_constraint(request.json_schema, request.json_schema_lenient);
  auto s = std::make_unique<Sequence>(next_request_id_++, std::move(request));
  s->constraint = std::move(constraint);
  s->t_submit = clock_.seconds();
  s->tokens = s->req.prompt;
  s->result.stats.prompt_tokens = s->n_prompt();
  if (kv_->prefix_options().enabled) s->prompt_keys = kv_->block_hashes(s->req.prompt);
  if (s->req.max_tokens == 0) {
    s->done = true;
    s->result.finish = FinishReason::length;
  }
  const RequestId id = s->id;
  waiting_.push_back(std::move(s));
  return id;
}

bool Engine::has_unfinished() const { return !waiting_.empty() || !running_.empty() || !backlog_.empty(); }
std::size_t Engine::n_running() const { return running_.size(); }
std::size_t Engine::n_waiting() const { return waiting_.size(); }

void Engine::cancel(RequestId id) {
  for (auto* list : {&waiting_, &running_})
    for (auto& s : *list)
      if (s->id == id && !s->done) s->cancelled = true;
}

void Engine::drop(RequestId id) {
  for (auto* list : {&waiting_, &running_}) {
    auto it = std::find_if(list->begin(), list->end(), [&](const auto& s) { return s->id == id; });
    if (it == list->end()) continue;
    kv_->free_sequence((*it)->kv);
    list->erase(it);
  }
}

void Engine::finish(Sequence& s, FinishReason why, std::string error) {
  s.done = true;
  s.result.finish = why;
  s.error = std::move(error);
  s.result.stats.generated_tokens = s.result.tokens.size();
  s.result.stats.decode_s = s.t_first >= 0 ? clock_.seconds() - s.t_first : 0.0;
  kv_->free_sequence(s.kv);
  s.kv = -1;
}

void Engine::retire_finished(std::vector<FinishedRequest>& out) {
  for (auto* list : {&waiting_, &running_}) {
    auto keep = list->begin();
    for (auto it = list->begin(); it != list->end(); ++it) {
      if ((*it)->done) {
        out.push_back(FinishedRequest{(*it)->id, std::move((*it)->result), std::move((*it)->error)});
        ++stats_.requests_finished;
      } else {
        if (keep != it) *keep = std::move(*it);
        ++keep;
      }
    }
    list->erase(keep, list->end());
  }
}

// ---------------------------------------------------------------- scheduling

std::size_t Engine::reserved_blocks_left() const {
  std::size_t n = 0;
  for (const auto& s : running_) {
    if (s->done) continue;
    const std::size_t want = kv_->blocks_for(s->reserve_tokens), have = kv_->block_table(s->kv).size();
    if (want > have) n += want - have;
  }
  return n;
}

namespace {
/// A waiting request that was passed over this many times is admitted before any other (no starvation).
constexpr std::size_t kMaxPassed = 16;
/// Above this many waiting requests the queue is served first come first served (LPM's matching
/// cost grows with the queue; SGLang makes the same switch).
constexpr std::size_t kMaxLpmQueue = 128;
}  // namespace

void Engine::admit_waiting() {
  if (waiting_.empty() || running_.size() >= options_.max_num_seqs) return;
  const std::size_t bs = kv_->shape().block_size;
  const std::size_t max_blocks = kv_->allocator().max_blocks();
  const bool caching = kv_->prefix_options().enabled;
  // The cached prefix usable by a request: whole blocks, leaving at least the last prompt token to
  // compute (its logits give the first output token).
  auto usable_blocks = [&](const Sequence& s) { return (s.n_prompt() - 1) / bs; };
  auto match = [&](const Sequence& s) { return kv_->match_prefix(s.req.prompt, s.prompt_keys, usable_blocks(s)); };

  // Candidate order: the longest cached prefix first (LPM), ties by submission; first come first
  // served when the queue is long or its head has been passed over kMaxPassed times.
  std::vector<std::size_t> order(waiting_.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::vector<std::vector<BlockId>> matched(waiting_.size());
  std::vector<bool> have_match(waiting_.size(), false);
  const bool lpm = caching && waiting_.size() <= kMaxLpmQueue && waiting_.front()->n_passed < kMaxPassed;
  if (lpm) {
    for (std::size_t i = 0; i < waiting_.size(); ++i) {
      matched[i] = match(*waiting_[i]);
      have_match[i] = true;
    }
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return matched[a].size() > matched[b].size(); });
  }

  std::size_t reserved = reserved_blocks_left();
  for (std::size_t i : order) {
    Sequence& s = *waiting_[i];
    if (s.done || s.cancelled) continue;
    if (running_.size() >= options_.max_num_seqs) break;
    if (kv_->blocks_for(s.n_prompt()) > max_blocks) {
      s.result.stats.queue_s = clock_.seconds() - s.t_submit;
      finish(s, FinishReason::length,
             "prompt of " + std::to_string(s.n_prompt()) + " tokens does not fit the KV cache (" +
                 std::to_string(max_blocks * bs) + " tokens; raise max_kv_tokens / kv_cache_mb)");
      continue;
    }
    if (!have_match[i]) matched[i] = match(s);
    const auto& blocks = matched[i];
    // In-flight sharing: a running request still prefilling will commit blocks this one could reuse
    // beyond what is cached now; wait for them instead of computing them twice.
    if (caching) {
      const std::size_t usable = std::min(usable_blocks(s), s.prompt_keys.size());
      bool wait = false;
      for (const auto& r : running_) {
        if (r->done || !r->prefilling()) continue;
        std::size_t common = 0;
        const std::size_t n = std::min(usable, r->prompt_keys.size());
        while (common < n && r->prompt_keys[common] == s.prompt_keys[common]) ++common;
        if (common > blocks.size()) {
          wait = true;
          break;
        }
      }
      if (wait) continue;
    }
    // KV budget: blocks for the prompt and every output token (capped at the whole cache), counting
    // what running requests may still claim, so that a running request never runs out.
    const std::size_t target = std::min(s.n_prompt() + s.req.max_tokens, max_blocks * bs);
    const std::size_t new_blocks = kv_->blocks_for(target) - blocks.size();
    const std::size_t free_now = kv_->allocator().n_free() - kv_->n_unreferenced(blocks);
    if (free_now < reserved || free_now - reserved < new_blocks) break;  // wait for blocks; keep the order

    s.kv = kv_->create_sequence();
    kv_->attach_prefix(s.kv, blocks, s.prompt_keys);
    s.n_computed = blocks.size() * bs;
    // MTP drafting from the first computed position (the cached prefix's MTP rows are reused as
    // they are: at worst lower acceptance, never other output).
    const std::size_t cap = std::min(s.req.mtp_depth.value_or(mtp_depth_), mtp_depth_);
    if (cap > 0 && !(s.constraint && !s.constraint->supports_rollback())) {
      s.mtp = std::make_unique<MtpState>(cap, model_->config().hidden_size, s.n_computed);
      s.mtp_cap = cap;
      s.result.stats.draft_proposed.assign(cap, 0);
      s.result.stats.draft_accepted.assign(cap, 0);
    }
    s.reserve_tokens = target;
    s.result.stats.cached_tokens = s.n_computed;
    s.result.stats.prefill_tokens = s.n_prompt() - s.n_computed;
    s.result.stats.queue_s = clock_.seconds() - s.t_submit;
    stats_.prefix_hit_tokens += s.n_computed;
    reserved += new_blocks;
    for (std::size_t j = 0; j < i; ++j)
      if (waiting_[j]) ++waiting_[j]->n_passed;
    running_.push_back(std::move(waiting_[i]));  // leaves a null in waiting_, erased below
  }
  std::erase_if(waiting_, [](const auto& p) { return p == nullptr; });
}

void Engine::schedule_batch() {
  batch_.clear();
  row_owner_.clear();
  std::size_t budget = options_.max_batch_tokens;
  auto kv_full = [&](Sequence& s) {
    finish(s, FinishReason::length,
           "KV cache full (" + std::to_string(kv_->allocator().max_blocks() * kv_->shape().block_size) +
               " tokens; raise max_kv_tokens / kv_cache_mb)");
  };
  // Decode first: each sequence past its prompt feeds its uncached output tokens (the last sampled
  // one, plus any forced by jump-forward).
  for (auto& sp : running_) {
    Sequence& s = *sp;
    if (s.done || s.prefilling() || budget == 0) continue;
    const std::size_t total = s.tokens.size();
    const std::size_t n = std::min(total - s.n_computed, budget);
    if (n == 0) continue;
    const std::size_t k = s.drafted ? s.job.drafts.size() : 0;  // KV for them reserved when drafting
    if (!kv_->reserve(s.kv, s.n_computed + n)) {
      kv_full(s);
      continue;
    }
    s.row_first = batch_.size();
    s.pos_first = s.n_computed;
    s.n_rows = n + k;
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t p = s.n_computed + i;
      const bool last = p + 1 == total;
      if (last) {
        s.has_logits = true;
        s.logit_first = batch_.n_logits();
      }
      batch_.add(s.tokens[p], static_cast<std::int32_t>(p), s.kv, last);
      if (last) row_owner_.push_back(&s);
      step_kv_read_ += (p + 1) * kv_->bytes_per_token();
    }
    // The drafts (speculative: not counted in n_computed, never committed to the prefix cache).
    for (std::size_t i = 0; i < k; ++i) {
      batch_.add(s.job.drafts[i], static_cast<std::int32_t>(total + i), s.kv, true);
      step_kv_read_ += (total + i + 1) * kv_->bytes_per_token();
    }
    step_draft_rows_ += k;
    s.n_computed += n;
    budget -= std::min(budget, n + k);
  }
  // Then prefill chunks, in admission order, with what budget is left.
  for (auto& sp : running_) {
    Sequence& s = *sp;
    if (s.done || !s.prefilling() || budget == 0) continue;
    const std::size_t n = std::min(s.n_prompt() - s.n_computed, budget);
    if (!kv_->reserve(s.kv, s.n_computed + n)) {
      kv_full(s);
      continue;
    }
    s.row_first = batch_.size();
    s.pos_first = s.n_computed;
    s.n_rows = n;
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t p = s.n_computed + i;
      const bool last = p + 1 == s.n_prompt();
      if (last) {
        s.has_logits = true;
        s.logit_first = batch_.n_logits();
      }
      batch_.add(s.tokens[p], static_cast<std::int32_t>(p), s.kv, last);
      if (last) row_owner_.push_back(&s);
    }
    s.n_computed += n;
    budget -= n;
    step_prefill_tokens_ += n;
  }
}

// ---------------------------------------------------------------- outputs

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
    finish(s, FinishReason::eos);
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
      finish(s, FinishReason::stop_string);
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
  MtpDrafter drafter(*model_, *kv_, pool_.get(), mtp_draft_vocab_);
  stats_.mtp_rows += drafter.catch_up(j);
  stats_.prefill_s += w.seconds();
}

void Engine::draft_step() {
  step_draft_s_ = 0.0;
  std::vector<DraftJob*> jobs;
  std::size_t left = options_.max_batch_tokens;  // decode rows come first, in running order
  for (auto& sp : running_) {
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
    if (k > 0 && !kv_->reserve(s.kv, s.tokens.size() + k)) k = 0;
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
    j.mask_words = mask_.size();
    s.drafted = true;
    jobs.push_back(&j);
  }
  if (jobs.empty()) return;
  const Stopwatch w;
  MtpDrafter drafter(*model_, *kv_, pool_.get(), mtp_draft_vocab_);
  stats_.mtp_rows += drafter.draft(jobs);
  step_draft_s_ = w.seconds();
  stats_.draft_s += step_draft_s_;
}

std::span<const std::vector<std::uint32_t>> Engine::step_masks(Sequence& s) {
  // The drafter's k + 1 masks of the verify rows, else the constraint's current mask (once per step:
  // before the forward for the LM head's candidates, after it for sampling).
  const std::size_t k = s.drafted ? s.job.drafts.size() : 0;
  if (s.drafted && s.job.masks.size() == k + 1) return s.job.masks;
  if (!s.has_step_mask) {
    s.step_mask.assign(mask_.size(), 0u);
    s.constraint->fill_bitmask(s.step_mask);
    s.has_step_mask = true;
  }
  return {&s.step_mask, 1};
}

std::vector<std::vector<std::int32_t>> Engine::lm_head_candidates() {
  // One list per logit row, in batch order: one allowed id of each group of 16 ids that holds some
  // (the model computes whole groups). Empty (every logit computed) when a row is unconstrained or
  // allows ids in more than half of the groups (free text).
  std::vector<std::vector<std::int32_t>> out;
  if (!options_.grammar_lm_head || !model_->bf16_compute()) return out;
  const std::size_t V = model_->config().vocab_size, n_groups = (V + 15) / 16;
  for (Sequence* sp : row_owner_) {
    Sequence& s = *sp;
    if (!s.constraint || s.done) return {};
    for (const auto& m : step_masks(s)) {
      std::vector<std::int32_t>& ids = out.emplace_back();
      for (std::size_t g = 0; g < n_groups; ++g) {
        const std::uint32_t bits = (m[g / 2] >> (16 * (g % 2))) & 0xFFFFu;
        if (bits) ids.push_back(static_cast<std::int32_t>(16 * g + static_cast<std::size_t>(__builtin_ctz(bits))));
      }
      if (ids.empty() || 2 * ids.size() > n_groups) return {};
    }
  }
  if (out.size() != batch_.n_logits()) return {};
  std::vector<char> used(n_groups, 0);
  for (const auto& ids : out)
    for (const std::int32_t id : ids) used[static_cast<std::size_t>(id) / 16] = 1;
  const auto n_used = static_cast<std::size_t>(std::count(used.begin(), used.end(), 1));
  if (2 * n_used > n_groups) return {};  // (the model would compute every logit)
  ++stats_.grammar_lm_head_steps;
  stats_.lm_head_groups_computed += n_used;
  stats_.lm_head_groups_skipped += n_groups - n_used;
  return out;
}

std::size_t Engine::sample_outputs() {
  const std::size_t V = model_->config().vocab_size, H = model_->config().hidden_size;
  std::size_t emitted = 0;
  // Prefill chunks before the prompt's end: only their hidden states (for the MTP module).
  for (auto& sp : running_) {
    Sequence& s = *sp;
    if (!s.done && s.mtp && s.n_rows > 0 && !s.has_logits && !hidden_.empty()) {
      s.mtp->push_main_hidden(hidden_.data() + s.row_first * H, s.n_rows, s.pos_first);
      mtp_catch_up(s);
    }
  }
  for (Sequence* sp : row_owner_) {
    Sequence& s = *sp;
    if (s.done) continue;
    const bool prefill_rows = s.pos_first < s.n_prompt();
    const std::size_t k = s.drafted ? s.job.drafts.size() : 0;
    const std::size_t C = s.tokens.size();  // committed tokens; the last one was just fed
    std::span<const std::vector<std::uint32_t>> masks;
    if (s.constraint) masks = step_masks(s);
    VerifyResult r;
    const std::span<const float> rows(logits_.data() + s.logit_first * V, (k + 1) * V);
    if (!s.mtp && !s.constraint) {
      r.next = s.sampler.sample(rows);
    } else {
      r = verify_drafts(s.sampler, rows, V, masks, std::span<const TokenId>(s.job.drafts.data(), k),
                        std::span<const TokenDistribution>(s.job.dists.data(), s.drafted ? s.job.dists.size() : 0),
                        /*want_bonus=*/!(s.drafted && s.job.ended && k > 0));
    }
    const std::size_t m = r.n_accepted;
    if (s.mtp && !hidden_.empty())  // main hidden states of the rows holding committed tokens
      s.mtp->push_main_hidden(hidden_.data() + s.row_first * H, prefill_rows ? s.n_rows : s.n_rows - (k - m),
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
      finish(s, FinishReason::constraint);
      continue;
    }
    // Rejected drafts leave the KV cache (positions from C + m on); accepted ones are computed.
    s.n_computed = C + m;
    if (k > m) kv_->truncate(s.kv, s.n_computed);
    if (s.constraint && s.req.jump_forward && s.result.tokens.size() < s.req.max_tokens) {
      auto forced = s.constraint->take_forced_tokens();
      forced.resize(std::min(forced.size(), s.req.max_tokens - s.result.tokens.size()));
      for (TokenId f : forced) append_token(s, f, /*sampled=*/false);
      s.result.stats.forced_tokens += forced.size();
      stats_.forced_tokens += forced.size();
    }
    if (s.constraint && s.constraint->is_terminated()) {
      finish(s, FinishReason::constraint);
      continue;
    }
    if (s.result.tokens.size() >= s.req.max_tokens) finish(s, FinishReason::length);
  }
  return emitted;
}

// ---------------------------------------------------------------- step

std::vector<FinishedRequest> Engine::step() {
  std::vector<FinishedRequest> out = std::move(backlog_);
  backlog_.clear();
  for (auto* list : {&waiting_, &running_})
    for (auto& s : *list)
      if (s->cancelled && !s->done) finish(*s, FinishReason::cancelled, "cancelled");
  retire_finished(out);
  admit_waiting();
  retire_finished(out);

  step_kv_read_ = 0;
  step_prefill_tokens_ = 0;
  step_draft_rows_ = 0;
  draft_step();
  schedule_batch();
  if (batch_.size() > 0) {
    const std::size_t V = model_->config().vocab_size;
    logits_.resize(batch_.n_logits() * V);
    // Hidden states for the MTP module when a drafting sequence has rows in the batch.
    const bool want_hidden =
        std::any_of(running_.begin(), running_.end(), [](const auto& s) { return s->mtp && s->n_rows > 0; });
    hidden_.resize(want_hidden ? batch_.size() * model_->config().hidden_size : 0);
    const Stopwatch watch;
    const auto candidates = lm_head_candidates();
    model_->forward(batch_, *kv_, logits_.data(), want_hidden ? hidden_.data() : nullptr, pool_.get(), candidates);
    const double dt = watch.seconds();
    if (step_prefill_tokens_ > 0) {
      stats_.prefill_tokens += step_prefill_tokens_;
      stats_.prefill_s += dt;
      ++stats_.prefill_steps;
    }
    // Every position computed so far holds a committed token (drafts are not counted in n_computed):
    // full blocks become shareable.
    // With drafting, a block also waits for its MTP rows (computed in later draft rounds).
    for (auto& s : running_)
      if (!s->done)
        kv_->commit(s->kv, std::span<const TokenId>(
                               s->tokens.data(), s->mtp ? std::min(s->n_computed, s->mtp->complete_rows()) : s->n_computed));
    const Stopwatch accept_watch;
    const std::size_t emitted = sample_outputs();
    const double accept_s = accept_watch.seconds();
    if (step_prefill_tokens_ == 0) {  // decode: output tokens, with the drafting and acceptance time
      stats_.decode_tokens += emitted;
      stats_.decode_s += dt + step_draft_s_ + accept_s;
      ++stats_.decode_steps;
      stats_.decode_bytes += model_->weight_bytes_per_step() + step_kv_read_;
    }
    if (step_draft_rows_ > 0) stats_.verify_s += dt + accept_s;
  } else if (running_.empty() && !waiting_.empty()) {
    // Nothing runs and nothing could be admitted: only a scheduler bug leads here; fail the head
    // rather than spin.
    finish(*waiting_.front(), FinishReason::length, "request could not be scheduled");
  }
  retire_finished(out);
  stats_.kv_evictions = kv_->allocator().n_evictions();
  stats_.kv_cached_blocks = kv_->allocator().n_cached();
  stats_.kv_used_blocks = kv_->allocator().n_used();
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
    for (RequestId id : ids) drop(id);
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
