// Shared by test_mtp_engine.cpp and test_mtp_engine_slow.cpp: greedy generation of the default model on
// sample invoices (invoice schema constraint) with MTP drafting at several depths against no drafting.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/common/device.hpp"
#include "engine/runtime/engine.hpp"

namespace quarry::engine {
namespace {

std::filesystem::path default_model() { return std::filesystem::path(QUARRY_SOURCE_DIR) / "models/quarry-extract-11m"; }

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<GenerationRequest> invoice_requests(Engine& engine, const Tokenizer& tok,
                                                const std::vector<std::string>& docs, std::size_t max_tokens) {
  const auto prompts = nlohmann::json::parse(read_file(default_model() / "prompts.json"));
  const std::string schema = read_file(std::filesystem::path(QUARRY_SOURCE_DIR) / "schemas/invoice.schema.json");
  std::vector<GenerationRequest> reqs;
  for (const auto& d : docs) {
    const std::string text = read_file(std::filesystem::path(QUARRY_SOURCE_DIR) / "samples/invoices" / d);
    GenerationRequest r;
    r.prompt = tok.encode(tok.apply_chat_template(
        {{"system", prompts["kie"]["system"].get<std::string>()}, {"user", text}}, true, false));
    r.max_tokens = max_tokens;
    r.constraint = engine.json_schema_constraint(schema);
    reqs.push_back(std::move(r));
  }
  return reqs;
}

void check_default_model_lossless(const std::vector<std::string>& docs, const std::vector<std::size_t>& depths) {
  auto tok = Tokenizer::from_dir(default_model());
  std::vector<std::vector<TokenId>> want;
  {
    auto engine = Engine::open(default_model(), tok, {.device = testing::test_device(), .n_threads = 2});
    for (auto& r : engine->generate(invoice_requests(*engine, *tok, docs, 700))) {
      EXPECT_TRUE(r.finish == FinishReason::constraint || r.finish == FinishReason::length);
      want.push_back(r.tokens);
    }
  }
  for (std::size_t depth : depths) {
    EngineOptions o;
    o.device = testing::test_device();
    o.n_threads = 2;
    o.mtp_depth = depth;
    auto engine = Engine::open(default_model(), tok, o);
    const auto got = engine->generate(invoice_requests(*engine, *tok, docs, 700));
    for (std::size_t i = 0; i < docs.size(); ++i) EXPECT_EQ(got[i].tokens, want[i]) << docs[i] << " depth " << depth;
    const auto& st = engine->stats();
    EXPECT_GT(st.accepted_tokens, st.draft_tokens / 2) << "depth " << depth;  // a trained MTP module
    std::cout << "depth " << depth << ": " << st.accepted_tokens << "/" << st.draft_tokens << " accepted ("
              << st.forced_drafts << " forced), mean acceptance length " << st.mean_acceptance_length() << "\n";
  }
}

}  // namespace
}  // namespace quarry::engine
