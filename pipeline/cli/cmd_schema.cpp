// `quarry schema`: compile JSON Schemas to grammars, check instances against them, and measure
// compile and token-bitmask times with a real vocabulary.
//
//   quarry schema compile SCHEMA [--lenient] [--draft D] [--whitespace N] [--strict] [--dump]
//   quarry schema check-instance --schema S --instance I [--lenient] [--any-key-order]
//   quarry schema bench --schema S --tokenizer TOKENIZER_JSON [--walks N] [--max-tokens N]
//
// Exit codes: 0 success / accepted; 1 usage error, unreadable file or schema the compiler refuses;
// 3 check-instance: the grammar rejects the instance.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>

#include <spdlog/spdlog.h>

#include "engine/grammar/json_schema.hpp"
#include "engine/grammar/matcher.hpp"
#include "engine/grammar/random_walk.hpp"
#include "engine/tokenizer/tokenizer.hpp"
#include "pipeline/cli/commands.hpp"

namespace quarry::cli {

namespace eg = quarry::engine::grammar;
using Clock = std::chrono::steady_clock;

namespace {

struct SchemaArgs {
  std::string schema, instance, tokenizer, draft = "auto";
  bool lenient = false, strict = false, dump = false, any_key_order = false;
  int whitespace = 0, walks = 20;
  std::size_t max_tokens = 400;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot read file");
  return {std::istreambuf_iterator<char>(in), {}};
}

eg::SchemaOptions options(const SchemaArgs& a) {
  eg::SchemaOptions o;
  o.lenient = a.lenient;
  o.strict = a.strict;
  o.max_whitespace = a.whitespace;
  if (a.draft == "4") o.draft = eg::Draft::k4;
  else if (a.draft == "6") o.draft = eg::Draft::k6;
  else if (a.draft == "7") o.draft = eg::Draft::k7;
  else if (a.draft == "2019-09") o.draft = eg::Draft::k2019_09;
  else if (a.draft == "2020-12") o.draft = eg::Draft::k2020_12;
  return o;
}

const char* draft_name(eg::Draft d) {
  switch (d) {
    case eg::Draft::k4: return "draft-04";
    case eg::Draft::k6: return "draft-06";
    case eg::Draft::k7: return "draft-07";
    case eg::Draft::k2019_09: return "2019-09";
    default: return "2020-12";
  }
}

// Compiles, logging the error with the file name; returns nullopt on failure.
std::optional<eg::SchemaCompileResult> compile(const SchemaArgs& a, double* ms = nullptr) {
  std::string text = read_file(a.schema);
  try {
    auto t0 = Clock::now();
    auto r = eg::compile_json_schema(std::string_view(text), options(a));
    if (ms) *ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    for (const auto& w : r.warnings) spdlog::warn("{}: {}", a.schema, w);
    return r;
  } catch (const eg::SchemaError& e) {
    spdlog::error("{}: {}", a.schema, e.what());
    return std::nullopt;
  }
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5))];
}

void run_compile(const SchemaArgs& a, Context& ctx) {
  double ms = 0;
  auto r = compile(a, &ms);
  if (!r) { ctx.exit_code = 1; return; }
  const eg::Grammar& g = *r->grammar;
  std::printf("schema: %s\ndraft: %s\ncompile_ms: %.3f\nrules: %zu\nnodes: %zu\nbyte_edges: %zu\ncall_edges: %zu\n",
              a.schema.c_str(), draft_name(r->draft), ms, g.rules.size(), g.nodes.size(), g.num_byte_edges(),
              g.num_call_edges());
  std::printf("warnings: %zu\n", r->warnings.size());
  for (const auto& w : r->warnings) std::printf("  %s\n", w.c_str());
  std::printf("post_validation: %zu\n", r->post_validation.size());
  for (const auto& p : r->post_validation) std::printf("  %s\n", p.c_str());
  if (a.dump) std::printf("%s", g.to_string().c_str());
}

void run_check(const SchemaArgs& a, Context& ctx) {
  auto r = compile(a);
  if (!r) { ctx.exit_code = 1; return; }
  eg::ordered_json inst;
  try {
    inst = eg::ordered_json::parse(read_file(a.instance));
  } catch (const eg::ordered_json::exception& e) {
    spdlog::error("{}: invalid JSON: {}", a.instance, e.what());
    ctx.exit_code = 1;
    return;
  }
  bool ok = eg::check_instance(*r->grammar, inst, a.any_key_order);
  std::printf("%s\n", ok ? "accepted" : "rejected");
  ctx.exit_code = ok ? 0 : 3;
}

void run_bench(const SchemaArgs& a, Context& ctx) {
  std::string text = read_file(a.schema);
  std::vector<double> compile_ms;
  std::optional<eg::SchemaCompileResult> res;
  for (int k = 0; k < 11; ++k) {
    double ms = 0;
    res = compile(a, &ms);
    if (!res) { ctx.exit_code = 1; return; }
    compile_ms.push_back(ms);
  }
  auto t0 = Clock::now();
  auto tok = engine::Tokenizer::from_file(a.tokenizer);
  auto info = eg::TokenizerInfo::from_tokenizer(*tok);
  double vocab_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  auto cg = std::make_shared<eg::CompiledGrammar>(res->grammar, info, *res);
  std::vector<double> cold, warm;
  std::size_t tokens = 0;
  auto timed = [](std::vector<double>& out) {
    return [&out](eg::GrammarMatcher& m) {
      std::vector<std::uint32_t> mask(m.compiled().tokenizer().mask_words());
      auto s = Clock::now();
      m.fill_bitmask(mask);
      out.push_back(std::chrono::duration<double, std::micro>(Clock::now() - s).count());
    };
  };
  for (int pass = 0; pass < 2; ++pass)
    for (int w = 0; w < a.walks; ++w) {
      std::mt19937_64 rng(1000 + w);
      auto r = eg::random_walk(cg, rng, a.max_tokens, {}, timed(pass == 0 ? cold : warm));
      if (pass == 0) tokens += r.tokens;
    }
  std::printf("schema: %s\ncompile_ms_p50: %.3f\nvocab_load_and_preprocess_ms: %.1f (once per tokenizer)\n", a.schema.c_str(),
              pct(compile_ms, 50), vocab_ms);
  std::printf("walks: %d\ntokens: %zu\nthreads: 1\n", a.walks, tokens);
  std::printf("bitmask_us_cold: p50 %.1f p99 %.1f (mask caches filling)\n", pct(cold, 50), pct(cold, 99));
  std::printf("bitmask_us_warm: p50 %.1f p99 %.1f (same walks, caches filled)\n", pct(warm, 50), pct(warm, 99));
}

}  // namespace

void add_schema_command(CLI::App& app, Context& ctx) {
  auto* sub = app.add_subcommand("schema", "Compile JSON Schemas to grammars, check instances, measure masks");
  sub->require_subcommand(1);
  auto args = std::make_shared<SchemaArgs>();
  auto common = [&](CLI::App* c) {
    c->add_flag("--lenient", args->lenient, "Ignore unsupported keywords (with a warning) instead of failing");
    c->add_option("--draft", args->draft, "auto (from $schema), 4, 6, 7, 2019-09 or 2020-12")
        ->check(CLI::IsMember({"auto", "4", "6", "7", "2019-09", "2020-12"}))
        ->capture_default_str();
    c->add_option("--whitespace", args->whitespace, "Whitespace bytes allowed around JSON punctuation (0 = compact)")
        ->capture_default_str();
    c->add_flag("--strict", args->strict, "Treat missing additionalProperties / items as false");
  };

  auto* comp = sub->add_subcommand("compile", "Compile a schema; print errors or grammar statistics");
  comp->add_option("schema", args->schema, "JSON Schema file")->required()->check(CLI::ExistingFile);
  comp->add_flag("--dump", args->dump, "Print the grammar (one line per node)");
  common(comp);
  comp->callback([args, &ctx] { run_compile(*args, ctx); });

  auto* chk = sub->add_subcommand(
      "check-instance",
      "Serialise the instance compactly (keeping its key order) and say whether the grammar produces it:\n"
      "prints `accepted` (exit 0) or `rejected` (exit 3)");
  chk->add_option("--schema", args->schema, "JSON Schema file")->required()->check(CLI::ExistingFile);
  chk->add_option("--instance", args->instance, "JSON instance file")->required()->check(CLI::ExistingFile);
  chk->add_flag("--any-key-order", args->any_key_order,
                "Accept object members in any order (the grammar generates declared properties in schema order)");
  common(chk);
  chk->callback([args, &ctx] { run_check(*args, ctx); });

  auto* bench = sub->add_subcommand(
      "bench", "Compile time and per-token bitmask µs (p50, p99) over random legal walks, single-threaded");
  bench->add_option("--schema", args->schema, "JSON Schema file")->required()->check(CLI::ExistingFile);
  bench->add_option("--tokenizer", args->tokenizer, "tokenizer.json of the vocabulary")->required()->check(CLI::ExistingFile);
  bench->add_option("--walks", args->walks, "Number of random walks")->capture_default_str();
  bench->add_option("--max-tokens", args->max_tokens, "Soft length of a walk in tokens")->capture_default_str();
  common(bench);
  bench->callback([args, &ctx] { run_bench(*args, ctx); });
}

}  // namespace quarry::cli
