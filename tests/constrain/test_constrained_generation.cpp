// Schema-constrained decoding through the engine: whatever the model (the trained default model or a
// random-weight model of the same shape, where only the grammar keeps the output valid), greedy and
// sampled outputs parse as JSON and valijson (an independent validator) accepts them for the schema;
// generation ends because the grammar is complete; schemas the compiler rejects fail the request; the
// greedy constrained output equals the argmax over the allowed tokens, computed here step by step from
// the model's logits.
// GCC 12 reports a -Wrestrict false positive inside valijson's json_pointer helpers in Release builds.
#pragma GCC diagnostic ignored "-Wrestrict"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <unistd.h>
#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validator.hpp>
#include <vector>

#include "tests/common/device.hpp"
#include "engine/grammar/constraint.hpp"
#include "engine/grammar/matcher.hpp"
#include "engine/models/random_checkpoint.hpp"
#include "engine/core/batch.hpp"
#include "engine/runtime/engine.hpp"
#include "engine/memory/kv_cache.hpp"

namespace eng = quarry::engine;
namespace fs = std::filesystem;

namespace {

const fs::path kSource = QUARRY_SOURCE_DIR;

fs::path default_model() { return kSource / "models" / "quarry-extract-11m"; }

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error(p.string() + ": cannot open");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

const char* kPerson = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":8},
  "age":{"type":"integer","minimum":0,"maximum":120},
  "member":{"type":"boolean"},
  "nickname":{"type":["string","null"],"maxLength":4}},
  "required":["name","age","member"],"additionalProperties":false})";
const char* kPersonPrompt = "Name and age of the person: Ann, 31, a member.";
const char* kColours = R"({"type":"array","items":{"enum":["red","green","blue",null,3]},"minItems":1,"maxItems":4})";
// Numbers with a free fraction let a model repeat digits until max_tokens (a random-weight model does,
// "444.4444..."): the grammar cannot end them for it, so the always-complete schemas bound them.
const char* kPayment = R"({"type":"object","properties":{
  "date":{"type":"string","format":"date"},
  "amount_cents":{"type":"integer","minimum":0,"maximum":100000},
  "kind":{"anyOf":[{"const":"card"},{"type":"integer","minimum":1,"maximum":9}]},
  "tags":{"type":"array","items":{"type":"string","pattern":"^[A-Z]{2}[0-9]?$"},"maxItems":3}},
  "required":["date","amount_cents","kind"],"additionalProperties":false})";

/// valijson's verdict (with its error messages) on `text` for `schema_text`.
::testing::AssertionResult valid_for(const std::string& schema_text, const std::string& text) {
  nlohmann::json instance;
  try {
    instance = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "not JSON: " << e.what() << "\n" << text;
  }
  const auto schema_json = nlohmann::json::parse(schema_text);
  valijson::Schema schema;
  valijson::SchemaParser parser;
  valijson::adapters::NlohmannJsonAdapter schema_adapter(schema_json);
  parser.populateSchema(schema_adapter, schema);
  valijson::Validator validator;
  valijson::ValidationResults results;
  valijson::adapters::NlohmannJsonAdapter target(instance);
  if (validator.validate(schema, target, &results)) return ::testing::AssertionSuccess();
  auto f = ::testing::AssertionFailure() << "valijson rejects:\n" << text << "\n";
  valijson::ValidationResults::Error err;
  while (results.popError(err)) {
    for (const auto& c : err.context) f << c;
    f << ": " << err.description << "\n";
  }
  return f;
}

struct Models {
  std::shared_ptr<const eng::Tokenizer> tok;
  std::unique_ptr<eng::Engine> trained;
  std::vector<eng::TokenId> invoice_prompt;
};

eng::EngineOptions options() {
  eng::EngineOptions o;
  o.device = eng::testing::test_device();
  o.n_threads = 2;
  o.max_batch_tokens = 4096;  // whole prompts in one forward call (the reference does the same)
  return o;
}

Models& models() {
  static Models m = [] {
    Models m;
    if (!fs::is_directory(default_model())) throw std::runtime_error(default_model().string() + ": missing");
    m.tok = eng::Tokenizer::from_dir(default_model());
    m.trained = eng::Engine::open(default_model(), m.tok, options());
    const auto prompts = nlohmann::json::parse(read_file(default_model() / "prompts.json"));
    const std::string doc = read_file(kSource / "samples/invoices/en-txt-1.txt");
    m.invoice_prompt = m.tok->encode(m.tok->apply_chat_template(
        {{"system", prompts["kie"]["system"].get<std::string>()}, {"user", doc}}, true, false));
    return m;
  }();
  return m;
}

/// Same shapes and vocabulary as the default model, random weights (N(0, 0.02^2)): the grammar alone
/// keeps its output valid. Built on first use.
eng::Engine& random_engine() {
  static std::unique_ptr<eng::Engine> e = [] {
    auto& m = models();
    std::unique_ptr<eng::Engine> random;
    // One folder per process (ctest runs each test as its own process, possibly in parallel).
    const auto dir = fs::path(QUARRY_BINARY_DIR) / "test_scratch" / ("constrain_random_model_" + std::to_string(getpid()));
    fs::create_directories(dir);
    eng::write_random_checkpoint(read_file(default_model() / "config.json"), dir, eng::DType::f32, 7);
    random = std::make_unique<eng::Engine>(eng::load_model(dir, eng::testing::test_backend()), m.tok, options(), m.trained->eos_ids());
    std::error_code ec;
    fs::remove_all(dir, ec);  // loaded (or mapped: the mapping outlives the names)
    return random;
  }();
  return *e;
}

eng::GenerationRequest request(const std::vector<eng::TokenId>& prompt, const std::string& schema, float temperature,
                               std::uint64_t seed, std::size_t max_tokens) {
  eng::GenerationRequest r;
  r.prompt = prompt;
  r.json_schema = schema;
  r.max_tokens = max_tokens;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  return r;
}

/// Greedy and `n_seeds` sampled runs (temperature 1) in one batch; returns the forced-token count.
std::size_t expect_valid_runs(eng::Engine& engine, const std::vector<eng::TokenId>& prompt, const std::string& schema,
                              std::size_t max_tokens, bool jump_forward = false, std::uint64_t n_seeds = 4) {
  std::vector<eng::GenerationRequest> reqs;
  reqs.push_back(request(prompt, schema, 0.f, 0, max_tokens));
  for (std::uint64_t seed = 1; seed <= n_seeds; ++seed) reqs.push_back(request(prompt, schema, 1.f, seed, max_tokens));
  for (auto& r : reqs) r.jump_forward = jump_forward;
  const auto results = engine.generate(reqs);
  std::size_t forced = 0;
  for (std::size_t i = 0; i < results.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i) + " (0 = greedy)");
    const auto& r = results[i];
    EXPECT_TRUE(r.finish == eng::FinishReason::constraint || r.finish == eng::FinishReason::eos)
        << "finish: " << eng::finish_reason_name(r.finish) << " after " << r.tokens.size() << " tokens:\n"
        << r.text;
    EXPECT_TRUE(valid_for(schema, r.text));
    if (!jump_forward) {
      EXPECT_EQ(r.stats.forced_tokens, 0u);
    }
    forced += r.stats.forced_tokens;
  }
  return forced;
}

TEST(ConstrainedGeneration, RandomModelSmallSchemasAlwaysValid) {
  auto& m = models();
  const auto prompt = m.tok->encode("Write a JSON value:");
  for (const char* schema : {kPerson, kColours, kPayment}) {
    SCOPED_TRACE(schema);
    expect_valid_runs(random_engine(), prompt, schema, 400);
  }
}

TEST(ConstrainedGeneration, TrainedModelSmallSchemasAlwaysValid) {
  auto& m = models();
  for (const char* schema : {kPerson, kColours, kPayment}) {
    SCOPED_TRACE(schema);
    expect_valid_runs(*m.trained, m.invoice_prompt, schema, 400, false, 2);
  }
}

TEST(ConstrainedGeneration, TrainedModelInvoiceSchemaAlwaysValid) {
  auto& m = models();
  expect_valid_runs(*m.trained, m.invoice_prompt, read_file(kSource / "schemas/invoice.schema.json"), 1500, false, 3);
}

TEST(ConstrainedGeneration, JumpForwardOutputsStayValid) {
  auto& m = models();
  const auto prompt = m.tok->encode("Write a JSON value:");
  std::size_t forced = 0;
  for (const char* schema : {kPerson, kPayment}) {
    SCOPED_TRACE(schema);
    forced += expect_valid_runs(random_engine(), prompt, schema, 400, true);
  }
  forced += expect_valid_runs(*m.trained, m.invoice_prompt, kPerson, 400, true, 2);
  // Property names are forced text: jump-forward must have appended some tokens.
  EXPECT_GT(forced, 0u);
}

// Jump-forward keeps the last token of each forced text for the model (it may merge with what
// follows). Forcing the whole text made this model's greedy invoice drift (`":` forced, `":"` ruled
// out: null names, then a line_items loop until max_tokens); with the policy its greedy output on the
// sample invoice is the plain greedy output.
TEST(ConstrainedGeneration, JumpForwardGreedyInvoiceMatchesPlainGreedy) {
  auto& m = models();
  const std::string schema = read_file(kSource / "schemas/invoice.schema.json");
  auto req = request(m.invoice_prompt, schema, 0.f, 0, 1500);
  const auto plain = m.trained->generate(req);
  req.jump_forward = true;
  const auto jf = m.trained->generate(req);
  EXPECT_EQ(jf.finish, eng::FinishReason::constraint);
  EXPECT_GT(jf.stats.forced_tokens, 0u);
  EXPECT_TRUE(valid_for(schema, jf.text));
  EXPECT_EQ(jf.text, plain.text);
}

// The LM head computed only for the groups of ids the grammar allows (EngineOptions::grammar_lm_head,
// bf16 compute) gives the same tokens as the full LM head: greedy with and without drafting, and
// sampled with the same seed.
TEST(ConstrainedGeneration, GrammarLmHeadChangesNoToken) {
  auto& m = models();
  auto full_opts = options();
  full_opts.grammar_lm_head = false;
  auto full = eng::Engine::open(default_model(), m.tok, full_opts);
  auto mtp_opts = options();
  mtp_opts.mtp_depth = 2;
  auto mtp = eng::Engine::open(default_model(), m.tok, mtp_opts);
  const std::string schema = read_file(kSource / "schemas/invoice.schema.json");
  for (float temperature : {0.f, 0.8f}) {
    auto req = request(m.invoice_prompt, schema, temperature, 7, 600);
    const auto a = m.trained->generate(req);
    const auto b = full->generate(req);
    EXPECT_EQ(a.tokens, b.tokens) << "temperature " << temperature;
    if (temperature == 0.f) {
      EXPECT_EQ(mtp->generate(req).tokens, b.tokens);
    }
  }
  EXPECT_EQ(full->stats().grammar_lm_head_steps, 0u);
  if (m.trained->model().supports_lm_head_groups()) {  // the bundled bf16 model on an AMX machine
    EXPECT_GT(m.trained->stats().grammar_lm_head_steps, 0u);
    EXPECT_GT(mtp->stats().grammar_lm_head_steps, 0u);
  }
}

// Greedy rows picked by the backend (EngineOptions::greedy_on_backend: masked argmax, only ids back)
// give the tokens the host sampler gives: a batch of constrained and unconstrained greedy requests,
// with and without MTP drafting (verification from the ids), and with a sampled request beside them
// (its rows are drawn alike in both engines: from the logits on the host, or by the backend where
// sample_on_backend applies).
/// Three requests at `temperature`, seeded seed, seed + 1, seed + 2: the invoice prompt under the invoice
/// schema (500 tokens), a short prompt under kPerson (60), the invoice prompt unconstrained (40).
std::vector<eng::GenerationRequest> three_requests(float temperature, std::uint64_t seed) {
  auto& m = models();
  const std::string invoice = read_file(kSource / "schemas/invoice.schema.json");
  return {request(m.invoice_prompt, invoice, temperature, seed, 500),
          request(m.tok->encode(kPersonPrompt), kPerson, temperature, seed + 1, 60),
          request(m.invoice_prompt, "", temperature, seed + 2, 40)};
}

TEST(ConstrainedGeneration, GreedyOnTheBackendChangesNoToken) {
  auto& m = models();
  const std::string invoice = read_file(kSource / "schemas/invoice.schema.json");
  std::vector<eng::GenerationRequest> greedy = three_requests(0.f, 0);
  auto mixed = greedy;
  mixed.push_back(request(m.tok->encode(kPersonPrompt), kPerson, 0.9f, 5, 60));
  for (std::size_t depth : {0, 2}) {
    SCOPED_TRACE("mtp depth " + std::to_string(depth));
    auto on_opts = options(), off_opts = options();
    on_opts.mtp_depth = off_opts.mtp_depth = depth;
    on_opts.greedy_on_backend = eng::EngineOptions::OnBackend::on;
    off_opts.greedy_on_backend = eng::EngineOptions::OnBackend::off;
    auto on = eng::Engine::open(default_model(), m.tok, on_opts);
    auto off = eng::Engine::open(default_model(), m.tok, off_opts);
    for (const auto* reqs : {&greedy, &mixed}) {
      const auto a = on->generate(*reqs);
      const auto b = off->generate(*reqs);
      for (std::size_t i = 0; i < reqs->size(); ++i) {
        EXPECT_EQ(a[i].tokens, b[i].tokens) << "request " << i << " of " << reqs->size();
        EXPECT_EQ(a[i].finish, b[i].finish) << "request " << i << " of " << reqs->size();
      }
      EXPECT_TRUE(valid_for(invoice, a[0].text));
    }
    EXPECT_GT(on->stats().greedy_on_backend_steps, 0u);
    EXPECT_EQ(off->stats().greedy_on_backend_steps, 0u);
    if (depth > 0) {
      EXPECT_GT(on->stats().accepted_tokens, 0u);
    }
  }
}

// Rows of temperature > 0 drawn by the backend (EngineOptions::sample_on_backend: Backend::sample_rows,
// the batch's masks in one upload, only ids back): constrained draws stay valid JSON of their schema,
// the same seeds give the same tokens on a fresh engine, a greedy request beside them keeps its host
// tokens, and a drafting (MTP) request's sampled rows stay on the host.
TEST(ConstrainedGeneration, SampledOnTheBackendStaysValidAndReproducible) {
  auto& m = models();
  const std::string invoice = read_file(kSource / "schemas/invoice.schema.json");
  std::vector<eng::GenerationRequest> reqs = three_requests(0.8f, 3);
  reqs.push_back(request(m.tok->encode(kPersonPrompt), kPerson, 0.f, 0, 60));
  reqs[1].sampling.top_p = 0.9f;
  reqs[2].sampling.top_k = 20;
  auto on_opts = options(), off_opts = options();
  on_opts.sample_on_backend = eng::EngineOptions::OnBackend::on;
  off_opts.sample_on_backend = eng::EngineOptions::OnBackend::off;
  auto first = eng::Engine::open(default_model(), m.tok, on_opts);
  auto second = eng::Engine::open(default_model(), m.tok, on_opts);
  auto off = eng::Engine::open(default_model(), m.tok, off_opts);
  const auto a = first->generate(reqs);
  const auto b = second->generate(reqs);
  const auto c = off->generate(reqs);
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "request " << i;
    EXPECT_FALSE(a[i].tokens.empty()) << "request " << i;
  }
  EXPECT_TRUE(valid_for(invoice, a[0].text)) << a[0].text;
  EXPECT_TRUE(valid_for(kPerson, a[1].text)) << a[1].text;
  EXPECT_EQ(a[3].tokens, c[3].tokens);  // greedy: the argmax either way
  EXPECT_GT(first->stats().sampled_on_backend_steps, 0u);
  EXPECT_EQ(off->stats().sampled_on_backend_steps, 0u);

  auto mtp_opts = on_opts;
  mtp_opts.mtp_depth = 2;
  auto mtp = eng::Engine::open(default_model(), m.tok, mtp_opts);
  const auto d = mtp->generate(reqs[1]);
  EXPECT_TRUE(valid_for(kPerson, d.text)) << d.text;
  EXPECT_EQ(mtp->stats().sampled_on_backend_steps, 0u);
}

TEST(ConstrainedGeneration, SchemaErrorsFailTheRequest) {
  auto& m = models();
  const auto prompt = m.tok->encode("x");
  auto req = request(prompt, R"({"type":"object","unevaluatedProperties":false})", 0.f, 0, 10);
  try {
    m.trained->generate(req);
    FAIL() << "an unsupported keyword must fail the request";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("unevaluatedProperties"), std::string::npos) << e.what();
  }
  req.json_schema_lenient = true;  // lenient: the keyword is ignored, the output is still an object
  const auto r = m.trained->generate(req);
  (void)r;
  req.json_schema = R"({"type": "object",)";
  EXPECT_THROW(m.trained->generate(req), std::invalid_argument);
  req.json_schema = R"({"$ref": "#/$defs/missing"})";
  EXPECT_THROW(m.trained->generate(req), std::invalid_argument);
  // No tokenizer: a schema cannot be compiled.
  eng::Engine bare(eng::load_model(default_model(), eng::testing::test_backend()), nullptr, options());
  req.json_schema = kPerson;
  EXPECT_THROW(bare.generate(req), std::invalid_argument);
}

TEST(ConstrainedGeneration, GrammarUsesTheEnginesEosIds) {
  auto& m = models();
  auto vocab = m.trained->grammar_vocabulary();
  std::vector<eng::TokenId> expected;
  for (auto id : m.trained->eos_ids())
    if (static_cast<std::size_t>(id) < m.tok->vocab_size()) expected.push_back(id);
  auto got = vocab->eos_ids();
  std::sort(got.begin(), got.end());
  EXPECT_FALSE(expected.empty());
  EXPECT_EQ(got, expected);
}

/// Greedy constrained decoding computed here from the model's logits: a fresh KV cache, the prompt in
/// one forward call, then one token per call; at each step the argmax of the logits over the tokens
/// the grammar allows. Stops at EOS or when the grammar is complete and allows only EOS.
std::vector<eng::TokenId> reference_greedy(const fs::path& model_dir, eng::Engine& engine,
                                           const std::vector<eng::TokenId>& prompt, const std::string& schema,
                                           std::size_t max_tokens) {
  auto model = eng::load_model(model_dir, eng::testing::test_backend());
  const std::size_t V = model->config().vocab_size;
  auto kv_owner = model->make_kv_cache(prompt.size() + max_tokens + 16);
  eng::KvCache& kv = *kv_owner;
  const auto seq = kv.create_sequence();
  eng::grammar::GrammarCompiler compiler(engine.grammar_vocabulary());
  eng::grammar::GrammarMatcher matcher(compiler.compile_json_schema(schema));
  const auto& info = matcher.compiled().tokenizer();
  std::vector<std::uint32_t> mask(info.mask_words());
  std::vector<float> logits(V);
  eng::Batch batch;
  for (std::size_t p = 0; p < prompt.size(); ++p)
    batch.add(prompt[p], static_cast<std::int32_t>(p), seq, p + 1 == prompt.size());
  std::size_t n = prompt.size();
  std::vector<eng::TokenId> out;
  while (out.size() < max_tokens) {
    if (!kv.reserve(seq, n)) throw std::runtime_error("reference: KV cache full");
    model->forward(batch, kv, logits.data());
    matcher.fill_bitmask(mask);
    eng::TokenId best = -1;
    float best_logit = -std::numeric_limits<float>::infinity();
    bool only_eos = true;
    for (std::size_t t = 0; t < info.vocab_size(); ++t) {
      if (!(mask[t / 32] >> (t % 32) & 1u)) continue;
      if (!info.is_eos(static_cast<eng::TokenId>(t))) only_eos = false;
      if (logits[t] > best_logit) best_logit = logits[t], best = static_cast<eng::TokenId>(t);
    }
    if (matcher.can_terminate() && only_eos) break;  // complete value: the engine stops here too
    if (best < 0) throw std::runtime_error("reference: the grammar allows nothing");
    out.push_back(best);
    if (info.is_eos(best)) break;
    EXPECT_TRUE(matcher.accept(best));
    batch.clear();
    batch.add(best, static_cast<std::int32_t>(n), seq, true);
    ++n;
  }
  return out;
}

TEST(ConstrainedGeneration, GreedyEqualsArgmaxOverAllowedTokens) {
  auto& m = models();
  const std::string schema = read_file(kSource / "schemas/invoice.schema.json");
  const auto r = m.trained->generate(request(m.invoice_prompt, schema, 0.f, 0, 600));
  const auto ref = reference_greedy(default_model(), *m.trained, m.invoice_prompt, schema, 600);
  EXPECT_EQ(r.tokens, ref) << "engine:\n" << r.text << "\nreference:\n" << m.tok->decode(ref, true);
  EXPECT_TRUE(valid_for(schema, r.text));
}

TEST(ConstrainedGeneration, AdapterReportsTerminationWhenOnlyEosRemains) {
  auto& m = models();
  eng::grammar::GrammarCompiler compiler(m.trained->grammar_vocabulary());
  eng::grammar::GrammarConstraint c(compiler.compile_json_schema(R"({"enum":["ab"]})"));
  const auto ids = m.tok->encode("\"ab\"");
  for (std::size_t i = 0; i < ids.size(); ++i) {
    EXPECT_FALSE(c.is_terminated());
    c.accept(ids[i]);
  }
  EXPECT_TRUE(c.is_terminated());
  std::vector<std::uint32_t> mask(c.mask_words() + 2, 0xffffffffu);
  c.fill_bitmask(mask);
  for (std::size_t t = 0; t < mask.size() * 32; ++t)
    if (mask[t / 32] >> (t % 32) & 1u) {
      EXPECT_TRUE(m.trained->grammar_vocabulary()->is_eos(static_cast<eng::TokenId>(t))) << t;
    }
  EXPECT_THROW(c.accept(ids[0]), std::logic_error);
}

// Draft proposals from forced text: the tokenizer's encoding of the bytes the grammar forces, nothing
// accepted (the matcher's state and mask are unchanged), and empty without a tokenizer.
TEST(ConstrainedGeneration, ForcedTextTokensEncodeTheForcedBytesWithoutAccepting) {
  auto& m = models();
  eng::grammar::GrammarCompiler compiler(m.trained->grammar_vocabulary());
  const auto g = compiler.compile_json_schema(
      R"({"type":"object","properties":{"invoice_number":{"type":"string"}},"required":["invoice_number"],"additionalProperties":false})");
  eng::grammar::GrammarConstraint c(g, m.tok);
  EXPECT_EQ(c.forced_text_tokens(), m.tok->encode("{\"invoice_number\":\""));
  std::vector<std::uint32_t> before(c.mask_words()), after(c.mask_words());
  c.fill_bitmask(before);
  (void)c.forced_text_tokens();
  c.fill_bitmask(after);
  EXPECT_EQ(before, after);
  const auto first = m.tok->encode("{");
  for (auto id : first) c.accept(id);
  EXPECT_EQ(c.forced_text_tokens(), m.tok->encode("\"invoice_number\":\""));
  eng::grammar::GrammarConstraint no_tok(g);
  EXPECT_TRUE(no_tok.forced_text_tokens().empty());
}

// The shipped rag answer schema bounds every part of an answer (answer and quote lengths, number of
// quotes, page numbers), so that an answer always ends within the 1024 tokens `quarry run` gives a
// question (pipeline/run/stage_build.cpp rag_answer_tokens): even a random-weight model, which writes
// every string and number as long as the grammar lets it, finishes because the grammar is complete.
TEST(ConstrainedGeneration, RagAnswersEndWithinTheirBudgetWhateverTheModel) {
  auto& m = models();
  const std::string schema = read_file(kSource / "schemas/rag_answer.schema.json");
  const auto prompt = m.tok->encode("Answer with JSON:");
  expect_valid_runs(random_engine(), prompt, schema, 1024, false, 6);
}

}  // namespace
