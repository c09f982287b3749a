"""The pipeline's privacy budget: the split between releases and the composed guarantee.

The pipeline touches the private logs through at most four mechanisms:

* the tabular count release (``privaudit.release.tabular``), always;
* DP-PBB (``privaudit.learners.tabular.dp_pbb``), when the spec declares a public
  reward: its noisy capped counts and private Bellman backups;
* DP-VAPVI (``privaudit.learners.linear``), when the spec declares a feature
  map: its 5H noisy statistics are a second release;
* the behaviour-value release (``privaudit.release.behaviour_value``: noisy
  episode count, sums of clipped returns and start-state counts), unless its
  share is 0: the DP estimate of the clinicians' value and the start
  distribution of the certified values;
* any other private learner of the registry that reads the logs and declares
  a fixed ``pipeline_share`` (:func:`learner_shares`).

Which learner a share belongs to is asked of the registry: DP-PBB and
DP-VAPVI declare the rules ``pbb_share`` and ``linear_share``
(``core.registry.SHARE_RULES``) as their ``pipeline_share``.

Everything else (DP-APVI on the release, the value estimates, evaluation on
a public MDP, the figures) is post-processing and spends nothing. zCDP
composes by adding rho (Bun & Steinke 2016, Lemma 2.3, also adaptively), so
the total budget rho is split as rho_release + rho_pbb + rho_linear + rho_value = rho
and the guarantee of the whole output
is the composition of the events the mechanisms return (each planned and
checked against its share before any row is read: :mod:`privaudit.pipeline.plans`), converted to
(epsilon, delta) with the tight Canonne-Kamath-Steinke bound
(``privaudit.privacy.accounting``). The budget is resolved once by the
pipeline's entry point and split here; no part re-resolves it.
"""

from __future__ import annotations

import math
from fractions import Fraction

from privaudit.core import registry
from privaudit.core.artifact import Guarantee
from privaudit.core.envelope import envelope, noise_mode
from privaudit.core.errors import AccountingError, UsageError
from privaudit.core.formatting import num
from privaudit.privacy import accounting
from privaudit.privacy.accounting import Accountant
from privaudit.privacy.budget import Budget
from privaudit.privacy.events import Neighbouring, leaves
from privaudit.core.spec import DomainSpec
from privaudit.release.manifest import ReleaseManifest

#: Default share of the total rho given to DP-VAPVI when the spec declares features.
LINEAR_SHARE_DEFAULT = 0.5
#: Default share of the total rho spent on the behaviour-value release (0: no DP value estimate).
VALUE_SHARE_DEFAULT = 0.1
#: Name of the behaviour-value part.
VALUE_PART = "behaviour-value"
#: Default share of the total rho given to DP-PBB, the default DP policy (when the spec declares a public
#: reward); the count release (DP-APVI, the paper's reference, is post-processing of it) gets the rest.
PBB_SHARE_DEFAULT = 0.6
#: At most this share of what DP-VAPVI and the behaviour value leave goes to DP-PBB (the release keeps the
#: rest; rounded down to two significant digits, :func:`pbb_share_of`).
PBB_REST_SHARE_FRACTION = Fraction(2, 3)
#: What each part releases and how (for the summary); a learner's part says it itself
#: (``pipeline_output`` of its class, ``core.registry.OfflineLearner``).
_WHAT = {"release": "noisy {families} counts over the whole declared domain (release/)",
         VALUE_PART: "the clinicians' (behaviour) value estimate and, without a known MDP, the start "
                     "distribution of the certified values (its noisy statistics are not output)"}


def _mechanism_text(name: str, spec: DomainSpec) -> str:
    """How a part adds its noise (for the summary)."""
    if name == "release":
        return "Gaussian, one sigma for all families (sigma per family in release/manifest.json)"
    if name == VALUE_PART:
        if int(spec.max_episodes_per_unit) == 1:
            return ("exact discrete Gaussian on fixed-point statistics: episode count, sum and sum of squares of "
                    f"the clipped returns, {spec.n_states} start-state counts; rho/4 each (sigmas in summary.json "
                    "behaviour_value.mechanism)")
        return ("exact discrete Gaussian on fixed-point statistics: episode count, sum of the clipped returns, "
                f"{spec.n_states} start-state counts (rho/4 each); per privacy unit, the sums of the squared unit "
                "totals, of unit total x stays and of squared stays (rho/12 each: the interval over patients; "
                "sigmas in summary.json behaviour_value.mechanism)")
    return registry.get(name).load().mechanism_text(spec)  # a learner's part


def rule_owner(rule: str) -> str | None:
    """The registry learner whose ``pipeline_share`` is the rule ``rule`` (``core.registry.SHARE_RULES``), if any."""
    owners = registry.names_with(lambda cls: getattr(cls, "pipeline_share", None) == rule)
    return owners[0] if owners else None


def learner_shares(spec: DomainSpec, *, engine: str = "polars") -> dict:
    """The fixed budget shares of the registry's other pipeline learners, by name (in registry order).

    A private learner reading the logs whose class declares a float
    ``pipeline_share`` runs in the pipeline at that share of the total rho: a
    linear one when the spec declares a feature map, a tabular one on the
    polars engine (only DP-PBB, a share rule, is known to count its
    statistics on Spark). DP-PBB and DP-VAPVI (share rules) are not in it.
    """
    out = {}
    for name in registry.pipeline_names():
        cls, family = registry.get(name).load(), registry.get(name).family
        share = cls.pipeline_share
        if cls.reads != "logs" or isinstance(share, str):
            continue
        if (family == "linear" and spec.features) or (family == "tabular" and engine != "spark"):
            out[name] = float(share)
    return out


def split_budget(budget: Budget, *, linear: bool, linear_share: float = LINEAR_SHARE_DEFAULT,
                 value_share: float = 0.0, pbb_share: float = 0.0, learners: dict | None = None) -> dict:
    """Split the pipeline's resolved budget between the release, DP-VAPVI and the behaviour value.

    zCDP composes by adding rho (Bun & Steinke 2016, Lemma 2.3), so the parts
    are rho_linear = linear_share rho, rho_value = value_share rho and
    rho_release = the rest, split exactly (``Budget.split``): short decimals
    whose exact sum is at most rho, so the composed total states rho itself
    (a single part is the whole budget).

    Parameters
    ----------
    budget : Budget
        The whole budget, resolved once (``privacy.budget.resolve_budget``, Gaussian).
    linear : bool
        Whether DP-VAPVI runs (the spec declares a feature map).
    linear_share : float
        DP-VAPVI's share of rho, in (0, 1); ignored when ``linear`` is False.
    value_share : float
        The behaviour-value release's share of rho, in [0, 1) (0: none).
    pbb_share : float
        DP-PBB's share of rho, in [0, 1) (0: DP-PBB does not run).
    learners : dict[str, float], optional
        The other registry learners' shares (:func:`learner_shares`).

    Returns
    -------
    dict[str, Budget]
        ``{"release": budget}`` alone, or with the learners' (``"dp-pbb"``,
        ``"dp-vapvi"``, ...) and/or :data:`VALUE_PART` parts.

    Raises
    ------
    UsageError
        A share outside its interval, or shares leaving the release nothing.
    """
    shares = budget_shares(linear=linear, linear_share=linear_share, value_share=value_share, pbb_share=pbb_share,
                           learners=learners)
    if len(shares) == 1:
        return {"release": budget}
    given = {rule_owner("pbb_share"): ("pbb_share", pbb_share), rule_owner("linear_share"): ("linear_share", linear_share),
             VALUE_PART: ("value_share", value_share),
             **{name: (f"{name}'s pipeline_share", share) for name, share in (learners or {}).items()}}
    for name, share in shares.items():  # each part must be reportable on its own (the rule of every budget)
        part = float(_decimal(budget.shown) * _decimal(share))
        if not (part > 0 and accounting.zcdp_to_dp(part, budget.delta) > 0):
            param, value = given.get(name, ("the release's rest of the shares", share))
            what = f"`{param}` = {value!r}" if name in given else f"{param} ({share!r})"
            raise UsageError(f"{what} gives the {name} part rho = {num(part)} of the budget rho = {num(budget.shown)}: "
                             f"too small. Rule: every part of the budget must give an epsilon > 0 at delta = "
                             f"{num(budget.delta)} by the tight conversion (a part near rho = 3e-12 and below "
                             "would drown its statistics in noise). Give a larger share"
                             + (", or 0 for no DP estimate of the behaviour value." if name == VALUE_PART else "."))
    return budget.split(shares)


def _decimal(x) -> Fraction:
    """``x`` at the decimal value users write (0.1 as 1/10, not the double nearest it)."""
    return x if isinstance(x, Fraction) else Fraction(repr(float(x)))


def _floor_2_significant(x: Fraction) -> Fraction:
    """``x`` > 0 rounded down to two significant decimal digits (4/15 -> 0.26, 1/150 -> 0.0066)."""
    e = 0
    while x * 10 ** e < 10:
        e += 1
    while x * Fraction(10) ** e >= 100:
        e -= 1
    scale = Fraction(10) ** e
    return Fraction(math.floor(x * scale)) / scale


def pbb_share_of(public_reward: bool, *, linear: bool, linear_share: float = LINEAR_SHARE_DEFAULT,
                 value_share: float = 0.0, learners: dict | None = None) -> float:
    """DP-PBB's share of the total rho in the pipeline.

    0 without a public reward (DP-PBB backs up r(s') + V(s')). Otherwise
    min(:data:`PBB_SHARE_DEFAULT`, :data:`PBB_REST_SHARE_FRACTION` x (1 - linear - value))
    in exact decimal arithmetic, the two-thirds rounded down to two significant
    digits so every share is a short decimal: 0.6 of the whole budget when
    DP-VAPVI does not run (the default behaviour-value share 0.1 leaves 0.3 to
    the release), and 0.26 (two thirds of 0.4, rounded down) next to DP-VAPVI's
    default 0.5, so the release keeps a positive share (0.14) whenever
    ``linear_share + value_share < 1``. The fixed shares of other registry
    learners (``learners``, :func:`learner_shares`) count with DP-VAPVI's.
    """
    if not public_reward:
        return 0.0
    try:
        lin = (_decimal(linear_share) if linear else Fraction(0)) + sum(
            (_decimal(v) for v in (learners or {}).values()), Fraction(0))
        vs = _decimal(value_share)
    except (TypeError, ValueError, OverflowError):
        return 0.0  # let budget_shares report the bad shares
    if not (0 <= vs < 1) or not (0 <= lin < 1 - vs):
        return 0.0
    two_thirds = _floor_2_significant(PBB_REST_SHARE_FRACTION * (1 - lin - vs))
    return float(min(_decimal(PBB_SHARE_DEFAULT), two_thirds))


def budget_shares(*, linear: bool, linear_share: float = LINEAR_SHARE_DEFAULT, value_share: float = 0.0,
                  pbb_share: float = 0.0, learners: dict | None = None) -> dict:
    """The configured share of the total rho per part (``{"release": 1.0}`` when alone).

    The release's share is the exact decimal rest 1 - (the other shares),
    computed on the shares' decimal values (1 - 0.6 - 0.1 is 0.3, not
    0.30000000000000004), so the shares printed and stored add up to 1 exactly.

    ``pbb_share`` and ``linear_share`` go to the learners that declare those
    rules (``rule_owner``); ``learners`` adds other registry learners' fixed
    shares (:func:`learner_shares`) after the behaviour value's.

    Raises
    ------
    UsageError
        ``linear_share`` outside (0, 1) (when ``linear``), ``value_share``
        or a learner's share outside [0, 1), or shares summing to 1 or more.
    """
    vs = value_share
    if isinstance(vs, bool) or not isinstance(vs, (int, float)) or not (math.isfinite(vs) and 0 <= vs < 1):
        raise UsageError(f"`value_share` must lie in [0, 1). Found {value_share!r}.")
    ps = pbb_share
    if isinstance(ps, bool) or not isinstance(ps, (int, float)) or not (math.isfinite(ps) and 0 <= ps < 1):
        raise UsageError(f"`pbb_share` must lie in [0, 1). Found {pbb_share!r}.")
    for name, share in (learners or {}).items():
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not (math.isfinite(share)
                                                                                  and 0 <= share < 1):
            raise UsageError(f"{name}'s `pipeline_share` must lie in [0, 1). Found {share!r}.")
    shares = {}
    for rule, share in (("pbb_share", ps), ("linear_share", linear_share if linear else 0)):
        if share and rule_owner(rule) is None:
            raise UsageError(f"`{rule}` {share!r} is given, but no registered learner takes the `{rule}` rule "
                             "(core.registry.SHARE_RULES).")
    if ps > 0:
        shares[rule_owner("pbb_share")] = float(ps)
    if linear:
        ls = float(linear_share)
        if not (math.isfinite(ls) and 0 < ls < 1):
            raise UsageError(f"`linear_share` must lie in (0, 1). Found {linear_share!r}.")
        shares[rule_owner("linear_share")] = ls
    if vs > 0:
        shares[VALUE_PART] = float(vs)
    shares.update({name: float(share) for name, share in (learners or {}).items() if share > 0})
    rest = 1 - sum((_decimal(v) for v in shares.values()), Fraction(0))
    if not rest > 0:
        raise UsageError(f"`linear_share` + `value_share` + `pbb_share` must be below 1 (the release needs a share). "
                         f"Found {' + '.join(repr(v) for v in shares.values())} = {float(1 - rest)!r}.")
    return {"release": float(rest), **shares}


def check_split(budget: Budget, parts: dict) -> Fraction:
    """Check that the planned parts compose within the whole budget; return what the ledger will be charged.

    Called before any row is read, noise drawn or ledger charged (and again by
    :func:`composed_guarantee` on the parts that ran). zCDP composes by adding
    rho (Bun & Steinke 2016, Lemma 2.3). Two checks, each in its own number
    system: the parts' calibrations (``Budget.rho``, doubles) add up exactly
    to at most ``budget.rho``; the decimals they state (``Budget.shown``: what
    summaries print and the ledger charges, one line per part) add up to at
    most the decimal the user wrote (0.6 is 3/5, whose double is below it, so
    the smallest double above 3/5 exceeds the double 0.6 and cannot be
    compared with it).

    Parameters
    ----------
    budget : Budget
        The whole budget.
    parts : dict[str, Budget]
        The parts (:func:`split_budget`), or those of them that ran.

    Returns
    -------
    fractions.Fraction
        The sum of the parts' stated decimals: the total the ledger is charged.

    Raises
    ------
    privaudit.core.errors.AccountingError
        The parts compose to more than the budget (an internal error: a split
        that must never be produced).
    """
    bound = accounting.round_up(sum(Fraction(p.rho) for p in parts.values()))
    total = sum((_decimal(p.shown) for p in parts.values()), Fraction(0))
    if bound > budget.rho or total > _decimal(budget.shown):
        stated = " + ".join(f"{n} {num(p.shown)}" for n, p in parts.items())
        raise AccountingError(f"the budget's parts ({stated}) state rho = {float(total)!r} together (calibrations "
                              f"{float(bound)!r}), above the total budget {budget.shown!r} (internal error).")
    return total


def composed_guarantee(budget: Budget, parts: dict, events: dict, spec: DomainSpec, *, shares: dict,
                       manifest: ReleaseManifest | None = None, rng: str | None = None) -> Guarantee:
    """Compose the events of the pipeline's parts with the accountant.

    Parameters
    ----------
    budget : Budget
        The whole budget (its ``requested`` and ``delta`` are reported).
    parts : dict[str, Budget]
        From :func:`split_budget`.
    events : dict[str, PrivacyEvent]
        The event each part's mechanism returned (same keys as ``parts``).
    spec : DomainSpec
        Privacy unit and k.
    shares : dict[str, float]
        The configured share of the total per part (reported as ``split``).
    manifest : ReleaseManifest, optional
        The release manifest (names its families in the summary; its sampler is the summary's, its ``rng``
        the default of ``rng``).
    rng : {"secure", "seeded-insecure"}, optional
        Where the noise came from (default: the release manifest's ``rng``).

    Returns
    -------
    Guarantee
        In the envelope's shape (``privaudit.core.envelope.envelope``):
        ``definition`` "zCDP", ``rho`` (the composition: the sum of the
        parts' stated rho, checked to bound the composed event's cost and to
        stay within the total), ``epsilon`` at ``delta``
        (CKS), ``delta``, ``conversion``, ``requested``; ``sampler`` (the
        release's), ``mechanism`` gaussian, ``noise`` (of every part's
        events), ``neighbouring``, ``privacy_unit`` {column, max_episodes k},
        ``rng``, ``event`` (the composed event) and ``details``:
        ``composition``, ``split``, ``parts`` (one per mechanism: name, rho as
        its artifact states it, its (epsilon, delta) alone, what it released).

    Raises
    ------
    privaudit.core.errors.AccountingError
        An event the accountant refuses (another privacy unit, an unknown
        kind), or a composition costing more than the requested total.
    """
    acc = Accountant()
    part_rows = []
    for name, ev in events.items():
        acc.compose(ev)
        stated = parts[name].guarantee(ev)  # as the part's artifact states it
        fams = "+".join(manifest.families if manifest is not None else ()) or "tabular"
        part_rows.append({
            "name": name, "rho": stated["rho"],
            "epsilon_alone": float(accounting.zcdp_to_dp(stated["rho"], budget.delta)),
            "what": (_WHAT[name] if name in _WHAT else registry.get(name).load().pipeline_output).format(
                families=", ".join(fams.split("+"))),
            "mechanism": _mechanism_text(name, spec)})
    sampler = manifest.envelope["sampler"] if manifest is not None else None
    if sampler is not None:  # what the release's noise sampler adds (0 for the exact samplers)
        part_rows[0]["sampler"] = dict(sampler)  # (kept in the release's part, as before the envelope)
    composed = acc.composed("pipeline")
    # the parts' calibrations bound their costs (checked above); state the decimal sum of what the parts'
    # artifacts state (0.3 + 0.6 + 0.1 = 1, Budget.split), never above the total (checked before any run too)
    check_split(budget, {name: parts[name] for name in events})
    bound = accounting.round_up(sum(Fraction(parts[name].rho) for name in events))
    total = sum((Fraction(repr(p["rho"])) for p in part_rows), Fraction(0))  # as the artifacts state them
    whole = Fraction(repr(budget.shown))
    if total > whole:
        raise AccountingError(f"the parts state rho = {float(total)!r} together, above the total budget "
                              f"{budget.shown!r} (internal error).")
    # the total as written when the parts' decimals add up to it (0.18 + 0.06 + 0.36 = 0.6), else their sum
    # rounded up, never above the total
    stated = budget.shown if total == whole else max(bound, min(accounting.round_up(total), budget.shown))
    g = accounting.guarantee(composed, delta=budget.delta, requested=budget.requested, bound=bound, stated=stated)
    return envelope(
        {k: g[k] for k in ("definition", "rho", "epsilon", "delta", "conversion", "requested")},
        mechanism="gaussian", noise=noise_mode(leaf.noise for ev in events.values() for leaf, _ in leaves(ev)),
        neighbouring=Neighbouring.SUBSTITUTION.description,
        unit={"column": spec.unit_column or "episode_id", "max_episodes": spec.max_episodes_per_unit},
        rng=manifest.rng if rng is None else rng, event=composed.to_dict(), sampler=sampler,
        details={"composition": "zCDP adds rho over mechanisms (Bun & Steinke 2016, Lemma 2.3; adaptive "
                                "composition included); policies, evaluation and figures are post-processing "
                                "and spend nothing",
                 "split": dict(shares), "parts": part_rows})
