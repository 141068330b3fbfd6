// Chat templates for models whose GGUF lacks tokenizer.chat_template,
// chosen by the turn markers of the vocabulary (text/chat_template.h). The
// Gemma one follows the template Google publishes with Gemma 3 (the file
// tests/data/gemma3-chat-template.jinja holds the same text; a test keeps
// them equal and renders it against Python's jinja2).
#include "text/chat_template.h"

namespace weir {
namespace {

constexpr const char* kGemma = R"TEMPLATE({{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
)TEMPLATE";

// ChatML (Qwen, Hermes, many fine-tunes): <|im_start|>role\ncontent<|im_end|>.
constexpr const char* kChatml = R"TEMPLATE({%- for message in messages -%}
{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{ '<|im_start|>assistant\n' }}
{%- endif -%})TEMPLATE";

// Llama 3: a header per message, <|eot_id|> after each.
constexpr const char* kLlama3 = R"TEMPLATE({{ bos_token }}
{%- for message in messages -%}
{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif -%})TEMPLATE";

}  // namespace

std::string builtin_chat_template(const std::string& name) {
  if (name == "gemma") return kGemma;
  if (name == "chatml") return kChatml;
  if (name == "llama3") return kLlama3;
  return {};
}

}  // namespace weir
