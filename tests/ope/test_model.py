"""The exact statistics of ``privaudit.ope``: the sensitivities the noise is calibrated to, checked by brute force."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from privaudit.core.errors import UsageError
from privaudit.core.spec import DomainSpec
from privaudit.ope.evaluate import PolicyEvaluation, _ranges
from privaudit.ope.model import (capped_model_value, evaluation_frame, held_out_stays, lipschitz_bounds,
                                 policy_table_for)
from privaudit.privacy.budget import resolve_budget

S, A, H = 4, 2, 3


def _spec(public: bool, reward_range=(0.0, 1.0)) -> DomainSpec:
    doc = {"format_version": 1, "dataset_id": "tiny", "n_states": S, "n_actions": A, "horizon": H,
           "reward_range": list(reward_range),
           "terminal_states": [3], "privacy_unit": {"column": "unit_id", "max_episodes": 1}}
    if public:
        doc["public_reward"] = {"kind": "next_state", "values": {"3": 1.0}}
    return DomainSpec.from_dict(doc)


def _unit(rng, uid: int) -> list[dict]:
    """One stay of random length, random states/actions, ending in the terminal state 3 half of the time."""
    rows, s = [], int(rng.integers(0, 3))
    for h in range(H):
        s2 = 3 if rng.random() < 0.3 else int(rng.integers(0, 3))
        rows.append({"episode_id": uid, "unit_id": uid, "step": h, "state": s, "action": int(rng.integers(0, A)),
                     "next_state": s2, "reward": float(s2 == 3)})
        if s2 == 3:
            break
        s = s2
    return rows


def _stats(rows, spec, pi, m, plan):
    mv = capped_model_value(held_out_stays(pl.DataFrame(rows), spec), pi, spec, m)
    return np.array([mv.value, mv.lost_mass, float(np.dot(_ranges(spec, plan.lipschitz) ** 2, mv.weight_squares))])


@pytest.mark.parametrize("public", [True, False])
@pytest.mark.parametrize("reward_range", [(0.0, 1.0), (-1.0, 1.0)])
def test_substituting_one_unit_moves_each_statistic_by_at_most_its_sensitivity(public, reward_range):
    """150 random (dataset, substitution) pairs on a tiny domain with m near the counts, where the caps bind;
    with r_min < 0 the terminal state earns the frame's terminal reward for each remaining step."""
    spec = _spec(public, reward_range)
    rng = np.random.default_rng(11)
    worst = np.zeros(3)
    for trial in range(150):
        m = float(rng.choice([0.5, 2.0, 5.0, 20.0]))
        plan = PolicyEvaluation.plan(spec, resolve_budget(rho=1.0), m)
        bound = np.array([plan.l2_lattice[f] * plan.step(f) for f in ("value", "lost_mass", "variance")])
        pi = rng.dirichlet(np.ones(A), size=(H, S)) if trial % 2 else np.eye(A)[rng.integers(0, A, (H, S))]
        units = [_unit(rng, u) for u in range(int(rng.integers(1, 12)))]
        other = units.copy()
        other[0] = [dict(r, episode_id=0, unit_id=0) for r in _unit(rng, 0)]
        d = np.abs(_stats(sum(units, []), spec, pi, m, plan) - _stats(sum(other, []), spec, pi, m, plan))
        assert np.all(d <= bound), (trial, d, bound)
        worst = np.maximum(worst, d / bound)
    assert worst[0] > 0.05, worst  # the pairs do move V' (the check is not vacuous)


def test_lipschitz_bounds_use_the_public_terminal_reward():
    assert lipschitz_bounds(_spec(True)).tolist() == [1.0, 1.0, 1.0, 0.0]  # one reward, on entering state 3
    assert lipschitz_bounds(_spec(False)).tolist() == [3.0, 2.0, 1.0, 0.0]


def test_lipschitz_bounds_with_negative_rewards_count_the_terminal_reward_of_the_remaining_steps():
    """Range [-1, 1]: r'' = (r + 1) / 2, so r''(3) = 1, r''(other) = 1/2, and the dead earn 1/2 per step."""
    # h = 2: max(1 + 0, 1/2 + 0) = 1; h = 1: entering 3 earns 1 + 1/2 (one dead step), elsewhere 1/2 + 1;
    # h = 0: entering 3 earns 1 + 2 (1/2), elsewhere 1/2 + 1.5
    assert lipschitz_bounds(_spec(True, (-1.0, 1.0))).tolist() == [2.0, 1.5, 1.0, 0.0]
    assert lipschitz_bounds(_spec(False, (-1.0, 1.0))).tolist() == [3.0, 2.0, 1.0, 0.0]


@pytest.mark.parametrize("reward_range", [(-1.0, 1.0), (-2.0, -0.5), (0.5, 2.0)])
def test_model_value_maps_back_to_the_declared_value_for_any_reward_range(reward_range):
    """m -> 0 (no caps): the frame's declared value equals backward induction on the empirical model in
    declared units, the terminal state earning 0 (logs given in bounded, scaled units)."""
    spec = _spec(False, reward_range)
    lo, hi = reward_range
    rng = np.random.default_rng(3)
    rows = sum([_unit(rng, u) for u in range(300)], [])
    raw = rng.uniform(lo, hi, len(rows))
    df = pl.DataFrame(rows).with_columns(reward=(raw - lo) / (hi - lo))  # as bounding scales them
    pi = rng.dirichlet(np.ones(A), size=(H, S))
    mv = capped_model_value(held_out_stays(df, spec), pi, spec, 1e-9)
    a = {c: df[c].to_numpy() for c in ("step", "state", "action", "next_state")}
    n = np.zeros((H, S, A)); N = np.zeros((H, S, A, S)); Rs = np.zeros((H, S, A))
    np.add.at(n, (a["step"], a["state"], a["action"]), 1)
    np.add.at(N, (a["step"], a["state"], a["action"], a["next_state"]), 1)
    np.add.at(Rs, (a["step"], a["state"], a["action"]), raw)
    V = np.zeros(S)
    for h in range(H - 1, -1, -1):
        V[3] = 0.0  # terminal: declared reward 0 from then on
        with np.errstate(invalid="ignore", divide="ignore"):
            Q = np.where(n[h] > 0, (Rs[h] + N[h] @ V) / n[h], 0.0)
        V = (pi[h] * Q).sum(axis=1)
    d0 = np.bincount(a["state"][a["step"] == 0], minlength=S) / 300
    assert (n[:, :3] > 0).all()  # every cell visited: no mass absorbed
    assert evaluation_frame(spec).declared(mv.value, H) == pytest.approx(float(d0 @ V), rel=1e-9, abs=1e-12)


def test_a_policy_row_that_is_not_a_distribution_is_refused_with_its_step_and_state():
    pi = np.full((H, S, A), 0.5)
    pi[1, 2] = [0.7, 0.7]
    with pytest.raises(UsageError, match=r"step h=1, state s=2 sums to 1.4"):
        policy_table_for(pi, _spec(True))
    with pytest.raises(UsageError, match=r"shape \(H, S, A\) = \(3, 4, 2\)"):
        policy_table_for(np.full((S, A + 1), 1 / 3), _spec(True))


def test_logs_without_a_unit_column_take_each_stay_as_its_unit():
    """Before: a frame without ``unit_id`` (each episode its own unit) raised a polars DuplicateError."""
    rng = np.random.default_rng(0)
    df = pl.DataFrame(sum([_unit(rng, u) for u in range(5)], []))
    with_units = held_out_stays(df, _spec(True))
    without = held_out_stays(df.drop("unit_id"), _spec(True))
    assert without.n_units == with_units.n_units == 5
    assert np.array_equal(without.start_counts, with_units.start_counts)


def test_one_stay_is_kept_per_unit_and_depends_on_that_unit_alone():
    """Three different stays per unit: one is kept, the same one as when the unit is alone in the logs."""
    rng = np.random.default_rng(1)
    stays = [[dict(r, episode_id=3 * u + j, unit_id=u) for r in _unit(rng, u)] for u in range(6) for j in range(3)]
    df = pl.DataFrame(sum(stays, []))
    kept = held_out_stays(df, _spec(True))
    alone = [held_out_stays(df.filter(pl.col("unit_id") == u), _spec(True)) for u in range(6)]
    assert kept.n_units == 6 and all(a.n_units == 1 for a in alone)
    assert kept.count.sum() == sum(a.count.sum() for a in alone) < df.height
    assert np.array_equal(kept.start_counts, sum(a.start_counts for a in alone))
