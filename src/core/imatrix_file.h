// Importance matrices (what `weir imatrix` writes and `weir quantize
// --imatrix` reads), in llama.cpp's formats:
//
// GGUF (llama.cpp's tools/imatrix, the current format): general.type =
// "imatrix", imatrix.datasets (array of strings), imatrix.chunk_count and
// imatrix.chunk_size (u32); per weight matrix W (its tensor name, e.g.
// "blk.0.attn_q.weight"), two F32 tensors:
//   W.in_sum2  [n_per_row, n_mat]: sum over the tokens of x_j^2, x the
//              product's input, one row per matrix (n_mat experts, else 1)
//   W.counts   [1, n_mat]: the tokens summed into each row
// written in name order.
//
// Legacy .dat (read only): i32 n_entries; per entry i32 name length, the
// name, i32 ncall, i32 nval, nval f32 (sum / count * ncall); then optionally
// i32 chunk count, i32 length and the dataset's name.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace weir {

struct ImatrixEntry {
  int64_t n_per_row = 0;        // columns of the weight (the input's length)
  std::vector<float> in_sum2;   // n_per_row * n_mat
  std::vector<float> counts;    // n_mat
  int64_t n_mat() const { return int64_t(counts.size()); }
};

struct Imatrix {
  std::map<std::string, ImatrixEntry> entries;  // by weight tensor name
  std::vector<std::string> datasets;
  uint32_t chunk_count = 0, chunk_size = 0;
  bool legacy = false;  // read from a .dat file
  std::string path;     // where read_imatrix read it

  // The quantizer's weights for one weight tensor, as llama-quantize makes
  // them: in_sum2 / count per row of matrices (1 where a matrix got no
  // tokens); n_per_row * n_mat floats.
  std::vector<float> importance(const std::string& name) const;
};

// Reads a GGUF or legacy imatrix file. Throws weir::Error naming the path and
// what is wrong.
Imatrix read_imatrix(const std::string& path);

// Writes the GGUF format (entries in name order).
void write_imatrix(const std::string& path, const Imatrix& m);

}  // namespace weir
