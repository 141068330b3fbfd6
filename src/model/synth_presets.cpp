#include "model/synth_presets.h"

#include <tuple>

#include "core/error.h"

namespace weir {
namespace {

std::vector<SynthPreset> make_presets() {
  std::vector<SynthPreset> v;
  auto llama3 = [](std::string name, std::string display, int64_t E, int64_t L, int64_t H, int64_t F,
                   bool tied, float rope_factor, bool head_dim_key) {
    SynthPreset p;
    p.name = std::move(name);
    p.arch = "llama";
    p.display_name = std::move(display);
    p.n_vocab = 128256;
    p.n_ctx_train = 131072;
    p.n_embd = E;
    p.n_layer = L;
    p.n_head = H;
    p.n_head_kv = 8;
    p.head_dim = E / H;
    p.n_ff = F;
    p.rms_eps = 1e-5f;
    p.rope_base = 500000.0f;
    p.tied_embeddings = tied;
    p.write_head_dim = head_dim_key;  // config.json has head_dim (3.2) or not (3.1)
    p.write_rope_dim = true;
    p.write_vocab_size = true;
    p.rope_llama3_factor = rope_factor;
    return p;
  };
  // meta-llama/Llama-3.2-1B, -3B: tied embeddings, rope_scaling llama3 factor 32.
  v.push_back(llama3("llama-3.2-1b", "Llama 3.2 1B", 2048, 16, 32, 8192, true, 32.0f, true));
  v.push_back(llama3("llama-3.2-3b", "Llama 3.2 3B", 3072, 28, 24, 8192, true, 32.0f, true));
  // meta-llama/Llama-3.1-8B, -70B: separate output matrix, rope_scaling llama3 factor 8.
  v.push_back(llama3("llama-3.1-8b", "Llama 3.1 8B", 4096, 32, 32, 14336, false, 8.0f, false));
  v.push_back(llama3("llama-3.1-70b", "Llama 3.1 70B", 8192, 80, 64, 28672, false, 8.0f, false));
  {
    // Qwen/Qwen2.5-7B-Instruct: q/k/v biases, separate output matrix.
    SynthPreset p;
    p.name = "qwen2.5-7b";
    p.arch = "qwen2";
    p.display_name = "Qwen2.5 7B";
    p.n_vocab = 152064;
    p.n_ctx_train = 32768;
    p.n_embd = 3584;
    p.n_layer = 28;
    p.n_head = 28;
    p.n_head_kv = 4;
    p.head_dim = 128;
    p.n_ff = 18944;
    p.rms_eps = 1e-6f;
    p.rope_base = 1000000.0f;
    p.qkv_bias = true;
    v.push_back(p);
  }
  {
    // Qwen/Qwen3-8B: per-head q/k RMS norms, head_dim 128 written explicitly.
    SynthPreset p;
    p.name = "qwen3-8b";
    p.arch = "qwen3";
    p.display_name = "Qwen3 8B";
    p.n_vocab = 151936;
    p.n_ctx_train = 40960;
    p.n_embd = 4096;
    p.n_layer = 36;
    p.n_head = 32;
    p.n_head_kv = 8;
    p.head_dim = 128;
    p.n_ff = 12288;
    p.rms_eps = 1e-6f;
    p.rope_base = 1000000.0f;
    p.write_head_dim = true;
    p.qk_norm = true;
    v.push_back(p);
  }
  {
    // Qwen/Qwen3-30B-A3B: qwen3's attention, 128 experts of 768, 8 a token.
    SynthPreset p;
    p.name = "qwen3-30b-a3b";
    p.arch = "qwen3moe";
    p.display_name = "Qwen3 30B A3B";
    p.n_vocab = 151936;
    p.n_ctx_train = 40960;
    p.n_embd = 2048;
    p.n_layer = 48;
    p.n_head = 32;
    p.n_head_kv = 4;
    p.head_dim = 128;
    p.n_ff = 6144;
    p.rms_eps = 1e-6f;
    p.rope_base = 1000000.0f;
    p.write_head_dim = true;
    p.qk_norm = true;
    p.n_expert = 128;
    p.n_expert_used = 8;
    p.n_ff_exp = 768;
    p.write_ff_exp = true;
    v.push_back(p);
  }
  {
    // mistralai/Mixtral-8x7B-v0.1: llama with 8 experts of 14336, 2 a token.
    SynthPreset p;
    p.name = "mixtral-8x7b";
    p.arch = "llama";
    p.display_name = "Mixtral 8x7B";
    p.n_vocab = 32000;
    p.n_ctx_train = 32768;
    p.n_embd = 4096;
    p.n_layer = 32;
    p.n_head = 32;
    p.n_head_kv = 8;
    p.head_dim = 128;
    p.n_ff = 14336;
    p.rms_eps = 1e-5f;
    p.rope_base = 1000000.0f;
    p.write_vocab_size = true;
    p.write_rope_dim = true;
    p.n_expert = 8;
    p.n_expert_used = 2;
    p.n_ff_exp = 14336;
    v.push_back(p);
  }
  {
    // google/gemma-3-270m (keys as in the llama.cpp-converted GGUF).
    SynthPreset p;
    p.name = "gemma3-270m";
    p.arch = "gemma3";
    p.display_name = "Gemma 3 270m";
    p.n_vocab = 262144;
    p.n_ctx_train = 32768;
    p.n_embd = 640;
    p.n_layer = 18;
    p.n_head = 4;
    p.n_head_kv = 1;
    p.head_dim = 256;
    p.n_ff = 2048;
    p.rms_eps = 1e-6f;
    p.rope_base = 1000000.0f;
    p.tied_embeddings = true;
    p.write_head_dim = true;
    p.qk_norm = true;
    p.post_norms = true;
    p.n_swa = 512;
    v.push_back(p);
  }
  {
    // google/gemma-2-9b (keys as llama.cpp's converter writes them): head_dim
    // 256 (n_head * head_dim 4096 != n_embd), sliding window 4096 on every
    // other layer, soft-capped attention scores (50) and logits (30).
    SynthPreset p;
    p.name = "gemma-2-9b";
    p.arch = "gemma2";
    p.display_name = "Gemma 2 9B";
    p.n_vocab = 256000;
    p.n_ctx_train = 8192;
    p.n_embd = 3584;
    p.n_layer = 42;
    p.n_head = 16;
    p.n_head_kv = 8;
    p.head_dim = 256;
    p.n_ff = 14336;
    p.rms_eps = 1e-6f;
    p.rope_base = 10000.0f;
    p.tied_embeddings = true;
    p.write_head_dim = true;
    p.post_norms = true;
    p.n_swa = 4096;
    p.attn_softcap = 50.0f;
    p.final_softcap = 30.0f;
    v.push_back(p);
  }
  auto phi3 = [](std::string name, std::string display, int64_t V, int64_t ctx, int64_t E, int64_t L, int64_t H,
                 int64_t Hkv, int64_t F, float rope_base, int64_t swa) {
    SynthPreset p;
    p.name = std::move(name);
    p.arch = "phi3";
    p.display_name = std::move(display);
    p.n_vocab = V;
    p.n_ctx_train = ctx;
    p.rope_orig_ctx = ctx;  // original_max_position_embeddings = max_position_embeddings
    p.n_embd = E;
    p.n_layer = L;
    p.n_head = H;
    p.n_head_kv = Hkv;
    p.head_dim = E / H;
    p.n_ff = F;
    p.rms_eps = 1e-5f;
    p.rope_base = rope_base;
    p.write_rope_dim = true;
    p.n_swa = swa;  // written by llama.cpp's converter, unused (model/llama_family.cpp)
    p.fused_qkv = true;
    p.fused_gate_up = true;
    return p;
  };
  // microsoft/Phi-3-mini-4k-instruct: MHA, head_dim 96, sliding_window 2047.
  v.push_back(phi3("phi-3-mini", "Phi 3 Mini 4k", 32064, 4096, 3072, 32, 32, 32, 8192, 10000.0f, 2047));
  // microsoft/phi-4: GQA 40:10, head_dim 128, rope_theta 250000, no sliding window.
  v.push_back(phi3("phi-4", "Phi 4", 100352, 16384, 5120, 40, 40, 10, 17920, 250000.0f, 0));
  {
    // BAAI/bge-small-en-v1.5: BERT, 12 layers of 384, 12 heads, FFN 1536,
    // 512 positions, CLS pooling (33,212,160 weights in the GGUF: the HF
    // model's 33.4M less its pooler, which the converter drops).
    SynthPreset p;
    p.name = "bge-small";
    p.arch = "bert";
    p.display_name = "bge small en v1.5";
    p.n_vocab = 30522;
    p.n_ctx_train = 512;
    p.n_embd = 384;
    p.n_layer = 12;
    p.n_head = 12;
    p.n_head_kv = 12;
    p.head_dim = 32;
    p.n_ff = 1536;
    p.pooling_type = 2;
    v.push_back(p);
  }
  {
    // nomic-ai/nomic-embed-text-v1.5: nomic-bert, 12 layers of 768, 12
    // heads, SwiGLU FFN 3072, rope base 1000, 2048 context, mean pooling;
    // the converter pads the vocabulary to the embedding's 30528 rows
    // (136,731,648 weights).
    SynthPreset p;
    p.name = "nomic-embed-text";
    p.arch = "nomic-bert";
    p.display_name = "nomic embed text v1.5";
    p.n_vocab = 30528;
    p.n_ctx_train = 2048;
    p.n_embd = 768;
    p.n_layer = 12;
    p.n_head = 12;
    p.n_head_kv = 12;
    p.head_dim = 64;
    p.n_ff = 3072;
    p.rope_base = 1000.0f;
    p.pooling_type = 1;
    v.push_back(p);
  }
  // openai/gpt-oss-20b, -120b (config.json): 64 heads of 64 / 8 KV heads,
  // experts of 2880 with biases (MXFP4 in the published files), 4 a token,
  // attention sinks, every other layer a 128-token window, YaRN x32 from 4096.
  for (const auto& [name, display, layers, experts] :
       {std::tuple{"gpt-oss-20b", "gpt-oss 20B", 24, 32}, std::tuple{"gpt-oss-120b", "gpt-oss 120B", 36, 128}}) {
    SynthPreset p;
    p.name = name;
    p.arch = "gpt-oss";
    p.display_name = display;
    p.n_vocab = 201088;
    p.n_ctx_train = 131072;
    p.n_embd = 2880;
    p.n_layer = layers;
    p.n_head = 64;
    p.n_head_kv = 8;
    p.head_dim = 64;
    p.n_ff = 2880;
    p.rms_eps = 1e-5f;
    p.rope_base = 150000.0f;
    p.write_head_dim = true;
    p.n_swa = 128;
    p.n_expert = experts;
    p.n_expert_used = 4;
    p.n_ff_exp = 2880;
    p.write_ff_exp = true;
    p.rope_yarn_factor = 32.0f;
    p.rope_orig_ctx = 4096;
    v.push_back(p);
  }
  // Tiny models for tests: every feature of the architecture, small dims
  // (multiples of 256 where K-quants need them).
  for (const SynthPreset& big : std::vector<SynthPreset>(v)) {
    if (big.name != "llama-3.2-1b" && big.name != "qwen2.5-7b" && big.name != "qwen3-8b" &&
        big.name != "gemma3-270m" && big.name != "qwen3-30b-a3b" && big.name != "phi-3-mini" &&
        big.name != "bge-small" && big.name != "nomic-embed-text" &&
        big.name != "gemma-2-9b" && big.name != "gpt-oss-20b")
      continue;
    SynthPreset p = big;
    p.name = "tiny";
    p.display_name = "tiny " + big.arch;
    p.n_vocab = 512;
    p.n_ctx_train = 8192;
    p.n_embd = 256;
    p.n_layer = 2;
    p.n_head = 4;
    p.n_head_kv = big.arch == "gemma3" ? 1 : 2;
    p.head_dim = 64;
    p.n_ff = 512;
    if (p.arch == "llama") {
      p.write_head_dim = true;
      p.rope_llama3_orig_ctx = 1024;  // so the scaling factors vary over the rope dims
    }
    if (p.arch == "gemma3" || p.arch == "gemma2") p.n_swa = 128;
    if (is_bert_preset(p)) {  // MHA; bert's position table of 512
      p.n_head_kv = p.n_head;
      p.n_ctx_train = p.arch == "bert" ? 512 : 2048;
    }
    if (p.arch == "phi3") {
      p.n_swa = 0;
      p.rope_orig_ctx = p.n_ctx_train;
    }
    if (p.arch == "gpt-oss") p.n_swa = 8;  // so a short prompt passes the window
    if (p.n_expert > 0) {
      p.n_expert = 8;
      p.n_expert_used = 3;
      p.n_ff_exp = 256;
    }
    v.push_back(p);
  }
  return v;
}

}  // namespace

bool is_bert_preset(const SynthPreset& p) { return p.arch == "bert" || p.arch == "nomic-bert"; }

const std::vector<SynthPreset>& synth_presets() {
  static const std::vector<SynthPreset> v = make_presets();
  return v;
}

std::vector<std::string> synth_archs() {
  std::vector<std::string> r;
  for (const SynthPreset& p : synth_presets()) {
    bool seen = false;
    for (const std::string& a : r) seen = seen || a == p.arch;
    if (!seen) r.push_back(p.arch);
  }
  return r;
}

const SynthPreset& find_synth_preset(std::string_view arch, std::string_view name) {
  std::string other_arch, list;
  for (const SynthPreset& p : synth_presets()) {
    if (p.arch == arch) {
      if (p.name == name) return p;
      list += (list.empty() ? "" : ", ") + p.name;
    } else if (p.name == name && other_arch.empty()) {
      other_arch = p.arch;
    }
  }
  if (list.empty()) {
    std::string archs;
    for (const std::string& a : synth_archs()) archs += (archs.empty() ? "" : ", ") + a;
    throw Error("no synth presets for architecture '" + std::string(arch) + "' (known: " + archs + ")");
  }
  if (!other_arch.empty())
    throw Error("preset '" + std::string(name) + "' is a " + other_arch + " model, not " + std::string(arch) +
                " (" + std::string(arch) + " presets: " + list + ")");
  throw Error("unknown " + std::string(arch) + " preset '" + std::string(name) + "' (known: " + list + ")");
}

}  // namespace weir
