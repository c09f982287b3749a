"""Simulation: determinism, log structure, and statistical agreement with the MDP."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from scipy import stats

from privaudit.core.errors import UsageError
from privaudit.mdp import TabularMDP, evaluate_policy
from privaudit.mdp.icu_sepsis import clinicians_policy, load_icu_sepsis
from privaudit.mdp.random_tabular import random_tabular_mdp
from privaudit.mdp.simulate import (LOG_COLUMNS, _RowSampler, behaviour_policy, random_base_policy, simulate,
                                    write_logs)


@pytest.fixture(scope="module")
def icu():
    return load_icu_sepsis(horizon=20)


@pytest.fixture(scope="module")
def icu_log(icu):
    return simulate(icu, clinicians_policy(), 20_000, rng=np.random.default_rng(2026))


def _check_structure(df: pl.DataFrame, mdp: TabularMDP):
    """Every invariant of the standard schema, checked over the whole table."""
    assert df.columns == list(LOG_COLUMNS)
    e, h = df["episode_id"].to_numpy(), df["step"].to_numpy()
    first = np.r_[True, e[1:] != e[:-1]]
    last = np.r_[e[1:] != e[:-1], True]
    assert (np.diff(e) >= 0).all()                                  # sorted by episode
    np.testing.assert_array_equal(h, np.where(first, 0, np.r_[0, h[:-1]] + 1))  # steps 0,1,2,...
    assert h.max() <= mdp.horizon - 1
    s, s2 = df["state"].to_numpy(), df["next_state"].to_numpy()
    np.testing.assert_array_equal(s[1:][~first[1:]], s2[:-1][~last[:-1]])  # next_state(h) = state(h+1)
    term, trunc = df["terminated"].to_numpy(), df["truncated"].to_numpy()
    terminal = np.isin(s2, mdp.terminal_states)
    np.testing.assert_array_equal(term, terminal)                   # terminated iff entering a terminal state
    assert not (term & ~last).any() and not (trunc & ~last).any()    # flags only on last rows
    assert not (term & trunc).any()
    np.testing.assert_array_equal(trunc, last & ~term & (h == mdp.horizon - 1))
    assert (last <= (term | (h == mdp.horizon - 1))).all()          # every episode ends by one of the two
    assert not np.isin(s, mdp.terminal_states).any()
    np.testing.assert_array_equal(df["unit_id"].to_numpy(), e)


def test_icu_log_structure_and_rewards(icu, icu_log):
    _check_structure(icu_log, icu)
    assert icu_log["episode_id"].n_unique() == 20_000
    # Realized reward r(s, a, s') = 1 exactly on entering survival (714).
    np.testing.assert_array_equal(icu_log["reward"].to_numpy(), (icu_log["next_state"] == 714).cast(float).to_numpy())


def test_icu_clinicians_mean_return(icu, icu_log):
    # Returns are Bernoulli(v) with v = 0.69198 (reference 0.6920). |mean - v| <= 3 standard
    # errors fails with probability ~0.27% for a correct simulator (normal approximation,
    # n = 20,000); this fixed seed is one draw.
    returns = icu_log.group_by("episode_id").agg(pl.col("reward").sum())["reward"].to_numpy()
    v = evaluate_policy(icu, clinicians_policy())
    assert abs(v - 0.6920) < 5e-4
    se = returns.std(ddof=1) / np.sqrt(returns.size)
    assert abs(returns.mean() - v) <= 3 * se, (returns.mean(), v, se)


def test_same_seed_same_bytes(tmp_path, icu):
    pi = behaviour_policy("mix:0.3", icu)
    paths = []
    for i, seed in enumerate((7, 7, 8)):
        df = simulate(icu, pi, 500, rng=np.random.default_rng(seed))
        paths.append(write_logs(df, tmp_path / f"log{i}.parquet"))
    b = [p.read_bytes() for p in paths]
    assert b[0] == b[1]
    assert b[0] != b[2]
    assert pl.read_parquet(paths[0]).equals(simulate(icu, pi, 500, rng=np.random.default_rng(7)))


def _pooled_chi_square(observed: np.ndarray, probs: np.ndarray) -> tuple[float, int, float]:
    """Pearson chi-square pooled over rows: observed (R, K) counts vs probs (R, K).

    In each row with n_r > 0 the cells with expected count n_r p < 5 are merged into one
    bin (Cochran's rule); the row contributes sum over bins (O - E)^2 / E with
    (bins - 1) degrees of freedom. Given the row totals the rows are independent
    multinomials (each visit's next outcome is a fresh draw), so the sum is asymptotically
    chi-square with the summed degrees of freedom.
    Returns (statistic, df, smallest expected count of a bin).
    """
    n = observed.sum(1, keepdims=True)
    keep = n[:, 0] > 0
    O, E = observed[keep].astype(float), n[keep] * probs[keep]
    small = E < 5
    O_big, E_big = np.where(small, 0.0, O), np.where(small, 1.0, E)
    stat = float(((O_big - np.where(small, 0.0, E)) ** 2 / E_big).sum())
    O_m, E_m = (O * small).sum(1), (E * small).sum(1)
    has_m = small.any(1)
    stat += float(((O_m[has_m] - E_m[has_m]) ** 2 / E_m[has_m]).sum())
    dof = int((~small).sum() + has_m.sum() - keep.sum())
    emin = float(min(E[~small].min(initial=np.inf), E_m[has_m].min(initial=np.inf)))
    return stat, dof, emin


@pytest.fixture(scope="module")
def random_log():
    mdp = random_tabular_mdp(states=4, actions=3, horizon=3, instance_seed=4)
    pi = behaviour_policy("mix:0.5", mdp)
    return mdp, pi, simulate(mdp, pi, 20_000, rng=np.random.default_rng(99))


def _transition_counts(df, S, A, H):
    cols = [df[c].to_numpy() for c in ("step", "state", "action", "next_state")]
    return np.bincount(np.ravel_multi_index(cols, (H, S, A, S)), minlength=H * S * A * S).reshape(H * S * A, S)


def test_random_tabular_transitions_match_P(random_log):
    mdp, _, df = random_log
    _check_structure(df, mdp)
    S, A, H = mdp.n_states, mdp.n_actions, mdp.horizon
    O = _transition_counts(df, S, A, H)
    stat, dof, emin = _pooled_chi_square(O, mdp.P.reshape(H * S * A, S))
    assert emin >= 1  # Cochran: every bin's expected count >= 1 (small cells merged)
    # False-failure probability 0.1% (p-value threshold) for a correct simulator.
    assert stats.chi2.sf(stat, dof) > 1e-3, (stat, dof)
    # Power: the same counts are rejected against another instance's transitions.
    other = random_tabular_mdp(states=4, actions=3, horizon=3, instance_seed=5).P.reshape(H * S * A, S)
    stat_o, dof_o, _ = _pooled_chi_square(O, other)
    assert stats.chi2.sf(stat_o, dof_o) < 1e-12


def test_random_tabular_actions_and_starts_match(random_log):
    mdp, pi, df = random_log
    S, A = mdp.n_states, mdp.n_actions
    O = np.bincount(df["state"].to_numpy() * A + df["action"].to_numpy(), minlength=S * A).reshape(S, A)
    stat, dof, emin = _pooled_chi_square(O, pi)
    assert emin >= 5 and stats.chi2.sf(stat, dof) > 1e-3  # false failure 0.1%
    starts = df.filter(pl.col("step") == 0)["state"].to_numpy()
    stat, dof, emin = _pooled_chi_square(np.bincount(starts, minlength=S)[None], mdp.d0[None])
    assert emin >= 5 and stats.chi2.sf(stat, dof) > 1e-3  # false failure 0.1%
    # Rewards are r_h(s, a) exactly.
    np.testing.assert_array_equal(df["reward"].to_numpy(),
                                  mdp.r[df["step"].to_numpy(), df["state"].to_numpy(), df["action"].to_numpy()])


def test_row_sampler_matches_slow_reference():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.full(6, 0.3), size=50)
    p[p < 0.05] = 0.0                                     # zero-probability outcomes in the middle/ends
    p /= p.sum(1, keepdims=True)
    rows = rng.integers(0, 50, size=5000)
    u = rng.random(5000)
    u[:3] = [0.0, np.nextafter(1.0, 0.0), 0.5]           # extreme uniforms
    fast = _RowSampler(p).sample(rows, u)
    slow = np.array([np.searchsorted(np.cumsum(p[r]) / p[r].sum(), x, side="right") for r, x in zip(rows, u)])
    slow = np.minimum(slow, [np.flatnonzero(p[r])[-1] for r in rows])
    np.testing.assert_array_equal(fast, slow)
    assert (p[rows, fast] > 0).all()                      # never a zero-probability outcome


def test_behaviour_policies(icu):
    np.testing.assert_allclose(behaviour_policy("mix:0.25", icu), 0.25 / 25 + 0.75 * clinicians_policy())
    np.testing.assert_array_equal(behaviour_policy("mix:0", icu), clinicians_policy())
    np.testing.assert_array_equal(behaviour_policy("uniform", icu), np.full((716, 25), 1 / 25))
    m = random_tabular_mdp(3, 2, 2, 0)
    np.testing.assert_allclose(behaviour_policy("mix:0.5", m), 0.25 + 0.5 * random_base_policy(3, 2))
    for bad, msg in (("clinicians", "not defined for the random-tabular MDP"), ("mix:1.5", "in \\[0, 1\\]"),
                     ("mix:abc", "mix:W"), ("greedy", "choose one of: uniform, mix:W")):
        with pytest.raises(UsageError, match=msg):
            behaviour_policy(bad, m)


def test_simulate_refuses_bad_input():
    m = random_tabular_mdp(3, 2, 2, 0)
    with pytest.raises(UsageError, match="n_episodes"):
        simulate(m, behaviour_policy("uniform", m), 0, rng=np.random.default_rng(0))
    with pytest.raises(UsageError, match="policy"):
        simulate(m, np.ones((3, 3)), 5, rng=np.random.default_rng(0))
    bad = TabularMDP(P=m.P, r=m.r, d0=np.array([0.5, 0.5, 0.0]), horizon=2, terminal_states=(1,))
    with pytest.raises(UsageError, match="terminal"):
        simulate(bad, behaviour_policy("uniform", m), 5, rng=np.random.default_rng(0))


def test_registry_entry_behaviours_extend_names():
    # An MDP entry may name its own behaviours and the base of mix:W (the extension point
    # used by MDPs other than ICU-Sepsis).
    from privaudit.mdp.registry import MDPEntry

    m = random_tabular_mdp(3, 2, 2, 0)
    greedy = np.tile([1.0, 0.0], (3, 1))
    entry = MDPEntry(build=None, options={}, spec_doc=None, summary="",
                     behaviours={"greedy": lambda mdp: greedy}, mix_base="greedy")
    np.testing.assert_array_equal(behaviour_policy("greedy", m, entry=entry), greedy)
    np.testing.assert_allclose(behaviour_policy("mix:0.4", m, entry=entry), 0.4 * 0.5 + 0.6 * greedy)
    with pytest.raises(UsageError, match="greedy"):
        behaviour_policy("clinicians", m, entry=entry)
