"""Known-sampler attacks: which float64 values numpy's Laplace and normal samplers can produce.

A float release built the textbook way, ``y = count + rng.laplace(0, b)`` or
``count + rng.normal(0, s)`` returned as float64, leaks through its low-order
bits: the sampler's values lie on a sparse, sampler-specific set Z, and the
set of outputs {fl(c + z) : z in Z} depends on the count c (Mironov, CCS
2012, for Laplace via the logarithm; Jin et al., S&P 2022, for Gaussian
samplers). Given an output y and a candidate count c, :func:`reachable` tests
whether some z in Z gives fl(c + z) == y exactly; a run on D is always
reachable from D's count and often not from D''s. The scores built here are
ordinary attack candidates: the audit's validity never depends on them being
right (a wrong set only costs power).

numpy's default ``Generator`` algorithms (numpy/random/src/distributions/
distributions.c, read for this module):

* ``laplace(loc, b)``: U = (next_uint64 >> 11) 2^-53; if U >= 0.5,
  ``loc - b * log(2.0 - U - U)``, else (U > 0) ``loc + b * log(U + U)``.
  So z = b log(k 2^-52), k = 1 .. 2^52 - 1 (z < 0), or z = -b log(m 2^-53),
  m = 1 .. 2^53 (z >= 0; 2.0 - U - U is a multiple of 2^-53 in (0, 1]: a
  superset is used).
* ``normal(loc, s)`` = ``loc + s * standard_normal()``, ziggurat with 256
  layers: on its fast path (99.3% of draws; the slow path of layers i > 0
  returns the same form) x = +-rabs * w_i, rabs a 52-bit integer, w_i =
  ``wi_double[i]``. The tail beyond r = 3.654 (layer 0's slow path) is not
  modelled (those draws count as unreachable: a power loss only). The 256
  constants w_i are not copied from numpy: :func:`normal_layers` recovers
  them from the installed numpy by drawing from a ``PCG64`` whose raw
  outputs it also reads (each fast-path draw exposes rabs, i and x).

Floating point: y = fl(c + fl(b fl(log v))) (Laplace) or fl(c + fl(s fl(rabs
w_i))) (normal) in IEEE double without fused multiply-add (numpy's C code is
compiled for the x86-64 baseline); ``np.log`` is checked against the
``math.log`` numpy's C code calls (:func:`_log_matches_libm`) and a one-ulp
slack on the logarithm is allowed when they differ.
"""

from __future__ import annotations

import functools
import math

import numpy as np

#: Layers of numpy's ziggurat normal sampler.
N_LAYERS = 256
#: Draws used to recover the layer widths w_i from the installed numpy.
_PROBE_DRAWS = 20_000
#: Candidate lattice points tried on each side of the estimate (per layer).
_WINDOW = 0
#: Most changed cells a known-sampler score looks at (those with the smallest counts: the
#: sparsest float grid around the output).
MAX_CELLS = 4
_TWO52 = float(2 ** 52)
_TWO53 = float(2 ** 53)


@functools.lru_cache(maxsize=1)
def normal_layers() -> np.ndarray | None:
    """The widths w_i (shape (256,), float64) of numpy's ziggurat layers, or None if not recovered.

    Recovered from the installed numpy: for each of ``_PROBE_DRAWS`` draws of
    ``Generator(PCG64).standard_normal()`` the same raw 64-bit word is read
    first (the generator's state is saved and restored), which gives the
    layer i (low 8 bits), rabs (52 bits after the sign bit) and the value x.
    For each layer the w with fl(rabs w) == |x| on the most draws is kept
    (slow-path draws do not match and are outvoted). None when a layer has
    fewer than 3 matching draws (a numpy whose algorithm changed).
    """
    bg = np.random.PCG64(20240601)
    gen = np.random.Generator(bg)
    raws = np.empty(_PROBE_DRAWS, dtype=np.uint64)
    xs = np.empty(_PROBE_DRAWS)
    for i in range(_PROBE_DRAWS):  # one draw at a time: the raw word must be read before it is consumed
        state = bg.state
        raws[i] = bg.random_raw()
        bg.state = state
        xs[i] = gen.standard_normal()
    idx = (raws & np.uint64(0xFF)).astype(np.int64)
    rabs = ((raws >> np.uint64(9)) & np.uint64(0x000FFFFFFFFFFFFF)).astype(np.float64)  # < 2^52: exact
    ax = np.abs(xs)
    w = np.empty(N_LAYERS)
    for i in range(N_LAYERS):
        m = (idx == i) & (rabs > 0)
        r, a = rabs[m], ax[m]
        if r.size < 3:
            return None
        # estimates from draws of mid-sized rabs: the largest rabs are the slow-path draws (rabs >= k_i),
        # whose x often comes from a later draw
        mid = np.argsort(r)[r.size // 4: r.size // 4 + 8]
        best, hits = None, 0
        for w0 in a[mid] / r[mid]:
            for k in range(-3, 4):
                wc = w0
                for _ in range(abs(k)):
                    wc = np.nextafter(wc, math.inf if k > 0 else -math.inf)
                h = int(np.count_nonzero(r * wc == a))
                if h > hits:
                    best, hits = wc, h
        if hits < 3:
            return None
        w[i] = best
    return w


@functools.lru_cache(maxsize=1)
def _log_matches_libm() -> bool:
    v = np.random.default_rng(1).random(4096)
    return bool(np.all(np.log(v) == np.array([math.log(x) for x in v])))


def _ulp(y: np.ndarray) -> np.ndarray:
    return np.abs(np.nextafter(y, np.inf) - y)


def _hits(y, c, z):
    """fl(c + z) == y, elementwise (z: candidate sampler values)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return (c + z) == y


def laplace_reachable(y: np.ndarray, c: np.ndarray, b: float) -> np.ndarray:
    """Whether fl(c + z) == y for some value z numpy's ``Generator.laplace(0, b)`` can produce.

    Parameters
    ----------
    y : ndarray, float64, shape (n,)
        Outputs.
    c : ndarray, float64, shape (n,) or scalar
        Candidate counts (the noise-free value under a hypothesis).
    b : float
        The Laplace scale, as passed to the sampler.

    Returns
    -------
    ndarray of bool, shape (n,)
        True also where the lattice of sampler values is denser than the
        floats around y (every y is then reachable).
    """
    y = np.asarray(y, dtype=np.float64)
    c = np.broadcast_to(np.asarray(c, dtype=np.float64), y.shape)
    z = y - c
    neg = z < 0
    grid = np.where(neg, _TWO52, _TWO53)
    with np.errstate(over="ignore", invalid="ignore"):
        k_hat = np.exp(-np.abs(z) / b) * grid                   # v = k / grid, z = +-b log v
    dense = ~np.isfinite(k_hat) | (b / np.maximum(k_hat, 1e-300) < _ulp(y) / 4)
    out = dense | ~np.isfinite(y)
    todo = np.flatnonzero(~out)
    if todo.size == 0:
        return out
    kk = np.rint(k_hat[todo])[:, None] + np.arange(-2, 3)[None, :]  # (m, 5)
    kk = np.clip(kk, 1, (grid[todo] - (neg[todo]))[:, None])
    logs = np.log(kk / grid[todo][:, None])
    slack = [0] if _log_matches_libm() else [0, 1, -1]
    hit = np.zeros(todo.size, dtype=bool)
    sgn = np.where(neg[todo], 1.0, -1.0)[:, None]
    for s_ in slack:
        lg = logs if s_ == 0 else np.nextafter(logs, s_ * np.inf)
        zc = sgn * (b * lg)
        hit |= _hits(y[todo][:, None], c[todo][:, None], zc).any(axis=1)
    out[todo] = hit
    return out


def normal_reachable(y: np.ndarray, c: np.ndarray, s: float, layers: np.ndarray | None = None,
                     chunk: int = 4096) -> np.ndarray:
    """Whether fl(c + fl(s fl(rabs w_i))) == +-y for some layer i and 52-bit rabs (numpy's ziggurat).

    Parameters
    ----------
    y, c : ndarray, float64, shape (n,)
        Outputs and candidate counts.
    s : float
        The normal's scale, as passed to the sampler.
    layers : ndarray, shape (256,), optional
        w_i (default :func:`normal_layers`).
    chunk : int
        Outputs checked per vectorized block (memory ~ chunk x 256 x 3 doubles).

    Returns
    -------
    ndarray of bool, shape (n,)
        True also where some layer's lattice is denser than the floats around y.
    """
    w = normal_layers() if layers is None else layers
    y = np.asarray(y, dtype=np.float64)
    c = np.broadcast_to(np.asarray(c, dtype=np.float64), y.shape)
    if w is None:
        return np.ones(y.shape, dtype=bool)
    x_hat = np.abs(y - c) / s
    # necessary condition: y - c rounds to a float z0 with fl(c + z0) == y (else, e.g. c = 1 and a
    # y in (-1, 1) finer than 2^-53, no z works: fl(1 + z) is then exact and a multiple of 2^-53)
    trip = (c + (y - c)) == y
    covers = x_hat[:, None] < w[None, :] * _TWO52                      # layer i reaches x_hat
    dense = (covers & (s * w[None, :] < _ulp(y)[:, None] / 4)).any(axis=1)
    out = trip & (dense | ~np.isfinite(y))
    todo = np.flatnonzero(trip & ~out)
    offs = np.arange(-_WINDOW, _WINDOW + 1, dtype=np.float64)
    for a in range(0, todo.size, chunk):
        t = todo[a:a + chunk]
        r = np.rint(x_hat[t][:, None] / w[None, :])[:, :, None] + offs    # (m, 256, 3)
        ok = (r >= 0) & (r < _TWO52)
        zc = s * (r * w[None, :, None])
        sign = np.sign(y[t] - c[t])[:, None, None]
        hit = ok & _hits(y[t][:, None, None], c[t][:, None, None], sign * zc)
        out[t] = hit.any(axis=(1, 2))
    return out


def roundtrip(y: np.ndarray, c: np.ndarray) -> np.ndarray:
    """fl(c + fl(y - c)) == y: a necessary condition (up to the rounding of y - c) for y =
    fl(c + z) with any float z, whatever the sampler. E.g. for c = 1 every fl(1 + z) in
    (-1, 1) is a multiple of 2^-53, so a finer y (a count 0 plus noise) fails it."""
    y = np.asarray(y, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return (c + (y - c)) == y


SAMPLERS = {"numpy_laplace": laplace_reachable, "numpy_normal": normal_reachable,
            "any_float_noise": lambda y, c, s: roundtrip(y, c)}


def _fine_cells(X0: np.ndarray, X1: np.ndarray) -> np.ndarray:
    """Cells (shape (d,) bool) with a finite fitting output off the 2^-30 grid: the others (flags,
    integers, absent cells) carry no float lattice, and would take the place of a cell that does among
    the :data:`MAX_CELLS` looked at (e.g. a sparse vector's answer bits next to its released values)."""
    X = np.concatenate([np.asarray(X0, dtype=np.float64), np.asarray(X1, dtype=np.float64)])
    with np.errstate(invalid="ignore", over="ignore"):
        Y = X * 2.0 ** 30
        return (np.isfinite(Y) & (Y != np.round(Y))).any(axis=0)


def sampler_scores(X0: np.ndarray, X1: np.ndarray, hint: dict) -> list:
    """Known-sampler candidates fitted on (X0, X1), with the evidence for each sampler.

    Parameters
    ----------
    X0, X1 : ndarray, shape (n, d)
        Fitting runs on D and D'.
    hint : dict
        ``c0``, ``c1``: exact statistics of D and D' per output cell (shape
        (d,)), ``scale``: the declared noise scale per cell (shape (d,)) or
        None, from the mechanism's ``exact_statistics`` / ``noise`` hooks.
        Without a scale only the sampler-free ``any_float_noise`` round-trip
        score is built.

    Returns
    -------
    list of (name, score, info)
        For each sampler: score(X) = sum over the changed cells j of
        reachable(y_j, c1_j) - reachable(y_j, c0_j) (larger: more like D').
        ``info["evidence"]``: the share of D's fitting outputs on changed
        cells reachable from D's own counts under this sampler (a run of the
        sampler in use is always reachable; another sampler's share is
        lower wherever the lattice is sparse), and ``informative_share``.
    """
    c0, c1 = (np.asarray(hint[k], dtype=np.float64) for k in ("c0", "c1"))
    scale = np.asarray(hint.get("scale") if hint.get("scale") is not None else np.zeros_like(c0), dtype=np.float64)
    cells = np.flatnonzero((c0 != c1) & np.isfinite(c0) & np.isfinite(c1) & _fine_cells(X0, X1))
    cells = cells[np.argsort(np.minimum(np.abs(c0[cells]), np.abs(c1[cells])), kind="stable")[:MAX_CELLS]]
    if cells.size == 0:
        return []
    out = []
    for name, fn in SAMPLERS.items():
        if name == "numpy_normal" and normal_layers() is None:
            continue
        if name != "any_float_noise" and not np.all(scale[cells] > 0):
            continue

        def reach(X, cvals, fn=fn, cells=cells):
            X = np.asarray(X, dtype=np.float64)
            cols = [fn(X[:, j], np.full(len(X), cvals[j]), float(scale[j])) for j in cells]
            return np.stack(cols, axis=1).astype(np.float64)

        def score(X, reach=reach):
            return (reach(X, c1) - reach(X, c0)).sum(axis=1)

        own = reach(X0, c0)
        other = reach(X0, c1)
        info = {"kind": "known_sampler", "sampler": name, "cells": cells.tolist(),
                "evidence": float(own.mean()), "unreachable_from_the_other_count": float(1 - other.mean())}
        out.append((f"{name}_lattice", score, info))
    return out


def sampler_verdict(infos: list[dict]) -> dict | None:
    """Which numpy sampler the evidence points to: the one whose lattice holds every
    fitting output of D (evidence 1.0) while the other's does not; None if neither does."""
    if not infos:
        return None
    infos = [i for i in infos if i["sampler"] in ("numpy_laplace", "numpy_normal")]
    if not infos:
        return None
    full = [i for i in infos if i["evidence"] >= 0.999]
    best = max(infos, key=lambda i: i["evidence"])
    if len(full) == 1:
        return {"sampler": full[0]["sampler"], "evidence": {i["sampler"]: i["evidence"] for i in infos}}
    return {"sampler": None if not full else "ambiguous",
            "evidence": {i["sampler"]: i["evidence"] for i in infos}, "best": best["sampler"]}
