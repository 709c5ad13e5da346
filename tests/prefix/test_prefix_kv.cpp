// Prefix-cache bookkeeping of the paged KV cache: block keys (hash chain), lookups verified against
// token ids, reference counts, LRU eviction order, committed blocks and truncate; the recurrent-state
// snapshots that make a hybrid model's prefix resumable.
#include <gtest/gtest.h>

#include <numeric>

#include "engine/backend/backend.hpp"
#include "engine/memory/kv_cache.hpp"

namespace quarry::engine {
namespace {

KvSpec shape() {
  KvSpec s;
  s.n_layers = 2;
  s.n_kv_heads = 2;
  s.head_dim = 4;
  s.block_size = 4;
  return s;
}

std::vector<TokenId> iota(std::size_t n, TokenId from = 0) {
  std::vector<TokenId> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

/// A sequence holding `tokens` with every position committed (as the engine does after a forward).
SeqId fill(KvCache& kv, const std::vector<TokenId>& tokens) {
  SeqId s = kv.create_sequence();
  const auto keys = kv.block_hashes(tokens);
  const auto hit = kv.match_prefix(tokens, keys, tokens.size() / kv.spec().block_size);
  kv.attach_prefix(s, hit, keys);
  EXPECT_TRUE(kv.reserve(s, tokens.size()));
  kv.commit(s, tokens);
  return s;
}

TEST(PrefixKv, HashChainDependsOnParentTokensAndSalt) {
  const auto a = iota(4), b = iota(4, 1);
  EXPECT_EQ(hash_block(1, a), hash_block(1, a));
  EXPECT_NE(hash_block(1, a), hash_block(2, a));
  EXPECT_NE(hash_block(1, a), hash_block(1, b));
  KvCache x(shape(), 64, {.enabled = true, .salt = 1}), y(shape(), 64, {.enabled = true, .salt = 2});
  const auto t = iota(10);
  const auto kx = x.block_hashes(t), ky = y.block_hashes(t);
  ASSERT_EQ(kx.size(), 2u);  // whole blocks only
  EXPECT_NE(kx[0], ky[0]);
  // Same tokens in a later block after a different first block: a different key.
  auto u = t;
  u[0] = 99;
  EXPECT_NE(x.block_hashes(u)[1], kx[1]);
  // The KV shape is part of the chain too.
  auto other = shape();
  other.head_dim = 8;
  KvCache z(other, 64, {.enabled = true, .salt = 1});
  EXPECT_NE(z.block_hashes(t)[0], kx[0]);
}

TEST(PrefixKv, CommittedFullBlocksAreFoundAgain) {
  KvCache kv(shape(), 64);
  const auto t = iota(10);
  SeqId a = fill(kv, t);
  EXPECT_EQ(kv.n_committed_blocks(a), 2u);  // the partial third block is not keyed
  EXPECT_EQ(kv.allocator().n_cached(), 2u);
  const auto keys = kv.block_hashes(t);
  auto hit = kv.match_prefix(t, keys, 10);
  ASSERT_EQ(hit.size(), 2u);
  EXPECT_EQ(hit[0], kv.block_table(a)[0]);
  EXPECT_EQ(hit[1], kv.block_table(a)[1]);
  EXPECT_EQ(kv.match_prefix(t, keys, 1).size(), 1u);  // capped
  // A prompt that differs inside block 1 matches block 0 only.
  auto u = t;
  u[5] = 77;
  EXPECT_EQ(kv.match_prefix(u, kv.block_hashes(u), 10).size(), 1u);
  // Sharing: a second sequence attaches the blocks; reference counts 2.
  SeqId b = fill(kv, t);
  EXPECT_EQ(kv.block_table(b)[0], kv.block_table(a)[0]);
  EXPECT_EQ(kv.block_table(b)[1], kv.block_table(a)[1]);
  EXPECT_NE(kv.block_table(b)[2], kv.block_table(a)[2]);  // partial blocks are never shared
  EXPECT_EQ(kv.allocator().ref_count(kv.block_table(a)[0]), 2u);
  kv.free_sequence(a);
  kv.free_sequence(b);
  EXPECT_EQ(kv.allocator().n_used(), 0u);
  EXPECT_EQ(kv.allocator().n_evictable(), 2u);
  EXPECT_EQ(kv.allocator().n_free(), kv.allocator().max_blocks());
}

TEST(PrefixKv, LookupVerifiesTokensAndParent) {
  BlockAllocator alloc(4);
  const BlockId b = alloc.allocate();
  const std::vector<TokenId> toks = {1, 2, 3, 4}, other = {1, 2, 3, 5};
  ASSERT_TRUE(alloc.set_key(b, 42, 7, toks));
  EXPECT_EQ(alloc.lookup(42, 7, toks), b);
  EXPECT_EQ(alloc.lookup(42, 7, other), -1);  // same key, other tokens: a collision is a miss
  EXPECT_EQ(alloc.lookup(42, 8, toks), -1);   // other parent
  const BlockId c = alloc.allocate();
  EXPECT_FALSE(alloc.set_key(c, 42, 7, toks));  // the key is taken: c stays an ordinary block
  EXPECT_FALSE(alloc.is_cached(c));
  EXPECT_THROW(alloc.set_key(b, 43, 7, toks), std::logic_error);  // already keyed
}

TEST(PrefixKv, EvictsLeastRecentlyReleasedTailFirst) {
  KvCache kv(shape(), 16);  // 4 blocks
  const auto t1 = iota(8), t2 = iota(8, 100);
  SeqId a = fill(kv, t1);
  kv.free_sequence(a);  // releases block 1 then block 0: block 1 is evicted first
  SeqId b = fill(kv, t2);
  kv.free_sequence(b);
  EXPECT_EQ(kv.allocator().n_cached(), 4u);
  EXPECT_EQ(kv.allocator().n_evictions(), 0u);
  // Reviving t1's blocks moves them out of the LRU list: t2's blocks are evicted next.
  SeqId c = fill(kv, t1);
  EXPECT_EQ(kv.allocator().n_used(), 2u);
  SeqId d = kv.create_sequence();
  ASSERT_TRUE(kv.reserve(d, 4));
  EXPECT_EQ(kv.allocator().n_evictions(), 1u);
  // t2's tail block went first: its head block still matches.
  EXPECT_EQ(kv.match_prefix(t2, kv.block_hashes(t2), 2).size(), 1u);
  ASSERT_TRUE(kv.reserve(d, 8));
  EXPECT_EQ(kv.allocator().n_evictions(), 2u);
  EXPECT_TRUE(kv.match_prefix(t2, kv.block_hashes(t2), 2).empty());
  EXPECT_FALSE(kv.reserve(d, 12));  // everything else is referenced
  EXPECT_EQ(kv.match_prefix(t1, kv.block_hashes(t1), 2).size(), 2u);
  kv.free_sequence(c);
  kv.free_sequence(d);
  EXPECT_EQ(kv.allocator().n_used(), 0u);
}

TEST(PrefixKv, TruncateNeverDropsCommittedBlocks) {
  KvCache kv(shape(), 64);
  SeqId a = fill(kv, iota(9));  // blocks 0, 1 committed; block 2 holds position 8
  ASSERT_TRUE(kv.reserve(a, 14));
  kv.truncate(a, 9);
  EXPECT_EQ(kv.block_table(a).size(), 3u);
  EXPECT_NO_THROW(kv.truncate(a, 8));
  EXPECT_THROW(kv.truncate(a, 7), std::logic_error);
}

TEST(PrefixKv, DisabledCachingFreesBlocksAtOnce) {
  KvCache kv(shape(), 64, {.enabled = false});
  const auto t = iota(12);
  SeqId a = fill(kv, t);
  EXPECT_EQ(kv.allocator().n_cached(), 0u);
  EXPECT_TRUE(kv.match_prefix(t, kv.block_hashes(t), 3).empty());
  kv.free_sequence(a);
  EXPECT_EQ(kv.allocator().n_evictable(), 0u);
  EXPECT_EQ(kv.allocator().n_free(), kv.allocator().max_blocks());
}

TEST(PrefixKv, StatefulPrefixesResumeOnlyFromStateSnapshots) {
  KvSpec spec = shape();
  spec.state_floats = 3;
  PrefixCacheOptions opts;
  opts.max_state_snapshots = 2;
  auto backend = make_backend({});
  KvCache kv(*backend, spec, 64, opts);
  const auto tokens = iota(16, 100);  // 4 blocks of 4
  const auto keys = kv.block_hashes(tokens);
  SeqId a = fill(kv, tokens);  // committed, but no state kept: nothing is resumable
  EXPECT_TRUE(kv.match_prefix(tokens, keys, 4).empty());
  // The state after 8 tokens (block 1) and after 12 (block 2).
  float* st = kv.recurrent_state(a);
  st[0] = 1.f, st[1] = 2.f, st[2] = 3.f;
  EXPECT_TRUE(kv.save_state_snapshot(a, keys[1]));
  EXPECT_FALSE(kv.save_state_snapshot(a, keys[1]));  // kept already
  st[0] = 7.f;
  EXPECT_TRUE(kv.save_state_snapshot(a, keys[2]));
  EXPECT_EQ(kv.n_state_snapshots(), 2u);
  EXPECT_EQ(kv.match_prefix(tokens, keys, 4).size(), 3u);  // up to the last block with a snapshot
  EXPECT_EQ(kv.match_prefix(tokens, keys, 2).size(), 2u);
  EXPECT_TRUE(kv.match_prefix(tokens, keys, 1).empty());  // block 0 has none
  // A new sequence resumes from block 2's state, whatever its own slot held.
  SeqId b = kv.create_sequence();
  const auto hit = kv.match_prefix(tokens, keys, 4);
  kv.recurrent_state(b)[0] = -1.f;
  kv.attach_prefix(b, hit, keys);
  EXPECT_EQ(kv.recurrent_state(b)[0], 7.f);
  EXPECT_EQ(kv.recurrent_state(b)[1], 2.f);
  // A third snapshot drops the least recently used (block 1's: block 2's was just used).
  EXPECT_TRUE(kv.save_state_snapshot(a, keys[3]));
  EXPECT_EQ(kv.n_state_snapshots(), 2u);
  EXPECT_EQ(kv.match_prefix(tokens, keys, 2).size(), 0u);
  EXPECT_EQ(kv.match_prefix(tokens, keys, 4).size(), 4u);
  // Attaching blocks whose state was never kept is a caller error.
  SeqId c = kv.create_sequence();
  EXPECT_THROW(kv.attach_prefix(c, std::vector<BlockId>(kv.block_table(a).begin(), kv.block_table(a).begin() + 2), keys),
               std::logic_error);
  kv.free_sequence(a);
  kv.free_sequence(b);
  kv.free_sequence(c);
}

}  // namespace
}  // namespace quarry::engine
