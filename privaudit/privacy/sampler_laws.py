"""Exact CDF tables of the discrete Gaussian and the discrete Laplace, in rigorous fixed point (mpmath).

The laws on Z: the discrete Gaussian N_Z(0, sigma^2), P(y) proportional to
exp(-y^2 / (2 sigma^2)), and the discrete Laplace, P(y) proportional to
exp(-|y| / b) (Canonne, Kamath & Steinke 2020, Def. 1 and Sec. 2.2), each
read from the float scale as the exact rational it represents. This module
gives the table sampler (``privaudit.privacy.exact_sampler``) its inputs:
the table half-width T, the CDF at the boundaries -T-1..T as rigorous integer
intervals, Walker's alias table over integer weights, and the exact
Bernoulli(exp(-gamma)) of Canonne, Kamath & Steinke 2020, Algorithm 1.

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

"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from mpmath.libmp import from_int, mpi_div, mpi_exp, mpi_neg

from privaudit.core.errors import NoiseScaleTooLarge, UsageError, positive_finite
from privaudit.core.formatting import num

NOISE_FAMILY_NAMES = ("gaussian", "laplace")
#: the table half-width T is chosen so that P(|Y| > T) is about 2^-_TAIL_BITS
_TAIL_BITS = 30
#: largest table half-width (the alias table then has 2^18 columns, 3 MB)
_T_MAX = (1 << 17) - 2
#: largest sigma of the exact discrete Gaussian: beyond, the table (capped at
#: half-width 2^17 - 2, about 4 sigma here) would leave too many draws to the slow tail path
GAUSSIAN_SIGMA_MAX = float(1 << 15)
#: largest scale b of the exact discrete Laplace: beyond the table (half-width capped at 2^17 - 2) nearly every
#: draw takes the tail path, a geometric whose own scale b / T needs a further table, so the cost per draw grows
#: with b (measured 2026-12-03, 2x10^5 draws: 0.2 s CPU at b = 10^3, 2.7 s at 10^7, 18 s at 10^8, over 250 s at
#: 10^9; a spec with k = 10^12 ran for hours). At 2^24 (1.7x10^7) a count is drowned anyway.
LAPLACE_SCALE_MAX = float(1 << 24)


def law_parameter(mechanism: str, scale: float) -> Fraction:
    """x = 1 / (2 sigma^2) (Gaussian) or 1 / b (Laplace), exact, from a validated float scale."""
    law = law_class(mechanism)
    return law.parameter(positive_finite("scale", scale))


def half_width(mechanism: str, x: Fraction) -> int:
    """Table half-width: P(|Y| > T) about 2^-_TAIL_BITS, within [1, _T_MAX]."""
    return int(min(max(law_class(mechanism).half_width(x), 1), _T_MAX))


def law_class(mechanism: str) -> type:
    """The law of a mechanism name: :class:`_GaussianLaw` or :class:`_LaplaceLaw`."""
    try:
        return _LAWS[mechanism]
    except (KeyError, TypeError):
        raise UsageError(f"`mechanism` must be one of {NOISE_FAMILY_NAMES}. Found {mechanism!r}.") from None


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
    #: the law's name, its scale's symbol, the largest scale the exact sampler supports, and the budget to raise
    name, symbol, scale_max, budget = "", "", math.inf, ""

    def __init__(self, x: Fraction):
        self.x = x

    @classmethod
    def parameter(cls, s: float) -> Fraction:
        """The law parameter x from the scale ``s`` (NoiseScaleTooLarge above :attr:`scale_max`)."""
        if s > cls.scale_max:
            raise NoiseScaleTooLarge(f"the exact discrete {cls.name} supports {cls.symbol} up to {cls.scale_max:.0f}. "
                                     f"Found {cls.symbol}={num(s)}: the privacy budget is too small for these "
                                     f"sensitivities; use a larger budget ({cls.budget}).")
        return cls._x(Fraction(s))

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

    name, symbol, scale_max, budget = "Gaussian", "sigma", GAUSSIAN_SIGMA_MAX, "rho or epsilon"

    @staticmethod
    def _x(sigma: Fraction) -> Fraction:
        """x = 1 / (2 sigma^2)."""
        return 1 / (2 * sigma ** 2)

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

    name, symbol, scale_max, budget = "Laplace", "b", LAPLACE_SCALE_MAX, "epsilon"

    @staticmethod
    def _x(b: Fraction) -> Fraction:
        """x = 1 / b."""
        return 1 / b

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


def cdf_intervals(law: _Law, T: int, P: int) -> list[tuple[int, int]]:
    """Intervals on F(b) 2^P, F(b) = P(Y <= b), for the boundaries b = -T-1, ..., T (in that order)."""
    U, Z = law.tail_sums(T, P)
    one = 1 << P
    # F(-j-1) = U(j) / Z and F(j) = 1 - U(j) / Z by symmetry
    g = [((u_lo << P) // Z[1], -((-(u_hi << P)) // Z[0])) for u_lo, u_hi in U]
    return [g[j] for j in range(T, -1, -1)] + [(one - hi, one - lo) for lo, hi in g]


def alias_table(weights: list[int], k: int) -> tuple[np.ndarray, np.ndarray]:
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
