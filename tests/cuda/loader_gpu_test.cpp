// The loader on a GPU: weights through small pinned staging buffers on the
// copy stream, byte for byte as in the file; a backend that adopted them
// computes exactly what one that copies weights in plan() computes, and
// copies nothing in plan however many sessions run (bench's several tests);
// a failed load leaves no device or pinned memory behind.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "backend/registry.h"
#include "core/error.h"
#include "counting_backend.h"
#include "cuda_test_util.h"
#include "loader/load_helpers.h"
#include "engine/session.h"
#include "model/loader.h"
#include "model/model.h"
#include "model/tiny_models.h"

namespace weir {
namespace {

using test::every_tensor;
using test::prompt_logits;

TEST(CudaLoader, BytesExactAndNothingCopiedInPlan) {
  WEIR_REQUIRE_GPU();
  for (const char* name : {"qwen2", "gemma3", "llama3-q4_0"}) {
    WEIR_TINY_MODEL(dir, name, "cuda-loader");
    auto model = Model::load(dir + "/" + name + ".gguf");
    const GGUFFile& f = model->file();
    // Copies weights inside plan(), as before the loader.
    auto plain = make_cuda_backend(CudaOptions{});
    const std::vector<float> want = prompt_logits(*model, *plain);
    EXPECT_GT(plain->stats().weights_copied_in_plan, 0u) << "the counter counts";

    auto gpu = make_cuda_backend(CudaOptions{});
    LoaderOptions o;
    o.buffer_bytes = 5000;  // far smaller than the big tensors, no divisor of them
    o.readers = 3;
    o.buffers = 2;
    LoadedWeights w = load_weights(f, every_tensor(f, gpu.get()), o);
    for (size_t i = 0; i < f.tensors().size(); ++i) {
      const GGUFTensorInfo& t = f.tensors()[i];
      std::vector<uint8_t> got(t.nbytes), file(t.nbytes);
      ASSERT_EQ(cudaMemcpy(got.data(), w.device_data()[i], t.nbytes, cudaMemcpyDeviceToHost), cudaSuccess);
      std::ifstream in(f.name(), std::ios::binary);
      in.seekg(std::streamoff(f.data_offset() + t.offset));
      in.read(reinterpret_cast<char*>(file.data()), std::streamsize(t.nbytes));
      EXPECT_EQ(got, file) << name << " " << t.name;
    }
    EXPECT_EQ(prompt_logits(*model, *gpu), want) << name;
    EXPECT_EQ(prompt_logits(*model, *gpu), want) << name << ", a second session";
    EXPECT_EQ(gpu->stats().weights_copied_in_plan, 0u) << name;
    EXPECT_EQ(gpu->stats().weights_adopted, f.tensors().size()) << name;
  }
}

TEST(CudaLoader, FailedLoadLeavesNothing) {
  WEIR_REQUIRE_GPU();
  WEIR_TINY_MODEL(dir, "qwen2", "cuda-loader-fault");
  auto model = Model::load(dir + "/qwen2.gguf");
  const GGUFFile& f = model->file();
  test::CountingBackend gpu(make_cuda_backend(CudaOptions{}));
  const size_t free_before = cuda_free_bytes(0);
  LoaderOptions o;
  o.buffer_bytes = 4096;
  o.readers = 2;
  const GGUFTensorInfo& mid = f.tensors()[f.tensors().size() / 2];
  o.fail_read_at = int64_t(f.data_offset() + mid.offset + 1);
  EXPECT_THROW(load_weights(f, every_tensor(f, &gpu), o), Error);
  EXPECT_EQ(gpu.live(), 0) << "device or pinned buffers left alive";
  EXPECT_EQ(gpu.stats().weights_adopted, 0u);
  // The driver's free memory is back (to its allocation granularity).
  EXPECT_NEAR(double(cuda_free_bytes(0)), double(free_before), double(8 << 20));
  LoadedWeights w = load_weights(f, every_tensor(f, &gpu));
  auto plain = make_cuda_backend(CudaOptions{});
  EXPECT_EQ(prompt_logits(*model, gpu), prompt_logits(*model, *plain));
}

}  // namespace
}  // namespace weir
