"""Tool calling through weir.Llama.create_chat_completion, as
llama-cpp-python's takes it: tools and tool_choice go to the model's chat
template (the built-in Gemma one lists them in the first user turn), a
tool-result turn (an assistant message of tool calls alone, content None,
then a tool message) renders and is answered, streamed or whole, and a
malformed tool field is a ValueError naming it."""

import json

import pytest

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def _check_calls(message):
    for call in message.get("tool_calls") or []:
        assert call["type"] == "function" and call["id"].startswith("call_"), call
        assert call["function"]["name"] == "get_weather", call
        assert isinstance(json.loads(call["function"]["arguments"]), dict), call


def test_tools_reach_the_template(llm):
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    plain = llm.create_chat_completion(msgs, max_tokens=1, temperature=0)
    with_tools = llm.create_chat_completion(msgs, max_tokens=1, temperature=0, tools=TOOLS, tool_choice="auto")
    # The tools' JSON goes into the prompt: many more prompt tokens.
    assert with_tools["usage"]["prompt_tokens"] > plain["usage"]["prompt_tokens"] + 40, (plain["usage"], with_tools["usage"])


def test_tool_call_loop(llm):
    msgs = [{"role": "user", "content": "What is the weather in Paris? Use the tool."}]
    first = llm.create_chat_completion(msgs, max_tokens=48, temperature=0, tools=TOOLS, tool_choice="auto")
    choice = first["choices"][0]
    assert choice["finish_reason"] in ("stop", "length", "tool_calls"), choice
    _check_calls(choice["message"])
    assert (choice["finish_reason"] == "tool_calls") == bool(choice["message"].get("tool_calls")), choice
    # The result turn, whatever the model did: the call as OpenAI's clients send it back.
    calls = choice["message"].get("tool_calls") or [{"id": "call_0", "type": "function", "function": {
        "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]
    msgs += [{"role": "assistant", "content": None, "tool_calls": calls},
             {"role": "tool", "tool_call_id": calls[0]["id"], "content": "{\"temperature\": 21, \"sky\": \"clear\"}"}]
    second = llm.create_chat_completion(msgs, max_tokens=16, temperature=0, tools=TOOLS)
    assert second["choices"][0]["finish_reason"] in ("stop", "length", "tool_calls"), second
    _check_calls(second["choices"][0]["message"])

    # Streamed: the same answer, the text or the calls in deltas.
    text, calls_streamed, finish = "", {}, None
    for chunk in llm.create_chat_completion(msgs, max_tokens=16, temperature=0, tools=TOOLS, stream=True):
        delta = chunk["choices"][0]["delta"]
        text += delta.get("content") or ""
        for c in delta.get("tool_calls") or []:
            slot = calls_streamed.setdefault(c["index"], {"name": "", "arguments": ""})
            slot["name"] += (c.get("function") or {}).get("name") or ""
            slot["arguments"] += (c.get("function") or {}).get("arguments") or ""
        finish = chunk["choices"][0]["finish_reason"] or finish
    whole = second["choices"][0]["message"]
    assert finish == second["choices"][0]["finish_reason"], (finish, second)
    assert [c["name"] for c in calls_streamed.values()] == [c["function"]["name"] for c in whole.get("tool_calls") or []]
    if not whole.get("tool_calls"):
        assert text == whole["content"], (text, whole)


def test_forced_choice_is_taken(llm):
    msgs = [{"role": "user", "content": "Weather in Rome?"}]
    out = llm.create_chat_completion(msgs, max_tokens=24, temperature=0, tools=TOOLS,
                                     tool_choice={"type": "function", "function": {"name": "get_weather"}})
    # Constrained decoding makes this a call once the grammar is enforced;
    # either way the answer's shape is OpenAI's.
    _check_calls(out["choices"][0]["message"])


def test_bad_tool_fields_name_the_field(llm):
    msgs = [{"role": "user", "content": "Hi"}]
    with pytest.raises(ValueError, match="tool_choice"):
        llm.create_chat_completion(msgs, max_tokens=1, tool_choice="required")
    with pytest.raises(ValueError, match=r"tools\[0\]\.function\.name"):
        llm.create_chat_completion(msgs, max_tokens=1, tools=[{"type": "function", "function": {"name": "no spaces"}}])
    with pytest.raises(ValueError, match="tool_choice.function.name"):
        llm.create_chat_completion(msgs, max_tokens=1, tools=TOOLS,
                                   tool_choice={"type": "function", "function": {"name": "other"}})
