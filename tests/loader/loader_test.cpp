// The loader (model/loader.h): the file's bytes through small staging
// buffers into a backend whose memory is apart from the host's (the chaos
// backend: copies run late, on its own threads), checked byte for byte
// against the file read with std::ifstream; models then run from the loaded
// weights exactly as the CPU runs them from the mapping; faults (a short
// file, a read error, a stop) leave nothing adopted and no buffer alive.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "chaos/chaos_backend.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "engine/session.h"
#include "model/loader.h"
#include "model/model.h"
#include "model/shard.h"
#include "comm/thread_comm.h"
#include "model/tiny_models.h"
#include "counting_backend.h"
#include "loader/load_helpers.h"

namespace weir {
namespace {

using test::CountingBackend;
using test::every_tensor;
using test::prompt_logits;

std::unique_ptr<CountingBackend> chaos(uint64_t seed = 1) {
  test::ChaosOptions o;
  o.seed = seed;
  o.max_delay_us = 30;
  return std::make_unique<CountingBackend>(test::make_chaos_backend(o));
}

// A tensor's bytes as the file holds them, read without the mapping.
std::vector<uint8_t> file_bytes(const GGUFFile& f, const GGUFTensorInfo& t) {
  std::ifstream in(f.name(), std::ios::binary);
  in.seekg(std::streamoff(f.data_offset() + t.offset));
  std::vector<uint8_t> v(t.nbytes);
  in.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size()));
  EXPECT_TRUE(in.good()) << t.name;
  return v;
}

std::vector<uint8_t> device_bytes(Backend& b, const void* p, size_t n) {
  std::vector<uint8_t> v(n);
  b.queue().copy_to_host(v.data(), p, n);
  b.queue().synchronize();
  return v;
}

std::vector<float> cpu_logits(const Model& m) {
  CpuOptions o;
  CpuBackend cpu(2, o);
  return prompt_logits(m, cpu);
}

struct Staging {
  size_t bytes;
  int readers, buffers;
};

class LoaderBytes : public ::testing::TestWithParam<Staging> {};

// Staging buffers far smaller than the big tensors and no divisor of their
// sizes: every large tensor is split over several reads and copies, and
// small ones share a read.
TEST_P(LoaderBytes, EveryWeightByteForByte) {
  WEIR_TINY_MODEL(dir, "qwen2", "loader-bytes");
  auto model = Model::load(dir + "/qwen2.gguf");
  const GGUFFile& f = model->file();
  auto b = chaos();
  LoaderOptions o;
  o.buffer_bytes = GetParam().bytes;
  o.readers = GetParam().readers;
  o.buffers = GetParam().buffers;
  const std::vector<LoadItem> items = every_tensor(f, b.get());
  size_t largest = 0;
  for (const auto& t : f.tensors()) largest = std::max(largest, t.nbytes);
  ASSERT_GT(largest, 2 * o.buffer_bytes) << "the model must have tensors larger than a few staging buffers";
  {
    LoadedWeights w = load_weights(f, items, o);
    EXPECT_EQ(w.report().items, items.size());
    EXPECT_EQ(b->stats().weights_adopted, items.size());
    ASSERT_EQ(w.device_data().size(), items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      const GGUFTensorInfo& t = f.tensors()[i];
      EXPECT_EQ(device_bytes(*b, w.device_data()[i], t.nbytes), file_bytes(f, t)) << t.name;
    }
  }
  EXPECT_EQ(b->live(), 0) << "weights forgotten with their LoadedWeights, staging freed";
}

INSTANTIATE_TEST_SUITE_P(Sizes, LoaderBytes,
                         ::testing::Values(Staging{5000, 1, 2}, Staging{5000, 3, 2}, Staging{12345, 4, 6},
                                           Staging{65536, 2, 3}),
                         [](const auto& info) {
                           return "staging" + std::to_string(info.param.bytes) + "_readers" +
                                  std::to_string(info.param.readers);
                         });

// A tensor split by rows over two backends (tensor parallelism): each
// holds exactly its rows.
TEST(Loader, RowRangesOnTwoBackends) {
  WEIR_TINY_MODEL(dir, "qwen2", "loader-rows");
  auto model = Model::load(dir + "/qwen2.gguf");
  const GGUFFile& f = model->file();
  auto a = chaos(1), b = chaos(2);
  std::vector<LoadItem> items;
  std::vector<std::pair<size_t, uint64_t>> split;  // tensor, first byte of b's rows
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const GGUFTensorInfo& t = f.tensors()[i];
    if (t.n_dims < 2 || t.ne[1] < 2) continue;
    const uint64_t row = t.nbytes / uint64_t(t.ne[1] * t.ne[2] * t.ne[3]);
    const uint64_t cut = uint64_t(t.ne[1] / 2) * row;
    items.push_back(LoadItem{i, a.get(), 0, cut});
    items.push_back(LoadItem{i, b.get(), cut, 0});
    split.push_back({i, cut});
  }
  ASSERT_FALSE(items.empty());
  LoaderOptions o;
  o.buffer_bytes = 7000;
  o.readers = 3;
  LoadedWeights w = load_weights(f, items, o);
  for (size_t k = 0; k < split.size(); ++k) {
    const GGUFTensorInfo& t = f.tensors()[split[k].first];
    const uint64_t cut = split[k].second;
    const std::vector<uint8_t> want = file_bytes(f, t);
    EXPECT_EQ(device_bytes(*a, w.device_data()[2 * k], cut), std::vector<uint8_t>(want.begin(), want.begin() + cut))
        << t.name;
    EXPECT_EQ(device_bytes(*b, w.device_data()[2 * k + 1], t.nbytes - cut),
              std::vector<uint8_t>(want.begin() + cut, want.end()))
        << t.name;
  }
}

// One backend asking for a tensor whole and for a row range of it (a tied
// embedding under tensor parallelism: every row for the lookup, a share of
// the rows as the output matrix): both copies exact, whatever the order the
// overlapping spans come in, through staging buffers smaller than either.
TEST(Loader, OverlappingItemsOnOneBackend) {
  WEIR_TINY_MODEL(dir, "qwen2", "loader-overlap");
  auto model = Model::load(dir + "/qwen2.gguf");
  const GGUFFile& f = model->file();
  auto b = chaos(3);
  std::vector<LoadItem> items;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // bytes of each item
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const GGUFTensorInfo& t = f.tensors()[i];
    if (t.n_dims < 2 || t.ne[1] < 4 || t.nbytes < 20000) continue;
    const uint64_t row = t.nbytes / uint64_t(t.ne[1] * t.ne[2] * t.ne[3]);
    const uint64_t half = uint64_t(t.ne[1] / 2) * row;
    for (auto [a, z] : {std::pair<uint64_t, uint64_t>{0, t.nbytes}, {0, half}, {half, t.nbytes}, {row, 3 * row}}) {
      items.push_back(LoadItem{i, b.get(), a, z == t.nbytes ? 0 : z});
      ranges.push_back({a, z});
    }
  }
  ASSERT_GE(items.size(), 8u);
  LoaderOptions o;
  o.buffer_bytes = 6000;
  o.readers = 2;
  LoadedWeights w = load_weights(f, items, o);
  for (size_t k = 0; k < items.size(); ++k) {
    const GGUFTensorInfo& t = f.tensors()[items[k].tensor];
    const std::vector<uint8_t> want = file_bytes(f, t);
    const auto [a, z] = ranges[k];
    EXPECT_EQ(device_bytes(*b, w.device_data()[k], z - a), std::vector<uint8_t>(want.begin() + a, want.begin() + z))
        << t.name << " bytes " << a << ".." << z;
  }
}

// Graphs on a backend that adopted its weights read them there (its plan
// copies nothing) and give the CPU's logits bit for bit; a second session
// loads nothing again.
TEST(Loader, ModelsRunFromLoadedWeights) {
  for (const char* name : {"llama3", "gemma3", "llama3-q4_0"}) {
    WEIR_TINY_MODEL(dir, name, "loader-run");
    auto model = Model::load(dir + "/" + name + ".gguf");
    const std::vector<float> want = cpu_logits(*model);
    auto b = chaos();
    LoaderOptions o;
    o.buffer_bytes = 9000;
    LoadedWeights w = load_weights(model->file(), every_tensor(model->file(), b.get()), o);
    const uint64_t adopted = b->stats().weights_adopted;
    EXPECT_EQ(prompt_logits(*model, *b), want) << name;
    EXPECT_EQ(prompt_logits(*model, *b), want) << name << ", second session";
    EXPECT_EQ(b->stats().weights_adopted, adopted) << name;
  }
}

// One backend, several models one after another: each runs its own weights
// (a later model's mapping may land where an earlier one's was).
TEST(Loader, ModelsOneAfterAnotherReuseNothingStale) {
  auto b = chaos();
  for (int round = 0; round < 2; ++round)
    for (const char* name : {"llama3", "llama3-q4_0", "qwen3"}) {
      WEIR_TINY_MODEL(dir, name, "loader-stale");
      auto model = Model::load(dir + "/" + name + ".gguf");
      const std::vector<float> want = cpu_logits(*model);
      LoadedWeights w = load_weights(model->file(), every_tensor(model->file(), b.get()));
      EXPECT_EQ(prompt_logits(*model, *b), want) << name << " round " << round;
    }
  EXPECT_EQ(b->live(), 0);
}

// The file cut short after the model was opened (its header still says
// where the tensors are): the error names the tensor and the offset; nothing
// stays alive; a later load on the same backend is whole.
TEST(Loader, TruncatedFileNamesTheTensor) {
  WEIR_TINY_MODEL(dir, "qwen2", "loader-trunc");
  const std::string cut = dir + "/cut.gguf";
  std::filesystem::copy_file(dir + "/qwen2.gguf", cut, std::filesystem::copy_options::overwrite_existing);
  auto b = chaos();
  {
    auto model = Model::load(cut);
    const GGUFFile& f = model->file();
    const GGUFTensorInfo& last = f.tensors().back();
    std::filesystem::resize_file(cut, f.data_offset() + last.offset + last.nbytes / 2);
    LoaderOptions o;
    o.buffer_bytes = 4096;
    try {
      load_weights(f, every_tensor(f, b.get()), o);
      FAIL() << "a short file loaded";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("'" + std::string(last.name) + "'"), std::string::npos) << m;
      EXPECT_NE(m.find("ends at byte"), std::string::npos) << m;
    }
    EXPECT_EQ(b->live(), 0);
    EXPECT_EQ(b->stats().weights_adopted, 0u);
  }
  auto good = Model::load(dir + "/qwen2.gguf");
  const std::vector<float> want = cpu_logits(*good);
  LoadedWeights w = load_weights(good->file(), every_tensor(good->file(), b.get()));
  EXPECT_EQ(prompt_logits(*good, *b), want);
}

// A read that fails in the middle of a load (the test hook), and a stop
// (Ctrl-C): an error naming the tensor and offset, or Cancelled; nothing
// adopted, nothing alive, and the next load works.
TEST(Loader, ReadErrorAndStopLeaveNothing) {
  WEIR_TINY_MODEL(dir, "qwen2", "loader-fault");
  auto model = Model::load(dir + "/qwen2.gguf");
  const GGUFFile& f = model->file();
  const GGUFTensorInfo& mid = f.tensors()[f.tensors().size() / 2];
  auto b = chaos();
  LoaderOptions o;
  o.buffer_bytes = 5000;
  o.readers = 3;
  o.fail_read_at = int64_t(f.data_offset() + mid.offset + mid.nbytes / 2);
  try {
    load_weights(f, every_tensor(f, b.get()), o);
    FAIL() << "the injected read error was not reported";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'" + std::string(mid.name) + "'"), std::string::npos) << m;
    EXPECT_NE(m.find("offset"), std::string::npos) << m;
  }
  EXPECT_EQ(b->live(), 0);
  std::atomic<bool> stop{true};
  LoaderOptions s;
  s.stop = &stop;
  EXPECT_THROW(load_weights(f, every_tensor(f, b.get()), s), Cancelled);
  EXPECT_EQ(b->live(), 0);
  EXPECT_EQ(b->stats().weights_adopted, 0u);
  LoadedWeights w = load_weights(f, every_tensor(f, b.get()));
  EXPECT_EQ(prompt_logits(*model, *b), cpu_logits(*model));
}

// Column blocks of every 2-D weight (a tensor-parallel rank's share of a
// product whose input is split): strided items, packed on the backend.
TEST(Loader, StridedColumnBlocksArePacked) {
  WEIR_TINY_MODEL(dir, "qwen2", "loader-cols");
  auto model = Model::load(dir + "/qwen2.gguf");
  const GGUFFile& f = model->file();
  auto b = chaos();
  std::vector<LoadItem> items;
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const GGUFTensorInfo& t = f.tensors()[i];
    if (t.n_dims != 2 || t.ne[0] % 2 || t.dtype != DType::F32) continue;
    const uint64_t row = t.nbytes / uint64_t(t.ne[1]);
    LoadItem it{i, b.get()};
    it.begin = row / 2;  // the second half of every row
    it.rows = uint64_t(t.ne[1]);
    it.row_bytes = row / 2;
    it.row_stride = row;
    items.push_back(it);
  }
  ASSERT_FALSE(items.empty());
  LoaderOptions o;
  o.buffer_bytes = 3000;  // a few rows a read
  LoadedWeights w = load_weights(f, items, o);
  for (size_t k = 0; k < items.size(); ++k) {
    const GGUFTensorInfo& t = f.tensors()[items[k].tensor];
    const std::vector<uint8_t> file = file_bytes(f, t);
    std::vector<uint8_t> want;
    for (uint64_t r = 0; r < items[k].rows; ++r)
      want.insert(want.end(), file.begin() + std::ptrdiff_t(r * items[k].row_stride + items[k].begin),
                  file.begin() + std::ptrdiff_t(r * items[k].row_stride + items[k].begin + items[k].row_bytes));
    EXPECT_EQ(device_bytes(*b, w.device_data()[k], want.size()), want) << t.name;
  }
}

// Tensor-parallel ranks on backends with memory of their own (the chaos
// one, as GPUs): each loads only its share (rank_weight_items: rows and
// packed column blocks) and the group computes what one CPU does.
TEST(Loader, TensorParallelRanksFromTheirShares) {
  WEIR_TINY_MODEL(dir, "qwen2", "loader-tp");
  auto model = Model::load(dir + "/qwen2.gguf");
  CpuOptions exact;
  exact.llama_rounding = false;
  CpuBackend cpu(2, exact);
  const std::vector<float> want = prompt_logits(*model, cpu);
  const int n = 2;
  std::vector<std::unique_ptr<Backend>> ranks;
  for (int r = 0; r < n; ++r) {
    test::ChaosOptions o;
    o.seed = uint64_t(r + 5);
    o.max_delay_us = 30;
    o.cpu = exact;
    ranks.push_back(test::make_chaos_backend(o));
  }
  auto comms = make_thread_comms(n);
  std::vector<LoadItem> items;
  uint64_t share = 0;
  for (int r = 0; r < n; ++r) {
    auto mine = rank_weight_items(*model, {r, n, comms[size_t(r)].get()}, ranks[size_t(r)].get());
    for (const LoadItem& it : mine) share += it.rows ? it.rows * it.row_bytes : it.end - it.begin;
    items.insert(items.end(), mine.begin(), mine.end());
  }
  LoaderOptions o;
  o.buffer_bytes = 4000;
  LoadedWeights w = load_weights(model->file(), items, o);
  // Each rank's share, on its backend, is the file's bytes.
  for (size_t k = 0; k < items.size(); ++k) {
    const LoadItem& it = items[k];
    const GGUFTensorInfo& t = model->file().tensors()[it.tensor];
    const std::vector<uint8_t> file = file_bytes(model->file(), t);
    std::vector<uint8_t> want_bytes;
    if (it.rows) {
      for (uint64_t r = 0; r < it.rows; ++r)
        want_bytes.insert(want_bytes.end(), file.begin() + std::ptrdiff_t(it.begin + r * it.row_stride),
                          file.begin() + std::ptrdiff_t(it.begin + r * it.row_stride + it.row_bytes));
    } else {
      const uint64_t end = it.end ? it.end : t.nbytes;
      want_bytes.assign(file.begin() + std::ptrdiff_t(it.begin), file.begin() + std::ptrdiff_t(end));
    }
    ASSERT_EQ(device_bytes(*it.backend, w.device_data()[k], want_bytes.size()), want_bytes) << t.name << " item " << k;
  }
  SessionParams sp;
  sp.n_ctx = 32;
  sp.n_batch = 5;
  sp.tp = {0, n, comms[0].get()};
  sp.peers.push_back({ranks[1].get(), comms[1].get()});
  Session s(*model, *ranks[0], sp);
  const std::vector<int32_t> prompt = {1, 5, 9, 2, 7, 3, 11};
  std::vector<int32_t> rows(prompt.size());
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = int32_t(i);
  s.eval(prompt, rows);
  const int64_t V = s.n_vocab();
  for (size_t t = 0; t < prompt.size(); ++t) {
    double diff = 0, scale = 0;
    for (int64_t i = 0; i < V; ++i) {
      diff = std::max(diff, std::fabs(double(s.logits(t)[i]) - double(want[t * size_t(V) + size_t(i)])));
      scale = std::max(scale, std::fabs(double(want[t * size_t(V) + size_t(i)])));
    }
    int64_t first_bad = -1, n_bad = 0;
    for (int64_t i = 0; i < V; ++i)
      if (std::fabs(double(s.logits(t)[i]) - double(want[t * size_t(V) + size_t(i)])) > 1e-5 * scale) {
        if (first_bad < 0) first_bad = i;
        ++n_bad;
      }
    EXPECT_LT(diff / scale, 1e-5) << "row " << t << ": " << n_bad << " of " << V << " logits differ, the first at " << first_bad;
  }
  // The ranks' shares together are about the model once (norms, the token
  // embeddings and the kv heads replicated).
  EXPECT_LT(share, uint64_t(1.6 * double(model->weight_bytes())));
}

// --no-mmap: the mapping becomes private memory holding the file's bytes
// (those of skipped tensors stay zero: nobody on the host reads them), and
// the model computes as from the mapping. With O_DIRECT, either it was used
// or the loader says why not.
TEST(Loader, NoMmapReadsIntoPrivateMemory) {
  WEIR_TINY_MODEL(dir, "llama3", "loader-nommap");
  auto mapped = Model::load(dir + "/llama3.gguf");
  const std::vector<float> want = cpu_logits(*mapped);
  for (bool direct : {false, true}) {
    auto model = Model::load(dir + "/llama3.gguf");
    const GGUFFile& f = model->file();
    std::vector<bool> skip(f.tensors().size());
    size_t skipped = 0;
    for (size_t i = 0; i < skip.size(); ++i)
      if (f.tensors()[i].name == std::string_view("blk.1.ffn_up.weight")) skip[i] = true, skipped = i;
    LoaderOptions o;
    o.direct_io = direct;
    o.buffer_bytes = 10000;
    LoadReport r;
    load_into_memory(f, skip, o, &r);
    ASSERT_TRUE(f.mapping()->is_private_memory());
    if (direct) EXPECT_TRUE(r.direct_io || !r.direct_io_note.empty());
    for (size_t i = 0; i < skip.size(); ++i) {
      const GGUFTensorInfo& t = f.tensors()[i];
      if (skip[i]) {  // O_DIRECT reads whole 4 KiB blocks: its ends may be read
        const size_t edge = direct ? 4096 : 0;
        ASSERT_GT(t.nbytes, 2 * edge + 4096);
        EXPECT_EQ(std::vector<uint8_t>(t.data + edge, t.data + t.nbytes - edge), std::vector<uint8_t>(t.nbytes - 2 * edge, 0))
            << t.name << (direct ? " (O_DIRECT)" : "");
        continue;
      }
      EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.nbytes), file_bytes(f, t)) << t.name;
    }
    ASSERT_GT(skipped, 0u);
    // Fill the skipped one too (as if nothing went to a device) and run.
    auto whole = Model::load(dir + "/llama3.gguf");
    load_into_memory(whole->file(), {}, o);
    EXPECT_EQ(cpu_logits(*whole), want) << (direct ? "O_DIRECT" : "buffered");
  }
}

}  // namespace
}  // namespace weir
