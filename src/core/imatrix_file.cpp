// Importance matrix files: llama.cpp's GGUF format and its legacy .dat
// format (facts from llama.cpp's tools/imatrix and tools/quantize; the code
// is ours). See imatrix_file.h for the layouts.
#include "core/imatrix_file.h"

#include <cstring>
#include <fstream>
#include <iterator>

#include "core/dtype.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/gguf_writer.h"

namespace weir {
namespace {

constexpr char kSums[] = ".in_sum2";
constexpr char kCounts[] = ".counts";

bool strip_suffix(std::string& s, std::string_view suffix) {
  if (s.size() < suffix.size() || s.compare(s.size() - suffix.size(), suffix.size(), suffix) != 0) return false;
  s.resize(s.size() - suffix.size());
  return true;
}

std::vector<float> f32_data(const GGUFFile& f, const GGUFTensorInfo& t) {
  if (t.dtype != DType::F32)
    throw Error(f.name() + ": imatrix tensor '" + std::string(t.name) + "' is " + dtype_name(t.dtype) +
                ", not F32");
  std::vector<float> v(size_t(t.n_elements()));
  if (!v.empty()) std::memcpy(v.data(), t.data, v.size() * sizeof(float));
  return v;
}

Imatrix read_gguf(const std::string& path) {
  const GGUFFile f = GGUFFile::open(path);
  Imatrix m;
  const GGUFValue* type = f.find("general.type");
  if (type && type->type == GGUFType::STRING && type->str != "imatrix")
    throw Error(path + ": general.type is '" + std::string(type->str) + "', not 'imatrix'");
  if (f.find("imatrix.datasets")) {
    for (std::string_view s : f.get_str_array("imatrix.datasets")) m.datasets.emplace_back(s);
  }
  m.chunk_count = uint32_t(f.get_uint_or("imatrix.chunk_count", 0));
  m.chunk_size = uint32_t(f.get_uint_or("imatrix.chunk_size", 0));
  std::map<std::string, std::pair<const GGUFTensorInfo*, const GGUFTensorInfo*>> parts;
  for (const GGUFTensorInfo& t : f.tensors()) {
    std::string name(t.name);
    if (strip_suffix(name, kSums)) parts[name].first = &t;
    else if (strip_suffix(name, kCounts)) parts[name].second = &t;
  }
  if (parts.empty()) throw Error(path + ": no imatrix entries (tensors named <weight>.in_sum2 and <weight>.counts)");
  for (const auto& [name, p] : parts) {
    if (!p.first || !p.second)
      throw Error(path + ": imatrix entry '" + name + "' has " + (p.first ? "no .counts" : "no .in_sum2") + " tensor");
    ImatrixEntry e;
    e.n_per_row = p.first->ne[0];
    e.in_sum2 = f32_data(f, *p.first);
    e.counts = f32_data(f, *p.second);
    if (e.n_per_row < 1 || int64_t(e.in_sum2.size()) != e.n_per_row * e.n_mat())
      throw Error(path + ": imatrix entry '" + name + "': " + std::to_string(e.in_sum2.size()) +
                  " sums for " + std::to_string(e.n_mat()) + " counts");
    m.entries.emplace(name, std::move(e));
  }
  return m;
}

// The legacy format stores sum / count * ncall and ncall; the importance is
// value / ncall. Read back as sums over ncall "tokens" so importance()
// divides the same way.
Imatrix read_legacy(const std::string& path, const std::vector<uint8_t>& b) {
  size_t off = 0;
  auto i32 = [&](const char* what) {
    int32_t v;
    if (off + 4 > b.size()) throw Error(path + ": legacy imatrix truncated at offset " + std::to_string(off) + " (" + what + ")");
    std::memcpy(&v, b.data() + off, 4);
    off += 4;
    return v;
  };
  Imatrix m;
  m.legacy = true;
  const int32_t n = i32("entry count");
  if (n < 1) throw Error(path + ": not an imatrix (" + std::to_string(n) + " entries)");
  for (int32_t k = 0; k < n; ++k) {
    const int32_t len = i32("name length");
    if (len < 0 || off + size_t(len) > b.size()) throw Error(path + ": legacy imatrix entry " + std::to_string(k) + ": bad name length");
    std::string name(reinterpret_cast<const char*>(b.data() + off), size_t(len));
    off += size_t(len);
    const int32_t ncall = i32("ncall");
    const int32_t nval = i32("value count");
    if (nval < 1 || off + 4 * size_t(nval) > b.size())
      throw Error(path + ": legacy imatrix entry '" + name + "': bad value count " + std::to_string(nval));
    ImatrixEntry e;
    e.n_per_row = nval;  // one row: the format keeps no expert split
    e.in_sum2.resize(size_t(nval));
    std::memcpy(e.in_sum2.data(), b.data() + off, 4 * size_t(nval));
    off += 4 * size_t(nval);
    e.counts = {float(ncall > 0 ? ncall : 1)};
    m.entries[name] = std::move(e);
  }
  if (off + 8 <= b.size()) {
    m.chunk_count = uint32_t(i32("chunk count"));
    const int32_t len = i32("dataset length");
    if (len >= 0 && off + size_t(len) <= b.size())
      m.datasets.emplace_back(reinterpret_cast<const char*>(b.data() + off), size_t(len));
  }
  return m;
}

}  // namespace

std::vector<float> Imatrix::importance(const std::string& name) const {
  const auto it = entries.find(name);
  if (it == entries.end()) return {};
  const ImatrixEntry& e = it->second;
  std::vector<float> w(e.in_sum2.size());
  for (int64_t j = 0; j < e.n_mat(); ++j) {
    const float c = e.counts[size_t(j)];
    for (int64_t i = 0; i < e.n_per_row; ++i) {
      const size_t k = size_t(j * e.n_per_row + i);
      w[k] = c > 0.0f ? e.in_sum2[k] / c : 1.0f;  // a matrix no token reached: even weights
    }
  }
  return w;
}

Imatrix read_imatrix(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open imatrix file " + path);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Imatrix m = bytes.size() >= 4 && std::memcmp(bytes.data(), "GGUF", 4) == 0 ? read_gguf(path)
                                                                              : read_legacy(path, bytes);
  m.path = path;
  return m;
}

void write_imatrix(const std::string& path, const Imatrix& m) {
  GGUFWriter w;
  w.set_str("general.type", "imatrix");
  w.set_str_array("imatrix.datasets", m.datasets);
  w.set_u32("imatrix.chunk_count", m.chunk_count);
  w.set_u32("imatrix.chunk_size", m.chunk_size);
  for (const auto& [name, e] : m.entries) {
    w.add_tensor(name + kSums, DType::F32, {e.n_per_row, e.n_mat()});
    w.add_tensor(name + kCounts, DType::F32, {1, e.n_mat()});
  }
  w.open(path);
  for (const auto& [name, e] : m.entries) {
    w.write_tensor_data(e.in_sum2.data(), e.in_sum2.size() * sizeof(float));
    w.write_tensor_data(e.counts.data(), e.counts.size() * sizeof(float));
  }
  w.close();
}

}  // namespace weir
