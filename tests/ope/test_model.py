"""The exact statistics of ``privaudit.ope``: the sensitivities the noise is calibrated to, checked by brute force."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from privaudit.core.errors import UsageError
from privaudit.core.spec import DomainSpec
from privaudit.ope.evaluate import PolicyEvaluation, _ranges
from privaudit.ope.model import capped_model_value, held_out_stays, lipschitz_bounds, policy_table_for
from privaudit.privacy.budget import resolve_budget

S, A, H = 4, 2, 3


def _spec(public: bool) -> DomainSpec:
    doc = {"format_version": 1, "dataset_id": "tiny", "n_states": S, "n_actions": A, "horizon": H, "reward_range": [0.0, 1.0],
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
def test_substituting_one_unit_moves_each_statistic_by_at_most_its_sensitivity(public):
    """150 random (dataset, substitution) pairs on a tiny domain with m near the counts, where the caps bind."""
    spec = _spec(public)
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
