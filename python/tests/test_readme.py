"""The README's Python example runs as written."""

import os
import re
import subprocess
import sys

import pytest

from conftest import SOURCE


def readme_snippet():
    text = (SOURCE / "README.md").read_text()
    section = text[text.index("\n## Python"):]
    m = re.search(r"```python\n(.*?)```", section, re.S)
    assert m, "no ```python block in the README's Python section"
    return m.group(1)


def test_the_readme_example_runs(model_path, tmp_path):
    code = readme_snippet()
    assert len(code.strip().splitlines()) <= 6
    # The example reads the model where scripts/fetch-model.sh puts it:
    # ~/.cache/weir, under a home of our own here.
    home = tmp_path / "home"
    (home / ".cache" / "weir").mkdir(parents=True)
    os.symlink(model_path, home / ".cache" / "weir" / "gemma-3-270m-q4_k_m.gguf")
    env = {**os.environ, "HOME": str(home)}
    env.pop("WEIR_MODELS", None)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(" France")
