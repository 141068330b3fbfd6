#!/usr/bin/env python3
"""Every file includes only its own layer's headers and those of the layers
below it (the house plan: docs/architecture.md), and nothing above backend/
includes a backend's private headers. Fails naming each include that
breaks the plan, so an upward include cannot land.

  tests/build/layer_includes_test.py SOURCE_ROOT
"""
import pathlib
import re
import sys

# Each layer and the layers it may include (its own included).
BELOW = {
    "core": {"core"},
    "text": {"core", "text"},
    "backend": {"core", "backend"},
    "comm": {"core", "backend", "comm"},
    "sched": {"core", "backend", "comm", "sched"},
    "model": {"core", "text", "backend", "comm", "sched", "model"},
    "engine": {"core", "text", "backend", "comm", "sched", "model", "engine"},
    "server": {"core", "text", "backend", "comm", "sched", "model", "engine", "server"},
    "tools": {"core", "text", "backend", "comm", "sched", "model", "engine", "server", "tools"},
    # The Python package: the engine and text alone (and core's errors).
    "python": {"core", "text", "engine"},
}
# What a backend shows the layers above it; the rest of backend/ (kernels,
# plans, the CUDA backend's insides) is its own business.
BACKEND_PUBLIC = {
    "backend/backend.h", "backend/registry.h", "backend/cuda_options.h", "backend/memory_ranges.h",
    "backend/token_sampler.h", "backend/cpu/cpu_backend.h", "backend/cpu/membw.h", "backend/cpu/amx.h",
    # what the CPU's products run on, for --version and bench
    "backend/cpu/kernel_choice.h",
    # the process-wide kernel choice (SIMD level cap, prefetch plan) tools/ sets once
    "backend/cpu/qdot.h",
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(rel: pathlib.PurePath) -> str:
    parts = rel.parts
    if parts[0] == "python":
        return "python"
    return parts[1] if parts[0] == "src" else ""


def main() -> int:
    root = pathlib.Path(sys.argv[1])
    bad = []
    files = [p for d in ("src", "python/bindings") for p in (root / d).rglob("*")
             if p.suffix in (".h", ".cpp", ".cu", ".cuh")]
    for path in files:
        rel = path.relative_to(root)
        layer = layer_of(rel)
        if layer not in BELOW:
            continue
        for inc in INCLUDE.findall(path.read_text(errors="replace")):
            top = inc.split("/")[0]
            if top not in BELOW:
                continue  # generated files, third-party headers
            if top not in BELOW[layer]:
                bad.append(f"{rel}: includes {inc}: {layer}/ may not include {top}/ (a layer above it)")
            elif top == "backend" and layer != "backend" and inc not in BACKEND_PUBLIC:
                bad.append(f"{rel}: includes {inc}: a backend's private header (public: backend/backend.h, "
                           f"registry.h, cpu/cpu_backend.h ...)")
    for b in bad:
        print(b)
    print(f"layer includes: {len(files)} files, {len(bad)} outside the plan")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
