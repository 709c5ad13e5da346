// Byte-level BPE model (Hugging Face tokenizers models::BPE with a ByteLevel pre-tokenizer; GPT-2
// byte-to-unicode table from openai/gpt-2 encoder.py).
//
// A word (one pre-token, as raw bytes) starts as one symbol per byte; the adjacent pair with the
// lowest merge rank is merged first, ties broken by the leftmost position, until no adjacent pair
// has a merge. Implemented with a min-heap of (rank, position) over a doubly linked symbol list
// (the algorithm of tokenizers/src/models/bpe/word.rs), O(n log n) per word.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace quarry::engine {

/// The GPT-2 byte <-> unicode mapping: every byte is shown as a printable code point.
struct ByteLevelAlphabet {
  ByteLevelAlphabet();
  std::array<char32_t, 256> byte_to_cp;
  /// code point -> byte, or -1 when the code point is not in the alphabet (indexed 0..0x143).
  std::array<int, 0x144> cp_to_byte;
  /// Byte-level string of raw bytes (each byte -> its code point, UTF-8 encoded).
  std::string encode(std::string_view bytes) const;
  /// Raw bytes of a byte-level token string; false if a character is outside the alphabet.
  bool decode(std::string_view token, std::string& bytes) const;
};

class BpeModel {
 public:
  using Id = std::int32_t;

  /// `byte_ids[b]`: id of the single-byte token b (-1 if absent: that byte is dropped, as HF does
  /// without unk/byte_fallback). Merges are (left id, right id, merged id), in rank order; a later
  /// duplicate of a pair replaces the earlier one (as HF's HashMap build does).
  BpeModel(std::array<Id, 256> byte_ids, const std::vector<std::array<Id, 3>>& merges, bool ignore_merges,
           std::unordered_map<std::string, Id> word_vocab_for_ignore_merges);

  /// Appends the ids of one pre-token (raw bytes) to `out`. Thread-safe (the cache is locked).
  void encode_word(std::string_view word, std::vector<Id>& out) const;

 private:
  struct MergeValue {
    std::uint32_t rank;
    Id new_id;
  };
  static std::uint64_t key(Id a, Id b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }
  void merge_word(std::string_view word, std::vector<Id>& out) const;

  std::array<Id, 256> byte_ids_;
  std::unordered_map<std::uint64_t, MergeValue> merges_;
  bool ignore_merges_;
  std::unordered_map<std::string, Id> raw_vocab_;  // raw bytes -> id, for ignore_merges

  // word -> ids cache, sharded to keep lock contention low; a shard is cleared when full.
  static constexpr std::size_t kShards = 16, kShardCapacity = 8192, kMaxCachedWord = 256;
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<Id>> map;
  };
  mutable std::array<Shard, kShards> cache_;
};

}  // namespace quarry::engine
