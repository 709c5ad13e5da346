// Paged KV cache bookkeeping: block allocation, reference counts, fork, truncate, capacity limits.
#include <gtest/gtest.h>

#include "engine/runtime/kv_cache.hpp"

namespace quarry::engine {
namespace {

KvCacheShape shape() {
  KvCacheShape s;
  s.n_layers = 2;
  s.n_kv_heads = 2;
  s.head_dim = 4;
  s.block_size = 16;
  return s;
}

TEST(KvCache, ReserveAllocatesWholeBlocksUpToTheLimit) {
  KvCache kv(shape(), 64);  // 4 blocks
  SeqId a = kv.create_sequence();
  EXPECT_TRUE(kv.reserve(a, 1));
  EXPECT_EQ(kv.block_table(a).size(), 1u);
  EXPECT_TRUE(kv.reserve(a, 17));
  EXPECT_EQ(kv.block_table(a).size(), 2u);
  EXPECT_EQ(kv.capacity(a), 32u);
  SeqId b = kv.create_sequence();
  EXPECT_FALSE(kv.reserve(b, 33));  // needs 3, 2 free: nothing changes
  EXPECT_TRUE(kv.block_table(b).empty());
  EXPECT_TRUE(kv.reserve(b, 32));
  EXPECT_EQ(kv.allocator().n_free(), 0u);
  kv.free_sequence(a);
  EXPECT_EQ(kv.allocator().n_free(), 2u);
}

TEST(KvCache, ForkSharesBlocksWithReferenceCounts) {
  KvCache kv(shape(), 64);
  SeqId a = kv.create_sequence();
  ASSERT_TRUE(kv.reserve(a, 20));
  SeqId b = kv.fork_sequence(a);
  EXPECT_EQ(kv.block_table(b), kv.block_table(a));
  for (BlockId blk : kv.block_table(a)) EXPECT_EQ(kv.allocator().ref_count(blk), 2u);
  kv.free_sequence(a);
  for (BlockId blk : kv.block_table(b)) EXPECT_EQ(kv.allocator().ref_count(blk), 1u);
  EXPECT_EQ(kv.allocator().n_used(), 2u);
  kv.free_sequence(b);
  EXPECT_EQ(kv.allocator().n_used(), 0u);
}

TEST(KvCache, TruncateReleasesBlocksPastTheEnd) {
  KvCache kv(shape(), 128);
  SeqId a = kv.create_sequence();
  ASSERT_TRUE(kv.reserve(a, 50));
  EXPECT_EQ(kv.block_table(a).size(), 4u);
  kv.truncate(a, 17);
  EXPECT_EQ(kv.block_table(a).size(), 2u);
  EXPECT_EQ(kv.allocator().n_used(), 2u);
}

TEST(KvCache, LayerViewsDoNotOverlap) {
  KvCache kv(shape(), 32);
  SeqId a = kv.create_sequence();
  ASSERT_TRUE(kv.reserve(a, 32));
  auto l0 = kv.layer_view(0), l1 = kv.layer_view(1);
  const std::size_t per = 16 * 2 * 4;
  EXPECT_EQ(l0.v_offset, l0.k_offset + per);
  EXPECT_EQ(l1.k_offset, l0.v_offset + per);
  EXPECT_NE(l0.blocks[kv.block_table(a)[0]], l0.blocks[kv.block_table(a)[1]]);
}

TEST(KvCache, AllocatorRejectsDoubleRelease) {
  BlockAllocator alloc(2);
  BlockId b = alloc.allocate();
  alloc.release(b);
  EXPECT_THROW(alloc.release(b), std::logic_error);
  EXPECT_THROW(alloc.retain(b), std::logic_error);
  EXPECT_NE(alloc.allocate(), -1);
  EXPECT_NE(alloc.allocate(), -1);
  EXPECT_EQ(alloc.allocate(), -1);
}

}  // namespace
}  // namespace quarry::engine
