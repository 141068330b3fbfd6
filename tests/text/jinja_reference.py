#!/usr/bin/env python3
"""The reference for weir's Jinja engine (src/text/jinja): renders templates
with Python's jinja2 as Hugging Face's apply_chat_template sets it up.

Reads JSON from stdin, a list of {"template": str, "context": {...}}, and
writes a list of {"ok": true, "output": str} or {"ok": false, "error": str}
in the same order. The environment: ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and the loop controls; the globals
raise_exception(msg) and strftime_now(fmt); a {% generation %} tag that
renders its body as is (a call block, as Hugging Face's is); Hugging
Face's tojson filter (json.dumps with ensure_ascii=False, keys in order).
"""
import json
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationExtension(Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        call = self.call_method("_render_body", [])
        return nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # Hugging Face's (transformers' chat template utilities).
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def main():
    cases = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=["jinja2.ext.loopcontrols", GenerationExtension],
    )
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.filters["tojson"] = tojson
    results = []
    compiled = {}  # the chat templates are rendered over many conversations
    for case in cases:
        try:
            source = case["template"]
            if source not in compiled:
                compiled[source] = env.from_string(source)
            output = compiled[source].render(**case["context"])
            results.append({"ok": True, "output": output})
        except Exception as e:  # every failure is a result: the C++ side must fail too
            results.append({"ok": False, "error": "%s: %s" % (type(e).__name__, e)})
    sys.stdout.write(json.dumps(results, ensure_ascii=True))


if __name__ == "__main__":
    main()
