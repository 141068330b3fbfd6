#!/usr/bin/env python3
"""weir serve's chat page (GET /) in headless Chromium, driven over the
DevTools protocol: type a message, press Enter, watch the answer stream in.

Usage: chat_page_test.py BASE_URL CHROMIUM SCREENSHOT.png
Checks that the page loads with the model's name, that the answer grows in
several steps (streamed, not all at once), that the final text is what the
API gives for the same conversation at temperature 0, and that a second turn
works; keeps a screenshot. Prints "ok ..." and exits 0, or raises.
"""
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import websocket

base, chromium, shot = sys.argv[1], sys.argv[2], sys.argv[3]


class Browser:
    def __init__(self):
        self.profile = tempfile.mkdtemp(prefix="weir-chromium-")
        self.proc = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--remote-debugging-port=0",
             "--user-data-dir=" + self.profile, "--window-size=900,700", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        port = None
        deadline = time.time() + 60
        while port is None and time.time() < deadline:  # "DevTools listening on ws://127.0.0.1:PORT/..."
            line = self.proc.stderr.readline()
            if not line:
                break
            if "DevTools listening on" in line:
                port = int(line.split("ws://127.0.0.1:")[1].split("/")[0])
        assert port, "chromium did not start its DevTools server"
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list"))
        page = next(t for t in targets if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=120)
        self.next_id = 0
        self.events = []

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]
            self.events.append(msg)

    def js(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, expr, secs=300):
        deadline = time.time() + secs
        while time.time() < deadline:
            if self.js(expr):
                return
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {expr}")

    def close(self):
        try:
            self.ws.close()
        finally:
            self.proc.kill()
            self.proc.wait()
            shutil.rmtree(self.profile, ignore_errors=True)


def api_answer(messages, max_tokens):
    body = json.dumps({"messages": messages, "temperature": 0, "max_tokens": max_tokens}).encode()
    req = urllib.request.Request(base + "/v1/chat/completions", body, {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=300))["choices"][0]["message"]["content"]


b = Browser()
try:
    max_tokens = 24
    b.call("Page.enable")
    b.call("Page.navigate", url=f"{base}/?temperature=0&max_tokens={max_tokens}")
    b.wait_for("document.readyState === 'complete' && document.getElementById('model').textContent !== ''", 60)
    model = b.js("document.getElementById('model').textContent")
    # Every state the answer passes through, recorded by the page itself.
    b.js("""window.__states = [];
            new MutationObserver(() => {
              const a = document.querySelectorAll('.msg.assistant .text');
              if (a.length) window.__states.push(a[a.length - 1].textContent);
            }).observe(document.getElementById('log'), {childList: true, subtree: true, characterData: true});""")
    turns = []
    for question in ["Name a fruit.", "And a colour?"]:
        b.js("window.__states = []; document.getElementById('input').focus()")
        b.call("Input.insertText", text=question)  # typed into the focused box
        for kind in ("keyDown", "keyUp"):
            b.call("Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter", windowsVirtualKeyCode=13,
                   text="\r" if kind == "keyDown" else "")
        b.wait_for("document.body.dataset.state === 'busy'", 30)
        b.wait_for("document.body.dataset.state === 'idle'")
        states = [s for s in b.js("window.__states") if s]
        answer = b.js("Array.from(document.querySelectorAll('.msg.assistant .text')).pop().textContent")
        errors = b.js("Array.from(document.querySelectorAll('.msg.error')).map(e => e.textContent)")
        assert not errors, errors
        assert answer, "no answer"
        assert len(set(states)) >= 3, ("the answer did not stream", states)
        turns.append((question, answer, len(set(states))))
    # The page's conversation is what the API gives for the same messages.
    messages = []
    for question, answer, _ in turns:
        messages.append({"role": "user", "content": question})
        want = api_answer(messages, max_tokens)
        assert answer == want, ("page", answer, "api", want)
        messages.append({"role": "assistant", "content": answer})
    png = base64.b64decode(b.call("Page.captureScreenshot", format="png")["data"])
    os.makedirs(os.path.dirname(os.path.abspath(shot)), exist_ok=True)
    with open(shot, "wb") as f:
        f.write(png)
    print("ok: model", model, "; streamed in", [t[2] for t in turns], "steps; screenshot", shot, len(png), "bytes")
finally:
    b.close()
