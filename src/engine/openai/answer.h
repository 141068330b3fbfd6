// One OpenAI-shaped request running on the Batcher, whatever
// carries it: weir serve's HTTP handlers and the Python package's Llama
// both start an Answer and read it either whole (chat.completion /
// text_completion) or as stream chunks (chat.completion.chunk, ...).
// The prompt is the chat template's rendering of the messages (and the
// request's tools), or the completion's text or token ids (a list of them:
// each prompt its own choices; with a suffix, the fill-in-the-middle
// prompt). Each choice is a job of its own on the engine (n a prompt, or
// best_of candidates of which the n best return); choices of one prompt
// share its cache cells through the engine's prefix cache. With tools (and
// tool_choice not "none") the answer is read back for tool calls in the
// syntax the template teaches (tool_calls.h): message.tool_calls and
// finish_reason "tool_calls"; streamed, text goes out until a call may
// begin and the calls come at the end (tool_call_stream.h). A template
// that writes Harmony (gpt-oss's) has its answers read by harmony.h: the
// analysis channel as reasoning_content, the final one as the content, its
// calls to functions as tool_calls (streamed: reasoning and content as they
// come, the calls at the end).
#pragma once
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/batcher.h"
#include "engine/openai/harmony.h"
#include "engine/openai/request.h"
#include "engine/openai/response.h"
#include "engine/openai/tool_call_stream.h"
#include "text/chat_template.h"
#include "text/jinja/template.h"
#include "text/tokenizer.h"

namespace weir::openai {

struct AnswerContext {
  Batcher& engine;
  const Tokenizer& tok;
  const ChatTemplate* chat = nullptr;  // null: the model has none (chat requests get a 400)
  std::string model_name;              // for responses whose request names none
  int64_t n_ctx = 0;                   // for the "too long" error
  int64_t max_prompt_tokens = 0;       // a prompt's tokens at most (0: n_ctx - 1 alone)
  const jinja::RenderLimits* render_limits = nullptr;  // the chat template's (null: the engine's defaults)
};

// The token ids of `text`, refused (ApiError 400 naming `field`, with `why`
// the limit is what it is) when they would be more than max_tokens. Text
// longer than max_tokens times the vocabulary's longest token is refused
// before it is tokenized (no token covers more bytes), so a huge text costs
// no tokenizer memory.
std::vector<int32_t> encode_limited(const Tokenizer& tok, std::string_view text, bool add_special, bool parse_special,
                                    size_t max_tokens, const std::string& field, const std::string& why);
// "'prompt' is 600 tokens, over the limit of 511 (the context holds 512 tokens)"
ApiError over_token_limit(const std::string& field, const std::string& count, size_t max_tokens, const std::string& why);

// The prompts' token ids, one list a prompt: the chat template applied to
// the messages, or each of the completion's texts (BOS as the vocabulary
// asks) or ids, in the fill-in-the-middle form with a suffix
// (fill_in_middle.h). Throws ApiError (400) naming the field at fault.
std::vector<std::vector<int32_t>> prompt_tokens(const AnswerContext& c, const GenerationRequest& r);

class Answer {
 public:
  // Queues r's jobs on the engine, all or none. Throws ApiError (400: a bad
  // or too long prompt, more jobs than the engine queues), QueueFull.
  static std::shared_ptr<Answer> start(const AnswerContext& c, const GenerationRequest& r);
  ~Answer();

  // Whole answers: waits up to `wait` for the end (of every job, or of the
  // first that failed); true once it came.
  bool wait_done(std::chrono::milliseconds wait);
  // After wait_done: the chat.completion or text_completion object, its
  // choices prompt-major (index = prompt * n + i). Throws ApiError (500)
  // when the engine failed.
  nlohmann::json whole();

  // Streams: waits up to `wait` for news and returns the chunks since the
  // last call, each of one choice (its index): the role first for chats,
  // the prompt first with echo; text with its log-probabilities; the
  // choice's finish reason when it ends; after the last, the usage chunk
  // when asked for. An error object ends the stream. Empty when nothing
  // came in time.
  std::vector<nlohmann::json> next_chunks(std::chrono::milliseconds wait);
  // True once next_chunks has returned the last chunk.
  bool ended() const { return ended_; }

  // Stops the generation (a client gone, Ctrl-C); idempotent.
  void cancel();
  // Stops the generation, and makes its end an error: whole() throws
  // ApiError(status, message), a stream's last chunk is that error (the
  // owner closing, the server stopping). A whole answer already done is
  // left as it is; one that failed (the stop interrupted its step) fails
  // with this error instead.
  void abandon(int status, const std::string& message);
  // The engine is going away before this answer: cancel() and the
  // destructor leave it alone from now on (any thread).
  void detach();

  struct Progress;

 private:
  Answer() = default;
  // A streamed choice's state (streams have no best_of: choice k is job k).
  struct StreamedChoice {
    bool role_sent = false, echo_sent = false, finished = false;
    std::unique_ptr<ToolCallStream> tool_stream;  // with tools
    std::unique_ptr<HarmonyStream> harmony;       // a Harmony template's
  };
  std::mutex engine_m_;
  Batcher* engine_ = nullptr;  // null once detached
  std::shared_ptr<Progress> pr_;
  ResponseHead head_;
  std::vector<uint64_t> ids_;  // the jobs on the engine, prompt-major
  size_t n_ = 1, per_prompt_ = 1;  // choices returned and jobs run, a prompt
  std::vector<std::string> echo_;  // a prompt's text each (echo), else ""
  bool chat_ = false, include_usage_ = false;
  bool ended_ = false;
  std::vector<StreamedChoice> streamed_;
  // Tool calls (chats with tools, tool_choice not "none").
  bool tools_ = false, parallel_tools_ = true;
  ToolSyntax tool_syntax_ = ToolSyntax::Json;
  nlohmann::json forced_choice_;  // tool_choice when it forces a call, else null
  bool harmony_ = false;  // the template writes Harmony (and no call is forced)
  ParsedAnswer read_calls(const std::string& text) const;
  Usage usage() const;  // under pr_->m
  nlohmann::json whole_choice(size_t index, size_t job) const;  // under pr_->m
};

}  // namespace weir::openai
