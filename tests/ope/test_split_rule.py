"""The held-out fraction and the coverage rule (issue 28, item 4: certificates tight enough to matter).

Before this change the split was fixed at one half (xxh64 mod 2) and m was a constant 10,000 whatever
the budget or the number of units.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from privaudit.core.errors import UsageError
from privaudit.core.spec import DomainSpec
from privaudit.mdp.icu_sepsis import icu_sepsis_spec_doc
from privaudit.ope.evaluate import LEAST_RATIO, NOISE_TARGET, UNITS_PER_COVERAGE, PolicyEvaluation, coverage_rule
from privaudit.ope.split import HELD_OUT, in_part, unit_part
from privaudit.privacy.budget import resolve_budget

IDS = pl.DataFrame({"unit_id": np.arange(20_000)})


def held(fraction: float) -> set:
    return set(IDS.filter(in_part("unit_id", HELD_OUT, fraction))["unit_id"])


@pytest.mark.parametrize("fraction", [0.1, 0.3, 0.7])
def test_the_fraction_sets_the_share_of_held_out_units(fraction):
    """20,000 ids: the share is within 5 sd of the fraction (false failure < 1e-6 for a fair hash)."""
    b = held(fraction)
    sd = math.sqrt(fraction * (1 - fraction) / 20_000)
    assert abs(len(b) / 20_000 - fraction) < 5 * sd
    train = set(IDS.filter(in_part("unit_id", 1 - HELD_OUT, fraction))["unit_id"])
    assert not (train & b) and len(train | b) == 20_000


def test_a_larger_fraction_holds_out_a_superset():
    """The part is a threshold on one hash: the units certified at 0.3 are also held out at 0.5."""
    assert held(0.3) < held(0.5)


@pytest.mark.parametrize("bad", [0, 1, 1.5, -0.2, float("nan"), True, "half"])
def test_a_fraction_outside_the_open_unit_interval_is_refused(bad):
    with pytest.raises(UsageError, match="held-out fraction must lie strictly between 0 and 1"):
        unit_part(pl.col("unit_id"), bad)


def _plan_and_tail(spec, budget, m):
    plan = PolicyEvaluation.plan(spec, budget, m)
    return plan, plan.sigma("value") * math.sqrt(2 * math.log(1 / (0.25 * 0.05)))


@pytest.mark.parametrize("epsilon", [1.0, 5.0])
def test_coverage_rule_puts_the_noise_tail_at_its_target(epsilon):
    """Without a unit estimate, m is where the V' noise tail (95% bound) is NOISE_TARGET * R_0 (= 1 here)."""
    spec = DomainSpec.from_dict(icu_sepsis_spec_doc())
    budget = resolve_budget(epsilon=epsilon, delta=1e-6)
    m = coverage_rule(spec, budget)
    _, tail = _plan_and_tail(spec, budget, m)
    assert tail == pytest.approx(NOISE_TARGET, rel=1e-5)
    _, tail_half = _plan_and_tail(spec, budget, m / 2)
    assert tail_half == pytest.approx(2 * NOISE_TARGET, rel=1e-5)  # the tail is proportional to 1/m


def test_coverage_rule_grows_with_the_estimated_units_and_the_noise():
    spec = DomainSpec.from_dict(icu_sepsis_spec_doc())
    small, big = resolve_budget(epsilon=1.0, delta=1e-6), resolve_budget(epsilon=5.0, delta=1e-6)
    assert coverage_rule(spec, small) > 3 * coverage_rule(spec, big)  # noisier budget: larger m
    assert coverage_rule(spec, big, units=1e7) == pytest.approx(1e7 / UNITS_PER_COVERAGE)
    m_noise = coverage_rule(spec, big)
    assert coverage_rule(spec, big, units=4 * m_noise) == pytest.approx(m_noise)  # the noise term rules
    # few units: m <= units / LEAST_RATIO, so the start cell (which passes min(1, n/m)) is never capped
    assert coverage_rule(spec, big, units=1329) == pytest.approx(1329 / LEAST_RATIO)
    assert coverage_rule(spec, big, units=0) == 1.0
