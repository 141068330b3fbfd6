// One OpenAI-shaped request running on the Batcher, whatever
// carries it: weir serve's HTTP handlers and the Python package's Llama
// both start an Answer and read it either whole (chat.completion /
// text_completion) or as stream chunks (chat.completion.chunk, ...).
// The prompt is the chat template's rendering of the messages (and the
// request's tools), or the completion's text or token ids. With tools (and
// tool_choice not "none") the answer is read back for tool calls in the
// syntax the template teaches (tool_calls.h): message.tool_calls and
// finish_reason "tool_calls"; streamed, text goes out until a call may
// begin and the calls come at the end (tool_call_stream.h).
#pragma once
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/batcher.h"
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

// The prompt's token ids: the chat template applied to the messages, or the
// completion's text (BOS as the vocabulary asks) or ids. Throws ApiError
// (400) naming the field at fault.
std::vector<int32_t> prompt_tokens(const AnswerContext& c, const GenerationRequest& r);

class Answer {
 public:
  // Queues r on the engine. Throws ApiError (400: a bad or too long
  // prompt), QueueFull.
  static std::shared_ptr<Answer> start(const AnswerContext& c, const GenerationRequest& r);
  ~Answer();

  // Whole answers: waits up to `wait` for the end; true once it came.
  bool wait_done(std::chrono::milliseconds wait);
  // After wait_done: the chat.completion or text_completion object.
  // Throws ApiError (500) when the engine failed.
  nlohmann::json whole();

  // Streams: waits up to `wait` for news and returns the chunks since the
  // last call (the role first for chats; text with its log-probabilities;
  // at the end the finish reason, the usage chunk when asked for, or an
  // error object). Empty when nothing came in time.
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
  uint64_t job_id() const { return id_; }

  struct Progress;

 private:
  Answer() = default;
  std::mutex engine_m_;
  Batcher* engine_ = nullptr;  // null once detached
  std::shared_ptr<Progress> pr_;
  ResponseHead head_;
  uint64_t id_ = 0;
  bool chat_ = false, include_usage_ = false;
  bool role_sent_ = false, ended_ = false;
  // Tool calls (chats with tools, tool_choice not "none").
  bool tools_ = false, parallel_tools_ = true;
  ToolSyntax tool_syntax_ = ToolSyntax::Json;
  nlohmann::json forced_choice_;  // tool_choice when it forces a call, else null
  std::unique_ptr<ToolCallStream> tool_stream_;
  ParsedAnswer read_calls(const std::string& text) const;
};

}  // namespace weir::openai
