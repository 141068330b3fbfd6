// weir inspect: what a GGUF file holds — header, metadata, tensors, a
// histogram by dtype, parameter count and bits per weight — as tables or, with
// --json, as one JSON document. Reads only the header (GGUFFile), so it works
// on any file the reader accepts, vocab-only files included.
#include <algorithm>
#include <charconv>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/gguf.h"
#include "model/model.h"
#include "model/model_desc.h"
#include "text/tokenizer.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/common.h"

namespace weir::tools {
namespace {

constexpr uint64_t kTextItems = 5;   // array elements shown in the tables
constexpr uint64_t kJsonItems = 8;   // array elements shown in the JSON document
constexpr size_t kTextStrMax = 96;   // bytes of a string value shown in the tables

// -- number and size formatting ----------------------------------------------

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

// Shortest text that reads back as the same float / double.
std::string shortest(double x, bool is_f32) {
  char buf[64];
  const auto r = is_f32 ? std::to_chars(buf, buf + sizeof buf, float(x)) : std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

std::string human_count(uint64_t n) {
  if (n < 1000) return std::to_string(n);
  if (n < 1000000) return fmt("%.2f K", n / 1e3);
  if (n < 1000000000) return fmt("%.2f M", n / 1e6);
  return fmt("%.2f B", n / 1e9);
}

std::string human_bytes(uint64_t n) {
  if (n < 1024) return std::to_string(n) + " B";
  if (n < (1u << 20)) return fmt("%.2f KiB", n / 1024.0);
  if (n < (1u << 30)) return fmt("%.2f MiB", n / 1048576.0);
  return fmt("%.2f GiB", n / 1073741824.0);
}

// -- strings -----------------------------------------------------------------

// Length of the valid UTF-8 sequence at s[i], or 0 when the byte there does
// not start one.
size_t utf8_len(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n;
  uint32_t cp;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) n = 2, cp = c & 0x1F;
  else if ((c & 0xF0) == 0xE0) n = 3, cp = c & 0x0F;
  else if ((c & 0xF8) == 0xF0) n = 4, cp = c & 0x07;
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto d = static_cast<unsigned char>(s[i + k]);
    if ((d & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (d & 0x3F);
  }
  const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

// A JSON string literal. Control characters are escaped; bytes that are not
// valid UTF-8 become U+FFFD, so the document is always valid UTF-8.
void json_str(std::string& out, std::string_view s) {
  static const char* hex = "0123456789abcdef";
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const size_t n = utf8_len(s, i);
      if (n == 0) {
        out += "\\ufffd";
        ++i;
      } else {
        out.append(s.data() + i, n);
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += char(c);
        }
    }
    ++i;
  }
  out += '"';
}

// A string for the tables: quoted, control characters and invalid UTF-8
// escaped, cut after kTextStrMax bytes (at a character boundary) unless all.
std::string text_str(std::string_view s, bool all, bool quote = true) {
  static const char* hex = "0123456789abcdef";
  std::string out = quote ? "\"" : "";
  size_t i = 0;
  for (; i < s.size(); ) {
    if (!all && i >= kTextStrMax) break;
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const size_t n = utf8_len(s, i);
      if (n) {
        out.append(s.data() + i, n);
        i += n;
        continue;
      }
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c >= 0x7f) {
          out += "\\x";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += char(c);
        }
    }
    ++i;
  }
  if (quote) out += '"';
  if (i < s.size()) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

// -- metadata values -----------------------------------------------------------

bool is_float(GGUFType t) { return t == GGUFType::FLOAT32 || t == GGUFType::FLOAT64; }
bool is_signed(GGUFType t) {
  return t == GGUFType::INT8 || t == GGUFType::INT16 || t == GGUFType::INT32 || t == GGUFType::INT64;
}

// Element i of a packed scalar array as text (JSON-compatible numbers).
std::string scalar_elem(const GGUFValue& v, uint64_t i, bool json) {
  const GGUFType t = v.elem_type;
  if (t == GGUFType::BOOL) return v.array_i64(i) ? "true" : "false";
  if (is_float(t)) {
    const double x = v.array_f64(i);
    if (json && !std::isfinite(x)) return "null";
    return shortest(x, t == GGUFType::FLOAT32);
  }
  if (t == GGUFType::UINT64) {
    uint64_t u;
    std::memcpy(&u, v.raw + i * 8, 8);
    return std::to_string(u);
  }
  return std::to_string(v.array_i64(i));
}

std::string scalar_value(const GGUFValue& v, bool json) {
  if (v.type == GGUFType::BOOL) return v.num.u ? "true" : "false";
  if (is_float(v.type)) {
    if (json && !std::isfinite(v.num.f)) return "null";
    return shortest(v.num.f, v.type == GGUFType::FLOAT32);
  }
  if (is_signed(v.type)) return std::to_string(v.num.i);
  return std::to_string(v.num.u);
}

// "[N x type] a, b, c, ..." (nested arrays in brackets).
std::string text_array(const GGUFValue& v, bool all) {
  std::string out = "[";
  out += std::to_string(v.count);
  out += " x ";
  out += gguf_type_name(v.elem_type);
  out += "]";
  const uint64_t n = all ? v.count : std::min(v.count, kTextItems);
  for (uint64_t i = 0; i < n; ++i) {
    out += i ? ", " : " ";
    if (v.elem_type == GGUFType::STRING) out += text_str(v.strings[i], all);
    else if (v.elem_type == GGUFType::ARRAY) {
      out += '(';
      out += text_array(v.items[i], all);
      out += ')';
    }
    else out += scalar_elem(v, i, false);
  }
  if (n < v.count) out += ", ...";
  return out;
}

std::string text_value(const GGUFValue& v, bool all) {
  if (v.type == GGUFType::STRING) return text_str(v.str, all);
  if (v.type == GGUFType::ARRAY) return text_array(v, all);
  return scalar_value(v, false);
}

// {"type": "array", "elem_type": ..., "count": N, "value": [...], "elided": true}
void json_array(std::string& out, const GGUFValue& v, bool all) {
  out += "{\"type\": \"array\", \"elem_type\": ";
  json_str(out, gguf_type_name(v.elem_type));
  out += ", \"count\": " + std::to_string(v.count) + ", \"value\": [";
  const uint64_t n = all ? v.count : std::min(v.count, kJsonItems);
  for (uint64_t i = 0; i < n; ++i) {
    if (i) out += ", ";
    if (v.elem_type == GGUFType::STRING) json_str(out, v.strings[i]);
    else if (v.elem_type == GGUFType::ARRAY) json_array(out, v.items[i], all);
    else out += scalar_elem(v, i, true);
  }
  out += "]";
  if (n < v.count) out += ", \"elided\": true";
  out += "}";
}

void json_value(std::string& out, const GGUFValue& v, bool all) {
  if (v.type == GGUFType::ARRAY) return json_array(out, v, all);
  out += "{\"type\": ";
  json_str(out, gguf_type_name(v.type));
  out += ", \"value\": ";
  if (v.type == GGUFType::STRING) json_str(out, v.str);
  else out += scalar_value(v, true);
  out += "}";
}

// -- tensors -------------------------------------------------------------------

std::string shape_text(const GGUFTensorInfo& t) {
  std::string s;
  for (int d = 0; d < t.n_dims; ++d) s += (d ? " x " : "") + std::to_string(t.ne[d]);
  return s.empty() ? "scalar" : s;
}

struct DTypeStats {
  uint64_t count = 0, params = 0, bytes = 0;
};

struct Summary {
  std::vector<std::pair<DType, DTypeStats>> by_dtype;  // by dtype id
  uint64_t params = 0, bytes = 0;
  // A mixture of experts: the parameters and bytes one token uses.
  ExpertShare experts;
  uint64_t active_params = 0, active_bytes = 0;
  double bpw() const { return params ? 8.0 * double(bytes) / double(params) : 0.0; }
};

Summary summarize(const GGUFFile& f) {
  std::map<uint32_t, DTypeStats> m;
  Summary s;
  s.experts = expert_share(f);
  for (const GGUFTensorInfo& t : f.tensors()) {
    DTypeStats& d = m[uint32_t(t.dtype)];
    d.count += 1;
    d.params += uint64_t(t.n_elements());
    d.bytes += t.nbytes;
    s.params += uint64_t(t.n_elements());
    s.bytes += t.nbytes;
    const bool expert = s.experts.is_expert(t);
    s.active_params += expert ? s.experts.used(uint64_t(t.n_elements())) : uint64_t(t.n_elements());
    s.active_bytes += expert ? s.experts.used(t.nbytes) : t.nbytes;
  }
  for (const auto& [id, st] : m) s.by_dtype.emplace_back(DType(id), st);
  return s;
}

std::string bpw_text(uint64_t bytes, uint64_t params) {
  return params ? fmt("%.2f", 8.0 * double(bytes) / double(params)) : "-";
}

// -- output --------------------------------------------------------------------

void append_row(std::string& out, const std::vector<std::string>& cells, const std::vector<size_t>& widths,
                const std::vector<bool>& right) {
  out += " ";
  for (size_t c = 0; c < cells.size(); ++c) {
    const size_t w = widths[c], n = cells[c].size();
    out += ' ';
    if (c + 1 == cells.size() && !right[c]) {  // last column: no padding
      out += cells[c];
      break;
    }
    if (right[c] && n < w) out.append(w - n, ' ');
    out += cells[c];
    if (!right[c] && n < w) out.append(w - n, ' ');
  }
  out += '\n';
}

void append_table(std::string& out, const std::vector<std::vector<std::string>>& rows, const std::vector<bool>& right,
                  size_t max_width = 60) {
  if (rows.empty()) return;
  std::vector<size_t> widths(rows[0].size(), 0);
  for (const auto& r : rows)
    for (size_t c = 0; c < r.size(); ++c) widths[c] = std::max(widths[c], std::min(r[c].size(), max_width));
  for (const auto& r : rows) append_row(out, r, widths, right);
}

// What of the file weir can use: its architecture, its tokenizer and its
// tensor types, each with the list of what weir takes when it cannot.
struct Support {
  std::string arch;  // "" when the file names none
  bool arch_ok = false;
  std::vector<std::string> known_archs;
  bool has_tokenizer = false, tokenizer_ok = false;
  std::string tokenizer;      // "llama (SentencePiece), pre-tokenizer \"default\", 262144 tokens"
  std::string tokenizer_why;  // why it cannot be read
  std::vector<std::string> types, bad_types, known_types;
};

Support check_support(const GGUFFile& f) {
  Support s;
  s.arch = std::string(f.get_str_or("general.architecture", ""));
  for (const auto& [name, make] : architectures()) s.known_archs.push_back(name);
  s.arch_ok = !s.arch.empty() && architectures().count(s.arch);
  const std::string model(f.get_str_or("tokenizer.ggml.model", ""));
  s.has_tokenizer = !model.empty();
  if (s.has_tokenizer) {
    const std::string kind = model == "llama" ? "SentencePiece" : model == "gpt2" ? "BPE" : model == "bert" ? "WordPiece" : "";
    const GGUFValue* tokens = f.find("tokenizer.ggml.tokens");
    s.tokenizer = model + (kind.empty() ? "" : " (" + kind + ")");
    const std::string pre(f.get_str_or("tokenizer.ggml.pre", ""));
    if (!pre.empty()) s.tokenizer += ", pre-tokenizer \"" + pre + "\"";
    if (tokens && tokens->type == GGUFType::ARRAY) s.tokenizer += ", " + std::to_string(tokens->count) + " tokens";
    try {
      (void)Tokenizer::from_gguf(f);
      s.tokenizer_ok = true;
    } catch (const std::exception& e) {
      s.tokenizer_why = e.what();
    }
  }
  std::map<std::string, bool> used;
  for (const GGUFTensorInfo& t : f.tensors()) used[dtype_name(t.dtype)] = traits(t.dtype).dequantizable;
  for (const auto& [name, ok] : used) {
    s.types.push_back(name);
    if (!ok) s.bad_types.push_back(name);
  }
  for (uint32_t raw = 0; raw < 64; ++raw)
    if (const DTypeTraits* tr = dtype_traits(raw); tr && tr->dequantizable) s.known_types.push_back(tr->name);
  return s;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& x : v) out += (out.empty() ? "" : ", ") + x;
  return out;
}

std::string support_text(const Support& s) {
  std::string out;
  out += "architecture: " + (s.arch.empty() ? std::string("(none named)") : s.arch) +
         (s.arch_ok ? ", run by weir\n" : ", not run by weir (it runs " + joined(s.known_archs) + ")\n");
  if (s.has_tokenizer)
    out += "tokenizer:    " + s.tokenizer +
           (s.tokenizer_ok ? ", read by weir\n" : ", not read by weir: " + s.tokenizer_why + "\n");
  else
    out += "tokenizer:    (none)\n";
  if (!s.types.empty())
    out += "types:        " + joined(s.types) +
           (s.bad_types.empty() ? ", all read by weir\n"
                                : "; not read by weir: " + joined(s.bad_types) + " (it reads " + joined(s.known_types) + ")\n");
  return out;
}

std::string text_report(const GGUFFile& f, bool all) {
  const Summary s = summarize(f);
  std::string out;
  out += "file:       " + f.name() + " (" + std::to_string(f.size()) + " bytes, " + human_bytes(f.size()) + ")\n";
  out += "version:    " + std::to_string(f.version()) + "\n";
  out += "alignment:  " + std::to_string(f.alignment()) + "\n";
  out += "data:       offset " + std::to_string(f.data_offset()) + ", " +
         std::to_string(f.size() > f.data_offset() ? f.size() - f.data_offset() : 0) + " bytes\n";

  out += support_text(check_support(f));

  out += "\nmetadata: " + std::to_string(f.kvs().size()) + " keys\n";
  std::vector<std::vector<std::string>> rows = {{"KEY", "TYPE", "VALUE"}};
  for (const auto& [key, v] : f.kvs())
    rows.push_back({text_str(key, true, false), gguf_type_name(v.type),
                    text_value(v, all)});
  append_table(out, rows, {false, false, false});

  out += "\ntensors: " + std::to_string(f.tensors().size()) + "\n";
  if (!f.tensors().empty()) {
    rows = {{"#", "NAME", "DTYPE", "SHAPE", "PARAMS", "BYTES", "OFFSET"}};
    size_t i = 0;
    for (const GGUFTensorInfo& t : f.tensors())
      rows.push_back({std::to_string(i++), text_str(t.name, true, false),
                      dtype_name(t.dtype), shape_text(t), std::to_string(t.n_elements()), std::to_string(t.nbytes),
                      std::to_string(t.offset)});
    append_table(out, rows, {true, false, false, false, true, true, true}, 200);

    out += "\ndtypes:\n";
    rows = {{"DTYPE", "TENSORS", "PARAMS", "BYTES", "BPW"}};
    for (const auto& [dt, st] : s.by_dtype)
      rows.push_back({dtype_name(dt), std::to_string(st.count), std::to_string(st.params), std::to_string(st.bytes),
                      bpw_text(st.bytes, st.params)});
    append_table(out, rows, {false, true, true, true, true});
  }
  out += "\ntotal: " + std::to_string(f.tensors().size()) + " tensors, " + human_count(s.params) + " parameters (" +
         std::to_string(s.params) + "), " + human_bytes(s.bytes) + " of tensor data, " + bpw_text(s.bytes, s.params) +
         " bits per weight\n";
  if (s.experts.n_expert)
    out += "active: " + human_count(s.active_params) + " parameters a token (" + std::to_string(s.active_params) +
           "; " + std::to_string(s.experts.n_used) + " of " + std::to_string(s.experts.n_expert) + " experts), " +
           human_bytes(s.active_bytes) + " of weights\n";
  return out;
}

std::string json_report(const GGUFFile& f, bool all) {
  const Summary s = summarize(f);
  std::string out = "{\n  \"file\": ";
  json_str(out, f.name());
  out += ",\n  \"file_size\": " + std::to_string(f.size());
  out += ",\n  \"version\": " + std::to_string(f.version());
  out += ",\n  \"alignment\": " + std::to_string(f.alignment());
  out += ",\n  \"data_offset\": " + std::to_string(f.data_offset());
  out += ",\n  \"n_kv\": " + std::to_string(f.kvs().size());
  out += ",\n  \"metadata\": {";
  bool first = true;
  for (const auto& [key, v] : f.kvs()) {
    out += first ? "\n    " : ",\n    ";
    first = false;
    json_str(out, key);
    out += ": ";
    json_value(out, v, all);
  }
  out += first ? "}" : "\n  }";
  out += ",\n  \"n_tensors\": " + std::to_string(f.tensors().size());
  out += ",\n  \"tensors\": [";
  first = true;
  for (const GGUFTensorInfo& t : f.tensors()) {
    out += first ? "\n    {\"name\": " : ",\n    {\"name\": ";
    first = false;
    json_str(out, t.name);
    out += ", \"dtype\": ";
    json_str(out, dtype_name(t.dtype));
    out += ", \"dtype_id\": " + std::to_string(uint32_t(t.dtype)) + ", \"shape\": [";
    for (int d = 0; d < t.n_dims; ++d) out += (d ? ", " : "") + std::to_string(t.ne[d]);
    out += "], \"n_elements\": " + std::to_string(t.n_elements()) + ", \"bytes\": " + std::to_string(t.nbytes) +
           ", \"offset\": " + std::to_string(t.offset) +
           ", \"file_offset\": " + std::to_string(f.data_offset() + t.offset) + "}";
  }
  out += first ? "]" : "\n  ]";
  out += ",\n  \"dtypes\": {";
  first = true;
  for (const auto& [dt, st] : s.by_dtype) {
    out += first ? "\n    " : ",\n    ";
    first = false;
    json_str(out, dtype_name(dt));
    out += ": {\"count\": " + std::to_string(st.count) + ", \"params\": " + std::to_string(st.params) +
           ", \"bytes\": " + std::to_string(st.bytes) + ", \"bits_per_weight\": " +
           (st.params ? fmt("%.4f", 8.0 * double(st.bytes) / double(st.params)) : "null") + "}";
  }
  out += first ? "}" : "\n  }";
  out += ",\n  \"n_params\": " + std::to_string(s.params);
  if (s.experts.n_expert)
    out += ",\n  \"n_params_active\": " + std::to_string(s.active_params) + ",\n  \"active_bytes\": " +
           std::to_string(s.active_bytes) + ",\n  \"n_expert\": " + std::to_string(s.experts.n_expert) +
           ",\n  \"n_expert_used\": " + std::to_string(s.experts.n_used);
  out += ",\n  \"tensor_bytes\": " + std::to_string(s.bytes);
  const Support sup = check_support(f);
  auto json_list = [&](const std::vector<std::string>& v) {
    out += "[";
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out += ", ";
      json_str(out, v[i]);
    }
    out += "]";
  };
  out += ",\n  \"support\": {\"architecture\": ";
  json_str(out, sup.arch);
  out += std::string(", \"architecture_supported\": ") + (sup.arch_ok ? "true" : "false") + ", \"architectures\": ";
  json_list(sup.known_archs);
  out += ", \"tokenizer\": ";
  json_str(out, sup.tokenizer);
  out += std::string(", \"tokenizer_supported\": ") + (sup.has_tokenizer && sup.tokenizer_ok ? "true" : "false");
  if (!sup.tokenizer_why.empty()) {
    out += ", \"tokenizer_error\": ";
    json_str(out, sup.tokenizer_why);
  }
  out += ", \"types\": ";
  json_list(sup.types);
  out += ", \"types_unsupported\": ";
  json_list(sup.bad_types);
  out += ", \"types_supported\": ";
  json_list(sup.known_types);
  out += "}";
  out += ",\n  \"bits_per_weight\": " + (s.params ? fmt("%.4f", s.bpw()) : std::string("null"));
  out += "\n}\n";
  return out;
}

}  // namespace

int cmd_inspect(int argc, char** argv) {
  std::string path;
  bool json = false, all = false;
  Args a("inspect", "Show what a GGUF file holds: header, metadata, tensors, parameter count.");
  a.positional("MODEL", &path, "GGUF file (any: models, vocab-only files)")
      .flag("--json", &json, "print one JSON document instead of tables")
      .flag("--all", &all, "show every array element and whole strings (default: the first few)");
  if (!a.parse(argc, argv)) return 0;
  const GGUFFile f = GGUFFile::open(path);
  const std::string out = json ? json_report(f, all) : text_report(f, all);
  write_stdout(out);
  return 0;
}

}  // namespace weir::tools
