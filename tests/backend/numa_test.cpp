// NUMA support: topology from a made-up sysfs tree, thread and row plans for
// each mode, page ranges per node, and on this machine that binding, page
// queries and pinning work (or are harmless no-ops on one node).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include <dirent.h>

#include <algorithm>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/numa_place.h"
#include "backend/cpu/numa_plan.h"
#include "backend/cpu/numa_topology.h"
#include "core/error.h"
#include "core/graph.h"

namespace weir::cpu {
namespace {

namespace fs = std::filesystem;

std::vector<int> range(int a, int b) {  // [a, b)
  std::vector<int> v(size_t(b - a));
  std::iota(v.begin(), v.end(), a);
  return v;
}

// A fake /sys/devices/system/node, removed on destruction.
class FakeSysfs {
 public:
  FakeSysfs() {
    root_ = fs::temp_directory_path() / ("weir_numa_" + std::to_string(getpid()) + "_" + std::to_string(counter_++));
    fs::create_directories(root_);
  }
  ~FakeSysfs() { fs::remove_all(root_); }
  void write(const std::string& rel, const std::string& text) {
    fs::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << text;
  }
  void node(int id, const std::string& cpulist, const std::string& distance) {
    write("node" + std::to_string(id) + "/cpulist", cpulist + "\n");
    if (!distance.empty()) write("node" + std::to_string(id) + "/distance", distance + "\n");
  }
  std::string root() const { return root_.string(); }

 private:
  fs::path root_;
  static inline int counter_ = 0;
};

// Two nodes of four CPUs each: the machine most tests plan for.
NumaTopology two_nodes(const std::vector<int>& allowed = range(0, 8)) {
  FakeSysfs s;
  s.write("online", "0-1\n");
  s.node(0, "0-3", "10 21");
  s.node(1, "4-7", "21 10");
  return NumaTopology::read(s.root(), allowed);
}

TEST(NumaTopology, ParsesCpulists) {
  EXPECT_EQ(parse_cpulist("0-3,8-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 9, 10, 11}));
  EXPECT_EQ(parse_cpulist("5"), (std::vector<int>{5}));
  EXPECT_EQ(parse_cpulist("\n"), (std::vector<int>{}));
  EXPECT_EQ(parse_cpulist("7,1-2,2"), (std::vector<int>{1, 2, 7}));
  EXPECT_EQ(format_cpulist({0, 1, 2, 3, 8, 9, 10, 11, 13}), "0-3,8-11,13");
  EXPECT_EQ(format_cpulist({}), "");
  for (const char* bad : {"a", "1-", "3-1", "1,,2", "-1", "1 2"}) EXPECT_THROW(parse_cpulist(bad), Error) << bad;
}

TEST(NumaTopology, ReadsAFakeTwoNodeTree) {
  NumaTopology t = two_nodes();
  EXPECT_TRUE(t.from_sysfs);
  ASSERT_EQ(t.nodes.size(), 2u);
  EXPECT_EQ(t.nodes[0].id, 0);
  EXPECT_EQ(t.nodes[1].cpus, range(4, 8));
  EXPECT_EQ(t.nodes[1].usable, range(4, 8));
  EXPECT_EQ(t.distance, (std::vector<std::vector<int>>{{10, 21}, {21, 10}}));
  EXPECT_EQ(t.node_of_cpu(5), 1);
  EXPECT_EQ(t.node_of_cpu(9), -1);
  EXPECT_EQ(t.n_usable_nodes(), 2);
}

TEST(NumaTopology, SplitCpulistsSparseIdsAndAffinity) {
  FakeSysfs s;  // no "online" file: node directories are listed
  s.node(0, "0-3,8-11", "10 32 20");
  s.node(2, "4-7,12-15", "32 10 20");
  s.node(3, "", "");  // a memory-only node: no CPUs, no distance file
  s.write("has_cpu", "0,2\n");
  // Only some CPUs allowed (taskset): node 2 keeps 12-13.
  NumaTopology t = NumaTopology::read(s.root(), {0, 1, 9, 12, 13});
  ASSERT_EQ(t.nodes.size(), 3u);
  EXPECT_EQ(t.nodes[1].id, 2);
  EXPECT_EQ(t.nodes[0].usable, (std::vector<int>{0, 1, 9}));
  EXPECT_EQ(t.nodes[1].usable, (std::vector<int>{12, 13}));
  EXPECT_TRUE(t.nodes[2].cpus.empty());
  EXPECT_EQ(t.node_of_cpu(10), 0);
  EXPECT_EQ(t.n_usable_nodes(), 2);
  EXPECT_EQ(t.distance[1][0], 32);
  EXPECT_EQ(t.distance[2][2], 10);  // no file: local on the diagonal
  EXPECT_EQ(t.distance[2][0], 20);
}

TEST(NumaTopology, MissingTreeIsOneNodeAndBadFilesAreNamed) {
  NumaTopology t = NumaTopology::read("/nonexistent/weir/node", {0, 1});
  EXPECT_FALSE(t.from_sysfs);
  ASSERT_EQ(t.nodes.size(), 1u);
  EXPECT_EQ(t.nodes[0].usable, (std::vector<int>{0, 1}));

  FakeSysfs s;
  s.write("online", "0-1\n");
  s.node(0, "0-3", "10 21");
  s.node(1, "4-x", "21 10");
  try {
    NumaTopology::read(s.root(), range(0, 8));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node1/cpulist"), std::string::npos) << e.what();
  }
  FakeSysfs d;
  d.write("online", "0-1\n");
  d.node(0, "0-3", "10");
  d.node(1, "4-7", "21 10");
  EXPECT_THROW(NumaTopology::read(d.root(), range(0, 8)), Error);
}

TEST(NumaTopology, ThisMachine) {
  NumaTopology t = NumaTopology::system();
  ASSERT_GE(t.nodes.size(), 1u);
  EXPECT_GE(t.n_usable_nodes(), 1);
  size_t usable = 0;
  for (auto& n : t.nodes) usable += n.usable.size();
  EXPECT_EQ(usable, affinity_cpus().size());
}

// Invariants of every plan: groups in thread order, thread counts add up, row
// ranges cover [0, n) once with aligned inner boundaries.
void check_plan(const NumaPlan& p, int n_threads) {
  ASSERT_EQ(p.n_threads(), n_threads);
  int next = 0;
  for (size_t g = 0; g < p.groups.size(); ++g) {
    EXPECT_EQ(p.groups[g].first_thread, next);
    EXPECT_GT(p.groups[g].n_threads, 0);
    for (int i = 0; i < p.groups[g].n_threads; ++i) EXPECT_EQ(p.group_of_thread[size_t(next + i)], int(g));
    next += p.groups[g].n_threads;
  }
  EXPECT_EQ(next, n_threads);
  for (int64_t n : {1, 31, 32, 640, 1000, 262144, 262145}) {
    for (int64_t align : {1, 16, 32}) {
      int64_t expect = 0;
      for (size_t g = 0; g < p.groups.size(); ++g) {
        int64_t b, e;
        p.rows(int(g), n, align, &b, &e);
        EXPECT_EQ(b, expect) << n << " " << align << " group " << g;
        EXPECT_LE(b, e);
        if (g + 1 < p.groups.size()) {
          EXPECT_TRUE(e % align == 0 || e == n) << e;
        }
        expect = e;
      }
      EXPECT_EQ(expect, n);
    }
  }
}

TEST(NumaPlan, ModesOnTwoNodes) {
  const NumaTopology t = two_nodes();
  for (int n : {1, 2, 3, 8, 16}) {
    SCOPED_TRACE(n);
    NumaPlan off = make_numa_plan(t, NumaMode::Off, n);
    check_plan(off, n);
    ASSERT_EQ(off.groups.size(), 1u);
    EXPECT_FALSE(off.pins());
    EXPECT_FALSE(off.place_weights);
    EXPECT_TRUE(off.groups[0].cpus.empty());

    NumaPlan dist = make_numa_plan(t, NumaMode::Distribute, n, 0);
    check_plan(dist, n);
    EXPECT_TRUE(dist.pins());
    EXPECT_TRUE(dist.place_weights);
    ASSERT_EQ(dist.groups.size(), n == 1 ? 1u : 2u);
    EXPECT_EQ(dist.groups[0].node, 0);
    EXPECT_EQ(dist.groups[0].cpus, range(0, 4));
    EXPECT_EQ(dist.groups[0].n_threads, (n + 1) / 2);  // even split, the odd one on node 0
    if (n > 1) {
      EXPECT_EQ(dist.groups[1].node, 1);
      EXPECT_EQ(dist.groups[1].cpus, range(4, 8));
      EXPECT_EQ(dist.groups[1].n_threads, n / 2);
    }

    NumaPlan iso = make_numa_plan(t, NumaMode::Isolate, n, 6);  // started on CPU 6: node 1
    check_plan(iso, n);
    ASSERT_EQ(iso.groups.size(), 1u);
    EXPECT_EQ(iso.groups[0].node, 1);
    EXPECT_EQ(iso.groups[0].cpus, range(4, 8));
    int64_t b, e;
    iso.rows(0, 1000, 32, &b, &e);
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 1000);
  }
}

TEST(NumaPlan, RowsFollowThreadShares) {
  const NumaPlan p = make_numa_plan(two_nodes(), NumaMode::Distribute, 8, 0);
  int64_t b, e;
  p.rows(0, 1024, 32, &b, &e);
  EXPECT_EQ(b, 0);
  EXPECT_EQ(e, 512);
  p.rows(1, 1000, 32, &b, &e);  // 32 units of 32 rows, the last short
  EXPECT_EQ(b, 512);
  EXPECT_EQ(e, 1000);
  const NumaPlan q = make_numa_plan(two_nodes(), NumaMode::Distribute, 3, 0);  // 2 + 1 threads
  q.rows(0, 3 * 320, 32, &b, &e);
  EXPECT_EQ(e, 640);
}

TEST(NumaPlan, UnevenNodesGetThreadsInProportion) {
  // Node 0 may use 6 CPUs, node 1 only 2 (taskset): 16 threads split 12 / 4.
  FakeSysfs s;
  s.write("online", "0-1\n");
  s.node(0, "0-5", "10 21");
  s.node(1, "6-7", "21 10");
  const NumaPlan p = make_numa_plan(NumaTopology::read(s.root(), range(0, 8)), NumaMode::Distribute, 16, 0);
  check_plan(p, 16);
  ASSERT_EQ(p.groups.size(), 2u);
  EXPECT_EQ(p.groups[0].n_threads, 12);
  EXPECT_EQ(p.groups[1].n_threads, 4);
  // Isolate on a CPU the process may not use falls back to a usable node.
  const NumaPlan iso = make_numa_plan(two_nodes({4, 5}), NumaMode::Isolate, 2, 0);
  EXPECT_EQ(iso.groups[0].node, 1);
  EXPECT_EQ(iso.groups[0].cpus, (std::vector<int>{4, 5}));
}

TEST(NumaPlan, OneNodeMachinePlacesNothing) {
  FakeSysfs s;
  s.write("online", "0\n");
  s.node(0, "0-1", "10");
  const NumaTopology t = NumaTopology::read(s.root(), {0, 1});
  for (NumaMode m : {NumaMode::Distribute, NumaMode::Isolate}) {
    NumaPlan p = make_numa_plan(t, m, 4, 0);
    check_plan(p, 4);
    EXPECT_TRUE(p.pins());
    EXPECT_FALSE(p.place_weights);
    EXPECT_EQ(p.group_of_thread, (std::vector<int>{0, 0, 0, 0}));
  }
  NumaMode m;
  EXPECT_TRUE(parse_numa_mode("isolate", &m));
  EXPECT_EQ(m, NumaMode::Isolate);
  EXPECT_FALSE(parse_numa_mode("numactl", &m));
}

TEST(NumaPlace, GroupPagesCoverTheWeightOnce) {
  const size_t page = 4096;
  for (int n : {2, 3, 8}) {
    const NumaPlan p = make_numa_plan(two_nodes(), NumaMode::Distribute, n, 0);
    for (auto [rows, row_bytes] : std::vector<std::pair<int64_t, size_t>>{{640, 1088}, {262144, 680}, {7, 100}, {2048, 4096}}) {
      const auto r = group_pages(p, rows, row_bytes, kNumaRowAlign, page);
      ASSERT_EQ(r.size(), p.groups.size());
      size_t expect = 0;
      for (size_t g = 0; g < r.size(); ++g) {
        EXPECT_EQ(r[g].begin, expect);
        EXPECT_EQ(r[g].begin % page, 0u);
        EXPECT_EQ(r[g].end % page, 0u);
        // Each page belongs to the group that owns its first byte.
        int64_t b, e;
        p.rows(int(g), rows, kNumaRowAlign, &b, &e);
        for (size_t off = r[g].begin; off < r[g].end; off += page) {
          EXPECT_GE(int64_t(off / row_bytes), g == 0 ? 0 : b);
          EXPECT_LT(int64_t(off / row_bytes), e);
        }
        expect = r[g].end;
      }
      EXPECT_EQ(expect, (size_t(rows) * row_bytes + page - 1) / page * page);
    }
  }
  // 2048 rows of one page each, split 1024 / 1024: exactly half the pages each.
  const auto r = group_pages(make_numa_plan(two_nodes(), NumaMode::Distribute, 2, 0), 2048, 4096, 32, 4096);
  EXPECT_EQ(r[0].end, 1024u * 4096);
}

TEST(NumaPlace, BindAndCensusOnThisMachine) {
  // On any Linux machine node 0 exists: bind a fresh buffer's pages to it,
  // touch them, and ask where they are.
  const size_t page = page_size(), n = 64 * page;
  NodeBuffer buf(n, {{0, n}}, {0});
  ASSERT_NE(buf.data(), nullptr);
  PageCensus before = page_census(buf.data(), n);
  EXPECT_EQ(before.total(), 64u);
  std::memset(buf.data(), 1, n);
  PageCensus after = page_census(buf.data(), n);
  EXPECT_EQ(after.total(), 64u);
  if (buf.bind_errno() == 0 && after.unknown == 0) {
    EXPECT_EQ(before.absent, 64u);  // nothing faulted in before the first touch
    EXPECT_EQ(after.on_node[0], 64u) << after.describe();
  } else {
    GTEST_SKIP() << "mbind/move_pages refused here: " << std::strerror(buf.bind_errno());
  }
  EXPECT_EQ(bind_pages(buf.data(), n, 0, true, true), 0);  // strict + move on existing pages
}

// Cpus_allowed_list of every thread of this process, sorted.
std::vector<std::string> thread_affinities() {
  std::vector<std::string> out;
  DIR* d = opendir("/proc/self/task");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(std::string("/proc/self/task/") + e->d_name + "/status");
    for (std::string line; std::getline(in, line);)
      if (line.rfind("Cpus_allowed_list:", 0) == 0) out.push_back(line.substr(line.find_first_not_of(" \t", 18)));
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

// y = W x for a weight of 300 rows (not a multiple of the row alignment),
// planned and run on a backend; returns y and where W's data ended up.
std::vector<float> run_mul_mat(CpuBackend& b, const std::vector<float>& w, const void** w_data) {
  Graph g;
  Tensor* W = g.external(DType::F32, {64, 300}, const_cast<float*>(w.data()), "w");
  Tensor* x = g.input(DType::F32, {64, 3}, "x");
  Tensor* y = g.mul_mat(W, x);
  g.mark_output(y);
  b.plan(g);
  for (int i = 0; i < 64 * 3; ++i) static_cast<float*>(x->data)[i] = float(i % 7) - 3.0f;
  b.queue().run(g);
  b.queue().synchronize();
  *w_data = W->data;
  const float* yd = static_cast<const float*>(y->data);
  return std::vector<float>(yd, yd + 300 * 3);
}

TEST(NumaBackend, OffPinsAndMovesNothing) {
  const auto before = thread_affinities();
  std::vector<float> w(64 * 300, 0.5f);
  CpuBackend b(2, {});
  EXPECT_FALSE(b.numa().pins());
  EXPECT_EQ(b.numa().group_of_thread, (std::vector<int>{0, 0}));
  const void* data;
  run_mul_mat(b, w, &data);
  EXPECT_EQ(data, w.data());
  EXPECT_EQ(b.numa_report().weights, 0u);
  auto after = thread_affinities();  // one more thread (the worker), all as before
  ASSERT_EQ(after.size(), before.size() + 1);
  for (auto& a : after) EXPECT_EQ(a, before[0]);
}

TEST(NumaBackend, OneNodeMachineOnlyPins) {
  const NumaTopology t = NumaTopology::system();
  if (t.nodes.size() != 1) GTEST_SKIP() << "this machine has " << t.nodes.size() << " nodes";
  const std::string all = format_cpulist(affinity_cpus());
  std::vector<float> w(64 * 300);
  std::mt19937 rng(3);
  for (float& v : w) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  CpuBackend off(2, {});
  const void* data;
  const auto y_off = run_mul_mat(off, w, &data);
  for (NumaMode m : {NumaMode::Distribute, NumaMode::Isolate}) {
    CpuOptions o;
    o.numa = m;
    CpuBackend b(2, o);
    EXPECT_TRUE(b.numa().pins());
    EXPECT_FALSE(b.numa().place_weights);
    EXPECT_EQ(b.numa_report().pin_errno, 0);
    for (auto& a : thread_affinities()) EXPECT_EQ(a, all);  // pinned to the one node: every usable CPU
    EXPECT_EQ(run_mul_mat(b, w, &data), y_off);
    EXPECT_EQ(data, w.data());  // used in place, not copied
    EXPECT_EQ(b.numa_report().weights, 0u);
  }
}

// A made-up two-node machine over this one's first two CPUs (node 0: the
// first, node 1: the second). Threads are really pinned; node 1's memory does
// not exist, so mbind fails for it and first touch decides (all node 0).
TEST(NumaBackend, SimulatedTwoNodesPinsPerNodeAndPlacesRows) {
  const std::vector<int> cpus = affinity_cpus();
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs";
  FakeSysfs s;
  s.write("online", "0-1\n");
  s.node(0, std::to_string(cpus[0]), "10 21");
  s.node(1, std::to_string(cpus[1]), "21 10");
  const std::string all = format_cpulist(cpus);
  std::vector<float> w(64 * 300);
  std::mt19937 rng(4);
  for (float& v : w) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  const void* data;
  std::vector<float> y_off;
  {
    CpuBackend off(4, {});
    y_off = run_mul_mat(off, w, &data);
  }
  {
    CpuOptions o;
    o.numa = NumaMode::Distribute;
    o.numa_sysfs_root = s.root();
    CpuBackend b(4, o);
    const NumaPlan& p = b.numa();
    EXPECT_EQ(p.group_of_thread, (std::vector<int>{0, 0, 1, 1}));
    ASSERT_EQ(p.groups.size(), 2u);
    EXPECT_EQ(p.groups[1].cpus, std::vector<int>{cpus[1]});
    EXPECT_EQ(b.numa_report().pin_errno, 0);
    // main + 3 workers: two on each CPU
    auto aff = thread_affinities();
    EXPECT_EQ(std::count(aff.begin(), aff.end(), std::to_string(cpus[0])), 2) << ::testing::PrintToString(aff);
    EXPECT_EQ(std::count(aff.begin(), aff.end(), std::to_string(cpus[1])), 2) << ::testing::PrintToString(aff);

    EXPECT_EQ(run_mul_mat(b, w, &data), y_off);
    EXPECT_NE(data, w.data());  // copied into node memory
    const NumaReport& r = b.numa_report();
    EXPECT_EQ(r.weights, 1u);
    EXPECT_EQ(r.bytes, w.size() * sizeof(float));
    // 300 rows of 256 B = 75 KiB: rows 0-159 (node 0) and 160-299 (node 1).
    const size_t page = page_size(), pages = (r.bytes + page - 1) / page;
    const auto ranges = group_pages(p, 300, 256, kNumaRowAlign, page);
    ASSERT_EQ(r.planned_pages.size(), 2u);
    EXPECT_EQ(r.planned_pages.at(0), ranges[0].end / page);
    EXPECT_EQ(r.planned_pages.at(0) + r.planned_pages.at(1), pages);
    EXPECT_EQ(r.census.total(), pages) << r.describe();
    EXPECT_EQ(r.census.absent, 0u) << r.describe();
    // A second graph over the same weight reuses the copy.
    const void* again;
    EXPECT_EQ(run_mul_mat(b, w, &again), y_off);
    EXPECT_EQ(again, data);
    EXPECT_EQ(b.numa_report().weights, 1u);
  }
  // The caller's thread has its CPUs back.
  EXPECT_EQ(format_cpulist(affinity_cpus()), all);
}

TEST(NumaBackend, WrittenLeavesAreNotCopied) {
  const std::vector<int> cpus = affinity_cpus();
  FakeSysfs s;
  s.write("online", "0-1\n");
  s.node(0, std::to_string(cpus[0]), "10 21");
  s.node(1, std::to_string(cpus.back()), "21 10");
  CpuOptions o;
  o.numa = NumaMode::Distribute;
  o.numa_sysfs_root = s.root();
  CpuBackend b(2, o);
  // A cache-like leaf: set_rows writes row 0, then mul_mat reads it as W.
  std::vector<float> cache(8 * 4, 1.0f);
  Graph g;
  Tensor* C = g.external(DType::F32, {8, 4}, cache.data(), "cache");
  Tensor* src = g.input(DType::F32, {8, 1}, "src");
  Tensor* idx = g.input(DType::I32, {1}, "idx");
  Tensor* x = g.input(DType::F32, {8, 1}, "x");
  g.set_rows(C, src, idx);
  Tensor* y = g.mul_mat(C, x);
  g.mark_output(y);
  b.plan(g);
  EXPECT_EQ(C->data, cache.data());
  EXPECT_EQ(b.numa_report().weights, 0u);
}

}  // namespace
}  // namespace weir::cpu
