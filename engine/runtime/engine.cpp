#include "engine/runtime/engine.hpp"

#include <algorithm>
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

/// Live state of one request inside generate().
struct Sequence {
  const GenerationRequest* req = nullptr;
  GenerationResult result;
  SeqId seq = -1;
  std::size_t n_prefilled = 0;  // prompt tokens already in the KV cache
  std::size_t n_cached = 0;     // all tokens in the KV cache
  Sampler sampler;
  std::shared_ptr<TokenConstraint> constraint;  // the request's, or one built from its json_schema
  bool done = false;
  double t_first = -1.0;
  std::size_t stop_scan_from = 0;
  // Speculative decoding (MTP drafts).
  std::unique_ptr<MtpState> mtp;  // null: drafting off for this request
  std::size_t mtp_cap = 0;
  DraftJob job;                   // this step's drafts
  bool drafted = false;           // job holds drafts (or an empty draft round) for this step
  // This step's rows in the batch.
  std::size_t row_first = 0, n_rows = 0, pos_first = 0, logit_first = 0;
  bool has_logits = false;
  explicit Sequence(const GenerationRequest& r) : req(&r), sampler(r.sampling) {}
  TokenId token_at(std::size_t i) const {
    return i < req->prompt.size() ? req->prompt[i] : result.tokens[i - req->prompt.size()];
  }
  std::size_t total() const { return req->prompt.size() + result.tokens.size(); }
};

}  // namespace

std::unique_ptr<Engine> Engine::open(const std::filesystem::path& dir, std::shared_ptr<const Tokenizer> tokenizer,
                                     const EngineOptions& options) {
  auto model = load_model(dir);
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
  pool_ = std::make_unique<ThreadPool>(options_.n_threads);
  // MTP draft depths beyond the cap get no KV layers.
  mtp_depth_ = std::min(options_.mtp_depth, model_->mtp_depths());
  KvCacheShape shape = model_->kv_shape();
  shape.n_layers = model_->config().num_hidden_layers + mtp_depth_;
  kv_ = std::make_unique<KvCache>(shape, options_.max_kv_tokens);
  if (options_.log) {
    const auto& c = model_->config();
    options_.log("engine: " + c.architecture + ", " + std::to_string(c.num_hidden_layers) + " layers, hidden " +
                 std::to_string(c.hidden_size) + ", vocab " + std::to_string(c.vocab_size) + ", " +
                 std::to_string(model_->weight_bytes_per_step() / 1000000) + " MB of weights per step, " +
                 std::to_string(pool_->size()) + " threads, gemm kernel " + cpu::gemm_kernel_name());
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

GenerationResult Engine::generate(const GenerationRequest& request) {
  return std::move(generate(std::span<const GenerationRequest>(&request, 1))[0]);
}

std::vector<GenerationResult> Engine::generate(std::span<const GenerationRequest> requests) {
  const Stopwatch clock;
  const std::size_t V = model_->config().vocab_size;
  const std::size_t mask_words = (V + 31) / 32;
  std::vector<Sequence> seqs;
  seqs.reserve(requests.size());
  for (const auto& r : requests) {
    if (r.prompt.empty()) throw std::invalid_argument("generate: empty prompt");
    for (TokenId t : r.prompt)
      if (t < 0 || static_cast<std::size_t>(t) >= V)
        throw std::invalid_argument("generate: prompt token id " + std::to_string(t) + " outside the vocabulary (" +
                                    std::to_string(V) + ")");
    if (!r.stop.empty() && !tokenizer_) throw std::invalid_argument("generate: stop strings need a tokenizer");
    seqs.emplace_back(r);
    seqs.back().constraint = r.constraint;
    if (!r.constraint && !r.json_schema.empty())
      seqs.back().constraint = json_schema_constraint(r.json_schema, r.json_schema_lenient);
  }
  for (auto& s : seqs) {
    s.seq = kv_->create_sequence();
    s.result.stats.prompt_tokens = s.req->prompt.size();
    if (s.req->max_tokens == 0) s.done = true;
  }
  struct Release {  // sequences leave the cache even if a forward call throws
    KvCache& kv;
    std::vector<Sequence>& seqs;
    ~Release() {
      for (auto& s : seqs) kv.free_sequence(s.seq);
    }
  } release{*kv_, seqs};

  const std::size_t H = model_->config().hidden_size;
  for (auto& s : seqs) {
    const std::size_t cap = std::min(s.req->mtp_depth.value_or(mtp_depth_), mtp_depth_);
    if (cap == 0 || (s.constraint && !s.constraint->supports_rollback())) continue;
    s.mtp = std::make_unique<MtpState>(cap, H);
    s.mtp_cap = cap;
    s.result.stats.draft_proposed.assign(cap, 0);
    s.result.stats.draft_accepted.assign(cap, 0);
  }
  if (stats_.draft_proposed.size() < mtp_depth_) {
    stats_.draft_proposed.resize(mtp_depth_, 0);
    stats_.draft_accepted.resize(mtp_depth_, 0);
  }

  std::vector<float> logits, hidden;
  std::vector<std::uint32_t> mask(mask_words);
  Batch batch;
  const std::size_t kv_token_bytes = kv_->bytes_per_token();
  std::size_t draft_vocab = options_.mtp_draft_vocab;
  if (draft_vocab == 0) draft_vocab = std::max(V / 4, std::min<std::size_t>(V, 4096));
  MtpDrafter drafter(*model_, *kv_, pool_.get(), std::min(draft_vocab, V));
  std::vector<DraftJob*> jobs;

  auto finish = [&](Sequence& s, FinishReason why) {
    s.done = true;
    s.result.finish = why;
    s.result.stats.generated_tokens = s.result.tokens.size();
    s.result.stats.decode_s = s.t_first >= 0 ? clock.seconds() - s.t_first : 0.0;
    kv_->free_sequence(s.seq);
  };
  auto is_end_token = [&](const Sequence& s, TokenId tok) {
    const bool is_eos = !s.req->ignore_eos && std::binary_search(eos_ids_.begin(), eos_ids_.end(), tok);
    return is_eos || std::find(s.req->stop_token_ids.begin(), s.req->stop_token_ids.end(), tok) !=
                         s.req->stop_token_ids.end();
  };
  // Appends one generated token and applies the stop rules. `advance`: feed it to the constraint
  // (drafts were fed while drafting); `last`: the step's last token (termination, jump-forward).
  // Returns true if the sequence finished.
  auto emit = [&](Sequence& s, TokenId tok, bool advance, bool last) {
    s.result.tokens.push_back(tok);
    if (advance && s.constraint) s.constraint->accept(tok);
    if (s.req->on_token) s.req->on_token(tok);
    if (tokenizer_ && !tokenizer_->is_special(tok) && static_cast<std::size_t>(tok) < tokenizer_->vocab_size())
      s.result.text += tokenizer_->token_bytes(tok);
    if (is_end_token(s, tok)) {
      finish(s, FinishReason::eos);
      return true;
    }
    // Stop strings: search only the tail that the new token can have completed.
    std::size_t longest = 0;
    for (const auto& stop : s.req->stop) {
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
    if (last && s.constraint && s.req->jump_forward && s.result.tokens.size() < s.req->max_tokens) {
      auto forced = s.constraint->take_forced_tokens();
      forced.resize(std::min(forced.size(), s.req->max_tokens - s.result.tokens.size()));
      for (TokenId f : forced) {
        s.result.tokens.push_back(f);
        if (s.req->on_token) s.req->on_token(f);
        if (tokenizer_ && !tokenizer_->is_special(f) && static_cast<std::size_t>(f) < tokenizer_->vocab_size())
          s.result.text += tokenizer_->token_bytes(f);
      }
      s.result.stats.forced_tokens += forced.size();
      stats_.forced_tokens += forced.size();
    }
    if (last && s.constraint && s.constraint->is_terminated()) {
      finish(s, FinishReason::constraint);
      return true;
    }
    if (s.result.tokens.size() >= s.req->max_tokens) {
      finish(s, FinishReason::length);
      return true;
    }
    return false;
  };

  for (;;) {
    batch.clear();
    std::size_t budget = options_.max_batch_tokens, n_prefill = 0;
    std::uint64_t kv_read = 0;

    // 1. Drafts for the sequences in decode whose only uncached token is the last one, within the
    //    batch budget (decode rows come first, in sequence order).
    jobs.clear();
    double draft_s = 0.0;
    {
      std::size_t left = budget;
      for (auto& s : seqs) {
        s.drafted = false;
        s.has_logits = false;
        s.n_rows = 0;
        if (s.done || s.n_prefilled < s.req->prompt.size() || left == 0) continue;
        const std::size_t need = s.total() - s.n_cached;
        left -= std::min(left, need);
        if (!s.mtp || need != 1) continue;
        std::size_t k = std::min({s.mtp->choose_depth(s.mtp_cap), s.req->max_tokens - s.result.tokens.size() - 1, left});
        if (k > 0 && !kv_->reserve(s.seq, s.total() + k)) k = 0;
        left -= k;
        DraftJob& j = s.job;
        j.seq = s.seq;
        j.state = s.mtp.get();
        j.token_at = [&s](std::size_t i) { return s.token_at(i); };
        j.n_committed = s.total();
        j.max_drafts = k;
        j.sampler = &s.sampler;
        j.constraint = s.constraint.get();
        j.ends_sequence = [&s, &is_end_token](TokenId t) { return is_end_token(s, t); };
        j.mask_words = mask_words;
        s.drafted = true;
        jobs.push_back(&j);
      }
      if (!jobs.empty()) {
        const Stopwatch w;
        stats_.mtp_rows += drafter.draft(jobs);
        draft_s = w.seconds();
        stats_.draft_s += draft_s;
      }
    }

    // 2. The batch: decode rows (the uncached output tokens, then the drafts), then prefill chunks.
    std::size_t n_draft_rows = 0;
    for (auto& s : seqs) {
      if (s.done || s.n_prefilled < s.req->prompt.size() || budget == 0) continue;
      const std::size_t total = s.total();
      const std::size_t k = s.drafted ? s.job.drafts.size() : 0;
      const std::size_t n = std::min(total - s.n_cached, budget);
      if (!kv_->reserve(s.seq, s.n_cached + n + k))
        throw std::runtime_error("generate: KV cache full (max_kv_tokens " + std::to_string(options_.max_kv_tokens) + ")");
      s.row_first = batch.size();
      s.pos_first = s.n_cached;
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t p = s.n_cached + i;
        const bool last = p + 1 == total;
        if (last) {
          s.has_logits = true;
          s.logit_first = batch.n_logits();
        }
        batch.add(s.result.tokens[p - s.req->prompt.size()], static_cast<std::int32_t>(p), s.seq, last);
        kv_read += (p + 1) * kv_token_bytes;
      }
      for (std::size_t i = 0; i < k; ++i) {
        batch.add(s.job.drafts[i], static_cast<std::int32_t>(total + i), s.seq, true);
        kv_read += (total + i + 1) * kv_token_bytes;
      }
      n_draft_rows += k;
      s.n_rows = n + k;
      s.n_cached += n;
      budget -= std::min(budget, n + k);
    }
    for (auto& s : seqs) {
      const std::size_t left = s.req->prompt.size() - s.n_prefilled;
      if (s.done || left == 0 || budget == 0) continue;
      const std::size_t n = std::min(left, budget);
      if (!kv_->reserve(s.seq, s.n_cached + n)) continue;  // wait for blocks to free up
      s.row_first = batch.size();
      s.pos_first = s.n_prefilled;
      s.n_rows = n;
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t p = s.n_prefilled + i;
        const bool last = p + 1 == s.req->prompt.size();
        if (last) {
          s.has_logits = true;
          s.logit_first = batch.n_logits();
        }
        batch.add(s.req->prompt[p], static_cast<std::int32_t>(p), s.seq, last);
      }
      s.n_prefilled += n;
      s.n_cached += n;
      budget -= n;
      n_prefill += n;
    }
    if (batch.size() == 0) {
      if (std::all_of(seqs.begin(), seqs.end(), [](const Sequence& s) { return s.done; })) break;
      throw std::runtime_error("generate: KV cache too small for the prompt (max_kv_tokens " +
                               std::to_string(options_.max_kv_tokens) + ")");
    }

    // 3. One forward call (with the hidden states the MTP module reads, when any sequence drafts).
    const bool want_hidden = std::any_of(seqs.begin(), seqs.end(), [](const Sequence& s) { return s.mtp && s.n_rows; });
    const Stopwatch step;
    logits.resize(batch.n_logits() * V);
    hidden.resize(want_hidden ? batch.size() * H : 0);
    model_->forward(batch, *kv_, logits.data(), want_hidden ? hidden.data() : nullptr, pool_.get());
    const double dt = step.seconds();

    // 4. Sample / verify, then emit.
    const Stopwatch accept_watch;
    std::size_t emitted = 0;
    for (auto& s : seqs) {
      if (s.done || s.n_rows == 0) continue;
      const bool prefill_rows = s.pos_first < s.req->prompt.size();
      if (!s.has_logits) {  // a prefill chunk before the prompt's end
        if (s.mtp) s.mtp->push_main_hidden(hidden.data() + s.row_first * H, s.n_rows, s.pos_first);
        continue;
      }
      const std::size_t k = s.drafted ? s.job.drafts.size() : 0;
      const std::size_t C = s.total();  // committed tokens; the last one was just fed (or the prompt's)
      // Masks of the target rows: the drafter's (k + 1), or the current one.
      std::vector<std::vector<std::uint32_t>> own_masks;
      std::span<const std::vector<std::uint32_t>> masks;
      if (s.constraint) {
        if (s.drafted && s.job.masks.size() == k + 1) {
          masks = s.job.masks;
        } else {
          own_masks.emplace_back(mask_words, 0u);
          s.constraint->fill_bitmask(own_masks.back());
          masks = own_masks;
        }
      }
      VerifyResult r;
      if (!s.mtp && !s.constraint) {  // plain sampling, as without drafting
        r.next = s.sampler.sample(std::span<const float>(logits.data() + s.logit_first * V, V));
      } else {
        r = verify_drafts(s.sampler, std::span<const float>(logits.data() + s.logit_first * V, (k + 1) * V), V, masks,
                          std::span<const TokenId>(s.job.drafts.data(), k),
                          std::span<const TokenDistribution>(s.job.dists.data(), s.drafted ? s.job.dists.size() : 0),
                          !(s.drafted && s.job.ended && k > 0));
      }
      const std::size_t m = r.n_accepted;
      if (s.mtp) {
        // Main hidden states of the rows that hold committed tokens: up to the last accepted draft.
        const std::size_t keep = prefill_rows ? s.n_rows : s.n_rows - (k - m);
        s.mtp->push_main_hidden(hidden.data() + s.row_first * H, keep, s.pos_first);
      }
      if (s.t_first < 0) {
        s.t_first = clock.seconds();
        s.result.stats.ttft_s = s.t_first;
      }
      if (s.mtp && !prefill_rows) {
        auto& st = s.result.stats;
        ++st.verify_steps;
        ++stats_.verify_steps;
        st.draft_tokens += k;
        st.accepted_tokens += m;
        st.forced_drafts += s.drafted ? s.job.n_forced : 0;
        stats_.draft_tokens += k;
        stats_.accepted_tokens += m;
        stats_.forced_drafts += s.drafted ? s.job.n_forced : 0;
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
      bool finished = false;
      for (std::size_t j = 0; j < m && !finished; ++j) {
        finished = emit(s, s.job.drafts[j], /*advance=*/false, /*last=*/j + 1 == m && r.next < 0);
        ++emitted;
      }
      if (finished) continue;
      if (r.next >= 0) {
        ++emitted;
        if (emit(s, r.next, /*advance=*/true, /*last=*/true)) continue;
      } else if (!(s.drafted && s.job.ended && k > 0 && m == k)) {  // the constraint allows nothing
        finish(s, FinishReason::constraint);
        continue;
      }
      // Rejected drafts leave the KV cache (positions from C + m on).
      s.n_cached = C + m;
      if (k > m) kv_->truncate(s.seq, s.n_cached);
    }
    const double accept_s = accept_watch.seconds();
    if (n_prefill > 0) {
      stats_.prefill_tokens += n_prefill;
      stats_.prefill_s += dt;
      ++stats_.prefill_steps;
    } else {
      stats_.decode_tokens += emitted;
      stats_.decode_s += dt + draft_s + accept_s;
      ++stats_.decode_steps;
      stats_.decode_bytes += model_->weight_bytes_per_step() + kv_read;
    }
    if (n_draft_rows > 0) stats_.verify_s += dt + accept_s;
  }

  std::vector<GenerationResult> out;
  out.reserve(seqs.size());
  for (auto& s : seqs) out.push_back(std::move(s.result));
  return out;
}

}  // namespace quarry::engine
