#include "engine/openai/answer.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <random>

#include "engine/openai/forced_tool_calls.h"
#include "engine/openai/tool_request.h"
#include "text/jinja/template.h"

namespace weir::openai {

using nlohmann::json;

// What a job has produced so far, shared by the engine's thread (writer)
// and the reader.
struct Answer::Progress {
  std::mutex m;
  std::condition_variable cv;
  std::string text;  // not yet taken (streaming) or all (whole answers)
  bool done = false;
  std::string finish_reason, error;
  int abandoned_status = 0;  // abandon(): the error the end becomes
  std::string abandoned_message;
  JobCounts counts;
  bool want_logprobs = false;
  std::vector<TokenLogprob> logprobs;  // not yet taken (streaming) or all
};

namespace {

std::string new_id(const char* prefix) {
  static std::atomic<uint64_t> n{0};
  static const uint64_t start = std::random_device{}();
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s-%016llx", prefix, static_cast<unsigned long long>(start + n++));
  return buf;
}


Job job_from(const GenerationRequest& r, std::vector<int32_t> prompt, const std::shared_ptr<Answer::Progress>& pr,
             const Tokenizer& tok) {
  Job j;
  j.presence_penalty = r.presence_penalty;
  j.frequency_penalty = r.frequency_penalty;
  if (r.logprobs) {
    j.top_logprobs = r.top_logprobs;
    pr->want_logprobs = true;
    const Tokenizer* t = &tok;
    j.on_token = [pr, t](const HostSample& h) {
      TokenLogprob lp;
      lp.token = t->token_to_piece(h.id, false);
      lp.logprob = h.logprob;
      for (const Alternative& a : h.top) lp.top.emplace_back(t->token_to_piece(a.id, false), a.logprob);
      std::lock_guard<std::mutex> lk(pr->m);
      pr->logprobs.push_back(std::move(lp));
    };
  }
  j.prompt = std::move(prompt);
  j.max_tokens = r.max_tokens;
  j.temperature = r.temperature;
  j.top_p = r.top_p;
  j.top_k = r.top_k;
  j.min_p = r.min_p;
  j.seed = r.seed ? *r.seed : std::random_device{}();
  j.stop = r.stop;
  j.ignore_eos = r.ignore_eos;
  j.on_text = [pr](const std::string& t) {
    std::lock_guard<std::mutex> lk(pr->m);
    pr->text += t;
    pr->cv.notify_all();
  };
  j.on_done = [pr](const std::string& why, const JobCounts& n) {
    std::lock_guard<std::mutex> lk(pr->m);
    pr->done = true;
    pr->finish_reason = why;
    pr->counts = n;
    pr->cv.notify_all();
  };
  j.on_error = [pr](const std::string& e) {
    std::lock_guard<std::mutex> lk(pr->m);
    pr->done = true;
    pr->error = e;
    pr->cv.notify_all();
  };
  return j;
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

std::vector<int32_t> prompt_tokens(const AnswerContext& c, const GenerationRequest& r) {
  const int64_t fits = c.n_ctx - 1;  // a token of room to generate
  const bool by_flag = c.max_prompt_tokens > 0 && c.max_prompt_tokens < fits;
  const size_t limit = size_t(std::max<int64_t>(1, by_flag ? c.max_prompt_tokens : fits));
  const std::string why = by_flag ? "the server's --max-request-tokens" : "the context holds " + std::to_string(c.n_ctx) + " tokens";
  const std::string field = r.chat ? "messages" : "prompt";
  if (!r.chat) {
    if (!r.prompt_tokens.empty()) {
      for (int32_t t : r.prompt_tokens)
        if (!c.tok.vocab().valid(t))
          throw bad_request("prompt", "'prompt' holds the id " + std::to_string(t) + ", outside the vocabulary");
      if (r.prompt_tokens.size() > limit) throw over_token_limit(field, std::to_string(r.prompt_tokens.size()), limit, why);
      return r.prompt_tokens;
    }
    return encode_limited(c.tok, r.prompt, c.tok.vocab().add_bos, true, limit, field, why);
  }
  if (!c.chat) throw ApiError(400, "invalid_request_error", "messages", "this model has no chat template; use completions");
  std::string text;
  try {
    const jinja::RenderLimits defaults;
    const bool with_tools = r.tools.is_array() && !r.tools.empty();
    text = c.chat->render(jinja::value_from_json(messages_for_template(r.messages).dump()), true,
                          with_tools ? jinja::value_from_json(r.tools.dump()) : jinja::Value(),
                          c.render_limits ? *c.render_limits : defaults);
  } catch (const Cancelled&) {  // its stop flag: the server is stopping
    throw ApiError(503, "server_overloaded", "", "the server is shutting down");
  } catch (const Error& e) {
    throw bad_request("messages", std::string("the chat template refused the messages: ") + e.what());
  }
  return encode_limited(c.tok, text, false, true, limit, field, why);
}

std::shared_ptr<Answer> Answer::start(const AnswerContext& c, const GenerationRequest& r) {
  std::vector<int32_t> prompt = prompt_tokens(c, r);
  std::shared_ptr<Answer> a(new Answer());
  a->engine_ = &c.engine;
  a->pr_ = std::make_shared<Progress>();
  a->chat_ = r.chat;
  a->include_usage_ = r.include_usage;
  a->head_ = ResponseHead{new_id(r.chat ? "chatcmpl" : "cmpl"), now_seconds(), r.model.empty() ? c.model_name : r.model};
  a->tools_ = r.chat && r.tools.is_array() && !r.tools.empty() && r.tool_choice != "none";
  if (a->tools_) {
    a->parallel_tools_ = r.parallel_tool_calls;
    a->tool_syntax_ = c.chat ? tool_syntax_of(c.chat->source()) : ToolSyntax::Json;
    if (forces_tool_call(r.tool_choice)) a->forced_choice_ = r.tool_choice;
    a->tool_stream_ = std::make_unique<ToolCallStream>(a->tool_syntax_, a->forced_choice_);
  }
  a->id_ = c.engine.submit(job_from(r, std::move(prompt), a->pr_, c.tok));
  return a;
}

Answer::~Answer() {
  // A reader that stops early (an exception, a dropped stream) must not
  // leave the job running.
  bool done = false;
  {
    std::lock_guard<std::mutex> lk(pr_->m);
    done = pr_->done;
  }
  if (!done) cancel();
}

void Answer::cancel() {
  std::lock_guard<std::mutex> lk(engine_m_);
  if (engine_) engine_->cancel(id_);
}

void Answer::abandon(int status, const std::string& message) {
  {
    std::lock_guard<std::mutex> lk(pr_->m);
    if (pr_->done && pr_->error.empty()) return;  // a whole answer stays; a failed one fails as abandoned
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
  return pr_->cv.wait_for(lk, wait, [&] { return pr_->done; });
}

json Answer::whole() {
  std::lock_guard<std::mutex> lk(pr_->m);
  if (pr_->abandoned_status) throw ApiError(pr_->abandoned_status, error_type(pr_->abandoned_status), "", pr_->abandoned_message);
  if (!pr_->error.empty()) throw ApiError(500, "server_error", "", pr_->error);
  const Usage u{pr_->counts.prompt_tokens, pr_->counts.completion_tokens, pr_->counts.cached_tokens};
  const std::vector<TokenLogprob>* lp = pr_->want_logprobs ? &pr_->logprobs : nullptr;
  if (chat_ && tools_) {
    const ParsedAnswer p = read_calls(pr_->text);
    if (!p.calls.empty()) return chat_completion(head_, p.content, "tool_calls", u, lp, &p.calls);
  }
  return chat_ ? chat_completion(head_, pr_->text, pr_->finish_reason, u, lp)
               : text_completion(head_, pr_->text, pr_->finish_reason, u, lp);
}

std::vector<json> Answer::next_chunks(std::chrono::milliseconds wait) {
  std::vector<json> out;
  if (ended_) return out;
  std::unique_lock<std::mutex> lk(pr_->m);
  pr_->cv.wait_for(lk, wait, [&] { return pr_->done || !pr_->text.empty(); });
  if (chat_ && !role_sent_) {
    const std::string role = "assistant";
    out.push_back(chat_chunk(head_, &role, "", "", nullptr));
    role_sent_ = true;
  }
  // Log-probabilities go with the text they came with (or with the last
  // chunk, for tokens whose text a stop string held back).
  std::vector<TokenLogprob> lps;
  const std::vector<TokenLogprob>* lp = pr_->want_logprobs ? &lps : nullptr;
  // With tools, text from where a call may begin is held to the end (its
  // log-probabilities go with the last chunk).
  const std::string text = tools_ ? tool_stream_->push(pr_->text) : pr_->text;
  pr_->text.clear();
  if (!text.empty()) {
    lps.swap(pr_->logprobs);
    out.push_back(chat_ ? chat_chunk(head_, nullptr, text, "", lp) : text_chunk(head_, text, "", lp));
    lps.clear();
  }
  if (!pr_->done) return out;
  lps.swap(pr_->logprobs);
  const Usage u{pr_->counts.prompt_tokens, pr_->counts.completion_tokens, pr_->counts.cached_tokens};
  if (pr_->abandoned_status) {
    const int st = pr_->abandoned_status;
    out.push_back(error_json(ApiError(st, error_type(st), "", pr_->abandoned_message)));
  } else if (!pr_->error.empty()) {
    out.push_back(error_json(ApiError(500, "server_error", "", pr_->error)));
  } else {
    std::string finish = pr_->finish_reason;
    if (tools_) {
      ParsedAnswer p = tool_stream_->finish();
      if (!parallel_tools_ && p.calls.size() > 1) p.calls.resize(1);
      const bool blank = p.content.find_first_not_of(" \t\r\n") == std::string::npos;
      if (!p.content.empty() && !(blank && !p.calls.empty())) out.push_back(chat_chunk(head_, nullptr, p.content, "", nullptr));
      for (size_t i = 0; i < p.calls.size(); ++i)
        for (json& chunk : tool_call_chunks(head_, i, p.calls[i])) out.push_back(std::move(chunk));
      if (!p.calls.empty()) finish = "tool_calls";
    }
    out.push_back(chat_ ? chat_chunk(head_, nullptr, "", finish, lp) : text_chunk(head_, "", finish, lp));
    if (include_usage_) out.push_back(usage_chunk(head_, chat_, u));
  }
  ended_ = true;
  return out;
}

}  // namespace weir::openai
