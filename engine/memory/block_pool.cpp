#include "engine/memory/block_pool.hpp"

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

}  // namespace quarry::engine
