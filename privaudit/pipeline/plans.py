"""Every part's privacy event, planned and checked before the pipeline reads a row or charges anything.

The pipeline's parts (:mod:`privaudit.pipeline.guarantee`) each calibrate
their noise to their share of the budget and record one privacy event, which
the ledger is charged. All four calibrations use public inputs only: the spec
(H, S, A, k, privacy unit, reward range, public reward, return bound, feature
map), the part's budget, ``stationary`` and the parts' default parameters.
None reads the logs, so every event can be built before the first row is read:

* release: ``stats.mechanism.TabularRelease.plan`` (what ``stats.release.release_logs`` plans);
* behaviour value: ``stats.behaviour_value.BehaviourValueRelease.plan`` (the pipeline applies this plan);
* DP-PBB and DP-VAPVI: the learner class's ``plan_event`` (``core.registry.OfflineLearner``):
  ``DPPBB.plan_for`` (what ``train_dp_pbb`` plans and its fit re-plans),
  ``learners.linear.plan_dp_vapvi`` (what ``train_from_logs`` records).

:func:`plan_parts` builds them and checks each against its share
(``privacy.ledger.charge_of``: the event's exact cost is at most the part's
rho), their composition against the whole budget (the accountant: one privacy
unit, cost at most the total) and the split's stated decimals (``guarantee.check_split``:
what the ledger will be charged). Each part's event at its charge is then
required to equal its planned one (:meth:`PartsPlan.charged`), so this check
cannot drift from what is spent.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from privaudit.core.errors import AccountingError
from privaudit.core import registry
from privaudit.pipeline.guarantee import VALUE_PART, check_split
from privaudit.privacy import accounting
from privaudit.privacy.accounting import Accountant
from privaudit.privacy.budget import Budget
from privaudit.privacy.ledger import charge_of
from privaudit.core.spec import DomainSpec
from privaudit.release.behaviour_value import BehaviourValueRelease
from privaudit.release.mechanism import TabularRelease


@dataclass(frozen=True)
class PartsPlan:
    """The checked plan of every part (built by :func:`plan_parts`; public facts only).

    Attributes
    ----------
    events : dict[str, PrivacyEvent]
        Per part name (release first, then the behaviour value, DP-PBB,
        DP-VAPVI as they run), the event the part will record and charge.
    release : TabularRelease
        The release's noise plan (per-family sensitivities and scales).
    value : BehaviourValueRelease or None
        The behaviour-value part's plan, which the pipeline applies; None when its share is 0.
    total : fractions.Fraction
        What the ledger will be charged in all (the parts' stated decimals).
    """

    events: dict
    release: TabularRelease
    value: BehaviourValueRelease | None
    total: Fraction

    def charged(self, name: str, event):
        """``event`` (what part ``name`` is about to charge) if it is the planned one; else raise.

        Raises
        ------
        privaudit.core.errors.AccountingError
            The part's event differs from its plan (internal error: the
            up-front check would not have been of what is spent).
        """
        if event != self.events.get(name):
            raise AccountingError(f"the {name} part's privacy event differs from the one planned and checked before "
                                  f"any row was read (internal error). Planned {self.events.get(name)!r}; "
                                  f"found {event!r}.")
        return event


def plan_parts(spec: DomainSpec, budget: Budget, parts: dict, *, stationary: bool) -> PartsPlan:
    """Plan every part's privacy event and check them against the shares and the budget (nothing read).

    Parameters
    ----------
    spec : DomainSpec
        The public domain spec.
    budget : Budget
        The whole (Gaussian) budget.
    parts : dict[str, Budget]
        The split (``guarantee.split_budget``): ``release`` and any of
        ``dp-pbb``, ``dp-vapvi``, :data:`~privaudit.pipeline.guarantee.VALUE_PART`.
    stationary : bool
        Pooled or per-step counts (the release and DP-PBB).

    Returns
    -------
    PartsPlan

    Raises
    ------
    privaudit.core.errors.AccountingError
        A part's event costs more than its share, the events do not compose
        (another privacy unit) or compose above the total, or the stated
        shares add up above it (internal errors; exit 2).
    UsageError, SpecError
        A part that cannot be planned for this spec (bad H, k, feature map,
        a share too small for the exact sampler).

    Notes
    -----
    zCDP composes by adding rho (Bun & Steinke 2016, Lemma 2.3, adaptive
    composition included), so each part within its share and the shares
    within the total bound the whole run.
    """
    release = TabularRelease.plan(spec, parts["release"], stationary=stationary, noise="exact")
    events = {"release": release.event}
    value = None
    if VALUE_PART in parts:
        value = BehaviourValueRelease.plan(spec, parts[VALUE_PART])
        events[VALUE_PART] = value.event
    for name in parts:  # a learner's part (DP-PBB, DP-VAPVI): the learner plans its own event
        if name in registry.names(family=registry.OFFLINE, private=True):
            events[name] = registry.get(name).load().plan_event(spec, parts[name], stationary=stationary)
    unknown = sorted(set(parts) - set(events))
    if unknown:
        raise AccountingError(f"no plan for the part(s) {', '.join(unknown)} (internal error).")
    acc = Accountant()
    for name, event in events.items():
        try:
            charge_of(event, parts[name])  # the event's exact cost is at most the part's rho
            acc.compose(event)
        except AccountingError as e:
            raise AccountingError(f"the {name} part's planned privacy event does not fit its share rho = "
                                  f"{parts[name].shown!r} of the budget: {e}") from None
    accounting.guarantee(acc.composed("pipeline"), delta=budget.delta, requested=budget.requested,
                         bound=budget.rho)  # the composition within the total
    return PartsPlan(events=events, release=release, value=value, total=check_split(budget, parts))
