#include "core/gguf_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/file_checks.h"
#include "core/partial_files.h"

namespace weir {
namespace {

constexpr uint64_t kDefaultAlignment = 32;

// Little-endian serialization into a byte vector (x86 and ARM are both LE).
struct Bytes {
  std::vector<uint8_t> b;
  template <typename T>
  void put(T v) {
    put_raw(&v, sizeof(T));
  }
  void put_str(std::string_view s) {
    put<uint64_t>(s.size());
    put_raw(s.data(), s.size());
  }
  void put_raw(const void* p, size_t n) {
    if (n == 0) return;
    const size_t at = b.size();
    b.resize(at + n);
    std::memcpy(b.data() + at, p, n);
  }
};

// The payload of a value (no type tag for the top level).
void put_payload(Bytes& out, const GGUFValue& v);

void put_array(Bytes& out, const GGUFValue& v) {
  out.put<uint32_t>(uint32_t(v.elem_type));
  out.put<uint64_t>(v.count);
  if (const size_t sz = gguf_scalar_size(v.elem_type)) {
    if (v.count) out.put_raw(v.raw, size_t(v.count) * sz);
  } else if (v.elem_type == GGUFType::STRING) {
    for (std::string_view s : v.strings) out.put_str(s);
  } else if (v.elem_type == GGUFType::ARRAY) {
    for (const GGUFValue& item : v.items) put_array(out, item);
  } else {
    throw Error(std::string("GGUF writer: array of unknown element type ") + gguf_type_name(v.elem_type));
  }
}

void put_payload(Bytes& out, const GGUFValue& v) {
  switch (v.type) {
    case GGUFType::UINT8: out.put<uint8_t>(uint8_t(v.num.u)); break;
    case GGUFType::INT8: out.put<int8_t>(int8_t(v.num.i)); break;
    case GGUFType::UINT16: out.put<uint16_t>(uint16_t(v.num.u)); break;
    case GGUFType::INT16: out.put<int16_t>(int16_t(v.num.i)); break;
    case GGUFType::UINT32: out.put<uint32_t>(uint32_t(v.num.u)); break;
    case GGUFType::INT32: out.put<int32_t>(int32_t(v.num.i)); break;
    case GGUFType::FLOAT32: out.put<float>(float(v.num.f)); break;
    case GGUFType::BOOL: out.put<uint8_t>(v.num.u ? 1 : 0); break;
    case GGUFType::STRING: out.put_str(v.str); break;
    case GGUFType::ARRAY: put_array(out, v); break;
    case GGUFType::UINT64: out.put<uint64_t>(v.num.u); break;
    case GGUFType::INT64: out.put<int64_t>(v.num.i); break;
    case GGUFType::FLOAT64: out.put<double>(v.num.f); break;
  }
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

struct GGUFWriter::Impl {
  struct KV {
    std::string key;
    GGUFType type;
    std::vector<uint8_t> payload;
  };
  struct TensorInfo {
    std::string name;
    int n_dims;
    int64_t ne[4];
    DType dtype;
    uint64_t offset, nbytes;
  };

  uint64_t alignment;
  uint32_t version;
  std::vector<KV> kvs;
  std::vector<TensorInfo> tensors;
  uint64_t data_size = 0;  // end of the last tensor in the data section

  std::string path, tmp_path;  // written as tmp_path, renamed to path by close()
  int fd = -1;
  int partial_slot = -1;  // tmp_path in the list removed on a fatal signal
  size_t cur = 0;         // tensor being written
  uint64_t cur_done = 0;  // its bytes written so far
  uint64_t data_pos = 0;  // bytes written into the data section

  KV* find(std::string_view key) {
    for (KV& kv : kvs)
      if (kv.key == key) return &kv;
    return nullptr;
  }
  void set(std::string_view key, GGUFType type, Bytes&& b) {
    if (fd >= 0) throw Error("GGUF writer: metadata '" + std::string(key) + "' set after open()");
    if (KV* kv = find(key)) {
      kv->type = type;
      kv->payload = std::move(b.b);
    } else {
      kvs.push_back({std::string(key), type, std::move(b.b)});
    }
  }
  template <typename T>
  void set_scalar(std::string_view key, GGUFType type, T v) {
    Bytes b;
    b.put<T>(v);
    set(key, type, std::move(b));
  }

  void write_all(const void* p, size_t n) {
    const auto* q = static_cast<const uint8_t*>(p);
    while (n > 0) {
      const ssize_t w = ::write(fd, q, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        throw Error(path + ": write failed: " + std::strerror(errno));
      }
      q += w;
      n -= size_t(w);
    }
  }
  void write_zeros(uint64_t n) {
    static const uint8_t zeros[256] = {};
    while (n > 0) {
      const size_t k = size_t(std::min<uint64_t>(n, sizeof zeros));
      write_all(zeros, k);
      n -= k;
    }
  }
  // Moves to the data-section offset of the current tensor (padding).
  void skip_finished_tensors() {
    while (cur < tensors.size() && cur_done == tensors[cur].nbytes) {
      ++cur;
      cur_done = 0;
    }
    if (cur < tensors.size() && data_pos < tensors[cur].offset) {
      write_zeros(tensors[cur].offset - data_pos);
      data_pos = tensors[cur].offset;
    }
  }
};

GGUFWriter::GGUFWriter(uint64_t alignment, uint32_t version) : impl_(std::make_unique<Impl>()) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    throw Error("GGUF writer: alignment " + std::to_string(alignment) + " is not a power of two");
  if (version != 2 && version != 3)
    throw Error("GGUF writer: version " + std::to_string(version) + " is not supported (2 or 3)");
  impl_->alignment = alignment;
  impl_->version = version;
}

GGUFWriter::~GGUFWriter() {
  // Not closed: an error or an interrupt. Leave no half-written file behind.
  if (impl_ && impl_->fd >= 0) {
    ::close(impl_->fd);
    ::unlink(impl_->tmp_path.c_str());
    forget_partial_file(impl_->partial_slot);
  }
}

void GGUFWriter::set_u8(std::string_view k, uint8_t v) { impl_->set_scalar(k, GGUFType::UINT8, v); }
void GGUFWriter::set_i8(std::string_view k, int8_t v) { impl_->set_scalar(k, GGUFType::INT8, v); }
void GGUFWriter::set_u16(std::string_view k, uint16_t v) { impl_->set_scalar(k, GGUFType::UINT16, v); }
void GGUFWriter::set_i16(std::string_view k, int16_t v) { impl_->set_scalar(k, GGUFType::INT16, v); }
void GGUFWriter::set_u32(std::string_view k, uint32_t v) { impl_->set_scalar(k, GGUFType::UINT32, v); }
void GGUFWriter::set_i32(std::string_view k, int32_t v) { impl_->set_scalar(k, GGUFType::INT32, v); }
void GGUFWriter::set_u64(std::string_view k, uint64_t v) { impl_->set_scalar(k, GGUFType::UINT64, v); }
void GGUFWriter::set_i64(std::string_view k, int64_t v) { impl_->set_scalar(k, GGUFType::INT64, v); }
void GGUFWriter::set_f32(std::string_view k, float v) { impl_->set_scalar(k, GGUFType::FLOAT32, v); }
void GGUFWriter::set_f64(std::string_view k, double v) { impl_->set_scalar(k, GGUFType::FLOAT64, v); }
void GGUFWriter::set_bool(std::string_view k, bool v) { impl_->set_scalar<uint8_t>(k, GGUFType::BOOL, v ? 1 : 0); }

void GGUFWriter::set_str(std::string_view k, std::string_view v) {
  Bytes b;
  b.put_str(v);
  impl_->set(k, GGUFType::STRING, std::move(b));
}

void GGUFWriter::set_str_array(std::string_view k, const std::vector<std::string>& v) {
  Bytes b;
  b.put<uint32_t>(uint32_t(GGUFType::STRING));
  b.put<uint64_t>(v.size());
  for (const std::string& s : v) b.put_str(s);
  impl_->set(k, GGUFType::ARRAY, std::move(b));
}

void GGUFWriter::set_i32_array(std::string_view k, const std::vector<int32_t>& v) {
  Bytes b;
  b.put<uint32_t>(uint32_t(GGUFType::INT32));
  b.put<uint64_t>(v.size());
  b.put_raw(v.data(), v.size() * sizeof(int32_t));
  impl_->set(k, GGUFType::ARRAY, std::move(b));
}

void GGUFWriter::set_f32_array(std::string_view k, const std::vector<float>& v) {
  Bytes b;
  b.put<uint32_t>(uint32_t(GGUFType::FLOAT32));
  b.put<uint64_t>(v.size());
  b.put_raw(v.data(), v.size() * sizeof(float));
  impl_->set(k, GGUFType::ARRAY, std::move(b));
}

void GGUFWriter::set_value(std::string_view k, const GGUFValue& v) {
  Bytes b;
  put_payload(b, v);
  impl_->set(k, v.type, std::move(b));
}

void GGUFWriter::remove(std::string_view key) {
  auto& kvs = impl_->kvs;
  for (auto it = kvs.begin(); it != kvs.end(); ++it)
    if (it->key == key) {
      kvs.erase(it);
      return;
    }
}

bool GGUFWriter::has(std::string_view key) const { return impl_->find(key) != nullptr; }

void GGUFWriter::add_tensor(std::string_view name, DType t, std::initializer_list<int64_t> ne) {
  add_tensor(name, t, int(ne.size()), ne.begin());
}

void GGUFWriter::add_tensor(std::string_view name, DType t, int n_dims, const int64_t* ne) {
  Impl& m = *impl_;
  const std::string n(name);
  if (m.fd >= 0) throw Error("GGUF writer: tensor '" + n + "' added after open()");
  if (n_dims < 0 || n_dims > 4) throw Error("GGUF writer: tensor '" + n + "' has " + std::to_string(n_dims) + " dims");
  for (const Impl::TensorInfo& ti : m.tensors)
    if (ti.name == n) throw Error("GGUF writer: duplicate tensor '" + n + "'");
  Impl::TensorInfo ti{n, n_dims, {1, 1, 1, 1}, t, 0, 0};
  int64_t rows = 1;
  for (int d = 0; d < n_dims; ++d) {
    if (ne[d] < 0) throw Error("GGUF writer: tensor '" + n + "' has a negative dimension");
    ti.ne[d] = ne[d];
    if (d > 0) rows *= ne[d];
  }
  if (ti.ne[0] % traits(t).block_size != 0)
    throw Error("GGUF writer: tensor '" + n + "': row of " + std::to_string(ti.ne[0]) +
                " elements is not a multiple of " + dtype_name(t) + "'s block size " +
                std::to_string(traits(t).block_size));
  ti.nbytes = row_bytes(t, ti.ne[0]) * uint64_t(rows);
  ti.offset = align_up(m.data_size, m.alignment);
  m.data_size = ti.offset + ti.nbytes;
  m.tensors.push_back(std::move(ti));
}

size_t GGUFWriter::n_tensors() const { return impl_->tensors.size(); }

void GGUFWriter::open(const std::string& path) {
  Impl& m = *impl_;
  if (m.fd >= 0) throw Error("GGUF writer: open() called twice");
  // general.alignment must agree with the layout; it is written only when
  // not the default, unless the caller set it.
  if (Impl::KV* kv = m.find("general.alignment")) {
    uint32_t a = 0;
    if (kv->type != GGUFType::UINT32 || (std::memcpy(&a, kv->payload.data(), 4), a != m.alignment))
      throw Error("GGUF writer: general.alignment disagrees with the writer's alignment " +
                  std::to_string(m.alignment));
  } else if (m.alignment != kDefaultAlignment) {
    set_u32("general.alignment", uint32_t(m.alignment));
  }

  Bytes h;
  h.put_raw("GGUF", 4);
  h.put<uint32_t>(m.version);
  h.put<uint64_t>(m.tensors.size());
  h.put<uint64_t>(m.kvs.size());
  for (const Impl::KV& kv : m.kvs) {
    h.put_str(kv.key);
    h.put<uint32_t>(uint32_t(kv.type));
    h.put_raw(kv.payload.data(), kv.payload.size());
  }
  for (const Impl::TensorInfo& ti : m.tensors) {
    h.put_str(ti.name);
    h.put<uint32_t>(uint32_t(ti.n_dims));
    for (int d = 0; d < ti.n_dims; ++d) h.put<int64_t>(ti.ne[d]);
    h.put<uint32_t>(uint32_t(ti.dtype));
    h.put<uint64_t>(ti.offset);
  }
  h.b.resize(align_up(h.b.size(), m.alignment), 0);

  check_output_path(path);
  check_free_space(path, h.b.size() + m.data_size);
  m.path = path;
  m.tmp_path = path + ".part";
  m.partial_slot = track_partial_file(m.tmp_path);  // before it exists: no moment untracked
  m.fd = ::open(m.tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (m.fd < 0) {
    const int err = errno;
    forget_partial_file(std::exchange(m.partial_slot, -1));
    throw Error(m.tmp_path + ": cannot create: " + std::strerror(err));
  }
  m.write_all(h.b.data(), h.b.size());
  m.cur = 0;
  m.cur_done = 0;
  m.data_pos = 0;
  m.skip_finished_tensors();
}

void GGUFWriter::write_tensor_data(const void* data, size_t nbytes) {
  Impl& m = *impl_;
  if (m.fd < 0) throw Error("GGUF writer: write_tensor_data() before open()");
  const auto* p = static_cast<const uint8_t*>(data);
  while (nbytes > 0) {
    if (m.cur >= m.tensors.size())
      throw Error(m.path + ": " + std::to_string(nbytes) + " bytes of tensor data past the last tensor");
    const Impl::TensorInfo& ti = m.tensors[m.cur];
    const size_t k = size_t(std::min<uint64_t>(nbytes, ti.nbytes - m.cur_done));
    m.write_all(p, k);
    p += k;
    nbytes -= k;
    m.cur_done += k;
    m.data_pos += k;
    m.skip_finished_tensors();
  }
}

void GGUFWriter::close() {
  Impl& m = *impl_;
  if (m.fd < 0) throw Error("GGUF writer: close() before open()");
  m.skip_finished_tensors();
  if (m.cur < m.tensors.size()) {
    const Impl::TensorInfo& ti = m.tensors[m.cur];
    throw Error(m.path + ": tensor '" + ti.name + "' got " + std::to_string(m.cur_done) + " of its " +
                std::to_string(ti.nbytes) + " bytes");
  }
  const int fd = std::exchange(m.fd, -1);
  const bool ok = ::close(fd) == 0 && ::rename(m.tmp_path.c_str(), m.path.c_str()) == 0;
  const int err = errno;
  if (!ok) ::unlink(m.tmp_path.c_str());
  forget_partial_file(m.partial_slot);
  if (!ok) throw Error(m.path + ": cannot finish writing: " + std::strerror(err));
}

}  // namespace weir
