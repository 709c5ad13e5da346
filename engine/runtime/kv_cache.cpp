#include "engine/runtime/kv_cache.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace quarry::engine {

namespace {

/// splitmix64 finaliser: a bijective 64-bit mix with full avalanche.
std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace

BlockHash hash_block(BlockHash parent, std::span<const TokenId> tokens) {
  std::uint64_t h = mix64(parent ^ 0x9e3779b97f4a7c15ULL);
  for (TokenId t : tokens) h = mix64(h + 0x9e3779b97f4a7c15ULL + static_cast<std::uint32_t>(t));
  return mix64(h ^ tokens.size());
}

// ---------------------------------------------------------------- BlockAllocator

BlockAllocator::BlockAllocator(std::size_t max_blocks) : max_blocks_(max_blocks) {}

void BlockAllocator::lru_push_back(BlockId b) {
  auto& blk = blocks_[static_cast<std::size_t>(b)];
  blk.lru_prev = lru_tail_;
  blk.lru_next = -1;
  if (lru_tail_ >= 0) blocks_[static_cast<std::size_t>(lru_tail_)].lru_next = b;
  else lru_head_ = b;
  lru_tail_ = b;
  ++n_evictable_;
}

void BlockAllocator::lru_remove(BlockId b) {
  auto& blk = blocks_[static_cast<std::size_t>(b)];
  if (blk.lru_prev >= 0) blocks_[static_cast<std::size_t>(blk.lru_prev)].lru_next = blk.lru_next;
  else lru_head_ = blk.lru_next;
  if (blk.lru_next >= 0) blocks_[static_cast<std::size_t>(blk.lru_next)].lru_prev = blk.lru_prev;
  else lru_tail_ = blk.lru_prev;
  blk.lru_prev = blk.lru_next = -1;
  --n_evictable_;
}

void BlockAllocator::drop_key(BlockId b) {
  auto& blk = blocks_[static_cast<std::size_t>(b)];
  if (!blk.keyed) return;
  auto it = index_.find(blk.hash);
  if (it != index_.end() && it->second == b) index_.erase(it);
  blk.keyed = false;
  blk.hash = blk.parent = 0;
  blk.tokens.clear();
}

BlockId BlockAllocator::allocate() {
  BlockId b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (blocks_.size() < max_blocks_) {
    b = static_cast<BlockId>(blocks_.size());
    blocks_.emplace_back();
  } else if (lru_head_ >= 0) {
    b = lru_head_;
    lru_remove(b);
    drop_key(b);
    ++n_evictions_;
  } else {
    return -1;
  }
  blocks_[static_cast<std::size_t>(b)].ref_count = 1;
  ++n_used_;
  return b;
}

void BlockAllocator::retain(BlockId b) {
  auto& blk = blocks_.at(static_cast<std::size_t>(b));
  if (blk.ref_count == 0) {
    if (!blk.keyed) throw std::logic_error("retain of free KV block " + std::to_string(b));
    lru_remove(b);
    ++n_used_;
  }
  ++blk.ref_count;
}

void BlockAllocator::release(BlockId b) {
  auto& blk = blocks_.at(static_cast<std::size_t>(b));
  if (blk.ref_count == 0) throw std::logic_error("release of free KV block " + std::to_string(b));
  if (--blk.ref_count == 0) {
    --n_used_;
    if (blk.keyed) lru_push_back(b);
    else free_.push_back(b);
  }
}

bool BlockAllocator::set_key(BlockId b, BlockHash hash, BlockHash parent, std::span<const TokenId> tokens) {
  auto& blk = blocks_.at(static_cast<std::size_t>(b));
  if (blk.ref_count == 0 || blk.keyed) throw std::logic_error("set_key on a free or keyed KV block " + std::to_string(b));
  if (!index_.emplace(hash, b).second) return false;
  blk.keyed = true;
  blk.hash = hash;
  blk.parent = parent;
  blk.tokens.assign(tokens.begin(), tokens.end());
  return true;
}

BlockId BlockAllocator::lookup(BlockHash hash, BlockHash parent, std::span<const TokenId> tokens) const {
  auto it = index_.find(hash);
  if (it == index_.end()) return -1;
  const auto& blk = blocks_[static_cast<std::size_t>(it->second)];
  if (blk.parent != parent || !std::equal(blk.tokens.begin(), blk.tokens.end(), tokens.begin(), tokens.end()))
    return -1;
  return it->second;
}

// ---------------------------------------------------------------- KvCache

KvCache::KvCache(const KvCacheShape& shape, std::size_t max_tokens, const PrefixCacheOptions& prefix)
    : shape_(shape),
      prefix_(prefix),
      block_floats_(shape.bytes_per_token() * shape.block_size / sizeof(float)),
      alloc_(shape.block_size ? (max_tokens + shape.block_size - 1) / shape.block_size : 0) {
  if (shape.block_size == 0 || shape.n_layers == 0 || shape.n_kv_heads == 0 || shape.head_dim == 0)
    throw std::invalid_argument("KvCache: empty shape");
}

BlockHash KvCache::root_hash() const {
  const TokenId words[4] = {static_cast<TokenId>(shape_.n_layers), static_cast<TokenId>(shape_.n_kv_heads),
                            static_cast<TokenId>(shape_.head_dim), static_cast<TokenId>(shape_.block_size)};
  return hash_block(prefix_.salt, words);
}

void KvCache::ensure_storage(BlockId b) {
  while (storage_.size() <= static_cast<std::size_t>(b)) {
    storage_.push_back(std::make_unique<float[]>(block_floats_));
    block_ptrs_.push_back(storage_.back().get());
  }
}

KvCache::SeqState& KvCache::state(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) throw std::out_of_range("KvCache: unknown sequence " + std::to_string(id));
  return it->second;
}

SeqId KvCache::create_sequence() {
  SeqId id = next_id_++;
  seqs_[id].last_hash = root_hash();
  return id;
}

SeqId KvCache::fork_sequence(SeqId src) {
  const SeqState copy = state(src);
  for (BlockId b : copy.table) alloc_.retain(b);
  SeqId id = next_id_++;
  seqs_[id] = copy;
  return id;
}

void KvCache::free_sequence(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  const auto& table = it->second.table;
  for (auto b = table.rbegin(); b != table.rend(); ++b) alloc_.release(*b);
  seqs_.erase(it);
}

bool KvCache::reserve(SeqId id, std::size_t n_tokens) {
  auto& table = state(id).table;
  const std::size_t need = blocks_for(n_tokens);
  if (need <= table.size()) return true;
  if (need - table.size() > alloc_.n_free()) return false;
  while (table.size() < need) {
    BlockId b = alloc_.allocate();
    ensure_storage(b);
    table.push_back(b);
  }
  return true;
}

void KvCache::truncate(SeqId id, std::size_t n_tokens) {
  auto& s = state(id);
  const std::size_t keep = blocks_for(n_tokens);
  if (n_tokens < s.n_committed * shape_.block_size)
    throw std::logic_error("KvCache::truncate to " + std::to_string(n_tokens) + " tokens would drop committed blocks");
  while (s.table.size() > keep) {
    alloc_.release(s.table.back());
    s.table.pop_back();
  }
}

const std::vector<BlockId>& KvCache::block_table(SeqId id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) throw std::out_of_range("KvCache: unknown sequence " + std::to_string(id));
  return it->second.table;
}

std::vector<BlockHash> KvCache::block_hashes(std::span<const TokenId> tokens) const {
  const std::size_t bs = shape_.block_size, n = tokens.size() / bs;
  std::vector<BlockHash> out(n);
  BlockHash h = root_hash();
  for (std::size_t i = 0; i < n; ++i) out[i] = h = hash_block(h, tokens.subspan(i * bs, bs));
  return out;
}

std::vector<BlockId> KvCache::match_prefix(std::span<const TokenId> tokens, std::span<const BlockHash> hashes,
                                           std::size_t max_blocks) const {
  std::vector<BlockId> out;
  if (!prefix_.enabled) return out;
  const std::size_t bs = shape_.block_size;
  const std::size_t n = std::min({max_blocks, hashes.size(), tokens.size() / bs});
  BlockHash parent = root_hash();
  for (std::size_t i = 0; i < n; ++i) {
    const BlockId b = alloc_.lookup(hashes[i], parent, tokens.subspan(i * bs, bs));
    if (b < 0) break;
    out.push_back(b);
    parent = hashes[i];
  }
  return out;
}

std::size_t KvCache::n_unreferenced(std::span<const BlockId> blocks) const {
  std::size_t n = 0;
  for (BlockId b : blocks) n += alloc_.ref_count(b) == 0;
  return n;
}

void KvCache::attach_prefix(SeqId id, std::span<const BlockId> blocks, std::span<const BlockHash> hashes) {
  auto& s = state(id);
  if (!s.table.empty()) throw std::logic_error("KvCache::attach_prefix on a non-empty sequence");
  if (hashes.size() < blocks.size()) throw std::logic_error("KvCache::attach_prefix: fewer hashes than blocks");
  for (BlockId b : blocks) {
    alloc_.retain(b);
    s.table.push_back(b);
  }
  s.n_committed = blocks.size();
  if (!blocks.empty()) s.last_hash = hashes[blocks.size() - 1];
}

void KvCache::commit(SeqId id, std::span<const TokenId> tokens) {
  if (!prefix_.enabled) return;
  auto& s = state(id);
  const std::size_t bs = shape_.block_size;
  const std::size_t full = std::min(tokens.size() / bs, s.table.size());
  for (; s.n_committed < full; ++s.n_committed) {
    const auto block_tokens = tokens.subspan(s.n_committed * bs, bs);
    const BlockHash h = hash_block(s.last_hash, block_tokens);
    // A block with this key may already exist (computed by another sequence at the same time): then
    // this copy stays an ordinary block and is freed with the sequence.
    alloc_.set_key(s.table[s.n_committed], h, s.last_hash, block_tokens);
    s.last_hash = h;
  }
}

std::size_t KvCache::n_committed_blocks(SeqId id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) throw std::out_of_range("KvCache: unknown sequence " + std::to_string(id));
  return it->second.n_committed;
}

cpu::KvLayerView KvCache::layer_view(std::size_t layer) const {
  cpu::KvLayerView v;
  v.blocks = block_ptrs_.data();
  // Floats of one layer's K (or V) in a block: bf16 values pack two to a float.
  const std::size_t per = shape_.block_size * shape_.n_kv_heads * shape_.head_dim / (shape_.bf16 ? 2 : 1);
  v.bf16 = shape_.bf16;
  v.k_offset = 2 * layer * per;
  v.v_offset = v.k_offset + per;
  v.block_size = shape_.block_size;
  v.n_kv_heads = shape_.n_kv_heads;
  v.head_dim = shape_.head_dim;
  return v;
}

}  // namespace quarry::engine
