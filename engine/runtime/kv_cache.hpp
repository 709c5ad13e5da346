// Paged KV cache (vLLM PagedAttention, Kwon et al. 2023) with automatic prefix caching: fixed-size
// blocks of tokens, per-sequence block tables, reference-counted blocks handed out by a block
// allocator, and full blocks of committed tokens kept after their sequences end so that a later
// sequence starting with the same tokens reuses them instead of recomputing them.
//
// Storage: one block holds, for every layer, the keys then the values of block_size tokens, the keys
// laid out transposed [n_kv_heads, head_dim, block_size] f32 and the values [n_kv_heads, block_size,
// head_dim] f32 (cpu::KvLayerView); blocks are allocated on demand up to max_blocks and never
// move, so block tables hold stable block ids.
//
// Prefix caching (vLLM automatic prefix caching, "hash of a block = hash(parent block hash, block
// tokens, extra keys)"; SGLang RadixAttention is the tree-shaped equivalent):
//   * a block whose every position holds a committed token (prompt, or output already accepted --
//     never a speculative draft) gets a key: a 64-bit hash chained over (hash of the previous block of
//     the sequence, the block's token ids), seeded with a salt that identifies the model and the KV
//     shape, so that two models never share blocks (commit());
//   * the key indexes a hash table; lookups walk a new sequence's full blocks from the first and stop
//     at the first miss. Every hit is verified against the stored token ids and parent key, so a
//     64-bit hash collision makes a miss, never a wrong reuse;
//   * a hashed block whose reference count falls to zero keeps its contents and key and joins an LRU
//     list of evictable blocks; a hit revives it (reference count 1 again). The allocator hands out
//     never-used or unhashed free blocks first, then evicts the least recently released cached block.
//   * a sequence releases its blocks last-first, so the tail of a prefix is evicted before its head.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/backend/cpu/ops.hpp"
#include "engine/tokenizer/tokenizer.hpp"

namespace quarry::engine {

using BlockId = std::int32_t;
using SeqId = std::int64_t;
/// Prefix-cache key of a full block (see the file comment).
using BlockHash = std::uint64_t;

/// Shape of the cache: what one token stores.
struct KvCacheShape {
  std::size_t n_layers = 0, n_kv_heads = 0, head_dim = 0;
  std::size_t block_size = 16;  ///< tokens per block
  bool bf16 = false;            ///< K/V stored as bf16 in the AMX layouts (cpu::KvLayerView), else f32
  /// Bytes one token occupies over all layers (K and V).
  std::size_t bytes_per_token() const { return 2 * n_layers * n_kv_heads * head_dim * (bf16 ? 2 : 4); }
};

/// Prefix-cache settings of a KvCache.
struct PrefixCacheOptions {
  bool enabled = true;  ///< false: blocks are freed at reference count zero and never shared by hash
  /// Seed of every hash chain: identifies what produced the K/V (model weights and config). The
  /// cache mixes the KV shape in itself. Two caches with different salts never produce equal keys.
  std::uint64_t salt = 0;
};

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

/// The cache: block storage plus the block table of every live sequence.
class KvCache {
 public:
  /// max_tokens bounds memory: ceil(max_tokens / block_size) blocks at most. Throws
  /// std::invalid_argument on an empty shape.
  KvCache(const KvCacheShape& shape, std::size_t max_tokens, const PrefixCacheOptions& prefix = {});

  const KvCacheShape& shape() const { return shape_; }
  const PrefixCacheOptions& prefix_options() const { return prefix_; }
  /// Bytes one token occupies over all layers (K and V).
  std::size_t bytes_per_token() const { return shape_.bytes_per_token(); }
  /// Bytes of one block (block_size tokens).
  std::size_t bytes_per_block() const { return bytes_per_token() * shape_.block_size; }
  /// Blocks needed to hold n_tokens positions.
  std::size_t blocks_for(std::size_t n_tokens) const { return (n_tokens + shape_.block_size - 1) / shape_.block_size; }

  /// A new empty sequence.
  SeqId create_sequence();
  /// A new sequence sharing all of `src`'s blocks (reference counts +1); the caller must not write
  /// into a shared partial block.
  SeqId fork_sequence(SeqId src);
  /// Releases the sequence's blocks (last first). Unknown ids are ignored.
  void free_sequence(SeqId id);
  /// Makes the sequence's block table cover n_tokens positions (allocating blocks, evicting cached
  /// ones if needed). Returns false, changing nothing, if too few blocks can be handed out.
  bool reserve(SeqId id, std::size_t n_tokens);
  /// Drops positions >= n_tokens (releasing whole blocks past it): rollback of rejected drafts.
  /// Throws std::logic_error if that would drop a position of a committed (keyed) block.
  void truncate(SeqId id, std::size_t n_tokens);
  /// Block ids of the sequence, in position order (position p lives in block p / block_size).
  /// Throws std::out_of_range on an unknown id.
  const std::vector<BlockId>& block_table(SeqId id) const;
  /// Positions covered by the block table (multiple of block_size).
  std::size_t capacity(SeqId id) const { return block_table(id).size() * shape_.block_size; }

  // ---- prefix caching ----
  /// Keys of the full blocks of `tokens` (tokens.size() / block_size of them), chained from the salt.
  std::vector<BlockHash> block_hashes(std::span<const TokenId> tokens) const;
  /// The cached blocks holding the longest prefix of `tokens` made of whole blocks, at most
  /// `max_blocks` of them (`hashes`: block_hashes(tokens) or a prefix of it). Changes nothing.
  /// Empty when prefix caching is off.
  std::vector<BlockId> match_prefix(std::span<const TokenId> tokens, std::span<const BlockHash> hashes,
                                    std::size_t max_blocks) const;
  /// Of `blocks` (from match_prefix): how many are unreferenced, i.e. leave the free pool when retained.
  std::size_t n_unreferenced(std::span<const BlockId> blocks) const;
  /// Puts `blocks` (from match_prefix, with their hashes) at the start of the empty sequence `id`,
  /// retaining each; the sequence then holds blocks.size() * block_size committed positions. Throws
  /// std::logic_error if the sequence is not empty.
  void attach_prefix(SeqId id, std::span<const BlockId> blocks, std::span<const BlockHash> hashes);
  /// Declares the sequence's first tokens.size() positions committed (their K/V written and final):
  /// every full block among them not keyed yet gets its key and becomes shareable. No-op when prefix
  /// caching is off. `tokens` are the sequence's token ids from position 0.
  void commit(SeqId id, std::span<const TokenId> tokens);
  /// Number of leading blocks of the sequence that are committed (keyed or attached).
  std::size_t n_committed_blocks(SeqId id) const;

  /// The view attention and kv_store use for `layer`.
  cpu::KvLayerView layer_view(std::size_t layer) const;

  const BlockAllocator& allocator() const { return alloc_; }

 private:
  struct SeqState {
    std::vector<BlockId> table;
    std::size_t n_committed = 0;  ///< leading blocks whose keys are known
    BlockHash last_hash = 0;      ///< key of block n_committed - 1 (the salt-derived root if none)
  };
  void ensure_storage(BlockId b);
  BlockHash root_hash() const;
  SeqState& state(SeqId id);
  KvCacheShape shape_;
  PrefixCacheOptions prefix_;
  std::size_t block_floats_;
  BlockAllocator alloc_;
  std::vector<std::unique_ptr<float[]>> storage_;
  std::vector<float*> block_ptrs_;
  std::unordered_map<SeqId, SeqState> seqs_;
  SeqId next_id_ = 0;
};

/// Key of a block: a chained 64-bit hash of (parent key, token ids) (splitmix64 finaliser over each
/// word; Steele et al. 2014). Deterministic across runs and machines.
BlockHash hash_block(BlockHash parent, std::span<const TokenId> tokens);

}  // namespace quarry::engine
