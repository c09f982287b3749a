"""Soundness per claim kind (issue 14): the generic (epsilon, delta) test is the default, and the
GDP test is an opt-in valid only for continuous Gaussian noise.

rho-zCDP does not imply sqrt(2 rho)-GDP. Three correct mechanisms of one count (sensitivity 1)
whose rho claims are true (``privaudit.audit.mechanisms.catalogue.ClaimKindMechanism``): the exact discrete
Gaussian N_Z(0, 1) claimed as rho = 0.5, randomized response at epsilon 1 claimed as rho = 0.5,
rounded Laplace at epsilon 0.5 claimed as rho = 0.125. At 20 000 runs per side with fixed seeds:

* the default generic test finds no violation: each audit errs with probability <= 0.05 at a
  mechanism exactly at its claim; these sit far below theirs (measured eps_lb 1.5 / 1.0 / 0.4 vs
  claimed 5.22 / 5.22 / 2.42), so a false failure needs a bound error of many standard deviations;
* the GDP test, wrongly opted in, calls randomized response broken: its trade-off point at the
  symmetric threshold is (0.269, 0.269), i.e. mu = 2 Phi^-1(0.731) = 1.23 > claimed mu = 1; with
  18 000 evaluation runs the mu estimate has sd ~0.03, so mu_lb > 1 fails with probability < 1e-6.
"""

from __future__ import annotations

import pytest

from privaudit.audit import AuditSettings, Claim, run_audit
from privaudit.core.errors import UsageError
from privaudit.privacy.budget import PURE_EPSILON_MAX, RHO_MAX
from privaudit.audit.mechanisms.catalogue import CLAIM_KIND, ClaimKindMechanism, scalar_pair

TRIALS = 20_000


@pytest.mark.parametrize("name", CLAIM_KIND)
def test_generic_default_never_flags_a_true_rho_claim(name):
    m = ClaimKindMechanism(name)
    claim = m.claim()
    assert claim.kind == "generic" and Claim.from_rho(0.5, 1e-6).kind == "generic"  # the default
    r = run_audit(m, claim=claim, pair=scalar_pair(), trials=TRIALS, seed=3, progress=False)
    assert r.verdict == "no violation found", r.data["messages"]
    assert r.epsilon_lower_bound == r.data["method"]["generic"]["epsilon_lower_bound"]
    assert r.data["method"]["epsilon_lower_bound_from"] == "generic"
    assert r.data["method"]["gaussian"]["valid"] is False and "not opted in" in r.data["method"]["gaussian"]["meaning"]


def test_gdp_opt_in_is_what_calls_randomized_response_broken():
    m = ClaimKindMechanism("randomized_response_rho")
    r = run_audit(m, claim=m.claim(kind="gaussian"), pair=scalar_pair(), trials=TRIALS, seed=3, progress=False)
    assert r.verdict == "violation" and r.data["method"]["gaussian"]["mu_lower_bound"] > 1.0
    assert r.data["method"]["epsilon_lower_bound_from"].startswith("gaussian")
    assert r.data["method"]["gaussian"]["valid"] is True and "opted in" in r.data["method"]["gaussian"]["meaning"]


def test_one_event_one_bonferroni_share():
    """The mirror-image directions share one choice: one evaluated event, each bound at alpha / 2."""
    m = ClaimKindMechanism("laplace_rho")
    r = run_audit(m, claim=m.claim(), pair=scalar_pair(), trials=2000, seed=1, progress=False,
                  settings=AuditSettings(confidence=0.9))
    assert len(r.data["events"]) == 1 and r.data["method"]["bonferroni"]["alpha_per_bound"] == pytest.approx(0.05)


def test_claims_follow_the_budget_too_large_rule():
    """A claim is checked by the rule of every budget (``privacy.budget.check_not_too_large``): before, a rho
    claim of 1e308 failed with "zCDP->DP conversion failed numerically"."""
    assert Claim.from_rho(RHO_MAX, 1e-6).epsilon > RHO_MAX
    assert Claim.from_epsilon(PURE_EPSILON_MAX, 0.0).epsilon == PURE_EPSILON_MAX
    for make, match in ((lambda: Claim.from_rho(1e308, 1e-6), "^`claim_rho` = 1e308 is too large: its epsilon"),
                        (lambda: Claim.from_epsilon(1e308, 1e-6), "^`claim_epsilon` = 1e308 is too large: its conv"),
                        (lambda: Claim.from_epsilon(1e300, 0.0), r"^`claim_epsilon` = 1e300 is too large: the rho")):
        with pytest.raises(UsageError, match=match):
            make()
