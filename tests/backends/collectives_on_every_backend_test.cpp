// The collectives (all_reduce, all_gather: core/collective.h) on every
// backend present, in tensor-parallel groups of 2 and 3 ranks, each rank a
// backend of its own driven by a thread of its own as a tensor-parallel
// step drives them. The CPU and chaos ranks meet through the in-process
// thread communicator (comm/thread_comm.h); CUDA ranks, whose buffers are
// device memory, through the GPU communicator (one GPU a rank: skipped
// where there are fewer). Against float64 references written here, and
// every rank's result the same bits as every other's.
#include <gtest/gtest.h>

#include <cmath>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/op_check.h"
#include "comm/gpu_comm.h"
#include "comm/thread_comm.h"
#include "core/collective.h"
#include "core/graph.h"

namespace weir {
namespace {

using test::bytes_of;
using test::Bytes;
using test::floats_of;
using test::Inputs;
using test::near;
using test::randn;
using test::Tol;

struct Group {
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<std::unique_ptr<Collective>> comms;
};

// n ranks of the named backend; empty, with *why, where there cannot be.
Group make_group(const std::string& name, int n, std::string* why) {
  Group g;
  if (name == "cuda") {
    const size_t gpus = cuda_devices(why).size();
    if (gpus < size_t(n)) {
      *why = "a group of " + std::to_string(n) + " CUDA ranks needs as many GPUs (the thread communicator reads host "
             "memory); this host has " + std::to_string(gpus) + (why->empty() ? "" : ": " + *why);
      return g;
    }
    if (!gpu_comm_built()) {
      *why = "GPU collectives: " + gpu_comm_info();
      return g;
    }
    std::vector<int> devices;
    for (int r = 0; r < n; ++r) {
      devices.push_back(r);
      CudaOptions o;
      o.device = r;
      g.backends.push_back(make_cuda_backend(o));
    }
    g.comms = make_gpu_comms(devices);
    return g;
  }
  CommOptions co;
  co.timeout_ms = 20000;  // a rank that failed: the others give up, not hang
  g.comms = make_thread_comms(n, co);
  for (int r = 0; r < n; ++r) g.backends.push_back(test::make_named_backend(name, 100));
  return g;
}

using RankBuilder = std::function<std::vector<Tensor*>(Graph&, Collective*)>;

// Every rank plans its graph and runs it once per input set, all ranks at
// once, a thread each: copy the inputs in, prepare the run, meet
// (Collective::before_launch), run, copy the outputs out, wait. Returns
// [rank][run][output]; *error: the first rank's failure.
std::vector<std::vector<std::vector<Bytes>>> run_ranks(Group& grp, const RankBuilder& build,
                                                       const std::function<Inputs(int rank, int run)>& inputs,
                                                       int runs, std::string* error) {
  const int n = int(grp.backends.size());
  std::vector<std::vector<std::vector<Bytes>>> out(static_cast<size_t>(n));
  std::mutex m;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      Backend& b = *grp.backends[size_t(r)];
      Collective* comm = grp.comms[size_t(r)].get();
      try {
        Graph g;
        const std::vector<Tensor*> outs = build(g, comm);
        for (Tensor* o : outs) g.mark_output(o);
        b.plan(g);
        for (int run = 0; run < runs; ++run) {
          const Inputs in = inputs(r, run);
          for (Tensor& t : g.tensors())
            for (const auto& [name, data] : in)
              if (t.op == Op::Leaf && t.name == name) {
                if (data.size() != t.n_bytes()) throw Error("input " + name + ": wrong size");
                b.queue().copy_to_device(t.data, data.data(), data.size());
              }
          b.prepare_run(g);
          comm->before_launch();
          b.queue().run(g);
          std::vector<Bytes> got;
          for (Tensor* o : outs) {
            got.emplace_back(o->n_bytes());
            b.queue().copy_to_host(got.back().data(), o->data, o->n_bytes());
          }
          b.queue().synchronize();
          out[size_t(r)].push_back(std::move(got));
        }
        b.release(g);
      } catch (const std::exception& e) {
        comm->abort(std::string("rank ") + std::to_string(r) + " failed: " + e.what());
        std::lock_guard<std::mutex> lk(m);
        if (error->empty()) *error = std::string("rank ") + std::to_string(r) + ": " + e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  return out;
}

class Collectives : public ::testing::TestWithParam<std::string> {};

// all_reduce: every rank gets the sum of every rank's x, the same bits on
// every rank (the ranks' float sum in rank order on the thread
// communicator); a node after it reads what it wrote.
TEST_P(Collectives, AllReduce) {
  const int64_t K = 300, T = 3;
  for (int n : {2, 3}) {
    std::string why;
    Group grp = make_group(GetParam(), n, &why);
    if (grp.backends.empty()) GTEST_SKIP() << why;
    const test::Builder probe = [&](Graph& g) {
      Tensor* x = g.input(DType::F32, {K, T}, "x");
      return std::vector<Tensor*>{g.all_reduce(x, grp.comms[0].get())};
    };
    WEIR_REQUIRE_SUPPORT(*grp.backends[0], probe);
    // x of rank r in run k; z = all_reduce(x * (r + 1)) + x.
    auto x_of = [&](int r, int run) { return randn(size_t(K * T), uint32_t(100 * run + r + 1)); };
    const RankBuilder build = [&](Graph& g, Collective* comm) {
      Tensor* x = g.input(DType::F32, {K, T}, "x");
      Tensor* y = g.all_reduce(x, comm);
      Tensor* z = g.add(g.all_reduce(g.scale(x, float(comm->rank() + 1)), comm), x);
      return std::vector<Tensor*>{y, z};
    };
    std::string error;
    const auto out = run_ranks(grp, build, [&](int r, int run) { return Inputs{{"x", bytes_of(x_of(r, run))}}; }, 2,
                               &error);
    ASSERT_EQ(error, "") << n << " ranks";
    const bool exact = GetParam() != "cuda";
    for (int run = 0; run < 2; ++run) {
      std::vector<float> sum_f = x_of(0, run);  // rank order, in float
      std::vector<double> sum(sum_f.begin(), sum_f.end()), scaled(sum_f.size(), 0.0);
      for (int r = 1; r < n; ++r) {
        const auto x = x_of(r, run);
        for (size_t i = 0; i < x.size(); ++i) sum_f[i] += x[i], sum[i] += x[i];
      }
      for (int r = 0; r < n; ++r) {
        const auto x = x_of(r, run);
        for (size_t i = 0; i < x.size(); ++i) scaled[i] += double(x[i]) * (r + 1);
      }
      for (int r = 0; r < n; ++r) {
        const std::string what =
            std::to_string(n) + " ranks, rank " + std::to_string(r) + ", run " + std::to_string(run);
        const auto& got = out[size_t(r)][size_t(run)];
        if (exact) {
          EXPECT_TRUE(test::same_bytes(got[0], bytes_of(sum_f))) << what;
        }
        EXPECT_TRUE(near(got[0], sum, Tol{1e-6})) << what;
        const auto x = x_of(r, run);
        std::vector<double> z(x.size());
        for (size_t i = 0; i < x.size(); ++i) z[i] = scaled[i] + x[i];
        EXPECT_TRUE(near(got[1], z, Tol{1e-6})) << what << ": the add after the collective";
        EXPECT_TRUE(test::same_bytes(got[0], out[0][size_t(run)][0])) << what << ": the same bits as rank 0";
      }
    }
  }
}

// all_gather: rank r holds rows split_range(total, n, r) of every column;
// every rank gets all rows of every column, bit for bit; a node after it
// reads them.
TEST_P(Collectives, AllGather) {
  const int64_t total = 7, T = 3;
  for (int n : {2, 3}) {
    std::string why;
    Group grp = make_group(GetParam(), n, &why);
    if (grp.backends.empty()) GTEST_SKIP() << why;
    const test::Builder probe = [&](Graph& g) {
      Tensor* x = g.input(DType::F32, {split_range(total, n, 0).size(), T}, "x");
      return std::vector<Tensor*>{g.all_gather(x, total, grp.comms[0].get())};
    };
    WEIR_REQUIRE_SUPPORT(*grp.backends[0], probe);
    // The whole matrix of run k, [total, T]; rank r's part of it.
    auto whole = [&](int run) { return randn(size_t(total * T), uint32_t(7 + run)); };
    auto part = [&](int r, int run) {
      const Range rg = split_range(total, n, r);
      const auto w = whole(run);
      std::vector<float> p;
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = rg.begin; i < rg.end; ++i) p.push_back(w[size_t(t * total + i)]);
      return p;
    };
    const RankBuilder build = [&](Graph& g, Collective* comm) {
      Tensor* x = g.input(DType::F32, {split_range(total, n, comm->rank()).size(), T}, "x");
      Tensor* y = g.all_gather(x, total, comm);
      return std::vector<Tensor*>{y, g.scale(y, 2.0f)};
    };
    std::string error;
    const auto out =
        run_ranks(grp, build, [&](int r, int run) { return Inputs{{"x", bytes_of(part(r, run))}}; }, 2, &error);
    ASSERT_EQ(error, "") << n << " ranks";
    for (int run = 0; run < 2; ++run) {
      const auto w = whole(run);
      std::vector<float> twice(w.size());
      for (size_t i = 0; i < w.size(); ++i) twice[i] = 2.0f * w[i];
      for (int r = 0; r < n; ++r) {
        const std::string what =
            std::to_string(n) + " ranks, rank " + std::to_string(r) + ", run " + std::to_string(run);
        EXPECT_TRUE(test::same_bytes(out[size_t(r)][size_t(run)][0], bytes_of(w))) << what;
        EXPECT_TRUE(test::same_bytes(out[size_t(r)][size_t(run)][1], bytes_of(twice))) << what << ": scaled after it";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, Collectives, ::testing::ValuesIn(test::backend_names()), test::ParamName());

}  // namespace
}  // namespace weir
