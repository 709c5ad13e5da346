// Token-aware chunking of a Document for prompts and retrieval.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "extractors/document.hpp"

namespace quarry {

/// Counts tokens of a text. The engine's tokenizer implements this through an adapter; until a
/// model is given, EstimateTokenCounter is used.
class TokenCounter {
 public:
  virtual ~TokenCounter() = default;
  virtual std::size_t count(std::string_view text) const = 0;
};

/// A documented estimate used when no tokenizer is at hand: ceil(UTF-8 bytes / 3.5) for Latin
/// scripts, one token per code point for CJK and other ideographic text, and one token per ASCII
/// digit (Qwen2/Qwen3 tokenize numbers digit by digit). Derivation and measured accuracy against the
/// Qwen3 tokenizer in chunk.cpp.
class EstimateTokenCounter final : public TokenCounter {
 public:
  std::size_t count(std::string_view text) const override;
};

struct ChunkOptions {
  std::size_t max_tokens = 1024;   ///< chunk size limit in tokens
  std::size_t overlap_tokens = 128;  ///< tokens of the previous chunk repeated at the start of the next
};

/// A contiguous run of lines of one document.
struct Chunk {
  std::size_t index = 0;      ///< 0-based position in the document
  std::string text;           ///< lines joined with '\n'
  int first_page = 1, last_page = 1;
  std::size_t tokens = 0;     ///< count by the TokenCounter used
};

/// Splits the document into chunks of at most opts.max_tokens tokens, cutting only between lines
/// (so a table row, which is one line, is never split), preferring block and page boundaries.
/// A single line longer than the limit becomes a chunk of its own, split at whitespace.
std::vector<Chunk> chunk_document(const Document& doc, const TokenCounter& counter,
                                  const ChunkOptions& opts = {});

}  // namespace quarry
