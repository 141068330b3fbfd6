#!/usr/bin/env python3
"""weir serve's tool calling driven by the official openai package.

Usage: openai_tools_client.py BASE_URL API_KEY
The tool-calling loop as an OpenAI client runs it: tools sent (they reach
the prompt: its token count grows), the answer read (with tool_choice "auto"
the model may call or not; a call's arguments must be JSON), the call and
its result sent back (an assistant turn of tool calls alone, content None,
then a tool message), which must render and be answered; the same
streamed, with the calls assembled from their deltas as clients do; a named
tool_choice answered in OpenAI's shape (a call once constrained decoding
enforces its schema); malformed tool fields refused with the field named.
Prints "ok" and exits 0, or raises.
"""
import json
import sys

import openai

base, key = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=300)
model = client.models.list().data[0].id

tools = [{"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city"},
                                                     "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}]
msgs = [{"role": "user", "content": "What is the weather in Paris right now?"}]


def check_calls(message):
    for call in message.tool_calls or []:
        assert call.type == "function" and call.id, call
        assert call.function.name == "get_weather", call
        assert isinstance(json.loads(call.function.arguments), dict), call


plain = client.chat.completions.create(model=model, messages=msgs, max_tokens=1, temperature=0)
first = client.chat.completions.create(model=model, messages=msgs, tools=tools, tool_choice="auto", max_tokens=64,
                                       temperature=0)
assert first.usage.prompt_tokens > plain.usage.prompt_tokens + 40, ("the tools did not reach the prompt",
                                                                      plain.usage, first.usage)
choice = first.choices[0]
check_calls(choice.message)
assert (choice.finish_reason == "tool_calls") == bool(choice.message.tool_calls), choice
print("auto:", "called" if choice.message.tool_calls else "answered", repr(choice.message.content))

# The result turn: the model's call if it made one, else one as a client would have it.
if choice.message.tool_calls:
    call = choice.message.tool_calls[0]
    call_json = {"id": call.id, "type": "function",
                 "function": {"name": call.function.name, "arguments": call.function.arguments}}
else:
    call_json = {"id": "call_0", "type": "function",
                 "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}
msgs += [{"role": "assistant", "content": None, "tool_calls": [call_json]},
         {"role": "tool", "tool_call_id": call_json["id"], "content": json.dumps({"temperature": 21, "sky": "clear"})}]
second = client.chat.completions.create(model=model, messages=msgs, tools=tools, max_tokens=24, temperature=0)
assert second.choices[0].finish_reason in ("stop", "length", "tool_calls"), second
check_calls(second.choices[0].message)

# Streamed: deltas add up to the whole answer (text, or calls by index).
text, calls, finish = "", {}, None
for chunk in client.chat.completions.create(model=model, messages=msgs, tools=tools, max_tokens=24, temperature=0,
                                            stream=True):
    if not chunk.choices:
        continue
    delta = chunk.choices[0].delta
    text += delta.content or ""
    for c in delta.tool_calls or []:
        slot = calls.setdefault(c.index, {"id": None, "name": "", "arguments": ""})
        slot["id"] = c.id or slot["id"]
        if c.function:
            slot["name"] += c.function.name or ""
            slot["arguments"] += c.function.arguments or ""
    finish = chunk.choices[0].finish_reason or finish
whole = second.choices[0]
assert finish == whole.finish_reason, (finish, whole)
assert [c["name"] for c in calls.values()] == [c.function.name for c in whole.message.tool_calls or []], (calls, whole)
for c in calls.values():
    assert c["id"] and isinstance(json.loads(c["arguments"]), dict), c
if not whole.message.tool_calls:
    assert text == whole.message.content, (text, whole.message.content)
print("result turn:", repr(whole.message.content))

# A named choice: OpenAI's shape (a call, once the grammar enforces the schema).
named = client.chat.completions.create(model=model, messages=msgs[:1], tools=tools, max_tokens=32, temperature=0,
                                       tool_choice={"type": "function", "function": {"name": "get_weather"}})
check_calls(named.choices[0].message)
print("named:", "called" if named.choices[0].message.tool_calls else "not constrained yet")

for bad, field in [({"tool_choice": "required"}, "tool_choice"),
                   ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools[0].function.name"),
                   ({"tools": tools, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
                    "tool_choice.function.name")]:
    try:
        client.chat.completions.create(model=model, messages=msgs[:1], max_tokens=1, **bad)
        raise AssertionError(f"{bad} was taken")
    except openai.BadRequestError as e:
        assert field in str(e), e
print("ok")
