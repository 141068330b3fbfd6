#!/usr/bin/env python3
"""gpt-oss's Harmony format through weir serve, driven by the official openai package.

Usage: openai_harmony_client.py BASE_URL API_KEY
weir serve runs a model with gpt-oss's chat template (--chat-template-file);
a GBNF grammar (weir's and llama-server's 'grammar' field) makes the model
write what gpt-oss writes, so the answer is known: the analysis channel must
come back as message.reasoning_content, the final channel as the content,
a message to functions.get_weather as a tool call (finish_reason
"tool_calls"), whole and streamed (delta.reasoning_content, delta.content,
the call assembled from its deltas). The call and its result sent back as
clients send them (content None, the reasoning beside it) must render, and
reasoning_effort must be taken. Prints "ok" and exits 0, or raises.
"""
import json
import sys

import openai

base, key = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=300)
model = client.models.list().data[0].id

tools = [{"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
msgs = [{"role": "user", "content": "What is the weather in Paris?"}]


def gbnf(text):
    return 'root ::= "' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


answer = ("<|channel|>analysis<|message|>The user asks about Paris.<|end|>"
          "<|start|>assistant<|channel|>final<|message|>Sunny in Paris.")
call = ("<|channel|>analysis<|message|>Need the tool.<|end|><|start|>assistant<|channel|>commentary "
        'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}')


def ask(text, **kw):
    return client.chat.completions.create(model=model, messages=kw.pop("messages", msgs), max_tokens=160,
                                          temperature=0, extra_body={"grammar": gbnf(text)}, **kw)


# Whole answers.
r = ask(answer)
m = r.choices[0].message
assert m.content == "Sunny in Paris.", m
assert m.model_extra.get("reasoning_content") == "The user asks about Paris.", m
assert not m.tool_calls, m

r = ask(call, tools=tools)
c = r.choices[0]
assert c.finish_reason == "tool_calls", c
assert c.message.content is None, c.message
assert c.message.model_extra.get("reasoning_content") == "Need the tool.", c.message
assert len(c.message.tool_calls) == 1, c.message
assert c.message.tool_calls[0].function.name == "get_weather", c.message
assert json.loads(c.message.tool_calls[0].function.arguments) == {"city": "Paris"}, c.message
# Without tools in the request a message to a function is no call: the text as written.
r = ask(call)
assert not r.choices[0].message.tool_calls and "to=functions.get_weather" in r.choices[0].message.content, r


# Streamed.
def stream(text, **kw):
    reasoning, content, calls, finish = "", "", {}, None
    for chunk in ask(text, stream=True, **kw):
        for ch in chunk.choices:
            d = ch.delta
            reasoning += (d.model_extra or {}).get("reasoning_content") or ""
            content += d.content or ""
            for tc in d.tool_calls or []:
                slot = calls.setdefault(tc.index, {"name": "", "arguments": ""})
                if tc.function.name:
                    slot["name"] = tc.function.name
                slot["arguments"] += tc.function.arguments or ""
            finish = ch.finish_reason or finish
    return reasoning, content, calls, finish


reasoning, content, calls, finish = stream(answer)
assert (reasoning, content, calls) == ("The user asks about Paris.", "Sunny in Paris.", {}), (reasoning, content, calls)
reasoning, content, calls, finish = stream(call, tools=tools)
assert reasoning == "Need the tool." and content == "" and finish == "tool_calls", (reasoning, content, finish)
assert calls[0]["name"] == "get_weather" and json.loads(calls[0]["arguments"]) == {"city": "Paris"}, calls

# The call and its result sent back as a client sends them, then the answer.
turn = c.message.model_dump(exclude_none=True)
turn["content"] = None
history = msgs + [turn, {"role": "tool", "tool_call_id": c.message.tool_calls[0].id, "content": "21 degrees, sunny"}]
r = ask(answer, messages=history, tools=tools)
assert r.choices[0].message.content == "Sunny in Paris.", r
before = r.usage.prompt_tokens
r = ask(answer, messages=history + [{"role": "assistant", "content": "Sunny in Paris."},
                                    {"role": "user", "content": "Thanks"}], tools=tools)
assert r.usage.prompt_tokens > before, (before, r.usage)

# reasoning_effort reaches the template; a value it does not take is refused.
low = ask(answer, reasoning_effort="low")
assert low.choices[0].message.content == "Sunny in Paris.", low
try:
    ask(answer, reasoning_effort="minimal")
    raise AssertionError("reasoning_effort minimal was taken")
except openai.BadRequestError as e:
    assert "reasoning_effort" in str(e), e
print("ok")
