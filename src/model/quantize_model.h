// Model quantization: GGUF in, GGUF of another file type out (what
// `weir quantize` runs). Tensor types come from plan_tensor_types; each
// tensor to convert is dequantized to float and requantized in chunks of
// rows, spread over a pool of threads, and streamed to the writer, so memory
// stays at one chunk of floats plus its output whatever the model's size.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "model/quant_plan.h"

namespace weir {

class GGUFFile;
struct Imatrix;

// What the type plan needs, from a file's metadata: general.architecture,
// {arch}.block_count, .attention.head_count(_kv) (per-layer arrays: their
// largest value) and .expert_count; missing keys are 0.
QuantModelInfo quant_model_info(const GGUFFile& f);

struct QuantizeProgress {
  size_t tensor = 0;  // index of the tensor being written
  size_t n_tensors = 0;
  std::string_view name;
  DType from = DType::F32, to = DType::F32;
  bool copied = false;         // written as is (no conversion)
  uint64_t done_elements = 0;  // elements of all tensors written so far
  uint64_t total_elements = 0;
};

struct QuantizeResult {
  uint64_t in_file_bytes = 0, out_file_bytes = 0;
  uint64_t in_tensor_bytes = 0, out_tensor_bytes = 0;
  uint64_t n_elements = 0;  // parameters, summed over tensors
  size_t n_tensors = 0, n_converted = 0, n_copied = 0;
  size_t n_requantized = 0;  // converted from one quantized type to another
  // With an importance matrix: tensors of a type that uses one but with no
  // entry in it, quantized without (llama-quantize warns the same way).
  std::vector<std::string> without_importance;
  size_t n_weighted = 0;  // tensors quantized with importance weights
  double seconds = 0;
  double bpw_in() const { return n_elements ? 8.0 * double(in_tensor_bytes) / double(n_elements) : 0; }
  double bpw_out() const { return n_elements ? 8.0 * double(out_tensor_bytes) / double(n_elements) : 0; }
};

// Reads in_path (any GGUF the reader accepts) and writes out_path as file type
// ft: metadata copied with general.file_type and general.quantization_version
// (2) set; tensors that keep their type, 1-D tensors and integer tensors
// copied byte for byte. n_threads < 1 means all CPUs. `progress` is called
// after each chunk of work; an exception it throws aborts the run (the
// partial output is removed). Throws weir::Error before writing anything when
// a tensor cannot be converted (its name and dtypes in the message).
//
// imatrix (optional): importance weights for the types that use them
// (quant::uses_importance), per tensor in_sum2 / counts as llama-quantize
// takes them, per expert for 3-D expert tensors; the type plan then follows
// llama.cpp's imatrix rules, and the output gets llama-quantize's
// quantize.imatrix.* keys. An entry whose length is not the tensor's
// columns times its experts is an error naming the tensor.
QuantizeResult quantize_model(const std::string& in_path, const std::string& out_path, FileType ft,
                              int n_threads = 0,
                              const std::function<void(const QuantizeProgress&)>& progress = {},
                              const Imatrix* imatrix = nullptr);

}  // namespace weir
