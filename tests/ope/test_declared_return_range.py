"""Session 10 (fresh user): `evaluate --logs` and `pipeline --hold-out` printed a "certified value" of -10 and an
interval [-10, 10] for a spec declaring `return_bound` [-1, 1] (H = 10, rewards in [-1, 1]): numbers outside the
range the spec declares for every return, where the pipeline's other values are clipped into it. Every policy's
value lies in the declared return range, so clipping the bound and the interval into it keeps them valid."""

from __future__ import annotations

import pytest

from privaudit.core.spec import DomainSpec
from privaudit.ope.evaluate import PolicyEvaluation
from privaudit.privacy.budget import resolve_budget

H = 10


def _spec(return_bound):
    doc = {"format_version": 1, "dataset_id": "tiny", "n_states": 4, "n_actions": 2, "horizon": H,
           "reward_range": [-1.0, 1.0], "terminal_states": [3],
           "privacy_unit": {"column": "unit_id", "max_episodes": 1}}
    if return_bound is not None:
        doc["return_bound"] = list(return_bound)
    return DomainSpec.from_dict(doc)


@pytest.mark.parametrize("return_bound,expected", [((-1.0, 1.0), (-1.0, 1.0)), (None, (-H, H))])
def test_the_bound_and_interval_lie_in_the_declared_return_range(return_bound, expected):
    plan = PolicyEvaluation.plan(_spec(return_bound), resolve_budget(rho=1.0), coverage=100.0)
    for noisy in ({"value": -5.0, "lost_mass": 2.0, "variance": 1e9}, {"value": 1e3, "lost_mass": 0.0,
                                                                        "variance": 0.0}):
        out = plan.certify(noisy)
        lo, hi = out["interval"]
        for x in (out["estimate"], out["lower_bound"], lo, hi):
            assert expected[0] <= x <= expected[1], out
    empty = plan.certify({"value": -5.0, "lost_mass": 2.0, "variance": 1e9})
    assert empty["lower_bound"] == expected[0] and empty["interval"] == [expected[0], expected[1]]
