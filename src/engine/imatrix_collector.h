// An importance matrix collected while a Session runs a text (weir imatrix),
// as llama.cpp's imatrix tool collects one: for every matrix product whose
// weight is a layer's tensor ("blk.*"), the sum over tokens of x_j^2 for
// each input column j (x the product's float input), and the number of
// tokens summed. Expert products (mul_mat_id) sum per expert, each token
// slot into the expert it was routed to, with a count per expert. A weight
// read by several products of one step on the same input (row blocks of a
// fused matrix) counts once.
//
// It watches the session through SessionParams::on_graph / after_step, so
// the session must run on a backend whose memory the host reads (the CPU).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/imatrix_file.h"
#include "engine/session.h"

namespace weir {

class ImatrixCollector {
 public:
  // Sets p.on_graph and p.after_step to this collector (which must outlive
  // the session).
  void attach(SessionParams& p);

  // The matrix so far: in_sum2 and counts per weight, in name order.
  Imatrix result() const;
  // Tokens seen by the products of the busiest weight (the tokens run).
  int64_t max_count() const;

  void observe(Graph& g);        // on_graph
  void collect(const Graph& g);  // after_step

 private:
  struct Product {
    std::string weight;            // the weight's tensor name
    const Tensor* x = nullptr;     // F32 [K, T] (mul_mat) or [K, X, T] (mul_mat_id)
    const Tensor* ids = nullptr;   // I32 [k, T] for mul_mat_id
    int64_t n_mat = 1;             // experts
  };
  struct Sums {
    int64_t n_per_row = 0;
    std::vector<double> sum2;      // n_per_row * n_mat
    std::vector<int64_t> counts;   // n_mat
  };
  std::map<const Graph*, std::vector<Product>> products_;
  std::map<std::string, Sums> sums_;
};

}  // namespace weir
