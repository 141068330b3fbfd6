#include "engine/openai/answer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <random>

#include "engine/openai/fill_in_middle.h"
#include "engine/openai/forced_tool_calls.h"
#include "engine/openai/output_grammar.h"
#include "engine/openai/tool_request.h"
#include "text/jinja/template.h"

namespace weir::openai {

using nlohmann::json;

// What the jobs of one answer have produced so far, shared by the engine's
// thread (writer) and the reader: an entry a job, one lock for all.
struct Answer::Progress {
  struct Job {
    std::string text;  // not yet taken (streaming) or all (whole answers)
    bool done = false;
    std::string finish_reason, error;
    JobCounts counts;
    std::vector<TokenLogprob> logprobs;  // not yet taken (streaming) or all
    double logprob_sum = 0;              // of its sampled tokens (best_of's ranking)
    int64_t logprob_tokens = 0;
  };
  std::mutex m;
  std::condition_variable cv;
  std::vector<Job> jobs;
  int abandoned_status = 0;  // abandon(): the end becomes this error
  std::string abandoned_message;
  bool want_logprobs = false;

  bool all_done() const {
    return std::all_of(jobs.begin(), jobs.end(), [](const Job& j) { return j.done; });
  }
  const std::string* first_error() const {
    for (const Job& j : jobs)
      if (!j.error.empty()) return &j.error;
    return nullptr;
  }
};

namespace {

std::string new_id(const char* prefix) {
  static std::atomic<uint64_t> n{0};
  static const uint64_t start = std::random_device{}();
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s-%016llx", prefix, static_cast<unsigned long long>(start + n++));
  return buf;
}

// The seed of a prompt's choice i: the request's own for the first (one
// choice samples as it always did), a value drawn from (seed, i) for the
// others, so that choices differ and the same request repeats exactly.
uint64_t choice_seed(uint64_t seed, size_t i) {
  return i == 0 ? seed : Rng(seed ^ (uint64_t(i) * 0x9e3779b97f4a7c15ULL)).next_u64();
}

// Job k of the answer whose progress is pr. ranked: best_of chooses among
// the jobs, so each needs its tokens' log-probabilities.
Job job_from(const GenerationRequest& r, std::vector<int32_t> prompt, const std::shared_ptr<Answer::Progress>& pr,
             size_t k, bool ranked, const Tokenizer& tok) {
  Job j;
  j.presence_penalty = r.presence_penalty;
  j.frequency_penalty = r.frequency_penalty;
  if (r.logprobs || ranked) {
    j.top_logprobs = r.logprobs ? r.top_logprobs : 0;
    const bool keep = r.logprobs;
    const Tokenizer* t = &tok;
    j.on_token = [pr, k, keep, t](const HostSample& h) {
      TokenLogprob lp;
      if (keep) {
        lp.token = t->token_to_piece(h.id, false);
        lp.logprob = h.logprob;
        for (const Alternative& a : h.top) lp.top.emplace_back(t->token_to_piece(a.id, false), a.logprob);
      }
      std::lock_guard<std::mutex> lk(pr->m);
      Answer::Progress::Job& p = pr->jobs[k];
      p.logprob_sum += h.logprob;
      ++p.logprob_tokens;
      if (keep) p.logprobs.push_back(std::move(lp));
    };
  }
  j.prompt = std::move(prompt);
  j.max_tokens = r.max_tokens;
  j.temperature = r.temperature;
  j.top_p = r.top_p;
  j.top_k = r.top_k;
  j.min_p = r.min_p;
  j.stop = r.stop;
  j.ignore_eos = r.ignore_eos;
  j.on_text = [pr, k](const std::string& t) {
    std::lock_guard<std::mutex> lk(pr->m);
    pr->jobs[k].text += t;
    pr->cv.notify_all();
  };
  j.on_done = [pr, k](const std::string& why, const JobCounts& n) {
    std::lock_guard<std::mutex> lk(pr->m);
    pr->jobs[k].done = true;
    pr->jobs[k].finish_reason = why;
    pr->jobs[k].counts = n;
    pr->cv.notify_all();
  };
  j.on_error = [pr, k](const std::string& e) {
    std::lock_guard<std::mutex> lk(pr->m);
    pr->jobs[k].done = true;
    pr->jobs[k].error = e;
    pr->cv.notify_all();
  };
  return j;
}

// A completion prompt's ids, within `limit` tokens; with a suffix, in the
// fill-in-the-middle form.
std::vector<int32_t> completion_tokens(const AnswerContext& c, const CompletionPrompt& p, const std::string& suffix,
                                       size_t limit, const std::string& why) {
  const Vocab& v = c.tok.vocab();
  if (!p.tokens.empty()) {
    for (int32_t t : p.tokens)
      if (!v.valid(t)) throw bad_request("prompt", "'prompt' holds the id " + std::to_string(t) + ", outside the vocabulary");
    if (p.tokens.size() > limit) throw over_token_limit("prompt", std::to_string(p.tokens.size()), limit, why);
  }
  if (suffix.empty())
    return p.tokens.empty() ? encode_limited(c.tok, p.text, v.add_bos, true, limit, "prompt", why) : p.tokens;
  require_fill_in_middle(v);  // before the texts are tokenized
  const std::vector<int32_t> prefix = p.tokens.empty() ? encode_limited(c.tok, p.text, false, true, limit, "prompt", why) : p.tokens;
  const std::vector<int32_t> after = encode_limited(c.tok, suffix, false, true, limit, "suffix", why);
  std::vector<int32_t> ids = fill_in_middle_prompt(v, prefix, after);
  if (ids.size() > limit)
    throw over_token_limit("prompt", std::to_string(ids.size()) + " (with the suffix and the fill-in-the-middle tokens)", limit, why);
  return ids;
}

}  // namespace

std::vector<int32_t> encode_limited(const Tokenizer& tok, std::string_view text, bool add_special, bool parse_special,
                                    size_t max_tokens, const std::string& field, const std::string& why) {
  const size_t longest = std::max<size_t>(1, tok.vocab().max_token_len());
  if (text.size() / longest > max_tokens) throw over_token_limit(field, "at least " + std::to_string(text.size() / longest), max_tokens, why);
  std::vector<int32_t> ids = tok.encode(text, add_special, parse_special);
  if (ids.size() > max_tokens) throw over_token_limit(field, std::to_string(ids.size()), max_tokens, why);
  return ids;
}

ApiError over_token_limit(const std::string& field, const std::string& count, size_t max_tokens, const std::string& why) {
  return bad_request(field, "'" + field + "' is " + count + " tokens, over the limit of " + std::to_string(max_tokens) +
                                (why.empty() ? "" : " (" + why + ")"));
}

std::vector<std::vector<int32_t>> prompt_tokens(const AnswerContext& c, const GenerationRequest& r) {
  const int64_t fits = c.n_ctx - 1;  // a token of room to generate
  const bool by_flag = c.max_prompt_tokens > 0 && c.max_prompt_tokens < fits;
  const size_t limit = size_t(std::max<int64_t>(1, by_flag ? c.max_prompt_tokens : fits));
  const std::string why = by_flag ? "the server's --max-request-tokens" : "the context holds " + std::to_string(c.n_ctx) + " tokens";
  const std::string field = r.chat ? "messages" : "prompt";
  if (!r.chat) {
    std::vector<std::vector<int32_t>> out;
    for (const CompletionPrompt& p : r.prompts) out.push_back(completion_tokens(c, p, r.suffix, limit, why));
    return out;
  }
  if (!c.chat) throw ApiError(400, "invalid_request_error", "messages", "this model has no chat template; use completions");
  std::string text;
  try {
    const jinja::RenderLimits defaults;
    const bool with_tools = r.tools.is_array() && !r.tools.empty();
    json messages = messages_for_template(r.messages);
    if (is_harmony_template(c.chat->source())) messages = harmony_messages(messages);
    text = c.chat->render(jinja::value_from_json(messages.dump()), true,
                          with_tools ? jinja::value_from_json(r.tools.dump()) : jinja::Value(),
                          c.render_limits ? *c.render_limits : defaults,
                          r.reasoning_effort.empty() ? jinja::Value()
                                                     : jinja::value_from_json(json{{"reasoning_effort", r.reasoning_effort}}.dump()));
  } catch (const Cancelled&) {  // its stop flag: the server is stopping
    throw ApiError(503, "server_overloaded", "", "the server is shutting down");
  } catch (const Error& e) {
    throw bad_request("messages", std::string("the chat template refused the messages: ") + e.what());
  }
  return {encode_limited(c.tok, text, false, true, limit, field, why)};
}

std::shared_ptr<Answer> Answer::start(const AnswerContext& c, const GenerationRequest& r) {
  const size_t n_prompts = r.chat ? 1 : r.prompts.size();
  const size_t per_prompt = size_t(std::max(r.n, r.best_of));
  if (n_prompts * per_prompt > c.engine.queue_limit())
    throw bad_request(n_prompts > 1 ? "prompt" : r.best_of > r.n ? "best_of" : "n",
                      "this request asks for " + std::to_string(n_prompts * per_prompt) +
                          " generations (a job each); the engine queues " + std::to_string(c.engine.queue_limit()) +
                          " at most (weir serve --queue)");
  std::vector<std::vector<int32_t>> prompts = prompt_tokens(c, r);
  std::shared_ptr<const CompiledGrammar> grammar = output_grammar(&c.engine.grammars(), r.format);
  std::vector<std::pair<int32_t, float>> bias = checked_logit_bias(r.logit_bias, c.tok.vocab().n_tokens());
  std::shared_ptr<Answer> a(new Answer());
  a->engine_ = &c.engine;
  a->pr_ = std::make_shared<Progress>();
  a->pr_->want_logprobs = r.logprobs;
  a->pr_->jobs.resize(n_prompts * per_prompt);
  a->chat_ = r.chat;
  a->include_usage_ = r.include_usage;
  a->n_ = size_t(r.n);
  a->per_prompt_ = per_prompt;
  a->head_ = ResponseHead{new_id(r.chat ? "chatcmpl" : "cmpl"), now_seconds(), r.model.empty() ? c.model_name : r.model};
  a->tools_ = r.chat && r.tools.is_array() && !r.tools.empty() && r.tool_choice != "none";
  if (a->tools_) {
    a->parallel_tools_ = r.parallel_tool_calls;
    a->tool_syntax_ = c.chat ? tool_syntax_of(c.chat->source()) : ToolSyntax::Json;
    if (forces_tool_call(r.tool_choice)) a->forced_choice_ = r.tool_choice;
  }
  // A forced call's grammar makes the answer plain JSON, read as above.
  a->harmony_ = r.chat && c.chat && is_harmony_template(c.chat->source()) && a->forced_choice_.is_null();
  // echo: a text prompt as sent; token ids as their pieces (as /detokenize
  // and weir.Llama.detokenize give them).
  a->echo_.resize(n_prompts);
  if (r.echo)
    for (size_t p = 0; p < n_prompts; ++p) {
      a->echo_[p] = r.prompts[p].text;
      for (int32_t t : r.prompts[p].tokens) a->echo_[p] += c.tok.token_to_piece(t, false);
    }
  a->streamed_.resize(n_prompts * per_prompt);
  for (StreamedChoice& s : a->streamed_) {
    if (a->harmony_) s.harmony = std::make_unique<HarmonyStream>(a->tools_);
    else if (a->tools_) s.tool_stream = std::make_unique<ToolCallStream>(a->tool_syntax_, a->forced_choice_);
  }
  const uint64_t seed = r.seed ? *r.seed : 0;
  std::vector<Job> jobs;
  for (size_t p = 0; p < n_prompts; ++p)
    for (size_t i = 0; i < per_prompt; ++i) {
      Job job = job_from(r, prompts[p], a->pr_, p * per_prompt + i, per_prompt > a->n_, c.tok);
      job.seed = r.seed ? choice_seed(seed, i) : std::random_device{}();
      job.grammar = grammar;
      job.logit_bias = bias;
      jobs.push_back(std::move(job));
    }
  a->ids_ = c.engine.submit_all(std::move(jobs));
  return a;
}

Answer::~Answer() {
  // A reader that stops early (an exception, a dropped stream) must not
  // leave the jobs running.
  bool done = false;
  {
    std::lock_guard<std::mutex> lk(pr_->m);
    done = pr_->all_done();
  }
  if (!done) cancel();
}

void Answer::cancel() {
  std::lock_guard<std::mutex> lk(engine_m_);
  if (engine_)
    for (uint64_t id : ids_) engine_->cancel(id);
}

void Answer::abandon(int status, const std::string& message) {
  {
    std::lock_guard<std::mutex> lk(pr_->m);
    if (pr_->all_done() && !pr_->first_error()) return;  // a whole answer stays; a failed one fails as abandoned
    pr_->abandoned_status = status;
    pr_->abandoned_message = message;
  }
  cancel();
}

void Answer::detach() {
  std::lock_guard<std::mutex> lk(engine_m_);
  engine_ = nullptr;
}

ParsedAnswer Answer::read_calls(const std::string& text) const {
  ParsedAnswer p = parse_answer(text, tool_syntax_, forced_choice_);
  if (!parallel_tools_ && p.calls.size() > 1) p.calls.resize(1);
  return p;
}

bool Answer::wait_done(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lk(pr_->m);
  return pr_->cv.wait_for(lk, wait, [&] { return pr_->all_done() || pr_->first_error(); });
}

// A prompt's tokens count once however many choices it has (as OpenAI
// counts them), and as cached what the first of its jobs found in the cache
// (the others share what that one computed); completion tokens add up over
// every job, best_of's candidates included.
Usage Answer::usage() const {
  Usage u;
  for (size_t p = 0; p * per_prompt_ < pr_->jobs.size(); ++p) {
    int64_t cached = INT64_MAX;
    for (size_t i = 0; i < per_prompt_; ++i) cached = std::min(cached, pr_->jobs[p * per_prompt_ + i].counts.cached_tokens);
    u.prompt_tokens += pr_->jobs[p * per_prompt_].counts.prompt_tokens;
    u.cached_tokens += cached;
  }
  for (const Progress::Job& j : pr_->jobs) u.completion_tokens += j.counts.completion_tokens;
  return u;
}

json Answer::whole_choice(size_t index, size_t job) const {
  const Progress::Job& j = pr_->jobs[job];
  const std::vector<TokenLogprob>* lp = pr_->want_logprobs ? &j.logprobs : nullptr;
  if (!chat_) return text_choice(index, echo_[job / per_prompt_] + j.text, j.finish_reason, lp);
  if (harmony_) {
    HarmonyAnswer h = parse_harmony(j.text, tools_);
    if (!parallel_tools_ && h.calls.size() > 1) h.calls.resize(1);
    return chat_choice(index, h.content, h.calls.empty() ? j.finish_reason : "tool_calls", lp, &h.calls, &h.reasoning);
  }
  if (tools_) {
    const ParsedAnswer p = read_calls(j.text);
    if (!p.calls.empty()) return chat_choice(index, p.content, "tool_calls", lp, &p.calls);
  }
  return chat_choice(index, j.text, j.finish_reason, lp);
}

json Answer::whole() {
  std::lock_guard<std::mutex> lk(pr_->m);
  if (pr_->abandoned_status) throw ApiError(pr_->abandoned_status, error_type(pr_->abandoned_status), "", pr_->abandoned_message);
  if (const std::string* e = pr_->first_error()) throw ApiError(500, "server_error", "", *e);
  json choices = json::array();
  for (size_t p = 0; p * per_prompt_ < pr_->jobs.size(); ++p) {
    std::vector<size_t> order(per_prompt_);
    for (size_t i = 0; i < per_prompt_; ++i) order[i] = p * per_prompt_ + i;
    if (per_prompt_ > n_) {
      // best_of: OpenAI returns the candidates of "the highest log
      // probability per token": the mean of the sampled tokens'
      // log-probabilities (the model's distribution at temperature 1,
      // engine/host_sampling.h), best first.
      auto mean = [&](size_t k) {
        const Progress::Job& j = pr_->jobs[k];
        return j.logprob_tokens > 0 ? j.logprob_sum / double(j.logprob_tokens) : -INFINITY;
      };
      std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return mean(x) > mean(y); });
      order.resize(n_);
    }
    for (size_t i = 0; i < order.size(); ++i) choices.push_back(whole_choice(p * n_ + i, order[i]));
  }
  return chat_ ? chat_completion(head_, std::move(choices), usage()) : text_completion(head_, std::move(choices), usage());
}

std::vector<json> Answer::next_chunks(std::chrono::milliseconds wait) {
  std::vector<json> out;
  if (ended_) return out;
  bool failed = false;
  {
    std::unique_lock<std::mutex> lk(pr_->m);
    std::vector<Progress::Job>& jobs = pr_->jobs;
    pr_->cv.wait_for(lk, wait, [&] {
      if (pr_->abandoned_status) return pr_->all_done();
      if (pr_->first_error()) return true;
      for (size_t k = 0; k < jobs.size(); ++k)
        if (!jobs[k].text.empty() || (jobs[k].done && !streamed_[k].finished)) return true;
      return false;
    });
    const bool failing = pr_->abandoned_status || pr_->first_error();
    for (size_t k = 0; k < jobs.size() && !failing; ++k) {  // choice k is job k (streams have no best_of)
      Progress::Job& j = jobs[k];
      StreamedChoice& c = streamed_[k];
      if (c.finished) continue;
      if (chat_ && !c.role_sent) {
        const std::string role = "assistant";
        out.push_back(chat_chunk(head_, k, &role, "", "", nullptr));
        c.role_sent = true;
      }
      if (!c.echo_sent) {
        const std::string& echo = echo_[k / per_prompt_];
        if (!echo.empty()) out.push_back(text_chunk(head_, k, echo, "", nullptr));
        c.echo_sent = true;
      }
      // Log-probabilities go with the text they came with (or with the
      // choice's last chunk, for tokens whose text a stop string held back).
      std::vector<TokenLogprob> lps;
      const std::vector<TokenLogprob>* lp = pr_->want_logprobs ? &lps : nullptr;
      // Harmony: reasoning and content as they come (log-probabilities with
      // the first chunk of the two), calls at the end.
      if (c.harmony) {
        const HarmonyAnswer h = c.harmony->push(j.text);
        j.text.clear();
        if (!h.reasoning.empty()) {
          lps.swap(j.logprobs);
          out.push_back(reasoning_chunk(head_, k, h.reasoning, lp));
          lps.clear();
        }
        if (!h.content.empty()) {
          lps.swap(j.logprobs);
          out.push_back(chat_chunk(head_, k, nullptr, h.content, "", lp));
          lps.clear();
        }
      }
      // With tools, text from where a call may begin is held to the end (its
      // log-probabilities go with the last chunk).
      const std::string text = c.tool_stream ? c.tool_stream->push(j.text) : j.text;
      j.text.clear();
      if (!text.empty()) {
        lps.swap(j.logprobs);
        out.push_back(chat_ ? chat_chunk(head_, k, nullptr, text, "", lp) : text_chunk(head_, k, text, "", lp));
        lps.clear();
      }
      if (!j.done) continue;
      lps.swap(j.logprobs);
      std::string finish = j.finish_reason;
      if (c.harmony) {
        HarmonyAnswer h = c.harmony->finish();
        if (!parallel_tools_ && h.calls.size() > 1) h.calls.resize(1);
        if (!h.reasoning.empty()) out.push_back(reasoning_chunk(head_, k, h.reasoning, nullptr));
        if (!h.content.empty()) out.push_back(chat_chunk(head_, k, nullptr, h.content, "", nullptr));
        for (size_t i = 0; i < h.calls.size(); ++i)
          for (json& chunk : tool_call_chunks(head_, k, i, h.calls[i])) out.push_back(std::move(chunk));
        if (!h.calls.empty()) finish = "tool_calls";
      } else if (tools_) {
        ParsedAnswer p = c.tool_stream->finish();
        if (!parallel_tools_ && p.calls.size() > 1) p.calls.resize(1);
        const bool blank = p.content.find_first_not_of(" \t\r\n") == std::string::npos;
        if (!p.content.empty() && !(blank && !p.calls.empty())) out.push_back(chat_chunk(head_, k, nullptr, p.content, "", nullptr));
        for (size_t i = 0; i < p.calls.size(); ++i)
          for (json& chunk : tool_call_chunks(head_, k, i, p.calls[i])) out.push_back(std::move(chunk));
        if (!p.calls.empty()) finish = "tool_calls";
      }
      out.push_back(chat_ ? chat_chunk(head_, k, nullptr, "", finish, lp) : text_chunk(head_, k, "", finish, lp));
      c.finished = true;
    }
    if (pr_->abandoned_status) {
      if (!pr_->all_done()) return out;  // the error comes once every job has stopped
      const int st = pr_->abandoned_status;
      out.push_back(error_json(ApiError(st, error_type(st), "", pr_->abandoned_message)));
    } else if (const std::string* e = pr_->first_error()) {
      out.push_back(error_json(ApiError(500, "server_error", "", *e)));
      failed = !pr_->all_done();
    } else if (std::all_of(streamed_.begin(), streamed_.end(), [](const StreamedChoice& c) { return c.finished; })) {
      if (include_usage_) out.push_back(usage_chunk(head_, chat_, usage()));
    } else {
      return out;
    }
    ended_ = true;
  }
  if (failed) cancel();  // the other choices stop (not under pr_->m: a queued job's end comes on this thread)
  return out;
}

}  // namespace weir::openai
