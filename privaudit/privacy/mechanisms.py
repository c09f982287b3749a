"""Noise mechanisms for integer count vectors: Gaussian (rho-zCDP) and Laplace (eps-DP).

Two noise modes, both giving integer outputs (no floating-point side channel,
AUDITING.md B2/B3: a float count + float noise leaks the count through its
low-order bits):

``"rounded"`` (default)
    Draw continuous noise Z (numpy's ``Generator.normal`` / ``laplace``),
    round it to the nearest integer and add it to the integer count:
    ``n + round(Z)``, which equals ``round(n + Z)`` exactly because n is an
    integer. The output is a function of Z alone shifted by n, i.e.
    post-processing of the continuous mechanism, so it keeps its guarantee
    (rho = Delta_2^2 / (2 sigma^2), eps = Delta_1 / b) *as far as numpy's
    float sampler matches the ideal distribution*: the sampler itself is a
    float approximation (ziggurat), whose deviation from the ideal law in the
    far tails is not accounted for.
``"exact"``
    An exact discrete Gaussian N_Z(0, sigma^2) / discrete Laplace with
    P(y) proportional to exp(-|y| / b) (Canonne, Kamath & Steinke 2020,
    Algorithms 1-3), vectorized over numpy int64 with uniform integers from
    ``Generator.integers`` (unbiased) and rational arithmetic only: no float
    enters any sampling decision. The parameters are made rational first by
    rounding *up* (more noise, never less): sigma^2 to a multiple of 1/q
    (q a power of two, up to 2^20, chosen so the int64 arithmetic cannot
    overflow) and b to a multiple of 2^-20. Rare draws far in the tail whose
    arithmetic would not fit in int64 are finished by a scalar path on Python
    integers (still exact). By CKS Thm 14 (multivariate, independent
    coordinates) the discrete Gaussian gives rho = Delta_2^2 / (2 sigma^2) for
    integer-valued statistics, and the discrete Laplace gives eps =
    Delta_1 / b, the same guarantees as the continuous mechanisms.
    Supports sigma up to about 1.3e4 (beyond, use ``"rounded"``).

References
----------
Canonne, Kamath, Steinke, "The Discrete Gaussian for Differential Privacy",
NeurIPS 2020, arXiv:2004.00010 (Algorithms 1, 2, 3; Thm 14; Cor. 9 for the
sub-Gaussian tail used by ``noise_bound``).
Seed 000 eq. (1) (ALGORITHMS.md 1.2 step 3) and 1.4.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from privaudit.errors import UsageError

MECHANISMS = ("gaussian", "laplace")
NOISE_MODES = ("rounded", "exact")

#: cells drawn per chunk: bounds the temporary memory of add_noise to a few MB
_CHUNK = 1 << 20
#: Laplace scales are rounded up to a multiple of 2^-_LAPLACE_BITS in exact mode
_LAPLACE_BITS = 20
#: largest denominator (times the Bernoulli loop counter) allowed in int64 maths
_DEN_LIMIT = 1 << 56
_NUM_LIMIT = 1 << 62
_K_LIMIT = 64


# ----------------------------------------------------------------------------
# scales


def _check_positive(name: str, value) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"`{name}` must be a positive number. Found {value!r}.") from None
    if not (v > 0 and math.isfinite(v)):
        raise UsageError(f"`{name}` must be a positive finite number. Found {value!r}.")
    return v


def gaussian_sigma(l2: float, rho: float) -> float:
    """Noise standard deviation for rho-zCDP: sigma = l2 / sqrt(2 rho).

    Parameters
    ----------
    l2 : float
        L2 sensitivity of the released vector (> 0).
    rho : float
        zCDP budget (> 0).

    Returns
    -------
    float
        sigma, in the units of the counts. Rounded up by one ulp so that the
        resulting guarantee is never weaker than ``rho``.

    Raises
    ------
    UsageError
        ``l2`` or ``rho`` not positive and finite.

    References
    ----------
    Bun & Steinke 2016, Prop. 1.6; seed 000 Lemma 2.6 (ALGORITHMS.md, general facts).
    """
    l2 = _check_positive("l2", l2)
    rho = _check_positive("rho", rho)
    return float(np.nextafter(l2 / math.sqrt(2.0 * rho), math.inf))


def laplace_scale(l1: float, epsilon: float) -> float:
    """Laplace scale for eps-DP: b = l1 / epsilon (rounded up by one ulp).

    Raises
    ------
    UsageError
        ``l1`` or ``epsilon`` not positive and finite.

    References
    ----------
    Dwork, McSherry, Nissim, Smith 2006; seed 000 Lap(4H/eps) (ALGORITHMS.md 1.4).
    """
    l1 = _check_positive("l1", l1)
    epsilon = _check_positive("epsilon", epsilon)
    return float(np.nextafter(l1 / epsilon, math.inf))


# ----------------------------------------------------------------------------
# add_noise


def add_noise(values: np.ndarray, *, mechanism: str, scale: float,
              rng: np.random.Generator, noise: str = "rounded") -> np.ndarray:
    """Add one independent integer noise draw to every cell of an integer array.

    Parameters
    ----------
    values : np.ndarray of int, any shape
        Exact counts (e.g. one h-slice of n_h(s, a, s'), shape (S, A, S)).
        Every cell gets noise, zero or not.
    mechanism : {"gaussian", "laplace"}
        Gaussian (rho-zCDP) or Laplace (eps-DP).
    scale : float
        sigma (Gaussian standard deviation) or b (Laplace scale), > 0.
    rng : np.random.Generator
        Source of randomness (seeded from the OS for a real release).
    noise : {"rounded", "exact"}
        See the module docstring.

    Returns
    -------
    np.ndarray of int64, same shape as ``values``
        Noisy counts (may be negative; clipping at 0 is the learner's
        post-processing).

    Raises
    ------
    UsageError
        Unknown mechanism or noise mode, non-integer values, bad scale, or a
        sigma too large for the exact sampler.

    Notes
    -----
    Works in chunks of 2^20 cells, so temporary memory is a few MB on top of
    the int64 output.
    """
    if mechanism not in MECHANISMS:
        raise UsageError(f"`mechanism` must be one of {MECHANISMS}. Found {mechanism!r}.")
    if noise not in NOISE_MODES:
        raise UsageError(f"`noise` must be one of {NOISE_MODES}. Found {noise!r}.")
    scale = _check_positive("scale", scale)
    values = np.asarray(values)
    if not np.issubdtype(values.dtype, np.integer):
        raise UsageError(f"`values` must be an integer array (exact counts). "
                         f"Found dtype {values.dtype}.")
    if noise == "exact":
        sampler = _exact_sampler(mechanism, scale)
    elif mechanism == "gaussian":
        def sampler(m, rng):
            return np.rint(rng.normal(0.0, scale, m)).astype(np.int64)
    else:
        def sampler(m, rng):
            return np.rint(rng.laplace(0.0, scale, m)).astype(np.int64)
    flat = values.reshape(-1)
    out = np.empty(flat.shape, dtype=np.int64)
    for start in range(0, flat.size, _CHUNK):
        stop = min(start + _CHUNK, flat.size)
        out[start:stop] = flat[start:stop]
        out[start:stop] += sampler(stop - start, rng)
    return out.reshape(values.shape)


def exact_parameter(mechanism: str, scale: float) -> Fraction:
    """The rational parameter the exact sampler really uses (>= the requested one).

    Returns sigma^2 (Gaussian) or b (Laplace) as a Fraction, rounded up from
    ``scale**2`` / ``scale``; see the module docstring.
    """
    if mechanism == "gaussian":
        sigma2, _ = _gaussian_rational(_check_positive("scale", scale))
        return sigma2
    if mechanism == "laplace":
        t, s = _laplace_rational(_check_positive("scale", scale))
        return Fraction(t, s)
    raise UsageError(f"`mechanism` must be one of {MECHANISMS}. Found {mechanism!r}.")


def _laplace_rational(b: float) -> tuple[int, int]:
    s = 1 << _LAPLACE_BITS
    t = math.ceil(Fraction(b) * s)
    g = math.gcd(t, s)
    return t // g, s // g


def _gaussian_rational(sigma: float) -> tuple[Fraction, int]:
    """sigma^2 rounded up to p/q with den = 2 p q t^2 < 2^56; returns (p/q, q)."""
    sigma2_exact = Fraction(sigma) ** 2
    t = math.isqrt(math.floor(sigma2_exact)) + 1
    q = 1 << 20
    while q >= 1:
        p = math.ceil(sigma2_exact * q)
        if 2 * p * q * t * t < _DEN_LIMIT:
            return Fraction(p, q), q
        q >>= 1
    raise UsageError(f"the exact discrete Gaussian supports sigma up to about 1.3e4. "
                     f"Found sigma={sigma}; use noise='rounded'.")


def _exact_sampler(mechanism: str, scale: float):
    if mechanism == "laplace":
        t, s = _laplace_rational(scale)
        if t * _K_LIMIT >= _DEN_LIMIT:
            raise UsageError(f"the exact discrete Laplace supports b up to 6e10. "
                             f"Found b={scale}; use noise='rounded'.")
        return lambda m, rng: discrete_laplace(t, s, m, rng=rng)
    sigma2, q = _gaussian_rational(scale)
    return lambda m, rng: _discrete_gaussian_pq(sigma2.numerator * (q // sigma2.denominator),
                                                q, m, rng)


# ----------------------------------------------------------------------------
# exact samplers (CKS 2020), vectorized


def _bernoulli_exp_le1(num, den: int, n: int, rng) -> np.ndarray:
    """n draws of Bernoulli(exp(-num/den)), 0 <= num <= den, exactly (CKS Algorithm 1, gamma <= 1).

    ``num`` is an int64 array of shape (n,) or an int; ``den`` one int. Loop:
    K = 1, 2, ...: draw A ~ Bernoulli(gamma / K) as U < num with U uniform on
    {0, ..., den K - 1}; stop at the first A = 0 and return [K odd]. All draws
    still running in round K share K, so each round is one vectorized draw.
    """
    result = np.empty(n, dtype=bool)
    idx = np.arange(n)
    k = 1
    while idx.size:
        if k >= _K_LIMIT:  # probability < 1/64!, never in practice
            raise RuntimeError("exact Bernoulli loop ran past its bound; report this")
        bound = num[idx] if isinstance(num, np.ndarray) else num
        a = rng.integers(0, den * k, idx.size) < bound
        result[idx[~a]] = (k % 2) == 1
        idx = idx[a]
        k += 1
    return result


def _bernoulli_exp(num: np.ndarray, den: int, rng) -> np.ndarray:
    """Bernoulli(exp(-num/den)) for an int64 array num >= 0 and one int den >= 1, exactly
    (CKS Algorithm 1: floor(gamma) draws of Bernoulli(exp(-1)), then the fraction)."""
    whole, rem = np.divmod(num, den)
    result = np.ones(num.shape[0], dtype=bool)
    idx = np.nonzero(whole > 0)[0]
    j = 0
    while idx.size:  # whole[i] draws of Bernoulli(exp(-1)); stop at the first 0
        b = _bernoulli_exp_le1(1, 1, idx.size, rng)
        result[idx[~b]] = False
        j += 1
        idx = idx[b & (whole[idx] > j)]
    idx = np.nonzero(result)[0]
    result[idx] = _bernoulli_exp_le1(rem[idx], den, idx.size, rng)
    return result


def _geometric_exp1(m: int, rng) -> np.ndarray:
    """Number of successes of Bernoulli(exp(-1)) before the first failure, m draws."""
    v = np.zeros(m, dtype=np.int64)
    idx = np.arange(m)
    while idx.size:
        b = _bernoulli_exp_le1(1, 1, idx.size, rng)
        v[idx[b]] += 1
        idx = idx[b]
    return v


def discrete_laplace(t: int, s: int, m: int, *, rng: np.random.Generator) -> np.ndarray:
    """m exact draws of the discrete Laplace with P(y) proportional to exp(-|y| s / t).

    Parameters
    ----------
    t, s : int
        Scale b = t / s as a fraction of positive integers (t * 64 < 2^56).
    m : int
        Number of draws.
    rng : np.random.Generator

    Returns
    -------
    np.ndarray of int64, shape (m,)

    References
    ----------
    Canonne, Kamath, Steinke 2020, Algorithm 2.
    """
    out = np.empty(m, dtype=np.int64)
    todo = np.arange(m)
    while todo.size:
        k = todo.size
        u = rng.integers(0, t, k)
        d = _bernoulli_exp(u, t, rng)
        v = _geometric_exp1(k, rng)
        y = (u + t * v) // s
        neg = rng.integers(0, 2, k).astype(bool)
        ok = d & ~(neg & (y == 0))
        out[todo[ok]] = np.where(neg, -y, y)[ok]
        todo = todo[~ok]
    return out


def _discrete_gaussian_pq(p: int, q: int, m: int, rng) -> np.ndarray:
    """m exact draws of N_Z(0, p/q) (CKS Algorithm 3), int64 with a Python-int tail path."""
    t = math.isqrt(p // q) + 1  # floor(sigma) + 1
    den_val = 2 * p * q * t * t
    y_max = (math.isqrt(_NUM_LIMIT) + p) // (t * q)  # (|y| t q - p)^2 < 2^62 below this
    out = np.empty(m, dtype=np.int64)
    todo = np.arange(m)
    while todo.size:
        k = todo.size
        y = discrete_laplace(t, 1, k, rng=rng)
        ay = np.abs(y)
        small = ay <= y_max
        accept = np.zeros(k, dtype=bool)
        i_small = np.nonzero(small)[0]
        num = (ay[i_small] * (t * q) - p) ** 2
        accept[i_small] = _bernoulli_exp(num, den_val, rng)
        for i in np.nonzero(~small)[0]:  # astronomically rare: exact Python ints
            accept[i] = _bernoulli_exp_scalar(Fraction((int(ay[i]) * t * q - p) ** 2, den_val), rng)
        out[todo[accept]] = y[accept]
        todo = todo[~accept]
    return out


def discrete_gaussian(sigma2: Fraction, m: int, *, rng: np.random.Generator) -> np.ndarray:
    """m exact draws of the discrete Gaussian N_Z(0, sigma2), sigma2 a positive Fraction.

    sigma2 must satisfy the int64 limits (2 p q t^2 < 2^56 with sigma2 = p/q);
    ``add_noise(noise="exact")`` rounds sigma^2 up so that it does.

    References
    ----------
    Canonne, Kamath, Steinke 2020, Algorithm 3.
    """
    sigma2 = Fraction(sigma2)
    p, q = sigma2.numerator, sigma2.denominator
    t = math.isqrt(p // q) + 1
    if sigma2 <= 0 or 2 * p * q * t * t >= _DEN_LIMIT:
        raise UsageError(f"`sigma2` must be a positive Fraction with 2 p q t^2 < 2^56. Found {sigma2}.")
    return _discrete_gaussian_pq(p, q, m, rng)


# scalar exact reference (Python integers), used for rare tail draws and in tests


def _uniform_below(n: int, rng) -> int:
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


def _bernoulli_exp_le1_scalar(g: Fraction, rng) -> bool:
    """Bernoulli(exp(-g)) for a Fraction 0 <= g <= 1 (CKS Algorithm 1, gamma <= 1)."""
    k = 1
    while _uniform_below(g.denominator * k, rng) < g.numerator:
        k += 1
    return k % 2 == 1


def _bernoulli_exp_scalar(gamma: Fraction, rng) -> bool:
    """Bernoulli(exp(-gamma)) for a Fraction gamma >= 0, exactly (CKS Algorithm 1)."""
    whole = math.floor(gamma)
    for _ in range(whole):
        if not _bernoulli_exp_le1_scalar(Fraction(1), rng):
            return False
    return _bernoulli_exp_le1_scalar(gamma - whole, rng)


# ----------------------------------------------------------------------------
# high-probability bound on all noise draws


def noise_bound(mechanism: str, scale: float, n_counts: int, delta: float,
                rounded: bool = True, *, noise: str | None = None) -> float:
    """E such that all ``n_counts`` noise draws satisfy |noise| <= E/2 at once w.p. >= 1 - delta.

    Parameters
    ----------
    mechanism : {"gaussian", "laplace"}
    scale : float
        sigma or b of the release (from its manifest).
    n_counts : int
        Number of noisy cells the bound must cover (e.g. 2 H S^2 A for
        visits + transitions, as in seed 000's E_rho).
    delta : float
        Failure probability, in (0, 1).
    rounded : bool
        True for ``noise="rounded"`` releases: |round(Z)| <= |Z| + 1/2, so E
        grows by 1. False for continuous (unrounded) noise.
    noise : {"rounded", "exact", "continuous"}, optional
        Overrides ``rounded``. ``"exact"`` (discrete samplers): the discrete
        Gaussian is sub-Gaussian with parameter sigma (CKS Cor. 9), so the
        continuous bound holds without the +1; the discrete Laplace has
        P(|Y| > x) <= c exp(-x/b) with c = 2 / (1 + exp(-1/b)), which is used.

    Returns
    -------
    float
        Gaussian: E = 2 sigma sqrt(2 log(2 n / delta)) (from
        P(|Z| > x) <= 2 exp(-x^2 / (2 sigma^2)) and a union bound); with
        n = 2HS^2A and sigma^2 = 2H/rho this is seed 000's
        E_rho = 4 sqrt(H log(4HS^2A/delta) / rho).
        Laplace: E = 2 b log(n / delta) (from P(|Lap(b)| > x) = exp(-x/b));
        with b = 4H/eps and n = 2HS^2A, E = (8H/eps) log(2HS^2A/delta), i.e.
        ALGORITHMS.md 1.4's E_eps = (8H/eps) log(4HS^2A/delta) is this bound
        at failure probability delta/2.

    Raises
    ------
    UsageError
        Bad arguments.

    References
    ----------
    Seed 000, E_rho (ALGORITHMS.md 1.2 step 1); ALGORITHMS.md 1.4 [D].
    """
    if mechanism not in MECHANISMS:
        raise UsageError(f"`mechanism` must be one of {MECHANISMS}. Found {mechanism!r}.")
    scale = _check_positive("scale", scale)
    if isinstance(n_counts, bool) or int(n_counts) != n_counts or n_counts < 1:
        raise UsageError(f"`n_counts` must be an integer >= 1. Found {n_counts!r}.")
    if not (0 < delta < 1):
        raise UsageError(f"`delta` must be in (0, 1). Found {delta!r}.")
    mode = noise if noise is not None else ("rounded" if rounded else "continuous")
    if mode not in ("rounded", "exact", "continuous"):
        raise UsageError(f"`noise` must be 'rounded', 'exact' or 'continuous'. Found {noise!r}.")
    n = float(n_counts)
    if mechanism == "gaussian":
        half = scale * math.sqrt(2.0 * math.log(2.0 * n / delta))
    elif mode == "exact":
        c = 2.0 / (1.0 + math.exp(-1.0 / scale))
        half = scale * math.log(c * n / delta)
    else:
        half = scale * math.log(n / delta)
    if mode == "rounded":
        half += 0.5
    return float(np.nextafter(2.0 * half, math.inf))
