"""Private tree counters: structure, noise scale, error bound, privacy event."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from privaudit.core.errors import UsageError
from privaudit.privacy.accounting import event_epsilon, event_rho
from privaudit.privacy.fixed_point import discrete_gaussian_scaled
from privaudit.online.counters import (TreeCounter, gaussian_node_sigma, laplace_node_scale, tree_counter_event,
                                       tree_error_bound, tree_levels)


class CountingRng:
    """Wraps a Generator and counts the noise values it hands out."""

    def __init__(self, seed):
        self.g = np.random.default_rng(seed)
        self.values = 0

    def laplace(self, loc, scale, size):
        self.values += int(np.prod(size))
        return self.g.laplace(loc, scale, size)

    def normal(self, loc, scale, size):
        self.values += int(np.prod(size))
        return self.g.normal(loc, scale, size)


def test_levels():
    assert [tree_levels(T) for T in (1, 2, 3, 4, 7, 8, 1000, 1024)] == [1, 2, 2, 3, 3, 4, 10, 11]


def test_release_is_exact_sum_plus_open_node_noise_slow_reference():
    """The running-sum implementation equals a slow tree of noisy p-sums with the same draws."""
    T, shape = 37, (2, 3)
    rng = np.random.default_rng(5)
    c = TreeCounter(shape, T, "laplace", 2.0, rng=np.random.default_rng(11))
    ref_rng = np.random.default_rng(11)
    node_noise = {}  # level -> noise of the node closing at its last time
    total = np.zeros(shape)
    for t in range(1, T + 1):
        z = rng.integers(0, 2, size=shape).astype(float)
        total += z
        i = (t & -t).bit_length() - 1
        node_noise[i] = ref_rng.laplace(0.0, 2.0, size=shape)
        expect = total + sum(node_noise[j] for j in range(c.n_levels) if (t >> j) & 1)
        np.testing.assert_allclose(c.update(z), expect, rtol=0, atol=1e-9)


def test_noise_values_per_release_at_most_L_and_one_fresh_draw_per_update():
    K = 1000
    L = math.floor(math.log2(K)) + 1
    rng = CountingRng(0)
    c = TreeCounter((4,), K, "laplace", 1.0, rng=rng)
    terms = []
    for t in range(K):
        c.update(np.zeros(4))
        terms.append(c.current_noise_terms())
        assert len(c.open_levels()) == terms[-1]
    assert max(terms) <= L and max(terms) == L - 1 + (K >= 2 ** L - 1)
    assert rng.values == 4 * K  # one fresh noise value per counter per release
    assert c.draws == K
    with pytest.raises(UsageError, match="T=1000"):
        c.update(np.zeros(4))


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
def test_empirical_noise_scale(mechanism):
    """Release error at t = 7 (3 open nodes) has variance 3 * var(node).

    200000 counters in one array; the sample variance's relative error has sd
    about sqrt((kurtosis - 1)/n) <= 0.006 (Laplace sum kurtosis <= 6), so a
    5% tolerance fails with probability far below 1e-9.
    """
    n, scale = 200_000, 3.0
    c = TreeCounter((n,), 8, mechanism, scale, rng=np.random.default_rng(2))
    for _ in range(7):
        err = c.update(np.ones(n)) - c._exact
    var_node = 2 * scale ** 2 if mechanism == "laplace" else scale ** 2
    assert np.var(err) == pytest.approx(3 * var_node, rel=0.05)
    assert abs(err.mean()) < 6 * math.sqrt(3 * var_node / n)


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
def test_error_bound_holds_at_its_probability(mechanism):
    """Per-release bound (n_counters = n_releases = 1) at beta = 0.2 over 20000 streams.

    The failure indicator is Bernoulli(p <= 0.2); the test rejects when the
    empirical rate exceeds 0.2 + 4.5 sd (false failure < 1e-5).
    """
    T, n, beta, scale = 15, 20_000, 0.2, 1.5
    c = TreeCounter((n,), T, mechanism, scale, rng=np.random.default_rng(3))
    E = tree_error_bound(mechanism, scale, c.n_levels, beta)
    worst = 0.0
    for t in range(T):
        err = np.abs(c.update(np.zeros(n)) - c._exact)
        worst = max(worst, (err > E).mean())
    assert worst <= beta + 4.5 * math.sqrt(beta * (1 - beta) / n)
    # the uniform bound (all counters, all releases) fails rarely: empirical check at beta = 0.05
    c = TreeCounter((2000,), T, mechanism, scale, rng=np.random.default_rng(4))
    Eu = tree_error_bound(mechanism, scale, c.n_levels, 0.05, n_counters=2000, n_releases=T)
    assert all(np.abs(c.update(np.zeros(2000)) - c._exact).max() <= Eu for _ in range(T))


def test_gaussian_bound_is_tight_quantile():
    """For one release with L open nodes the Gaussian bound is the exact two-sided quantile."""
    E = tree_error_bound("gaussian", 2.0, 4, 0.01)
    assert E == pytest.approx(2.0 * 2 * stats.norm.isf(0.005), rel=1e-12)


def test_calibration_and_event():
    L, H, eps = tree_levels(10_000), 10, 1.0
    b = laplace_node_scale(2 * H, L, eps / 3)
    assert b == pytest.approx(6 * H * L / eps)
    ev = tree_counter_event("pucb:visits", "laplace", 2 * H, L, b)
    assert event_epsilon(ev) == pytest.approx(eps / 3) and event_epsilon(ev) >= eps / 3
    assert ev.neighbouring == "substitution"
    sigma = gaussian_node_sigma(math.sqrt(2 * H), L, 0.1)
    assert sigma ** 2 == pytest.approx(L * 2 * H / 0.2)
    assert event_rho(tree_counter_event("f", "gaussian", math.sqrt(2 * H), L, sigma)) == pytest.approx(0.1)


def test_goe_noise_is_symmetric_and_exact_counter_is_exact():
    c = TreeCounter((3, 4, 4), 4, "goe", 1.0, rng=np.random.default_rng(0))
    r = c.update(np.zeros((3, 4, 4)))
    np.testing.assert_array_equal(r, np.swapaxes(r, -1, -2))
    e = TreeCounter((5,), 3, "none", rng=np.random.default_rng(0))
    np.testing.assert_array_equal(e.update(np.arange(5.0)), np.arange(5.0))
    with pytest.raises(UsageError):
        TreeCounter((5,), 3, "laplace", 0.0, rng=np.random.default_rng(0))


def _discrete_variance(mechanism: str, scale: float) -> float:
    """Variance of one node draw: discrete Laplace 2q/(1-q)^2, q = e^(-1/b); discrete Gaussian by its sum."""
    if mechanism == "laplace":
        q = math.exp(-1.0 / scale)
        return 2.0 * q / (1.0 - q) ** 2
    y = np.arange(-int(40 * scale) - 2, int(40 * scale) + 3, dtype=np.float64)
    w = np.exp(-y ** 2 / (2.0 * scale ** 2))
    return float((w * y ** 2).sum() / w.sum())


@pytest.mark.parametrize("mechanism,scale", [("laplace", 3.0), ("gaussian", 3.0), ("laplace", 700.0),
                                             ("gaussian", 5.0e4)])
def test_exact_counter_noise_is_integer_with_the_stated_scale(mechanism, scale):
    """noise='exact': integer releases; the error at t = 7 (3 open nodes) has variance 3 var(node).

    sigma = 5e4 > 2^15 takes the wide discrete Gaussian (privacy.fixed_point). 200000 counters: the
    sample variance's relative error has sd <= sqrt((kurtosis - 1)/n) <= 0.006 (a sum of 3 discrete
    Laplace has kurtosis <= 6), so the 4% tolerance is > 6 sd: false failure < 1e-9; the mean's
    tolerance is 6 sd (false failure 2e-9).
    """
    n = 200_000
    c = TreeCounter((n,), 8, mechanism, scale, rng=np.random.default_rng(7), noise="exact")
    for _ in range(7):
        out = c.update(np.ones(n, dtype=np.int64))
    assert out.dtype == np.int64
    err = (out - c._exact).astype(np.float64)
    v = 3 * _discrete_variance(mechanism, scale)
    assert np.var(err) == pytest.approx(v, rel=0.04)
    assert abs(err.mean()) < 6 * math.sqrt(v / n)
    # the node draws are the exact discrete laws: integers, and (Laplace) var differs from 2 b^2
    if mechanism == "laplace" and scale == 3.0:
        assert abs(v / 3 - 2 * scale ** 2) > 0.1  # 17.84 vs 18: the test can tell the two laws apart


def test_exact_counter_matches_a_slow_tree_of_exact_draws():
    """noise='exact' runs the same tree: release = exact sum + the open nodes' exact_noise draws."""
    from privaudit.privacy.samplers import exact_noise
    T, shape = 21, (3, 2)
    c = TreeCounter(shape, T, "laplace", 4.0, rng=np.random.default_rng(11), noise="exact")
    ref = np.random.default_rng(11)
    node, total = {}, np.zeros(shape, dtype=np.int64)
    data = np.random.default_rng(1)
    for t in range(1, T + 1):
        z = data.integers(0, 3, size=shape)
        total += z
        i = (t & -t).bit_length() - 1
        node[i] = exact_noise("laplace", 4.0, 6, rng=ref).reshape(shape)
        expect = total + sum(node[j] for j in range(c.n_levels) if (t >> j) & 1)
        np.testing.assert_array_equal(c.update(z), expect)


def test_exact_counter_refuses_fractions_wide_and_tiny_scales():
    c = TreeCounter((2,), 4, "gaussian", 2.0, rng=np.random.default_rng(0), noise="exact")
    with pytest.raises(UsageError, match="integer increments"):
        c.update(np.array([0.5, 1.0]))
    np.testing.assert_array_equal(c.update(np.array([1.0, 2.0])) % 1, 0)  # integral floats accepted
    with pytest.raises(UsageError, match="2\\^47"):
        TreeCounter((2, 2), 4, "goe", 2.0 ** 47, rng=np.random.default_rng(0), noise="exact")
    with pytest.raises(UsageError, match="exact gaussian sampler"):
        TreeCounter((2,), 4, "gaussian", 1e-3, rng=np.random.default_rng(0), noise="exact")
    with pytest.raises(UsageError, match="noise"):
        TreeCounter((2,), 4, "laplace", 1.0, rng=np.random.default_rng(0), noise="float")
    ev = tree_counter_event("pucb:visits", "laplace", 4.0, 3, 12.0, noise="exact")
    assert ev.noise == "exact" and event_epsilon(ev) == pytest.approx(1.0)


def test_exact_goe_counter_has_the_stated_variances():
    """noise='exact', goe: symmetric integer releases; at t = 7 (3 open nodes) the error has
    variance 3 s^2 off the diagonal and 6 s^2 on it (s = 10^6 lattice units: the discrete
    Gaussian's variance equals s^2 to 1e-12). 60000 draws of each kind: the sample variance's
    relative sd is sqrt(2/60000) = 0.006, so 4% is > 6 sd (false failure < 1e-8).
    """
    n, s = 20_000, 1.0e6
    c = TreeCounter((n, 3, 3), 8, "goe", s, rng=np.random.default_rng(9), noise="exact")
    for _ in range(7):
        out = c.update(np.ones((n, 3, 3), dtype=np.int64))
    assert out.dtype == np.int64 and c.draws == 7
    np.testing.assert_array_equal(out, np.swapaxes(out, -1, -2))
    err = (out - c._exact).astype(np.float64)
    iu = np.triu_indices(3, 1)
    assert np.var(err[:, iu[0], iu[1]]) == pytest.approx(3 * s ** 2, rel=0.04)
    assert np.var(err[:, np.arange(3), np.arange(3)]) == pytest.approx(6 * s ** 2, rel=0.04)


def test_exact_goe_counter_blocks_are_a_slow_tree_of_fresh_draws(monkeypatch):
    """The wide path pre-draws WIDE_BLOCK nodes per call: the releases still equal a slow tree whose
    node t is the t-th fresh draw (blocks of 3 here, never beyond T), one node per update."""
    from fractions import Fraction
    from privaudit.online import counters
    monkeypatch.setattr(counters, "WIDE_BLOCK", 3)
    T, s = 8, 1.0e5
    c = TreeCounter((2, 3, 3), T, "goe", s, rng=np.random.default_rng(4), noise="exact")
    ref = np.random.default_rng(4)
    draws = []
    while len(draws) < T:
        n = min(3, T - len(draws))
        draws += list(counters.symmetric_discrete_gaussian(Fraction(s) ** 2, (n, 2), 3, rng=ref))
    node, total = {}, np.zeros((2, 3, 3), dtype=np.int64)
    for t in range(1, T + 1):
        z = np.full((2, 3, 3), t, dtype=np.int64)
        total += z
        node[(t & -t).bit_length() - 1] = draws[t - 1]
        expect = total + sum(node[j] for j in range(c.n_levels) if (t >> j) & 1)
        np.testing.assert_array_equal(c.update(z), expect)
    assert len(set(d.tobytes() for d in draws)) == T


def test_sampler_path_names_the_exact_sampler_of_the_node_noises():
    """sampler_path: the table sampler for exact Gaussian/Laplace nodes up to GAUSSIAN_SIGMA_MAX units,
    the scaled sampler for wider Gaussian nodes and every goe counter, None without exact noise; a wide
    counter's node noises are the scaled sampler's (same draws from the same stream)."""
    rng = np.random.default_rng(0)
    assert TreeCounter((3,), 8, "gaussian", 5.0, noise="exact", rng=rng).sampler_path == "table"
    assert TreeCounter((3,), 8, "laplace", 5.0, noise="exact", rng=rng).sampler_path == "table"
    wide = TreeCounter((3,), 8, "gaussian", 2.0 ** 20, noise="exact", rng=rng)
    assert wide.sampler_path == "scaled"
    assert TreeCounter((2, 2), 8, "goe", 5.0, noise="exact", rng=rng).sampler_path == "scaled"
    assert TreeCounter((3,), 8, "none", noise="exact", rng=rng).sampler_path is None
    assert TreeCounter((3,), 8, "gaussian", 5.0, noise="continuous", rng=rng).sampler_path is None
    got = wide.node_noises(4, np.random.default_rng(7))
    want = discrete_gaussian_scaled(Fraction(2.0 ** 20) ** 2, (4, 3), rng=np.random.default_rng(7))
    np.testing.assert_array_equal(got, want)
