"""The pipeline's privacy budget: the split between releases and the composed guarantee.

The pipeline touches the private logs through at most two mechanisms:

* the tabular count release (``privaudit.stats.release``), always;
* DP-VAPVI (``privaudit.learners.linear``), when the spec declares a feature
  map: its 5H noisy statistics are a second release.

Everything else (DP-APVI on the release, evaluation on a public MDP, the
figures) is post-processing and spends nothing. zCDP composes by adding rho
(Bun & Steinke 2016, Lemma 2.3, also adaptively), so the total budget rho is
split as rho_release + rho_linear = rho and the guarantee of the whole output
is the composition, converted to (epsilon, delta) with the tight
Canonne-Kamath-Steinke bound (``privaudit.privacy.accounting.zcdp_to_dp``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from privaudit.errors import UsageError
from privaudit.privacy import accounting
from privaudit.privacy.accounting import Accountant, PrivacyEvent
from privaudit.spec import DomainSpec
from privaudit.stats.release import DEFAULT_REPORT_DELTA, NEIGHBOURING, check_reportable, resolve_budget

#: Default share of the total rho given to DP-VAPVI when the spec declares features.
LINEAR_SHARE_DEFAULT = 0.5
#: Each part is shrunk by this relative amount so that the accountant's
#: upward rounding (one ulp per event and on the total) never lands the
#: composed rho above the requested total.
_SHRINK = 1e-12


@dataclass(frozen=True)
class BudgetPlan:
    """How the pipeline spends its budget (public; holds no data-dependent value).

    Attributes
    ----------
    total_rho : float
        The requested total zCDP budget (``--rho``, or the largest rho giving
        ``--epsilon`` at ``--delta``).
    delta : float
        delta at which epsilon is reported (``--delta``, else 1e-6).
    requested : dict
        The arguments as given.
    release_args : dict
        Keyword arguments for ``release_logs`` (``rho``, or ``epsilon`` and
        ``delta`` when the release takes the whole budget).
    rho_release : float
        The tabular release's part.
    rho_linear : float or None
        DP-VAPVI's part (None when the spec declares no feature map).
    linear_share : float or None
        rho_linear / total_rho as configured.
    """

    total_rho: float
    delta: float
    requested: dict
    release_args: dict
    rho_release: float
    rho_linear: float | None
    linear_share: float | None


def plan_budget(*, rho=None, epsilon=None, delta=None, linear: bool,
                linear_share: float = LINEAR_SHARE_DEFAULT) -> BudgetPlan:
    """Resolve the user's budget and split it between the release and DP-VAPVI.

    Parameters
    ----------
    rho : float, optional
        Total zCDP budget.
    epsilon, delta : float, optional
        Total (epsilon, delta)-DP target instead (converted to the largest rho
        whose CKS conversion gives at most epsilon at delta).
    linear : bool
        Whether DP-VAPVI runs (the spec declares a feature map).
    linear_share : float
        DP-VAPVI's share of rho, in (0, 1); ignored when ``linear`` is False.

    Returns
    -------
    BudgetPlan

    Raises
    ------
    UsageError
        Missing, conflicting or out-of-range budget arguments or share.
    """
    budget = resolve_budget(rho=rho, epsilon=epsilon, delta=delta, mechanism="gaussian")
    d = float(budget.requested.get("delta", DEFAULT_REPORT_DELTA))
    if not linear:
        return BudgetPlan(budget.rho, d, budget.requested, dict(budget.requested), budget.rho, None, None)
    share = float(linear_share)
    if not (math.isfinite(share) and 0 < share < 1):
        raise UsageError(f"`linear_share` must lie in (0, 1). Found {linear_share!r}.")
    rho_lin = budget.rho * share * (1 - _SHRINK)
    rho_rel = budget.rho * (1 - share) * (1 - _SHRINK)
    for part, r in (("the release's share of rho", rho_rel), ("DP-VAPVI's share of rho", rho_lin)):
        check_reportable(r, d, part)  # before any row is read
    return BudgetPlan(budget.rho, d, budget.requested, {"rho": rho_rel}, rho_rel, rho_lin, share)


def composed_guarantee(plan: BudgetPlan, release_manifest: dict, spec: DomainSpec,
                       linear_rho: float | None) -> dict:
    """Compose the release and (if any) DP-VAPVI with the accountant.

    Parameters
    ----------
    plan : BudgetPlan
    release_manifest : dict
        The release's manifest (its guarantee's rho, families and noise).
    spec : DomainSpec
        Privacy unit and k.
    linear_rho : float or None
        rho recorded in the DP-VAPVI policy's guarantee (None: no DP-VAPVI).

    Returns
    -------
    dict
        ``definition`` "zCDP", ``rho`` (composed, rounded up), ``epsilon`` at
        ``delta`` (CKS), ``delta``, ``conversion``, ``requested``,
        ``composition`` (the rule), ``parts`` (one per mechanism: name, rho,
        its (epsilon, delta) alone, what it released), ``neighbouring``,
        ``privacy_unit`` {column, max_episodes k}.

    Raises
    ------
    privaudit.errors.AccountingError
        If an event is refused, or the composed epsilon exceeds the requested
        one (never expected: the parts are shrunk by 1e-12 to absorb rounding).
    """
    unit = spec.unit_column or "episode_id"
    k = spec.max_episodes_per_unit
    unit_desc = f"{unit}, at most k={k} episodes"
    acc = Accountant()
    fams = release_manifest["families"]
    # the event in noise-scale units: scale 1, l2 = ||(l2_f / sigma_f)_f||, so rho = l2^2 / 2 (families
    # are stored in different units: rewards in 1/quantum); rho itself is the manifest's.
    l2 = math.sqrt(sum(float(f["l2_sensitivity"]) ** 2 / float(f["noise_scale"]) ** 2 for f in fams.values()))
    rel_rho = float(release_manifest["guarantee"]["rho"])
    acc.add(PrivacyEvent("gaussian", "+".join(fams), None, l2, 1.0, rel_rho, None,
                         accounting.NEIGHBOURING, unit_desc, release_manifest.get("noise", "rounded")))
    parts = [{"name": "release", "rho": rel_rho,
              "epsilon_alone": float(accounting.zcdp_to_dp(rel_rho, plan.delta)),
              "what": "noisy " + ", ".join(fams) + " counts over the whole declared domain (release/)",
              "mechanism": "Gaussian, one sigma for all families (sigma per family in release/manifest.json)"}]
    sampler = release_manifest["guarantee"].get("sampler")
    if sampler is not None:  # what the noise sampler adds (0 for the exact samplers)
        parts[0]["sampler"] = dict(sampler)
    if linear_rho is not None:
        acc.add(PrivacyEvent("gaussian", "dp-vapvi", None, None, 1.0, float(linear_rho), None,
                             accounting.NEIGHBOURING, unit_desc, "exact"))
        H = spec.horizon
        parts.append({"name": "dp-vapvi", "rho": float(linear_rho),
                      "epsilon_alone": float(accounting.zcdp_to_dp(float(linear_rho), plan.delta)),
                      "what": "the DP-VAPVI policy (its noisy statistics are not output)",
                      "mechanism": f"exact discrete Gaussian on fixed-point statistics: 5H = {5 * H} statistics "
                                   "with fresh noise per step, rho/(5H) each (grid in the policy manifest)"})
    total = acc.total_rho()
    eps = float(accounting.zcdp_to_dp(total, plan.delta))
    asked_eps = plan.requested.get("epsilon")
    if asked_eps is not None and eps > asked_eps * (1 + 1e-9):
        raise accounting.AccountingError(
            f"composed epsilon {eps} exceeds the requested {asked_eps} at delta {plan.delta} (internal error).")
    return {
        "definition": "zCDP",
        "rho": total,
        "epsilon": eps,
        "delta": plan.delta,
        "conversion": "Canonne-Kamath-Steinke 2020 tight zCDP -> (epsilon, delta) conversion"
                      + ("" if "delta" in plan.requested else f" at the default reporting delta {plan.delta:g}"),
        "requested": dict(plan.requested),
        "composition": "zCDP adds rho over mechanisms (Bun & Steinke 2016, Lemma 2.3; adaptive composition "
                       "included); policies, evaluation and figures are post-processing and spend nothing",
        "split": ({"release": 1.0} if plan.linear_share is None else
                  {"release": 1.0 - plan.linear_share, "dp-vapvi": plan.linear_share}),
        "parts": parts,
        "neighbouring": NEIGHBOURING,
        "privacy_unit": {"column": unit, "max_episodes": k},
    }
