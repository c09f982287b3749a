"""Exact discrete Gaussian by rejection, vectorised, for sigma up to 2^47 lattice units (no table).

Canonne, Kamath & Steinke 2020, Algorithm 3: a discrete Laplace proposal of
scale t = floor(sigma) + 1 (their Algorithm 2), accepted with probability
exp(-(|y| - sigma^2/t)^2 / (2 sigma^2)). Every Bernoulli(exp(-x)) here is
decided exactly: a 53-bit uniform U is compared with exp(-x) evaluated in
float64 with a rigorous error band; only when U falls inside the band
(probability about 2^-39 per draw) is the comparison finished with interval
arithmetic (mpmath.iv) on the exact rational x and further random bits of U
(:func:`accept_exact`). The decision is therefore exactly U < exp(-x) for a
uniform U on [0, 1): the sampler is exact, not an approximation.

Used by ``privaudit.privacy.fixed_point`` (few draws at a scale, wide scales),
DP-VAPVI's statistics and the behaviour-value estimate.

References
----------
Canonne, Kamath, Steinke, "The Discrete Gaussian for Differential Privacy",
NeurIPS 2020, arXiv:2004.00010 (Algorithms 1-3; Thm 14).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from mpmath import iv
from mpmath.libmp import to_rational

from privaudit.core.errors import UsageError
from privaudit.privacy.samplers import exact_noise

#: Largest sigma (in lattice units) the wide sampler accepts: |y| stays far below 2^53,
#: so |y| is exact in float64, and t * 64 < 2^56 for the discrete Laplace proposal.
MAX_SIGMA_UNITS = float(2**47)
#: The float64 evaluation of exp(-x) is trusted to within 2^-_BAND_BITS * (1 + scale terms)
#: (the true error is below 2^-49 times the same terms; module docstring).
_BAND_BITS = 40
U_BITS = 53
#: Candidates drawn per pending element and rejection round when few are pending (fewer rounds of
#: small arrays; large arrays take one candidate each, which wastes no work).
_TRIES = 4
_FEW = 2048
#: Largest number of candidates per round of the one-group stream (:func:`_stream_group`).
_STREAM_CHUNK = 1 << 18


def discrete_gaussian_wide(sigma2: Fraction, size, *, rng: np.random.Generator) -> np.ndarray:
    """Exact draws of the discrete Gaussian N_Z(0, sigma2) for sigma up to 2^47.

    Parameters
    ----------
    sigma2 : Fraction
        Variance parameter in lattice units (exact rational), 0 < sigma2, sigma <= 2^47.
    size : int or tuple of int
        Output shape.
    rng : numpy.random.Generator
        Source of uniform integers (OS entropy in production).

    Returns
    -------
    ndarray of int64, shape ``size``

    Raises
    ------
    UsageError
        If sigma2 is not positive or sigma exceeds ``MAX_SIGMA_UNITS``.

    Notes
    -----
    One group of :func:`discrete_gaussian_batch` (see there for the algorithm).
    """
    return discrete_gaussian_batch([(sigma2, size)], rng=rng)[0]


def discrete_gaussian_batch(groups, *, rng: np.random.Generator) -> list:
    """Exact discrete Gaussian draws for several variances in one vectorized pass.

    Parameters
    ----------
    groups : sequence of (Fraction, int or tuple)
        (sigma2, shape) per group; sigma2 in lattice units, 0 < sigma <= 2^47.
    rng : numpy.random.Generator

    Returns
    -------
    list of ndarray of int64
        One array of the group's shape per group, independent draws.

    Raises
    ------
    UsageError
        If a sigma2 is not positive or a sigma exceeds ``MAX_SIGMA_UNITS``.

    Notes
    -----
    CKS Algorithm 3 per element with t = floor(sigma) + 1: Y ~ discrete
    Laplace(t) (CKS Algorithm 2, exact int64, with a per-element t),
    accepted with probability exp(-x), x = (|Y| - sigma2/t)^2 / (2 sigma2) =
    (|Y| t q - p)^2 / (2 p q t^2) for sigma2 = p/q. The acceptance compares a
    uniform U with exp(-x) exactly (module docstring). Float error of the fast
    path: every operation has relative error <= 2^-53, so |x_hat - x| <= 2^-49
    ((|Y| + sigma2/t)^2 / sigma2 + x_hat) and |exp(-x_hat) - exp(-x)| <=
    |x_hat - x| + 2^-50; the band used, 2^-40 (1 + (|Y| + sigma2/t)^2 / sigma2
    + x_hat), is 2^9 times larger.

    References
    ----------
    Canonne, Kamath, Steinke 2020, Algorithms 1-3.
    """
    params, shapes = [], []
    for sigma2, size in groups:
        sigma2 = Fraction(sigma2)
        p, q, t = variance_parts(sigma2)
        params.append((p, q, t, float(sigma2), float(sigma2 / t)))
        shapes.append((size,) if isinstance(size, (int, np.integer)) else tuple(size))
    counts = [int(np.prod(sh)) for sh in shapes]
    big = [i for i, c in enumerate(counts) if c > _FEW]
    if big:  # large groups: one candidate stream per group with scalar parameters (see _stream_group)
        small = [i for i, c in enumerate(counts) if c <= _FEW]
        parts = dict(zip(small, _batch_groups([params[i] for i in small], [counts[i] for i in small], rng)))
        parts.update((i, _stream_group(params[i], counts[i], rng)) for i in big)
        return [parts[i].reshape(shapes[i]) for i in range(len(groups))]
    return [part.reshape(sh) for part, sh in zip(_batch_groups(params, counts, rng), shapes)]


def variance_parts(sigma2: Fraction) -> tuple[int, int, int]:
    """(p, q, t) of a checked variance sigma2 = p / q: t = floor(sigma) + 1 (CKS's Laplace scale)."""
    if sigma2 <= 0:
        raise UsageError(f"`sigma2` must be > 0. Found {sigma2}.")
    p, q = sigma2.numerator, sigma2.denominator
    t = math.isqrt(p // q) + 1
    if t > MAX_SIGMA_UNITS:
        raise UsageError(f"`sigma2` must be at most 2^94 (sigma <= 2^47 lattice units). "
                         f"Found sigma ~ {float(t):.3g}.")
    return p, q, t


def _stream_group(param: tuple, n: int, rng) -> np.ndarray:
    """``n`` exact draws of one group (many elements): the first n accepted of an i.i.d. candidate stream.

    The same CKS Algorithm 3 trials as :func:`_batch_groups` (discrete
    Laplace proposal of scale t, accepted with probability exp(-x) by the same
    banded float test and exact fallback), drawn in rounds of vectorised
    candidates with scalar t, sigma2 and sigma2/t; the accepted candidates are
    kept in order until n are filled. Trials are i.i.d. and each accepted
    value has the target law, so the first n accepted are n i.i.d. exact
    draws (as in :func:`_geometric_exp1_many`). Saves the per-element
    parameter gathers and index bookkeeping of the multi-group loop (about
    a third of the time per draw at 10^5 - 10^6 draws per call).
    """
    p, q, t, s2f, c = param
    out = np.empty(n, dtype=np.int64)
    filled = 0
    while filled < n:
        need = n - filled
        # about 0.63 x 0.76 of the candidates are accepted; ask for a little more than expected, in
        # rounds of at most _STREAM_CHUNK candidates (bounds the temporaries: ~10 arrays of 8 bytes each)
        y = _discrete_laplace_stream(t, min(int(need * 2.2) + 64, _STREAM_CHUNK), rng)
        ay = np.abs(y).astype(np.float64)  # exact: |y| < 2^53 except with prob < e^-32 (then exact path)
        x = (ay - c) ** 2 / (2.0 * s2f)
        p_hat = np.exp(-x)
        band = np.ldexp(1.0 + (ay + c) ** 2 / s2f + x, -_BAND_BITS)
        u = rng.integers(0, 1 << U_BITS, y.size)
        u_hi = np.ldexp((u + 1).astype(np.float64), -U_BITS)
        accept = u_hi <= p_hat - band
        unsure = ~accept & (np.ldexp(u.astype(np.float64), -U_BITS) < p_hat + band)
        unsure |= np.abs(y) >= 1 << 52
        for i in np.flatnonzero(unsure):  # probability ~2^-39 each: exact interval arithmetic
            num = (abs(int(y[i])) * t * q - p) ** 2
            accept[i] = accept_exact(num, 2 * p * q * t * t, int(u[i]), rng)
        y = y[accept][:need]
        out[filled:filled + y.size] = y
        filled += y.size
    return out


def _discrete_laplace_stream(t: int, m: int, rng) -> np.ndarray:
    """The accepted ones among ``m`` i.i.d. trials of CKS Algorithm 2 with scale t (int64, in trial order)."""
    u = rng.integers(0, t, m)
    # Bernoulli(exp(-u/t)), the same exact test as _bernoulli_exp_many with a scalar denominator
    p_hat = np.exp(-(u.astype(np.float64) / float(t)))
    w = rng.integers(0, 1 << U_BITS, m)
    accept = np.ldexp((w + 1).astype(np.float64), -U_BITS) <= p_hat - 2.0**-_BAND_BITS
    for i in np.flatnonzero(~accept & (np.ldexp(w.astype(np.float64), -U_BITS) < p_hat + 2.0**-_BAND_BITS)):
        accept[i] = accept_exact(int(u[i]), int(t), int(w[i]), rng)
    y = u + t * _geometric_exp1_many(m, rng)
    neg = rng.integers(0, 2, m).astype(bool)
    accept &= ~(neg & (y == 0))
    return np.where(neg, -y, y)[accept]


def _batch_groups(params: list, counts: list, rng) -> list:
    """Exact draws of several groups together (per-element parameters); one int64 array per group."""
    g = np.repeat(np.arange(len(params)), counts)
    t_el = np.array([pr[2] for pr in params], dtype=np.int64)[g]
    s2f_el = np.array([pr[3] for pr in params])[g]
    c_el = np.array([pr[4] for pr in params])[g]
    out = np.empty(g.size, dtype=np.int64)
    todo = np.arange(g.size)
    while todo.size:  # r i.i.d. candidates per pending element: the first accepted one is kept (exact)
        r = _TRIES if todo.size <= _FEW else 1
        cand = np.repeat(todo, r)
        k = cand.size
        t, s2f, c = t_el[cand], s2f_el[cand], c_el[cand]
        y = _discrete_laplace_many(t, rng)
        ay = np.abs(y).astype(np.float64)  # exact: |y| < 2^53 except with prob < e^-32 (then exact path)
        x = (ay - c) ** 2 / (2.0 * s2f)
        p_hat = np.exp(-x)
        band = np.ldexp(1.0 + (ay + c) ** 2 / s2f + x, -_BAND_BITS)
        u = rng.integers(0, 1 << U_BITS, k)
        u_lo = np.ldexp(u.astype(np.float64), -U_BITS)  # exact: u < 2^53
        u_hi = np.ldexp((u + 1).astype(np.float64), -U_BITS)
        accept = u_hi <= p_hat - band
        unsure = (~accept & (u_lo < p_hat + band)) | (np.abs(y) >= 1 << 52)
        for i in np.flatnonzero(unsure):  # probability ~2^-39 each: exact interval arithmetic
            p, q, ti = params[g[cand[i]]][:3]
            num = (abs(int(y[i])) * ti * q - p) ** 2
            accept[i] = accept_exact(num, 2 * p * q * ti * ti, int(u[i]), rng)
        acc = accept.reshape(-1, r)
        done = acc.any(1)
        first = acc.argmax(1)
        out[todo[done]] = y.reshape(-1, r)[done, first[done]]
        todo = todo[~done]
    return np.split(out, np.cumsum(counts)[:-1])


def _bernoulli_exp_many(num: np.ndarray, den, rng) -> np.ndarray:
    """Exact Bernoulli(exp(-num/den)) per element; 0 <= num, 1 <= den < 2^53 (int64 arrays or ints).

    The same exact comparison as the acceptance test of
    :func:`discrete_gaussian_batch`: a 53-bit uniform against exp(-x) in float64
    (x = num/den: exact operands, one rounding; error < 2^-50), decided outside a
    2^-40 band, finished by :func:`accept_exact` inside it.
    """
    num = np.asarray(num, dtype=np.int64)
    den = np.broadcast_to(np.asarray(den, dtype=np.int64), num.shape)
    p_hat = np.exp(-(num.astype(np.float64) / den.astype(np.float64)))
    u = rng.integers(0, 1 << U_BITS, num.size)
    u_lo = np.ldexp(u.astype(np.float64), -U_BITS)
    u_hi = np.ldexp((u + 1).astype(np.float64), -U_BITS)
    band = 2.0**-_BAND_BITS
    accept = u_hi <= p_hat - band
    for i in np.flatnonzero(~accept & (u_lo < p_hat + band)):  # probability ~2^-39 each
        accept[i] = accept_exact(int(num[i]), int(den[i]), int(u[i]), rng)
    return accept


def _geometric_exp1_many(n: int, rng) -> np.ndarray:
    """Successes of Bernoulli(exp(-1)) before the first failure, n independent draws (int64).

    P(V = v) = (1 - e^-1) e^-v = P(Y = v | Y >= 0) for Y discrete Laplace with
    b = 1: exact draws of Y from ``samplers.exact_noise`` (table sampler, total
    variation 0), negatives rejected (i.i.d. candidates in order: exact).
    """
    out = np.empty(n, dtype=np.int64)
    filled = 0
    while filled < n:
        y = exact_noise("laplace", 1.0, int(1.5 * (n - filled)) + 16, rng=rng)
        y = y[y >= 0][: n - filled]
        out[filled:filled + y.size] = y
        filled += y.size
    return out


def _discrete_laplace_many(t: np.ndarray, rng) -> np.ndarray:
    """Exact discrete Laplace, P(y) proportional to exp(-|y| / t_i), per-element int64 t (CKS Algorithm 2)."""
    out = np.empty(t.size, dtype=np.int64)
    todo = np.arange(t.size)
    while todo.size:  # r i.i.d. candidates per pending element, the first accepted one kept (exact)
        r = _TRIES if todo.size <= _FEW else 1
        cand = np.repeat(todo, r)
        tt = t[cand]
        k = tt.size
        u = rng.integers(0, tt)
        d = _bernoulli_exp_many(u, tt, rng)
        v = _geometric_exp1_many(k, rng)
        y = u + tt * v
        neg = rng.integers(0, 2, k).astype(bool)
        ok = (d & ~(neg & (y == 0))).reshape(-1, r)
        done = ok.any(1)
        first = ok.argmax(1)
        out[todo[done]] = np.where(neg, -y, y).reshape(-1, r)[done, first[done]]
        todo = todo[~done]
    return out


def accept_exact(num: int, den: int, u0: int, rng: np.random.Generator) -> bool:
    """Finish U < exp(-num/den) exactly, U = (u0 + V) 2^-53 with V uniform on [0, 1) drawn lazily.

    Encloses exp(-num/den) 2^53 - u0 in an mpmath interval (outward rounded)
    and compares it with the interval [v 2^-j, (v + 1) 2^-j) of V's first j
    bits; adds bits of V, and precision, until the two separate (almost
    surely finite).
    """
    v, j, prec = 0, 0, 96
    old = iv.prec
    try:
        while True:
            iv.prec = prec
            z = iv.exp(-iv.mpf(num) / iv.mpf(den)) * (1 << U_BITS) - u0
            lo, hi = (Fraction(*to_rational(e)) for e in z._mpi_)  # exact endpoints
            if Fraction(v + 1, 1 << j) <= lo:
                return True
            if Fraction(v, 1 << j) >= hi:
                return False
            if j + 64 < prec:
                v, j = (v << 16) | int(rng.integers(0, 1 << 16)), j + 16
            else:
                prec *= 2
    finally:
        iv.prec = old
