// Paged KV cache bookkeeping: block allocation, reference counts, fork, truncate, capacity limits.
#include <gtest/gtest.h>

#include "engine/memory/kv_cache.hpp"

namespace quarry::engine {
namespace {

KvSpec shape() {
  KvSpec s;
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

/// A storage that records how many blocks the cache asked for.
class CountingStorage final : public KvStorage {
 public:
  explicit CountingStorage(const KvSpec& spec, std::size_t* blocks) : KvStorage(spec), blocks_(blocks) {}
  void ensure_blocks(std::size_t n) override { *blocks_ = std::max(*blocks_, n); }

 private:
  std::size_t* blocks_;
};

TEST(KvCache, StorageGrowsWithTheBlocksHandedOut) {
  std::size_t blocks = 0;
  KvCache kv(shape(), 64, {}, std::make_unique<CountingStorage>(shape(), &blocks));
  SeqId a = kv.create_sequence();
  ASSERT_TRUE(kv.reserve(a, 20));
  EXPECT_EQ(blocks, 2u);
  SeqId b = kv.create_sequence();
  ASSERT_TRUE(kv.reserve(b, 1));
  EXPECT_EQ(blocks, 3u);
  kv.free_sequence(a);
  SeqId c = kv.create_sequence();
  ASSERT_TRUE(kv.reserve(c, 32));  // reuses the two freed blocks
  EXPECT_EQ(blocks, 3u);
  KvSpec other = shape();
  other.head_dim = 8;
  std::size_t unused = 0;
  EXPECT_THROW(KvCache(shape(), 64, {}, std::make_unique<CountingStorage>(other, &unused)), std::invalid_argument);
  KvCache bare(shape(), 64);  // bookkeeping only
  EXPECT_THROW(bare.storage(), std::logic_error);
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
