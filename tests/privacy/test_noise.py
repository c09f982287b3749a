"""The noise-family object (privaudit.privacy.noise): lookup, calibration, events, costs, samplers."""

import math

import numpy as np
import pytest

from privaudit.core.errors import AccountingError, UsageError
from privaudit.privacy import accounting
from privaudit.privacy.budget import resolve_budget
from privaudit.privacy.events import GaussianEvent, LaplaceEvent, PrivacyUnit
from privaudit.privacy.mechanisms import add_noise, noise_bound
from privaudit.privacy.noise import (FAMILIES, GAUSSIAN, LAPLACE, NOISE_FAMILY_NAMES, gaussian_sigma, laplace_scale,
                                     noise_family)
from privaudit.privacy.samplers import exact_noise

UNIT = PrivacyUnit("episode_id", 1)


def test_lookup_by_name_and_unknown_name_refused():
    assert noise_family("gaussian") is GAUSSIAN and noise_family("laplace") is LAPLACE
    assert noise_family(GAUSSIAN) is GAUSSIAN
    assert NOISE_FAMILY_NAMES == ("gaussian", "laplace") and set(FAMILIES) == set(NOISE_FAMILY_NAMES)
    with pytest.raises(UsageError, match=r"`mechanism` must be one of \('gaussian', 'laplace'\). Found 'goe'"):
        noise_family("goe")
    with pytest.raises(UsageError, match="`noise_kind` must be one of"):
        noise_family(None, "noise_kind")


def test_family_facts():
    assert (GAUSSIAN.budget_unit, GAUSSIAN.norm, GAUSSIAN.definition, GAUSSIAN.scale_key, GAUSSIAN.pure) == (
        "rho", "l2", "zCDP", "sigma", False)
    assert (LAPLACE.budget_unit, LAPLACE.norm, LAPLACE.definition, LAPLACE.scale_key, LAPLACE.pure) == (
        "epsilon", "l1", "pure-DP", "laplace_b", True)
    assert str(GAUSSIAN) == "gaussian"


def test_calibration_is_the_paper_formula_rounded_up():
    assert GAUSSIAN.calibrate(2.0, 0.5) == gaussian_sigma(2.0, 0.5) == np.nextafter(2.0, math.inf)
    assert LAPLACE.calibrate(4.0, 2.0) == laplace_scale(4.0, 2.0) == np.nextafter(2.0, math.inf)
    with pytest.raises(UsageError, match="`rho`"):
        GAUSSIAN.calibrate(1.0, 0.0)
    with pytest.raises(UsageError, match="`l1`"):
        LAPLACE.calibrate(-1.0, 1.0)


@pytest.mark.parametrize("fam, budget", [(GAUSSIAN, dict(rho=0.3)), (LAPLACE, dict(epsilon=0.7))])
def test_event_built_from_calibration_costs_at_most_the_budget(fam, budget):
    b = resolve_budget(mechanism=fam.name, **budget)
    assert b.family is fam and fam.amount(b) == b.amount
    scale = fam.calibrate(3.0, fam.amount(b))
    ev = fam.event(3.0, scale, family="visits", unit=UNIT)
    assert isinstance(ev, LaplaceEvent if fam.pure else GaussianEvent)
    assert fam.cost(ev) <= b.amount
    assert b.guarantee(ev)["definition"] == fam.definition


def test_laplace_cost_of_a_gaussian_event_refused():
    ev = GAUSSIAN.event(1.0, 1.0, family="visits", unit=UNIT)
    assert GAUSSIAN.cost(ev) == accounting.event_rho(ev) == 0.5
    with pytest.raises(AccountingError):
        LAPLACE.cost(ev)


def test_stacked_sensitivity_l1_adds_l2_in_squares():
    assert LAPLACE.stacked_sensitivity(2.0, 9) == 18.0
    assert GAUSSIAN.stacked_sensitivity(2.0, 9) == 6.0


def test_dp_statement_and_std():
    assert LAPLACE.dp_statement(0.5, 1e-6) == (0.5, 0.0)
    eps, delta = GAUSSIAN.dp_statement(0.5, 1e-6)
    assert delta == 1e-6 and eps == accounting.zcdp_to_dp(0.5, 1e-6)
    assert GAUSSIAN.std(3.0) == 3.0 and LAPLACE.std(3.0) == pytest.approx(3.0 * math.sqrt(2))


@pytest.mark.parametrize("fam", [GAUSSIAN, LAPLACE])
def test_samplers_are_the_modules_streams(fam):
    """The family's samplers draw what the modules draw at the same seed (same random streams)."""
    got = fam.exact_noise(2.5, 1000, rng=np.random.default_rng(7))
    np.testing.assert_array_equal(got, exact_noise(fam.name, 2.5, 1000, rng=np.random.default_rng(7)))
    got = fam.rounded_noise(np.random.default_rng(7), 2.5, 1000)
    want = add_noise(np.zeros(1000, dtype=np.int64), mechanism=fam.name, scale=2.5, rng=np.random.default_rng(7),
                     noise="rounded")
    np.testing.assert_array_equal(got, want)
    assert got.std() == pytest.approx(fam.std(2.5), rel=0.15)
    assert fam.exact_sampler(2.5) is fam.exact_sampler(2.5)  # cached


def test_tail_half_width_is_noise_bound():
    for fam in (GAUSSIAN, LAPLACE):
        for noise in ("exact", "continuous"):
            half = fam.tail_half_width(2.0, 100.0, 1e-3, exact=noise == "exact")
            assert noise_bound(fam.name, 2.0, 100, 1e-3, noise=noise) == np.nextafter(2 * half, math.inf)
    assert LAPLACE.tail_half_width(2.0, 100.0, 1e-3, exact=False) == 2.0 * math.log(100.0 / 1e-3)
