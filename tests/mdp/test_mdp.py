"""Tabular MDPs: exact values, value iteration, loaders, save/load."""

from __future__ import annotations

import itertools
import zipfile

import numpy as np
import pytest

from privaudit.core.errors import ArtifactError, UsageError
from privaudit.mdp import MDP_REGISTRY, TabularMDP, build_mdp, evaluate_policy, load_mdp, policy_values, save_mdp
from privaudit.mdp import value_iteration
from privaudit.mdp.icu_sepsis import (REFERENCE_VALUES, TERMINAL_STATES, clinicians_policy, icu_sepsis_spec_doc,
                                      load_icu_sepsis, state_cluster_centers)
from privaudit.mdp.random_tabular import random_tabular_mdp, random_tabular_spec_doc
from privaudit.mdp.simulate import simulate, uniform_policy
from privaudit.core.spec import DomainSpec


@pytest.fixture(scope="module")
def icu():
    return load_icu_sepsis(horizon=20)


# ----------------------------------------------------------------- ICU-Sepsis values
# Reference values at H = 20 from sample_data/icu-sepsis/README.md (4 decimals).
def test_icu_sepsis_clinicians_value(icu):
    assert abs(evaluate_policy(icu, clinicians_policy()) - REFERENCE_VALUES["clinicians"]) <= 5e-4
    assert abs(evaluate_policy(icu, clinicians_policy()) - 0.6920) <= 5e-4


def test_icu_sepsis_optimal_value(icu):
    pi, V, v = value_iteration(icu)
    assert abs(v - 0.7922) <= 5e-4
    assert abs(evaluate_policy(icu, pi) - v) < 1e-12  # the returned policy attains v*


def test_icu_sepsis_uniform_value(icu):
    assert abs(evaluate_policy(icu, np.full((716, 25), 1 / 25)) - 0.6854) <= 5e-4


def test_icu_sepsis_tables_and_spec(icu):
    assert (icu.n_states, icu.n_actions, icu.horizon) == (716, 25, 20)
    assert icu.terminal_states == TERMINAL_STATES == (713, 714, 715)
    pi = clinicians_policy()
    np.testing.assert_allclose(pi.sum(1), 1.0, atol=1e-9)
    np.testing.assert_array_equal(pi[713:], 1 / 25)
    assert state_cluster_centers().shape == (716, 47)
    spec = DomainSpec.from_dict(icu_sepsis_spec_doc(horizon=12, dataset_id="x"))
    assert (spec.H, spec.S, spec.A, spec.terminal_states) == (12, 716, 25, (713, 714, 715))
    r = spec.public_reward_vector()
    assert r[714] == 1.0 and r.sum() == 1.0
    assert spec.max_episodes_per_unit == 1 and spec.unit_column == "unit_id"
    # The declared public reward is the MDP's reward: r(s, a, s') = values[s'] for every (s, a).
    np.testing.assert_array_equal(icu.r[:713], np.broadcast_to(r, (713, 25, 716)))


# ----------------------------------------------------------------- exact evaluation
def test_policy_values_hand_computed():
    # S=2, A=2, H=2. Action 0 stays, action 1 switches; r(s, a) = s; start in state 0.
    P = np.zeros((2, 2, 2))
    P[0, 0, 0] = P[1, 0, 1] = 1.0
    P[0, 1, 1] = P[1, 1, 0] = 1.0
    r = np.array([[0.0, 0.0], [1.0, 1.0]])
    mdp = TabularMDP(P=P, r=r, d0=np.array([1.0, 0.0]), horizon=2)
    # Uniform: step 0 pays 0; step 1 is in state 1 w.p. 1/2 -> v = 0.5.
    assert evaluate_policy(mdp, np.full((2, 2), 0.5)) == pytest.approx(0.5, abs=1e-15)
    # Optimal: switch at h=0 (pays 0), then collect 1 at h=1 -> v* = 1; from state 1: stay, 1 + 1 = 2.
    pi, V, v = value_iteration(mdp)
    assert v == 1.0 and V[0].tolist() == [1.0, 2.0]
    assert pi[0, 0].tolist() == [0.0, 1.0]


def _brute_force_best(mdp: TabularMDP) -> np.ndarray:
    """Max over all A^(H*S) deterministic Markov policies of V^pi_0(s), per start state s."""
    H, S, A = mdp.horizon, mdp.n_states, mdp.n_actions
    best = np.full(S, -np.inf)
    eye = np.eye(A)
    for actions in itertools.product(range(A), repeat=H * S):
        pi = eye[np.array(actions).reshape(H, S)]  # (H, S, A) one-hot
        best = np.maximum(best, policy_values(mdp, pi)[0])
    return best


@pytest.mark.parametrize("instance_seed", [0, 1])
def test_value_iteration_equals_brute_force_random(instance_seed):
    mdp = random_tabular_mdp(states=2, actions=3, horizon=3, instance_seed=instance_seed)  # 3^6 = 729 policies
    _, V, v = value_iteration(mdp)
    best = _brute_force_best(mdp)
    np.testing.assert_allclose(V[0], best, rtol=0, atol=1e-12)
    assert v == pytest.approx(float(mdp.d0 @ best), abs=1e-12)


def test_value_iteration_equals_brute_force_terminal_next_state_reward():
    # Stationary S=3 (state 2 terminal), A=2, H=3, reward r(s, a, s'): 2^9 = 512 policies.
    rng = np.random.default_rng(5)
    P = rng.dirichlet(np.ones(3), size=(3, 2))
    r = rng.uniform(size=(3, 2, 3))
    mdp = TabularMDP(P=P, r=r, d0=np.array([0.3, 0.7, 0.0]), horizon=3, terminal_states=(2,))
    _, V, _ = value_iteration(mdp)
    np.testing.assert_allclose(V[0], _brute_force_best(mdp), rtol=0, atol=1e-12)
    assert V[0, 2] == 0.0  # terminal: absorbing with reward 0


# ----------------------------------------------------------------- random tabular MDP
def test_random_tabular_is_seeded_and_valid():
    a = random_tabular_mdp(5, 3, 4, instance_seed=11)
    b = random_tabular_mdp(5, 3, 4, instance_seed=11)
    c = random_tabular_mdp(5, 3, 4, instance_seed=12)
    assert a.P.shape == (4, 5, 3, 5) and a.r.shape == (4, 5, 3) and a.d0.shape == (5,)
    np.testing.assert_array_equal(a.P, b.P)
    np.testing.assert_array_equal(a.r, b.r)
    assert not np.array_equal(a.P, c.P)
    assert ((a.r >= 0) & (a.r <= 1)).all()
    np.testing.assert_allclose(a.P.sum(-1), 1.0)
    assert not np.array_equal(a.P[0], a.P[1])  # non-stationary
    DomainSpec.from_dict(random_tabular_spec_doc(a))


@pytest.mark.parametrize("kwargs", [dict(states=0, actions=2, horizon=2, instance_seed=0),
                                    dict(states=2, actions=2, horizon=0, instance_seed=0),
                                    dict(states=2, actions=2, horizon=2, instance_seed=-1)])
def test_random_tabular_refuses_bad_sizes(kwargs):
    with pytest.raises(UsageError):
        random_tabular_mdp(**kwargs)


def test_registry_build_errors():
    assert set(MDP_REGISTRY) >= {"icu-sepsis", "random-tabular"}
    with pytest.raises(UsageError, match="--states"):
        build_mdp("icu-sepsis", states=3)
    with pytest.raises(UsageError, match="--actions"):
        build_mdp("random-tabular", horizon=3, states=2)
    with pytest.raises(UsageError, match="unknown MDP"):
        build_mdp("nope")
    m = build_mdp("random-tabular", horizon=3, states=2, actions=2)
    np.testing.assert_array_equal(m.P, random_tabular_mdp(2, 2, 3, 0).P)  # instance_seed defaults to 0


# ----------------------------------------------------------------- save / load
def test_save_load_round_trip(tmp_path):
    for mdp in (random_tabular_mdp(4, 2, 3, instance_seed=3),
                TabularMDP(P=np.random.default_rng(0).dirichlet(np.ones(3), size=(3, 2)),
                           r=np.random.default_rng(1).uniform(size=(3, 2, 3)), d0=np.array([0.5, 0.5, 0.0]),
                           horizon=5, terminal_states=(2,), name="custom")):
        path = tmp_path / f"{mdp.name}.npz"
        assert save_mdp(mdp, path) == path
        back = load_mdp(path)
        for key in ("P", "r", "d0"):
            np.testing.assert_array_equal(getattr(back, key), getattr(mdp, key))
        assert (back.horizon, back.terminal_states, back.name) == (mdp.horizon, mdp.terminal_states, mdp.name)
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file left


def _rewrite(path, **changes):
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays.update(changes)
    for k in [k for k, v in changes.items() if v is None]:
        del arrays[k]
    np.savez(path, **arrays)


def test_load_refuses_unknown_version(tmp_path):
    path = tmp_path / "m.npz"
    save_mdp(random_tabular_mdp(2, 2, 2, 0), path)
    _rewrite(path, format_version=np.int64(2))
    with pytest.raises(ArtifactError, match="format_version 2"):
        load_mdp(path)
    _rewrite(path, format_version=None)
    with pytest.raises(ArtifactError, match="no `format_version`"):
        load_mdp(path)


def test_load_refuses_bad_files(tmp_path):
    with pytest.raises(ArtifactError, match="cannot read"):
        load_mdp(tmp_path / "missing.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ArtifactError):
        load_mdp(tmp_path / "junk.npz")
    path = tmp_path / "m.npz"
    save_mdp(random_tabular_mdp(2, 2, 2, 0), path)
    _rewrite(path, d0=np.array([0.9, 0.9]))
    with pytest.raises(ArtifactError, match="valid MDP"):
        load_mdp(path)
    _rewrite(path, d0=None)
    with pytest.raises(ArtifactError, match="d0"):
        load_mdp(path)
    assert zipfile.is_zipfile(path)


@pytest.mark.parametrize("key,entry", [("P", (0, 0, 0, 1)), ("r", (1, 0, 1)), ("d0", (0,))])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_load_refuses_nan_or_inf_tables(tmp_path, key, entry, bad):
    """Before: a NaN in P, r or d0 passed every check (NaN compares false), `evaluate` printed
    'policy value nan' with exit 0 and `pipeline --mdp` ended in a matplotlib traceback (fresh-user pass)."""
    path = tmp_path / "m.npz"
    mdp = random_tabular_mdp(2, 2, 2, 0)
    save_mdp(mdp, path)
    table = np.array(getattr(mdp, key), dtype=float)
    table[entry] = bad
    _rewrite(path, **{key: table})
    with pytest.raises(ArtifactError, match=rf"valid MDP: `{key}` must hold finite numbers; it has 1 NaN or "):
        load_mdp(path)
    pi = np.full((2, 2, 2), 0.5)
    pi[0, 0] = [bad, 0.5]
    with pytest.raises(UsageError, match="policy rows"):
        evaluate_policy(mdp, pi)


def test_per_step_reward_read_as_such_when_H_equals_S_equals_A():
    # H = S = A = 3: a (H, S, A) reward has the shape of an (S, A, S) one. With per-step P it is
    # r_h(s, a) (random tabular MDPs); reading it as r(s, a, s') gave wrong exact values.
    mdp = random_tabular_mdp(3, 3, 3, instance_seed=8)
    assert not mdp.reward_next_state
    for h in range(3):
        np.testing.assert_array_equal(mdp.expected_reward(h), mdp.r[h])
    # the simulator logs r_h(s_h, a_h) exactly (deterministic rewards)
    df = simulate(mdp, uniform_policy(mdp), 200, np.random.default_rng(0))
    want = mdp.r[df["step"].to_numpy(), df["state"].to_numpy(), df["action"].to_numpy()]
    np.testing.assert_array_equal(df["reward"].to_numpy(), want)
    # a stationary P keeps the r(s, a, s') reading of a (3, 3, 3) reward
    stat = TabularMDP(P=mdp.P[0], r=mdp.r, d0=mdp.d0, horizon=3)
    assert stat.reward_next_state
    np.testing.assert_allclose(stat.expected_reward(0), (mdp.P[0] * mdp.r).sum(-1))


# ----------------------------------------------------------------- sparse transition operator (issue 19)
def _dense_policy_values(mdp, pi):
    """The slow reference: backward induction with the dense (S, A, S) tables."""
    H, S = mdp.horizon, mdp.n_states
    V = np.zeros((H + 1, S))
    for h in range(H - 1, -1, -1):
        Q = mdp.expected_reward(h) + mdp.transition(h) @ V[h + 1]
        V[h] = ((pi if pi.ndim == 2 else pi[h]) * Q).sum(-1)
    return V


def _float_tolerance(mdp, vmax):
    """Both backward inductions sum at most S products per entry and step: each sum is within
    S * u * max|V| of the exact one (u = 2^-53), and P is stochastic, so the errors of H steps add up."""
    return 2 * mdp.horizon * mdp.n_states * np.finfo(float).eps * max(vmax, 1.0)


def _sparse_mdp(seed, stationary, S=30, A=4, H=6, keep=4):
    """A random MDP whose rows have at most ``keep`` nonzero next states, one terminal state."""
    rng = np.random.default_rng(seed)
    shape = (S, A, S) if stationary else (H, S, A, S)
    P = rng.dirichlet(np.ones(S), size=shape[:-1])
    cut = np.sort(P, axis=-1)[..., -keep][..., None]
    P = np.where(P >= cut, P, 0.0)
    P /= P.sum(-1, keepdims=True)
    r = rng.uniform(0.0, 1.0, size=(S, A, S) if stationary else (H, S, A))
    return TabularMDP(P=P, r=r, d0=rng.dirichlet(np.ones(S)), horizon=H, terminal_states=(S - 1,))


@pytest.mark.parametrize("stationary", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sparse_evaluation_equals_dense(seed, stationary):
    mdp = _sparse_mdp(seed, stationary)
    for h in range(mdp.horizon):
        op = mdp.transition_operator(h)
        assert type(op).__name__ == "csr_matrix"       # at most 4 of 30 next states: sparse
        np.testing.assert_array_equal(op.toarray(), mdp.transition(h).reshape(-1, mdp.n_states))
    rng = np.random.default_rng(100 + seed)
    pi = rng.dirichlet(np.ones(mdp.n_actions), size=(mdp.horizon, mdp.n_states))
    V = policy_values(mdp, pi)
    ref = _dense_policy_values(mdp, pi)
    tol = _float_tolerance(mdp, mdp.horizon)
    assert np.abs(V - ref).max() <= tol
    assert abs(V[0, 0] - ref[0, 0]) <= tol and V[0].max() > 0  # not both zero
    # value iteration: its value equals brute force over the dense tables
    _, Vstar, vstar = value_iteration(mdp)
    Vd = np.zeros_like(Vstar)
    for h in range(mdp.horizon - 1, -1, -1):
        Vd[h] = (mdp.expected_reward(h) + mdp.transition(h) @ Vd[h + 1]).max(-1)
    assert np.abs(Vstar - Vd).max() <= tol
    # the transposed product (a forward occupancy step) equals the dense einsum
    flow = rng.uniform(size=(mdp.n_states, mdp.n_actions))
    np.testing.assert_allclose(mdp.transition_operator(0).T @ flow.ravel(),
                               np.einsum("sa,sat->t", flow, mdp.transition(0)),
                               rtol=0, atol=2 * mdp.n_states * mdp.n_actions * np.finfo(float).eps * flow.sum())


def test_dense_mdp_keeps_dense_operator():
    mdp = random_tabular_mdp(6, 3, 4, instance_seed=5)    # Dirichlet(1) rows: every entry nonzero
    op = mdp.transition_operator(2)
    assert isinstance(op, np.ndarray) and np.shares_memory(op, mdp.transition(2))
    assert mdp.transition_operator(2) is op              # cached


def test_icu_sepsis_sparse_evaluation_equals_dense(icu):
    op = icu.transition_operator(0)
    assert type(op).__name__ == "csr_matrix" and op.nnz == np.count_nonzero(icu.transition(0))
    assert icu.transition_operator(7) is op             # stationary: built once
    for pi in (clinicians_policy(), np.full((716, 25), 1 / 25)):
        V = policy_values(icu, pi)
        ref = _dense_policy_values(icu, pi)
        assert np.abs(V - ref).max() <= _float_tolerance(icu, 1.0)  # ICU-Sepsis values are in [0, 1]
