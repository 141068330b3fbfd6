#include "engine/grammar/grammar.h"

#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <exception>
#include <optional>
#include <utility>

#include "text/tokenizer.h"

namespace weir {

namespace {

// UTF-8 token by token. XGrammar's character classes take the UTF-16
// surrogates (U+D800 to U+DFFF) as characters, and a vocabulary's byte
// tokens can spell them (ED A0 80), which is not UTF-8: so beside the
// grammar's mask each state also masks the tokens that would not continue
// UTF-8 from the bytes so far. A state is what the next byte must be: any
// (between characters), or a continuation byte in [lo, hi] with `need`
// continuation bytes left; 8 of them. For each state, the tokens allowed
// and the state after each token.
struct Utf8Step {
  int need;
  uint8_t lo, hi;
};
constexpr Utf8Step kUtf8States[] = {{0, 0, 0},       {1, 0x80, 0xBF}, {2, 0xA0, 0xBF}, {2, 0x80, 0xBF},
                                    {2, 0x80, 0x9F}, {3, 0x90, 0xBF}, {3, 0x80, 0xBF}, {3, 0x80, 0x8F}};
constexpr int kUtf8StateCount = 8;
constexpr uint8_t kNotUtf8 = 0xFF;

int utf8_state(int need, uint8_t lo, uint8_t hi) {
  for (int s = 0; s < kUtf8StateCount; ++s)
    if (kUtf8States[s].need == need && kUtf8States[s].lo == lo && kUtf8States[s].hi == hi) return s;
  return -1;
}

// The state after byte b from state s, or kNotUtf8.
uint8_t utf8_next(int s, uint8_t b) {
  const Utf8Step& st = kUtf8States[s];
  if (st.need > 0) {
    if (b < st.lo || b > st.hi) return kNotUtf8;
    return uint8_t(st.need == 1 ? 0 : utf8_state(st.need - 1, 0x80, 0xBF));
  }
  if (b < 0x80) return 0;
  if (b >= 0xC2 && b <= 0xDF) return uint8_t(utf8_state(1, 0x80, 0xBF));
  if (b == 0xE0) return uint8_t(utf8_state(2, 0xA0, 0xBF));
  if (b == 0xED) return uint8_t(utf8_state(2, 0x80, 0x9F));
  if (b >= 0xE1 && b <= 0xEF) return uint8_t(utf8_state(2, 0x80, 0xBF));
  if (b == 0xF0) return uint8_t(utf8_state(3, 0x90, 0xBF));
  if (b >= 0xF1 && b <= 0xF3) return uint8_t(utf8_state(3, 0x80, 0xBF));
  if (b == 0xF4) return uint8_t(utf8_state(3, 0x80, 0x8F));
  return kNotUtf8;
}

}  // namespace

struct Utf8Tokens {
  Utf8Tokens(const Tokenizer& tok, int64_t n_vocab) : words(allow_words(n_vocab)) {
    const Vocab& v = tok.vocab();
    for (int s = 0; s < kUtf8StateCount; ++s) {
      next[s].assign(size_t(n_vocab), kNotUtf8);
      allowed[s].assign(size_t(words), 0u);
    }
    for (int32_t id = 0; id < v.n_tokens(); ++id) {
      const std::string piece = v.is_eog(id) ? std::string() : tok.token_to_piece(id, false);
      for (int s = 0; s < kUtf8StateCount; ++s) {
        if (v.is_eog(id) && s != 0) continue;  // the output ends between characters
        int at = s;
        for (char c : piece) {
          const uint8_t n = utf8_next(at, static_cast<uint8_t>(c));
          if (n == kNotUtf8) {
            at = -1;
            break;
          }
          at = n;
        }
        if (at < 0) continue;
        next[s][size_t(id)] = uint8_t(at);
        allowed[s][size_t(id) / 32] |= 1u << (id % 32);
      }
    }
  }
  int64_t words;
  std::vector<uint8_t> next[kUtf8StateCount];
  std::vector<uint32_t> allowed[kUtf8StateCount];
};

class CompiledGrammar {
 public:
  CompiledGrammar(xgrammar::CompiledGrammar g, std::shared_ptr<const Utf8Tokens> utf8)
      : g(std::move(g)), utf8(std::move(utf8)) {}
  xgrammar::CompiledGrammar g;
  std::shared_ptr<const Utf8Tokens> utf8;
};

namespace {

// A 2-D int32 tensor over host memory, as XGrammar takes bitmasks.
struct BitmaskView {
  int64_t shape[2];
  DLTensor t{};
  BitmaskView(uint32_t* words, int64_t rows, int64_t row_words) : shape{rows, row_words} {
    t.data = words;
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = rows == 1 ? 1 : 2;
    t.dtype = xgrammar::GetBitmaskDLType();
    t.shape = rows == 1 ? shape + 1 : shape;
    t.strides = nullptr;
    t.byte_offset = 0;
  }
};

xgrammar::TokenizerInfo tokenizer_info(const Tokenizer& tok, int64_t n_vocab) {
  const Vocab& v = tok.vocab();
  std::vector<std::string> pieces(size_t(v.n_tokens()));
  std::vector<int32_t> stops;
  for (int32_t id = 0; id < v.n_tokens(); ++id) {
    if (v.is_eog(id)) {
      stops.push_back(id);
      pieces[size_t(id)] = tok.token_to_piece(id, true);  // (its text matters not: a stop token)
      if (pieces[size_t(id)].empty()) pieces[size_t(id)] = "<eog>";
      continue;
    }
    // "" marks a token XGrammar never allows (control and unknown tokens).
    pieces[size_t(id)] = tok.token_to_piece(id, false);
  }
  if (stops.empty()) throw GrammarError("grammar: the vocabulary has no end-of-generation token");
  return xgrammar::TokenizerInfo(pieces, xgrammar::VocabType::RAW, int(std::max<int64_t>(n_vocab, v.n_tokens())),
                                 stops, false);
}

}  // namespace

// XGrammar's compiler, made on the first compile (its vocabulary's trie
// takes a while for a large vocabulary, and most runs never need it).
struct GrammarCompiler::Impl {
  Impl(const Tokenizer& tok, int threads) : tok(tok), threads(std::max(1, threads)) {}
  const Tokenizer& tok;
  int threads;
  std::mutex m;
  std::optional<xgrammar::GrammarCompiler> made;
  std::shared_ptr<const Utf8Tokens> utf8;
  xgrammar::GrammarCompiler& get(int64_t n_vocab) {
    std::lock_guard<std::mutex> lk(m);
    if (!made) {
      made.emplace(tokenizer_info(tok, n_vocab), threads, true);
      utf8 = std::make_shared<const Utf8Tokens>(tok, n_vocab);
    }
    return *made;
  }
};

GrammarCompiler::GrammarCompiler(const Tokenizer& tok, int64_t n_vocab, int threads)
    : impl_(std::make_unique<Impl>(tok, threads)), n_vocab_(std::max<int64_t>(n_vocab, tok.vocab().n_tokens())) {}

GrammarCompiler::~GrammarCompiler() = default;

std::shared_ptr<const CompiledGrammar> GrammarCompiler::compile(const GrammarSpec& spec) {
  try {
    xgrammar::GrammarCompiler& compiler = impl_->get(n_vocab_);
    switch (spec.kind) {
      case GrammarSpec::Kind::JsonObject:
        // Any object: a schema of type object, other properties allowed
        // (XGrammar's JSON rules: its mask cache covers them; a grammar of
        // the same language written in GBNF here ran 30 times slower).
        return std::make_shared<CompiledGrammar>(
            compiler.CompileJSONSchema(R"({"type": "object"})", false, std::nullopt, std::nullopt, false), impl_->utf8);
      case GrammarSpec::Kind::JsonSchema:
        // Compact JSON (", " and ": " between items, no other whitespace):
        // a model cannot wander off in blanks.
        return std::make_shared<CompiledGrammar>(
            compiler.CompileJSONSchema(spec.text, false, std::nullopt, std::nullopt, true), impl_->utf8);
      case GrammarSpec::Kind::Gbnf:
        return std::make_shared<CompiledGrammar>(compiler.CompileGrammar(spec.text, "root"), impl_->utf8);
    }
  } catch (const std::exception& e) {
    std::string why = e.what();
    // XGrammar's messages begin with its source file and line ("/.../grammar_parser.cc:820: ").
    if (const size_t cc = why.find(".cc:"); cc != std::string::npos)
      if (const size_t colon = why.find(": ", cc + 4); colon != std::string::npos && colon < cc + 16)
        why = why.substr(colon + 2);
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    throw GrammarError(why.empty() ? "the grammar does not compile" : why);
  }
  throw GrammarError("unknown grammar kind");
}

struct GrammarState::Impl {
  explicit Impl(const std::shared_ptr<const CompiledGrammar>& g)
      : grammar(g), matcher(g->g), words(allow_words(g->g.GetTokenizerInfo().GetVocabSize())) {}
  std::shared_ptr<const CompiledGrammar> grammar;  // keeps the compiled grammar alive
  xgrammar::GrammarMatcher matcher;
  int64_t words;  // of a mask
  int utf8 = 0;   // the UTF-8 state after the tokens so far (Utf8Tokens)
  int32_t pending = -1;  // accept_later's token
  bool broken = false;   // the grammar refused a pending token
};

GrammarState::GrammarState(std::shared_ptr<const CompiledGrammar> g) : impl_(std::make_unique<Impl>(g)) {}
GrammarState::~GrammarState() = default;
GrammarState::GrammarState(GrammarState&&) noexcept = default;
GrammarState& GrammarState::operator=(GrammarState&&) noexcept = default;

void GrammarState::accept_later(int32_t token) { impl_->pending = token; }
bool GrammarState::broken() const { return impl_->broken; }

void GrammarState::fill_allowed(uint32_t* words) {
  if (impl_->pending >= 0 || impl_->broken) {
    const int32_t t = impl_->pending;
    impl_->pending = -1;
    if (impl_->broken || !accept(t)) {
      impl_->broken = true;
      std::fill_n(words, impl_->words, 0u);
      return;
    }
  }
  BitmaskView v(words, 1, impl_->words);
  impl_->matcher.FillNextTokenBitmask(&v.t);
  const uint32_t* utf8 = impl_->grammar->utf8->allowed[impl_->utf8].data();
  for (int64_t i = 0; i < impl_->words; ++i) words[i] &= utf8[i];
}

bool GrammarState::accept(int32_t token) {
  const Utf8Tokens& u = *impl_->grammar->utf8;
  if (token < 0 || size_t(token) >= u.next[0].size() || u.next[impl_->utf8][size_t(token)] == kNotUtf8) return false;
  if (!impl_->matcher.AcceptToken(token)) return false;
  impl_->utf8 = u.next[impl_->utf8][size_t(token)];
  return true;
}
bool GrammarState::terminated() const { return impl_->matcher.IsTerminated(); }
bool GrammarState::completed() const { return impl_->matcher.IsCompleted(); }
void GrammarState::reset() {
  impl_->matcher.Reset();
  impl_->utf8 = 0;
  impl_->pending = -1;
  impl_->broken = false;
}

struct GrammarWorkers::Impl {
  std::mutex m;
  std::condition_variable start, done;
  std::vector<std::thread> threads;  // started at the first batch (most servers never constrain an answer)
  int want = 1;                      // threads in all, this one included
  uint64_t batch = 0;  // bumped for each batch
  bool stopping = false;
  // The batch at hand.
  std::span<GrammarState* const> states;
  std::span<uint32_t* const> rows;
  std::atomic<size_t> next{0};
  size_t busy = 0;  // workers still on the batch
  std::exception_ptr error;

  // Takes rows until none is left.
  void work() {
    for (size_t i; (i = next.fetch_add(1)) < states.size();) {
      try {
        states[i]->fill_allowed(rows[i]);
      } catch (...) {
        std::lock_guard<std::mutex> lk(m);
        if (!error) error = std::current_exception();
      }
    }
  }
  void loop() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(m);
        start.wait(lk, [&] { return stopping || batch != seen; });
        if (stopping) return;
        seen = batch;
      }
      work();
      std::lock_guard<std::mutex> lk(m);
      if (--busy == 0) done.notify_one();
    }
  }
};

GrammarWorkers::GrammarWorkers(int threads) : impl_(std::make_unique<Impl>()) {
  if (threads <= 0) threads = int(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1u, 16u));
  impl_->want = threads;
}

GrammarWorkers::~GrammarWorkers() {
  {
    std::lock_guard<std::mutex> lk(impl_->m);
    impl_->stopping = true;
  }
  impl_->start.notify_all();
  for (std::thread& t : impl_->threads) t.join();
}

void GrammarWorkers::fill_allowed(std::span<GrammarState* const> states, std::span<uint32_t* const> rows) {
  if (rows.size() != states.size()) throw Error("grammar: a mask row for each state");
  Impl& w = *impl_;
  if (states.size() >= 2 && w.threads.empty())
    for (int i = 1; i < w.want; ++i) w.threads.emplace_back([this] { impl_->loop(); });
  if (states.size() < 2 || w.threads.empty()) {
    for (size_t i = 0; i < states.size(); ++i) states[i]->fill_allowed(rows[i]);
    return;
  }
  {
    std::lock_guard<std::mutex> lk(w.m);
    w.states = states, w.rows = rows;
    w.next = 0;
    w.error = nullptr;
    w.busy = w.threads.size();
    ++w.batch;
  }
  w.start.notify_all();
  w.work();  // this thread too
  std::unique_lock<std::mutex> lk(w.m);
  w.done.wait(lk, [&] { return w.busy == 0; });
  if (w.error) std::rethrow_exception(w.error);
}

}  // namespace weir
