// The pre-tokenizers weir knows: each kind's regex cascade, and the
// tokenizer.ggml.pre names that choose it. Facts from llama.cpp
// (llama_vocab::impl::load maps names to kinds, llm_tokenizer_bpe gives each
// kind its regexes) and from the models' tokenizer.json files.
#include <string>

#include "core/error.h"
#include "text/pretokenizer.h"

namespace weir {

namespace {

// The regexes, as llama.cpp's llm_tokenizer_bpe spells them (tokenizer.json's
// "(?i:'s|...)" written as "(?:'[sS]|...)"), non-ASCII characters written as
// \x{...}: a copy of DeepSeek's letter list as characters is easily
// NFC-normalized on the way, which turns U+1F7D, U+1FBE, U+1FD3, U+1FDB,
// U+2126 and U+212A into other letters (and two ranges out of order).
constexpr std::string_view kPreGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
constexpr std::string_view kPreLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Qwen2 differs from llama3 only in taking digits one at a time.
constexpr std::string_view kPreQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// Cascades: each regex splits the words the one before it made.
constexpr std::string_view kPreDefault[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+",
    kPreGpt2,
    "\\p{N}+",
    "[0-9][0-9][0-9]",
};
// Falcon: punctuation runs (backquote included) first, then GPT-2's, then
// digits in threes.
constexpr std::string_view kPreFalcon[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|`]+",
    kPreGpt2,
    "[0-9][0-9][0-9]",
};
// StarCoder, Refact, Command-R, SmolLM ...: every digit alone, then GPT-2's.
constexpr std::string_view kPreStarcoder[] = {
    "\\p{N}",
    kPreGpt2,
};
// DeepSeek LLM: line breaks alone; letters of the cased scripts (an explicit
// list) with one white space before them; ASCII and full-width punctuation;
// trailing white space; CJK and Hangul runs; digit runs.
constexpr std::string_view kPreDeepseekLlm[] = {
    "[\r\n]",
    "\\s?["
    "A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}"
    "\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}"
    "\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}"
    "\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}"
    "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}"
    "\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}"
    "\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}"
    "\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}"
    "\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}"
    "\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}"
    "\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}"
    "\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}"
    "\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}"
    "\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}"
    "\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}"
    "\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}"
    "\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}"
    "]+",
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
    "\\s+$",
    "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+",
    "\\p{N}+",
};
// DeepSeek Coder: line breaks alone; letters and punctuation runs, each with
// one white space before them; CJK and Hangul runs; every digit alone.
constexpr std::string_view kPreDeepseekCoder[] = {
    "[\r\n]",
    "\\s?\\p{L}+",
    "\\s?\\p{P}+",
    "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+",
    "\\p{N}",
};

using Kind = PreTokenizer::Kind;

// Every tokenizer.ggml.pre value llama.cpp maps to one of these kinds, with
// its ignore_merges (llama_vocab::impl::load, llama.cpp 2026).
constexpr PreTokenizer::Name kNames[] = {
    {"default", Kind::Default, false},
    // GPT-2's regex.
    {"gpt-2", Kind::Gpt2, false},
    {"gpt2", Kind::Gpt2, false},  // a spelling llama.cpp refuses; weir takes it
    {"phi-2", Kind::Gpt2, false},
    {"jina-es", Kind::Gpt2, false},
    {"jina-de", Kind::Gpt2, false},
    {"gigachat", Kind::Gpt2, false},
    {"jina-v2-es", Kind::Gpt2, false},
    {"jina-v2-de", Kind::Gpt2, false},
    {"a.x-4.0", Kind::Gpt2, false},
    {"mellum", Kind::Gpt2, false},
    {"modern-bert", Kind::Gpt2, false},
    {"jina-v1-en", Kind::Gpt2, false},
    {"jina-v2-code", Kind::Gpt2, false},
    {"roberta-bpe", Kind::Gpt2, false},
    {"exaone4", Kind::Gpt2, false},
    {"mpt", Kind::Gpt2, false},
    {"olmo", Kind::Gpt2, false},
    {"jais", Kind::Gpt2, false},
    {"trillion", Kind::Gpt2, false},
    {"granite-docling", Kind::Gpt2, false},
    // Llama 3's regex; these take whole-word tokens without merging.
    {"llama3", Kind::Llama3, true},
    {"llama-v3", Kind::Llama3, true},
    {"llama-bpe", Kind::Llama3, true},
    {"falcon3", Kind::Llama3, true},
    {"falcon-h1", Kind::Llama3, true},
    {"pixtral", Kind::Llama3, true},
    {"midm-2.0", Kind::Llama3, true},
    {"lfm2", Kind::Llama3, true},
    {"jina-v5-nano", Kind::Llama3, true},
    // Llama 3's regex, merging as usual.
    {"dbrx", Kind::Llama3, false},
    {"smaug-bpe", Kind::Llama3, false},
    {"glm4", Kind::Llama3, false},
    {"chatglm-bpe", Kind::Llama3, false},
    // Qwen2's regex.
    {"qwen2", Kind::Qwen2, false},
    {"deepseek-r1-qwen", Kind::Qwen2, false},
    {"kormo", Kind::Qwen2, false},
    {"f2llmv2", Kind::Qwen2, false},
    {"megrez", Kind::Qwen2, false},
    {"stablelm2", Kind::Qwen2, false},
    {"hunyuan", Kind::Qwen2, false},
    {"solar-open", Kind::Qwen2, false},
    // Falcon's cascade.
    {"falcon", Kind::Falcon, false},
    // StarCoder's cascade.
    {"starcoder", Kind::Starcoder, false},
    {"refact", Kind::Starcoder, false},
    {"command-r", Kind::Starcoder, false},
    {"smollm", Kind::Starcoder, false},
    {"codeshell", Kind::Starcoder, false},
    {"exaone", Kind::Starcoder, false},
    {"minerva-7b", Kind::Starcoder, false},
    {"mellum2", Kind::Starcoder, false},
    // DeepSeek's own.
    {"deepseek-llm", Kind::DeepseekLlm, false},
    {"deepseek-coder", Kind::DeepseekCoder, false},
};

}  // namespace

std::span<const PreTokenizer::Name> PreTokenizer::known_names() { return kNames; }

PreTokenizer::Name PreTokenizer::lookup(std::string_view pre) {
  if (pre.empty()) return kNames[0];
  for (const Name& n : kNames)
    if (n.pre == pre) return n;
  std::string known;
  for (const Name& n : kNames)
    known.append(known.empty() ? "\"" : ", \"").append(n.pre).append("\"");
  throw Error("tokenizer.ggml.pre \"" + std::string(pre) +
              "\" is not a supported pre-tokenizer (supported: " + known + ", or no key)");
}

std::vector<std::string_view> PreTokenizer::patterns(Kind kind) {
  switch (kind) {
    case Kind::Gpt2: return {kPreGpt2};
    case Kind::Llama3: return {kPreLlama3};
    case Kind::Qwen2: return {kPreQwen2};
    case Kind::Falcon: return {std::begin(kPreFalcon), std::end(kPreFalcon)};
    case Kind::Starcoder: return {std::begin(kPreStarcoder), std::end(kPreStarcoder)};
    case Kind::DeepseekLlm: return {std::begin(kPreDeepseekLlm), std::end(kPreDeepseekLlm)};
    case Kind::DeepseekCoder: return {std::begin(kPreDeepseekCoder), std::end(kPreDeepseekCoder)};
    case Kind::Default: break;
  }
  return {std::begin(kPreDefault), std::end(kPreDefault)};
}

std::string_view PreTokenizer::name(Kind kind) {
  switch (kind) {
    case Kind::Gpt2: return "gpt2";
    case Kind::Llama3: return "llama3";
    case Kind::Qwen2: return "qwen2";
    case Kind::Falcon: return "falcon";
    case Kind::Starcoder: return "starcoder";
    case Kind::DeepseekLlm: return "deepseek-llm";
    case Kind::DeepseekCoder: return "deepseek-coder";
    case Kind::Default: break;
  }
  return "default";
}

}  // namespace weir
