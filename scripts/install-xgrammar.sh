#!/usr/bin/env bash
# XGrammar's C++ core (constrained decoding: src/engine/grammar/), built once
# from its PyPI source release into a prefix CMake looks in:
#   scripts/install-xgrammar.sh [PREFIX]   (default: $WEIR_DEPS/xgrammar-$VERSION,
#                                           WEIR_DEPS defaulting to ~/.cache/weir/deps)
# The sdist is checked against its SHA-256; the static library is built with
# the Python bindings off (its cmake/config.cmake turns them on, so a
# config.cmake in the build folder, which it reads first, turns them off) and
# without LTO, so weir's own compiler links it. Does nothing when the prefix
# already holds this version.
set -euo pipefail

version=0.2.8
sha256=8305646fd2b319d6c3003f51a1665e54cbbe9cba1fb636bc41d0b46434ccbb80
deps="${WEIR_DEPS:-$HOME/.cache/weir/deps}"
prefix="${1:-$deps/xgrammar-$version}"
py="${PYTHON:-python3}"

if [ -f "$prefix/lib/libxgrammar.a" ] && [ -f "$prefix/include/xgrammar/xgrammar.h" ]; then
  exit 0
fi
echo "setup: building XGrammar $version into $prefix (about 2 minutes on 2 cores)" >&2
mkdir -p "$deps"
work=$(mktemp -d "$deps/xgrammar-build.XXXXXX")
trap 'rm -rf "$work"' EXIT

tarball="$deps/xgrammar-$version.tar.gz"
if ! echo "$sha256  $tarball" | sha256sum -c --status 2>/dev/null; then
  # pip prepares an sdist's metadata when downloading it; XGrammar's needs setuptools_scm.
  "$py" -c "import setuptools_scm" 2>/dev/null ||
    "$py" -m pip install --quiet --disable-pip-version-check setuptools_scm ||
    "$py" -m pip install --quiet --disable-pip-version-check --break-system-packages setuptools_scm
  "$py" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: --no-build-isolation \
    --dest "$work" "xgrammar==$version"
  mv "$work/xgrammar-$version.tar.gz" "$tarball"
  if ! echo "$sha256  $tarball" | sha256sum -c --status; then
    echo "setup: $tarball does not have the expected SHA-256 ($sha256)" >&2
    rm -f "$tarball"
    exit 1
  fi
fi
tar -xzf "$tarball" -C "$work"
src="$work/xgrammar-$version"
mkdir -p "$work/build"
cat >"$work/build/config.cmake" <<'EOF'
set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)
set(XGRAMMAR_BUILD_CXX_TESTS OFF)
set(XGRAMMAR_ENABLE_CPPTRACE OFF)
set(XGRAMMAR_ENABLE_COVERAGE OFF)
set(XGRAMMAR_ENABLE_INTERNAL_CHECK OFF)
EOF
launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
log="$work/build.log"
if ! { cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" \
         -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DCMAKE_CXX_FLAGS="-fno-lto -Wno-error" "${launcher[@]}" &&
       cmake --build "$work/build" -j "$(nproc)" &&
       cmake --install "$work/build"; } >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  echo "setup: XGrammar's build failed" >&2
  exit 1
fi
