#include "model/quantize_model.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/file_checks.h"
#include "core/gguf.h"
#include "core/gguf_writer.h"
#include "core/imatrix_file.h"
#include "core/warn.h"
#include "core/quant/quantize.h"
#include "core/thread_group.h"

namespace weir {
namespace {

// Floats converted per chunk (64 MiB): bounds memory for any tensor size.
constexpr int64_t kChunkFloats = int64_t(16) << 20;

// A small persistent pool: run(job) calls job() on every thread (the caller
// included) and returns when all are done, rethrowing the first exception.
// Its threads start all or none (ThreadGroup).
class Workers {
 public:
  explicit Workers(int n) : n_workers_(size_t(std::max(0, n - 1))) {
    threads_.start(n - 1, 1, [this](int) { loop(); }, [this] { stop(); });
  }
  ~Workers() {
    stop();
    threads_.join();
  }
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;

  void run(const std::function<void()>& job) {
    {
      std::lock_guard<std::mutex> lk(m_);
      job_ = &job;
      ++generation_;
      pending_ = n_workers_;
      error_ = nullptr;
    }
    start_.notify_all();
    std::exception_ptr mine;
    try {
      job();
    } catch (...) {
      mine = std::current_exception();
    }
    std::unique_lock<std::mutex> lk(m_);
    done_.wait(lk, [&] { return pending_ == 0; });
    if (mine) std::rethrow_exception(mine);
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  void loop() {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void()>* job;
      {
        std::unique_lock<std::mutex> lk(m_);
        start_.wait(lk, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      std::exception_ptr err;
      try {
        (*job)();
      } catch (...) {
        err = std::current_exception();
      }
      std::lock_guard<std::mutex> lk(m_);
      if (err && !error_) error_ = err;
      if (--pending_ == 0) done_.notify_one();
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lk(m_);
      stop_ = true;
    }
    start_.notify_all();
  }

  size_t n_workers_;
  std::mutex m_;
  std::condition_variable start_, done_;
  const std::function<void()>* job_ = nullptr;
  uint64_t generation_ = 0;
  size_t pending_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  ThreadGroup threads_;  // last: started once the state above is ready
};

bool is_integer_dtype(DType t) {
  return t == DType::I8 || t == DType::I16 || t == DType::I32 || t == DType::I64;
}

// An integer hyper-parameter; per-layer arrays give their largest element.
int64_t hparam(const GGUFFile& f, const std::string& key) {
  const GGUFValue* v = f.find(key);
  if (!v) return 0;
  if (v->is_integer()) return v->type == GGUFType::UINT64 ? int64_t(v->num.u & INT64_MAX) : v->num.i;
  if (v->type == GGUFType::ARRAY && gguf_scalar_size(v->elem_type) != 0) {
    int64_t m = 0;
    for (uint64_t i = 0; i < v->count; ++i) m = std::max(m, v->array_i64(i));
    return m;
  }
  return 0;
}

}  // namespace

QuantModelInfo quant_model_info(const GGUFFile& f) {
  QuantModelInfo info;
  const GGUFValue* arch = f.find("general.architecture");
  if (arch && arch->type == GGUFType::STRING) info.arch = std::string(arch->str);
  const std::string p = info.arch + ".";
  info.n_layer = hparam(f, p + "block_count");
  info.n_head = hparam(f, p + "attention.head_count");
  info.n_head_kv = hparam(f, p + "attention.head_count_kv");
  info.n_expert = hparam(f, p + "expert_count");
  return info;
}

QuantizeResult quantize_model(const std::string& in_path, const std::string& out_path, FileType ft, int n_threads,
                              const std::function<void(const QuantizeProgress&)>& progress, const Imatrix* imatrix) {
  const auto t0 = std::chrono::steady_clock::now();
  if (n_threads < 1) n_threads = std::max(1u, std::thread::hardware_concurrency());
  check_not_input(in_path, out_path);
  const GGUFFile in = GGUFFile::open(in_path);
  const auto& tensors = in.tensors();

  std::vector<TensorDesc> descs;
  descs.reserve(tensors.size());
  for (const GGUFTensorInfo& t : tensors) {
    TensorDesc d;
    d.name = std::string(t.name);
    d.n_dims = t.n_dims;
    std::copy(t.ne, t.ne + 4, d.ne);
    descs.push_back(std::move(d));
  }
  const std::vector<DType> plan = plan_tensor_types(ft, quant_model_info(in), descs, imatrix != nullptr);
  if (plan.size() != tensors.size())
    throw Error("quantize: the type plan has " + std::to_string(plan.size()) + " entries for " +
                std::to_string(tensors.size()) + " tensors");

  // Decide every tensor's fate before anything is written.
  QuantizeResult r;
  r.in_file_bytes = in.size();
  r.n_tensors = tensors.size();
  std::vector<DType> out_type(tensors.size());
  std::vector<bool> copy(tensors.size());
  std::vector<std::vector<float>> importance(tensors.size());  // n_per_row per expert, or empty
  for (size_t i = 0; i < tensors.size(); ++i) {
    const GGUFTensorInfo& t = tensors[i];
    const std::string where = in.name() + ": tensor '" + std::string(t.name) + "'";
    DType to = plan[i];
    copy[i] = t.n_dims < 2 || to == t.dtype || is_integer_dtype(t.dtype);
    if (copy[i]) to = t.dtype;
    out_type[i] = to;
    if (!copy[i]) {
      if (!traits(t.dtype).dequantizable)
        throw Error(where + ": cannot convert from " + dtype_name(t.dtype) + " to " + dtype_name(to) +
                    " (no dequantizer for " + dtype_name(t.dtype) + ")");
      if (!quant::can_quantize(to))
        throw Error(where + ": cannot quantize to " + dtype_name(to) + " (no quantizer for " + dtype_name(to) +
                    " in this build)");
      if (t.ne[0] % traits(to).block_size != 0)
        throw Error(where + ": rows of " + std::to_string(t.ne[0]) + " elements do not fit " + dtype_name(to) +
                    "'s block size " + std::to_string(traits(to).block_size));
    }
    if (imatrix && !copy[i] && traits(to).block_size > 1) {
      // llama-quantize checks every entry it finds, whatever the type.
      const auto it = imatrix->entries.find(std::string(t.name));
      if (it != imatrix->entries.end()) {
        const ImatrixEntry& e = it->second;
        if (e.n_per_row * e.n_mat() != t.ne[0] * t.ne[2])
          throw Error(where + ": the importance matrix " + imatrix->path + " has " +
                      std::to_string(e.n_per_row * e.n_mat()) + " values for it, not " +
                      std::to_string(t.ne[0] * t.ne[2]) + " (columns x experts)");
        if (quant::uses_importance(to)) {
          importance[i] = imatrix->importance(std::string(t.name));
          ++r.n_weighted;
        }
      } else if (quant::uses_importance(to)) {
        r.without_importance.emplace_back(t.name);
        warn(where + ": no importance weights in " + imatrix->path + "; quantized without them");
      }
    }
    r.n_elements += uint64_t(t.n_elements());
    r.in_tensor_bytes += t.nbytes;
    r.out_tensor_bytes += row_bytes(to, t.ne[0]) * uint64_t(t.ne[0] ? t.n_elements() / t.ne[0] : 0);
    (copy[i] ? r.n_copied : r.n_converted) += 1;
    // Quantized to quantized: the first rounding's error stays in the result.
    const bool src_float = t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16;
    if (!copy[i] && !src_float && to != DType::F32 && to != DType::F16 && to != DType::BF16) r.n_requantized += 1;
  }

  GGUFWriter w(in.alignment(), 3);
  for (const auto& [key, value] : in.kvs()) w.set_value(key, value);
  w.set_u32("general.quantization_version", 2);
  w.set_u32("general.file_type", uint32_t(ft));
  if (imatrix) {  // as llama-quantize records it
    w.set_str("quantize.imatrix.file", imatrix->path);
    if (!imatrix->datasets.empty()) w.set_str("quantize.imatrix.dataset", imatrix->datasets[0]);
    w.set_i32("quantize.imatrix.entries_count", int32_t(imatrix->entries.size()));
    if (imatrix->chunk_count > 0) w.set_i32("quantize.imatrix.chunks_count", int32_t(imatrix->chunk_count));
  }
  for (size_t i = 0; i < tensors.size(); ++i) w.add_tensor(tensors[i].name, out_type[i], tensors[i].n_dims, tensors[i].ne);
  w.open(out_path);

  Workers pool(n_threads);
  std::vector<float> fbuf;
  std::vector<uint8_t> obuf;
  QuantizeProgress p;
  p.n_tensors = tensors.size();
  p.total_elements = r.n_elements;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const GGUFTensorInfo& t = tensors[i];
    p.tensor = i;
    p.name = t.name;
    p.from = t.dtype;
    p.to = out_type[i];
    p.copied = copy[i];
    if (copy[i]) {
      w.write_tensor_data(t.data, t.nbytes);
      p.done_elements += uint64_t(t.n_elements());
      if (progress) progress(p);
      continue;
    }
    const int64_t n_per_row = t.ne[0];
    const int64_t n_rows = n_per_row ? t.n_elements() / n_per_row : 0;
    const size_t src_row = row_bytes(t.dtype, n_per_row), dst_row = row_bytes(out_type[i], n_per_row);
    const int64_t chunk_rows = std::max<int64_t>(1, kChunkFloats / std::max<int64_t>(1, n_per_row));
    const std::vector<float>& qw = importance[i];
    const int64_t rows_per_expert = std::max<int64_t>(1, t.ne[1]);
    for (int64_t r0 = 0; r0 < n_rows; r0 += chunk_rows) {
      const int64_t nr = std::min(chunk_rows, n_rows - r0);
      fbuf.resize(size_t(nr * n_per_row));
      obuf.resize(size_t(nr) * dst_row);
      // Rows go out in blocks from a shared counter, so faster threads take more.
      const int64_t block = std::max<int64_t>(1, nr / (int64_t(n_threads) * 8));
      std::atomic<int64_t> next{0};
      std::atomic<bool> failed{false};
      const uint8_t* src = t.data + size_t(r0) * src_row;
      const std::function<void()> job = [&] {
        try {
          for (;;) {
            const int64_t b0 = next.fetch_add(block);
            if (b0 >= nr || failed.load(std::memory_order_relaxed)) return;
            const int64_t nb = std::min(block, nr - b0);
            float* f = fbuf.data() + b0 * n_per_row;
            dequantize_row(t.dtype, src + size_t(b0) * src_row, f, nb * n_per_row);
            if (qw.empty()) {
              quant::quantize_rows(out_type[i], f, obuf.data() + size_t(b0) * dst_row, nb, n_per_row);
              continue;
            }
            // Expert e (rows e * ne[1] .. of a 3-D tensor) has its own weights.
            for (int64_t k = 0; k < nb;) {
              const int64_t row = r0 + b0 + k, matrix = row / rows_per_expert;
              const int64_t n = std::min(nb - k, (matrix + 1) * rows_per_expert - row);
              quant::quantize_rows(out_type[i], f + k * n_per_row, obuf.data() + size_t(b0 + k) * dst_row, n,
                                   n_per_row, qw.data() + (matrix % t.ne[2]) * n_per_row);
              k += n;
            }
          }
        } catch (...) {
          failed = true;
          throw;
        }
      };
      pool.run(job);
      w.write_tensor_data(obuf.data(), obuf.size());
      p.done_elements += uint64_t(nr * n_per_row);
      if (progress) progress(p);
    }
    if (n_rows == 0 && progress) progress(p);
  }
  w.close();

  std::error_code ec;
  const auto out_size = std::filesystem::file_size(out_path, ec);
  r.out_file_bytes = ec ? 0 : uint64_t(out_size);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace weir
