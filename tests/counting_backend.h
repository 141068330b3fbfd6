// A backend that forwards to another and counts the buffers alive that it
// handed out for weights and staging (tests of the loader: a failed load
// must leave none).
#pragma once
#include <atomic>
#include <memory>
#include <string>

#include "backend/backend.h"

namespace weir::test {

class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(std::unique_ptr<Backend> inner) : in_(std::move(inner)) {}
  std::string name() const override { return in_->name(); }
  Device device() const override { return in_->device(); }
  bool supports(const Tensor& n) const override { return in_->supports(n); }
  bool host_visible_memory() const override { return in_->host_visible_memory(); }
  Queue& queue() override { return in_->queue(); }
  Queue& copy_queue() override { return in_->copy_queue(); }
  bool owns(const void* p) const override { return in_->owns(p); }
  void plan(Graph& g) override { in_->plan(g); }
  size_t planned_bytes(const Graph& g) const override { return in_->planned_bytes(g); }
  void release(const Graph& g) override { in_->release(g); }
  const BackendStats& stats() const override { return in_->stats(); }
  std::unique_ptr<Buffer> alloc(size_t bytes) override { return in_->alloc(bytes); }
  std::unique_ptr<Buffer> alloc_host(size_t bytes) override { return counted(in_->alloc_host(bytes)); }
  std::unique_ptr<Buffer> alloc_weight(size_t bytes) override { return counted(in_->alloc_weight(bytes)); }
  void adopt_weight(const void* host, size_t bytes, std::unique_ptr<Buffer> w) override {
    in_->adopt_weight(host, bytes, std::move(w));
  }
  void forget_weights(const void* begin, size_t n) override { in_->forget_weights(begin, n); }
  int live() const { return live_->load(); }

 private:
  class Counted final : public Buffer {
   public:
    Counted(std::unique_ptr<Buffer> b, std::shared_ptr<std::atomic<int>> n) : b_(std::move(b)), n_(std::move(n)) {
      data_ = b_->data();
      size_ = b_->size();
      ++*n_;
    }
    ~Counted() override { --*n_; }

   private:
    std::unique_ptr<Buffer> b_;
    std::shared_ptr<std::atomic<int>> n_;
  };
  std::unique_ptr<Buffer> counted(std::unique_ptr<Buffer> b) { return std::make_unique<Counted>(std::move(b), live_); }
  std::unique_ptr<Backend> in_;
  std::shared_ptr<std::atomic<int>> live_ = std::make_shared<std::atomic<int>>(0);
};

}  // namespace weir::test
