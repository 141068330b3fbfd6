// weir._weir: the engine under the Python package (python/weir). One
// Model holds a loaded GGUF, its backend, one session and the
// continuous-batching engine of weir serve; requests go in as OpenAI
// request bodies (JSON text) and come back as the server's response
// objects, whole or chunk by chunk, so that Python sees exactly what the
// HTTP API returns. Every call that may take a while releases the GIL.
#include <nanobind/nanobind.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/batcher.h"
#include "engine/openai/answer.h"
#include "engine/openai/embeddings.h"
#include "engine/openai/json_body.h"
#include "engine/openai/request.h"
#include "engine/session.h"
#include "engine/runtime.h"
#include "engine/spec_setup.h"
#include "text/chat_template.h"

namespace nb = nanobind;
using namespace weir;

namespace {

// weir.Llama's arguments, checked and named as Python has them
// (weir/__init__.py), turned into the engine's RuntimeSpec.
struct ModelOptions {
  int64_t n_ctx = 4096;
  int n_gpu_layers = 0;  // -1: all
  int n_threads = 0;     // 0: all CPUs
  int n_threads_batch = 0;  // 0: n_threads's (weir uses one thread count)
  int64_t n_batch = 512, n_ubatch = 512;
  int n_parallel = 1;    // requests generated side by side (from several Python threads)
  std::string chat_template;  // a Jinja template instead of the model's ("" : the model's)
  int kv_type = -1;  // the KV cache's ggml type (0 f32, 1 f16, 8 q8_0); -1: weir serve's default
  bool use_mmap = true;
  bool op_offload = true;
  int main_gpu = 0;
  std::string split_mode = "auto", numa = "off";
  std::vector<double> tensor_split;
  // Prompt lookup speculation (draft_model=LlamaPromptLookupDecoding): the
  // longest n-gram looked up (0: off) and the most guesses a step checks.
  int spec_ngram_max = 0;
  int spec_draft_max = 10;
  // A draft model (draft_model="path.gguf", weir's addition): its file
  // ("" : none) and its layers on the GPU (-2: as n_gpu_layers; -1: all).
  std::string spec_draft_path;
  int spec_draft_gpu_layers = -2;
};

// The batcher's speculative decoding from draft_model's values (checked).
SpecOptions spec_options_from(const ModelOptions& o) {
  SpecOptions s;
  if (!o.spec_draft_path.empty()) {
    if (o.spec_ngram_max != 0) throw UsageError("draft_model: either prompt lookup or a draft model's path, not both");
    if (o.spec_draft_gpu_layers < -2)
      throw UsageError("draft_gpu_layers: expected -1 (all), 0 or more, got " + std::to_string(o.spec_draft_gpu_layers));
    s.mode = SpecMode::Draft;
    s.draft_path = o.spec_draft_path;
    s.draft_gpu_layers = o.spec_draft_gpu_layers == -1 ? 1 << 20 : o.spec_draft_gpu_layers;  // (-2 -> -1: as the target's)
    s.length.draft_max = std::clamp(o.spec_draft_max, 1, DraftLength::kMaxDraft);
    return s;
  }
  if (o.spec_ngram_max == 0) return s;
  if (o.spec_ngram_max < 1 || o.spec_ngram_max > 64)
    throw UsageError("max_ngram_size: expected 1 to 64, got " + std::to_string(o.spec_ngram_max));
  if (o.spec_draft_max < 1 || o.spec_draft_max > DraftLength::kMaxDraft)
    throw UsageError("num_pred_tokens: expected 1 to " + std::to_string(DraftLength::kMaxDraft) + ", got " +
                     std::to_string(o.spec_draft_max));
  s.mode = SpecMode::Ngram;
  s.ngram.max_n = o.spec_ngram_max;
  s.ngram.min_n = std::min(2, o.spec_ngram_max);  // (a single token's match guesses noisily)
  s.length.draft_max = o.spec_draft_max;
  return s;
}

RuntimeSpec spec_from(const std::string& path, const ModelOptions& o) {
  if (o.n_ctx < 16) throw UsageError("n_ctx: expected at least 16, got " + std::to_string(o.n_ctx));
  if (o.n_batch < 1) throw UsageError("n_batch: expected at least 1, got " + std::to_string(o.n_batch));
  if (o.n_ubatch < 1) throw UsageError("n_ubatch: expected at least 1, got " + std::to_string(o.n_ubatch));
  if (o.n_parallel < 1 || o.n_parallel > 256)
    throw UsageError("n_parallel: expected 1 to 256, got " + std::to_string(o.n_parallel));
  if (o.n_gpu_layers < -1) throw UsageError("n_gpu_layers: expected -1 (all), 0 or more, got " + std::to_string(o.n_gpu_layers));
  if (o.kv_type != -1 && o.kv_type != int(DType::F32) && o.kv_type != int(DType::F16) && o.kv_type != int(DType::Q8_0))
    throw UsageError("type_k: expected a ggml type id of f32 (0), f16 (1) or q8_0 (8), got " + std::to_string(o.kv_type));
  RuntimeSpec s;
  s.model_path = path;
  s.n_gpu_layers = o.n_gpu_layers < 0 ? 1 << 20 : o.n_gpu_layers;
  s.main_gpu = o.main_gpu;
  s.split_mode = o.split_mode;
  s.tensor_split = o.tensor_split;
  s.op_offload = o.op_offload;
  s.n_ctx = o.n_ctx;
  s.kv_type = o.kv_type < 0 ? default_kv_type(s.n_gpu_layers) : DType(o.kv_type);  // default as weir serve's
  s.n_batch = o.n_batch;
  s.n_ubatch = o.n_ubatch;
  s.threads = o.n_threads > 0 ? o.n_threads : default_threads();
  if (s.threads > 1024) throw UsageError("n_threads: expected 1 to 1024, got " + std::to_string(s.threads));
  s.threads_batch = o.n_threads_batch;
  if (!cpu::parse_numa_mode(o.numa, &s.cpu.numa))
    throw UsageError("numa: expected False, True (distribute) or isolate, got '" + o.numa + "'");
  s.no_mmap = !o.use_mmap;
  s.load.readers = default_load_threads();
  s.load.buffer_bytes = size_t(4) << 20;
  // Speculation's steps come in more shapes (its guesses: engine/guess_allocation.h's ladder).
  if (o.spec_ngram_max > 0 || !o.spec_draft_path.empty()) s.max_graphs = std::max(s.max_graphs, 32);
  return s;
}

class PyModel {
 public:
  PyModel(const std::string& path, const ModelOptions& o) {
    const RuntimeSpec spec = spec_from(path, o);
    const SpecOptions speculation = spec_options_from(o);  // (checked before the load)
    rt_ = build_runtime(spec);
    const Model& m = *rt_.model;
    if (!o.chat_template.empty()) {
      chat_ = std::make_unique<ChatTemplate>(o.chat_template, "chat_template", m.tokenizer().vocab());
    } else {
      try {
        chat_ = std::make_unique<ChatTemplate>(ChatTemplate::for_model(m.file(), m.tokenizer().vocab()));
      } catch (const Error&) {
        // No template: chat completions say so; completions work.
      }
    }
    BatcherOptions eo;
    eo.max_sequences = o.n_parallel;
    eo.step_tokens = size_t(rt_.session->n_batch());  // step_tokens(spec), or a BERT encoder's context
    eo.spec = speculation;
    if (speculation.mode == SpecMode::Draft) {  // checked against the target (weir::Error: ValueError naming the difference)
      draft_ = make_batch_draft(speculation, spec, m, rt_.session->n_ctx(), rt_.session->n_batch(), spec.max_graphs);
      eo.draft = draft_->session.get();
    }
    engine_ = std::make_unique<Batcher>(*rt_.session, m.tokenizer(), eo);
    engine_->start();
    n_ctx_ = o.n_ctx;
    placement_ = rt_.backends.placement.empty() ? "the CPU, " + std::to_string(spec.threads) + " threads"
                                                : rt_.backends.placement;
    path_ = path;
  }
  ~PyModel() { close(); }

  // Safe while other threads call in: it waits for the calls that are
  // queuing a request or tokenizing (quick), ends the generations in
  // flight (their readers get ValueError), and later calls get ValueError.
  void close() {
    std::unique_lock<std::shared_mutex> life(life_);
    if (closed_) return;
    closed_ = true;
    // Generations nobody reads to the end (an abandoned stream) stop now:
    // the engine's stop() would otherwise finish them first. Answers that
    // outlive the engine (a stream object Python still holds) then leave
    // it alone.
    std::vector<std::shared_ptr<openai::Answer>> live;
    {
      std::lock_guard<std::mutex> lk(answers_m_);
      for (const std::weak_ptr<openai::Answer>& w : answers_)
        if (std::shared_ptr<openai::Answer> a = w.lock()) live.push_back(std::move(a));
      answers_.clear();
    }
    for (const auto& a : live) a->abandon(400, "this Llama was closed while the request ran");
    if (engine_) engine_->stop();
    for (const auto& a : live) a->detach();
    engine_.reset();
    draft_.reset();
    chat_.reset();
    rt_ = Runtime();  // the session, the backends (loaded weights first), the model
  }

  // Holds the model open for the length of one call (other threads may
  // call close()); throws UsageError (ValueError) once it is closed.
  std::shared_lock<std::shared_mutex> use() const {
    std::shared_lock<std::shared_mutex> life(life_);
    if (closed_) throw UsageError("this Llama is closed");
    return life;
  }

  const Model& model() const {
    if (!rt_.model) throw UsageError("this Llama is closed");
    return *rt_.model;
  }

  std::vector<int32_t> tokenize(const std::string& text, bool add_bos, bool special) const {
    const auto life = use();
    const Tokenizer& tok = model().tokenizer();
    return tok.encode(text, add_bos && tok.vocab().add_bos, special);
  }

  std::string detokenize(const std::vector<int64_t>& ids, bool special) const {
    const auto life = use();
    const Tokenizer& tok = model().tokenizer();
    for (int64_t t : ids)
      if (t < 0 || t >= tok.vocab().n_tokens())
        throw UsageError("tokens: " + std::to_string(t) + " is not a token id (0 to " + std::to_string(tok.vocab().n_tokens() - 1) + ")");
    std::string text;
    for (int64_t t : ids) text += tok.token_to_piece(int32_t(t), special);
    return text;
  }

  // body: an OpenAI request body (JSON text); chat picks which.
  std::shared_ptr<openai::Answer> start(bool chat, const std::string& body) {
    const auto life = use();
    const Model& m = model();
    if (m.hparams().embeddings_only)  // a BERT encoder: as weir serve answers (400)
      throw Error(path_ + ": this model (" + m.hparams().arch + ") only makes embeddings: use create_embedding or embed");
    const nlohmann::json j = openai::parse_json_body(body);
    const openai::GenerationRequest r = chat ? openai::parse_chat_request(j) : openai::parse_completion_request(j);
    const openai::AnswerContext ctx{*engine_, m.tokenizer(), chat_.get(), path_, n_ctx_};
    std::shared_ptr<openai::Answer> a = openai::Answer::start(ctx, r);
    std::lock_guard<std::mutex> lk(answers_m_);
    std::erase_if(answers_, [](const std::weak_ptr<openai::Answer>& w) { return w.expired(); });
    answers_.push_back(a);
    return a;
  }

  // body: an OpenAI /v1/embeddings request body (JSON text); the response
  // object (JSON text), computed on the engine between generation steps.
  std::string create_embedding(const std::string& body) {
    const auto life = use();
    const openai::EmbeddingRequest r = openai::parse_embedding_request(openai::parse_json_body(body));
    const openai::EmbeddingContext ctx{*engine_, model().tokenizer(), path_, 0, !model().hparams().causal};
    return openai::create_embeddings(ctx, r).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }

  int64_t n_ctx() const { return n_ctx_; }
  // Speculative decoding so far: guesses checked, and kept.
  std::vector<uint64_t> spec_guesses() const {
    const auto life = use();
    const Batcher::Stats st = engine_->stats();
    return {st.guesses_drafted, st.guesses_accepted};
  }
  int64_t n_embd() const {
    const auto life = use();
    return model().hparams().n_embd;
  }
  int64_t n_vocab() const {
    const auto life = use();
    return model().tokenizer().vocab().n_tokens();
  }
  int32_t token_eos() const {
    const auto life = use();
    return model().tokenizer().vocab().eos;
  }
  int32_t token_bos() const {
    const auto life = use();
    return model().tokenizer().vocab().bos;
  }
  bool has_chat_template() const {
    const auto life = use();
    return chat_ != nullptr;
  }
  std::string architecture() const {
    const auto life = use();
    return model().hparams().arch;
  }
  std::string placement() const { return placement_; }

 private:
  Runtime rt_;
  std::unique_ptr<ChatTemplate> chat_;
  std::unique_ptr<Runtime> draft_;  // draft_model="path": the draft's runtime (outlives engine_, which uses its session)
  std::unique_ptr<Batcher> engine_;
  mutable std::shared_mutex life_;  // shared by each call, taken whole by close()
  bool closed_ = false;
  std::mutex answers_m_;  // start() may run on several Python threads (the GIL released)
  std::vector<std::weak_ptr<openai::Answer>> answers_;
  int64_t n_ctx_ = 0;
  std::string placement_, path_;
};

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(int64_t(std::max(0.0, seconds) * 1000.0));
}

}  // namespace

NB_MODULE(_weir, m) {
  m.doc() = "weir's engine (the weir package wraps it: use weir.Llama)";
  // Errors: weir's own as weir.WeirError (a RuntimeError); bad arguments and
  // refused requests as ValueError.
  static nb::exception<Error> weir_error(m, "WeirError", PyExc_RuntimeError);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const openai::ApiError& e) {
      PyErr_SetString(e.status >= 500 ? PyExc_RuntimeError : PyExc_ValueError, e.what());
    } catch (const UsageError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  nb::class_<ModelOptions>(m, "ModelOptions", "Options of a Model (weir.Llama's arguments)")
      .def(nb::init<>())
      .def_rw("n_ctx", &ModelOptions::n_ctx, "KV cache cells (all requests together)")
      .def_rw("n_gpu_layers", &ModelOptions::n_gpu_layers, "layers on the GPU (-1: all)")
      .def_rw("n_threads", &ModelOptions::n_threads, "CPU threads (0: all CPUs)")
      .def_rw("n_batch", &ModelOptions::n_batch, "tokens a forward step takes")
      .def_rw("n_parallel", &ModelOptions::n_parallel, "requests generated side by side")
      .def_rw("chat_template", &ModelOptions::chat_template, "a Jinja chat template instead of the model's")
      .def_rw("kv_type", &ModelOptions::kv_type, "the KV cache's ggml type id (0 f32, 1 f16, 8 q8_0; -1: the default)")
      .def_rw("n_ubatch", &ModelOptions::n_ubatch, "tokens a forward step takes, at most n_batch")
      .def_rw("n_threads_batch", &ModelOptions::n_threads_batch, "threads for prompts (0 or n_threads)")
      .def_rw("use_mmap", &ModelOptions::use_mmap, "map the file (False: read the CPU's weights into memory)")
      .def_rw("op_offload", &ModelOptions::op_offload, "prompt products of CPU weights on the GPU when there is one")
      .def_rw("main_gpu", &ModelOptions::main_gpu, "the GPU of a one-GPU run, the first of a split")
      .def_rw("split_mode", &ModelOptions::split_mode, "none, layer, tensor or auto")
      .def_rw("tensor_split", &ModelOptions::tensor_split, "a layer split's shares per GPU")
      .def_rw("numa", &ModelOptions::numa, "off, distribute or isolate")
      .def_rw("spec_ngram_max", &ModelOptions::spec_ngram_max, "prompt lookup: the longest n-gram looked up (0: no speculation)")
      .def_rw("spec_draft_max", &ModelOptions::spec_draft_max, "the most guesses a step checks (prompt lookup or a draft model)")
      .def_rw("spec_draft_path", &ModelOptions::spec_draft_path, "a draft model's file (\"\": none)")
      .def_rw("spec_draft_gpu_layers", &ModelOptions::spec_draft_gpu_layers, "the draft's layers on the GPU (-2: as n_gpu_layers, -1: all)");

  nb::class_<openai::Answer>(m, "Answer", "A request running on the engine")
      .def("wait_done", [](openai::Answer& a, double timeout) {
            nb::gil_scoped_release nogil;
            return a.wait_done(millis(timeout));
          }, nb::arg("timeout"), "Waits up to timeout seconds for the end; True once it came")
      .def("whole", [](openai::Answer& a) { return a.whole().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); },
           "The whole response object (JSON text), after wait_done")
      .def("next_chunks", [](openai::Answer& a, double timeout) {
            std::vector<std::string> out;
            {
              nb::gil_scoped_release nogil;
              for (const nlohmann::json& c : a.next_chunks(millis(timeout)))
                out.push_back(c.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
            }
            return out;
          }, nb::arg("timeout"), "The stream chunks (JSON text) since the last call, waiting up to timeout seconds")
      .def_prop_ro("ended", &openai::Answer::ended, "Whether the last chunk was returned")
      .def("cancel", &openai::Answer::cancel, "Stops the generation");

  nb::class_<PyModel>(m, "Model", "A loaded model, its backend and its serving loop")
      .def("__init__", [](PyModel* self, const std::string& path, const ModelOptions& o) {
            nb::gil_scoped_release nogil;
            new (self) PyModel(path, o);
          }, nb::arg("path"), nb::arg("options"))
      .def("close", [](PyModel& s) {
            nb::gil_scoped_release nogil;
            s.close();
          }, "Stops the engine and frees the model")
      .def("tokenize", [](const PyModel& s, nb::bytes text, bool add_bos, bool special) {
            std::string t(text.c_str(), text.size());
            nb::gil_scoped_release nogil;
            return s.tokenize(t, add_bos, special);
          }, nb::arg("text"), nb::arg("add_bos") = true, nb::arg("special") = false)
      .def("detokenize", [](const PyModel& s, const std::vector<int64_t>& ids, bool special) {
            std::string text;
            {
              nb::gil_scoped_release nogil;
              text = s.detokenize(ids, special);
            }
            return nb::bytes(text.data(), text.size());
          }, nb::arg("tokens"), nb::arg("special") = false)
      .def("start", [](PyModel& s, bool chat, const std::string& body) {
            nb::gil_scoped_release nogil;
            return s.start(chat, body);
          }, nb::arg("chat"), nb::arg("body"), "Queues an OpenAI request body (JSON text)")
      .def("create_embedding", [](PyModel& s, const std::string& body) {
            nb::gil_scoped_release nogil;
            return s.create_embedding(body);
          }, nb::arg("body"), "Embeddings of an OpenAI /v1/embeddings request body (JSON text); the response (JSON text)")
      .def_prop_ro("n_ctx", &PyModel::n_ctx)
      .def_prop_ro("spec_guesses", &PyModel::spec_guesses, "speculative guesses checked and kept so far ([drafted, accepted])")
      .def_prop_ro("n_embd", &PyModel::n_embd)
      .def_prop_ro("n_vocab", &PyModel::n_vocab)
      .def_prop_ro("token_eos", &PyModel::token_eos)
      .def_prop_ro("token_bos", &PyModel::token_bos)
      .def_prop_ro("has_chat_template", &PyModel::has_chat_template)
      .def_prop_ro("architecture", &PyModel::architecture)
      .def_prop_ro("placement", &PyModel::placement);
}
