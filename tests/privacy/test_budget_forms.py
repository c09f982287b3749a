"""``privacy.budget.resolve_budget``: the one meaning of rho / epsilon / delta at every entry point, the same from
Python (``BudgetRequest``) as from the CLI (docs/privacy.md, "Budget flags")."""

from __future__ import annotations

import pytest

from privaudit.core.errors import UsageError
from privaudit.learners.options import BudgetRequest
from privaudit.privacy.accounting import DEFAULT_REPORT_DELTA, dp_to_zcdp
from privaudit.privacy.budget import accepted_budgets, resolve_budget


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
