#include "backend/token_sampler.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

namespace weir {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Probability order: higher logit first, lower id on ties. A strict total
// order (NaN never reaches it), so partial sorts give the same result with
// any standard library.
inline bool before(const TokenCandidate& a, const TokenCandidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// NaN -> -inf and +inf -> FLT_MAX, so every later comparison and subtraction
// is well defined.
inline float sanitize(float v) {
  if (!(v <= FLT_MAX)) v = std::isnan(v) ? kNegInf : FLT_MAX;
  return v;
}

// Calls f(id, logit) for every token in id order, with the logit sanitized
// and, for the tokens in `penalized` (sorted, distinct), the repetition
// penalty applied.
template <class F>
inline void visit_logits(const float* logits, size_t n, const std::vector<int32_t>& penalized, float pen,
                         F&& f) {
  size_t i = 0;
  for (int32_t t : penalized) {
    for (; i < size_t(t); ++i) f(int32_t(i), sanitize(logits[i]));
    const float l = sanitize(logits[t]);
    f(t, l > 0 ? l / pen : l * pen);
    i = size_t(t) + 1;
  }
  for (; i < n; ++i) f(int32_t(i), sanitize(logits[i]));
}

// Inserts `t` into the k-entry heap c[0, k) (top: the worst entry), whose
// first `filled` entries are real; returns the logit a newcomer must beat.
// While filling, the heap is built once it holds k entries.
[[gnu::noinline]] float heap_insert(TokenCandidate* c, size_t k, size_t& filled, TokenCandidate t) {
  if (filled < k) {
    c[filled++] = t;
    if (filled < k) return kNegInf;
    std::make_heap(c, c + k, before);
    return c[0].logit;
  }
  std::pop_heap(c, c + k, before);
  c[k - 1] = t;
  std::push_heap(c, c + k, before);
  return c[0].logit;
}

// Up to this k, top-k streams the logits through a heap instead of copying
// and selecting over the whole vocabulary.
constexpr size_t kHeapTopK = 4096;

}  // namespace

size_t TokenSampler::filter(const float* logits, int64_t n_vocab_in, const SamplingParams& params,
                            const std::vector<int32_t>& penalized, float penalty) {
  const size_t n_vocab = size_t(n_vocab_in);
  if (cand_.size() < n_vocab) cand_.resize(n_vocab);
  TokenCandidate* c = cand_.data();

  const auto visit = [&](auto&& f) { visit_logits(logits, n_vocab, penalized, penalty, f); };

  // Greedy: argmax, lowest id on ties.
  if (params.temperature <= 0) {
    int32_t best = -1;
    float best_l = kNegInf;
    visit([&](int32_t id, float v) {
      if (v > best_l) {
        best_l = v;
        best = id;
      }
    });
    if (best < 0) return 0;
    c[0] = {best, best_l, 1.0f};
    weight_sum_ = 1.0;
    sorted_ = true;
    return 1;
  }

  size_t n = n_vocab;
  sorted_ = false;
  float max_l = kNegInf;
  const size_t k = size_t(params.top_k);
  if (k > 0 && k < n && k <= kHeapTopK) {
    // top-k, small k: one pass keeping the k best in a heap whose top is the
    // worst of them. Ids arrive in increasing order, so a newcomer that ties
    // the worst loses (lowest ids win ties) and `v > worst` is the whole test.
    float worst = kNegInf;
    size_t filled = 0;
    visit([&](int32_t id, float v) {
      if (v > worst || filled < k) [[unlikely]]
        worst = heap_insert(c, k, filled, {id, v, 0.0f});
    });
    std::sort_heap(c, c + k, before);
    n = k;
    sorted_ = true;
    max_l = c[0].logit;
  } else {
    visit([&](int32_t id, float v) {
      c[id] = {id, v, 0.0f};
      max_l = std::max(max_l, v);
    });
    if (k > 0 && k < n) {  // top-k, large k: select, then sort just those
      std::nth_element(c, c + k, c + n, before);
      std::sort(c, c + k, before);
      n = k;
      sorted_ = true;
    }
  }
  if (max_l == kNegInf) return 0;

  // Normalizer of the distribution top-p is defined on (the tokens top-k
  // kept), taken before min-p shrinks the set.
  const bool use_top_p = params.top_p < 1.0f;
  double norm = 0;
  if (use_top_p)
    for (size_t i = 0; i < n; ++i) norm += double(std::exp(c[i].logit - max_l));

  // min-p: p_i >= min_p * p_max  <=>  logit_i >= max + log(min_p). Both top-p
  // and min-p keep a prefix of the probability order, so their result is the
  // shorter prefix whatever the order they run in; running min-p first means
  // top-p sorts only what min-p kept.
  if (params.min_p > 0) {
    const float thr = max_l + std::log(params.min_p);
    if (sorted_) {
      size_t m = 1;
      while (m < n && c[m].logit >= thr) ++m;
      n = m;
    } else {
      size_t m = 0;  // stable compaction keeps the id order
      for (size_t i = 0; i < n; ++i)
        if (c[i].logit >= thr) c[m++] = c[i];
      n = m;
    }
  }

  // top-p: sort incrementally (64, 256, 1024, ... best tokens) until the
  // cumulative probability reaches top_p.
  if (use_top_p) {
    const double p = params.top_p;
    double cum = 0;
    size_t done = 0;
    size_t upto = sorted_ ? n : std::min<size_t>(n, 64);
    size_t cut = n;
    for (;;) {
      if (!sorted_) {
        if (upto < n) std::nth_element(c + done, c + upto, c + n, before);
        std::sort(c + done, c + upto, before);
      }
      size_t i = done;
      for (; i < upto; ++i) {
        cum += double(std::exp(c[i].logit - max_l)) / norm;
        if (cum >= p) break;
      }
      if (i < upto) {
        cut = i + 1;
        break;
      }
      if (upto == n) break;
      done = upto;
      upto = std::min(n, upto * 4);
    }
    // Either the loop cut inside the sorted prefix or it sorted everything.
    sorted_ = true;
    n = cut;
  }

  // Temperature and unnormalized softmax weights.
  const float inv_t = 1.0f / params.temperature;
  double sum = 0;
  if (params.temperature == 1.0f) {
    for (size_t i = 0; i < n; ++i) sum += double(c[i].p = std::exp(c[i].logit - max_l));
  } else {
    for (size_t i = 0; i < n; ++i) sum += double(c[i].p = std::exp((c[i].logit - max_l) * inv_t));
  }
  weight_sum_ = sum;
  return n;
}

int32_t TokenSampler::draw(size_t n, double u) const {
  if (n == 1) return cand_[0].id;
  const double target = u * weight_sum_;
  double cum = 0;
  size_t last = 0;
  for (size_t i = 0; i < n; ++i) {
    const float w = cand_[i].p;
    if (w <= 0) continue;
    cum += double(w);
    last = i;
    if (target < cum) return cand_[i].id;
  }
  return cand_[last].id;  // rounding left the draw at the very end
}

int32_t TokenSampler::sample(const float* logits, int64_t n_vocab, const SamplingParams& p, double u) {
  const size_t n = filter(logits, n_vocab, p);
  return n == 0 ? -1 : draw(n, u);
}

int32_t sample_row(const float* logits, int64_t n_vocab, const float* params) {
  thread_local TokenSampler s;
  SamplingParams p;
  p.temperature = params[0];
  p.top_k = int(params[1]);
  p.top_p = params[2];
  p.min_p = params[3];
  return s.sample(logits, n_vocab, p, double(params[4]));
}

}  // namespace weir
