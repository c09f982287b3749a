"""Exact table samplers (privaudit.privacy.samplers) against an independent mpmath oracle.

Exact-value tests compare the sampler's integer table with probabilities
computed by mpmath at 320 bits (a different computation: direct exp per y and a
plain sum, no interval recurrences). Statistical tests use fixed seeds and say
how often a correct sampler fails them.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from scipy import stats

from privaudit.core.errors import UsageError
from privaudit.privacy import exact_sampler, sampler_laws, samplers
from privaudit.privacy.samplers import ExactSampler, exact_noise, get_sampler, sampler_total_variation

TWO64 = 2 ** 64


def _oracle_cdf(mechanism: str, scale: float, ys):
    """P(Y <= y) for each y, mpmath at 320 bits (scale read as the exact float)."""
    with mpmath.workprec(320):
        s = mpmath.mpf(Fraction(scale).numerator) / Fraction(scale).denominator
        if mechanism == "gaussian":
            N = int(40 * float(scale)) + 40
            w = {y: mpmath.exp(-mpmath.mpf(y) ** 2 / (2 * s * s)) for y in range(-N, N + 1)}
            Z = mpmath.fsum(w.values())
            cdf = {}
            acc = mpmath.mpf(0)
            for y in range(-N, N + 1):
                acc += w[y]
                cdf[y] = acc / Z
            return [cdf[y] if y >= -N else mpmath.mpf(0) for y in ys]
        q = mpmath.exp(-1 / s)
        out = []
        for y in ys:  # P(Y <= y) = 1 - q^(y+1)/(1+q) for y >= 0; q^(-y)/(1+q) for y < 0
            out.append(1 - q ** (y + 1) / (1 + q) if y >= 0 else q ** (-y) / (1 + q))
        return out


CASES = [("gaussian", 0.3), ("gaussian", 1.0), ("gaussian", math.sqrt(40)), ("gaussian", 123.456),
         ("laplace", 0.2), ("laplace", 2.5), ("laplace", 80.0)]


@pytest.mark.parametrize("mechanism,scale", CASES)
def test_table_is_the_exact_cdf_cut_into_2_64_cells(mechanism, scale):
    s = ExactSampler(mechanism, get_sampler(mechanism, scale).x)
    T = s.T
    bounds = list(range(-T - 1, T + 1))
    F = _oracle_cdf(mechanism, scale, bounds)
    with mpmath.workprec(320):
        K = [int(mpmath.floor(f * TWO64)) for f in F]
    assert s._K.tolist() == K  # the cell of every boundary, exactly
    w = [int(x) for x in s.weights_]
    assert sum(w) == TWO64 and w[-1] == len(set(K))
    # each outcome owns exactly the cells strictly inside its CDF interval
    assert w[0] == K[0] and w[len(K)] == TWO64 - 1 - K[-1]
    assert all(w[i] == max(K[i] - K[i - 1] - 1, 0) for i in range(1, len(K)))
    # so |c_y 2^-64 - p(y)| < 2 * 2^-64 for every central y
    with mpmath.workprec(320):
        for i in range(1, len(K)):
            p = F[i] - F[i - 1]
            assert abs(mpmath.mpf(w[i]) / TWO64 - p) < mpmath.mpf(2) / TWO64


@pytest.mark.parametrize("mechanism,scale", CASES[:3] + CASES[4:6])
def test_alias_table_gives_each_outcome_its_weight(mechanism, scale):
    s = get_sampler(mechanism, scale)
    k = 64 - int(s._shift)
    L = 2 ** (64 - k)
    mass = [0] * (2 ** k)
    for j, (t, a) in enumerate(zip(s._thresh.tolist(), s._alias.tolist())):
        mass[j] += t
        mass[a] += L - t
    assert mass[:len(s.weights_)] == s.weights_.tolist() and not any(mass[len(s.weights_):])


def _chi2_pvalue(y, mechanism, scale):
    lo, hi = int(y.min()), int(y.max())
    F = _oracle_cdf(mechanism, scale, list(range(lo - 1, hi + 1)))
    pmf = np.array([float(F[i + 1] - F[i]) for i in range(hi - lo + 1)])
    pmf = np.append(pmf, 1 - pmf.sum())  # mass outside [lo, hi] (observed 0)
    obs = np.append(np.bincount(y - lo, minlength=hi - lo + 1), 0).astype(float)
    ex = pmf * y.size
    keep = ex >= 5
    obs = np.append(obs[keep], obs[~keep].sum())
    ex = np.append(ex[keep], ex[~keep].sum())
    if ex[-1] < 5:
        obs[-2] += obs[-1]
        ex[-2] += ex[-1]
        obs, ex = obs[:-1], ex[:-1]
    return stats.chisquare(obs, ex).pvalue


@pytest.mark.parametrize("mechanism,scale,seed", [(m, s, i) for i, (m, s) in enumerate(CASES)])
def test_exact_noise_distribution(mechanism, scale, seed):
    y = exact_noise(mechanism, scale, 200_000, rng=np.random.default_rng(seed))
    assert y.dtype == np.int64 and y.shape == (200_000,)
    assert _chi2_pvalue(y, mechanism, scale) > 1e-6  # a correct sampler fails with probability 1e-6


@pytest.mark.parametrize("mechanism,scale,seed", [("gaussian", 3.0, 21), ("laplace", 3.0, 22),
                                                  ("gaussian", 1.5, 23), ("laplace", 0.6, 24)])
def test_tail_paths_exact(monkeypatch, mechanism, scale, seed):
    # A table covering only P(|Y| > T) ~ 0.06-0.3 sends many draws through the tail paths
    # (Laplace: geometric decomposition; Gaussian: geometric proposal + exact
    # Bernoulli(exp(-g^2/(2 sigma^2)))); the law must not change. False failure 1e-6.
    monkeypatch.setattr(sampler_laws, "_TAIL_BITS", 0)
    s = ExactSampler(mechanism, get_sampler(mechanism, scale).x)
    y = s.sample(100_000, np.random.default_rng(seed))
    assert (np.abs(y) > s.T).mean() > 0.04
    assert _chi2_pvalue(y, mechanism, scale) > 1e-6


@pytest.mark.parametrize("b,t_max,seed", [(40.0, 30, 25), (500.0, 60, 26)])
def test_capped_laplace_table_tails_exact(monkeypatch, b, t_max, seed):
    # The table half-width capped far below b (as _T_MAX = 2^17 - 2 is at b = 8e4, where
    # 19% of draws are tails): the folded-table geometric decomposition G = L M + R must
    # give exactly P(G = g) = (1 - q) q^g, q = exp(-1/b), and the whole law must stay
    # the discrete Laplace. Two chi-square tests, each false failure 1e-6.
    monkeypatch.setattr(sampler_laws, "_T_MAX", t_max)
    s = ExactSampler("laplace", get_sampler("laplace", b).x)
    assert s.T == t_max
    rng = np.random.default_rng(seed)
    y = s.sample(100_000, rng)
    assert (np.abs(y) > s.T).mean() > 0.3
    assert _chi2_pvalue(y, "laplace", b) > 1e-6
    g = s._geometric(100_000, rng)
    q = mpmath.exp(-1 / mpmath.mpf(b))
    hi = int(g.max())
    pmf = np.array([float((1 - q) * q ** k) for k in range(hi + 1)])
    obs = np.bincount(g, minlength=hi + 1).astype(float)
    ex = pmf * g.size
    cut = int(np.flatnonzero(ex >= 5)[-1])  # pool the far tail (P(G > cut) = q^(cut+1)) into one bin
    obs = np.append(obs[:cut + 1], obs[cut + 1:].sum())
    ex = np.append(ex[:cut + 1], float(q ** (cut + 1)) * g.size)
    assert stats.chisquare(obs, ex).pvalue > 1e-6


def _residual_oracle(s: ExactSampler, mechanism: str, scale: float):
    """Law of the outcome index given 'ambiguous': the parts of each outcome's
    CDF interval lying in ambiguous cells, normalised (mpmath)."""
    T = s.T
    F = _oracle_cdf(mechanism, scale, list(range(-T - 1, T + 1)))
    with mpmath.workprec(320):
        edges = [mpmath.mpf(0)] + [f * TWO64 for f in F] + [mpmath.mpf(TWO64)]  # in cell units
        amb = sorted(set(s._K.tolist()))
        parts = []
        for o in range(len(edges) - 1):
            a, b = edges[o], edges[o + 1]
            parts.append(sum(max(mpmath.mpf(0), min(b, c + 1) - max(a, c)) for c in amb))
        tot = sum(parts)
        return np.array([float(p / tot) for p in parts])


@pytest.mark.parametrize("mechanism,scale", [("gaussian", 1.0), ("laplace", 0.7)])
def test_ambiguous_cells_resolved_exactly(mechanism, scale):
    s = get_sampler(mechanism, scale)
    rng = np.random.default_rng(31)
    N = 20_000
    got = np.bincount([s._resolve_ambiguous(rng) for _ in range(N)], minlength=len(s._K) + 1)
    ex = _residual_oracle(s, mechanism, scale) * N
    keep = ex >= 5
    assert got[~keep].sum() <= 3 * max(ex[~keep].sum(), 1) + 10
    # chi-square on the outcomes with expected count >= 5; false failure 1e-6
    obs, e = got[keep].astype(float), ex[keep]
    assert stats.chisquare(obs, e * obs.sum() / e.sum()).pvalue > 1e-6


def test_ambiguous_refinement_draws_more_words_until_decided(monkeypatch):
    # Script V's words so that the first extra word agrees with a boundary's
    # next 64 bits: the first comparison is undecided, a second word decides.
    s = get_sampler("gaussian", 1.0)
    i = s.T + 1  # boundary b = 0
    with mpmath.workprec(400):
        f = _oracle_cdf("gaussian", 1.0, [0])[0]
        assert int(mpmath.floor(f * TWO64)) == int(s._K[i])
        w1 = int(mpmath.floor(f * 2 ** 128)) % TWO64
        w2 = int(mpmath.floor(f * 2 ** 192)) % TWO64
    for second, below in [((w2 - 5) % TWO64, True), ((w2 + 5) % TWO64, False)]:
        words = iter([w1, second])
        calls = []
        monkeypatch.setattr(exact_sampler, "uniform_words", lambda rng, n: calls.append(n) or
                            np.array([next(words)], dtype=np.uint64))
        cell = s._amb.tolist().index(int(s._K[i]))

        class R:  # picks the ambiguous cell of boundary 0
            def integers(self, lo, hi):
                return cell
        o = s._resolve_ambiguous(R())
        assert len(calls) == 2
        # V < F(0) -> outcome index i (y = 0 - ... the outcome below boundary 0, i.e. y = 0);
        # V > F(0) -> index i + 1 (y = 1)
        assert o == (i if below else i + 1)


def test_total_variation_is_zero_and_bad_arguments_refused():
    assert sampler_total_variation("gaussian", 2.0) == 0.0
    assert sampler_total_variation("laplace", 2.0) == 0.0
    for mech, scale in [("cauchy", 1.0), ("gaussian", 0.0), ("laplace", -1.0),
                        ("gaussian", float("nan")), ("laplace", "x")]:
        with pytest.raises(UsageError):
            exact_noise(mech, scale, 3, rng=np.random.default_rng(0))
    with pytest.raises(UsageError):
        exact_noise("gaussian", 1.0, -1, rng=np.random.default_rng(0))
    assert exact_noise("gaussian", 1.0, 0, rng=np.random.default_rng(0)).shape == (0,)


def test_exact_statement_names_the_samplers_that_ran():
    """noise_statement("exact", paths=...) names the table sampler, the rejection sampler or both; the
    certified numbers stay 0 (both are exact); nonsense is refused."""
    table = samplers.noise_statement("exact")
    assert samplers.noise_statement("exact", paths=["table"]) == table
    assert "alias table" in table["sampler"] and "Algorithm 3" not in table["sampler"]
    rej = samplers.noise_statement("exact", paths={"rejection"})
    assert "Algorithm 3" in rej["sampler"] and "alias table" not in rej["sampler"]
    both = samplers.noise_statement("exact", paths=("rejection", "table"))
    assert both["sampler"].startswith(table["sampler"]) and rej["sampler"] in both["sampler"]
    assert "fewer than 16 T times in one call" in both["sampler"]
    for st in (table, rej, both):
        assert st["total_variation_per_draw"] == 0.0 and st["extra_delta"] == 0.0
        assert st["derivation"] == table["derivation"] and set(st) == set(table)
    scaled = samplers.noise_statement("exact", paths={"scaled"})
    assert "discrete_gaussian_scaled" in scaled["sampler"] and "alias table" not in scaled["sampler"]
    wide = samplers.noise_statement("exact", paths=("table", "scaled"))
    assert wide["sampler"].startswith(table["sampler"]) and scaled["sampler"] in wide["sampler"]
    assert "above 32768 lattice units" in wide["sampler"]
    few = samplers.noise_statement("exact", paths=("rejection", "scaled"))
    assert few["sampler"].startswith(rej["sampler"]) and "alias table" not in few["sampler"]
    for st in (scaled, wide, few):
        assert st["total_variation_per_draw"] == 0.0 and st["extra_delta"] == 0.0
    for noise, paths in [("exact", ()), ("exact", ("table", "alias")), ("rounded", ("rejection",)),
                         ("continuous", ("scaled",))]:
        with pytest.raises(UsageError, match="`paths` must be a non-empty subset"):
            samplers.noise_statement(noise, paths=paths)


def test_other_bit_generators_give_the_same_law():
    # MT19937's raw words are 32-bit: the sampler must use Generator.integers instead.
    rng = np.random.Generator(np.random.MT19937(5))
    y = exact_noise("gaussian", 2.0, 100_000, rng=rng)
    assert _chi2_pvalue(y, "gaussian", 2.0) > 1e-6  # false failure 1e-6


# ----------------------------------------------------------------------------- in place (add_into)
GUIDE_CASES = [c for c in CASES if get_sampler(*c).T <= exact_sampler._GUIDE_MAX_T]


def test_release_count_scales_take_the_guide_path():
    """sigma = sqrt(2H/rho) and b = 4H/eps at H = 20 for rho in [0.01, 1], eps in [1, 10]; reward scales not."""
    for mech, scale in [("gaussian", math.sqrt(40)), ("gaussian", math.sqrt(4000)), ("laplace", 80.0)]:
        assert get_sampler(mech, scale).T <= exact_sampler._GUIDE_MAX_T
    assert get_sampler("gaussian", 1000 * math.sqrt(40)).T > exact_sampler._GUIDE_MAX_T
    assert len(GUIDE_CASES) == len(CASES)  # the alias path of add_into is tested by lowering _GUIDE_MAX_T


@pytest.mark.parametrize("mechanism,scale", GUIDE_CASES)
def test_guide_table_gives_each_outcome_its_weight(mechanism, scale):
    """Exact integers: the words [0, 2^64) that the guide table (pure buckets) or the search in the cumulative
    weights (impure buckets) send to outcome o number exactly weights_[o] (so P(o) = weights_[o] / 2^64)."""
    s = ExactSampler(mechanism, get_sampler(mechanism, scale).x)
    table, shift, _ = s._guide_table()
    w = [int(x) for x in s.weights_]
    edges = [0]
    for x in w:
        edges.append(edges[-1] + x)           # outcome o owns [edges[o], edges[o+1]), Python ints
    assert edges[-1] == TWO64
    width = 1 << int(shift)
    mass = [0] * len(w)
    impure = 0
    o = 0
    for b, entry in enumerate(table.tolist()):
        lo, hi = b * width, (b + 1) * width
        while edges[o + 1] <= lo:
            o += 1
        if entry == s.T + 3:                   # impure: the bucket straddles an edge; searched per word
            impure += 1
            assert edges[o + 1] < hi
            j = o
            while edges[j] < hi:
                mass[j] += min(hi, edges[j + 1]) - max(lo, edges[j])
                j += 1
        else:                                  # pure: the whole bucket inside outcome o, stored as y = o - T - 1
            assert hi <= edges[o + 1] and entry == o - s.T - 1
            mass[o] += width
    assert mass == w
    assert impure <= len(w)                    # at most one impure bucket per edge


@pytest.mark.parametrize("path", ["guide", "alias"])
@pytest.mark.parametrize("mechanism,scale,seed", [(m, s, 40 + i) for i, (m, s) in enumerate(CASES)])
def test_add_into_distribution(monkeypatch, mechanism, scale, seed, path):
    """Noise added in place to a constant array has the exact law, by either path (chi-square; each of the
    14 cases fails with probability 1e-6 for a correct sampler)."""
    if path == "alias":
        monkeypatch.setattr(exact_sampler, "_GUIDE_MAX_T", -1)
    s = get_sampler(mechanism, scale)
    out = np.full(200_000, 7, dtype=np.int64)
    same = s.add_into(out, np.random.default_rng(seed + (path == "alias")))
    assert same is out and (s._guide_table() is None) == (path == "alias")
    assert _chi2_pvalue(out - 7, mechanism, scale) > 1e-6


@pytest.mark.parametrize("path", ["guide", "alias"])
@pytest.mark.parametrize("mechanism,scale,seed", [("gaussian", 3.0, 51), ("laplace", 3.0, 52)])
def test_add_into_tails_and_impure_buckets_exact(monkeypatch, mechanism, scale, seed, path):
    """Tables covering little (P(|Y| > T) ~ 0.06-0.3) and (guide) a guide table with one bucket per outcome,
    so many impure buckets: the rare paths of add_into carry much of the mass; the law must not change.
    False failure 1e-6 per case."""
    monkeypatch.setattr(sampler_laws, "_TAIL_BITS", 0)
    monkeypatch.setattr(exact_sampler, "_GUIDE_PURITY", 1)
    monkeypatch.setattr(exact_sampler, "_GUIDE_MIN_BITS", 4)
    if path == "alias":
        monkeypatch.setattr(exact_sampler, "_GUIDE_MAX_T", -1)
    s = ExactSampler(mechanism, get_sampler(mechanism, scale).x)
    if path == "guide":
        table, _, _ = s._guide_table()
        assert (table == s.T + 3).mean() > 0.2
    out = np.zeros(100_000, dtype=np.int64)
    s.add_into(out, np.random.default_rng(seed))
    assert (np.abs(out) > s.T).mean() > 0.04
    assert _chi2_pvalue(out, mechanism, scale) > 1e-6


@pytest.mark.parametrize("mechanism,scale", [("gaussian", math.sqrt(40)), ("laplace", 80.0),
                                             ("gaussian", 1000 * math.sqrt(40))])
def test_add_into_allocates_no_array_of_the_output_size(mechanism, scale):
    """4 M cells (32 MB) noised in place: peak new allocation below 2 MB (chunk scratch only)."""
    import tracemalloc

    s = get_sampler(mechanism, scale)
    out = np.zeros(1 << 22, dtype=np.int64)
    s.add_into(out[:10], np.random.default_rng(0))  # build the guide table outside the measurement
    tracemalloc.start()
    s.add_into(out, np.random.default_rng(1))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 2 << 20, peak
    assert np.count_nonzero(out) > 0.8 * out.size  # noise was added (P(Y = 0) < 0.07 at these scales)


def test_add_into_refuses_arrays_it_cannot_fill():
    s = get_sampler("gaussian", 2.0)
    for bad in (np.zeros(10, dtype=np.int32), np.zeros((4, 4), dtype=np.int64)[:, ::2]):
        with pytest.raises(ValueError, match="writeable C-contiguous int64"):
            s.add_into(bad, np.random.default_rng(0))


@pytest.mark.parametrize("path", ["guide", "alias"])
def test_add_into_adds_tail_draws_beyond_the_table_type(monkeypatch, path):
    """A tail draw need not fit the guide table's int16: a tail finished as 40,000 must arrive as 40,000
    (int16 would wrap it to -25,536). _finish is stubbed to make every tail draw that large."""
    monkeypatch.setattr(sampler_laws, "_TAIL_BITS", 0)
    if path == "alias":
        monkeypatch.setattr(exact_sampler, "_GUIDE_MAX_T", -1)
    s = ExactSampler("laplace", get_sampler("laplace", 3.0).x)
    monkeypatch.setattr(s, "_finish", lambda marks, rng, tails: np.sign(marks) * 40_000)
    out = np.full(20_000, 5, dtype=np.int64)
    s.add_into(out, np.random.default_rng(3))
    tails = np.abs(out - 5) > s.T
    assert tails.mean() > 0.04
    assert set(np.unique(out[tails] - 5).tolist()) == {-40_000, 40_000}
