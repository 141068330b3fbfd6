// Speculative decoding's flags end to end (issue 48): every command that
// generates takes them, text is the same with and without guesses (n-gram
// lookup, a draft model), and bad input gets one clear line: an unknown
// --spec, a draft without -md, -md with --spec ngram, k out of range, a
// draft of another vocabulary or larger than the target. weir serve with a
// draft model answers concurrent requests with the text it gives without
// one, and refuses a draft of another vocabulary in one line.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "tools/serve_process.h"
#include "tools/weir_cli.h"

namespace {

using weir::test::run_weir;
using weir::test::shell_quote;

struct Models {
  std::string tiny, tiny_f32, other_arch, starcoder, refact, chat_template;
};

const Models& models() {
  static const Models m = [] {
    Models x;
    const std::string d = weir::test::process_dir();
    x.tiny = d + "/spec-tiny.gguf";
    x.tiny_f32 = d + "/spec-tiny-f32.gguf";
    x.other_arch = d + "/spec-tiny-gemma3.gguf";  // same vocabulary, another architecture
    // Two BPE vocabularies of about the same size, other token texts.
    x.starcoder = d + "/spec-tiny-starcoder.gguf";
    x.refact = d + "/spec-tiny-refact.gguf";
    const std::string vocab = weir::test::ref_dir() + "/vocab/ggml-vocab-";
    EXPECT_EQ(run_weir("synth --arch llama --preset tiny --type Q8_0 -t 1 --vocab " + shell_quote(vocab + "starcoder.gguf") +
                       " -o " + shell_quote(x.starcoder)).code, 0);
    EXPECT_EQ(run_weir("synth --arch llama --preset tiny --type Q8_0 -t 1 --vocab " + shell_quote(vocab + "refact.gguf") +
                       " -o " + shell_quote(x.refact)).code, 0);
    x.chat_template = d + "/spec-chat.jinja";
    EXPECT_EQ(run_weir("synth --arch llama --preset tiny --type Q8_0 -t 1 -o " + shell_quote(x.tiny)).code, 0);
    EXPECT_EQ(run_weir("synth --arch llama --preset tiny --type F32 -t 1 -o " + shell_quote(x.tiny_f32)).code, 0);
    EXPECT_EQ(run_weir("synth --arch gemma3 --preset tiny --type Q8_0 -t 1 -o " + shell_quote(x.other_arch)).code, 0);
    std::ofstream(x.chat_template) << "{% for m in messages %}{{ m.content }} {% endfor %}";
    return x;
  }();
  return m;
}

// A prompt that repeats, so that n-gram lookup has guesses.
const char* kPrompt = "'one two three four five six one two three four five six one two three'";

TEST(SpecCli, RunGivesTheSameTextWithAndWithoutGuesses) {
  const Models& m = models();
  const std::string base = "run -m " + shell_quote(m.tiny) + " -p " + kPrompt + " -n 48 --temp 0 -c 256";
  const auto plain = run_weir(base);
  ASSERT_EQ(plain.code, 0) << plain.err;
  for (const std::string& spec : std::vector<std::string>{"--spec ngram", "--spec ngram --draft-min 3 --draft-max 3",
                                 "-md " + shell_quote(m.tiny), "--spec draft -md " + shell_quote(m.tiny) + " -ngld 0"}) {
    SCOPED_TRACE(spec);
    const auto r = run_weir(base + " " + spec);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out, plain.out);
    EXPECT_NE(r.err.find("tokens a step"), std::string::npos) << r.err;
  }
  // Sampled, with a seed: the same draws at the same positions.
  const auto sampled = run_weir(base + " --temp 0.9 -s 11");
  const auto sampled_spec = run_weir(base + " --temp 0.9 -s 11 -md " + shell_quote(m.tiny));
  ASSERT_EQ(sampled.code, 0) << sampled.err;
  EXPECT_EQ(sampled_spec.out, sampled.out) << sampled_spec.err;
}

TEST(SpecCli, ChatGivesTheSameAnswers) {
  const Models& m = models();
  const std::string base = "chat -m " + shell_quote(m.tiny) + " --chat-template-file " + shell_quote(m.chat_template) +
                           " -n 24 --temp 0 -c 512";
  const std::string turns_file = weir::test::process_dir() + "/spec-turns.txt";
  std::ofstream(turns_file) << "one two three one two three one two\nfour five four five four\n";
  const std::string turns = " < " + shell_quote(turns_file);
  const auto plain = run_weir(base + turns);
  ASSERT_EQ(plain.code, 0) << plain.err;
  const auto spec = run_weir(base + " --spec ngram" + turns);
  ASSERT_EQ(spec.code, 0) << spec.err;
  EXPECT_EQ(spec.out, plain.out);
}

TEST(SpecCli, BenchHasASpecColumnAndTheVerifyCurve) {
  const Models& m = models();
  const auto r = run_weir("bench -m " + shell_quote(m.tiny) + " -p 0 -n 16 -r 1 --spec off,ngram --verify-curve 4");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("tok/step"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tg16 +spec ngram"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("verify-step cost"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("|  4 |"), std::string::npos) << r.out;
  const auto j = run_weir("bench -m " + shell_quote(m.tiny) + " -p 0 -n 16 -r 1 --spec ngram -o json");
  ASSERT_EQ(j.code, 0) << j.err;
  EXPECT_NE(j.out.find("\"spec\": \"ngram\""), std::string::npos) << j.out;
  EXPECT_NE(j.out.find("\"spec_tokens_per_step\""), std::string::npos) << j.out;
}

TEST(SpecCli, BadInputIsOneClearLine) {
  const Models& m = models();
  const std::string run = "run -m " + shell_quote(m.tiny) + " -p hi -n 4 ";
  struct Case {
    std::string args, says;
  };
  const Case cases[] = {
      {"--spec bogus", "--spec: expected ngram, draft or off"},
      {"--spec draft", "--spec draft needs a draft model (-md FILE)"},
      {"--spec ngram -md " + shell_quote(m.tiny), "does not use one"},
      {"--spec ngram --draft-max 0", "--draft-max: expected 1 .. 64"},
      {"--spec ngram --draft-max 65", "--draft-max: expected 1 .. 64"},
      {"--spec ngram --draft-min 5 --draft-max 4", "--draft-min: expected 0 .. --draft-max (4)"},
      {"--spec ngram -ngld 1", "-ngld: there is no draft model"},
      {"-md " + shell_quote(m.starcoder), "a draft model needs the target's vocabulary"},
      {"-md " + shell_quote(m.tiny_f32), "is larger than the target"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const auto r = run_weir(run + c.args);
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
  }
  // Same tokenizer and size, other texts: the first token that differs named.
  const auto r = run_weir("run -m " + shell_quote(m.starcoder) + " -p hi -n 4 -md " + shell_quote(m.refact));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("have different vocabularies: token "), std::string::npos) << r.err;
  // Another architecture of the same vocabulary is a fine draft.
  EXPECT_EQ(run_weir(run + "-md " + shell_quote(m.other_arch)).code, 0);
}

// Four completions at once (greedy and with seeds), their texts one a
// line, then "guesses DRAFTED ACCEPTED" from the server's /metrics.
struct Answers {
  std::string texts;
  long drafted = -1, accepted = -1;
};

Answers serve_answers(const std::string& model, const std::vector<std::string>& extra) {
  weir::test::ServeProcess serve(model, extra);
  Answers a;
  if (!serve.wait_up()) {
    a.texts = "the server did not come up";
    return a;
  }
  const std::string script = weir::test::process_dir() + "/spec-serve-client.py";
  std::ofstream(script) << R"(import json, sys, threading, urllib.request
base = sys.argv[1]
prompts = ["one two three four five six one two three four", "red green blue red green blue red",
           "a b c d e f g a b c", "seven eight nine ten seven eight"]
texts = [None] * len(prompts)
def ask(i):
    body = {"prompt": prompts[i], "max_tokens": 32, "temperature": 0 if i % 2 == 0 else 0.8, "seed": 2000 + i}
    r = urllib.request.Request(base + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    texts[i] = json.load(urllib.request.urlopen(r, timeout=120))["choices"][0]["text"]
threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(prompts))]
for t in threads: t.start()
for t in threads: t.join()
for t in texts: print(json.dumps(t))
m = {l.split()[0]: float(l.split()[1]) for l in urllib.request.urlopen(base + "/metrics", timeout=10).read().decode().splitlines()
     if l.startswith("weir_spec_guesses")}
print("guesses %d %d" % (m["weir_spec_guesses_drafted_total"], m["weir_spec_guesses_accepted_total"]))
)";
  FILE* p = popen(("python3 " + shell_quote(script) + " " + serve.base() + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; p && (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  if (p) pclose(p);
  const size_t at = out.rfind("guesses ");
  if (at == std::string::npos || std::sscanf(out.c_str() + at, "guesses %ld %ld", &a.drafted, &a.accepted) != 2) {
    a.texts = "no answers: " + out;
    return a;
  }
  a.texts = out.substr(0, at);
  return a;
}

TEST(SpecCli, ServeWithADraftModelGivesTheSameTexts) {
  const Models& m = models();
  const Answers plain = serve_answers(m.tiny, {});
  ASSERT_EQ(plain.drafted, 0) << plain.texts;
  for (const std::string& draft : {m.tiny, m.other_arch}) {  // its own file, another architecture
    SCOPED_TRACE(draft);
    const Answers spec = serve_answers(m.tiny, {"-md", draft, "--draft-min", "2"});
    EXPECT_EQ(spec.texts, plain.texts);
    EXPECT_GT(spec.drafted, 0) << "no guess was drafted";
    EXPECT_GT(spec.accepted, 0) << "no guess was kept";
  }
}

TEST(SpecCli, ServeRefusesADraftOfAnotherVocabularyInOneLine) {
  const Models& m = models();
  const auto r = run_weir("serve -m " + shell_quote(m.tiny) + " --port 0 -md " + shell_quote(m.starcoder));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("a draft model needs the target's vocabulary"), std::string::npos) << r.err;
  const auto larger = run_weir("serve -m " + shell_quote(m.tiny) + " --port 0 -md " + shell_quote(m.tiny_f32));
  EXPECT_NE(larger.code, 0);
  EXPECT_NE(larger.err.find("is larger than the target"), std::string::npos) << larger.err;
}

}  // namespace
