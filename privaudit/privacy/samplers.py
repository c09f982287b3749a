"""Exact discrete Gaussian and discrete Laplace noise at numpy speed.

:func:`exact_noise` draws ``n`` samples of the discrete Gaussian N_Z(0, sigma^2)
(P(y) proportional to exp(-y^2 / (2 sigma^2))) or of the discrete Laplace
(P(y) proportional to exp(-|y| / b)), y in Z, **exactly**: the output law is the
target law, with total-variation distance 0 (:func:`sampler_total_variation`).
The parameter is the float ``scale`` itself, read as the exact rational it
represents (sigma^2 = scale^2, b = scale); nothing is rounded.

How (one uniform 64-bit word per draw, Walker's alias method)
------------------------------------------------------------
Think of the inverse-CDF sampler y = F^-1(V), V uniform on [0, 1), with the
boundaries F(b) = P(Y <= b) for b = -T-1, ..., T (T: the table half-width,
about 6.6 sigma or 21.5 b, so that P(|Y| > T) is about 2^-30). Cut [0, 1) into
2^64 cells of width 2^-64. A cell that contains no boundary lies inside one
outcome's interval: the lower tail (y < -T), one y in [-T, T], or the upper
tail (y > T). Each outcome owns c_o such "full" cells; the remaining cells
(at most 2T+2, one per boundary) are "ambiguous". The integers c_o and the
number of ambiguous cells sum to 2^64 exactly; an alias table over these
integer weights (Walker 1977, Vose 1991, in exact integer arithmetic) turns one
uniform 64-bit word into an outcome with probability exactly weight / 2^64:

* a central y: output y (P = c_y 2^-64);
* "ambiguous" (probability (2T+2) 2^-64, about 1e-17 per draw): pick an
  ambiguous cell uniformly and find F^-1(V) for V uniform in that cell,
  drawing further 64-bit words of V until the comparison with the boundaries
  in the cell is decided by rigorous bounds on F (below);
* a tail: draw from the law conditioned on y > T (mirrored for y < -T), exactly:
  Laplace: T + 1 + G with G = Y | Y >= 0 drawn from this same sampler
  (memorylessness); Gaussian: T + 1 + G, G geometric with ratio
  exp(-(T+1)/sigma^2) (this sampler's discrete Laplace) accepted with
  probability exp(-G^2 / (2 sigma^2)) (Canonne, Kamath & Steinke 2020,
  Algorithm 1, on Python rationals).

Adding the pieces, P(output = y) = c_y 2^-64 + (the parts of y's interval
inside ambiguous cells) = F(y) - F(y-1): the sampler is exact, given uniform
64-bit words (numpy's ``Generator``; OS entropy for a real release).

Rigorous CDF values: the weights w(y) = exp(-y^2/(2 sigma^2)) or exp(-y/b)
are computed in fixed point with 2^-P resolution as integer intervals
[lo, hi] containing the real value: the two seeds exp(-x) from mpmath's
interval arithmetic (``mpmath.libmp.mpi_exp``, outward rounding), then products rounded
down for lo and up for hi. The normaliser includes the whole tail (Laplace:
closed form q^(n+1)/(1-q); Gaussian: summed far enough, plus the geometric
bound w(n+1)/(1 - w(n+2)/w(n+1)) on the rest). A cell index floor(F 2^64) is
used only when both ends of F's interval give the same integer (otherwise P
is doubled); the ambiguous-cell refinement recomputes F at the precision it
needs.

Speed: about 1 word, 2 table look-ups and a few array operations per draw
(benchmarks/bench_noise.py). :meth:`ExactSampler.add_into` adds the noise in
place into an int64 array (the release path), chunk by chunk through
cache-resident scratch buffers, with a guide table (one look-up per draw) for
the count scales: 104-128 M draws per CPU second against 54-56 before. Building a table costs O(T + tail) Python integer
operations (milliseconds for sigma ~ 6, about 0.5 s for sigma ~ 6000); tables
are cached per (mechanism, scale). The table half-width is capped at
2^17 - 2; beyond that (sigma above about 2e4, b above about 6e3) a growing
share of draws goes through the (exact, slower) tail paths: 19% of draws at
b = 8e4, where the whole sampler runs at about 22 M/s per thread against
about 50 M/s at b = 100 (docs/privacy.md); sigma is limited to
:data:`GAUSSIAN_SIGMA_MAX` = 2^15.

References
----------
Canonne, Kamath, Steinke, "The Discrete Gaussian for Differential Privacy",
NeurIPS 2020, arXiv:2004.00010 (definitions; Algorithm 1 for Bernoulli(exp(-g))).
Walker, "An efficient method for generating discrete random variables with
general distributions", ACM TOMS 1977; Vose, IEEE TSE 1991 (alias method).
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

import numpy as np
from mpmath.libmp import from_int, mpi_div, mpi_exp, mpi_neg

from privaudit.core.errors import UsageError
from privaudit.core.formatting import num

__all__ = ["exact_noise", "sampler_total_variation", "noise_statement", "get_sampler",
           "gaussian_sampler_for_variance", "ExactSampler", "MECHANISMS",
           "GAUSSIAN_SIGMA_MAX", "bernoulli_exp", "table_half_width", "EXACT_PATHS",
           "TABLE_MIN_DRAWS_PER_T"]

MECHANISMS = ("gaussian", "laplace")
#: the table half-width T is chosen so that P(|Y| > T) is about 2^-_TAIL_BITS
_TAIL_BITS = 30
#: largest table half-width (the alias table then has 2^18 columns, 3 MB)
_T_MAX = (1 << 17) - 2
#: largest sigma of the exact discrete Gaussian: beyond, the table (capped at
#: half-width 2^17 - 2, about 4 sigma here) would leave too many draws to the slow tail path
GAUSSIAN_SIGMA_MAX = float(1 << 15)
#: elements per chunk of ExactSampler.add_into (scratch buffers of this many elements stay in cache)
_INPLACE_CHUNK = 1 << 15
#: largest table half-width served by the guide table of add_into (int16 entries; sigma up to about 300,
#: b up to about 90: every count scale of a release); larger tables use the chunked alias method
_GUIDE_MAX_T = 2000
#: guide table size: about _GUIDE_PURITY buckets per outcome, so at most ~1/_GUIDE_PURITY of the words are impure
_GUIDE_PURITY = 256
#: at least 2^_GUIDE_MIN_BITS and at most 2^_GUIDE_MAX_BITS guide entries (int16: 256 KB)
_GUIDE_MIN_BITS = 8
_GUIDE_MAX_BITS = 17
#: bit generators whose ``random_raw`` words are 64 uniform bits
_RAW64 = (np.random.PCG64, np.random.PCG64DXSM, np.random.Philox, np.random.SFC64)


# ----------------------------------------------------------------------------
# public interface


def exact_noise(mechanism: str, scale: float, n: int, *, rng: np.random.Generator) -> np.ndarray:
    """n independent exact draws of discrete Gaussian or discrete Laplace noise.

    Parameters
    ----------
    mechanism : {"gaussian", "laplace"}
        ``"gaussian"``: N_Z(0, scale^2), P(y) proportional to
        exp(-y^2 / (2 scale^2)). ``"laplace"``: P(y) proportional to
        exp(-|y| / scale). y ranges over all integers.
    scale : float
        sigma or b (> 0, finite), used as the exact rational value of the float.
    n : int
        Number of draws (>= 0).
    rng : np.random.Generator
        Source of uniform 64-bit words (OS-seeded for a real release).

    Returns
    -------
    np.ndarray of int64, shape (n,)

    Raises
    ------
    UsageError
        Unknown mechanism, bad scale or n.

    Notes
    -----
    Total-variation distance to the target law: 0 (module docstring). So the
    discrete Gaussian with sigma = Delta_2 / sqrt(2 rho) gives rho-zCDP for
    integer statistics (CKS 2020 Thm 14), the discrete Laplace with
    b = Delta_1 / eps gives pure eps-DP (CKS 2020 Sec. 2.2; Ghosh, Roughgarden,
    Sundararajan 2012), as the continuous mechanisms do.
    """
    if isinstance(n, bool) or int(n) != n or n < 0:
        raise UsageError(f"`n` must be an integer >= 0. Found {n!r}.")
    return get_sampler(mechanism, scale).sample(int(n), rng)


def sampler_total_variation(mechanism: str, scale: float) -> float:
    """Certified total-variation distance between one draw of :func:`exact_noise` and its target law.

    Returns
    -------
    float
        0.0: the sampler is exact (module docstring), for every mechanism and scale.
    """
    get_sampler(mechanism, scale)  # validates the arguments
    return 0.0


#: What each noise mode of ``privaudit.privacy.mechanisms.add_noise`` delivers, for manifests.
_STATEMENTS = {
    "exact": {
        "sampler": "privaudit.privacy.samplers: exact discrete Gaussian / discrete Laplace (the exact CDF cut "
                   "into 2^-64 cells; each 64-bit word mapped to an outcome with probability exactly its number "
                   "of full cells / 2^64 by a guide table or an alias table; boundary cells and tails finished "
                   "exactly)",
        "total_variation_per_draw": 0.0,
        "extra_delta": 0.0,
        "derivation": "the sampler's output law is the target law (total variation 0), so the mechanism is the "
                      "ideal discrete Gaussian (rho = l2^2 / (2 sigma^2), CKS 2020 Thm 14) or discrete Laplace "
                      "(eps = l1 / b) mechanism: nothing is added to delta",
    },
    "rounded": {
        "sampler": "numpy Generator.normal / Generator.laplace, rounded to the nearest integer",
        "total_variation_per_draw": None,
        "extra_delta": None,
        "derivation": "not certified: numpy's Laplace inverts a uniform on a 2^-53 grid (|Z| <= 36.04 b, so "
                      "no pure epsilon-DP) and its normal is a float ziggurat with bounded support and float "
                      "tables; the guarantee holds only for the ideal continuous mechanism. Releases refuse "
                      "this mode; it is kept for audits of float samplers",
    },
    "continuous": {
        "sampler": "numpy Generator.normal (float64 ziggurat), added to float statistics (GOE matrices as "
                   "(Z + Z^T)/sqrt(2)); no lattice, no rounding",
        "total_variation_per_draw": None,
        "extra_delta": None,
        "derivation": "not certified: the stated rho is that of the ideal continuous Gaussian mechanism "
                      "(rho = l2^2 / (2 sigma^2)); numpy's normal is a float ziggurat with bounded support and "
                      "float tables, and a float statistic plus float noise leaks through its low-order bits "
                      "(AUDITING.md B2/B3), so the guarantee is not established for the sampler that ran",
    },
}


#: The exact discrete Gaussian without a table (``privaudit.privacy.fixed_point.exact_gaussian``).
_REJECTION = ("privaudit.privacy.fixed_point: exact discrete Gaussian by rejection, no table (Canonne, Kamath & "
              "Steinke 2020, Algorithm 3: discrete Laplace proposal of scale t = floor(sigma) + 1, accepted with "
              "probability exp(-(|y| - sigma^2/t)^2 / (2 sigma^2)), the acceptance decided exactly: a float "
              "comparison outside a rigorous 2^-40 band, interval arithmetic inside)")
#: The exact discrete Gaussian of wide scales (``privaudit.privacy.fixed_point.discrete_gaussian_scaled``).
_SCALED = ("privaudit.privacy.fixed_point.discrete_gaussian_scaled: exact discrete Gaussian of a wide scale "
           "sigma, one trial = a coarse part J ~ N_Z(0, sigma^2 / M^2) from this module's table sampler (M = 2^m, "
           "sigma / M in [2^7, 2^8); trials with J < 0 rejected), a uniform fine part F on [0, M) and a sign bit, "
           "|y| = M J + F (+ 1 for the negative side), accepted with probability "
           "exp(-(|y|^2 - M^2 J^2) / (2 sigma^2)), decided exactly (a float comparison outside a rigorous band, "
           "interval arithmetic inside); scales below 2^8 lattice units by rejection from a discrete Laplace "
           "(Canonne, Kamath & Steinke 2020, Algorithm 3)")
#: the ways ``exact`` noise is drawn: the table sampler of this module, rejection (few draws at a scale),
#: or the scaled sampler (wide scales: the online counters' GOE and wide Gaussian nodes, the linear
#: explorers' lattice statistics)
EXACT_PATHS = ("table", "rejection", "scaled")
#: ``fixed_point.exact_gaussian`` builds (or reuses) the table when a call draws at least this many values
#: per unit of the table's half-width T: building costs about 7 us per unit of T, a draw about 0.03 us from
#: the table and 0.4-0.5 us by rejection, so the two break even near 15 T draws
TABLE_MIN_DRAWS_PER_T = 16


def noise_statement(noise: str, *, paths=("table",)) -> dict:
    """What a noise mode delivers: sampler, certified total variation per draw and extra delta.

    Parameters
    ----------
    noise : {"exact", "rounded", "continuous"}
    paths : collection of {"table", "rejection", "scaled"}, default ("table",)
        ``"exact"`` only: the exact samplers that drew the noise, named in
        ``sampler`` (``fixed_point.exact_gaussian`` uses ``"rejection"`` for
        a scale drawn fewer than :data:`TABLE_MIN_DRAWS_PER_T` T times in a
        call, the table otherwise; ``"scaled"`` is
        ``fixed_point.discrete_gaussian_scaled``, the online explorers' wide
        scales: GOE matrices, Gaussian nodes above :data:`GAUSSIAN_SIGMA_MAX`
        lattice units, the linear explorers' lattice statistics).
        All have total variation 0, so nothing else changes.

    Returns
    -------
    dict
        ``sampler`` (text), ``total_variation_per_draw`` (float, or None when
        not certified), ``extra_delta`` (the delta added to the ideal
        mechanism's guarantee for a whole release: 0.0 for ``"exact"``; None
        when not certified) and ``derivation`` (text).

    Raises
    ------
    UsageError
        Unknown mode or path, no path, or paths with a mode other than ``"exact"``.
    """
    if noise not in _STATEMENTS:
        raise UsageError(f"`noise` must be one of {tuple(_STATEMENTS)}. Found {noise!r}.")
    paths = set(paths)
    if not paths or not paths <= set(EXACT_PATHS) or (noise != "exact" and paths != {"table"}):
        raise UsageError(f"`paths` must be a non-empty subset of {EXACT_PATHS} (with noise 'exact'). "
                         f"Found {sorted(paths)} with noise {noise!r}.")
    out = dict(_STATEMENTS[noise])
    if paths == {"rejection"}:
        out["sampler"] = _REJECTION
    elif "rejection" in paths:
        out["sampler"] = (f"{out['sampler']}; for the Gaussian scales drawn fewer than "
                          f"{TABLE_MIN_DRAWS_PER_T} T times in one call "
                          f"(T: that table's half-width, about 6.6 sigma): {_REJECTION}")
    if paths == {"scaled"}:
        out["sampler"] = _SCALED
    elif "scaled" in paths:
        if paths == {"scaled", "rejection"}:
            out["sampler"] = _REJECTION
        out["sampler"] = (f"{out['sampler']}; for the GOE matrices and the Gaussian scales above "
                          f"{GAUSSIAN_SIGMA_MAX:.0f} lattice units: {_SCALED}")
    return out


def get_sampler(mechanism: str, scale: float) -> "ExactSampler":
    """The (cached) :class:`ExactSampler` of a mechanism and scale.

    Raises
    ------
    UsageError
        Unknown mechanism; scale not positive and finite; a Gaussian sigma
        above :data:`GAUSSIAN_SIGMA_MAX` (budget too small); a scale so small
        (budget so large, e.g. rho = 1e12) that the table cannot be built
        exactly (a CDF value within 2^-16000 of a cell edge).
    """
    x = _law_parameter(mechanism, scale)
    s = float(scale)
    try:
        return _sampler(mechanism, x)
    except RuntimeError:  # P(Z != 0) so far below 2^-64 that a CDF value cannot be told from a cell edge
        if s >= 1:  # a huge scale: the law is nearly flat (a tiny budget)
            raise UsageError(f"the exact {mechanism} sampler cannot draw at scale {s!r}: the noise is so large "
                             "(the privacy budget so small) that its table cannot be built exactly. "
                             "Use a larger privacy budget (rho or epsilon).") from None
        raise UsageError(f"the exact {mechanism} sampler cannot draw at scale {s!r}: the noise is so small "
                         "(the privacy budget so large) that its CDF lies within 2^-16000 of a 2^-64 cell edge. "
                         "Use a smaller privacy budget (rho or epsilon).") from None


def gaussian_sampler_for_variance(sigma2: Fraction) -> "ExactSampler":
    """The (cached) table sampler of N_Z(0, sigma2) for an exact rational variance.

    :func:`get_sampler` reads sigma from a float; a variance such as
    2 s^2 (a GOE diagonal) or sigma^2 / 4^m (the coarse part of
    ``privacy.fixed_point.discrete_gaussian_scaled``) need not be the square of
    a float, so this entry takes the rational itself: P(y) proportional to
    exp(-y^2 / (2 sigma2)) exactly.

    Parameters
    ----------
    sigma2 : Fraction
        Variance parameter, > 0, sigma = sqrt(sigma2) <= :data:`GAUSSIAN_SIGMA_MAX`.

    Returns
    -------
    ExactSampler

    Raises
    ------
    UsageError
        sigma2 not positive or sigma above :data:`GAUSSIAN_SIGMA_MAX`.
    """
    sigma2 = Fraction(sigma2)
    if not sigma2 > 0 or sigma2 > Fraction(GAUSSIAN_SIGMA_MAX) ** 2:
        raise UsageError(f"`sigma2` must be in (0, {GAUSSIAN_SIGMA_MAX:g}^2]. Found {float(sigma2):.6g}.")
    return _sampler("gaussian", 1 / (2 * sigma2))


def table_half_width(mechanism: str, scale: float) -> int:
    """Half-width T of the table :func:`get_sampler` builds for this law, without building it.

    Building the table costs O(T) Python integer operations (about 7
    microseconds per unit of T: 0.35 s at sigma ~ 8,000, T ~ 54,000), one
    draw from it about 30 ns; ``privaudit.privacy.fixed_point.exact_gaussian``
    uses T to decide whether a table pays off.

    Raises
    ------
    UsageError
        As :func:`get_sampler` (unknown mechanism, bad scale, sigma above
        :data:`GAUSSIAN_SIGMA_MAX`).
    """
    return _half_width(mechanism, _law_parameter(mechanism, scale))


def _law_parameter(mechanism: str, scale: float) -> Fraction:
    """x = 1 / (2 sigma^2) (Gaussian) or 1 / b (Laplace), exact, from a validated float scale."""
    law = _law_class(mechanism)
    try:
        s = float(scale)
    except (TypeError, ValueError):
        raise UsageError(f"`scale` must be a positive number. Found {scale!r}.") from None
    if not (s > 0 and math.isfinite(s)):
        raise UsageError(f"`scale` must be a positive finite number. Found {scale!r}.")
    return law.parameter(s)


def _half_width(mechanism: str, x: Fraction) -> int:
    """Table half-width: P(|Y| > T) about 2^-_TAIL_BITS, within [1, _T_MAX]."""
    return int(min(max(_law_class(mechanism).half_width(x), 1), _T_MAX))


def _law_class(mechanism: str) -> type:
    """The law of a mechanism name: :class:`_GaussianLaw` or :class:`_LaplaceLaw`."""
    try:
        return _LAWS[mechanism]
    except (KeyError, TypeError):
        raise UsageError(f"`mechanism` must be one of {MECHANISMS}. Found {mechanism!r}.") from None


@lru_cache(maxsize=64)
def _sampler(mechanism: str, x: Fraction) -> "ExactSampler":
    return ExactSampler(mechanism, x)


# ----------------------------------------------------------------------------
# rigorous fixed-point arithmetic: an interval is (lo, hi), lo <= value * 2^P <= hi


def _fixed(t: tuple, P: int, up: bool) -> int:
    """floor (up=False) or ceil (up=True) of a raw non-negative mpf value times 2^P."""
    sign, man, exp, _ = t
    if sign:
        raise RuntimeError("negative weight in the exact sampler; report this")
    e = exp + P
    if e >= 0:
        return man << e
    return -((-man) >> -e) if up else man >> -e


def _exp_neg(x: Fraction, P: int) -> tuple[int, int]:
    """Interval on exp(-x) 2^P for a rational x >= 0 (mpmath interval arithmetic, outward rounded)."""
    prec = P + 32
    num, den = from_int(x.numerator), from_int(x.denominator)
    a, b = mpi_exp(mpi_neg(mpi_div((num, num), (den, den), prec)), prec)
    return _fixed(a, P, False), _fixed(b, P, True)


def _mul(a: tuple[int, int], b: tuple[int, int], P: int) -> tuple[int, int]:
    return (a[0] * b[0]) >> P, -((-a[1] * b[1]) >> P)


class _Law:
    """Weights w(y) >= 0 for y >= 0 of a symmetric law on Z, P(Y = y) proportional to w(|y|)."""

    #: pure epsilon-DP law (Laplace): the tail is memoryless
    pure = False

    def __init__(self, x: Fraction):
        self.x = x

    def tail_sums(self, T: int, P: int) -> tuple[list, tuple[int, int]]:
        """Intervals (2^-P units) on U(j) = sum_{y > j} w(y) for j = 0..T, and on Z = w(0) + 2 U(0)."""
        one = 1 << P
        ws, tail, n = self._weights(T, P)
        U = [None] * (n + 1)
        acc = tail
        for j in range(n, -1, -1):
            U[j] = acc
            acc = (acc[0] + ws[j][0], acc[1] + ws[j][1])
        Z = (one + 2 * U[0][0], one + 2 * U[0][1])
        return U[:T + 1], Z


class _GaussianLaw(_Law):
    """w(y) = exp(-x y^2), x = 1/(2 sigma^2): the discrete Gaussian N_Z(0, sigma^2)."""

    @staticmethod
    def parameter(s: float) -> Fraction:
        """x = 1 / (2 sigma^2) from sigma = ``s`` (UsageError above :data:`GAUSSIAN_SIGMA_MAX`)."""
        if s > GAUSSIAN_SIGMA_MAX:
            raise UsageError(f"the exact discrete Gaussian supports sigma up to {GAUSSIAN_SIGMA_MAX:g}. "
                             f"Found sigma={num(s)}: the privacy budget is too small for these sensitivities; "
                             "use a larger budget (rho or epsilon).")
        return 1 / (2 * Fraction(s) ** 2)

    @staticmethod
    def half_width(x: Fraction) -> int:
        """T with P(|Y| > T) about 2^-_TAIL_BITS (before the clamp to [1, _T_MAX])."""
        sigma = math.sqrt(1 / (2 * float(x)))
        return math.ceil(sigma * math.sqrt(2 * (_TAIL_BITS + 1) * math.log(2)))

    def _weights(self, T: int, P: int) -> tuple[list, tuple[int, int], int]:
        """Intervals on w(0..n+1), on the rest sum_{y > n} w(y), and n (summed far enough)."""
        one = 1 << P
        # sum far enough that the rest is below 2^-(P+8) of w(0)
        n = max(T, math.isqrt(math.ceil((P + 8) * math.log(2) / self.x)) + 2)
        r = _exp_neg(self.x, P)            # w(1)/w(0) = exp(-x)
        e2 = _exp_neg(2 * self.x, P)       # ratio of successive ratios
        ws = [(one, one)]
        for _ in range(n + 1):
            ws.append(_mul(ws[-1], r, P))
            r = _mul(r, e2, P)
        # ws[n+1] = w(n+1); r = w(n+2)/w(n+1); rest <= w(n+1) / (1 - r) (ratios decrease)
        d_lo = one - r[1]
        if d_lo <= 0:
            raise RuntimeError("precision too low for this Gaussian scale; report this")
        return ws, (ws[n + 1][0], -((-(ws[n + 1][1] << P)) // d_lo)), n


class _LaplaceLaw(_Law):
    """w(y) = exp(-x y), x = 1/b: the discrete Laplace of scale b."""

    pure = True

    @staticmethod
    def parameter(s: float) -> Fraction:
        """x = 1 / b from b = ``s``."""
        return 1 / Fraction(s)

    @staticmethod
    def half_width(x: Fraction) -> int:
        """T with P(|Y| > T) about 2^-_TAIL_BITS (before the clamp to [1, _T_MAX])."""
        return math.ceil(float(1 / x) * (_TAIL_BITS + 1) * math.log(2))

    def _weights(self, T: int, P: int) -> tuple[list, tuple[int, int], int]:
        """Intervals on w(0..T+1), on the rest U(T) = q^(T+1) / (1 - q) (closed form), and T."""
        one = 1 << P
        q = _exp_neg(self.x, P)
        ws = [(one, one)]
        for _ in range(T + 1):
            ws.append(_mul(ws[-1], q, P))
        d_lo, d_hi = one - q[1], one - q[0]
        if d_lo <= 0:
            raise RuntimeError("precision too low for this Laplace scale; report this")
        return ws, ((ws[T + 1][0] << P) // d_hi, -((-(ws[T + 1][1] << P)) // d_lo)), T


_LAWS = {"gaussian": _GaussianLaw, "laplace": _LaplaceLaw}


def _cdf(law: _Law, T: int, P: int) -> list[tuple[int, int]]:
    """Intervals on F(b) 2^P, F(b) = P(Y <= b), for the boundaries b = -T-1, ..., T (in that order)."""
    U, Z = law.tail_sums(T, P)
    one = 1 << P
    # F(-j-1) = U(j) / Z and F(j) = 1 - U(j) / Z by symmetry
    g = [((u_lo << P) // Z[1], -((-(u_hi << P)) // Z[0])) for u_lo, u_hi in U]
    return [g[j] for j in range(T, -1, -1)] + [(one - hi, one - lo) for lo, hi in g]


def _alias(weights: list[int], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Walker/Vose alias table for integer weights summing to 2^64, over 2^k columns, in exact integers.

    Column j keeps outcome j when the low 64-k bits of the word are below
    thresh[j], else gives alias[j]; so outcome o has probability weights[o] / 2^64.
    """
    n, L = 1 << k, 1 << (64 - k)
    w = list(weights) + [0] * (n - len(weights))
    if sum(w) != 1 << 64:
        raise RuntimeError("exact sampler: table weights do not sum to 2^64; report this")
    thresh, alias = [L] * n, list(range(n))
    small = [j for j in range(n) if w[j] < L]
    large = [j for j in range(n) if w[j] >= L]
    while small and large:
        s, big = small.pop(), large[-1]
        thresh[s], alias[s] = w[s], big
        w[big] -= L - w[s]
        if w[big] < L:
            small.append(large.pop())
    if any(w[j] != L for j in small + large):  # exact integers: the rest are full columns
        raise RuntimeError("exact sampler: alias construction left a partial column; report this")
    return np.array(thresh, dtype=np.uint64), np.array(alias, dtype=np.intp)


def _words(rng: np.random.Generator, n: int) -> np.ndarray:
    """n uniform 64-bit words from the generator."""
    bg = rng.bit_generator
    if isinstance(bg, _RAW64):
        return bg.random_raw(n)
    return rng.integers(0, 1 << 64, n, dtype=np.uint64)


# ----------------------------------------------------------------------------
# the sampler


class ExactSampler:
    """Exact sampler of one discrete Gaussian / discrete Laplace law (see the module docstring).

    Parameters
    ----------
    mechanism : {"gaussian", "laplace"}
    x : Fraction
        1 / (2 sigma^2) (Gaussian) or 1 / b (Laplace), > 0.

    Attributes
    ----------
    T : int
        Table half-width: values in [-T, T] come from the alias table.
    weights_ : np.ndarray of uint64, shape (2T + 4,)
        Full-cell counts (probability numerators over 2^64) of the outcomes:
        lower tail, y = -T..T, upper tail, ambiguous.
    """

    def __init__(self, mechanism: str, x: Fraction):
        self.law = _law_class(mechanism)(x)
        self.mechanism, self.x = mechanism, x
        self.T = T = _half_width(mechanism, x)
        self._cdf_cache: dict[int, list] = {}
        P = 64 + 2 * max(T, 1).bit_length() + 40
        while True:
            F = self._cdf_at(P)
            K = [lo >> (P - 64) for lo, _ in F]
            if all(hi >> (P - 64) == c for (_, hi), c in zip(F, K)):
                break
            P *= 2  # a boundary within 2^-P of a cell edge: decide it at higher precision
            if P > 1 << 14:
                raise RuntimeError("exact sampler: cannot separate a CDF value from a cell edge; report this")
        self._cdf_cache.clear()  # tens of MB at T ~ 1e5; the rare refinement recomputes at P >= 192 anyway
        Ka = np.array(K, dtype=np.uint64)
        del K
        self._K = Ka                              # cell index of each boundary, nondecreasing (uint64)
        gaps = np.diff(Ka)                        # K is nondecreasing: no wrap-around
        self._amb = np.concatenate([Ka[:1], Ka[1:][gaps > 0]])  # ambiguous cells (distinct K), sorted
        # outcomes: 0 (lower tail), 1..m-1 (y = -T..T), m (upper tail), m + 1 (ambiguous); all < 2^64
        self.weights_ = np.concatenate([Ka[:1], np.where(gaps > 0, gaps - np.uint64(1), np.uint64(0)),
                                        [np.uint64((1 << 64) - 1 - int(Ka[-1])), np.uint64(len(self._amb))]])
        k = max(2, (len(self.weights_) - 1).bit_length())
        self._shift = np.uint64(64 - k)
        self._mask = np.uint64((1 << (64 - k)) - 1)
        self._thresh, self._alias = _alias(self.weights_.tolist(), k)
        self._guide = None     # guide table of add_into (small tables only), built on first use
        self._proposal = None  # Gaussian tail proposal (a discrete Laplace sampler), built on first use
        self._coarse = None    # Laplace: sampler of exp(-x L), L = T (T >= 2) or 2, for the tails

    def _cdf_at(self, P: int) -> list[tuple[int, int]]:
        if P not in self._cdf_cache:
            self._cdf_cache[P] = _cdf(self.law, self.T, P)
        return self._cdf_cache[P]

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n exact draws, int64 array of shape (n,)."""
        return self._draw(n, rng, tails=True)

    # -- in place -------------------------------------------------------------

    def add_into(self, out: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Add one exact draw to every element of ``out``, in place; returns ``out``.

        Parameters
        ----------
        out : np.ndarray of int64, C-contiguous, any shape
            Overwritten with out + noise (one independent draw per element).
        rng : np.random.Generator

        Notes
        -----
        Works in chunks of :data:`_INPLACE_CHUNK` elements through scratch
        buffers allocated once per call (a few hundred KB, cache-resident):
        no array of the size of ``out`` is allocated. Each draw takes one
        uniform 64-bit word u. For tables with few boundaries (half-width
        T <= :data:`_GUIDE_MAX_T`: every count scale of a release) a guide
        table indexed by the top m bits of u gives the outcome directly
        whenever its 2^(64-m) words lie inside one outcome's interval of the
        cumulative weights (all but at most 2T+3 of the 2^m buckets); the
        others are decided by a binary search of u in the cumulative weights.
        So outcome o is drawn with probability weights_[o] / 2^64, the law of
        :meth:`sample` (same outcomes, same finishing of tails and ambiguous
        cells): total variation 0 to the target law. Larger tables use the
        alias method of :meth:`sample`, chunked the same way.
        """
        if out.dtype != np.int64 or not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError("add_into needs a writeable C-contiguous int64 array")
        flat = out.reshape(-1)
        n = flat.size
        c = min(n, _INPLACE_CHUNK)
        guide = self._guide_table()
        if guide is not None:
            table, shift, cum = guide
            idx = np.empty(c, dtype=np.intp)
            noise = np.empty(c, dtype=table.dtype)
            for start in range(0, n, c):
                m = min(c, n - start)
                u = _words(rng, m)
                ix, nz = idx[:m], noise[:m]
                np.right_shift(u, shift, out=ix.view(np.uint64))
                np.take(table, ix, out=nz, mode="clip")
                special = None
                if nz.max() > self.T or nz.min() < -self.T:  # impure bucket, tail or ambiguous: rare
                    special = self._settle(nz, u, cum, rng)
                np.add(flat[start:start + m], nz, out=flat[start:start + m], casting="unsafe")
                if special is not None:  # int64 values (a tail draw need not fit the int16 table type)
                    flat[start + special[0]] += special[1]
            return out
        low = np.empty(c, dtype=np.uint64)
        tb = np.empty(c, dtype=np.uint64)
        keep = np.empty(c, dtype=bool)
        for start in range(0, n, c):
            m = min(c, n - start)
            u = _words(rng, m)
            lo, t, k = low[:m], tb[:m], keep[:m]
            np.bitwise_and(u, self._mask, out=lo)
            col = np.right_shift(u, self._shift, out=u).view(np.intp)
            np.take(self._thresh, col, out=t, mode="clip")
            np.less(lo, t, out=k)
            o = lo.view(np.intp)                       # low is no longer needed: reuse it for the outcome
            np.take(self._alias, col, out=o, mode="clip")
            np.copyto(o, col, where=k)
            o -= self.T + 1
            if o.max() > self.T or o.min() < -self.T:
                sp = np.flatnonzero(np.abs(o) > self.T)
                o[sp] = self._finish(o[sp], rng, True)
            flat[start:start + m] += o
        return out

    def _guide_table(self):
        """(table, shift, cum) of the guide-table path, built on first use; None when T > _GUIDE_MAX_T.

        ``cum`` (uint64, the cumulative weights without the final 2^64) puts
        outcome o on the words [cum[o-1], cum[o]); bucket b (the top m bits)
        holds y = o - T - 1 when all its words map to the same outcome o, else
        the mark T + 3 (decide by searching u in ``cum``).
        """
        if self.T > _GUIDE_MAX_T:
            return None
        if self._guide is None:
            w = [int(x) for x in self.weights_]
            m = min(_GUIDE_MAX_BITS, max(_GUIDE_MIN_BITS, (len(w) * _GUIDE_PURITY).bit_length()))
            cum = np.cumsum(np.array(w[:-1], dtype=object)).astype(np.uint64)  # < 2^64: the last weight > 0
            edges = np.arange(1 << m, dtype=np.uint64) << np.uint64(64 - m)   # first word of each bucket
            first = np.searchsorted(cum, edges, side="right")
            last = np.searchsorted(cum, edges | np.uint64((1 << (64 - m)) - 1), side="right")
            table = np.where(first == last, first - (self.T + 1), self.T + 3).astype(np.int16)
            self._guide = (table, np.uint64(64 - m), cum)
        return self._guide

    def _settle(self, nz: np.ndarray, u: np.ndarray, cum: np.ndarray,
                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Guide path, the draws outside [-T, T] of the table: impure buckets, tails, ambiguous cells.

        Impure buckets are decided by searching u in ``cum``; the tails and
        ambiguous outcomes this gives (or the table gave) are finished by
        :meth:`_finish`. Returns (positions, int64 draws) and sets those
        positions of ``nz`` to 0, so the caller adds the draws in int64.
        """
        T = self.T
        sp = np.flatnonzero((nz > T) | (nz < -T))
        y = nz[sp].astype(np.int64)
        imp = y == T + 3
        if imp.any():
            y[imp] = np.searchsorted(cum, u[sp[imp]], side="right") - (T + 1)
        fin = (y > T) | (y < -T)
        if fin.any():
            y[fin] = self._finish(y[fin], rng, True)
        nz[sp] = 0
        return sp, y

    def _draw(self, n: int, rng: np.random.Generator, tails: bool) -> np.ndarray:
        """n exact draws; with ``tails=False`` a draw beyond [-T, T] is returned as -T-1 or T+1 (the event)."""
        u = _words(rng, n)
        low = u & self._mask                  # position inside the column
        col = np.right_shift(u, self._shift, out=u).view(np.intp)  # column (< 2^k), in place
        out = np.where(low < self._thresh[col], col, self._alias[col])
        del low, u
        m = len(self._K)
        special = (np.flatnonzero((out == 0) | (out >= m))
                   if n and (out.min() == 0 or out.max() >= m) else None)  # rare: about 2^-30 per draw
        out -= self.T + 1  # outcome o -> y = o - T - 1; -T-1: lower tail, T+1: upper, T+2: ambiguous
        if special is not None:
            out[special] = self._finish(out[special], rng, tails)
        return out.astype(np.int64, copy=False)

    # -- rare paths ----------------------------------------------------------

    def _finish(self, marks: np.ndarray, rng: np.random.Generator, tails: bool) -> np.ndarray:
        """Turn ambiguous markers (and, if ``tails``, tail markers) into exact draws."""
        T, marks = self.T, marks.copy()
        for i in np.flatnonzero(marks == T + 2):
            marks[i] = self._resolve_ambiguous(rng) - T - 1
        idx = np.flatnonzero(np.abs(marks) == T + 1)
        if tails and idx.size:
            marks[idx] = np.sign(marks[idx]) * (T + 1 + self._tail(idx.size, rng))
        return marks

    def _resolve_ambiguous(self, rng: np.random.Generator) -> int:
        """Outcome index of F^-1(V), V uniform in a uniformly chosen ambiguous cell (exact)."""
        cell = int(self._amb[int(rng.integers(0, len(self._amb)))])
        i0 = int(np.searchsorted(self._K, np.uint64(cell), side="left"))
        i1 = int(np.searchsorted(self._K, np.uint64(cell), side="right"))
        v, nb = cell, 0  # V lies in [v, v + 1) * 2^-(64 + nb)
        while True:
            v = (v << 64) | int(_words(rng, 1)[0])
            nb += 64
            P = 64 + nb + 64
            F = self._cdf_at(P)
            lo_v, hi_v = v << (P - 64 - nb), (v + 1) << (P - 64 - nb)
            count = i0
            for f_lo, f_hi in F[i0:i1]:
                if f_hi <= lo_v:
                    count += 1           # F(b) <= V
                elif f_lo < hi_v:
                    break                # undecided: draw more bits of V
            else:
                return count

    def _tail(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n draws of G >= 0 with P(G = g) proportional to w(T + 1 + g)."""
        if self.law.pure:  # Laplace, memoryless: G is geometric with ratio exp(-x)
            return self._geometric(n, rng)
        # Gaussian: w(T+1+g) / w(T+1) = exp(-2x(T+1) g) exp(-x g^2): geometric proposal, exact acceptance
        if self._proposal is None:
            self._proposal = _sampler("laplace", 2 * self.x * (self.T + 1))
        g = np.empty(n, dtype=np.int64)
        todo = np.arange(n)
        while todo.size:
            y = self._proposal._geometric(todo.size, rng)
            ok = np.array([bernoulli_exp(self.x * int(v) ** 2, rng) for v in y], dtype=bool)
            g[todo[ok]] = y[ok]
            todo = todo[~ok]
        return g

    def _geometric(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Laplace only: n draws of G >= 0 with P(G = g) proportional to exp(-x g).

        G = L M + R, with M geometric with ratio exp(-x L) (the sampler of
        that law, Y' | Y' >= 0) and R, independent of M, with P(R = r)
        proportional to exp(-x r) on [0, L): P(M = m, R = r) is proportional
        to exp(-x (L m + r)), and (m, r) -> L m + r is one-to-one onto g >= 0.

        R for T >= 2 (L = T): one table draw Y (tails left unresolved) folded,
        r = Y for 0 <= Y < T and r = -Y - 1 for -T <= Y < 0, so
        P(r) = c (q^r + q^(r+1)) = c (1 + q) q^r with q = exp(-x); Y = T and
        the tails are rejected. Acceptance about (1 + P(|Y| <= T)) / 2 minus
        P(Y = T), 0.81 when the capped table leaves 19% to the tails (b = 8e4),
        against about 0.40 for Y | 0 <= Y <= T. For T = 1 (L = 2):
        R = Y | 0 <= Y <= 1.
        """
        T = self.T
        if T >= 2:
            L = T
            y = self._conditional(n, rng, -T, T - 1, tails=False)
            r = np.where(y >= 0, y, -y - 1)
        else:
            L = T + 1
            r = self._conditional(n, rng, 0, T, tails=False)
        if self._coarse is None:
            self._coarse = _sampler("laplace", self.x * L)
        mq = self._coarse._conditional(n, rng, 0, None, tails=True)
        return L * mq + r

    def _conditional(self, n: int, rng: np.random.Generator, lo: int, hi: int | None, tails: bool) -> np.ndarray:
        """n draws of Y | lo <= Y (<= hi), by rejection."""
        g = np.empty(n, dtype=np.int64)
        todo = np.arange(n)
        while todo.size:
            y = self._draw(todo.size, rng, tails)
            ok = (y >= lo) if hi is None else ((y >= lo) & (y <= hi))
            g[todo[ok]] = y[ok]
            todo = todo[~ok]
        return g


# ----------------------------------------------------------------------------
# scalar exact Bernoulli(exp(-gamma)) on Python rationals (CKS 2020, Algorithm 1)


def uniform_below(n: int, rng: np.random.Generator) -> int:
    """Uniform integer in [0, n) for any Python int n >= 1 (rejection on random bits)."""
    bits = n.bit_length()
    words = (bits + 31) // 32
    while True:
        x = 0
        for w in rng.integers(0, 1 << 32, words, dtype=np.uint64):
            x = (x << 32) | int(w)
        x >>= words * 32 - bits
        if x < n:
            return x


def _bernoulli_exp_le1(g: Fraction, rng: np.random.Generator) -> bool:
    """Bernoulli(exp(-g)) for a Fraction 0 <= g <= 1 (CKS Algorithm 1, gamma <= 1)."""
    k = 1
    while uniform_below(g.denominator * k, rng) < g.numerator:
        k += 1
    return k % 2 == 1


def bernoulli_exp(gamma: Fraction, rng: np.random.Generator) -> bool:
    """Bernoulli(exp(-gamma)) for a rational gamma >= 0, exactly (CKS 2020, Algorithm 1).

    floor(gamma) draws of Bernoulli(exp(-1)) (all must succeed), then one of
    Bernoulli(exp(-(gamma - floor(gamma)))).
    """
    gamma = Fraction(gamma)
    whole = math.floor(gamma)
    for _ in range(whole):
        if not _bernoulli_exp_le1(Fraction(1), rng):
            return False
    return _bernoulli_exp_le1(gamma - whole, rng)
