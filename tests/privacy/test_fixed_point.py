"""privacy.fixed_point: grid roundings and the exact wide discrete Gaussian (chi-square against the pmf)."""

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from scipy import stats

from privaudit.core.errors import UsageError
from privaudit.privacy import fixed_point as fp
from privaudit.privacy import rejection
from privaudit.privacy import samplers
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
    monkeypatch.setattr(rejection, "_BAND_BITS", 4)
    calls = []
    real = rejection.accept_exact
    monkeypatch.setattr(rejection, "accept_exact", lambda *a: calls.append(1) or real(*a))
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
    k = sum(rejection.accept_exact(num, den, u0, rng) for _ in range(N))
    assert abs(k / N - f) < 5 * math.sqrt(f * (1 - f) / N)  # 5 sd: false failure < 1e-6
    assert rejection.accept_exact(num, den, u0 - 1, rng) and not rejection.accept_exact(num, den, u0 + 1, rng)


def test_wide_sampler_refuses_bad_parameters():
    with pytest.raises(UsageError, match="sigma2"):
        fp.discrete_gaussian_wide(Fraction(0), 3, rng=np.random.default_rng(0))
    with pytest.raises(UsageError, match="2\\^47"):
        fp.discrete_gaussian_wide(Fraction(2**100), 3, rng=np.random.default_rng(0))


def test_batch_streams_large_groups_and_keeps_small_ones_together(monkeypatch):
    # a group above _FEW elements goes through the one-group candidate stream, the small one through
    # the multi-group loop; both have the discrete Gaussian law (chi-square, false failure 1e-6 each)
    streamed = []
    real = rejection._stream_group
    monkeypatch.setattr(rejection, "_stream_group", lambda param, n, rng: streamed.append(n) or real(param, n, rng))
    small, large = fp.discrete_gaussian_batch([(Fraction(9, 4), (40, 50)), (Fraction(9, 4), (300, 100))],
                                              rng=np.random.default_rng(11))
    assert streamed == [30_000] and small.shape == (40, 50) and large.shape == (300, 100)
    support = np.arange(-10, 11)
    for y in (small, large):
        assert _chi2_pvalue(y.ravel(), support, _dgauss_pmf(2.25, support)) > 1e-6


# ----------------------------------------------------------------------------
# exact_gaussian: the table sampler or exact rejection, by draws per unit of the table's half-width


def _spy_paths(monkeypatch) -> list:
    """Record which sampler each exact_gaussian call runs: "table" (samplers.exact_noise, Gaussian) or
    "rejection" (discrete_gaussian_batch, whose proposal draws discrete Laplace noise from exact_noise)."""
    ran = []
    table, rejection = fp.exact_noise, fp.discrete_gaussian_batch
    monkeypatch.setattr(fp, "exact_noise", lambda mech, *a, **k: (mech == "gaussian" and ran.append("table"))
                        or table(mech, *a, **k))
    monkeypatch.setattr(fp, "discrete_gaussian_batch", lambda *a, **k: ran.append("rejection") or rejection(*a, **k))
    return ran


def test_exact_gaussian_path_switches_at_16_draws_per_table_unit(monkeypatch):
    T = samplers.table_half_width("gaussian", 5.77)
    assert T == samplers.get_sampler("gaussian", 5.77).T == 38
    assert fp.gaussian_path(5.77, 16 * T - 1) == "rejection" and fp.gaussian_path(5.77, 16 * T) == "table"
    # a DP-PBB backup on the ICU-Sepsis domain (S A = 17,900 draws, sigma ~ 8,200: T ~ 53,800): no table
    assert fp.gaussian_path(8202.438661763952, 17_900) == "rejection"
    ran = _spy_paths(monkeypatch)
    rng = np.random.default_rng(0)
    assert fp.exact_gaussian(5.77, 16 * T - 1, rng=rng).shape == (16 * T - 1,)
    assert fp.exact_gaussian(5.77, 16 * T, rng=rng).dtype == np.int64
    assert fp.exact_gaussian(5.77, 0, rng=rng).shape == (0,)
    assert ran == ["rejection", "table", "rejection"]
    for bad in (-1, 2.5, True):
        with pytest.raises(UsageError, match="`n` must be an integer"):
            fp.exact_gaussian(5.77, bad, rng=rng)
    with pytest.raises(UsageError, match="sigma up to"):  # the same limit on both paths
        fp.exact_gaussian(samplers.GAUSSIAN_SIGMA_MAX * 2, 10, rng=rng)


def test_exact_gaussian_small_and_large_calls_have_the_same_law(monkeypatch):
    """sigma = 5.77 (T = 38): 50 calls of 600 draws go through rejection, one call of 30,000 through the
    table; each matches the discrete Gaussian pmf (chi-square) and the two samples are homogeneous
    (chi-square contingency test). Fixed seeds; each test fails a correct sampler with probability 1e-6,
    so the whole test with probability < 3e-6."""
    ran = _spy_paths(monkeypatch)
    rng = np.random.default_rng(11)
    small = np.concatenate([fp.exact_gaussian(5.77, 600, rng=rng) for _ in range(50)])
    large = fp.exact_gaussian(5.77, 30_000, rng=rng)
    assert ran == ["rejection"] * 50 + ["table"]
    support = np.arange(-40, 41)
    pmf = _dgauss_pmf(5.77**2, support)
    assert _chi2_pvalue(small, support, pmf) > 1e-6
    assert _chi2_pvalue(large, support, pmf) > 1e-6
    bins = np.concatenate([[-np.inf], np.arange(-14.5, 15.5), [np.inf]])  # expected >= 5 per cell and sample
    table = np.stack([np.histogram(small, bins)[0], np.histogram(large, bins)[0]])
    assert stats.chi2_contingency(table).pvalue > 1e-6


def test_exact_gaussian_rejection_at_a_backup_scale(monkeypatch):
    """The path DP-PBB's backups take on ICU-Sepsis: sigma ~ 8,202 (a float scale, its exact rational
    used), 6 calls of 17,900 draws by rejection. Binned chi-square against the normal CDF at half-integer
    edges (equal to the discrete Gaussian's bins to ~exp(-2 pi^2 sigma^2)); false failure 1e-6."""
    s = 8202.438661763952
    ran = _spy_paths(monkeypatch)
    rng = np.random.default_rng(12)
    y = np.concatenate([fp.exact_gaussian(s, 17_900, rng=rng) for _ in range(6)])
    assert set(ran) == {"rejection"}
    edges = np.concatenate([[-np.inf], np.floor(np.linspace(-4 * s, 4 * s, 41)) + 0.5, [np.inf]])
    obs = np.histogram(y, edges)[0]
    assert stats.chisquare(obs, np.diff(stats.norm.cdf(edges / s)) * y.size).pvalue > 1e-6


# ----------------------------------------------------------------------------
# discrete_gaussian_scaled: coarse table draw J, uniform fine part, exact rejection


def _chi2_binned(y: np.ndarray, sigma2: float, width: int) -> float:
    """Chi-square p-value of integer draws against the exact N_Z(0, sigma2) pmf, in bins [w i, w i + w).

    Bins with expected count < 5 are lumped into one cell (with everything outside the table)."""
    s = math.sqrt(sigma2)
    lo = -(int(8 * s) // width + 1) * width
    ys = np.arange(lo, -lo)
    pmf = np.exp(-ys.astype(float) ** 2 / (2 * sigma2))
    pmf /= pmf.sum()                                   # the mass beyond 8 sigma is below 1e-14
    expected = pmf.reshape(-1, width).sum(axis=1) * y.size
    inside = (y >= lo) & (y < -lo)
    counts = np.bincount((y[inside] - lo) // width, minlength=expected.size).astype(float)
    keep = expected >= 5
    obs = np.append(counts[keep], counts[~keep].sum() + (~inside).sum())
    ex = np.append(expected[keep], y.size - expected[keep].sum())
    return stats.chisquare(obs, ex).pvalue


def test_scaled_sampler_matches_the_pmf_point_by_point():
    """sigma^2 = 2e5/3 (sigma ~ 258: M = 2, coarse sigma ~ 129): 400,000 draws against the exact pmf of
    every integer (bins of width 1, chi-square); false failure 1e-6."""
    y = fp.discrete_gaussian_scaled(Fraction(200_000, 3), 400_000, rng=np.random.default_rng(21))
    assert y.dtype == np.int64 and y.shape == (400_000,)
    assert _chi2_binned(y, 200_000 / 3, 1) > 1e-6


def test_scaled_sampler_fine_structure_inside_the_coarse_cells():
    """sigma = 13,000 (M = 64, coarse sigma ~ 203): 10^6 draws in bins of 16 (four per coarse cell, so a
    wrong fine part or sign branch shows) against the exact pmf, and the residues mod 64 uniform (the
    discrete Gaussian's residues are uniform to ~exp(-2 pi^2 (sigma/64)^2)); false failure 1e-6 each."""
    y = fp.discrete_gaussian_scaled(Fraction(13_000) ** 2, (1000, 1000), rng=np.random.default_rng(22)).ravel()
    assert _chi2_binned(y, 13_000.0**2, 16) > 1e-6
    assert stats.chisquare(np.bincount(y % 64, minlength=64)).pvalue > 1e-6
    assert abs(y.mean()) < 5 * 13_000 / 1000                       # 5 sd of the mean of 10^6 draws


def test_scaled_sampler_exact_paths_keep_the_law(monkeypatch):
    """Every acceptance decided by interval arithmetic (band 2^60) and every coarse value J > 0 assembled
    in Python integers (_COARSE_SAFE = 0): still the exact pmf (bins of 8, chi-square, false failure 1e-6)."""
    monkeypatch.setattr(fp, "_SCALED_BAND", float(2**60))
    monkeypatch.setattr(fp, "_COARSE_SAFE", 0)
    calls = []
    real = fp.accept_exact
    monkeypatch.setattr(fp, "accept_exact", lambda *a: calls.append(1) or real(*a))
    y = fp.discrete_gaussian_scaled(Fraction(200_000, 3), 12_000, rng=np.random.default_rng(23))
    assert len(calls) >= 12_000
    assert _chi2_binned(y, 200_000 / 3, 8) > 1e-6


def test_scaled_sampler_at_the_widest_scale():
    """sigma = 2^46 (the online explorers' lattices reach it): mean 0 and variance sigma^2 within 5 sd
    of 400,000 draws, the 10 low bits uniform and the normal shape in 40 bins (chi-square); false failure
    < 1e-5 in all."""
    N, s = 400_000, 2.0**46
    y = fp.discrete_gaussian_scaled(Fraction(2**92), N, rng=np.random.default_rng(24))
    z = y.astype(float)
    assert abs(z.mean()) < 5 * s / math.sqrt(N) and abs(z.var() / s**2 - 1) < 5 * math.sqrt(2 / N)
    assert stats.chisquare(np.bincount(y & 1023, minlength=1024)).pvalue > 1e-6
    edges = np.concatenate([[-np.inf], np.linspace(-4, 4, 41) * s, [np.inf]])
    assert stats.chisquare(np.histogram(z, edges)[0], np.diff(stats.norm.cdf(edges / s)) * N).pvalue > 1e-6


def test_scaled_sampler_small_sigma_and_bad_parameters(monkeypatch):
    """Below sigma = 256 there is no room for a fine part: discrete_gaussian_batch draws; bad variances
    are refused as by the wide sampler."""
    used = []
    real = fp.discrete_gaussian_batch
    monkeypatch.setattr(fp, "discrete_gaussian_batch", lambda *a, **k: used.append(1) or real(*a, **k))
    rng = np.random.default_rng(25)
    assert fp.discrete_gaussian_scaled(Fraction(255) ** 2, (3, 4), rng=rng).shape == (3, 4) and used == [1]
    assert fp.discrete_gaussian_scaled(Fraction(256) ** 2, 5, rng=rng).shape == (5,) and used == [1]
    assert fp.discrete_gaussian_scaled(Fraction(2**40), 0, rng=rng).shape == (0,)
    with pytest.raises(UsageError, match="sigma2"):
        fp.discrete_gaussian_scaled(Fraction(0), 3, rng=rng)
    with pytest.raises(UsageError, match="2\\^47"):
        fp.discrete_gaussian_scaled(Fraction(2**100), 3, rng=rng)


def test_gaussian_sampler_for_a_rational_variance():
    """The table sampler by exact variance: the same cached sampler as the float scale where the variance
    is a float's square; non-squares accepted; out-of-range variances refused."""
    assert samplers.gaussian_sampler_for_variance(Fraction(9, 4)) is samplers.get_sampler("gaussian", 1.5)
    assert samplers.gaussian_sampler_for_variance(Fraction(2)).x == Fraction(1, 4)
    for bad in (Fraction(0), Fraction(-1), Fraction(samplers.GAUSSIAN_SIGMA_MAX) ** 2 + 1):
        with pytest.raises(UsageError, match="sigma2"):
            samplers.gaussian_sampler_for_variance(bad)
