"""privacy.fixed_point: grid roundings and the exact wide discrete Gaussian (chi-square against the pmf)."""

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from scipy import stats

from privaudit.errors import UsageError
from privaudit.privacy import fixed_point as fp
from tests.privacy.test_mechanisms import _chi2_pvalue, _dgauss_pmf


def test_grid_roundings_keep_bounds():
    x = np.array([0.0, 1.0, 1 / 3, -0.7, 0.99999, 2.0**-13, -(2.0**-13), 3.0 - 1e-12])
    q = fp.to_grid_toward_zero(x, 12)
    assert q.dtype == np.int64 and np.all(np.abs(q) * 2.0**-12 <= np.abs(x))
    assert np.all(np.abs(x - q * 2.0**-12) < 2.0**-12)
    n = fp.to_grid_nearest(x, 8)
    assert np.all(np.abs(x - n * 2.0**-8) <= 2.0**-9)
    # [0, B] with B an integer stays [0, B] (the sensitivities' bounds)
    assert fp.to_grid_nearest(np.array([3.0 - 1e-12]), 8)[0] * 2.0**-8 == 3.0


@pytest.mark.parametrize("sigma2,seed", [(Fraction(53, 4), 1), (Fraction(10**6, 3), 2)])
def test_wide_sampler_distribution(sigma2, seed):
    N = 100_000
    y = fp.discrete_gaussian_wide(sigma2, N, rng=np.random.default_rng(seed))
    s = math.sqrt(sigma2)
    if s < 100:
        support = np.arange(-int(6 * s) - 2, int(6 * s) + 3)
        assert _chi2_pvalue(y, support, _dgauss_pmf(float(sigma2), support)) > 1e-6  # false failure 1e-6
    else:  # binned: the discrete Gaussian's bins equal the normal's to ~exp(-2 pi^2 sigma^2)
        edges = np.linspace(-4 * s, 4 * s, 41)
        obs = np.histogram(y, np.concatenate([[-np.inf], np.floor(edges) + 0.5, [np.inf]]))[0]
        cdf = stats.norm.cdf(np.concatenate([[-np.inf], np.floor(edges) + 0.5, [np.inf]]) / s)
        assert stats.chisquare(obs, np.diff(cdf) * N).pvalue > 1e-6


def test_wide_sampler_huge_sigma_moments():
    # sigma = 2^40: the float fast path with the exact band; mean 0, variance sigma^2.
    # 5 sd of the sample mean / variance of 200 000 draws: false failure < 1e-6.
    N, s = 200_000, 2.0**40
    y = fp.discrete_gaussian_wide(Fraction(2**80), N, rng=np.random.default_rng(4)).astype(float)
    assert abs(y.mean()) < 5 * s / math.sqrt(N)
    assert abs(y.var() / s**2 - 1) < 5 * math.sqrt(2 / N)


def test_wide_sampler_exact_path_keeps_the_distribution(monkeypatch):
    # widen the band to 2^-4 so that ~10% of decisions go through the interval-arithmetic path
    monkeypatch.setattr(fp, "_BAND_BITS", 4)
    calls = []
    real = fp._accept_exact
    monkeypatch.setattr(fp, "_accept_exact", lambda *a: calls.append(1) or real(*a))
    y = fp.discrete_gaussian_wide(Fraction(9, 4), 20_000, rng=np.random.default_rng(8))
    support = np.arange(-10, 11)
    assert len(calls) > 1000
    assert _chi2_pvalue(y, support, _dgauss_pmf(2.25, support)) > 1e-6  # false failure 1e-6


def test_accept_exact_probability():
    # exp(-x) 2^53 = u0 + f: accepted with probability f (the part of the cell below exp(-x))
    num, den = 1, 3
    with mpmath.workprec(200):
        p = mpmath.exp(mpmath.mpf(-1) / 3) * 2**53
        u0 = int(mpmath.floor(p))
        f = float(p - u0)
    assert 0.05 < f < 0.95
    rng = np.random.default_rng(5)
    N = 4000
    k = sum(fp._accept_exact(num, den, u0, rng) for _ in range(N))
    assert abs(k / N - f) < 5 * math.sqrt(f * (1 - f) / N)  # 5 sd: false failure < 1e-6
    assert fp._accept_exact(num, den, u0 - 1, rng) and not fp._accept_exact(num, den, u0 + 1, rng)


def test_wide_sampler_refuses_bad_parameters():
    with pytest.raises(UsageError, match="sigma2"):
        fp.discrete_gaussian_wide(Fraction(0), 3, rng=np.random.default_rng(0))
    with pytest.raises(UsageError, match="2\\^47"):
        fp.discrete_gaussian_wide(Fraction(2**100), 3, rng=np.random.default_rng(0))


def test_batch_streams_large_groups_and_keeps_small_ones_together(monkeypatch):
    # a group above _FEW elements goes through the one-group candidate stream, the small one through
    # the multi-group loop; both have the discrete Gaussian law (chi-square, false failure 1e-6 each)
    streamed = []
    real = fp._stream_group
    monkeypatch.setattr(fp, "_stream_group", lambda param, n, rng: streamed.append(n) or real(param, n, rng))
    small, large = fp.discrete_gaussian_batch([(Fraction(9, 4), (40, 50)), (Fraction(9, 4), (300, 100))],
                                              rng=np.random.default_rng(11))
    assert streamed == [30_000] and small.shape == (40, 50) and large.shape == (300, 100)
    support = np.arange(-10, 11)
    for y in (small, large):
        assert _chi2_pvalue(y.ravel(), support, _dgauss_pmf(2.25, support)) > 1e-6
