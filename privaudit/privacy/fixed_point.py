"""Fixed-point encodings and an exact discrete Gaussian for wide scales (no float side channel).

Why. A float statistic plus float noise leaks through its low-order bits
(AUDITING.md B2/B3), and numpy's float samplers are not the continuous
distributions the accounting assumes (bounded support, 2^-53 grids). The
remedy used by DP-VAPVI (``learners.linear``): put every input of a
statistic on a power-of-two grid *before* the statistic (rounding the
pessimistic way, so every norm bound behind a sensitivity still holds on the
grid), compute the statistic exactly as an integer multiple of its lattice
step, and add exact discrete Gaussian noise N_Z(0, sigma^2 / step^2) to that
integer. The release is then an integer; its zCDP cost is exactly
Delta^2 / (2 sigma^2) (Canonne, Kamath & Steinke 2020, Thm 14, independent
coordinates), the same as the continuous Gaussian's, with Delta the
sensitivity in real units (the lattice rescales Delta and sigma alike).

The lattices of DP-VAPVI make sigma / step reach 2^46, beyond the
table sampler ``privacy.samplers`` (sigma up to 2^15).
:func:`discrete_gaussian_wide` runs the same algorithm (CKS Algorithm 3:
discrete Laplace proposal, Bernoulli(exp(-(|y| - sigma^2/t)^2 / (2 sigma^2)))
acceptance) with an exact acceptance test that is fast in the common case:
a 53-bit uniform U is compared with exp(-x) evaluated in float64 with a
rigorous error band; only when U falls inside the band (probability about
2^-39 per draw) is the comparison finished with interval arithmetic
(mpmath.iv) on the exact rational x and further random bits of U, to any
precision needed. The decision is therefore exactly U < exp(-x) for a
uniform U on [0, 1): the sampler is exact, not an approximation.

:func:`exact_gaussian` draws N_Z(0, scale^2) for a float scale from the
table sampler when a call draws many values at that scale and by this
rejection sampler otherwise (no table to build: issue 19); both are exact.

References
----------
Canonne, Kamath, Steinke, "The Discrete Gaussian for Differential Privacy",
NeurIPS 2020, arXiv:2004.00010 (Algorithms 2, 3; Thm 14).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from mpmath import iv
from mpmath.libmp import to_rational

from privaudit.core.errors import UsageError
from privaudit.privacy.exact_sampler import uniform_words
from privaudit.privacy.samplers import (TABLE_MIN_DRAWS_PER_T, exact_noise, gaussian_sampler_for_variance,
                                        table_half_width)

#: Largest sigma (in lattice units) the wide sampler accepts: |y| stays far below 2^53,
#: so |y| is exact in float64, and t * 64 < 2^56 for the discrete Laplace proposal.
MAX_SIGMA_UNITS = float(2**47)
#: The float64 evaluation of exp(-x) is trusted to within 2^-_BAND_BITS * (1 + scale terms)
#: (the true error is below 2^-49 times the same terms; module docstring).
_BAND_BITS = 40
_U_BITS = 53
#: Candidates drawn per pending element and rejection round when few are pending (fewer rounds of
#: small arrays; large arrays take one candidate each, which wastes no work).
_TRIES = 4
_FEW = 2048
#: Largest number of candidates per round of the one-group stream (:func:`_stream_group`).
_STREAM_CHUNK = 1 << 18
#: :func:`discrete_gaussian_scaled`: the coarse part J is drawn from the table sampler at
#: sigma / 2^m in [2^_COARSE_BITS, 2^(_COARSE_BITS + 1)) (a table of about 6.6 x 2^8 entries at most,
#: below the guide-table limit of ``exact_sampler.ExactSampler.add_into``, built once per variance in milliseconds;
#: about 0.4 / 2^_COARSE_BITS of the trials are rejected by the fine test).
_COARSE_BITS = 7
#: Coarse values J above this are assembled in Python integers (int64 products stay below 2^62);
#: with sigma / 2^m < 2^9 that is beyond 2^11 standard deviations of J: never in practice.
_COARSE_SAFE = 1 << 20
#: Trials per round of :func:`discrete_gaussian_scaled` (cache-sized temporaries).
_SCALED_CHUNK = 1 << 15
#: Its fast-path band in units of 2^-53: exp(-x) 2^53 is within 2^4 (1 + x) of the float value and
#: d = exp(-x) 2^53 - u within one more unit; 2^14 (for x <= 1, the rest goes to the exact path)
#: is 2^9 times wider, as the band of :func:`discrete_gaussian_batch`.
_SCALED_BAND = float(2**14)


def to_grid_toward_zero(x: np.ndarray, bits: int) -> np.ndarray:
    """x rounded toward zero to a multiple of 2^-bits, as the integer multiple (int64).

    |result| * 2^-bits <= |x| coordinate-wise, so every norm bound of x holds
    for the rounded vector. Exact: ``ldexp`` scales by a power of two.
    """
    return np.trunc(np.ldexp(np.asarray(x, dtype=np.float64), bits)).astype(np.int64)


def to_grid_nearest(x: np.ndarray, bits: int) -> np.ndarray:
    """x rounded to the nearest multiple of 2^-bits (ties to even), as the integer multiple (int64).

    If lo <= x <= hi with lo and hi multiples of 2^-bits (0, 1, H, H^2 ...),
    the rounded value stays in [lo, hi]: bounds with grid-point ends hold on
    the grid, and the rounding adds no systematic bias.
    """
    return np.rint(np.ldexp(np.asarray(x, dtype=np.float64), bits)).astype(np.int64)


def gaussian_path(scale: float, n: int) -> str:
    """The exact sampler :func:`exact_gaussian` uses for ``n`` draws at sigma = ``scale``.

    Returns
    -------
    {"table", "rejection"}
        ``"table"`` when n >= :data:`privaudit.privacy.samplers.TABLE_MIN_DRAWS_PER_T`
        times the table half-width T (``samplers.table_half_width``), else
        ``"rejection"``. A function of the public scale and count only.

    Raises
    ------
    UsageError
        As ``samplers.get_sampler`` (bad scale, sigma above ``GAUSSIAN_SIGMA_MAX``).
    """
    T = table_half_width("gaussian", scale)
    return "table" if n >= TABLE_MIN_DRAWS_PER_T * T else "rejection"


def exact_gaussian(scale: float, n: int, *, rng: np.random.Generator) -> np.ndarray:
    """n exact draws of N_Z(0, scale^2), from the table sampler or by rejection, whichever is cheaper.

    Parameters
    ----------
    scale : float
        sigma (> 0, finite, at most ``samplers.GAUSSIAN_SIGMA_MAX``), read as
        the exact rational the float represents: the law has P(y) proportional
        to exp(-y^2 / (2 scale^2)) exactly, on both paths.
    n : int
        Number of draws (>= 0).
    rng : np.random.Generator
        OS-seeded for a real release.

    Returns
    -------
    np.ndarray of int64, shape (n,)

    Raises
    ------
    UsageError
        Bad scale or n (as ``samplers.exact_noise``).

    Notes
    -----
    Both paths are exact (total variation 0 to the target law), so the
    mechanism's guarantee is the ideal discrete Gaussian's (CKS 2020 Thm 14)
    whichever runs; the path (:func:`gaussian_path`, a function of the
    public scale and n) only sets the cost. ``"table"``:
    ``samplers.exact_noise`` (about 30 ns per draw after a build of about
    7 us per unit of the half-width T ~ 6.6 sigma, cached per scale).
    ``"rejection"``: :func:`discrete_gaussian_batch` with sigma2 = scale^2
    (CKS Algorithm 3, about 0.4-0.5 us per draw, no set-up): at sigma ~ 8,000
    and 17,900 draws (a DP-PBB backup on the ICU-Sepsis domain) 13 ms
    against 0.35 s for the table. Releases record the paths they used
    (``samplers.noise_statement("exact", paths=...)``).

    References
    ----------
    Canonne, Kamath, Steinke 2020, Algorithm 3 and Thm 14; the table sampler:
    ``privaudit.privacy.samplers``.
    """
    if isinstance(n, bool) or int(n) != n or n < 0:
        raise UsageError(f"`n` must be an integer >= 0. Found {n!r}.")
    if gaussian_path(scale, int(n)) == "table":
        return exact_noise("gaussian", scale, int(n), rng=rng)
    return discrete_gaussian_batch([(Fraction(float(scale)) ** 2, int(n))], rng=rng)[0]


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


def discrete_gaussian_scaled(sigma2: Fraction, size, *, rng: np.random.Generator) -> np.ndarray:
    """Exact draws of N_Z(0, sigma2) for wide sigma, a coarse table draw plus a uniform fine part per trial.

    The same law as :func:`discrete_gaussian_wide` (total variation 0 to the
    discrete Gaussian) at a fraction of its cost for sigma >= 2^8 lattice
    units (0.06-0.1 against 0.35-0.4 microseconds per draw at sigma ~ 2^45
    in calls of 10^5-10^6 draws, measured under load); a different
    algorithm, so a different random stream for the same seed.

    Parameters, Returns, Raises: as :func:`discrete_gaussian_wide` (int64
    array of shape ``size``; sigma2 an exact rational in lattice units,
    0 < sigma2, sigma <= 2^47; ``rng`` supplies uniform 64-bit words).

    Notes
    -----
    Let M = 2^m with sigma / M in [2^7, 2^8) (m >= 1; a smaller sigma goes
    to :func:`discrete_gaussian_batch`). One trial:

    1. J ~ N_Z(0, sigma2 / M^2), exactly, from the table sampler
       (``samplers.gaussian_sampler_for_variance``); the trial is rejected
       if J < 0, so J has P(J = j) proportional to g(j) = exp(-M^2 j^2 / (2 sigma2)), j >= 0;
    2. F uniform on {0, ..., M - 1} and a fair sign bit B (one 64-bit word);
       |Y| = M J + F + B;
    3. accept with probability exp(-(|Y|^2 - M^2 J^2) / (2 sigma2)) (<= 1:
       |Y| >= M J), decided exactly: a 53-bit uniform against exp(-x) in
       float64 outside a band of 2^-39 (for x <= 1; always the exact path
       for x > 1), interval arithmetic on the exact rational x inside it
       (:func:`_accept_exact`, as :func:`discrete_gaussian_batch`);
    4. output Y = |Y| if B = 0, else -|Y|.

    For y >= 0 (B = 0, y = M j + f) the trial outputs y with probability
    proportional to g(j) exp(-(y^2 - M^2 j^2) / (2 sigma2)) / M = exp(-y^2 / (2 sigma2)) / M;
    for y <= -1 (B = 1, |y| = M j + f + 1) likewise exp(-y^2 / (2 sigma2)) / M.
    Every integer is reached by exactly one (B, J, F), so an accepted trial
    is an exact N_Z(0, sigma2) draw; trials are i.i.d., and the first n
    accepted (in order) are n i.i.d. draws. The acceptance probability is
    about 1 - 0.4 M / sigma >= 0.996, and about half the table draws
    are spent on J < 0.

    Float error of the fast path: x = (2 M J + o) o c with o = F + B, the
    integer 2 M J + o converted once, c = 1 / (2 sigma2) rounded once: four
    roundings, |x_hat - x| <= 2^-51 x; with exp's own error (< 2^-52) and the
    subtraction of the 53-bit integer u, d = exp(-x) 2^53 - u is known to
    within 9 units; the trial is decided by the float d only when it is more
    than 2^14 units from the decision interval [0, 1] and x <= 1 (else
    interval arithmetic on the exact rational x, :func:`_accept_exact`).

    References
    ----------
    Canonne, Kamath, Steinke 2020 (the discrete Gaussian, Bernoulli(exp(-x))
    by comparison); von Neumann rejection against the envelope
    g(J) >= exp(-y^2 / (2 sigma2)) on the cell of (B, J).
    """
    sigma2 = Fraction(sigma2)
    p, q, t = _variance_parts(sigma2)
    floor_sigma = t - 1
    shape = (size,) if isinstance(size, (int, np.integer)) else tuple(size)
    n = int(np.prod(shape))
    m = floor_sigma.bit_length() - 1 - _COARSE_BITS   # 2^(m + CB) <= floor(sigma) <= sigma < 2^(m + CB + 1)
    if m < 1:
        return discrete_gaussian_batch([(sigma2, shape)], rng=rng)[0]
    M = 1 << m
    coarse = gaussian_sampler_for_variance(sigma2 / (M * M))
    c = float(1 / (2 * sigma2))               # one rounding
    out = np.empty(n, dtype=np.int64)
    filled = 0
    while filled < n:
        need = n - filled
        J = coarse.add_into(np.zeros(min(2 * need + 64, _SCALED_CHUNK), dtype=np.int64), rng)
        J = J[J >= 0]                                                  # trials with J < 0 are rejected
        k = J.size
        w = uniform_words(rng, k)
        neg = (w & np.uint64(1)).view(np.int64)                        # the sign bit B
        off = (w >> np.uint64(64 - m)).view(np.int64)                  # F, uniform on [0, M)
        off += neg                                                     # |Y| = M J + off
        ya = np.left_shift(J, m)                                       # M J
        # x = (|Y|^2 - M^2 J^2) / (2 sigma2) = off (2 M J + off) / (2 sigma2)
        x = (2 * ya + off).astype(np.float64)
        x *= off
        x *= c
        ya += off
        # accept iff U < exp(-x), U = (u + V) 2^-53, V uniform on [0, 1): d = exp(-x) 2^53 - u
        u = uniform_words(rng, k) >> np.uint64(64 - _U_BITS)
        d = np.exp(-x)
        d *= 2.0 ** _U_BITS
        d -= u.astype(np.float64)
        unsure = np.abs(d - 0.5) < _SCALED_BAND + 0.5                  # -band < d < 1 + band
        unsure |= x > 1.0
        accept = d >= _SCALED_BAND + 1.0
        big = J > _COARSE_SAFE
        for i in np.flatnonzero(unsure | big):  # unsure: probability ~2^-38 each; big: never in practice
            j_i, o_i = int(J[i]), int(off[i])
            if unsure[i]:
                accept[i] = _accept_exact(o_i * (2 * M * j_i + o_i) * q, 2 * p, int(u[i]), rng)
            if big[i] and accept[i]:
                if M * j_i + o_i >= 1 << 63:
                    raise RuntimeError("discrete_gaussian_scaled: a draw beyond int64; report this")
                ya[i] = M * j_i + o_i
        y = np.where(neg.astype(bool), -ya, ya)[accept][:need]
        out[filled:filled + y.size] = y
        filled += y.size
    return out.reshape(shape)


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
        p, q, t = _variance_parts(sigma2)
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


def _variance_parts(sigma2: Fraction) -> tuple[int, int, int]:
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
        u = rng.integers(0, 1 << _U_BITS, y.size)
        u_hi = np.ldexp((u + 1).astype(np.float64), -_U_BITS)
        accept = u_hi <= p_hat - band
        unsure = ~accept & (np.ldexp(u.astype(np.float64), -_U_BITS) < p_hat + band)
        unsure |= np.abs(y) >= 1 << 52
        for i in np.flatnonzero(unsure):  # probability ~2^-39 each: exact interval arithmetic
            num = (abs(int(y[i])) * t * q - p) ** 2
            accept[i] = _accept_exact(num, 2 * p * q * t * t, int(u[i]), rng)
        y = y[accept][:need]
        out[filled:filled + y.size] = y
        filled += y.size
    return out


def _discrete_laplace_stream(t: int, m: int, rng) -> np.ndarray:
    """The accepted ones among ``m`` i.i.d. trials of CKS Algorithm 2 with scale t (int64, in trial order)."""
    u = rng.integers(0, t, m)
    # Bernoulli(exp(-u/t)), the same exact test as _bernoulli_exp_many with a scalar denominator
    p_hat = np.exp(-(u.astype(np.float64) / float(t)))
    w = rng.integers(0, 1 << _U_BITS, m)
    accept = np.ldexp((w + 1).astype(np.float64), -_U_BITS) <= p_hat - 2.0**-_BAND_BITS
    for i in np.flatnonzero(~accept & (np.ldexp(w.astype(np.float64), -_U_BITS) < p_hat + 2.0**-_BAND_BITS)):
        accept[i] = _accept_exact(int(u[i]), int(t), int(w[i]), rng)
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
        u = rng.integers(0, 1 << _U_BITS, k)
        u_lo = np.ldexp(u.astype(np.float64), -_U_BITS)  # exact: u < 2^53
        u_hi = np.ldexp((u + 1).astype(np.float64), -_U_BITS)
        accept = u_hi <= p_hat - band
        unsure = (~accept & (u_lo < p_hat + band)) | (np.abs(y) >= 1 << 52)
        for i in np.flatnonzero(unsure):  # probability ~2^-39 each: exact interval arithmetic
            p, q, ti = params[g[cand[i]]][:3]
            num = (abs(int(y[i])) * ti * q - p) ** 2
            accept[i] = _accept_exact(num, 2 * p * q * ti * ti, int(u[i]), rng)
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
    2^-40 band, finished by :func:`_accept_exact` inside it.
    """
    num = np.asarray(num, dtype=np.int64)
    den = np.broadcast_to(np.asarray(den, dtype=np.int64), num.shape)
    p_hat = np.exp(-(num.astype(np.float64) / den.astype(np.float64)))
    u = rng.integers(0, 1 << _U_BITS, num.size)
    u_lo = np.ldexp(u.astype(np.float64), -_U_BITS)
    u_hi = np.ldexp((u + 1).astype(np.float64), -_U_BITS)
    band = 2.0**-_BAND_BITS
    accept = u_hi <= p_hat - band
    for i in np.flatnonzero(~accept & (u_lo < p_hat + band)):  # probability ~2^-39 each
        accept[i] = _accept_exact(int(num[i]), int(den[i]), int(u[i]), rng)
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


def _accept_exact(num: int, den: int, u0: int, rng: np.random.Generator) -> bool:
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
            z = iv.exp(-iv.mpf(num) / iv.mpf(den)) * (1 << _U_BITS) - u0
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

