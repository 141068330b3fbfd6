"""Constrained output and logit_bias through the Python package, as
llama-cpp-python takes them: create_chat_completion's response_format,
create_completion's grammar, json_schema and logit_bias. Answers are checked
by jsonschema (the reference validator) and by Python itself."""
import json

import jsonschema
import pytest

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 20},
        "population": {"type": "integer", "minimum": 0, "maximum": 100000000},
        "capital": {"type": "boolean"},
        "rivers": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3},
    },
    "required": ["city", "population", "capital"],
    "additionalProperties": False,
}


def test_response_format_json_schema(llm):
    for seed in range(4):
        r = llm.create_chat_completion(
            messages=[{"role": "user", "content": "Describe Paris as JSON."}],
            response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA}},
            temperature=1.0, seed=seed, max_tokens=200)
        assert r["choices"][0]["finish_reason"] == "stop", r
        jsonschema.validate(json.loads(r["choices"][0]["message"]["content"]), SCHEMA)


def test_llama_cpp_pythons_json_object_with_schema(llm):
    r = llm.create_chat_completion(messages=[{"role": "user", "content": "A city as JSON."}],
                                   response_format={"type": "json_object", "schema": SCHEMA},
                                   temperature=0.0, max_tokens=200)
    jsonschema.validate(json.loads(r["choices"][0]["message"]["content"]), SCHEMA)
    r = llm.create_chat_completion(messages=[{"role": "user", "content": "A city as JSON."}],
                                   response_format={"type": "json_object"}, temperature=0.0, max_tokens=200)
    if r["choices"][0]["finish_reason"] == "stop":
        assert isinstance(json.loads(r["choices"][0]["message"]["content"]), dict)


def test_grammar_and_json_schema_on_completions(llm):
    for seed in range(4):
        r = llm.create_completion("Is the sky blue? Answer:", grammar='root ::= " " ("yes" | "no") "."',
                                  temperature=1.0, seed=seed, max_tokens=10)
        assert r["choices"][0]["text"] in (" yes.", " no."), r
    r = llm.create_completion("A city:", json_schema=SCHEMA, temperature=0.7, seed=3, max_tokens=200)
    jsonschema.validate(json.loads(r["choices"][0]["text"]), SCHEMA)


def test_logit_bias_bans_a_token(llm):
    prompt = "The capital of France is"
    first = llm.create_completion(prompt, max_tokens=1, temperature=0.0)["choices"][0]["text"]
    ids = llm.tokenize(first.encode(), add_bos=False)
    banned = {i: -100.0 for i in ids[:1]}
    other = llm.create_completion(prompt, max_tokens=1, temperature=0.0, logit_bias=banned)["choices"][0]["text"]
    assert other != first, (first, other)


def test_bad_output_fields_are_refused(llm):
    with pytest.raises(ValueError, match="grammar"):
        llm.create_completion("x", grammar="root ::= ", max_tokens=2)
    with pytest.raises(ValueError, match="logit_bias"):
        llm.create_completion("x", logit_bias={10**9: 1.0}, max_tokens=2)
    with pytest.raises(ValueError, match="response_format"):
        llm.create_chat_completion(messages=[{"role": "user", "content": "x"}], response_format={"type": "xml"})
