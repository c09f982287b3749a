"""DP-VAPVI privacy: brute-force sensitivities, matrix-noise calibration, fresh noise per h."""

import itertools

import numpy as np
import pytest

from privaudit.errors import UsageError
from privaudit.learners.linear import DPVAPVI, LinearData
from privaudit.learners.linear import privacy as lp
from privaudit.learners.linear.core import regression_statistics, variance_statistics
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


def test_brute_force_sensitivities():
    # state i = (feature VECS[i // 3], value VALUES[i % 3]): phi(s, 0) and V_{h+1}(s) enumerated jointly
    S = len(VECS) * len(VALUES)
    table = np.repeat(VECS, len(VALUES), axis=0)[:, None, :]
    fmap = FeatureMap(table, "test")
    V_next = np.tile(VALUES, len(VECS))
    stats = []
    for s, sp, r, sig2 in itertools.product(range(S), range(S), (0.0, 1.0), (1.0, 2.5)):
        st = _one_row(s, r, sp, fmap, S)
        P = fmap.phi(st.s, st.a)
        gram, b1, b2 = variance_statistics(st, P, V_next)
        wgram, b3 = regression_statistics(st, P, V_next, np.array([sig2]))
        stats.append((gram, b1, b2, wgram, b3))
    sens = lp.sensitivities(H)
    names = ("gram", "v2", "v", "weighted_gram", "r_plus_v")
    for i, name in enumerate(names):
        arr = np.stack([s[i] for s in stats]).reshape(len(stats), -1)
        # largest distance between any two neighbours' statistics (all pairs)
        diff = np.sqrt(((arr[:, None, :] - arr[None, :, :]) ** 2).sum(-1)).max()
        assert diff <= sens[name] + 1e-12, name
        # the bounds are attained or nearly: V_{h+1} <= H - 1, so V^2 reaches 2 (H-1)^2 of 2 H^2
        tight = {"gram": 1.0, "weighted_gram": 1.0, "r_plus_v": 1.0, "v": (H - 1) / H, "v2": ((H - 1) / H) ** 2}
        assert diff >= tight[name] * sens[name] - 1e-12, name


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
    # Gaussian vectors: sigma^2 = Delta^2 / (2 rho_0) with Delta = 2H^2 and 2H (seed 000 Alg. 2 line 1)
    assert sc.sigma_v2**2 == pytest.approx(2 * H**4 / sc.rho0)
    assert sc.sigma_v**2 == pytest.approx(2 * H**2 / sc.rho0) == pytest.approx(sc.sigma_r**2)
    # k episodes per unit multiply every scale by k
    sk = lp.noise_scales(rho=2.0, H=H, d=3, k=3)
    assert sk.sigma_z == pytest.approx(3 * sc.sigma_z) and sk.sigma_v2 == pytest.approx(3 * sc.sigma_v2)


def test_symmetric_noise_variances():
    rng = np.random.default_rng(3)
    N = np.stack([lp.symmetric_gaussian(rng, 3, 2.0) for _ in range(4000)])
    assert np.allclose(N, N.transpose(0, 2, 1))
    # sample variance of 4000 normals: relative sd sqrt(2/4000) = 2.2%; 15% is > 6 sd (false failure < 1e-8)
    assert N[:, 0, 0].var() == pytest.approx(2 * 4.0, rel=0.15)
    assert N[:, 0, 1].var() == pytest.approx(4.0, rel=0.15)


def test_noise_is_fresh_for_every_h(monkeypatch):
    mdp = synthetic_linear_mdp(0, horizon=H)
    df = simulate(mdp, behaviour_policy(), 50, np.random.default_rng(0))
    data = LinearData.from_rows(df["step"], df["state"], df["action"], df["reward"], df["next_state"],
                                np.zeros(df.height, bool), H=H, S=2, A=100, n_episodes=50)
    calls = []
    real = lp.draw_step_noise

    def recording(rng, d, scales, shift=1.0):
        z = real(rng, d, scales, shift)
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
    np.testing.assert_array_equal(real(g[2], 10, lp.noise_scales(1.0, H, 10))["phi1"],
                                  calls[H - 1 - 2][1]["phi1"])


def test_budget_and_kappa_errors():
    with pytest.raises(UsageError, match="rho"):
        lp.noise_scales(0.0, H, 2)
    with pytest.raises(UsageError, match="kappa"):
        lp.d_constant(H, 2, None, lp.noise_scales(1.0, H, 2))
    # D reduces to VAPVI's additive 2 H^3 sqrt(d) without noise (ALGORITHMS.md 2.6)
    assert lp.d_constant(H, 4, None, None) == pytest.approx(2 * H**3 * 2)
