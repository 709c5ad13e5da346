#include "engine/runtime/kv_cache.hpp"

#include <stdexcept>
#include <string>

namespace quarry::engine {

BlockAllocator::BlockAllocator(std::size_t max_blocks) : max_blocks_(max_blocks) {}

BlockId BlockAllocator::allocate() {
  BlockId b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (blocks_.size() < max_blocks_) {
    b = static_cast<BlockId>(blocks_.size());
    blocks_.emplace_back();
  } else {
    return -1;
  }
  blocks_[static_cast<std::size_t>(b)] = Block{1, 0};
  ++n_used_;
  return b;
}

void BlockAllocator::retain(BlockId b) {
  auto& blk = blocks_.at(static_cast<std::size_t>(b));
  if (blk.ref_count == 0) throw std::logic_error("retain of free KV block " + std::to_string(b));
  ++blk.ref_count;
}

void BlockAllocator::release(BlockId b) {
  auto& blk = blocks_.at(static_cast<std::size_t>(b));
  if (blk.ref_count == 0) throw std::logic_error("release of free KV block " + std::to_string(b));
  if (--blk.ref_count == 0) {
    blk.hash = 0;
    free_.push_back(b);
    --n_used_;
  }
}

KvCache::KvCache(const KvCacheShape& shape, std::size_t max_tokens)
    : shape_(shape),
      block_floats_(2 * shape.n_layers * shape.block_size * shape.n_kv_heads * shape.head_dim),
      alloc_((max_tokens + shape.block_size - 1) / shape.block_size) {
  if (shape.block_size == 0 || shape.n_layers == 0 || shape.n_kv_heads == 0 || shape.head_dim == 0)
    throw std::invalid_argument("KvCache: empty shape");
}

void KvCache::ensure_storage(BlockId b) {
  while (storage_.size() <= static_cast<std::size_t>(b)) {
    storage_.push_back(std::make_unique<float[]>(block_floats_));
    block_ptrs_.push_back(storage_.back().get());
  }
}

SeqId KvCache::create_sequence() {
  SeqId id = next_id_++;
  tables_[id];
  return id;
}

SeqId KvCache::fork_sequence(SeqId src) {
  const auto table = block_table(src);
  for (BlockId b : table) alloc_.retain(b);
  SeqId id = next_id_++;
  tables_[id] = table;
  return id;
}

void KvCache::free_sequence(SeqId id) {
  auto it = tables_.find(id);
  if (it == tables_.end()) return;
  for (BlockId b : it->second) alloc_.release(b);
  tables_.erase(it);
}

bool KvCache::reserve(SeqId id, std::size_t n_tokens) {
  auto& table = tables_.at(id);
  const std::size_t need = (n_tokens + shape_.block_size - 1) / shape_.block_size;
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
  auto& table = tables_.at(id);
  const std::size_t keep = (n_tokens + shape_.block_size - 1) / shape_.block_size;
  while (table.size() > keep) {
    alloc_.release(table.back());
    table.pop_back();
  }
}

const std::vector<BlockId>& KvCache::block_table(SeqId id) const {
  auto it = tables_.find(id);
  if (it == tables_.end()) throw std::out_of_range("KvCache: unknown sequence " + std::to_string(id));
  return it->second;
}

cpu::KvLayerView KvCache::layer_view(std::size_t layer) const {
  cpu::KvLayerView v;
  v.blocks = block_ptrs_.data();
  const std::size_t per = shape_.block_size * shape_.n_kv_heads * shape_.head_dim;
  v.k_offset = 2 * layer * per;
  v.v_offset = v.k_offset + per;
  v.block_size = shape_.block_size;
  v.n_kv_heads = shape_.n_kv_heads;
  v.head_dim = shape_.head_dim;
  return v;
}

}  // namespace quarry::engine
