// libFuzzer target for the GGUF reader: parse any bytes, then touch every
// key, getter and tensor info. Only weir::Error may escape GGUFFile; anything
// else (another exception, a crash, an ASan/UBSan report) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/error.h"
#include "core/gguf.h"

namespace {

volatile uint64_t g_sink;  // keeps the reads below from being optimised away

void touch(const weir::GGUFValue& v, int depth) {
  uint64_t h = uint64_t(v.type) + v.num.u + v.str.size() + v.count;
  if (!v.str.empty()) h += uint8_t(v.str.front()) + uint8_t(v.str.back());
  if (v.type == weir::GGUFType::ARRAY) {
    h += v.is_integer() + v.is_float();
    if (v.count) {
      // array_* read packed scalars through raw: first and last element
      h += uint64_t(v.array_i64(0)) + uint64_t(v.array_i64(v.count - 1));
      h += uint64_t(v.array_f64(0) != 0.0);
      h += uint64_t(v.array_f64(v.count - 1) != 0.0);
    }
    for (std::string_view s : v.strings)
      if (!s.empty()) h += uint8_t(s.front()) + uint8_t(s.back());
    for (const weir::GGUFValue& item : v.items) touch(item, depth + 1);
  }
  g_sink = g_sink + h;
}

template <class F>
void quiet(F&& f) {
  try {
    f();
  } catch (const weir::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const weir::GGUFFile f = weir::GGUFFile::parse(data, size, "fuzz.gguf");
    uint64_t h = f.version() + f.alignment() + f.data_offset();
    for (const auto& kv : f.kvs()) {
      const std::string_view key = kv.first;  // (clang 14 lambdas cannot capture bindings)
      const weir::GGUFValue& v = kv.second;
      h += key.size();
      touch(v, 0);
      if (f.find(key) != &v) __builtin_trap();  // index and order must agree
      quiet([&] { h += f.get_uint(key); });
      quiet([&] { h += f.get_uint_or(key, 1); });
      quiet([&] { h += uint64_t(f.get_float(key) != 0.0); });
      quiet([&] { h += uint64_t(f.get_float_or(key, 0.0) != 0.0); });
      quiet([&] { h += f.get_bool_or(key, false); });
      quiet([&] { h += f.get_str(key).size(); });
      quiet([&] { h += f.get_str_or(key, "").size(); });
      quiet([&] { h += f.get_array(key).count; });
      quiet([&] { h += f.get_str_array(key).size(); });
      quiet([&] {
        for (float x : f.get_f32_array(key)) h += uint64_t(x != 0.0f);
      });
      quiet([&] {
        for (int32_t x : f.get_i32_array(key)) h += uint32_t(x);
      });
    }
    quiet([&] { h += f.get_uint("general.alignment"); });
    for (const weir::GGUFTensorInfo& t : f.tensors()) {
      if (f.find_tensor(t.name) != &t) __builtin_trap();
      h += t.name.size() + uint64_t(t.n_elements()) + t.offset + t.nbytes + uint32_t(t.dtype);
      // The data range must lie inside the buffer: read its first and last byte.
      if (t.nbytes) {
        if (t.data < data || t.data + t.nbytes > data + size) __builtin_trap();
        h += t.data[0] + t.data[t.nbytes - 1];
      }
    }
    g_sink = g_sink + h;
  } catch (const weir::Error&) {
  }
  return 0;
}
