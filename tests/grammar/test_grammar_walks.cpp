// Property test with the real Qwen3 vocabulary: random legal walks under the token bitmask always
// produce text that parses as JSON and that valijson (an independent validator) accepts for the
// schema. Along the way: every token the mask allows is accepted by accept(), sampled disallowed
// tokens are rejected, the cached mask equals the uncached reference walk over the whole vocabulary,
// rollback restores the mask, and jump-forward strings are accepted.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>
#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validator.hpp>

#include "engine/grammar/random_walk.hpp"
#include "engine/tokenizer/tokenizer.hpp"

namespace eg = quarry::engine::grammar;
namespace fs = std::filesystem;

namespace {

std::shared_ptr<const eg::TokenizerInfo> vocab() {
  static auto v = eg::TokenizerInfo::from_tokenizer(
      *quarry::engine::Tokenizer::from_file(std::string(QUARRY_SHARED_DIR) + "/tokenizers/qwen3/tokenizer.json"));
  return v;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  return {std::istreambuf_iterator<char>(in), {}};
}

fs::path schema_dir() { return fs::path(QUARRY_SOURCE_DIR) / "tests/grammar/schemas"; }

// The shipped invoice schema when it is in the tree, else the test copy.
fs::path invoice_schema() {
  fs::path shipped = fs::path(QUARRY_SOURCE_DIR) / "schemas/invoice.schema.json";
  return fs::exists(shipped) ? shipped : schema_dir() / "invoice.schema.json";
}

void run_walks(const fs::path& schema_path, int walks, std::uint64_t seed) {
  SCOPED_TRACE(schema_path.filename().string());
  std::string text = read(schema_path);
  eg::GrammarCompiler compiler(vocab());
  auto cg = compiler.compile_json_schema(text);
  ASSERT_EQ(compiler.compile_json_schema(text), cg);  // cached by schema hash
  EXPECT_TRUE(cg->meta().post_validation.empty()) << cg->meta().post_validation[0];

  nlohmann::json schema_doc = nlohmann::json::parse(text);
  valijson::Schema schema;
  valijson::SchemaParser parser;
  valijson::adapters::NlohmannJsonAdapter schema_adapter(schema_doc);
  parser.populateSchema(schema_adapter, schema);
  valijson::Validator validator;

  std::mt19937_64 rng(seed);
  std::vector<std::uint32_t> ref(vocab()->mask_words()), again(vocab()->mask_words());
  int steps = 0;
  for (int w = 0; w < walks; ++w) {
    auto check = [&](eg::GrammarMatcher& m, const std::vector<std::uint32_t>& mask) {
      ++steps;
      // Disallowed tokens are rejected by accept() (state unchanged).
      for (int k = 0; k < 4; ++k) {
        auto id = static_cast<eg::TokenId>(rng() % vocab()->vocab_size());
        if (!((mask[id / 32] >> (id % 32)) & 1)) {
          ASSERT_FALSE(m.accept(id)) << "token " << id;
        }
      }
      // The cached mask equals the reference walk (sampled: the walk costs a full vocabulary pass).
      if (steps % 97 == 1) {
        m.fill_bitmask_uncached(ref);
        ASSERT_EQ(ref, mask) << "cached mask differs from the reference walk";
      }
      // Jump-forward bytes are legal.
      std::string jf = m.jump_forward();
      if (!jf.empty()) {
        ASSERT_TRUE(m.accept_string(jf)) << jf;
        m.rollback(1);
      }
      m.fill_bitmask(again);
      ASSERT_EQ(again, mask);
    };
    auto r = eg::random_walk(cg, rng, 400, check);
    ASSERT_TRUE(r.terminated) << r.text;
    nlohmann::json doc;
    ASSERT_NO_THROW(doc = nlohmann::json::parse(r.text)) << r.text;
    valijson::adapters::NlohmannJsonAdapter target(doc);
    valijson::ValidationResults results;
    bool ok = validator.validate(schema, target, &results);
    std::string why;
    valijson::ValidationResults::Error err;
    while (results.popError(err)) {
      for (const auto& c : err.context) why += c;
      why += ": " + err.description + "\n";
    }
    EXPECT_TRUE(ok) << r.text << "\n" << why;
  }
  auto st = cg->stats();
  std::cout << schema_path.filename().string() << ": " << walks << " walks, " << steps << " masks, cache hits "
            << st.hits << " misses " << st.misses << " node tables " << st.node_tables << "\n";
}


// Masks of two node-table builders over the same grammar, compared at every step of random walks
// over every test schema (the walk follows the first builder's masks).
void expect_same_masks(eg::NodeTableMode mode_a, eg::NodeTableMode mode_b, int walks, int max_steps) {
  std::vector<fs::path> schemas{invoice_schema()};
  for (const auto& e : fs::directory_iterator(schema_dir()))
    if (e.path().extension() == ".json" && e.path().filename() != "invoice.schema.json") schemas.push_back(e.path());
  std::sort(schemas.begin(), schemas.end());
  std::uint64_t derived = 0;
  for (const auto& sp : schemas) {
    SCOPED_TRACE(sp.filename().string());
    auto res = eg::compile_json_schema(read(sp));
    auto ga = std::make_shared<eg::CompiledGrammar>(res.grammar, vocab(), res, mode_a);
    auto gb = std::make_shared<eg::CompiledGrammar>(res.grammar, vocab(), res, mode_b);
    std::mt19937_64 rng(5);
    std::vector<std::uint32_t> a(vocab()->mask_words()), b(vocab()->mask_words());
    int steps = 0;
    for (int w = 0; w < walks; ++w) {
      eg::GrammarMatcher ma(ga), mb(gb);
      for (int t = 0; t < max_steps && !ma.is_terminated(); ++t) {
        ma.fill_bitmask(a);
        mb.fill_bitmask(b);
        ++steps;
        ASSERT_EQ(a, b) << "step " << steps;
        std::vector<eg::TokenId> allowed;
        for (std::size_t i = 0; i < a.size() * 32; ++i)
          if ((a[i / 32] >> (i % 32)) & 1) allowed.push_back(static_cast<eg::TokenId>(i));
        ASSERT_FALSE(allowed.empty());
        // Prefer tokens that end values now and then, so that walks finish.
        eg::TokenId pick = allowed[rng() % allowed.size()];
        if (rng() % 3 == 0)
          for (int k = 0; k < 16; ++k) {
            eg::TokenId c = allowed[rng() % allowed.size()];
            if (vocab()->is_eos(c) || vocab()->token(c).find_first_of("\"}],") != std::string::npos) { pick = c; break; }
          }
        ASSERT_TRUE(ma.accept(pick));
        ASSERT_TRUE(mb.accept(pick));
      }
    }
    std::cout << sp.filename().string() << ": " << steps << " masks equal, node tables derived from a similar node: "
              << ga->stats().derived_tables << " / " << gb->stats().derived_tables << "\n";
    derived += ga->stats().derived_tables + gb->stats().derived_tables;
  }
  // The walks reach length-counter positions (the email domain labels of event_log), so tables
  // derived from a similar node are among those compared.
  EXPECT_GT(derived, 0u);
}

}  // namespace

TEST(GrammarWalks, Invoice) { run_walks(invoice_schema(), 20, 11); }
TEST(GrammarWalks, ShipmentConditionalKeywords) { run_walks(schema_dir() / "shipment.schema.json", 20, 17); }

// The trie-walk node tables (default) against the earlier full-vocabulary walk, at every step of
// random walks over every schema: the masks must be identical.
TEST(GrammarWalks, TrieTablesEqualFullWalk) {
  expect_same_masks(eg::NodeTableMode::kTrie, eg::NodeTableMode::kFullWalk, 6, 300);
}

// Node tables shared between grammar nodes of the same description (kTrie) against one table per
// node (kTrieUnshared), at every step of longer random walks over every schema.
TEST(GrammarWalks, SharedTablesEqualUnshared) {
  expect_same_masks(eg::NodeTableMode::kTrie, eg::NodeTableMode::kTrieUnshared, 12, 400);
}
TEST(GrammarWalks, ProductCatalog) { run_walks(schema_dir() / "product_catalog.schema.json", 20, 12); }
TEST(GrammarWalks, FileTree) { run_walks(schema_dir() / "file_tree.schema.json", 20, 13); }
TEST(GrammarWalks, EventLog) { run_walks(schema_dir() / "event_log.schema.json", 20, 14); }
TEST(GrammarWalks, ContactCard) { run_walks(schema_dir() / "contact_card.schema.json", 20, 15); }
TEST(GrammarWalks, RagAnswer) { run_walks(schema_dir() / "rag_answer.schema.json", 20, 16); }


// A compiled grammar is shared by sequences on several threads: the walks (which depend on every
// mask) come out the same as on one thread with a fresh grammar.
TEST(GrammarWalks, SharedAcrossThreads) {
  std::string text = read(schema_dir() / "product_catalog.schema.json");
  auto r = eg::compile_json_schema(text);
  auto walk_texts = [&](const std::shared_ptr<const eg::CompiledGrammar>& cg, std::uint64_t seed) {
    std::vector<std::string> out;
    for (int w = 0; w < 3; ++w) {
      std::mt19937_64 rng(seed * 100 + static_cast<std::uint64_t>(w));
      out.push_back(eg::random_walk(cg, rng, 200).text);
    }
    return out;
  };
  std::vector<std::vector<std::string>> expected;
  for (std::uint64_t t = 0; t < 4; ++t)
    expected.push_back(walk_texts(std::make_shared<eg::CompiledGrammar>(r.grammar, vocab(), r), t));
  auto shared = std::make_shared<const eg::CompiledGrammar>(r.grammar, vocab(), r);
  std::vector<std::vector<std::string>> got(4);
  std::vector<std::thread> threads;
  for (std::uint64_t t = 0; t < 4; ++t) threads.emplace_back([&, t] { got[t] = walk_texts(shared, t); });
  for (auto& th : threads) th.join();
  EXPECT_EQ(got, expected);
}
