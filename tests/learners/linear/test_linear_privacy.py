"""DP-VAPVI privacy: brute-force sensitivities (real and on the lattice), calibration, fresh noise per h, grid."""

import itertools
from fractions import Fraction

import numpy as np
import pytest

from privaudit.core.errors import UsageError
from privaudit.privacy import accounting
from privaudit.privacy.events import PrivacyUnit
from privaudit.learners.linear import DPVAPVI, LinearData
from privaudit.learners.linear import privacy as lp
from privaudit.learners.linear.dp_vapvi import ExactStatistics, _pair_sum, step_statistics
from privaudit.mdp.features import FeatureMap
from privaudit.mdp.synthetic_linear import behaviour_policy, synthetic_linear_features, synthetic_linear_mdp
from privaudit.mdp.simulate import simulate

H = 4
#: A tiny finite feature set in d = 2 with the extreme points of the unit ball.
VECS = np.array([[1, 0], [0, 1], [-1, 0], [0.6, 0.8], [0, 0], [-0.6, 0.8], [0.5, -0.5]])
#: V_{h+1} values at h = 0 (0-based): in [0, H - 1].
VALUES = np.array([0.0, 1.5, H - 1.0])


def _one_row(state, r, next_state, fmap, n_states):
    """LinearData of a single transition at step 0 (the row that differs between neighbours;
    common rows cancel exactly in every statistic, which is a sum over rows)."""
    return LinearData.from_rows([0], [state], [0], [r], [next_state], [False], H=H, S=n_states, A=1,
                                n_episodes=1).steps[0]


def _one_row_statistics(stats, s, sp, r, sig2, fmap, S, V_next):
    """The 5 statistics of a one-row dataset with sigma^2 forced to sig2 (any public post-processing value)."""
    st = _one_row(s, r, sp, fmap, S)
    P = fmap.phi(st.s, st.a)
    var = step_statistics(st, P, V_next, stats=stats, lam=1.0, cap=float(H), variance_aware=True)
    # lines 9-10 with the given sigma^2 (sigma^2 is post-processing of earlier releases: any value >= 1)
    F, omega = stats.features(P), stats.weights(np.array([sig2]))
    wg = stats.outer("weighted_gram", F, st.n * omega)
    rv = stats.inner("r_plus_v", F, omega * (stats.rewards(st) + _pair_sum(st, V_next, stats.values)))
    return (var["gram"], var["v2"], var["v"], stats.release("weighted_gram", wg), stats.release("r_plus_v", rv))


@pytest.mark.parametrize("lattice", [False, True])
def test_brute_force_sensitivities(lattice):
    # state i = (feature VECS[i // 3], value VALUES[i % 3]): phi(s, 0) and V_{h+1}(s) enumerated jointly.
    # lattice=True: the released integers of DP-VAPVI (inputs rounded to the grid), in real units;
    # the bound must hold exactly there too (the noise is calibrated to it).
    S = len(VECS) * len(VALUES)
    table = np.repeat(VECS, len(VALUES), axis=0)[:, None, :]
    fmap = FeatureMap(table, "test")
    V_next = np.tile(VALUES, len(VECS))
    scales = lp.noise_scales(1.0, H, 2)
    stats_obj = lp.LatticeGaussian(scales, None) if lattice else ExactStatistics()
    stats = [_one_row_statistics(stats_obj, s, sp, r, sig2, fmap, S, V_next)
             for s, sp, r, sig2 in itertools.product(range(S), range(S), (0.0, 0.3, 1.0), (1.0, 2.5))]
    sens = lp.sensitivities(H)
    names = ("gram", "v2", "v", "weighted_gram", "r_plus_v")
    for i, name in enumerate(names):
        arr = np.stack([s[i] for s in stats]).reshape(len(stats), -1)
        if lattice:  # every statistic is an integer multiple of its lattice step
            k = np.ldexp(arr, lp.LATTICE_BITS[name])
            assert np.array_equal(k, np.round(k)), name
        # largest distance between any two neighbours' statistics (all pairs)
        diff = np.sqrt(((arr[:, None, :] - arr[None, :, :]) ** 2).sum(-1)).max()
        assert diff <= sens[name] + 1e-12, name
        # the bounds are attained or nearly: V_{h+1} <= H - 1, so V^2 reaches 2 (H-1)^2 of 2 H^2
        tight = {"gram": 1.0, "weighted_gram": 1.0, "r_plus_v": 1.0, "v": (H - 1) / H, "v2": ((H - 1) / H) ** 2}
        assert diff >= tight[name] * sens[name] * (1 - 2e-3) - 1e-12, name


@pytest.mark.parametrize("rho, k", [(0.7, 2), (1.0, 1), (0.1555324774701318, 1), (4.2, 3)])
def test_lattice_variances_are_the_recorded_scales_and_cost_at_most_rho0(rho, k):
    """The noise drawn has variance exactly the square of the sigma the event records (times 4^L), and each
    statistic costs at most rho_0 = rho / (5H) in exact rationals, within 1e-15 of it: the accountant's
    "stated <= exact cost" check needs no float slack (accounting.BOUND_RTOL = 0)."""
    sc = lp.noise_scales(rho=rho, H=H, d=3, k=k)
    var = lp.lattice_variances(sc)
    rho0 = Fraction(rho) / (5 * H)
    sens = lp.sensitivities(H, k)
    for name, bits in lp.LATTICE_BITS.items():
        unit = Fraction(4) ** bits
        if name in ("gram", "weighted_gram"):
            off, diag = var[name]
            assert diag == 2 * off and off == Fraction(sc.sigma_z) ** 2 * unit
            # worst substitution Delta = phi phi^T - psi psi^T (orthonormal phi, psi): each diagonal entry moves
            # by k (lattice units: times 2^L); cost sum D_ii^2 / (2 diag)
            cost = Fraction(k) ** 2 * unit / (2 * diag) * 2
        else:
            sigma = {"v2": sc.sigma_v2, "v": sc.sigma_v, "r_plus_v": sc.sigma_r}[name]
            assert var[name] == Fraction(sigma) ** 2 * unit
            cost = Fraction(sens[name]) ** 2 * unit / (2 * var[name])
        assert cost <= rho0 and rho0 - cost <= rho0 * Fraction(1, 10 ** 15), name
    # the whole event, as the accountant sees it: at most rho, and the guarantee states rho itself
    event = lp.privacy_event(sc, PrivacyUnit("u", k))
    assert accounting.event_rho(event) <= rho
    assert accounting.guarantee(event, delta=1e-6, requested={"rho": rho}, bound=rho)["rho"] == rho


def test_symmetric_noise_calibrated_for_substitution():
    sc = lp.noise_scales(rho=2.0, H=H, d=3)
    s2 = sc.sigma_z**2
    # zCDP cost of (Z + Z^T)/sqrt(2) for a symmetric shift Delta, in upper-triangle coordinates:
    # diagonal variance 2 s^2, off-diagonal s^2 -> sum_i D_ii^2 / (4 s^2) + sum_{i<j} D_ij^2 / (2 s^2)
    phi, psi = np.eye(3)[0], np.eye(3)[1]
    D = np.outer(phi, phi) - np.outer(psi, psi)  # ||D||_F^2 = 2, the worst substitution
    iu = np.triu_indices(3, 1)
    cost = (np.diag(D) ** 2).sum() / (4 * s2) + (D[iu] ** 2).sum() / (2 * s2)
    assert cost == pytest.approx(sc.rho0, rel=1e-12)
    # the paper's Z_ij ~ N(0, 1/(4 rho_0)) would cost 2 rho_0 here
    assert D.dot(D).trace() / (4 * (1 / (4 * sc.rho0))) == pytest.approx(2 * sc.rho0)
    # Gaussian vectors: sigma^2 = Delta^2 / (2 rho_0) with Delta = 2H^2 and 2H (Qiao & Wang 2023, Algorithm 2, line 1)
    assert sc.sigma_v2**2 == pytest.approx(2 * H**4 / sc.rho0)
    assert sc.sigma_v**2 == pytest.approx(2 * H**2 / sc.rho0) == pytest.approx(sc.sigma_r**2)
    # k episodes per unit multiply every scale by k
    sk = lp.noise_scales(rho=2.0, H=H, d=3, k=3)
    assert sk.sigma_z == pytest.approx(3 * sc.sigma_z) and sk.sigma_v2 == pytest.approx(3 * sc.sigma_v2)


def test_symmetric_noise_variances():
    sc = lp.noise_scales(rho=5.0, H=H, d=3)
    z = lp.draw_step_noise(np.random.default_rng(3), 3, sc, n_runs=4000)
    N = z["gram"]
    assert N.dtype == np.int64 and np.array_equal(N, N.transpose(0, 2, 1))
    s2 = float(lp.lattice_variances(sc)["gram"][0])
    # sample variance of 4000 draws: relative sd sqrt(2/4000) = 2.2%; 15% is > 6 sd (false failure < 1e-8)
    assert N[:, 0, 0].astype(float).var() == pytest.approx(2 * s2, rel=0.15)
    assert N[:, 0, 1].astype(float).var() == pytest.approx(s2, rel=0.15)


def test_noise_is_fresh_for_every_h(monkeypatch):
    mdp = synthetic_linear_mdp(0, horizon=H)
    df = simulate(mdp, behaviour_policy(), 50, np.random.default_rng(0))
    data = LinearData.from_rows(df["step"], df["state"], df["action"], df["reward"], df["next_state"],
                                np.zeros(df.height, bool), H=H, S=2, A=100, n_episodes=50)
    calls = []
    real = lp.draw_step_noise

    def recording(rng, d, scales, n_runs=None):
        z = real(rng, d, scales, n_runs)
        calls.append((rng, z))
        return z

    monkeypatch.setattr(lp, "draw_step_noise", recording)
    DPVAPVI(1.0).fit(data, synthetic_linear_features(), rng=np.random.default_rng(9))
    assert len(calls) == H  # one call per step h, each drawing the 5 statistics of that step
    assert len({id(g) for g, _ in calls}) == H  # a distinct child stream per h
    draws = [v.ravel() for _, z in calls for v in z.values()]
    assert len(draws) == 5 * H
    for x, y in itertools.combinations(draws, 2):  # no two of the 5H releases share a draw
        n = min(len(x), len(y))
        assert not np.array_equal(x[:n], y[:n])
    # the noise of step h does not depend on how many other steps were drawn: streams are spawned
    g = np.random.default_rng(9).spawn(H)
    np.testing.assert_array_equal(real(g[2], 10, lp.noise_scales(1.0, H, 10))["v2"],
                                  calls[H - 1 - 2][1]["v2"])


def test_budget_and_kappa_errors():
    with pytest.raises(UsageError, match="rho"):
        lp.noise_scales(0.0, H, 2)
    with pytest.raises(UsageError, match="kappa"):
        lp.d_constant(H, 2, None, lp.noise_scales(1.0, H, 2))
    # D reduces to VAPVI's additive 2 H^3 sqrt(d) without noise (docs/linear.md, "PEVI and VAPVI")
    assert lp.d_constant(H, 4, None, None) == pytest.approx(2 * H**3 * 2)


def test_released_statistics_lie_on_the_stated_grid():
    # issue 10 item 4: every released statistic is an integer multiple of 2^-L (L in the manifest's grid),
    # (the public (E/2) I and lambda I are added afterwards): no float low-order bits carry the data
    mdp = synthetic_linear_mdp(0, horizon=H)
    df = simulate(mdp, behaviour_policy(), 80, np.random.default_rng(0))
    data = LinearData.from_rows(df["step"], df["state"], df["action"], df["reward"], df["next_state"],
                                np.zeros(df.height, bool), H=H, S=2, A=100, n_episodes=80)
    est = DPVAPVI(2.0)
    fmap = synthetic_linear_features()
    rel = est.step_release(data, fmap, 1, np.array([0.37, 2.2]), rng=np.random.default_rng(1))
    for name, bits in lp.LATTICE_BITS.items():
        k = np.ldexp(rel[name], bits)
        assert np.array_equal(k, np.round(k)), name
    assert (rel["sigma2"] > 1).any()  # the weights 1/sigma^2 were rounded to their grid too
    grid = lp.grid()
    assert grid["statistics"] == {n: f"2^-{b}" for n, b in lp.LATTICE_BITS.items()}


def test_lattice_sums_are_exact_beyond_float_precision():
    # per-pair weights large enough that float64 partial sums would exceed 2^53: the int64 path must
    # give the exact integer sums (oracle: Python integers on object arrays)
    rng = np.random.default_rng(0)
    q = rng.integers(-(1 << 12), 1 << 12, size=(20, 4))
    w = rng.integers(1 << 31, 1 << 32, size=20)
    stats = lp.LatticeGaussian(lp.noise_scales(1.0, H, 4), None)
    got = stats.outer("weighted_gram", q, w)
    ref = (q.astype(object) * w.astype(object)[:, None]).T.dot(q.astype(object))
    assert got.dtype == np.int64 and all(int(a) == b for a, b in zip(got.ravel(), ref.ravel()))
    assert float(np.abs(w).sum()) * (1 << 24) >= 2.0**53  # the int64 path was taken
    gv = stats.inner("r_plus_v", q, w)
    assert all(int(a) == b for a, b in zip(gv, w.astype(object).dot(q.astype(object))))
    with pytest.raises(UsageError, match="int64"):  # beyond int64: refused, never wrapped around
        stats.outer("weighted_gram", q, np.full(20, 1 << 40))
