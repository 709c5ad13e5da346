// Paged KV cache (vLLM PagedAttention, Kwon et al. 2023) with automatic prefix caching: fixed-size
// blocks of tokens, per-sequence block tables, reference-counted blocks handed out by a block
// allocator, and full blocks of committed tokens kept after their sequences end so that a later
// sequence starting with the same tokens reuses them instead of recomputing them.
//
// Storage: the K/V data of the blocks lives in the KvStorage of the backend that computes on it
// (engine/backend/backend.hpp; its layout is the backend's). This class does the bookkeeping only:
// which blocks each sequence holds, their reference counts (engine/memory/block_pool.hpp) and prefix
// keys. Blocks never move, so block tables hold stable block ids; the storage grows as blocks are
// first handed out (KvStorage::ensure_blocks), up to max_blocks.
//
// Hybrid models (Gated DeltaNet + attention) keep a recurrent state per sequence beside the paged
// blocks: this class hands out the state slots (one per sequence, one more for its saved copy) and the
// storage keeps their contents (KvStorage::recurrent_state); create / fork / free follow the sequence.
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

#include "engine/backend/backend.hpp"
#include "engine/core/types.hpp"
#include "engine/memory/block_pool.hpp"

namespace quarry::engine {


/// Prefix-cache settings of a KvCache.
struct PrefixCacheOptions {
  bool enabled = true;  ///< false: blocks are freed at reference count zero and never shared by hash
  /// Seed of every hash chain: identifies what produced the K/V (model weights and config). The
  /// cache mixes the KV shape in itself. Two caches with different salts never produce equal keys.
  std::uint64_t salt = 0;
  /// Hybrid models (recurrent state): the most snapshots of the state kept at block boundaries of cached
  /// prefixes (least recently used dropped first); each holds KvSpec::state_floats floats.
  std::size_t max_state_snapshots = 32;
};

/// The cache: the block table of every live sequence, the block pool, and the backend's block storage.
class KvCache {
 public:
  /// Bookkeeping over `storage` (made by the backend for `spec` and at least ceil(max_tokens /
  /// block_size) blocks; may be null for bookkeeping alone, e.g. in scheduler tests). max_tokens bounds
  /// memory: ceil(max_tokens / block_size) blocks at most. Throws std::invalid_argument on an empty
  /// shape or a storage of another spec.
  KvCache(const KvSpec& spec, std::size_t max_tokens, const PrefixCacheOptions& prefix = {},
          std::unique_ptr<KvStorage> storage = nullptr);
  /// The same with the storage made by `backend`.
  KvCache(Backend& backend, const KvSpec& spec, std::size_t max_tokens, const PrefixCacheOptions& prefix = {});

  const KvSpec& spec() const { return shape_; }
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
  /// Empty when prefix caching is off. With recurrent state: the longest such prefix whose last block
  /// has a state snapshot (save_state_snapshot).
  std::vector<BlockId> match_prefix(std::span<const TokenId> tokens, std::span<const BlockHash> hashes,
                                    std::size_t max_blocks) const;
  /// Of `blocks` (from match_prefix): how many are unreferenced, i.e. leave the free pool when retained.
  std::size_t n_unreferenced(std::span<const BlockId> blocks) const;
  /// Puts `blocks` (from match_prefix, with their hashes) at the start of the empty sequence `id`,
  /// retaining each; the sequence then holds blocks.size() * block_size committed positions (and, with
  /// recurrent state, the state snapshot of the last block). Throws std::logic_error if the sequence is
  /// not empty, or when a stateful prefix has no snapshot.
  void attach_prefix(SeqId id, std::span<const BlockId> blocks, std::span<const BlockHash> hashes);
  /// Declares the sequence's first tokens.size() positions committed (their K/V written and final):
  /// every full block among them not keyed yet gets its key and becomes shareable. No-op when prefix
  /// caching is off. `tokens` are the sequence's token ids from position 0.
  void commit(SeqId id, std::span<const TokenId> tokens);
  /// Number of leading blocks of the sequence that are committed (keyed or attached).
  std::size_t n_committed_blocks(SeqId id) const;

  // ---- prefix caching of hybrid models (spec().state_floats > 0) ----
  // K/V blocks alone cannot resume a sequence whose layers keep a recurrent state: it needs the state
  // after the prefix's last token. The cache keeps copies of the state at some block boundaries (SGLang
  // MambaRadixCache, vLLM's hybrid "align" mode), keyed by the chained key of the block they follow: the
  // key fixes every token before it, hence the state. match_prefix() then stops at the last block with
  // a snapshot, and attach_prefix() copies that snapshot into the new sequence's state.
  /// Saves the sequence's current recurrent state as the state after the block whose key is `key` (the
  /// caller's word that the sequence has computed exactly the tokens up to that block's end). Drops the
  /// least recently used snapshot beyond PrefixCacheOptions::max_state_snapshots. Returns whether it
  /// kept a new one: false without state, without prefix caching, or when a snapshot of `key` exists.
  bool save_state_snapshot(SeqId id, BlockHash key);
  /// Snapshots kept now.
  std::size_t n_state_snapshots() const { return snapshots_.size(); }

  // ---- recurrent state (hybrid models: spec().state_floats > 0) ----
  /// The sequence's recurrent state in the backend's memory: spec().state_floats f32 values, zeroed by
  /// the model when the sequence's position 0 is computed; null without state or on a bookkeeping-only
  /// cache. A fork copies it; truncate() does not roll it back (after rejected drafts the engine restores
  /// the copy saved before them, save_state / restore_state; a cached prefix brings its snapshot,
  /// attach_prefix).
  /// Throws std::out_of_range on an unknown id.
  float* recurrent_state(SeqId id) const;
  /// The sequence's recurrent-state slot in the storage (KvStorage::recurrent_state; each rank's storage
  /// under tensor parallelism); SIZE_MAX without state. Throws std::out_of_range on an unknown id.
  std::size_t state_slot(SeqId id) const;
  /// Copies the sequence's recurrent state aside (save) and back (restore): a hybrid model's speculative
  /// verification saves before a step with drafts and restores when some are rejected, then recomputes
  /// the accepted ones. No-op without state; restore without a save throws std::logic_error.
  void save_state(SeqId id);
  void restore_state(SeqId id);

  /// The K/V block storage (throws std::logic_error on a bookkeeping-only cache).
  KvStorage& storage();
  const KvStorage& storage() const;

  const BlockAllocator& allocator() const { return alloc_; }

 private:
  struct SeqState {
    std::vector<BlockId> table;
    std::size_t n_committed = 0;  ///< leading blocks whose keys are known
    BlockHash last_hash = 0;      ///< key of block n_committed - 1 (the salt-derived root if none)
    std::size_t state_slot = SIZE_MAX;   ///< recurrent-state slot (hybrid models)
    std::size_t backup_slot = SIZE_MAX;  ///< its saved copy (save_state), taken on first use
  };
  /// A free recurrent-state slot, growing the slot chunks as needed (no-op without state).
  std::size_t take_state_slot();
  float* slot_pointer(std::size_t slot) const;
  struct Snapshot {
    std::size_t slot = SIZE_MAX;
    std::uint64_t last_use = 0;
  };
  std::unordered_map<BlockHash, Snapshot> snapshots_;  ///< recurrent state after the keyed block
  std::uint64_t snapshot_clock_ = 0;
  std::vector<std::size_t> free_slots_;
  std::size_t n_slots_ = 0;
  BlockHash root_hash() const;
  SeqState& state(SeqId id);
  KvSpec shape_;
  PrefixCacheOptions prefix_;
  BlockAllocator alloc_;
  std::unique_ptr<KvStorage> storage_;
  std::unordered_map<SeqId, SeqState> seqs_;
  SeqId next_id_ = 0;
};

}  // namespace quarry::engine
