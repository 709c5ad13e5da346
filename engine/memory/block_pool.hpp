// The block pool of a paged KV cache: bookkeeping only (no K/V data, which the backend's KvStorage
// holds). Block ids with reference counts, and the prefix-cache index: full blocks of committed tokens
// keyed by a hash chain (vLLM automatic prefix caching; engine/memory/kv_cache.hpp), kept after their
// sequences end and evicted least recently released first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/core/types.hpp"

namespace quarry::engine {

/// Hands out block ids 0..max_blocks-1 with reference counts, and keeps the prefix-cache index
/// (key -> block) and the LRU list of evictable cached blocks. Not thread-safe (the scheduler owns it).
class BlockAllocator {
 public:
  explicit BlockAllocator(std::size_t max_blocks);
  /// A block with reference count 1: a never-used or free unhashed block first, else the least
  /// recently released cached block (evicted: its key leaves the index). -1 if every block is referenced.
  BlockId allocate();
  /// Adds a reference. A cached block with reference count 0 is revived (leaves the LRU list).
  /// Throws std::logic_error on a free block that is not cached.
  void retain(BlockId b);
  /// Drops a reference; at zero a cached block joins the LRU tail, any other block the free list.
  /// Throws std::logic_error if the block is not referenced.
  void release(BlockId b);
  std::uint32_t ref_count(BlockId b) const { return blocks_.at(static_cast<std::size_t>(b)).ref_count; }
  /// Blocks allocate() can hand out: never used, free, or cached with no reference (evictable).
  std::size_t n_free() const { return max_blocks_ - n_used_; }
  /// Blocks with a reference count > 0.
  std::size_t n_used() const { return n_used_; }
  /// Of n_free(): cached blocks with no reference (kept for reuse until evicted).
  std::size_t n_evictable() const { return n_evictable_; }
  /// Blocks that hold a key (referenced or not).
  std::size_t n_cached() const { return index_.size(); }
  /// Cached blocks evicted (their keys dropped) to satisfy allocate(), since construction.
  std::uint64_t n_evictions() const { return n_evictions_; }
  std::size_t max_blocks() const { return max_blocks_; }
  /// Number of distinct block ids handed out so far (storage to allocate).
  std::size_t high_water() const { return blocks_.size(); }

  /// Registers `b` (referenced, not yet keyed) under `hash`, remembering its parent key and tokens for
  /// verification. Returns false, changing nothing, if another block already holds `hash` (the
  /// caller's copy then stays an ordinary block). Throws std::logic_error if `b` is free or keyed.
  bool set_key(BlockId b, BlockHash hash, BlockHash parent, std::span<const TokenId> tokens);
  /// The cached block under `hash` whose parent key and tokens equal the given ones, or -1.
  BlockId lookup(BlockHash hash, BlockHash parent, std::span<const TokenId> tokens) const;
  /// True if `b` holds a key.
  bool is_cached(BlockId b) const { return blocks_.at(static_cast<std::size_t>(b)).keyed; }

 private:
  struct Block {
    std::uint32_t ref_count = 0;
    bool keyed = false;
    BlockHash hash = 0, parent = 0;
    std::vector<TokenId> tokens;  ///< the block's token ids (keyed blocks)
    BlockId lru_prev = -1, lru_next = -1;
  };
  void lru_push_back(BlockId b);
  void lru_remove(BlockId b);
  void drop_key(BlockId b);
  std::size_t max_blocks_;
  std::size_t n_used_ = 0, n_evictable_ = 0;
  std::uint64_t n_evictions_ = 0;
  std::vector<Block> blocks_;
  std::vector<BlockId> free_;  ///< unreferenced, unkeyed
  BlockId lru_head_ = -1, lru_tail_ = -1;
  std::unordered_map<BlockHash, BlockId> index_;
};

/// Key of a block: a chained 64-bit hash of (parent key, token ids) (splitmix64 finaliser over each
/// word; Steele et al. 2014). Deterministic across runs and machines.
BlockHash hash_block(BlockHash parent, std::span<const TokenId> tokens);

}  // namespace quarry::engine
