#include "engine/runtime/engine.hpp"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "engine/backend/cpu/thread_pool.hpp"
#include "engine/grammar/constraint.hpp"
#include "engine/grammar/matcher.hpp"

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
  explicit Sequence(const GenerationRequest& r) : req(&r), sampler(r.sampling) {}
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
  kv_ = std::make_unique<KvCache>(model_->kv_shape(), options_.max_kv_tokens);
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

  std::vector<float> logits;
  std::vector<std::uint32_t> mask(mask_words);
  std::vector<Sequence*> row_owner;
  Batch batch;
  const std::size_t kv_token_bytes = kv_->bytes_per_token();

  auto finish = [&](Sequence& s, FinishReason why) {
    s.done = true;
    s.result.finish = why;
    s.result.stats.generated_tokens = s.result.tokens.size();
    s.result.stats.decode_s = s.t_first >= 0 ? clock.seconds() - s.t_first : 0.0;
    kv_->free_sequence(s.seq);
  };

  for (;;) {
    batch.clear();
    row_owner.clear();
    std::size_t budget = options_.max_batch_tokens, n_prefill = 0;
    std::uint64_t kv_read = 0;
    // Decode tokens first (one per running sequence), then prefill chunks with what budget is left.
    // A sequence's uncached output tokens: the last sampled one, plus any forced by jump-forward.
    for (auto& s : seqs) {
      if (s.done || s.n_prefilled < s.req->prompt.size() || budget == 0) continue;
      const std::size_t total = s.req->prompt.size() + s.result.tokens.size();
      const std::size_t n = std::min(total - s.n_cached, budget);
      if (!kv_->reserve(s.seq, s.n_cached + n))
        throw std::runtime_error("generate: KV cache full (max_kv_tokens " + std::to_string(options_.max_kv_tokens) + ")");
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t p = s.n_cached + i;
        const bool last = p + 1 == total;
        batch.add(s.result.tokens[p - s.req->prompt.size()], static_cast<std::int32_t>(p), s.seq, last);
        if (last) row_owner.push_back(&s);
        kv_read += (p + 1) * kv_token_bytes;
      }
      s.n_cached += n;
      budget -= n;
    }
    for (auto& s : seqs) {
      const std::size_t left = s.req->prompt.size() - s.n_prefilled;
      if (s.done || left == 0 || budget == 0) continue;
      const std::size_t n = std::min(left, budget);
      if (!kv_->reserve(s.seq, s.n_cached + n)) continue;  // wait for blocks to free up
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t p = s.n_prefilled + i;
        const bool last = p + 1 == s.req->prompt.size();
        batch.add(s.req->prompt[p], static_cast<std::int32_t>(p), s.seq, last);
        if (last) row_owner.push_back(&s);
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

    const Stopwatch step;
    logits.resize(row_owner.size() * V);
    model_->forward(batch, *kv_, logits.data(), pool_.get());
    const double dt = step.seconds();
    if (n_prefill > 0) {
      stats_.prefill_tokens += n_prefill;
      stats_.prefill_s += dt;
      ++stats_.prefill_steps;
    } else {
      stats_.decode_tokens += batch.size();
      stats_.decode_s += dt;
      ++stats_.decode_steps;
      stats_.decode_bytes += model_->weight_bytes_per_step() + kv_read;
    }

    for (std::size_t r = 0; r < row_owner.size(); ++r) {
      Sequence& s = *row_owner[r];
      std::span<const std::uint32_t> allowed;
      if (s.constraint) {
        std::fill(mask.begin(), mask.end(), 0u);
        s.constraint->fill_bitmask(mask);
        allowed = mask;
      }
      const TokenId tok = s.sampler.sample(std::span<const float>(logits.data() + r * V, V), allowed);
      if (s.t_first < 0) {
        s.t_first = clock.seconds();
        s.result.stats.ttft_s = s.t_first;
      }
      if (tok < 0) {  // the constraint allows nothing
        finish(s, FinishReason::constraint);
        continue;
      }
      s.result.tokens.push_back(tok);
      if (s.constraint) s.constraint->accept(tok);
      if (s.req->on_token) s.req->on_token(tok);
      const bool is_eos = !s.req->ignore_eos && std::binary_search(eos_ids_.begin(), eos_ids_.end(), tok);
      const bool is_stop_id = std::find(s.req->stop_token_ids.begin(), s.req->stop_token_ids.end(), tok) !=
                              s.req->stop_token_ids.end();
      if (tokenizer_ && !tokenizer_->is_special(tok) && static_cast<std::size_t>(tok) < tokenizer_->vocab_size())
        s.result.text += tokenizer_->token_bytes(tok);
      if (is_eos || is_stop_id) {
        finish(s, FinishReason::eos);
        continue;
      }
      // Stop strings: search only the tail that the new token can have completed.
      bool stopped = false;
      std::size_t longest = 0;
      for (const auto& stop : s.req->stop) {
        if (stop.empty()) continue;
        longest = std::max(longest, stop.size());
        const auto at = s.result.text.find(stop, s.stop_scan_from);
        if (at != std::string::npos) {
          s.result.text.resize(at);
          stopped = true;
          break;
        }
      }
      if (stopped) {
        finish(s, FinishReason::stop_string);
        continue;
      }
      if (longest > 0 && s.result.text.size() >= longest) s.stop_scan_from = s.result.text.size() - longest + 1;
      if (s.constraint && s.req->jump_forward && s.result.tokens.size() < s.req->max_tokens) {
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
      if (s.constraint && s.constraint->is_terminated()) {
        finish(s, FinishReason::constraint);
        continue;
      }
      if (s.result.tokens.size() >= s.req->max_tokens) finish(s, FinishReason::length);
    }
  }

  std::vector<GenerationResult> out;
  out.reserve(seqs.size());
  for (auto& s : seqs) out.push_back(std::move(s.result));
  return out;
}

}  // namespace quarry::engine
