"""The package as users get it: an sdist of the source tree, built and
installed by pip (scikit-build-core and nanobind from the environment, as
scripts/setup.sh installs them), then imported from where pip put it."""

import os
import subprocess
import sys

from conftest import MODEL, SOURCE


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return r


def test_sdist_builds_and_installs_with_pip(tmp_path):
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", str(dist), str(SOURCE)])
    sdists = list(dist.glob("weir-*.tar.gz"))
    assert len(sdists) == 1
    listing = run(["tar", "tzf", str(sdists[0])]).stdout.splitlines()
    assert any(n.endswith("/pyproject.toml") for n in listing)
    assert any(n.endswith("/python/bindings/module.cpp") for n in listing)
    assert not any("/build/" in n or n.endswith(".gguf") for n in listing), "the sdist carries build output or models"

    site = tmp_path / "site"
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # the installed package, not the build folder's
    run([sys.executable, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-deps", "--target",
         str(site), str(sdists[0])], env=env, timeout=3000)
    pkg = site / "weir"
    assert (pkg / "__init__.py").is_file() and (pkg / "py.typed").is_file() and (pkg / "_weir.pyi").is_file()
    assert list(pkg.glob("_weir*.so"))

    check = (
        "import sys, weir; assert weir.__file__.startswith(sys.argv[1]), weir.__file__\n"
        "import os\n"
        "if os.path.isfile(sys.argv[2]):\n"
        "    llm = weir.Llama(sys.argv[2], n_ctx=256, n_threads=2)\n"
        "    print(llm.tokenize(b'Hello world'))\n"
        "    print(llm('Hello', max_tokens=3, temperature=0)['usage']['completion_tokens'])\n"
    )
    out = run([sys.executable, "-c", check, str(site), MODEL], env={**env, "PYTHONPATH": str(site)}).stdout.split()
    if os.path.isfile(MODEL):
        assert out[-1] == "3"
