"""Exact checks of the auditor's bounds against scipy and independently computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privaudit.audit import bounds as B
from privaudit.core.errors import UsageError


@pytest.mark.parametrize("n", [1, 7, 50, 1000])
def test_clopper_pearson_is_the_exact_binomial_bound(n):
    alpha = 0.0125
    for k in range(0, n + 1, max(1, n // 9)):
        lo, hi = float(B.cp_lower(k, n, alpha)), float(B.cp_upper(k, n, alpha))
        # P(X >= k | p = lo) = alpha (k > 0), P(X <= k | p = hi) = alpha (k < n); rounded outwards
        if k > 0:
            assert stats.binom.sf(k - 1, n, lo) <= alpha * (1 + 1e-6)
            assert stats.binom.sf(k - 1, n, lo) >= alpha * (1 - 1e-4)
        else:
            assert lo == 0.0
        if k < n:
            assert stats.binom.cdf(k, n, hi) <= alpha * (1 + 1e-6)
            assert stats.binom.cdf(k, n, hi) >= alpha * (1 - 1e-4)
        else:
            assert hi == 1.0


def test_perfect_separation_cap_matches_auditing_table():
    # the ceiling when the two outputs separate perfectly, alpha/2 = 0.025 per bound
    table = {10**3: 5.6, 10**4: 7.9, 10**5: 10.2, 10**6: 12.5, 10**7: 14.8}
    for n, cap in table.items():
        assert B.perfect_separation_cap(n, n, 0.025, 0.0)["epsilon"] == pytest.approx(cap, abs=0.05)


def test_eps_from_rates_formula_and_zero_floor():
    assert float(B.eps_from_rates(0.5, 0.05, 0.0)) == pytest.approx(math.log(10), rel=1e-9)
    assert float(B.eps_from_rates(0.5, 0.05, 0.1)) == pytest.approx(math.log(8), rel=1e-9)
    assert float(B.eps_from_rates(0.05, 0.5, 0.0)) == 0.0  # negative -> 0
    assert float(B.eps_from_rates(1e-6, 1e-3, 1e-5)) == 0.0  # TPR below delta -> 0
    assert float(B.eps_from_rates(0.5, 0.05, 0.0)) < math.log(10)  # rounded down


def test_gdp_mu_from_an_exact_gaussian_tradeoff_point():
    mu = 1.3
    for t in (-1.0, 0.0, 0.65, 2.0):
        fpr = stats.norm.sf(t)
        fnr = stats.norm.cdf(t - mu)
        assert float(B.gdp_mu_from_rates(fpr, fnr)) == pytest.approx(mu, abs=1e-9)
        assert float(B.gdp_mu_from_rates(fnr, fpr)) == pytest.approx(mu, abs=1e-9)  # symmetric
        assert float(B.tradeoff_gdp(fpr, mu)) == pytest.approx(fnr, abs=1e-12)
    assert float(B.gdp_mu_from_rates(0.6, 0.6)) == 0.0


def test_gaussian_profile_roundtrip_and_auditing_sigma_table():
    # Gaussian mechanism: eps_true 1, 2, 4, 8 at delta = 1e-5 <-> sigma / Delta = 3.73, 1.99, 1.08, 0.60
    for eps, ratio in ((1, 3.73), (2, 1.99), (4, 1.08), (8, 0.60)):
        assert B.gdp_eps(1 / ratio, 1e-5) == pytest.approx(eps, rel=0.02)
    for mu in (0.1, 0.5, 1.0, 3.0):
        e = B.gdp_eps(mu, 1e-6)
        assert B.gaussian_delta(e, mu) == pytest.approx(1e-6, rel=1e-6)
        assert B.gdp_mu_from_eps(e, 1e-6) == pytest.approx(mu, rel=1e-6)
        assert B.gdp_eps(mu, 1e-6) <= B.gdp_eps(mu, 1e-6, upper=True)
    assert B.gdp_eps(0.0, 1e-5) == 0.0
    with pytest.raises(UsageError):
        B.gdp_eps(1.0, 0.0)


def test_gaussian_profile_matches_brute_force_hockey_stick():
    # delta(eps) = E_P[(1 - e^{eps - L})_+] with privacy loss L ~ N(mu^2/2, mu^2)
    rng = np.random.default_rng(3)
    mu, eps = 1.0, 0.8
    L = rng.normal(mu * mu / 2, mu, 2_000_000)
    mc = np.maximum(0, 1 - np.exp(eps - L)).mean()
    # MC standard error < 3e-4; tolerance 2e-3 (failure probability ~0)
    assert B.gaussian_delta(eps, mu) == pytest.approx(mc, abs=2e-3)


def test_tradeoff_eps_delta_is_symmetric_and_bounded():
    a = np.linspace(0, 1, 101)
    f = B.tradeoff_eps_delta(a, 1.0, 1e-3)
    assert np.all((f >= 0) & (f <= 1))
    assert f[0] == pytest.approx(1 - 1e-3)
    # a point on the curve gives back eps through eps_from_rates (direction TPR = 1 - FNR)
    i = 5
    assert float(B.eps_from_rates(1 - f[i], a[i], 1e-3)) == pytest.approx(1.0, rel=1e-6)


def _exact_lattice_tv(t: float) -> float:
    """TV between the discrete Gaussian on tZ (sigma 1) and N(0, 1) rounded to tZ, summed directly."""
    k = np.arange(-int(40 / t) - 1, int(40 / t) + 2)
    x = k * t
    p = np.exp(-x ** 2 / 2)
    p /= p.sum()
    q = stats.norm.cdf(x + t / 2) - stats.norm.cdf(x - t / 2)
    return 0.5 * float(np.abs(p - q).sum())


@pytest.mark.parametrize("t", [2.0, 1.0, 0.5, 0.1, 0.03, 0.01])
def test_lattice_gaussian_tv_bounds_the_exact_distance_and_is_tight_on_fine_lattices(t):
    exact = _exact_lattice_tv(t)
    bound = float(B.lattice_gaussian_tv(t))
    assert exact <= bound <= 1.0
    if t <= 0.03:  # leading term t^2/48 E|Z^2 - 1|: the bound is within 5% of the distance
        assert bound <= 1.05 * exact
    # DP-VAPVI's lattices: sigma >= 1e4 steps, so the distance is below 1e-9 per coordinate
    assert float(B.lattice_gaussian_tv(1e-4)) < 1e-9
