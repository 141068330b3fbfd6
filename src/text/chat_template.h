// A model's chat template: the Jinja text in its GGUF (tokenizer.chat_template)
// or, when the file has none (Gemma 3 270M's GGUF, the default model, has
// none), a built-in one chosen by the tokens the vocabulary has, or a file
// the user gives. Renders an OpenAI-style message list into the prompt text
// the model was trained on, with the vocabulary's bos and eos texts.
#pragma once
#include <memory>
#include <string>

#include "core/gguf.h"
#include "text/jinja/template.h"
#include "text/vocab.h"

namespace weir {

class ChatTemplate {
 public:
  // The file's template, else a built-in one for the vocabulary (Gemma's
  // <start_of_turn>, ChatML's <|im_start|>, Llama 3's headers); throws
  // Error saying what to do when there is neither.
  static ChatTemplate for_model(const GGUFFile& f, const Vocab& v);
  // A template given as text (e.g. --chat-template-file), for this
  // vocabulary. Its syntax errors name `origin` in full (a file's path:
  // they go to whoever loads it); its render errors, which weir serve
  // sends to clients, only origin's last path component (the file's name).
  ChatTemplate(std::string source, std::string origin, const Vocab& v);

  // messages: a list of {role, content, ...} dicts (jinja::value_from_json of
  // the request's messages); tools: a list or undefined. Throws Error for
  // the template's own refusals (raise_exception) and render errors, a
  // limit passed among them; Cancelled when limits.stop is set. variables:
  // a dict of further variables (Hugging Face's template kwargs, such as
  // gpt-oss's reasoning_effort), or undefined.
  std::string render(const jinja::Value& messages, bool add_generation_prompt,
                     const jinja::Value& tools = jinja::Value(), const jinja::RenderLimits& limits = {},
                     const jinja::Value& variables = jinja::Value()) const;

  const std::string& source() const { return source_; }
  // "tokenizer.chat_template", "built-in gemma", or the file given.
  const std::string& origin() const { return origin_; }

 private:
  std::string source_, origin_;
  std::shared_ptr<const jinja::Template> template_;
  std::string bos_, eos_;
};

// The built-in templates by name ("gemma", "chatml", "llama3"); empty if none.
std::string builtin_chat_template(const std::string& name);

}  // namespace weir
