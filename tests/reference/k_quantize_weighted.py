"""Quantization with importance weights in numpy, float32 throughout,
following llama.cpp's published rules (ggml-quants.c: quantize_row_q4_K_impl,
q5_K_impl, q6_K_impl, q2_K_impl, q3_K_impl, q4_0_impl, q4_1_impl, q5_0_impl, q5_1_impl with
quant_weights; make_qkx3_quants, make_qp_quants, make_qx_quants), written
apart from weir's C++ (src/core/quant/quantize_weighted.cpp) to check it
byte for byte. Vectorised over blocks; element loops wherever llama.cpp sums
in order.

quantize(x, kind, qw) -> uint8 blocks; x float32 (n_rows, n_per_row), qw
float32 (n_per_row,), kind one of Q2_K ... Q6_K, Q4_0, Q4_1, Q5_0, Q5_1.
"""
import numpy as np

F = np.float32


def nearest_int(v):
    """ggml's nearest_int: v + 1.5 * 2^23 in float32, low mantissa bits."""
    f = (np.asarray(v, dtype=np.float32) + F(12582912.0)).astype(np.float32)
    return (f.view(np.int32).astype(np.int64) & 0x7FFFFF) - 0x400000


def f32(a):
    return np.asarray(a, dtype=np.float32)


def make_qkx3(x, w, nmax):
    """x, w: (n, 32). Returns scale (n,), the_min (n,), L (n, 32) int."""
    n, m = x.shape
    mn = x[:, 0].copy()
    mx = x[:, 0].copy()
    sum_w = w[:, 0].copy()
    sum_x = f32(sum_w * x[:, 0])
    for i in range(1, m):
        mn = np.where(x[:, i] < mn, x[:, i], mn)
        mx = np.where(x[:, i] > mx, x[:, i], mx)
        sum_w = f32(sum_w + w[:, i])
        sum_x = f32(sum_x + f32(w[:, i] * x[:, i]))
    mn = np.where(mn > 0, F(0), mn).astype(np.float32)
    flat = mx <= mn
    rng = np.where(flat, F(1), f32(mx - mn))
    with np.errstate(all="ignore"):
        iscale = f32(F(nmax) / rng)
        scale = f32(F(1) / iscale)
        L = np.clip(nearest_int(f32(iscale[:, None] * f32(x - mn[:, None]))), 0, nmax)
        best = np.zeros(n, dtype=np.float32)
        for i in range(m):
            diff = f32(f32(f32(scale * f32(L[:, i])) + mn) - x[:, i])
            best = f32(best + f32(w[:, i] * f32(diff * diff)))
        for step in range(37):
            # (max - min) with the best min so far, as llama.cpp divides by it
            rng = np.where(flat, F(1), f32(mx - mn))
            isc = f32(f32(f32(F(-0.9) + f32(F(0.05) * F(step))) + F(nmax)) / rng)
            v = f32(isc[:, None] * f32(x - mn[:, None]))
            Laux = np.where(v > 0, nearest_int(np.where(v < F(nmax), v, F(nmax))), 0)
            sl = np.zeros(n, np.float32)
            sl2 = np.zeros(n, np.float32)
            sxl = np.zeros(n, np.float32)
            for i in range(m):
                fl = f32(Laux[:, i])
                sl = f32(sl + f32(w[:, i] * fl))
                sl2 = f32(sl2 + f32(f32(w[:, i] * fl) * fl))
                sxl = f32(sxl + f32(f32(w[:, i] * fl) * x[:, i]))
            D = f32(f32(sum_w * sl2) - f32(sl * sl))
            ok = D > 0
            Ds = np.where(ok, D, F(1))
            this_scale = f32(f32(f32(sum_w * sxl) - f32(sum_x * sl)) / Ds)
            this_min = f32(f32(f32(sl2 * sum_x) - f32(sl * sxl)) / Ds)
            pos = this_min > 0
            this_scale = np.where(pos, f32(sxl / np.where(pos, sl2, F(1))), this_scale).astype(np.float32)
            this_min = np.where(pos, F(0), this_min).astype(np.float32)
            err = np.zeros(n, np.float32)
            for i in range(m):
                diff = f32(f32(f32(this_scale * f32(Laux[:, i])) + this_min) - x[:, i])
                err = f32(err + f32(w[:, i] * f32(diff * diff)))
            take = ok & (err < best) & ~flat
            L = np.where(take[:, None], Laux, L)
            best = np.where(take, err, best)
            scale = np.where(take, this_scale, scale).astype(np.float32)
            mn = np.where(take, this_min, mn).astype(np.float32)
    scale = np.where(flat, F(0), scale).astype(np.float32)
    L = np.where(flat[:, None], 0, L)
    return scale, f32(-mn), L


def make_qp(x, w, nmax):
    """x, w: (n, 8) non-negative values and weights. Returns scale (n,) and
    L (n, 8) as bytes (uint8 wrap, as llama.cpp stores them)."""
    n, m = x.shape
    mx = np.zeros(n, np.float32)
    for i in range(m):
        mx = np.where(mx > x[:, i], mx, x[:, i]).astype(np.float32)
    zero = mx < F(1e-15)
    mxs = np.where(zero, F(1), mx)
    with np.errstate(all="ignore"):
        iscale = f32(F(nmax) / mxs)
        L = nearest_int(f32(iscale[:, None] * x)) & 0xFF
        scale = f32(F(1) / iscale)
        best = np.zeros(n, np.float32)
        for i in range(m):
            diff = f32(x[:, i] - f32(scale * f32(L[:, i])))
            best = f32(best + f32(f32(w[:, i] * diff) * diff))
        for s in (-4, -3, -2, -1, 1, 2, 3, 4):
            isc = f32(f32(f32(F(0.1) * F(s)) + F(nmax)) / mxs)
            sc = f32(F(1) / isc)
            mse = np.zeros(n, np.float32)
            for i in range(m):
                l = np.minimum(nearest_int(f32(isc * x[:, i])), nmax)
                diff = f32(x[:, i] - f32(sc * f32(l)))
                mse = f32(mse + f32(f32(w[:, i] * diff) * diff))
            take = mse < best
            best = np.where(take, mse, best).astype(np.float32)
            iscale = np.where(take, isc, iscale).astype(np.float32)
        sumlx = np.zeros(n, np.float32)
        suml2 = np.zeros(n, np.float32)
        L = np.zeros((n, m), np.int64)
        for i in range(m):
            l = np.minimum(nearest_int(f32(iscale * x[:, i])), nmax)
            L[:, i] = l & 0xFF
            sumlx = f32(sumlx + f32(f32(w[:, i] * x[:, i]) * f32(l)))
            suml2 = f32(suml2 + f32(f32(w[:, i] * f32(l)) * f32(l)))
        active = np.ones(n, bool)
        for _ in range(5):
            changed = np.zeros(n, bool)
            for i in range(m):
                Li = f32(L[:, i])
                slx = f32(sumlx - f32(f32(w[:, i] * x[:, i]) * Li))
                sl2 = f32(suml2 - f32(f32(w[:, i] * Li) * Li))
                cand = active & (slx > 0) & (sl2 > 0)
                new_l = np.minimum(nearest_int(f32(f32(x[:, i] * sl2) / np.where(cand, slx, F(1)))), nmax)
                cand &= new_l != L[:, i]
                slx2 = f32(slx + f32(f32(w[:, i] * x[:, i]) * f32(new_l)))
                sl22 = f32(sl2 + f32(f32(w[:, i] * f32(new_l)) * f32(new_l)))
                better = cand & (f32(f32(slx2 * slx2) * suml2) > f32(f32(sumlx * sumlx) * sl22))
                L[:, i] = np.where(better, new_l & 0xFF, L[:, i])
                sumlx = np.where(better, slx2, sumlx).astype(np.float32)
                suml2 = np.where(better, sl22, suml2).astype(np.float32)
                changed |= better
            active &= changed
        result = np.where(suml2 > 0, f32(sumlx / np.where(suml2 > 0, suml2, F(1))), F(0)).astype(np.float32)
    result = np.where(zero, F(0), result).astype(np.float32)
    L = np.where(zero[:, None], 0, L)
    return result, L


def make_qx(x, w, nmax):
    """x, w: (n, m). Symmetric fit; returns scale (n,) and L (n, m) in
    [0, 2 nmax - 1] (l + nmax)."""
    n, m = x.shape
    amax = np.zeros(n, np.float32)
    mx = np.zeros(n, np.float32)
    for i in range(m):
        a = np.abs(x[:, i])
        bigger = a > amax
        amax = np.where(bigger, a, amax)
        mx = np.where(bigger, x[:, i], mx)
    zero = amax < F(1e-15)
    mxs = np.where(zero, F(1), mx)

    def quant(isc):
        return np.clip(nearest_int(f32(isc[:, None] * x)), -nmax, nmax - 1)

    def sums(l):
        sx = np.zeros(n, np.float32)
        s2 = np.zeros(n, np.float32)
        for i in range(m):
            fl = f32(l[:, i])
            sx = f32(sx + f32(f32(w[:, i] * x[:, i]) * fl))
            s2 = f32(s2 + f32(f32(w[:, i] * fl) * fl))
        return sx, s2

    with np.errstate(all="ignore"):
        iscale = f32(F(-nmax) / mxs)
        l = quant(iscale)
        L = l + nmax
        sumlx, suml2 = sums(l)
        scale = np.where(suml2 != 0, f32(sumlx / np.where(suml2 != 0, suml2, F(1))), F(0)).astype(np.float32)
        best = f32(scale * sumlx)
        for s in range(-9, 10):
            if s == 0:
                continue
            isc = f32(f32(-f32(F(nmax) + f32(F(0.1) * F(s)))) / mxs)
            l = quant(isc)
            sx, s2 = sums(l)
            take = (s2 > 0) & (f32(sx * sx) > f32(best * s2))
            L = np.where(take[:, None], l + nmax, L)
            sc = f32(sx / np.where(take, s2, F(1)))
            scale = np.where(take, sc, scale).astype(np.float32)
            best = np.where(take, f32(sc * sx), best).astype(np.float32)
    return np.where(zero, F(0), scale).astype(np.float32), np.where(zero[:, None], 0, L)


def quantize_q6_K(x, qw):
    n_rows = x.shape[0]
    xs = x.reshape(-1, 256)
    nsb = xs.shape[0]
    q = np.tile(np.asarray(qw, dtype=np.float32).reshape(-1, 256), (n_rows, 1))
    scales, L = make_qx(xs.reshape(-1, 16), q.reshape(-1, 16), 32)
    scales, L = scales.reshape(nsb, 16), L.reshape(nsb, 256)
    amax = np.zeros(nsb, np.float32)
    mx = np.zeros(nsb, np.float32)
    for ib in range(16):
        a = np.abs(scales[:, ib])
        bigger = a > amax
        amax = np.where(bigger, a, amax)
        mx = np.where(bigger, scales[:, ib], mx)
    zero = amax < F(1e-15)
    with np.errstate(all="ignore"):
        iscale = f32(F(-128) / np.where(zero, F(1), mx))
        d16 = f32(F(1) / iscale).astype(np.float16)
        sc = np.minimum(127, nearest_int(f32(iscale[:, None] * scales)))
        d = f32(d16.astype(np.float32)[:, None] * f32(sc))
        req = np.clip(nearest_int(f32(xs.reshape(nsb, 16, 16) / np.where(d == 0, F(1), d)[:, :, None])), -32, 31) + 32
    L = np.where((d == 0)[:, :, None], L.reshape(nsb, 16, 16), req).reshape(nsb, 256)
    Lr = L.reshape(nsb, 2, 4, 32)  # [half, s, l]
    ql = np.zeros((nsb, 2, 64), np.int64)
    ql[:, :, 0:32] = (Lr[:, :, 0] & 0xF) | ((Lr[:, :, 2] & 0xF) << 4)
    ql[:, :, 32:64] = (Lr[:, :, 1] & 0xF) | ((Lr[:, :, 3] & 0xF) << 4)
    qh = (Lr[:, :, 0] >> 4) | ((Lr[:, :, 1] >> 4) << 2) | ((Lr[:, :, 2] >> 4) << 4) | ((Lr[:, :, 3] >> 4) << 6)
    out = np.concatenate([ql.reshape(nsb, 128), qh.reshape(nsb, 64), (sc & 0xFF).astype(np.int64),
                          d16.view(np.uint16).astype(np.int64)[:, None] & 0xFF,
                          d16.view(np.uint16).astype(np.int64)[:, None] >> 8], axis=1)
    out = np.where(zero[:, None], 0, out)
    return out.astype(np.uint8).reshape(n_rows, -1)


def pack_2bit(L):
    """(n, 256) values in [0, 3] -> (n, 64): element 128 h + 32 s + l at
    byte 32 h + l, bits 2 s."""
    Lr = L.reshape(L.shape[0], 2, 4, 32)
    return (Lr[:, :, 0] | (Lr[:, :, 1] << 2) | (Lr[:, :, 2] << 4) | (Lr[:, :, 3] << 6)).reshape(L.shape[0], 64)


def super_weights(xs, q, two):
    nsb = xs.shape[0]
    sumx2 = np.zeros(nsb, np.float32)
    for j in range(256):
        sumx2 = f32(sumx2 + f32(xs[:, j] * xs[:, j]))
    sigma2 = f32(f32(F(2) * sumx2) / F(256)) if two else f32(sumx2 / F(256))
    w = f32(q * np.sqrt(f32(sigma2[:, None] + f32(xs * xs))))
    sw = np.zeros((nsb, 16), np.float32)
    for j in range(16):
        for l in range(16):
            sw[:, j] = f32(sw[:, j] + w[:, 16 * j + l])
    return w, sw


def quantize_q2_K(x, qw):
    n_rows = x.shape[0]
    xs = x.reshape(-1, 256)
    nsb = xs.shape[0]
    q = np.tile(np.asarray(qw, dtype=np.float32).reshape(-1, 256), (n_rows, 1))
    w, sw = super_weights(xs, q, False)
    scales, mins, L = make_qkx3(xs.reshape(-1, 16), w.reshape(-1, 16), 3)
    scales, mins, L = scales.reshape(nsb, 16), mins.reshape(nsb, 16), L.reshape(nsb, 256)
    dm, Ls = make_qp(scales, sw, 15)
    mm, Lm = make_qp(mins, sw, 15)
    d16, m16 = dm.astype(np.float16), mm.astype(np.float16)
    sc = (Ls | (Lm << 4)) & 0xFF
    d = f32(d16.astype(np.float32)[:, None] * f32(sc & 0xF))
    m = f32(m16.astype(np.float32)[:, None] * f32(sc >> 4))
    with np.errstate(all="ignore"):
        req = np.clip(nearest_int(f32(f32(xs.reshape(nsb, 16, 16) + m[:, :, None]) / np.where(d == 0, F(1), d)[:, :, None])), 0, 3)
    L = np.where((d == 0)[:, :, None], L.reshape(nsb, 16, 16), req).reshape(nsb, 256)
    out = np.concatenate([sc, pack_2bit(L), d16.view(np.uint8).reshape(nsb, 2).astype(np.int64),
                          m16.view(np.uint8).reshape(nsb, 2).astype(np.int64)], axis=1)
    return out.astype(np.uint8).reshape(n_rows, -1)


def quantize_q3_K(x, qw):
    n_rows = x.shape[0]
    xs = x.reshape(-1, 256)
    nsb = xs.shape[0]
    q = np.tile(np.asarray(qw, dtype=np.float32).reshape(-1, 256), (n_rows, 1))
    w, sw = super_weights(xs, q, True)
    scales, L = make_qx(xs.reshape(-1, 16), w.reshape(-1, 16), 4)
    scales, L = scales.reshape(nsb, 16), L.reshape(nsb, 256)
    d_block, Ls = make_qx(scales, sw, 32)
    packed = np.zeros((nsb, 12), np.int64)
    packed[:, 0:8] = Ls[:, 0:8] & 0xF
    packed[:, 0:8] |= (Ls[:, 8:16] & 0xF) << 4
    for j in range(16):
        packed[:, 8 + j % 4] |= (Ls[:, j] >> 4) << (2 * (j // 4))
    d16 = d_block.astype(np.float16)
    lo = np.concatenate([packed[:, 0:8] & 0xF, packed[:, 0:8] >> 4], axis=1)
    hi = np.stack([(packed[:, 8 + j % 4] >> (2 * (j // 4))) & 3 for j in range(16)], axis=1)
    sc = (lo | (hi << 4)) - 32
    d = f32(d16.astype(np.float32)[:, None] * f32(sc))
    with np.errstate(all="ignore"):
        req = np.clip(nearest_int(f32(xs.reshape(nsb, 16, 16) / np.where(d == 0, F(1), d)[:, :, None])), -4, 3) + 4
    L = np.where((d == 0)[:, :, None], L.reshape(nsb, 16, 16), req).reshape(nsb, 256)
    hmask = np.zeros((nsb, 32), np.int64)
    for j in range(256):
        hmask[:, j % 32] |= (L[:, j] > 3).astype(np.int64) << (j // 32)
    L = np.where(L > 3, L - 4, L)
    out = np.concatenate([hmask, pack_2bit(L), packed, d16.view(np.uint8).reshape(nsb, 2).astype(np.int64)], axis=1)
    return out.astype(np.uint8).reshape(n_rows, -1)


def quantize_legacy(x, kind, qw):
    n_rows, n_per_row = x.shape
    sum_x2 = np.zeros(n_rows, np.float32)
    for j in range(n_per_row):
        sum_x2 = f32(sum_x2 + f32(x[:, j] * x[:, j]))
    sigma2 = f32(sum_x2 / F(n_per_row))
    w = f32(np.asarray(qw, dtype=np.float32)[None, :] * np.sqrt(f32(sigma2[:, None] + f32(x * x))))
    xb, wb = x.reshape(-1, 32), w.reshape(-1, 32)
    nb = xb.shape[0]
    if kind in ("Q4_0", "Q5_0"):
        d, L = make_qx(xb, wb, 8 if kind == "Q4_0" else 16)
        head = [d.astype(np.float16).view(np.uint8).reshape(nb, 2)]
    else:
        d, the_min, L = make_qkx3(xb, wb, 15 if kind == "Q4_1" else 31)
        head = [d.astype(np.float16).view(np.uint8).reshape(nb, 2), f32(-the_min).astype(np.float16).view(np.uint8).reshape(nb, 2)]
    qs = ((L[:, :16] & 0xF) | ((L[:, 16:] & 0xF) << 4)).astype(np.uint8)
    if kind in ("Q5_0", "Q5_1"):
        qh = np.zeros(nb, np.int64)
        for j in range(32):
            qh |= ((L[:, j] >> 4) & 1) << j
        head.append(qh.astype(np.uint32).view(np.uint8).reshape(nb, 4))
    return np.concatenate(head + [qs], axis=1).reshape(n_rows, -1)


def quantize(x, kind, qw):
    x = np.ascontiguousarray(x, dtype=np.float32)
    if kind == "Q6_K":
        return quantize_q6_K(x, qw)
    if kind == "Q2_K":
        return quantize_q2_K(x, qw)
    if kind == "Q3_K":
        return quantize_q3_K(x, qw)
    if kind in ("Q4_0", "Q4_1", "Q5_0", "Q5_1"):
        return quantize_legacy(x, kind, qw)
    nmax = 15 if kind == "Q4_K" else 31
    x = np.ascontiguousarray(x, dtype=np.float32)
    n_rows, n_per_row = x.shape
    xs = x.reshape(-1, 256)
    nsb = xs.shape[0]
    q = np.tile(np.asarray(qw, dtype=np.float32).reshape(-1, 256), (n_rows, 1))
    sum_x2 = np.zeros(nsb, np.float32)
    for l in range(256):
        sum_x2 = f32(sum_x2 + f32(xs[:, l] * xs[:, l]))
    sigma2 = f32(f32(F(2) * sum_x2) / F(256))
    w = f32(q * np.sqrt(f32(sigma2[:, None] + f32(xs * xs))))
    sw = np.zeros((nsb, 8), np.float32)
    for j in range(8):
        for l in range(32):
            sw[:, j] = f32(sw[:, j] + w[:, 32 * j + l])
    scales, mins, L = make_qkx3(xs.reshape(-1, 32), w.reshape(-1, 32), nmax)
    scales, mins, L = scales.reshape(nsb, 8), mins.reshape(nsb, 8), L.reshape(nsb, 256)
    d_block, Ls = make_qp(scales, sw, 63)
    m_block, Lm = make_qp(mins, sw, 63)
    if kind == "Q5_K":
        Ls, Lm = np.minimum(Ls, 63), np.minimum(Lm, 63)
    sc = np.zeros((nsb, 12), np.int64)
    sc[:, 0:4] = Ls[:, 0:4]
    sc[:, 4:8] = Lm[:, 0:4]
    sc[:, 8:12] = (Ls[:, 4:8] & 0xF) | ((Lm[:, 4:8] & 0xF) << 4)
    sc[:, 0:4] |= (Ls[:, 4:8] >> 4) << 6
    sc[:, 4:8] |= (Lm[:, 4:8] >> 4) << 6
    sc &= 0xFF
    d16 = d_block.astype(np.float16)
    m16 = m_block.astype(np.float16)
    # Unpacked back from the stored bytes (get_scale_min_k4).
    s_un = np.concatenate([sc[:, 0:4] & 63, (sc[:, 8:12] & 0xF) | ((sc[:, 0:4] >> 6) << 4)], axis=1)
    m_un = np.concatenate([sc[:, 4:8] & 63, (sc[:, 8:12] >> 4) | ((sc[:, 4:8] >> 6) << 4)], axis=1)
    d = f32(d16.astype(np.float32)[:, None] * f32(s_un))
    dm = f32(m16.astype(np.float32)[:, None] * f32(m_un))
    with np.errstate(all="ignore"):
        req = np.clip(nearest_int(f32(f32(xs.reshape(nsb, 8, 32) + dm[:, :, None]) / np.where(d == 0, F(1), d)[:, :, None])), 0, nmax)
    L = np.where((d == 0)[:, :, None], L.reshape(nsb, 8, 32), req).reshape(nsb, 256)
    head = np.concatenate([d16.view(np.uint8).reshape(nsb, 2), m16.view(np.uint8).reshape(nsb, 2), sc.astype(np.uint8)], axis=1)
    Lr = L.reshape(nsb, 4, 2, 32)  # chunk of 64: first 32 low nibbles, next 32 high
    qs = ((Lr[:, :, 0, :] & 0xF) | ((Lr[:, :, 1, :] & 0xF) << 4)).astype(np.uint8).reshape(nsb, 128)
    if kind == "Q4_K":
        out = np.concatenate([head, qs], axis=1)
    else:
        qh = np.zeros((nsb, 32), np.int64)
        for c in range(4):
            qh |= (Lr[:, c, 0, :] >> 4) << (2 * c)
            qh |= (Lr[:, c, 1, :] >> 4) << (2 * c + 1)
        out = np.concatenate([head, qh.astype(np.uint8), qs], axis=1)
    return out.reshape(n_rows, -1)
