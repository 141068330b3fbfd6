#include "text/chat_template.h"

#include "core/error.h"

namespace weir {

ChatTemplate::ChatTemplate(std::string source, std::string origin, const Vocab& v)
    : source_(std::move(source)), origin_(std::move(origin)) {
  jinja::Options o;
  o.name = origin_;
  o.render_name = origin_.substr(origin_.rfind('/') + 1);  // npos + 1 == 0: all of it
  template_ = std::make_shared<const jinja::Template>(source_, o);
  if (v.valid(v.bos)) bos_ = std::string(v.text(v.bos));
  if (v.valid(v.eos)) eos_ = std::string(v.text(v.eos));
}

ChatTemplate ChatTemplate::for_model(const GGUFFile& f, const Vocab& v) {
  const std::string_view own = f.get_str_or("tokenizer.chat_template", "");
  if (!own.empty()) return ChatTemplate(std::string(own), "tokenizer.chat_template", v);
  // Recognised by the turn markers the vocabulary holds as tokens.
  for (const auto& [marker, name] : {std::pair<const char*, const char*>{"<start_of_turn>", "gemma"},
                                     {"<|im_start|>", "chatml"},
                                     {"<|start_header_id|>", "llama3"}})
    if (v.find(marker) != TOKEN_NULL) return ChatTemplate(builtin_chat_template(name), std::string("built-in ") + name, v);
  throw Error(f.name() + ": no chat template (tokenizer.chat_template), and its vocabulary has none of the turn "
              "markers of the built-in ones (<start_of_turn>, <|im_start|>, <|start_header_id|>); give one with "
              "--chat-template-file");
}

std::string ChatTemplate::render(const jinja::Value& messages, bool add_generation_prompt,
                                 const jinja::Value& tools, const jinja::RenderLimits& limits,
                                 const jinja::Value& variables) const {
  jinja::Dict ctx;
  if (variables.is_dict())
    for (const auto& [k, v] : variables.dict()) ctx.set(k, v);
  ctx.set(jinja::Value("messages"), messages);
  ctx.set(jinja::Value("add_generation_prompt"), jinja::Value(add_generation_prompt));
  ctx.set(jinja::Value("bos_token"), jinja::Value(bos_));
  ctx.set(jinja::Value("eos_token"), jinja::Value(eos_));
  if (!tools.is_undefined()) ctx.set(jinja::Value("tools"), tools);
  return template_->render(jinja::Value::dict(std::move(ctx)), limits);
}

}  // namespace weir
