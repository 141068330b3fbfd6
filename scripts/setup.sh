#!/usr/bin/env bash
# Install what weir's build and tests need, skipping what is already present.
# Debian packages via apt-get (as root), Python packages via pip.
set -euo pipefail

need_apt=()
have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

for p in cmake ninja-build g++ clang libclang-rt-14-dev libgtest-dev libgmock-dev ccache python3-pip pkg-config libpcre2-dev \
  openmpi-bin libopenmpi-dev nlohmann-json3-dev libcpp-httplib-dev chromium-headless-shell; do
  have_pkg "$p" || need_apt+=("$p")
done
# python3-pip is only needed when pip is missing.
if have_cmd pip3 || python3 -m pip --version >/dev/null 2>&1; then
  need_apt=("${need_apt[@]/python3-pip}")
fi
pkgs=$(printf '%s\n' "${need_apt[@]}" | grep -v '^$' || true)
if [ -n "$pkgs" ]; then
  echo "setup: apt-get install $pkgs" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $pkgs >/dev/null
fi

py="${PYTHON:-python3}"
missing_py=()
"$py" -c "import numpy" 2>/dev/null || missing_py+=(numpy)
"$py" -c "import gguf" 2>/dev/null || missing_py+=(gguf)
"$py" -c "import jinja2" 2>/dev/null || missing_py+=(jinja2)  # the chat template tests' reference
"$py" -c "import openai" 2>/dev/null || missing_py+=(openai)  # weir serve's reference client
"$py" -c "import jsonschema" 2>/dev/null || missing_py+=(jsonschema)  # structured output's reference validator
"$py" -c "import websocket" 2>/dev/null || missing_py+=(websocket-client)  # drives headless Chromium (chat page test)
# The Python package: its build (scikit-build-core, nanobind), its tests (pytest)
# and the sdist test (build).
"$py" -c "import nanobind" 2>/dev/null || missing_py+=(nanobind)
"$py" -c "import scikit_build_core" 2>/dev/null || missing_py+=(scikit-build-core)
"$py" -c "import pytest" 2>/dev/null || missing_py+=(pytest)
"$py" -c "import build" 2>/dev/null || missing_py+=(build)
if [ ${#missing_py[@]} -gt 0 ]; then
  echo "setup: pip install ${missing_py[*]}" >&2
  "$py" -m pip install --quiet --disable-pip-version-check "${missing_py[@]}" \
    || "$py" -m pip install --quiet --disable-pip-version-check --break-system-packages "${missing_py[@]}"
fi

# XGrammar's C++ core (constrained decoding), from its source release on PyPI.
"$(dirname "$0")/install-xgrammar.sh"
