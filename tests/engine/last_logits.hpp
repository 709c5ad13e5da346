// Shared by the engine tests: last-position logits of a prompt through a model (one forward call).
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "engine/models/model.hpp"

namespace quarry::engine::testing {

/// Last-position logits of `prompt` (one forward over the whole prompt into a fresh KV cache).
inline std::vector<float> last_logits(Model& m, const std::vector<TokenId>& prompt) {
  auto kv = m.make_kv_cache(256);
  const SeqId seq = kv->create_sequence();
  EXPECT_TRUE(kv->reserve(seq, prompt.size()));
  Batch b;
  for (std::size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], static_cast<std::int32_t>(i), seq, i + 1 == prompt.size());
  std::vector<float> logits(m.config().vocab_size);
  m.forward(b, *kv, logits.data());
  return logits;
}

}  // namespace quarry::engine::testing
