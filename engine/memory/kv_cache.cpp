#include "engine/memory/kv_cache.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace quarry::engine {

// ---------------------------------------------------------------- KvCache

KvCache::KvCache(const KvSpec& spec, std::size_t max_tokens, const PrefixCacheOptions& prefix,
                 std::unique_ptr<KvStorage> storage)
    : shape_(spec),
      prefix_(prefix),
      alloc_(spec.block_size ? (max_tokens + spec.block_size - 1) / spec.block_size : 0),
      storage_(std::move(storage)) {
  if (spec.block_size == 0 || spec.n_layers == 0 || spec.n_kv_heads == 0 || spec.head_dim == 0)
    throw std::invalid_argument("KvCache: empty shape");
  if (storage_ && !(storage_->spec() == spec)) throw std::invalid_argument("KvCache: storage of another shape");
}

KvCache::KvCache(Backend& backend, const KvSpec& spec, std::size_t max_tokens, const PrefixCacheOptions& prefix)
    : KvCache(spec, max_tokens, prefix,
              backend.make_kv_storage(spec, spec.block_size ? (max_tokens + spec.block_size - 1) / spec.block_size : 0)) {}

std::size_t KvCache::take_state_slot() {
  if (shape_.state_floats == 0) return SIZE_MAX;
  if (!free_slots_.empty()) {
    const std::size_t s = free_slots_.back();
    free_slots_.pop_back();
    return s;
  }
  if (storage_) storage_->ensure_state_slots(n_slots_ + 1);
  return n_slots_++;
}

float* KvCache::slot_pointer(std::size_t slot) const {
  if (slot == SIZE_MAX || !storage_) return nullptr;
  return storage_->recurrent_state(slot);
}

void KvCache::save_state(SeqId id) {
  SeqState& st = state(id);
  if (shape_.state_floats == 0 || !storage_) return;
  if (st.backup_slot == SIZE_MAX) st.backup_slot = take_state_slot();
  storage_->copy_recurrent_state(st.backup_slot, st.state_slot);
}

void KvCache::restore_state(SeqId id) {
  SeqState& st = state(id);
  if (shape_.state_floats == 0 || !storage_) return;
  if (st.backup_slot == SIZE_MAX) throw std::logic_error("KvCache: restore_state without save_state");
  storage_->copy_recurrent_state(st.state_slot, st.backup_slot);
}

float* KvCache::recurrent_state(SeqId id) const { return slot_pointer(state_slot(id)); }

std::size_t KvCache::state_slot(SeqId id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) throw std::out_of_range("KvCache: unknown sequence " + std::to_string(id));
  return it->second.state_slot;
}

KvStorage& KvCache::storage() {
  if (!storage_) throw std::logic_error("KvCache: no block storage (bookkeeping only)");
  return *storage_;
}

const KvStorage& KvCache::storage() const {
  if (!storage_) throw std::logic_error("KvCache: no block storage (bookkeeping only)");
  return *storage_;
}

BlockHash KvCache::root_hash() const {
  const TokenId words[4] = {static_cast<TokenId>(shape_.n_layers), static_cast<TokenId>(shape_.n_kv_heads),
                            static_cast<TokenId>(shape_.head_dim), static_cast<TokenId>(shape_.block_size)};
  return hash_block(prefix_.salt, words);
}

KvCache::SeqState& KvCache::state(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) throw std::out_of_range("KvCache: unknown sequence " + std::to_string(id));
  return it->second;
}

SeqId KvCache::create_sequence() {
  SeqId id = next_id_++;
  seqs_[id].last_hash = root_hash();
  seqs_[id].state_slot = take_state_slot();
  return id;
}

SeqId KvCache::fork_sequence(SeqId src) {
  const SeqState copy = state(src);
  for (BlockId b : copy.table) alloc_.retain(b);
  SeqId id = next_id_++;
  seqs_[id] = copy;
  seqs_[id].state_slot = take_state_slot();
  seqs_[id].backup_slot = SIZE_MAX;
  if (storage_ && copy.state_slot != SIZE_MAX) storage_->copy_recurrent_state(seqs_[id].state_slot, copy.state_slot);
  return id;
}

void KvCache::free_sequence(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  const auto& table = it->second.table;
  for (auto b = table.rbegin(); b != table.rend(); ++b) alloc_.release(*b);
  if (it->second.state_slot != SIZE_MAX) free_slots_.push_back(it->second.state_slot);
  if (it->second.backup_slot != SIZE_MAX) free_slots_.push_back(it->second.backup_slot);
  seqs_.erase(it);
}

bool KvCache::reserve(SeqId id, std::size_t n_tokens) {
  auto& table = state(id).table;
  const std::size_t need = blocks_for(n_tokens);
  if (need <= table.size()) return true;
  if (need - table.size() > alloc_.n_free()) return false;
  while (table.size() < need) table.push_back(alloc_.allocate());
  if (storage_) storage_->ensure_blocks(alloc_.high_water());
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
  if (shape_.state_floats > 0)  // resumable only where the state after the last block is known
    while (!out.empty() && !snapshots_.contains(hashes[out.size() - 1])) out.pop_back();
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
  if (shape_.state_floats > 0 && !blocks.empty()) {  // the state after the prefix first
    auto it = snapshots_.find(hashes[blocks.size() - 1]);
    if (it == snapshots_.end()) throw std::logic_error("KvCache::attach_prefix: no recurrent-state snapshot of the prefix");
    it->second.last_use = ++snapshot_clock_;
    if (storage_) storage_->copy_recurrent_state(s.state_slot, it->second.slot);
  }
  for (BlockId b : blocks) {
    alloc_.retain(b);
    s.table.push_back(b);
  }
  s.n_committed = blocks.size();
  if (!blocks.empty()) s.last_hash = hashes[blocks.size() - 1];
}

bool KvCache::save_state_snapshot(SeqId id, BlockHash key) {
  SeqState& st = state(id);
  if (shape_.state_floats == 0 || !prefix_.enabled || prefix_.max_state_snapshots == 0) return false;
  if (auto it = snapshots_.find(key); it != snapshots_.end()) {
    it->second.last_use = ++snapshot_clock_;
    return false;
  }
  while (snapshots_.size() >= prefix_.max_state_snapshots) {  // the least recently used goes
    auto lru = snapshots_.begin();
    for (auto it = snapshots_.begin(); it != snapshots_.end(); ++it)
      if (it->second.last_use < lru->second.last_use) lru = it;
    free_slots_.push_back(lru->second.slot);
    snapshots_.erase(lru);
  }
  Snapshot snap;
  snap.slot = take_state_slot();
  snap.last_use = ++snapshot_clock_;
  if (storage_) storage_->copy_recurrent_state(snap.slot, st.state_slot);
  snapshots_.emplace(key, snap);
  return true;
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

}  // namespace quarry::engine
