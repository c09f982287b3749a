"""Noise mechanisms: scales, rounded and exact discrete samplers, noise_bound, memory.

Statistical tests use fixed seeds; each states the probability that a correct
sampler would fail it.
"""

from __future__ import annotations

import math
import tracemalloc
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from privaudit.core.errors import UsageError
from privaudit.privacy.samplers import bernoulli_exp
from privaudit.privacy.mechanisms import add_noise, gaussian_sigma, laplace_scale, noise_bound


def test_scales():
    H, rho = 20, 0.5
    sigma = gaussian_sigma(2 * math.sqrt(H), rho)
    assert sigma == pytest.approx(math.sqrt(2 * H / rho), rel=1e-15)
    assert (2 * math.sqrt(H)) ** 2 / (2 * sigma ** 2) <= rho  # never weaker than asked
    b = laplace_scale(4 * H, 2.0)
    assert b == pytest.approx(40.0, rel=1e-15) and 4 * H / b <= 2.0
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(UsageError):
            gaussian_sigma(1.0, bad)
        with pytest.raises(UsageError):
            laplace_scale(bad, 1.0)


def test_rounded_is_count_plus_rounded_noise():
    values = np.arange(-5, 995).reshape(10, 100)
    out = add_noise(values, mechanism="gaussian", scale=2.5, rng=np.random.default_rng(7))
    z = np.random.default_rng(7).normal(0.0, 2.5, values.size).reshape(values.shape)
    assert out.dtype == np.int64 and out.shape == values.shape
    np.testing.assert_array_equal(out, values + np.rint(z).astype(np.int64))


@pytest.mark.parametrize("noise", ["rounded", "exact"])
@pytest.mark.parametrize("mechanism", ["gaussian", "laplace"])
def test_every_cell_independent_noise(mechanism, noise):
    rng = np.random.default_rng(11)
    out = add_noise(np.zeros((3, 40_000), dtype=np.int32), mechanism=mechanism, scale=3.0,
                    rng=rng, noise=noise)
    assert out.dtype == np.int64
    # P(noise = 0) is about 0.13 (Gaussian, sigma 3) or 0.16 (Laplace, b 3): most cells move.
    assert (out != 0).mean() > 0.8
    # No draw reused across cells or rows: correlations ~ N(0, 1/40000); |r| < 0.03
    # is > 6 standard deviations (false failure < 1e-8).
    r = np.corrcoef(out)
    assert np.abs(r[np.triu_indices(3, 1)]).max() < 0.03
    assert np.abs(np.corrcoef(out[0, :-1], out[0, 1:])[0, 1]) < 0.03


@pytest.mark.parametrize("mechanism,scale,var", [
    ("gaussian", 3.0, 9.0 + 1 / 12),      # Sheppard's correction for rounding, sigma >= 1
    ("laplace", 2.0, 8.0 + 1 / 12),
])
def test_rounded_variance(mechanism, scale, var):
    N = 400_000
    z = add_noise(np.zeros(N, dtype=np.int64), mechanism=mechanism, scale=scale,
                  rng=np.random.default_rng(3))
    # sd of the sample variance: sqrt((mu4 - var^2) / N); mu4 = 3 var^2 (Gaussian)
    # or 6 var^2 (Laplace). 5 sd: false failure < 1e-6.
    mu4 = (3 if mechanism == "gaussian" else 6) * var ** 2
    sd = math.sqrt((mu4 - var ** 2) / N)
    assert abs(z.var() - var) < 5 * sd
    assert abs(z.mean()) < 5 * math.sqrt(var / N)


def _chi2_pvalue(samples, support, pmf):
    """Chi-square goodness of fit; cells with expected count < 5 are lumped."""
    N = samples.size
    counts = np.array([(samples == y).sum() for y in support], dtype=float)
    exp = pmf * N
    rest_obs, rest_exp = N - counts.sum(), N - exp.sum()
    keep = exp >= 5
    obs = np.append(counts[keep], counts[~keep].sum() + rest_obs)
    ex = np.append(exp[keep], exp[~keep].sum() + rest_exp)
    if ex[-1] < 5:  # merge the lumped tail into the last kept cell
        obs[-2] += obs[-1]
        ex[-2] += ex[-1]
        obs, ex = obs[:-1], ex[:-1]
    return stats.chisquare(obs, ex).pvalue


def _dgauss_pmf(sigma2: float, support):
    ys = np.arange(-int(60 * math.sqrt(sigma2)) - 60, int(60 * math.sqrt(sigma2)) + 61)
    w = np.exp(-ys.astype(float) ** 2 / (2 * sigma2))
    Z = w.sum()
    return np.exp(-np.asarray(support, float) ** 2 / (2 * sigma2)) / Z


@pytest.mark.parametrize("sigma,seed", [(0.7, 1), (3.0, 2), (25.0, 3)])
def test_exact_discrete_gaussian_distribution(sigma, seed):
    N = 100_000
    y = add_noise(np.zeros(N, dtype=np.int64), mechanism="gaussian", scale=sigma,
                  rng=np.random.default_rng(seed), noise="exact")
    s2 = sigma ** 2  # the float scale is used as is
    support = np.arange(-int(6 * sigma) - 2, int(6 * sigma) + 3)
    # A correct sampler fails with probability 1e-6.
    assert _chi2_pvalue(y, support, _dgauss_pmf(s2, support)) > 1e-6


@pytest.mark.parametrize("b,seed", [(0.5, 4), (2.5, 5), (40 / 3, 6)])
def test_exact_discrete_laplace_distribution(b, seed):
    N = 100_000
    y = add_noise(np.zeros(N, dtype=np.int64), mechanism="laplace", scale=b,
                  rng=np.random.default_rng(seed), noise="exact")
    bb = b  # the float scale is used as is
    support = np.arange(-int(12 * b) - 2, int(12 * b) + 3)
    q = math.exp(-1 / bb)
    pmf = (1 - q) / (1 + q) * q ** np.abs(support)
    assert _chi2_pvalue(y, support, pmf) > 1e-6  # false failure 1e-6


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(5, 2)])
def test_bernoulli_exp_exact(gamma):
    # the scalar CKS Algorithm 1 used by the exact sampler's Gaussian tail path
    rng = np.random.default_rng(9)
    p = math.exp(-gamma)
    hits = np.mean([bernoulli_exp(gamma, rng) for _ in range(4000)])
    assert abs(hits - p) <= 5.5 * math.sqrt(p * (1 - p) / 4000) + 1e-12  # false failure 4e-8


def test_exact_sigma_limit():
    with pytest.raises(UsageError, match="larger budget"):
        add_noise(np.zeros(3, dtype=int), mechanism="gaussian", scale=1e5,
                  rng=np.random.default_rng(0), noise="exact")


def test_noise_bound_matches_paper():
    H, S, A, rho, delta = 20, 716, 25, 0.7, 0.05
    sigma = math.sqrt(2 * H / rho)
    n = 2 * H * S * S * A
    E_rho = 4 * math.sqrt(H * math.log(4 * H * S * S * A / delta) / rho)
    assert noise_bound("gaussian", sigma, n, delta, rounded=False) == pytest.approx(E_rho, rel=1e-12)
    assert noise_bound("gaussian", sigma, n, delta) == pytest.approx(E_rho + 1, rel=1e-12)
    eps = 1.3
    E_eps = 8 * H / eps * math.log(4 * H * S * S * A / delta)  # our E_eps: failure delta/2 (docs/privacy.md)
    assert noise_bound("laplace", 4 * H / eps, n, delta / 2, rounded=False) == pytest.approx(E_eps, rel=1e-12)
    for bad in (dict(delta=0), dict(delta=1), dict(n_counts=0)):
        args = dict(mechanism="gaussian", scale=1.0, n_counts=10, delta=0.1) | bad
        with pytest.raises(UsageError):
            noise_bound(**args)


@pytest.mark.parametrize("mechanism,noise", [("gaussian", "rounded"), ("laplace", "rounded"),
                                             ("gaussian", "exact"), ("laplace", "exact")])
def test_noise_bound_holds_empirically(mechanism, noise):
    n, delta = 300_000, 1e-4
    z = add_noise(np.zeros(n, dtype=np.int64), mechanism=mechanism, scale=2.0,
                  rng=np.random.default_rng(12), noise=noise)
    E = noise_bound(mechanism, 2.0, n, delta, noise=noise)
    assert np.abs(z).max() <= E / 2  # fails with probability <= delta = 1e-4
    # and the bound is not vacuous: the largest draw reaches at least half of it
    assert np.abs(z).max() >= E / 4


def test_discrete_tails_used_by_noise_bound():
    # Exact pmf sums: the discrete Gaussian tail is below 2 exp(-x^2 / (2 sigma^2))
    # (CKS Cor. 9) and the discrete Laplace tail below c exp(-x/b), c = 2/(1+exp(-1/b)).
    for sigma in (0.4, 2.0, 10.0):
        ys = np.arange(0, int(80 * sigma) + 80)
        w = np.exp(-ys.astype(float) ** 2 / (2 * sigma ** 2))
        Z = 2 * w.sum() - w[0]
        for x in np.linspace(0, 8 * sigma, 57):
            tail = 2 * w[ys > x].sum() / Z
            assert tail <= 2 * math.exp(-x ** 2 / (2 * sigma ** 2)) * (1 + 1e-12)
    for b in (0.5, 3.0):
        q = math.exp(-1 / b)
        c = 2 / (1 + q)
        for x in np.linspace(0, 20 * b, 81):
            m = math.floor(x) + 1
            tail = 2 * q ** m / (1 + q)
            assert tail <= c * math.exp(-x / b) * (1 + 1e-12)


def test_memory_stays_near_output_size():
    values = np.zeros((40, 25, 4000), dtype=np.int64)  # 4M cells, 32 MB
    tracemalloc.start()
    out = add_noise(values, mechanism="gaussian", scale=3.0, rng=np.random.default_rng(0))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert out.nbytes == 32_000_000
    assert peak < out.nbytes + 40_000_000  # output + a few 8 MB chunk temporaries


def test_bad_input():
    rng = np.random.default_rng(0)
    with pytest.raises(UsageError, match="integer"):
        add_noise(np.zeros(3), mechanism="gaussian", scale=1.0, rng=rng)
    with pytest.raises(UsageError):
        add_noise(np.zeros(3, dtype=int), mechanism="cauchy", scale=1.0, rng=rng)
    with pytest.raises(UsageError):
        add_noise(np.zeros(3, dtype=int), mechanism="gaussian", scale=1.0, rng=rng, noise="float")
    with pytest.raises(UsageError):
        add_noise(np.zeros(3, dtype=int), mechanism="laplace", scale=0.0, rng=rng)


def test_exact_gaussian_agrees_with_opendp():
    # Optional cross-check against OpenDP's discrete Gaussian (OS randomness, not
    # seedable): two-sample chi-square; a correct pair fails with probability 1e-6.
    dp = pytest.importorskip("opendp.prelude")
    dp.enable_features("contrib")
    n, sigma = 50_000, 3.0
    meas = (dp.vector_domain(dp.atom_domain(T=int), size=n), dp.l2_distance(T=int)) >> \
        dp.m.then_gaussian(scale=sigma)
    theirs = np.asarray(meas([0] * n))
    ours = add_noise(np.zeros(n, dtype=np.int64), mechanism="gaussian", scale=sigma,
                     rng=np.random.default_rng(13), noise="exact")
    edges = np.arange(-8, 9)  # cells (-inf, -8], ..., (8, inf): expected counts >= 50
    table = np.array([np.bincount(np.searchsorted(edges, v), minlength=edges.size + 1)
                      for v in (ours, theirs)])
    assert stats.chi2_contingency(table).pvalue > 1e-6


def test_add_noise_exact_inplace_only_when_asked_and_possible():
    """inplace=True noises the caller's int64 array itself; otherwise (or for another dtype) a new array,
    the input untouched. Same seed, same noise either way."""
    from privaudit.privacy.mechanisms import add_noise

    base = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
    v = base.copy()
    copy = add_noise(v, mechanism="gaussian", scale=3.0, rng=np.random.default_rng(5), noise="exact")
    assert copy is not v and np.array_equal(v, base)
    same = add_noise(v, mechanism="gaussian", scale=3.0, rng=np.random.default_rng(5), noise="exact", inplace=True)
    assert same is v and np.array_equal(same, copy) and not np.array_equal(v, base)
    v32 = base.astype(np.int32)
    out = add_noise(v32, mechanism="gaussian", scale=3.0, rng=np.random.default_rng(5), noise="exact", inplace=True)
    assert out is not v32 and out.dtype == np.int64 and np.array_equal(out, copy)
    assert np.array_equal(v32, base)
