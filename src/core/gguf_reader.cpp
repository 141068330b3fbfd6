// GGUF v2/v3 reader: one pass over the header, metadata and tensor table,
// every count, length and offset checked against the buffer before it is
// used. Strings and array payloads stay in the buffer (string_views), so the
// 262,144-token vocabulary costs one vector, not 262,144 allocations.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>

#include "core/error.h"
#include "core/gguf.h"
#include "core/mapped_file.h"

namespace weir {

const char* gguf_type_name(GGUFType t) {
  switch (t) {
    case GGUFType::UINT8:
      return "uint8";
    case GGUFType::INT8:
      return "int8";
    case GGUFType::UINT16:
      return "uint16";
    case GGUFType::INT16:
      return "int16";
    case GGUFType::UINT32:
      return "uint32";
    case GGUFType::INT32:
      return "int32";
    case GGUFType::FLOAT32:
      return "float32";
    case GGUFType::BOOL:
      return "bool";
    case GGUFType::STRING:
      return "string";
    case GGUFType::ARRAY:
      return "array";
    case GGUFType::UINT64:
      return "uint64";
    case GGUFType::INT64:
      return "int64";
    case GGUFType::FLOAT64:
      return "float64";
  }
  return "unknown";
}

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr int kMaxArrayDepth = 8;        // arrays of arrays, deeper is an error
constexpr uint64_t kDefaultAlignment = 32;
// Smallest encodings, used to bound counts by the bytes left in the file
// before anything is allocated.
constexpr size_t kMinKV = 8 + 4 + 1;              // key length, type, uint8 value
constexpr size_t kMinTensorInfo = 8 + 4 + 4 + 8;  // name length, n_dims, type, offset
constexpr size_t kMinString = 8;                  // length
constexpr size_t kMinArray = 4 + 8;               // element type, count

bool is_known_type(uint32_t t) { return t <= uint32_t(GGUFType::FLOAT64); }


bool is_integer_type(GGUFType t) {
  switch (t) {
    case GGUFType::UINT8:
    case GGUFType::INT8:
    case GGUFType::UINT16:
    case GGUFType::INT16:
    case GGUFType::UINT32:
    case GGUFType::INT32:
    case GGUFType::UINT64:
    case GGUFType::INT64:
      return true;
    default:
      return false;
  }
}
bool is_signed_type(GGUFType t) {
  return t == GGUFType::INT8 || t == GGUFType::INT16 || t == GGUFType::INT32 ||
         t == GGUFType::INT64;
}
bool is_float_type(GGUFType t) { return t == GGUFType::FLOAT32 || t == GGUFType::FLOAT64; }

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// A key or tensor name as it may appear inside a one-line message: control
// and non-ASCII bytes escaped, long names cut.
std::string quoted(std::string_view s) {
  static const char* hex = "0123456789abcdef";
  constexpr size_t kMax = 96;
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < kMax; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out += char(c);
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (s.size() > kMax) out += "...";
  out += "'";
  return out;
}

std::string type_desc(const GGUFValue& v) {
  if (v.type != GGUFType::ARRAY) return gguf_type_name(v.type);
  return std::string("array of ") + gguf_type_name(v.elem_type);
}

// Element i of a packed scalar array, widened. Integers go through int64/uint64
// exactly; floats through double.
double elem_f64(GGUFType t, const uint8_t* p) {
  switch (t) {
    case GGUFType::UINT8:
      return load<uint8_t>(p);
    case GGUFType::INT8:
      return load<int8_t>(p);
    case GGUFType::UINT16:
      return load<uint16_t>(p);
    case GGUFType::INT16:
      return load<int16_t>(p);
    case GGUFType::UINT32:
      return load<uint32_t>(p);
    case GGUFType::INT32:
      return load<int32_t>(p);
    case GGUFType::FLOAT32:
      return load<float>(p);
    case GGUFType::BOOL:
      return load<uint8_t>(p) != 0;
    case GGUFType::UINT64:
      return double(load<uint64_t>(p));
    case GGUFType::INT64:
      return double(load<int64_t>(p));
    case GGUFType::FLOAT64:
      return load<double>(p);
    default:
      return 0.0;
  }
}

// Saturating double -> int64 (NaN -> 0): a cast of an out-of-range double is UB.
int64_t saturate_i64(double d) {
  if (std::isnan(d)) return 0;
  if (d >= 9223372036854775807.0) return std::numeric_limits<int64_t>::max();
  if (d <= -9223372036854775808.0) return std::numeric_limits<int64_t>::min();
  return int64_t(d);
}

int64_t elem_i64(GGUFType t, const uint8_t* p) {
  switch (t) {
    case GGUFType::UINT8:
      return load<uint8_t>(p);
    case GGUFType::INT8:
      return load<int8_t>(p);
    case GGUFType::UINT16:
      return load<uint16_t>(p);
    case GGUFType::INT16:
      return load<int16_t>(p);
    case GGUFType::UINT32:
      return load<uint32_t>(p);
    case GGUFType::INT32:
      return load<int32_t>(p);
    case GGUFType::BOOL:
      return load<uint8_t>(p) != 0;
    case GGUFType::UINT64: {
      const uint64_t u = load<uint64_t>(p);
      return u > uint64_t(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max()
                                                               : int64_t(u);
    }
    case GGUFType::INT64:
      return load<int64_t>(p);
    case GGUFType::FLOAT32:
      return saturate_i64(load<float>(p));
    case GGUFType::FLOAT64:
      return saturate_i64(load<double>(p));
    default:
      return 0;
  }
}

}  // namespace

size_t gguf_scalar_size(GGUFType t) {
  switch (t) {
    case GGUFType::UINT8:
    case GGUFType::INT8:
    case GGUFType::BOOL:
      return 1;
    case GGUFType::UINT16:
    case GGUFType::INT16:
      return 2;
    case GGUFType::UINT32:
    case GGUFType::INT32:
    case GGUFType::FLOAT32:
      return 4;
    case GGUFType::UINT64:
    case GGUFType::INT64:
    case GGUFType::FLOAT64:
      return 8;
    default:
      return 0;
  }
}

bool GGUFValue::is_integer() const { return is_integer_type(type); }

double GGUFValue::array_f64(uint64_t i) const {
  const size_t sz = gguf_scalar_size(elem_type);
  if (type != GGUFType::ARRAY || sz == 0 || raw == nullptr || i >= count) return 0.0;
  return elem_f64(elem_type, raw + i * sz);
}

int64_t GGUFValue::array_i64(uint64_t i) const {
  const size_t sz = gguf_scalar_size(elem_type);
  if (type != GGUFType::ARRAY || sz == 0 || raw == nullptr || i >= count) return 0;
  return elem_i64(elem_type, raw + i * sz);
}

// ---------------------------------------------------------------------------
// The parser

class GGUFParser {
 public:
  explicit GGUFParser(GGUFFile& f) : f_(f), p_(f.base_), n_(f.size_) {}

  void run() {
    read_header();
    read_kvs();
    read_alignment();
    read_tensor_infos();
    place_data();
  }

 private:
  GGUFFile& f_;
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
  uint64_t tensor_count_ = 0;
  uint64_t kv_count_ = 0;

  // What is being read, for messages; they are only built on failure, so a
  // successful parse allocates nothing for them.
  enum class Ctx { header, kv, tensor } ctx_ = Ctx::header;
  uint64_t ctx_index_ = 0;     // kv or tensor number
  std::string_view ctx_name_;  // its key or name, once read
  bool ctx_named_ = false;

  void enter(Ctx c, uint64_t index) {
    ctx_ = c;
    ctx_index_ = index;
    ctx_named_ = false;
  }
  void name_ctx(std::string_view name) {
    ctx_name_ = name;
    ctx_named_ = true;
  }
  // "value of key 'x'", "name of tensor #3", "ne[1] of tensor 'w'", "version"
  std::string describe(const char* what) const {
    std::string s = what;
    if (ctx_ == Ctx::header) return s;
    s += ctx_ == Ctx::kv ? (ctx_named_ ? " of key " : " of kv #")
                         : (ctx_named_ ? " of tensor " : " of tensor #");
    s += ctx_named_ ? quoted(ctx_name_) : std::to_string(ctx_index_);
    return s;
  }
  // "key 'x'" / "tensor 'w'" for messages about the current item
  std::string item() const {
    std::string s = ctx_ == Ctx::kv ? "key " : "tensor ";
    if (ctx_named_) {
      s += quoted(ctx_name_);
    } else {
      s += '#';
      s += std::to_string(ctx_index_);
    }
    return s;
  }

  [[noreturn]] void fail(const std::string& msg) const { throw Error(f_.name_ + ": " + msg); }

  size_t remaining() const { return n_ - pos_; }

  void need(size_t k, const char* what, const char* suffix = "") const {
    if (k > remaining())
      fail("truncated header: " + describe(what) + suffix + " at offset " + std::to_string(pos_) +
           " needs " + std::to_string(k) + " bytes, only " + std::to_string(remaining()) +
           " left (file size " + std::to_string(n_) + ")");
  }

  template <class T>
  T rd(const char* what, const char* suffix = "") {
    need(sizeof(T), what, suffix);
    const T v = load<T>(p_ + pos_);
    pos_ += sizeof(T);
    return v;
  }

  std::string_view rd_str(const char* what) {
    const size_t at = pos_;
    const uint64_t len = rd<uint64_t>(what, " length");
    if (len > remaining())
      fail(describe(what) + ": string length " + std::to_string(len) + " at offset " +
           std::to_string(at) + " runs past end of file (" + std::to_string(remaining()) +
           " bytes left, file size " + std::to_string(n_) + "; truncated or corrupt)");
    std::string_view s(reinterpret_cast<const char*>(p_ + pos_), size_t(len));
    pos_ += size_t(len);
    return s;
  }

  // -- header ---------------------------------------------------------------
  void read_header() {
    if (n_ < 4)
      fail("truncated header: file is " + std::to_string(n_) +
           " bytes, too short for the GGUF magic at offset 0");
    const uint32_t magic = rd<uint32_t>("magic");
    if (magic != kMagic) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "0x%08x", magic);
      fail(std::string("bad magic ") + buf + " at offset 0 (expected \"GGUF\"; not a GGUF file?)");
    }
    const uint32_t version = rd<uint32_t>("version");
    if (version != 2 && version != 3) {
      std::string msg = "unsupported GGUF version " + std::to_string(version) +
                        " at offset 4 (weir reads versions 2 and 3)";
      const uint32_t swapped = __builtin_bswap32(version);
      if ((version & 0xffff) == 0 && (swapped == 2 || swapped == 3))
        msg += "; looks like a big-endian GGUF file, only little-endian is supported";
      fail(msg);
    }
    f_.version_ = version;
    tensor_count_ = rd<uint64_t>("tensor_count");
    kv_count_ = rd<uint64_t>("kv_count");
    if (kv_count_ > remaining() / kMinKV)
      fail("kv_count " + std::to_string(kv_count_) + " at offset 16 is more than the remaining " +
           std::to_string(remaining()) +
           " bytes can hold (count past end of file; truncated or corrupt)");
    if (tensor_count_ > remaining() / kMinTensorInfo)
      fail("tensor_count " + std::to_string(tensor_count_) +
           " at offset 8 is more than the remaining " + std::to_string(remaining()) +
           " bytes can hold (count past end of file; truncated or corrupt)");
  }

  // -- metadata -------------------------------------------------------------
  void read_kvs() {
    f_.kvs_.reserve(size_t(kv_count_));
    f_.kv_index_.reserve(size_t(kv_count_));
    for (uint64_t k = 0; k < kv_count_; ++k) {
      const size_t at = pos_;
      enter(Ctx::kv, k);
      const std::string_view key = rd_str("key");
      name_ctx(key);
      const size_t type_at = pos_;
      const uint32_t type = rd<uint32_t>("value type");
      if (!is_known_type(type))
        fail("key " + quoted(key) + ": unknown value type " + std::to_string(type) + " at offset " +
             std::to_string(type_at));
      GGUFValue v;
      v.type = GGUFType(type);
      read_value(v, 0);
      if (!f_.kv_index_.emplace(key, f_.kvs_.size()).second)
        fail("duplicate key " + quoted(key) + " at offset " + std::to_string(at));
      f_.kvs_.emplace_back(key, std::move(v));
    }
  }

  // Reads the payload of a value whose type is already set in v.
  void read_value(GGUFValue& v, int depth) {
    const char* what = "value";
    switch (v.type) {
      case GGUFType::UINT8:
        v.num.u = rd<uint8_t>(what);
        break;
      case GGUFType::INT8:
        v.num.i = rd<int8_t>(what);
        break;
      case GGUFType::UINT16:
        v.num.u = rd<uint16_t>(what);
        break;
      case GGUFType::INT16:
        v.num.i = rd<int16_t>(what);
        break;
      case GGUFType::UINT32:
        v.num.u = rd<uint32_t>(what);
        break;
      case GGUFType::INT32:
        v.num.i = rd<int32_t>(what);
        break;
      case GGUFType::FLOAT32:
        v.num.f = rd<float>(what);
        break;
      case GGUFType::BOOL:
        v.num.u = rd<uint8_t>(what);
        break;
      case GGUFType::UINT64:
        v.num.u = rd<uint64_t>(what);
        break;
      case GGUFType::INT64:
        v.num.i = rd<int64_t>(what);
        break;
      case GGUFType::FLOAT64:
        v.num.f = rd<double>(what);
        break;
      case GGUFType::STRING:
        v.str = rd_str(what);
        break;
      case GGUFType::ARRAY:
        read_array(v, depth + 1);
        break;
    }
  }

  void read_array(GGUFValue& v, int depth) {
    const size_t at = pos_;
    if (depth > kMaxArrayDepth)
      fail(item() + ": arrays nested deeper than " + std::to_string(kMaxArrayDepth) +
           " levels at offset " + std::to_string(at));
    const uint32_t et = rd<uint32_t>("array element type");
    if (!is_known_type(et))
      fail(item() + ": unknown array element value type " + std::to_string(et) + " at offset " +
           std::to_string(at));
    v.elem_type = GGUFType(et);
    const size_t count_at = pos_;
    v.count = rd<uint64_t>("array count");
    v.raw = p_ + pos_;
    const size_t sz = gguf_scalar_size(v.elem_type);
    const size_t min_elem = sz ? sz : v.elem_type == GGUFType::STRING ? kMinString : kMinArray;
    if (v.count > remaining() / min_elem)
      fail(item() + ": array count " + std::to_string(v.count) + " at offset " +
           std::to_string(count_at) + " runs past end of file (" + std::to_string(remaining()) +
           " bytes left for " + gguf_type_name(v.elem_type) + " elements; truncated or corrupt)");
    if (sz) {
      pos_ += size_t(v.count) * sz;
    } else if (v.elem_type == GGUFType::STRING) {
      v.strings.reserve(size_t(v.count));
      for (uint64_t i = 0; i < v.count; ++i) v.strings.push_back(rd_str("element"));
    } else {
      // Grown as elements are read, so memory follows the bytes consumed even
      // when every level of a deep nest claims a large count.
      v.items.reserve(std::min<size_t>(size_t(v.count), 1024));
      for (uint64_t i = 0; i < v.count; ++i) {
        GGUFValue& item = v.items.emplace_back();
        item.type = GGUFType::ARRAY;
        read_array(item, depth + 1);
      }
    }
  }

  void read_alignment() {
    const auto it = f_.kv_index_.find("general.alignment");
    if (it == f_.kv_index_.end()) {
      f_.alignment_ = kDefaultAlignment;
      return;
    }
    const GGUFValue& v = f_.kvs_[it->second].second;
    if (v.type != GGUFType::UINT32)
      fail("bad alignment: key 'general.alignment' has type " + type_desc(v) + ", expected uint32");
    const uint64_t a = v.num.u;
    if (a == 0 || (a & (a - 1)) != 0)
      fail("bad alignment: key 'general.alignment' is " + std::to_string(a) +
           ", expected a nonzero power of two");
    f_.alignment_ = a;
  }

  // -- tensor table ---------------------------------------------------------
  void read_tensor_infos() {
    if (tensor_count_ > remaining() / kMinTensorInfo)
      fail("tensor_count " + std::to_string(tensor_count_) + " at offset 8 is more than the " +
           std::to_string(remaining()) + " bytes left after the metadata can hold (offset " +
           std::to_string(pos_) + ", count past end of file; truncated or corrupt)");
    f_.tensors_.reserve(size_t(tensor_count_));
    f_.tensor_index_.reserve(size_t(tensor_count_));
    for (uint64_t k = 0; k < tensor_count_; ++k) {
      const size_t at = pos_;
      enter(Ctx::tensor, k);
      GGUFTensorInfo t;
      t.name = rd_str("name");
      name_ctx(t.name);
      const auto tn = [&] { return item(); };
      const auto where = [&] { return " (tensor info at offset " + std::to_string(at) + ")"; };
      const size_t ndims_at = pos_;
      const uint32_t n_dims = rd<uint32_t>("n_dims");
      if (n_dims > 4)
        fail(tn() + ": n_dims " + std::to_string(n_dims) + " > 4 at offset " +
             std::to_string(ndims_at));
      t.n_dims = int(n_dims);
      for (uint32_t d = 0; d < n_dims; ++d) {
        const size_t ne_at = pos_;
        static const char* const kNe[4] = {"ne[0]", "ne[1]", "ne[2]", "ne[3]"};
        const uint64_t ne = rd<uint64_t>(kNe[d]);
        if (ne > uint64_t(std::numeric_limits<int64_t>::max()))
          fail(tn() + ": negative dimension ne[" + std::to_string(d) +
               "] = " + std::to_string(int64_t(ne)) + " at offset " + std::to_string(ne_at));
        t.ne[d] = int64_t(ne);
      }
      const size_t type_at = pos_;
      const uint32_t raw_type = rd<uint32_t>("dtype");
      const DTypeTraits* tr = dtype_traits(raw_type);
      if (!tr)
        fail(tn() + ": unknown or unsupported dtype id " + std::to_string(raw_type) +
             " at offset " + std::to_string(type_at));
      t.dtype = DType(raw_type);
      const size_t off_at = pos_;
      t.offset = rd<uint64_t>("data offset");

      // Element count, multiplied in the order n_elements() does, so that
      // every later use of it is free of int64 overflow too.
      int64_t n = t.ne[0];
      for (int d = 1; d < 4; ++d)
        if (__builtin_mul_overflow(n, t.ne[d], &n))
          fail(tn() + ": element count of shape " + shape_str(t) + " overflows int64" + where());
      if (t.ne[0] % tr->block_size != 0)
        fail(tn() + ": ne[0] = " + std::to_string(t.ne[0]) + " is not a multiple of the " +
             tr->name + " block size " + std::to_string(tr->block_size) + where());
      uint64_t nbytes = 0;
      if (__builtin_mul_overflow(uint64_t(n / tr->block_size), uint64_t(tr->type_size), &nbytes))
        fail(tn() + ": byte size of shape " + shape_str(t) + " overflows" + where());
      t.nbytes = size_t(nbytes);
      if (t.offset % f_.alignment_ != 0)
        fail(tn() + ": data offset " + std::to_string(t.offset) + " (field at offset " +
             std::to_string(off_at) + ") is not aligned to " + std::to_string(f_.alignment_) +
             " (misaligned)");
      if (!f_.tensor_index_.emplace(t.name, f_.tensors_.size()).second)
        fail("duplicate tensor name " + quoted(t.name) + " at offset " + std::to_string(at));
      f_.tensors_.push_back(t);
    }
  }

  static std::string shape_str(const GGUFTensorInfo& t) {
    std::string s = "[";
    for (int d = 0; d < t.n_dims; ++d) {
      if (d) s += ", ";
      s += std::to_string(t.ne[d]);
    }
    return s + "]";
  }

  // -- data section ---------------------------------------------------------
  void place_data() {
    enter(Ctx::header, 0);
    const uint64_t a = f_.alignment_;
    const uint64_t data_offset = (uint64_t(pos_) + a - 1) / a * a;
    f_.data_offset_ = data_offset;
    if (f_.tensors_.empty()) return;
    if (data_offset > n_)
      fail("truncated data: data section at offset " + std::to_string(data_offset) +
           " starts past end of file (size " + std::to_string(n_) + ")");
    const uint64_t avail = n_ - data_offset;
    for (GGUFTensorInfo& t : f_.tensors_) {
      if (t.offset > avail || t.nbytes > avail - t.offset)
        fail("tensor " + quoted(t.name) + ": data at offset " + std::to_string(t.offset) +
             " of the data section (which starts at offset " + std::to_string(data_offset) +
             ") + " + std::to_string(t.nbytes) + " bytes runs past end of file (size " +
             std::to_string(n_) + "; truncated data)");
      t.data = p_ + data_offset + t.offset;
    }
    // Overlaps: sort by offset and compare neighbours (empty tensors hold no bytes).
    std::vector<uint32_t> order;
    order.reserve(f_.tensors_.size());
    for (size_t i = 0; i < f_.tensors_.size(); ++i)
      if (f_.tensors_[i].nbytes) order.push_back(uint32_t(i));
    std::sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
      const auto& a1 = f_.tensors_[x];
      const auto& b1 = f_.tensors_[y];
      return a1.offset != b1.offset ? a1.offset < b1.offset : x < y;
    });
    for (size_t k = 1; k < order.size(); ++k) {
      const GGUFTensorInfo& prev = f_.tensors_[order[k - 1]];
      const GGUFTensorInfo& cur = f_.tensors_[order[k]];
      if (cur.offset < prev.offset + prev.nbytes)
        fail("tensor " + quoted(cur.name) + ": data at offset " +
             std::to_string(data_offset + cur.offset) + " overlaps tensor " + quoted(prev.name) +
             " (offset " + std::to_string(data_offset + prev.offset) + ", " +
             std::to_string(prev.nbytes) + " bytes)");
    }
  }
};

// ---------------------------------------------------------------------------
// GGUFFile

GGUFFile GGUFFile::parse(const uint8_t* data, size_t size, std::string name) {
  GGUFFile f;
  f.name_ = std::move(name);
  f.base_ = data;
  f.size_ = size;
  try {
    GGUFParser(f).run();
  } catch (const std::bad_alloc&) {
    throw Error(f.name_ + ": out of memory while parsing the GGUF header (corrupt counts?)");
  } catch (const std::length_error&) {
    throw Error(f.name_ + ": out of memory while parsing the GGUF header (corrupt counts?)");
  }
  return f;
}

GGUFFile GGUFFile::open(const std::string& path) {
  auto map = std::make_shared<MappedFile>(path);
  GGUFFile f = parse(map->data(), map->size(), path);
  f.map_ = std::move(map);
  return f;
}

const GGUFValue* GGUFFile::find(std::string_view key) const {
  const auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].second;
}

const GGUFTensorInfo* GGUFFile::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

[[noreturn]] void missing_key(const std::string& file, std::string_view key) {
  throw Error(file + ": missing key " + quoted(key));
}
[[noreturn]] void wrong_type(const std::string& file, std::string_view key, const GGUFValue& v,
                             const char* expected) {
  throw Error(file + ": key " + quoted(key) + " has type " + type_desc(v) + ", expected " +
              expected);
}

uint64_t as_uint(const std::string& file, std::string_view key, const GGUFValue& v) {
  if (!is_integer_type(v.type)) wrong_type(file, key, v, "an unsigned integer");
  if (is_signed_type(v.type) && v.num.i < 0)
    throw Error(file + ": key " + quoted(key) + " is negative (" + std::to_string(v.num.i) +
                "), expected an unsigned integer");
  return v.num.u;
}

double as_float(const std::string& file, std::string_view key, const GGUFValue& v) {
  if (is_float_type(v.type)) return v.num.f;
  if (is_signed_type(v.type)) return double(v.num.i);
  if (is_integer_type(v.type)) return double(v.num.u);
  wrong_type(file, key, v, "a number");
}

bool as_bool(const std::string& file, std::string_view key, const GGUFValue& v) {
  if (v.type != GGUFType::BOOL) wrong_type(file, key, v, "bool");
  return v.num.u != 0;
}

std::string_view as_str(const std::string& file, std::string_view key, const GGUFValue& v) {
  if (v.type != GGUFType::STRING) wrong_type(file, key, v, "string");
  return v.str;
}

}  // namespace

uint64_t GGUFFile::get_uint(std::string_view key) const {
  const GGUFValue* v = find(key);
  if (!v) missing_key(name_, key);
  return as_uint(name_, key, *v);
}

uint64_t GGUFFile::get_uint_or(std::string_view key, uint64_t def) const {
  const GGUFValue* v = find(key);
  return v ? as_uint(name_, key, *v) : def;
}

double GGUFFile::get_float(std::string_view key) const {
  const GGUFValue* v = find(key);
  if (!v) missing_key(name_, key);
  return as_float(name_, key, *v);
}

double GGUFFile::get_float_or(std::string_view key, double def) const {
  const GGUFValue* v = find(key);
  return v ? as_float(name_, key, *v) : def;
}

bool GGUFFile::get_bool_or(std::string_view key, bool def) const {
  const GGUFValue* v = find(key);
  return v ? as_bool(name_, key, *v) : def;
}

std::string_view GGUFFile::get_str(std::string_view key) const {
  const GGUFValue* v = find(key);
  if (!v) missing_key(name_, key);
  return as_str(name_, key, *v);
}

std::string_view GGUFFile::get_str_or(std::string_view key, std::string_view def) const {
  const GGUFValue* v = find(key);
  return v ? as_str(name_, key, *v) : def;
}

const GGUFValue& GGUFFile::get_array(std::string_view key) const {
  const GGUFValue* v = find(key);
  if (!v) missing_key(name_, key);
  if (v->type != GGUFType::ARRAY) wrong_type(name_, key, *v, "an array");
  return *v;
}

const std::vector<std::string_view>& GGUFFile::get_str_array(std::string_view key) const {
  const GGUFValue& v = get_array(key);
  if (v.elem_type != GGUFType::STRING) wrong_type(name_, key, v, "array of string");
  return v.strings;
}

std::vector<float> GGUFFile::get_f32_array(std::string_view key) const {
  const GGUFValue& v = get_array(key);
  if (!is_integer_type(v.elem_type) && !is_float_type(v.elem_type))
    wrong_type(name_, key, v, "array of numbers");
  std::vector<float> out(size_t(v.count));
  if (v.elem_type == GGUFType::FLOAT32) {
    if (v.count) std::memcpy(out.data(), v.raw, size_t(v.count) * sizeof(float));
  } else {
    for (uint64_t i = 0; i < v.count; ++i) out[i] = float(v.array_f64(i));
  }
  return out;
}

std::vector<int32_t> GGUFFile::get_i32_array(std::string_view key) const {
  const GGUFValue& v = get_array(key);
  if (!is_integer_type(v.elem_type)) wrong_type(name_, key, v, "array of integers");
  std::vector<int32_t> out(size_t(v.count));
  if (v.elem_type == GGUFType::INT32) {
    if (v.count) std::memcpy(out.data(), v.raw, size_t(v.count) * sizeof(int32_t));
    return out;
  }
  const size_t sz = gguf_scalar_size(v.elem_type);
  for (uint64_t i = 0; i < v.count; ++i) {
    const uint8_t* p = v.raw + i * sz;
    bool fits;
    int64_t x;
    if (v.elem_type == GGUFType::UINT64) {
      const uint64_t u = load<uint64_t>(p);
      fits = u <= uint64_t(std::numeric_limits<int32_t>::max());
      x = int64_t(u & 0x7fffffffffffffffull);
    } else {
      x = elem_i64(v.elem_type, p);
      fits = x >= std::numeric_limits<int32_t>::min() && x <= std::numeric_limits<int32_t>::max();
    }
    if (!fits)
      throw Error(name_ + ": key " + quoted(key) + " element " + std::to_string(i) + " (" +
                  (v.elem_type == GGUFType::UINT64 ? std::to_string(load<uint64_t>(p))
                                                   : std::to_string(x)) +
                  ") does not fit int32");
    out[i] = int32_t(x);
  }
  return out;
}

}  // namespace weir
