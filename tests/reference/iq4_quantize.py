"""IQ4_NL and IQ4_XS quantization in numpy, float32 throughout, following the
rules llama.cpp publishes in ggml-quants.c (quantize_row_iq4_nl_impl with
ntry = 7, as quantize_iq4_nl / quantize_iq4_xs call it from llama-quantize).
Written apart from weir's C++ (src/core/quant/quantize_lookup.cpp) to check
it byte for byte: vectorised over blocks, one element at a time only where
llama.cpp's float32 sums run in element order.

quantize(x, kind, qw=None) -> uint8 array of blocks as the file holds them.
  x:  float32 (n_rows, n_per_row); qw: float32 (n_per_row,) importance
  weights or None.
"""
import numpy as np

F = np.float32
KVALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.float32)
# Sums of neighbouring table values: 2x at or above the k-th one puts x above
# the k-th midpoint (ties go up).
MID2 = (KVALUES[:-1] + KVALUES[1:]).astype(np.float32)
GROUP_MAX_EPS = F(1e-15)
NTRY = 7


def nearest_index(v):
    """Index of the nearest table value, counting the midpoints below v."""
    v2 = (v + v).astype(np.float32)
    return (v2[..., None] >= MID2).sum(axis=-1).astype(np.int64)


def ordered_sum(terms):
    """Sum over the last axis in element order, float32 (as a C loop)."""
    s = np.zeros(terms.shape[:-1], dtype=np.float32)
    for j in range(terms.shape[-1]):
        s = (s + terms[..., j]).astype(np.float32)
    return s


def block_scales(xb, w):
    """xb, w: (n, 32) float32. Returns the float32 least-squares scale of each
    block after the trial-scale search (0 for blocks below GROUP_MAX_EPS)."""
    amax_idx = np.zeros(xb.shape[0], dtype=np.int64)
    amax = np.zeros(xb.shape[0], dtype=np.float32)
    # First element of the largest magnitude (strict '>' in a forward scan).
    for j in range(xb.shape[1]):
        a = np.abs(xb[:, j])
        bigger = a > amax
        amax = np.where(bigger, a, amax)
        amax_idx = np.where(bigger, j, amax_idx)
    mx = xb[np.arange(xb.shape[0]), amax_idx]
    live = amax >= GROUP_MAX_EPS
    mx_safe = np.where(live, mx, F(1)).astype(np.float32)

    def sums(inv_scale):
        q = KVALUES[nearest_index((inv_scale[:, None] * xb).astype(np.float32))]
        sqx = ordered_sum(((w * q).astype(np.float32) * xb).astype(np.float32))
        sq2 = ordered_sum(((w * q).astype(np.float32) * q).astype(np.float32))
        return sqx, sq2

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        d = (-mx_safe / KVALUES[0]).astype(np.float32)
        sqx, sq2 = sums((F(1) / d).astype(np.float32))
        d = np.where(sq2 > 0, sqx / sq2, F(0)).astype(np.float32)
        best = (d * sqx).astype(np.float32)
        for itry in range(-NTRY, NTRY + 1):
            inv = ((F(itry) + KVALUES[0]) / mx_safe).astype(np.float32)
            sqx, sq2 = sums(inv)
            take = (sq2 > 0) & ((sqx * sqx).astype(np.float32) > (best * sq2).astype(np.float32))
            d_new = np.where(take, sqx / np.where(take, sq2, F(1)), d).astype(np.float32)
            best = np.where(take, (d_new * sqx).astype(np.float32), best)
            d = d_new
    return np.where(live, d, F(0)).astype(np.float32)


def weights(xs, qw, n_super):
    """xs: (n_super_blocks, super) float32 -> least-squares weights."""
    if qw is None:
        return (xs * xs).astype(np.float32)
    sigma2 = (ordered_sum((xs * xs).astype(np.float32)) * F(2.0 / n_super)).astype(np.float32)
    return (qw * np.sqrt((sigma2[:, None] + (xs * xs).astype(np.float32)).astype(np.float32))).astype(np.float32)


def pack(L):
    """(n, 32) indices -> (n, 16) bytes, element j low nibble, j + 16 high."""
    return (L[:, :16] | (L[:, 16:] << 4)).astype(np.uint8)


def fp16_bytes(v):
    return v.astype(np.float32).astype(np.float16).view(np.uint8).reshape(-1, 2)


def quantize_iq4_nl(x, qw):
    n_rows, n = x.shape
    xb = x.reshape(-1, 32).astype(np.float32)
    q = None if qw is None else np.tile(qw.reshape(-1, 32), (n_rows, 1)).astype(np.float32)
    w = weights(xb, q, 32)
    d = block_scales(xb, w)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, F(1) / np.where(d != 0, d, F(1)), F(0)).astype(np.float32)
    L = nearest_index((inv[:, None] * xb).astype(np.float32))
    return np.concatenate([fp16_bytes(d), pack(L)], axis=1).reshape(n_rows, -1)


def quantize_iq4_xs(x, qw):
    n_rows, n = x.shape
    xs = x.reshape(-1, 256).astype(np.float32)
    nsb = xs.shape[0]
    q = None if qw is None else np.tile(qw.reshape(-1, 256), (n_rows, 1)).astype(np.float32)
    w = weights(xs, q, 256)
    sub = block_scales(xs.reshape(-1, 32), w.reshape(-1, 32)).reshape(nsb, 8)
    # The sub-block scale of largest magnitude (the first of equal ones).
    pick = np.zeros(nsb, dtype=np.int64)
    best = np.zeros(nsb, dtype=np.float32)
    for ib in range(8):
        a = np.abs(sub[:, ib])
        bigger = a > best
        best = np.where(bigger, a, best)
        pick = np.where(bigger, ib, pick)
    max_scale = np.where(best > 0, sub[np.arange(nsb), pick], F(0)).astype(np.float32)
    d = (-max_scale / F(32)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = np.where(d != 0, F(1) / np.where(d != 0, d, F(1)), F(0)).astype(np.float32)
        l = np.clip(np.rint((inv[:, None] * sub).astype(np.float32)), -32, 31).astype(np.int64)
        dl = (d[:, None] * l.astype(np.float32)).astype(np.float32)
        idl = np.where(dl != 0, F(1) / np.where(dl != 0, dl, F(1)), F(0)).astype(np.float32)
    L = nearest_index((idl[:, :, None] * xs.reshape(nsb, 8, 32)).astype(np.float32)).reshape(-1, 32)
    u = (l + 32).astype(np.int64)
    scales_l = ((u[:, 0::2] & 15) | ((u[:, 1::2] & 15) << 4)).astype(np.uint8)
    scales_h = np.zeros(nsb, dtype=np.int64)
    for ib in range(8):
        scales_h |= (u[:, ib] >> 4) << (2 * ib)
    scales_h = scales_h.astype(np.uint16).view(np.uint8).reshape(nsb, 2)
    qs = pack(L).reshape(nsb, 128)
    return np.concatenate([fp16_bytes(d), scales_h, scales_l, qs], axis=1).reshape(n_rows, -1)


def quantize(x, kind, qw=None):
    x = np.ascontiguousarray(x, dtype=np.float32)
    if qw is not None:
        qw = np.ascontiguousarray(qw, dtype=np.float32)
    if kind == "IQ4_NL":
        return quantize_iq4_nl(x, qw)
    if kind == "IQ4_XS":
        return quantize_iq4_xs(x, qw)
    raise ValueError(kind)
