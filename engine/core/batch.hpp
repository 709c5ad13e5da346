// The flat token batch of one forward call (llama.cpp llama_batch; vLLM's flattened scheduler output):
// tokens from many sequences, each with its position and its sequence, so that prefill chunks, decode
// steps and draft verification are one and the same call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/core/types.hpp"

namespace quarry::engine {

struct Batch {
  std::vector<TokenId> tokens;          ///< [n_tokens]
  std::vector<std::int32_t> positions;  ///< [n_tokens], position of the token in its sequence
  std::vector<SeqId> seq_ids;           ///< [n_tokens], the KV-cache sequence of the token
  std::vector<std::uint8_t> logits;     ///< [n_tokens], 1: compute this token's logits

  /// Appends one token. The sequence's block table must cover `position` before the forward call
  /// (KvCache::reserve).
  void add(TokenId token, std::int32_t position, SeqId seq, bool want_logits) {
    tokens.push_back(token);
    positions.push_back(position);
    seq_ids.push_back(seq);
    logits.push_back(want_logits ? 1 : 0);
  }
  void clear() {
    tokens.clear();
    positions.clear();
    seq_ids.clear();
    logits.clear();
  }
  std::size_t size() const { return tokens.size(); }
  /// Number of tokens whose logits the forward call returns (rows of its output, in batch order).
  std::size_t n_logits() const {
    std::size_t n = 0;
    for (auto l : logits) n += l;
    return n;
  }
};

}  // namespace quarry::engine
