"""Where the Python tests find their inputs: the real Gemma 3 270M
(WEIR_TEST_MODEL, fetched by `make test`), the weir command (WEIR_BIN) to
compare with, and the source tree (WEIR_SOURCE). ctest sets all three."""

import os
import pathlib

import pytest

SOURCE = pathlib.Path(os.environ.get("WEIR_SOURCE", pathlib.Path(__file__).resolve().parents[2]))
MODEL = os.environ.get("WEIR_TEST_MODEL", os.path.expanduser("~/.cache/weir/gemma-3-270m-q4_k_m.gguf"))
WEIR_BIN = os.environ.get("WEIR_BIN", str(SOURCE / "build" / "weir"))
THREADS = 2


@pytest.fixture(scope="session")
def model_path():
    if not os.path.isfile(MODEL):
        pytest.skip(f"no model at {MODEL} (scripts/fetch-model.sh fetches it)")
    return MODEL


@pytest.fixture(scope="session")
def llm(model_path):
    import weir

    m = weir.Llama(model_path, n_ctx=2048, n_threads=THREADS, n_parallel=2)
    yield m
    m.close()
