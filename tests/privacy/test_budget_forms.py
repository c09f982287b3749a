"""``privacy.budget.resolve_budget``: the one meaning of rho / epsilon / delta at every entry point, the same from
Python (``BudgetRequest``) as from the CLI (docs/privacy.md, "Budget flags")."""

from __future__ import annotations

import numpy as np
import pytest

from privaudit.core.errors import UsageError
from privaudit.core.formatting import num
from privaudit.learners.options import BudgetRequest
from privaudit.privacy.accounting import DEFAULT_REPORT_DELTA, dp_to_zcdp, zcdp_to_dp
from privaudit.privacy.budget import PURE_EPSILON_MAX, RHO_MAX, accepted_budgets, resolve_budget


@pytest.mark.parametrize("kw, want", [
    (dict(rho=0.5), ("gaussian", 0.5, None, DEFAULT_REPORT_DELTA)),
    (dict(rho=0.5, delta=1e-5), ("gaussian", 0.5, None, 1e-5)),   # before: refused ("not both")
    (dict(epsilon=2, delta=1e-5), ("gaussian", dp_to_zcdp(2, 1e-5), None, 1e-5)),
    (dict(epsilon=2), ("laplace", 2.0, 2.0, 0.0)),                # before: refused (Gaussian needs delta)
    (dict(epsilon=2, delta=0), ("laplace", 2.0, 2.0, 0.0)),       # (E, 0)-DP is pure E-DP
])
def test_each_form_has_one_meaning(kw, want):
    for b in (resolve_budget(**kw), BudgetRequest(**kw).resolve()):
        assert (b.mechanism, b.rho, b.epsilon, b.delta) == want
        assert b.requested == {k: float(v) for k, v in kw.items() if not (k == "delta" and v == 0)}


@pytest.mark.parametrize("kw, match", [
    (dict(), "give a budget"),
    (dict(delta=1e-5), "`delta` alone is not a budget"),
    (dict(rho=1, epsilon=1), "not both"),
    (dict(epsilon=1, families=("gaussian",)), "`epsilon` alone is a pure epsilon-DP budget"),
    (dict(rho=1, mechanism="laplace", families=("gaussian",)), "not available here"),
])
def test_refusals_name_the_accepted_combinations(kw, match):
    families = kw.get("families", ("gaussian", "laplace"))
    with pytest.raises(UsageError, match=match) as e:
        resolve_budget(**kw)
    assert str(e.value).endswith(accepted_budgets(families) + ".")
    assert ("`epsilon` E alone" in str(e.value)) == ("laplace" in families)


def test_gaussian_only_learners_refuse_epsilon_alone_from_python():
    with pytest.raises(UsageError, match="Gaussian"):
        BudgetRequest(epsilon=1).resolve(families=("gaussian",))


@pytest.mark.parametrize("kw, name, limit", [
    (dict(rho=RHO_MAX), "rho", RHO_MAX),
    (dict(rho=RHO_MAX, delta=1e-300), "rho", RHO_MAX),
    (dict(epsilon=RHO_MAX, delta=0.999), "epsilon", RHO_MAX),
    (dict(epsilon=PURE_EPSILON_MAX), "epsilon", PURE_EPSILON_MAX),
])
def test_the_largest_budget_is_accepted_and_the_next_double_refused(kw, name, limit):
    """One rule (``check_not_too_large``) at every delta: the limit itself converts, the double above it is
    refused in the words of every entry point (before: "zCDP->DP conversion failed numerically" for epsilon with
    a delta, and a rho claim in the audit)."""
    b = resolve_budget(**kw)
    assert 0 < b.rho <= RHO_MAX * (1 + 1e-15) and zcdp_to_dp(b.rho, b.delta or DEFAULT_REPORT_DELTA) > 0
    above = {**kw, name: float(np.nextafter(limit, np.inf))}
    with pytest.raises(UsageError, match=f"^`{name}` = .* is too large: .* The largest accepted is {num(limit)} "):
        resolve_budget(**above)

