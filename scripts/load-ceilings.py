#!/usr/bin/env python3
"""The plain ceilings of a model load on this host, to hold weir's loader to.

    scripts/load-ceilings.py FILE [--threads 1,16] [--chunk-mb 16]

- page cache: GB/s reading FILE (warm: read once first) with pread into
  reused buffers, on 1 and N threads;
- O_DIRECT: GB/s reading FILE around the page cache (the disk), N threads;
- pinned H2D: GB/s of one host-to-device copy from pinned memory (torch, when
  it and a GPU are present).
Each figure is the best of 3. Prints one line per figure.
"""
import argparse
import mmap
import os
import sys
import threading
import time


def read_all(path, threads, chunk, direct=False):
    flags = os.O_RDONLY | (os.O_DIRECT if direct else 0)
    fd = os.open(path, flags)
    size = os.fstat(fd).st_size
    chunks = list(range(0, size, chunk))
    nxt = [0]
    lock = threading.Lock()
    done = [0]

    def body():
        buf = mmap.mmap(-1, chunk)  # page aligned, as O_DIRECT needs
        got = 0
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= len(chunks):
                break
            got += os.preadv(fd, [buf], chunks[i])
        with lock:
            done[0] += got

    ts = [threading.Thread(target=body) for _ in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    s = time.perf_counter() - t0
    os.close(fd)
    return done[0] / s / 1e9


def drop_cache(path):
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--threads", default="1,16")
    ap.add_argument("--chunk-mb", type=int, default=16)
    a = ap.parse_args()
    threads = [int(x) for x in a.threads.split(",")]
    chunk = a.chunk_mb << 20
    size = os.path.getsize(a.file)
    print(f"file {a.file}: {size / 1e9:.2f} GB; chunks of {a.chunk_mb} MiB; best of 3")
    read_all(a.file, max(threads), chunk)  # warm the page cache
    for n in threads:
        best = max(read_all(a.file, n, chunk) for _ in range(3))
        print(f"page cache read, {n} thread{'s' if n > 1 else ''}: {best:.1f} GB/s")
    try:
        best = 0.0
        for _ in range(3):
            drop_cache(a.file)
            best = max(best, read_all(a.file, max(threads), chunk, direct=True))
        print(f"O_DIRECT read, {max(threads)} threads: {best:.1f} GB/s")
    except OSError as e:
        print(f"O_DIRECT read: refused here ({e})")
    read_all(a.file, max(threads), chunk)  # leave it warm, as found
    try:
        import torch
        if not torch.cuda.is_available():
            raise ImportError("no GPU")
        n = min(size, 2 << 30)
        src = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        dst = torch.empty(n, dtype=torch.uint8, device="cuda")
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        best = 0.0
        for _ in range(3):
            t0 = time.perf_counter()
            dst.copy_(src, non_blocking=True)
            torch.cuda.synchronize()
            best = max(best, n / (time.perf_counter() - t0) / 1e9)
        print(f"pinned H2D copy ({n / 1e9:.1f} GB): {best:.1f} GB/s")
    except ImportError as e:
        print(f"pinned H2D copy: not measured ({e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
