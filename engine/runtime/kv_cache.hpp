// Paged KV cache (vLLM PagedAttention, Kwon et al. 2023): fixed-size blocks of tokens, per-sequence
// block tables, reference-counted blocks handed out by a block allocator.
//
// Storage: one block holds, for every layer, the keys then the values of block_size tokens, each laid
// out [block_size, n_kv_heads, head_dim] f32; blocks are allocated on demand up to max_blocks and never
// move, so block tables hold stable block ids.
//
// Prefix caching plugs in later without changing this layout: a full block gets a hash over
// (parent block hash, its tokens) (vLLM automatic prefix caching); a block whose reference count falls
// to zero keeps its hash and contents and sits on an LRU list, from which a hash lookup can revive it
// (retain) before the allocator recycles it. Block::hash is reserved for that.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "engine/backend/cpu/ops.hpp"

namespace quarry::engine {

using BlockId = std::int32_t;
using SeqId = std::int64_t;

/// Shape of the cache: what one token stores.
struct KvCacheShape {
  std::size_t n_layers = 0, n_kv_heads = 0, head_dim = 0;
  std::size_t block_size = 16;  ///< tokens per block
};

/// Hands out block ids 0..max_blocks-1 with reference counts. Not thread-safe (the scheduler owns it).
class BlockAllocator {
 public:
  explicit BlockAllocator(std::size_t max_blocks);
  /// A free block with reference count 1, or -1 if all max_blocks are in use.
  BlockId allocate();
  /// Adds a reference (a second sequence sharing the block). Throws std::logic_error on a free block.
  void retain(BlockId b);
  /// Drops a reference; at zero the block returns to the free list. Throws std::logic_error if free.
  void release(BlockId b);
  std::uint32_t ref_count(BlockId b) const { return blocks_.at(static_cast<std::size_t>(b)).ref_count; }
  std::size_t n_free() const { return max_blocks_ - n_used_; }
  std::size_t n_used() const { return n_used_; }
  std::size_t max_blocks() const { return max_blocks_; }
  /// Number of distinct block ids handed out so far (storage to allocate).
  std::size_t high_water() const { return blocks_.size(); }

 private:
  struct Block {
    std::uint32_t ref_count = 0;
    std::uint64_t hash = 0;  ///< prefix-cache key of a full block (0: none); reserved
  };
  std::size_t max_blocks_;
  std::size_t n_used_ = 0;
  std::vector<Block> blocks_;
  std::vector<BlockId> free_;
};

/// The cache: block storage plus the block table of every live sequence.
class KvCache {
 public:
  /// max_tokens bounds memory: ceil(max_tokens / block_size) blocks at most.
  KvCache(const KvCacheShape& shape, std::size_t max_tokens);

  const KvCacheShape& shape() const { return shape_; }
  /// Bytes one token occupies over all layers (K and V, f32).
  std::size_t bytes_per_token() const { return 2 * shape_.n_layers * shape_.n_kv_heads * shape_.head_dim * 4; }

  /// A new empty sequence.
  SeqId create_sequence();
  /// A new sequence sharing all of `src`'s blocks (reference counts +1); the caller must not write
  /// into a shared partial block (copy-on-write is the prefix cache's job).
  SeqId fork_sequence(SeqId src);
  /// Releases the sequence's blocks. Unknown ids are ignored.
  void free_sequence(SeqId id);
  /// Makes the sequence's block table cover n_tokens positions (allocating blocks). Returns false,
  /// changing nothing, if the cache has too few free blocks.
  bool reserve(SeqId id, std::size_t n_tokens);
  /// Drops positions >= n_tokens (releasing whole blocks past it): rollback of rejected drafts.
  void truncate(SeqId id, std::size_t n_tokens);
  /// Block ids of the sequence, in position order (position p lives in block p / block_size).
  const std::vector<BlockId>& block_table(SeqId id) const;
  /// Positions covered by the block table (multiple of block_size).
  std::size_t capacity(SeqId id) const { return block_table(id).size() * shape_.block_size; }

  /// The view attention and kv_store use for `layer`.
  cpu::KvLayerView layer_view(std::size_t layer) const;

  const BlockAllocator& allocator() const { return alloc_; }

 private:
  void ensure_storage(BlockId b);
  KvCacheShape shape_;
  std::size_t block_floats_;
  BlockAllocator alloc_;
  std::vector<std::unique_ptr<float[]>> storage_;
  std::vector<float*> block_ptrs_;
  std::map<SeqId, std::vector<BlockId>> tables_;
  SeqId next_id_ = 0;
};

}  // namespace quarry::engine
