// Constrained decoding: the output must match a grammar (a JSON schema, any
// JSON object, or a GBNF grammar as llama.cpp writes them). Each step the
// grammar's state gives the set of tokens allowed next as a bitmask (bit t %
// 32 of word t / 32 set: token t allowed), the sample op draws among those
// (the allow_tokens op, core/graph.h), and the token drawn advances the
// state. The end-of-generation tokens are allowed exactly when the grammar's
// root is complete; a state that took one is terminated. The output is
// UTF-8 token by token too: a token whose bytes would not continue UTF-8
// from those before it is not allowed (XGrammar takes the UTF-16 surrogates
// for characters; byte tokens could spell them).
//
// XGrammar's C++ core does the work (its pushdown automaton, its per-token
// mask cache and its JSON-schema converter); this is the one place weir
// calls it (scripts/install-xgrammar.sh builds it).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"

namespace weir {

class Tokenizer;

struct GrammarSpec {
  enum class Kind {
    JsonObject,  // any JSON object (OpenAI's response_format json_object)
    JsonSchema,  // text: a JSON schema; strict: no properties beyond those it lists
    Gbnf,        // text: a GBNF grammar whose start rule is "root"
  };
  Kind kind = Kind::JsonObject;
  std::string text;
};

// A schema or grammar that does not compile; what() says why.
struct GrammarError : Error {
  using Error::Error;
};

// Words of an allowed-token bitmask for n_vocab tokens.
inline int64_t allow_words(int64_t n_vocab) { return (n_vocab + 31) / 32; }

class CompiledGrammar;  // opaque: a grammar compiled against one vocabulary

// Compiles grammars against a model's vocabulary (tokens are their bytes;
// control tokens are never allowed but the end-of-generation ones). Compiled
// grammars are cached by their text, so a schema sent again costs nothing.
// Thread-safe.
class GrammarCompiler {
 public:
  // n_vocab: the logits' row length (at least the tokenizer's size).
  // threads: used to compile one grammar's token masks.
  GrammarCompiler(const Tokenizer& tok, int64_t n_vocab, int threads = 4);
  ~GrammarCompiler();
  // Throws GrammarError.
  std::shared_ptr<const CompiledGrammar> compile(const GrammarSpec& spec);
  int64_t n_vocab() const { return n_vocab_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t n_vocab_;
};

// One sequence's place in a grammar.
class GrammarState {
 public:
  explicit GrammarState(std::shared_ptr<const CompiledGrammar> g);
  ~GrammarState();
  GrammarState(GrammarState&&) noexcept;
  GrammarState& operator=(GrammarState&&) noexcept;

  // The tokens allowed next, into allow_words(n_vocab) words. A token given
  // to accept_later is taken first; if the grammar refuses it, nothing is
  // allowed (all words 0) and broken() says so.
  void fill_allowed(uint32_t* words);
  // Takes the token drawn; false when the grammar does not allow it (the
  // state is then unchanged).
  bool accept(int32_t token);
  // Takes the token at the next fill_allowed, on whichever thread fills
  // (GrammarWorkers: a batch's tokens are taken in parallel too).
  void accept_later(int32_t token);
  bool broken() const;
  // An end-of-generation token was accepted: nothing more is allowed.
  bool terminated() const;
  // The root rule is complete (an end-of-generation token would be allowed).
  bool completed() const;
  // Back to the start.
  void reset();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// fill_allowed for many states at once (a batch's rows), on threads kept
// for it (started at the first batch of two or more; they sleep between
// batches).
class GrammarWorkers {
 public:
  // threads: 0 for the host's hardware threads, up to 16.
  explicit GrammarWorkers(int threads);
  ~GrammarWorkers();
  // State i's mask into rows[i].
  void fill_allowed(std::span<GrammarState* const> states, std::span<uint32_t* const> rows);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace weir
