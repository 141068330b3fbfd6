// KVCache cell claims: one shared ring, or a region per sequence so that
// each sequence's cells stay contiguous and in order while sequences decode
// side by side; a full region spills into free cells elsewhere, and a full
// cache claims nothing. Sequences that begin alike share cells, which stay
// taken until the last sequence holding them lets go.
#include "model/kv_cache.h"

#include <gtest/gtest.h>

#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"

namespace weir {
namespace {

HParams tiny_hp() {
  HParams hp;
  hp.n_layer = 1;
  hp.n_head_kv = 1;
  hp.head_dim_k = hp.head_dim_v = 8;
  return hp;
}

std::vector<int32_t> range(int32_t a, int32_t b) {
  std::vector<int32_t> v;
  for (int32_t i = a; i < b; ++i) v.push_back(i);
  return v;
}

TEST(KVCache, RegionsKeepEachSequenceContiguous) {
  CpuBackend cpu(1);
  KVCache kv(tiny_hp(), 32, DType::F32, cpu, 4);  // regions of 8 cells
  EXPECT_EQ(kv.claim(range(0, 3), 0), range(0, 3));
  EXPECT_EQ(kv.claim(range(0, 2), 2), range(16, 18));
  for (int32_t p = 0; p < 4; ++p) {  // decode steps, side by side
    EXPECT_EQ(kv.claim({3 + p}, 0), std::vector<int32_t>{3 + p});
    EXPECT_EQ(kv.claim({2 + p}, 2), std::vector<int32_t>{18 + p});
  }
  EXPECT_EQ(kv.cells_of(0), range(0, 7));
  EXPECT_EQ(kv.cell_refs(18), 1);
  EXPECT_EQ(kv.cell_refs(8), 0);
  EXPECT_EQ(kv.cell_pos(18), 2);
  // Region 0 has one cell left: the second spills to the first free cell.
  EXPECT_EQ(kv.claim({7, 8}, 0), (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(kv.claim({0}, 1), std::vector<int32_t>{9});
  kv.remove_seq(0);
  EXPECT_TRUE(kv.cells_of(0).empty());
  EXPECT_EQ(kv.cell_pos(3), -1);
  EXPECT_EQ(kv.claim({0}, 0), std::vector<int32_t>{0});
}

TEST(KVCache, FullCacheClaimsNothing) {
  CpuBackend cpu(1);
  KVCache kv(tiny_hp(), 8, DType::F32, cpu, 2);
  EXPECT_EQ(kv.claim(range(0, 6), 1), (std::vector<int32_t>{4, 5, 6, 7, 0, 1}));
  EXPECT_TRUE(kv.claim(range(0, 3), 0).empty());  // two cells left
  EXPECT_EQ(kv.cell_pos(2), -1);                  // the failed claim took none
  EXPECT_TRUE(kv.cells_of(0).empty());
  EXPECT_EQ(kv.claim(range(0, 2), 0), (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(kv.extent(), 8);
}

TEST(KVCache, OneRegionIsARing) {
  CpuBackend cpu(1);
  KVCache kv(tiny_hp(), 8, DType::F32, cpu);
  EXPECT_EQ(kv.claim(range(0, 3), 5), range(0, 3));
  EXPECT_EQ(kv.claim(range(0, 2), 1), range(3, 5));
  EXPECT_EQ(kv.claim({3}, 5), std::vector<int32_t>{5});
  EXPECT_EQ(kv.cells_of(5), (std::vector<int32_t>{0, 1, 2, 5}));
  EXPECT_EQ(kv.n_free(), 2);
}

// Two sequences decoding side by side from one pool: with a run reserved
// each, their cells do not interleave; past its run a sequence goes on
// after its last cell, and a full pool takes cells reserved by others.
TEST(KVCache, ReservedRunsKeepSequencesApart) {
  CpuBackend cpu(1);
  KVCache kv(tiny_hp(), 16, DType::F32, cpu);
  kv.reserve(1, 6);
  kv.reserve(2, 6);
  EXPECT_EQ(kv.claim(range(0, 2), 1), range(0, 2));
  EXPECT_EQ(kv.claim(range(0, 2), 2), range(6, 8));
  for (int32_t p = 2; p < 6; ++p) {
    EXPECT_EQ(kv.claim({p}, 1), std::vector<int32_t>{p});
    EXPECT_EQ(kv.claim({p}, 2), std::vector<int32_t>{6 + p});
  }
  EXPECT_EQ(kv.claim({6}, 1), std::vector<int32_t>{12});  // its run is used up: the first free one after it
  EXPECT_EQ(kv.cells_of(2), range(6, 12));
  kv.reserve(3, 3);  // 13 .. 15, the only free cells
  EXPECT_EQ(kv.claim({0}, 4), std::vector<int32_t>{13});  // nothing else is free: one of 3's
  EXPECT_EQ(kv.claim(range(0, 2), 3), (std::vector<int32_t>{14, 15}));
  kv.remove_seq(1);  // 0 .. 5 and 12 free again
  kv.reserve(5, 4);
  EXPECT_EQ(kv.claim(range(0, 4), 5), range(0, 4));
  kv.reserve(6, 2);  // 4, 5
  kv.unreserve(6);
  EXPECT_EQ(kv.claim({4}, 5), std::vector<int32_t>{4});  // after its last cell, no longer 6's
}

TEST(KVCache, SharedCellsStayUntilTheLastHolderLetsGo) {
  CpuBackend cpu(1);
  KVCache kv(tiny_hp(), 8, DType::F32, cpu);
  EXPECT_EQ(kv.claim(range(0, 4), 0), range(0, 4));
  kv.share(0, 3, 3);  // sequence 3 begins with sequence 0's first three tokens
  EXPECT_EQ(kv.cells_of(3), range(0, 3));
  EXPECT_EQ(kv.cell_refs(1), 2);
  EXPECT_EQ(kv.cell_refs(3), 1);
  EXPECT_EQ(kv.n_free(), 4);
  EXPECT_EQ(kv.claim({3, 4}, 3), range(4, 6));  // then its own (cell 3 is sequence 0's)
  EXPECT_EQ(kv.cells_of(3), (std::vector<int32_t>{0, 1, 2, 4, 5}));
  EXPECT_THROW(kv.share(0, 3, 1), Error);  // holds cells already
  EXPECT_THROW(kv.share(0, 4, 5), Error);  // more than sequence 0 holds
  kv.remove_seq(0);
  EXPECT_EQ(kv.cell_pos(1), 1);  // still sequence 3's
  EXPECT_EQ(kv.cell_pos(3), -1);
  EXPECT_EQ(kv.n_free(), 8 - 5);
  kv.release_last(3);
  kv.release_last(3);
  kv.release_last(3);
  EXPECT_EQ(kv.cell_refs(2), 0);
  EXPECT_EQ(kv.n_free(), 6);
  kv.remove_seq(3);
  EXPECT_EQ(kv.n_free(), 8);
  EXPECT_EQ(kv.extent(), 0);
}

}  // namespace
}  // namespace weir
