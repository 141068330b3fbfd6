#include "text/vocab.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <initializer_list>
#include <limits>

#include "core/error.h"
#include "core/gguf.h"
#include "core/warn.h"

namespace weir {

namespace {

inline uint64_t mix(uint64_t h) {
  h ^= h >> 32;
  h *= 0xd6e8feb86659fd93ull;
  h ^= h >> 32;
  return h;
}

// A fast hash of a short byte string, 8 bytes at a time.
inline uint64_t hash_bytes(const char* p, size_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t(n) * 0xff51afd7ed558ccdull);
  while (n >= 8) {
    uint64_t k;
    std::memcpy(&k, p, 8);
    h = (h ^ k) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  if (n) {
    uint64_t k = 0;
    std::memcpy(&k, p, n);
    h = (h ^ k) * 0x94d049bb133111ebull;
  }
  return mix(h);
}

bool is_one_of(std::string_view s, std::span<const std::string_view> list) {
  for (std::string_view x : list)
    if (s == x) return true;
  return false;
}
bool is_one_of(std::string_view s, std::initializer_list<std::string_view> list) {
  return is_one_of(s, std::span<const std::string_view>(list.begin(), list.size()));
}

bool contains_any(std::string_view s, std::initializer_list<std::string_view> list) {
  for (std::string_view x : list)
    if (s.find(x) != std::string_view::npos) return true;
  return false;
}

uint16_t attr_of_type(int32_t type) {
  switch (type) {
    case TOKEN_TYPE_UNKNOWN: return TOKEN_ATTR_UNKNOWN;
    case TOKEN_TYPE_UNUSED: return TOKEN_ATTR_UNUSED;
    case TOKEN_TYPE_NORMAL: return TOKEN_ATTR_NORMAL;
    case TOKEN_TYPE_CONTROL: return TOKEN_ATTR_CONTROL;
    case TOKEN_TYPE_USER_DEFINED: return TOKEN_ATTR_USER_DEFINED;
    case TOKEN_TYPE_BYTE: return TOKEN_ATTR_BYTE;
    default: return TOKEN_ATTR_UNDEFINED;
  }
}

// The token-text lists llama.cpp (src/llama-vocab.cpp) uses to recognise
// end-of-turn, FIM and end-of-generation tokens.
constexpr std::string_view kEotTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]", "<end_of_utterance>"};
constexpr std::string_view kFimPreTexts[] = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "<|code_prefix|>", "<|prefix|>"};
constexpr std::string_view kFimSufTexts[] = {
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "<|code_suffix|>", "<|suffix|>"};
constexpr std::string_view kFimMidTexts[] = {
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "<|code_middle|>", "<|middle|>"};
constexpr std::string_view kFimPadTexts[] = {
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
constexpr std::string_view kFimRepTexts[] = {
    "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"};
constexpr std::string_view kFimSepTexts[] = {"<|file_sep|>"};
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>"};

}  // namespace

Vocab Vocab::from_gguf(const GGUFFile& f) {
  Config cfg;
  cfg.source = f.name();
  cfg.model = std::string(f.get_str("tokenizer.ggml.model"));
  cfg.pre = std::string(f.get_str_or("tokenizer.ggml.pre", ""));
  cfg.general_name = std::string(f.get_str_or("general.name", ""));
  cfg.general_arch = std::string(f.get_str_or("general.architecture", ""));

  auto id_key = [&](std::string_view key, std::optional<uint64_t>& out) {
    if (f.find(key)) out = f.get_uint(key);
  };
  id_key("tokenizer.ggml.bos_token_id", cfg.bos);
  id_key("tokenizer.ggml.eos_token_id", cfg.eos);
  id_key("tokenizer.ggml.eot_token_id", cfg.eot);
  id_key("tokenizer.ggml.eom_token_id", cfg.eom);
  id_key("tokenizer.ggml.unknown_token_id", cfg.unk);
  id_key("tokenizer.ggml.seperator_token_id", cfg.sep);  // sic: llama.cpp's spelling
  id_key("tokenizer.ggml.padding_token_id", cfg.pad);
  id_key("tokenizer.ggml.mask_token_id", cfg.mask);
  id_key("tokenizer.ggml.fim_pre_token_id", cfg.fim_pre);
  id_key("tokenizer.ggml.fim_suf_token_id", cfg.fim_suf);
  id_key("tokenizer.ggml.fim_mid_token_id", cfg.fim_mid);
  id_key("tokenizer.ggml.fim_pad_token_id", cfg.fim_pad);
  id_key("tokenizer.ggml.fim_rep_token_id", cfg.fim_rep);
  id_key("tokenizer.ggml.fim_sep_token_id", cfg.fim_sep);
  // Deprecated spellings; llama.cpp reads them last, so they win.
  id_key("tokenizer.ggml.prefix_token_id", cfg.fim_pre);
  id_key("tokenizer.ggml.suffix_token_id", cfg.fim_suf);
  id_key("tokenizer.ggml.middle_token_id", cfg.fim_mid);

  auto bool_key = [&](std::string_view key, std::optional<bool>& out) {
    if (f.find(key)) out = f.get_bool_or(key, false);
  };
  bool_key("tokenizer.ggml.add_bos_token", cfg.add_bos);
  bool_key("tokenizer.ggml.add_eos_token", cfg.add_eos);
  bool_key("tokenizer.ggml.add_sep_token", cfg.add_sep);
  bool_key("tokenizer.ggml.add_space_prefix", cfg.add_space_prefix);
  bool_key("tokenizer.ggml.remove_extra_whitespaces", cfg.remove_extra_whitespaces);

  const std::vector<std::string_view>& tokens = f.get_str_array("tokenizer.ggml.tokens");
  std::vector<float> scores;
  std::vector<int32_t> types;
  if (f.find("tokenizer.ggml.scores")) scores = f.get_f32_array("tokenizer.ggml.scores");
  if (f.find("tokenizer.ggml.token_type")) types = f.get_i32_array("tokenizer.ggml.token_type");
  if (f.find("tokenizer.ggml.scores") && scores.size() < tokens.size())
    throw Error(f.name() + ": key \"tokenizer.ggml.scores\" has " + std::to_string(scores.size()) +
                " entries, fewer than the " + std::to_string(tokens.size()) + " tokens");
  if (f.find("tokenizer.ggml.token_type") && types.size() < tokens.size())
    throw Error(f.name() + ": key \"tokenizer.ggml.token_type\" has " +
                std::to_string(types.size()) + " entries, fewer than the " +
                std::to_string(tokens.size()) + " tokens");
  return from_arrays(tokens, scores, types, cfg);
}

Vocab Vocab::from_arrays(std::span<const std::string_view> tokens, std::span<const float> scores,
                         std::span<const int32_t> types, const Config& cfg) {
  if (tokens.empty())
    throw Error(cfg.source + ": key \"tokenizer.ggml.tokens\" is empty (no vocabulary)");
  if (tokens.size() > size_t(std::numeric_limits<int32_t>::max() / 2))
    throw Error(cfg.source + ": key \"tokenizer.ggml.tokens\" has too many tokens (" +
                std::to_string(tokens.size()) + ")");
  if (!scores.empty() && scores.size() < tokens.size())
    throw Error(cfg.source + ": key \"tokenizer.ggml.scores\" has " +
                std::to_string(scores.size()) + " entries, fewer than the " +
                std::to_string(tokens.size()) + " tokens");
  if (!types.empty() && types.size() < tokens.size())
    throw Error(cfg.source + ": key \"tokenizer.ggml.token_type\" has " +
                std::to_string(types.size()) + " entries, fewer than the " +
                std::to_string(tokens.size()) + " tokens");

  Vocab v;
  v.model = cfg.model;
  v.pre = cfg.pre;
  const size_t n = tokens.size();

  // Token texts into one buffer. llama.cpp renames empty tokens "[EMPTY_<i>]".
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) total += tokens[i].empty() ? 32 : tokens[i].size();
  if (total > std::numeric_limits<uint32_t>::max())
    throw Error(cfg.source + ": key \"tokenizer.ggml.tokens\" holds more than 4 GiB of text");
  v.text_.resize(total);
  v.offsets_.resize(n + 1);
  char* out = v.text_.data();
  size_t pos = 0;
  for (size_t i = 0; i < n; ++i) {
    v.offsets_[i] = uint32_t(pos);
    std::string_view t = tokens[i];
    if (t.empty()) {
      const std::string e = "[EMPTY_" + std::to_string(i) + "]";
      std::memcpy(out + pos, e.data(), e.size());
      pos += e.size();
    } else {
      std::memcpy(out + pos, t.data(), t.size());
      pos += t.size();
    }
    v.max_len_ = std::max(v.max_len_, pos - v.offsets_[i]);
  }
  v.offsets_[n] = uint32_t(pos);
  v.text_.resize(pos);

  v.scores.assign(n, 0.0f);
  if (!scores.empty()) std::copy(scores.begin(), scores.begin() + ptrdiff_t(n), v.scores.begin());
  v.types.assign(n, TOKEN_TYPE_NORMAL);
  v.attrs.assign(n, TOKEN_ATTR_NORMAL);
  if (!types.empty()) {
    std::copy(types.begin(), types.begin() + ptrdiff_t(n), v.types.begin());
    for (size_t i = 0; i < n; ++i) v.attrs[i] = attr_of_type(v.types[i]);
  }

  v.build_index();
  v.apply_llama_cpp_rules(cfg);
  return v;
}

void Vocab::build_index() {
  const uint32_t n = uint32_t(n_tokens());
  uint32_t cap = 16;
  while (cap < 2 * n) cap <<= 1;
  mask_ = cap - 1;
  // Hash everything first (a sequential pass), then insert with the slots
  // prefetched a few tokens ahead: the table does not fit in L2, and this
  // hides most of the misses.
  std::vector<uint64_t> hashes(n);
  for (uint32_t id = 0; id < n; ++id) {
    const uint32_t b = offsets_[id];
    hashes[id] = hash_bytes(text_.data() + b, offsets_[id + 1] - b);
  }
  table_.assign(cap, 0);
  constexpr uint32_t kAhead = 16;
  for (uint32_t id = 0; id < n; ++id) {
    if (id + kAhead < n) __builtin_prefetch(&table_[uint32_t(hashes[id + kAhead]) & mask_], 1);
    const uint64_t h = hashes[id];
    const uint64_t tag = h & 0xffffffff00000000ull;
    for (uint32_t s = uint32_t(h) & mask_;; s = (s + 1) & mask_) {
      const uint64_t e = table_[s];
      if (e == 0) {
        table_[s] = tag | (id + 1);
        break;
      }
      if ((e & 0xffffffff00000000ull) == tag && text(int32_t(uint32_t(e) - 1)) == text(int32_t(id))) {
        table_[s] = tag | (id + 1);  // duplicate text: the later id wins
        break;
      }
    }
  }
}

int32_t Vocab::find(std::string_view piece) const {
  if (table_.empty()) return TOKEN_NULL;
  return find_hashed(piece, hash_bytes(piece.data(), piece.size()));
}

int32_t Vocab::find_hashed(std::string_view piece, uint64_t h) const {
  const uint64_t tag = h & 0xffffffff00000000ull;
  for (uint32_t s = uint32_t(h) & mask_;; s = (s + 1) & mask_) {
    const uint64_t e = table_[s];
    if (e == 0) return TOKEN_NULL;
    if ((e & 0xffffffff00000000ull) != tag) continue;
    const uint32_t id = uint32_t(e) - 1;
    const uint32_t b = offsets_[id], len = offsets_[id + 1] - b;
    if (len == piece.size() && std::memcmp(text_.data() + b, piece.data(), len) == 0)
      return int32_t(id);
  }
}

void Vocab::find_many(std::span<const std::string_view> pieces, int32_t* out) const {
  const size_t n = pieces.size();
  if (table_.empty()) {
    std::fill(out, out + n, TOKEN_NULL);
    return;
  }
  // Each lookup misses the cache up to three times in a row (table slot,
  // offset, text). A pipeline over the batch issues those loads for lookups
  // further ahead, so the misses of many lookups overlap: piece i+3K has its
  // slot prefetched, i+2K its offset, i+K its text, i is compared.
  constexpr size_t K = 16, kRing = 64;
  uint64_t ring[kRing];
  auto slot = [&](size_t i) -> const uint64_t& { return table_[uint32_t(ring[i % kRing]) & mask_]; };
  for (size_t i = 0; i < n + 3 * K; ++i) {
    if (i < n) {
      ring[i % kRing] = hash_bytes(pieces[i].data(), pieces[i].size());
      __builtin_prefetch(&slot(i));
    }
    if (i >= K && i - K < n) {
      const uint64_t e = slot(i - K);
      if (e) __builtin_prefetch(&offsets_[uint32_t(e) - 1]);
    }
    if (i >= 2 * K && i - 2 * K < n) {
      const uint64_t e = slot(i - 2 * K);
      if (e) __builtin_prefetch(text_.data() + offsets_[uint32_t(e) - 1]);
    }
    if (i >= 3 * K && i - 3 * K < n) {
      const size_t j = i - 3 * K;
      out[j] = find_hashed(pieces[j], ring[j % kRing]);
    }
  }
}

int Vocab::byte_value(int32_t id) const {
  if (!valid(id) || !has_attr(id, TOKEN_ATTR_BYTE)) return -1;
  const std::string_view t = text(id);
  if (t.size() == 6 && t.substr(0, 3) == "<0x" && t[5] == '>') {
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    const int hi = hex(t[3]), lo = hex(t[4]);
    if (hi >= 0 && lo >= 0) return hi * 16 + lo;
  }
  if (t.size() == 1) return uint8_t(t[0]);
  return -1;
}

bool Vocab::is_eog(int32_t id) const {
  return id != TOKEN_NULL && std::binary_search(eog.begin(), eog.end(), id);
}

// Mirrors llama_vocab::impl::load (llama.cpp, 2026): defaults per model,
// special ids from the file, text-based detection of EOT/FIM/EOG tokens with
// their attribute overrides, the special-token cache, per-model attributes.
void Vocab::apply_llama_cpp_rules(const Config& cfg) {
  const int32_t n = n_tokens();

  // Defaults per tokenizer model.
  if (model == "llama") {  // SPM
    bos = 1;
    eos = 2;
    unk = 0;
    add_space_prefix = true;
    add_bos = true;
    add_eos = false;
  } else if (model == "gpt2") {  // BPE
    bos = 11;
    eos = 11;
    add_space_prefix = false;
    // Of the pre-tokenizers weir knows, only these turn the clean-up off.
    clean_spaces = !is_one_of(pre, {"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "hunyuan",
                                    "solar-open", "deepseek-llm", "deepseek-coder", "command-r",
                                    "smollm", "trillion", "granite-docling"});
    if (is_one_of(pre, {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                        "midm-2.0", "lfm2", "jina-v5-nano", "tekken", "chameleon"}))
      add_bos = true;
    if (is_one_of(pre, {"glm4", "chatglm-bpe"})) bos = TOKEN_NULL;
    if (is_one_of(pre, {"jina-v1-en", "jina-v2-code", "roberta-bpe"})) add_sep = true;
  } else if (model == "bert") {  // WPM
    unk = 100;
    sep = 102;
    pad = 0;
    bos = 101;
    mask = 103;
    add_bos = true;
    add_sep = true;
  } else if (model == "t5") {  // UGM
    eos = 1;
    unk = 2;
    pad = 0;
    add_eos = true;
  }
  if (cfg.add_space_prefix) add_space_prefix = *cfg.add_space_prefix;
  if (cfg.remove_extra_whitespaces) remove_extra_whitespaces = *cfg.remove_extra_whitespaces;

  // Special ids from the file; an out-of-range id keeps the default, with a
  // warning naming the key (as llama.cpp does).
  auto set_id = [&](const std::optional<uint64_t>& from, int32_t& id, const char* what) {
    if (!from) return;
    if (*from < uint64_t(n)) {
      id = int32_t(*from);
      return;
    }
    warn(cfg.source + ": tokenizer.ggml." + what + "_token_id is " + std::to_string(*from) +
         ", outside the vocabulary of " + std::to_string(n) + " tokens; " +
         (id == TOKEN_NULL ? std::string("ignored") : "using id " + std::to_string(id) + " instead"));
  };
  set_id(cfg.bos, bos, "bos");
  set_id(cfg.eos, eos, "eos");
  set_id(cfg.eot, eot, "eot");
  set_id(cfg.eom, eom, "eom");
  set_id(cfg.unk, unk, "unknown");
  set_id(cfg.sep, sep, "seperator");
  set_id(cfg.pad, pad, "padding");
  set_id(cfg.mask, mask, "mask");
  set_id(cfg.fim_pre, fim_pre, "fim_pre");
  set_id(cfg.fim_suf, fim_suf, "fim_suf");
  set_id(cfg.fim_mid, fim_mid, "fim_mid");
  set_id(cfg.fim_pad, fim_pad, "fim_pad");
  set_id(cfg.fim_rep, fim_rep, "fim_rep");
  set_id(cfg.fim_sep, fim_sep, "fim_sep");
  if (cfg.add_bos) add_bos = *cfg.add_bos;
  if (cfg.add_eos) add_eos = *cfg.add_eos;
  if (cfg.add_sep) add_sep = *cfg.add_sep;

  // Text-based detection of EOT / EOM / FIM tokens. llama.cpp walks its
  // token_to_id map (one id per text: the last one), and when several texts
  // of one list are present which one it picks depends on the map's order;
  // we take the lowest id. (The EOG set does not depend on that choice: every
  // EOT text is also an EOG text.)
  auto detect = [&](int32_t& slot, std::span<const std::string_view> texts) {
    if (slot != TOKEN_NULL) return;
    for (std::string_view t : texts) {
      const int32_t id = find(t);
      if (id != TOKEN_NULL && (slot == TOKEN_NULL || id < slot)) slot = id;
    }
    if (slot != TOKEN_NULL) attrs[size_t(slot)] |= TOKEN_ATTR_CONTROL;
  };
  static constexpr std::string_view kEom[] = {"<|eom_id|>"};
  detect(eot, kEotTexts);
  detect(eom, kEom);
  detect(fim_pre, kFimPreTexts);
  detect(fim_suf, kFimSufTexts);
  detect(fim_mid, kFimMidTexts);
  detect(fim_pad, kFimPadTexts);
  detect(fim_rep, kFimRepTexts);
  detect(fim_sep, kFimSepTexts);

  // CONTROL tokens named "...unused..." are marked UNUSED.
  for (int32_t id = 0; id < n; ++id) {
    if ((attrs[size_t(id)] & TOKEN_ATTR_CONTROL) && text(id).find("unused") != std::string_view::npos)
      attrs[size_t(id)] |= TOKEN_ATTR_UNUSED;
  }

  // End-of-generation set.
  std::vector<int32_t> e;
  for (int32_t id : {fim_pad, fim_rep, fim_sep})
    if (id != TOKEN_NULL) e.push_back(id);
  for (std::string_view t : kEogTexts) {
    const int32_t id = find(t);
    if (id == TOKEN_NULL) continue;
    e.push_back(id);
    attrs[size_t(id)] |= TOKEN_ATTR_CONTROL;
  }
  // gpt-oss: these are always rendered.
  for (std::string_view t : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
    const int32_t id = find(t);
    if (id != TOKEN_NULL) attrs[size_t(id)] = TOKEN_ATTR_USER_DEFINED;
  }
  for (int32_t id : {eos, eot, eom})
    if (valid(id)) e.push_back(id);  // a default id (eos = 2, 11 ...) can be past a small vocabulary
  std::sort(e.begin(), e.end());
  e.erase(std::unique(e.begin(), e.end()), e.end());
  eog = std::move(e);

  auto eog_id_with_text = [&](std::string_view t) -> int32_t {
    for (int32_t id : eog)
      if (text(id) == t) return id;
    return TOKEN_NULL;
  };
  auto eog_erase = [&](int32_t id) { eog.erase(std::find(eog.begin(), eog.end(), id)); };
  // o200k_harmony / solar-open: "<|end|>" is not EOG when "<|return|>" and
  // "<|call|>" (or "<|calls|>" and "<|flush|>") are.
  {
    const bool has_return = eog_id_with_text("<|return|>") != TOKEN_NULL;
    const bool has_call = eog_id_with_text("<|call|>") != TOKEN_NULL ||
                          eog_id_with_text("<|calls|>") != TOKEN_NULL;
    const bool has_flush = eog_id_with_text("<|flush|>") != TOKEN_NULL;
    const int32_t end_id = eog_id_with_text("<|end|>");
    if (end_id != TOKEN_NULL && has_call && (has_return || has_flush)) {
      eog_erase(end_id);
      attrs[size_t(end_id)] = TOKEN_ATTR_USER_DEFINED;
    }
  }
  // gemma4 / paddleocr: "</s>" is not EOG when "<|tool_response>" is.
  {
    const int32_t s_id = eog_id_with_text("</s>");
    if (s_id != TOKEN_NULL && eog_id_with_text("<|tool_response>") != TOKEN_NULL) {
      eog_erase(s_id);
      attrs[size_t(s_id)] = TOKEN_ATTR_NORMAL;
    }
  }

  // Special-token cache: same input order and same (unstable) std::sort call
  // as llama.cpp, so ties between equal-length texts break the same way.
  special_tokens.clear();
  for (int32_t id = 0; id < n; ++id)
    if (attrs[size_t(id)] & (TOKEN_ATTR_CONTROL | TOKEN_ATTR_USER_DEFINED | TOKEN_ATTR_UNKNOWN))
      special_tokens.push_back(id);
  std::sort(special_tokens.begin(), special_tokens.end(), [&](int32_t a, int32_t b) {
    return text(a).size() > text(b).size();
  });

  // Per-model attributes (LSTRIP / RSTRIP).
  {
    std::string name = cfg.general_name;
    for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
    auto set_attr = [&](std::string_view t, uint16_t a, bool on) {
      const int32_t id = find(t);
      if (id == TOKEN_NULL) return;
      attrs[size_t(id)] = on ? uint16_t(attrs[size_t(id)] | a) : uint16_t(attrs[size_t(id)] & ~a);
    };
    if (contains_any(pre, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) ||
        contains_any(cfg.general_arch, {"nomic-bert-moe", "jina-bert-v3"})) {
      set_attr("<mask>", TOKEN_ATTR_LSTRIP, true);
    } else if (contains_any(name, {"phi-3", "phi3"})) {
      for (int32_t id : special_tokens) attrs[size_t(id)] |= TOKEN_ATTR_RSTRIP;
      set_attr("</s>", TOKEN_ATTR_RSTRIP, true);
      for (std::string_view t : {"<unk>", "<s>", "<|endoftext|>"})
        set_attr(t, TOKEN_ATTR_RSTRIP, false);
    } else if (contains_any(name, {"modern-bert"})) {
      set_attr("[MASK]", TOKEN_ATTR_LSTRIP, true);
    }
  }

  // Byte fallback table (llama.cpp byte_to_token): "<0xXX>", else the
  // one-byte text. llama.cpp throws when neither exists; we fall back to unk.
  static const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const char buf[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
    int32_t id = find(std::string_view(buf, 6));
    if (id == TOKEN_NULL) {
      const char c = char(b);
      id = find(std::string_view(&c, 1));
    }
    byte_tokens_[b] = id == TOKEN_NULL ? unk : id;
  }
}

}  // namespace weir
