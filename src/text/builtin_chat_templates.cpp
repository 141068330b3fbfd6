// Chat templates for models whose GGUF lacks tokenizer.chat_template,
// chosen by the turn markers of the vocabulary (text/chat_template.h). The
// Gemma one is the template Google publishes with Gemma 3
// (tests/data/gemma3-chat-template.jinja) with tool calling added, as Gemma 3
// has no tool syntax of its own: the tools listed as JSON in the first user
// turn, a call as <tool_call>{"name": ..., "arguments": ...}</tool_call> in the
// model's turn (Hermes' and Qwen's form, which engine/openai/tool_calls.h
// parses back), results as <tool_response> blocks in a user turn, and an
// assistant turn of tool calls alone (content null) allowed. A conversation
// without tools renders as Google's template renders it. The file
// tests/data/gemma3-builtin-chat-template.jinja holds the same text; tests
// keep them equal and render it against Python's jinja2.
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
{%- if tools -%}
    {%- set listed = namespace(text="You may call one or more functions to answer. Their signatures, within <tools></tools> tags:\n<tools>") -%}
    {%- for tool in tools -%}
        {%- set listed.text = listed.text + '\n' + (tool | tojson) -%}
    {%- endfor -%}
    {%- set first_user_prefix = first_user_prefix + listed.text + '\n</tools>\n\nFor each call, answer with a JSON object of the function\'s name and arguments within <tool_call></tool_call> tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>\n\n' -%}
{%- endif -%}
{%- set turns = namespace(n=0) -%}
{%- for message in loop_messages -%}
    {%- set continued = message['role'] == 'tool' and not loop.first and loop.previtem['role'] == 'tool' -%}
    {%- if not continued -%}
        {%- if (message['role'] == 'user' or message['role'] == 'tool') != (turns.n % 2 == 0) -%}
            {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
        {%- endif -%}
        {%- set turns.n = turns.n + 1 -%}
    {%- endif -%}
    {%- if message['role'] == 'tool' -%}
        {%- if not continued -%}
            {{ '<start_of_turn>user\n' + (first_user_prefix if loop.first else "") }}
        {%- endif -%}
        {{ '<tool_response>\n' }}
        {%- if message['content'] is string -%}
            {{ message['content'] | trim }}
        {%- else -%}
            {{ message['content'] | tojson }}
        {%- endif -%}
        {{ '\n</tool_response>' }}
        {%- if loop.last or loop.nextitem['role'] != 'tool' -%}
            {{ '<end_of_turn>\n' }}
        {%- else -%}
            {{ '\n' }}
        {%- endif -%}
    {%- else -%}
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
        {%- elif not message['tool_calls'] -%}
            {{ raise_exception("Invalid content type") }}
        {%- endif -%}
        {%- if message['tool_calls'] -%}
            {%- for tool_call in message['tool_calls'] -%}
                {%- if tool_call['function'] is defined -%}
                    {%- set tool_call = tool_call['function'] -%}
                {%- endif -%}
                {%- if message['content'] or not loop.first -%}
                    {{ '\n' }}
                {%- endif -%}
                {{ '<tool_call>\n{"name": "' + tool_call['name'] + '", "arguments": ' }}
                {%- if tool_call['arguments'] is string -%}
                    {{ tool_call['arguments'] }}
                {%- else -%}
                    {{ tool_call['arguments'] | tojson }}
                {%- endif -%}
                {{ '}\n</tool_call>' }}
            {%- endfor -%}
        {%- endif -%}
        {{ '<end_of_turn>\n' }}
    {%- endif -%}
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
