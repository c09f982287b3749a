"""The accountant: privacy events -> guarantees, and zCDP <-> (eps, delta)-DP conversions.

Each mechanism call is described by an immutable event
(``privaudit.privacy.events``); this module is the only place that turns
events into numbers: :func:`event_rho`, :func:`event_epsilon`,
:func:`guarantee` (the dict manifests state) and :class:`Accountant`
(composition). zCDP composes by adding rho (also adaptively); pure eps-DP
composes by adding eps. A pure eps-DP mechanism is also (eps^2 / 2)-zCDP
(Bun & Steinke 2016, Prop. 1.4), so the accountant can mix both. rho is
computed exactly in rationals from the event's sensitivities and scales and
rounded up once, so an event calibrated to a budget never costs more than it
on paper because of floating point.

References
----------
Bun & Steinke, "Concentrated Differential Privacy: Simplifications,
Extensions, and Lower Bounds", TCC 2016, arXiv:1605.02065 (Prop. 1.3, 1.4,
1.6, Lemma 2.3). Canonne, Kamath & Steinke, "The Discrete Gaussian for
Differential Privacy", NeurIPS 2020, arXiv:2004.00010 (Prop. 12, Cor. 13).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from scipy import optimize

from privaudit.core.errors import AccountingError, UsageError, positive_finite
from privaudit.privacy.events import (ComposedEvent, GaussianEvent, LaplaceEvent, Neighbouring, PrivacyEvent,
                                      PrivacyUnit, SelfComposedEvent, leaves)

#: delta at which (epsilon, delta) is reported when only rho is given (re-exported by privacy.budget).
DEFAULT_REPORT_DELTA = 1e-6
#: Relative slack of :func:`guarantee`'s ``bound`` check: none. Every mechanism records the noise
#: it draws exactly (the tabular release raises its scale ulp by ulp until its event fits the
#: budget; DP-VAPVI draws with exactly the squares of its recorded sigmas, each the smallest double
#: whose cost fits, ``learners.linear.privacy.sigma_within``), so "stated <= exact cost" is checked
#: in exact rational arithmetic. (Kept as a name for callers that multiply by ``1 + BOUND_RTOL``.)
BOUND_RTOL = 0.0


# ----------------------------------------------------------------------------
# events -> numbers (the only place that does it)


def _leaf_rho(e: GaussianEvent) -> Fraction:
    """Exact rho = l2^2 / (2 sigma^2) of one Gaussian leaf (Bun & Steinke 2016, Prop. 1.6)."""
    return Fraction(e.l2) ** 2 / (2 * Fraction(e.sigma) ** 2)


def _check(event) -> PrivacyUnit:
    """Refuse an event this accountant cannot account for; return its privacy unit.

    Raises
    ------
    AccountingError
        Not an event of ``privaudit.privacy.events``, a relation other than
        substitution, or leaves over different privacy units.
    """
    units = set()
    for leaf, _ in leaves(event):  # raises on unknown event types
        if leaf.neighbouring is not Neighbouring.SUBSTITUTION:
            raise AccountingError(f"unknown neighbouring relation {leaf.neighbouring!r}; only "
                                  f"{Neighbouring.SUBSTITUTION.value!r} is supported.")
        units.add(leaf.unit)
    if len(units) != 1:
        raise AccountingError(f"cannot compose events over different privacy units: "
                              f"{sorted(str(u) for u in units)}.")
    return units.pop()


def is_pure(event: PrivacyEvent) -> bool:
    """True when every noise-adding part of ``event`` is Laplace (pure eps-DP)."""
    _check(event)
    return all(isinstance(leaf, LaplaceEvent) for leaf, _ in leaves(event))


def _exact_epsilon(event) -> Fraction:
    return sum((c * Fraction(leaf.l1) / Fraction(leaf.b) for leaf, c in leaves(event)), Fraction(0))


def _exact_rho(event) -> Fraction:
    """Exact rational rho: a pure subtree counts as eps^2/2 of its whole epsilon (Prop. 1.4)."""
    if all(isinstance(leaf, LaplaceEvent) for leaf, _ in leaves(event)):
        eps = _exact_epsilon(event)
        return eps * eps / 2
    if isinstance(event, GaussianEvent):
        return _leaf_rho(event)
    if isinstance(event, SelfComposedEvent):
        return event.count * _exact_rho(event.event)
    return sum((_exact_rho(e) for e in event.events), Fraction(0))


def round_up(x: Fraction) -> float:
    """The smallest double >= x (never optimistic)."""
    f = float(x)
    return float(np.nextafter(f, math.inf)) if Fraction(f) < x else f


def event_rho(event: PrivacyEvent) -> float:
    """zCDP rho of ``event``: computed exactly in rationals, then rounded up to a double.

    Gaussian leaves cost l2^2 / (2 sigma^2) (Bun & Steinke 2016, Prop. 1.6);
    a pure subtree costs eps^2/2 of its total epsilon (Prop. 1.4); compositions
    add (Lemma 2.3, adaptive composition included).

    Raises
    ------
    AccountingError
        An event the accountant does not know (see :class:`Accountant`).
    """
    _check(event)
    return round_up(_exact_rho(event))


def event_epsilon(event: PrivacyEvent) -> float:
    """Pure-DP epsilon of an all-Laplace ``event``: sum of l1/b, exact then rounded up.

    Raises
    ------
    AccountingError
        The event is not pure DP (it holds Gaussian parts), or unknown.
    """
    if not is_pure(event):
        raise AccountingError("`event` must be pure DP (only Laplace parts) to have a pure epsilon. "
                              "Found Gaussian parts; use event_rho or the (epsilon, delta) conversion.")
    return round_up(_exact_epsilon(event))


def guarantee(event: PrivacyEvent, *, delta: float, requested: dict, bound: float | None = None,
              stated: float | None = None) -> dict:
    """The guarantee of ``event`` as manifests state it (the only place it is built).

    Parameters
    ----------
    event : PrivacyEvent
        What the mechanism did.
    delta : float
        Reporting delta of a zCDP guarantee, in (0, 1) (ignored for a pure event).
    requested : dict
        The budget as the user stated it (recorded as is).
    bound : float, optional
        The budget the event was calibrated to (rho, or epsilon for a pure
        event). When the event's cost is at most ``bound``, ``bound`` is
        stated instead (a valid upper bound that reads as the user asked,
        e.g. 0.7 rather than 0.6999999999999998). A cost above ``bound``
        raises, checked exactly (the cost is the exact rational cost of the
        recorded sensitivities and scales, rounded up once; no slack,
        :data:`BOUND_RTOL` = 0): a mechanism must never spend more than it
        was given, and every mechanism records the noise it draws exactly.
    stated : float, optional
        The amount to state instead of ``bound`` (needs ``bound``; must be
        >= ``bound``): a budget part calibrated to a double just below its
        decimal share states the share itself (0.1, not 0.09999999999999999;
        ``Budget.split``).

    Returns
    -------
    dict
        Pure event: ``definition`` "pure-DP", ``epsilon`` (sum of l1/b),
        ``rho`` = eps^2/2, ``delta`` 0. Otherwise ``definition`` "zCDP",
        ``rho`` (:func:`event_rho`), ``epsilon`` = ``zcdp_to_dp(rho, delta)``
        and ``epsilon_simple``. Both carry ``conversion``, ``requested`` and
        ``ledger_charge_rho`` (= rho).

    Raises
    ------
    AccountingError
        An event the accountant does not know, or a cost above ``bound``.
    """
    requested = dict(requested)
    pure = is_pure(event)
    cost = event_epsilon(event) if pure else event_rho(event)
    if bound is not None:
        if cost > bound:
            raise AccountingError(f"the event costs {'epsilon' if pure else 'rho'} = {cost!r}, above the budget "
                                  f"{bound!r} it was calibrated to (internal error).")
        cost = float(bound)
        if stated is not None:
            if not stated >= bound:
                raise AccountingError(f"`stated` must be at least the bound {bound!r}. Found {stated!r} "
                                      "(internal error).")
            cost = float(stated)
    if pure:
        rho = round_up(Fraction(cost) ** 2 / 2)
        return {"definition": "pure-DP", "rho": rho, "epsilon": cost, "delta": 0.0,
                "conversion": "none: pure epsilon-DP (implies rho = epsilon^2/2 zCDP, charged to the ledger)",
                "requested": requested, "ledger_charge_rho": rho}
    delta = float(delta)
    default = "delta" not in requested and delta == DEFAULT_REPORT_DELTA
    return {"definition": "zCDP", "rho": cost, "epsilon": float(zcdp_to_dp(cost, delta)), "delta": delta,
            "conversion": "Canonne-Kamath-Steinke 2020 tight zCDP -> (epsilon, delta) conversion"
                          + (f" at the default reporting delta {DEFAULT_REPORT_DELTA:g}" if default else ""),
            "epsilon_simple": float(zcdp_to_dp_simple(cost, delta)),
            "requested": requested, "ledger_charge_rho": cost}


class Accountant:
    """Composes privacy events (sequential, possibly adaptive composition).

    :meth:`compose` checks an event completely before recording it: an event
    the accountant does not know (not a ``privaudit.privacy.events`` event, a
    neighbouring relation other than substitution, a privacy unit other than
    the first event's) raises :class:`AccountingError` and leaves the state
    unchanged (as dp_accounting's ``PrivacyAccountant.compose`` does for
    unsupported events).
    """

    def __init__(self):
        self._events: list = []
        self._unit: PrivacyUnit | None = None

    @property
    def events(self) -> tuple:
        """The events composed so far."""
        return tuple(self._events)

    def supports(self, event) -> bool:
        """True when :meth:`compose` would accept ``event``."""
        try:
            unit = _check(event)
        except AccountingError:
            return False
        return self._unit is None or unit == self._unit

    def compose(self, event: PrivacyEvent, count: int = 1) -> "Accountant":
        """Record ``event`` (``count`` times); returns self. Raises AccountingError, state unchanged."""
        unit = _check(event)
        if self._unit is not None and unit != self._unit:
            raise AccountingError(f"cannot compose events over different privacy units: "
                                  f"{str(self._unit)!r} and {str(unit)!r}.")
        ev = event if count == 1 else SelfComposedEvent(event, count)
        self._events.append(ev)
        self._unit = unit
        return self

    def composed(self, label: str = "") -> ComposedEvent:
        """The composition as one event (to store in a manifest).

        Raises
        ------
        AccountingError
            Nothing composed yet.
        """
        if not self._events:
            raise AccountingError("the accountant holds no event to compose.")
        return ComposedEvent(tuple(self._events), label)

    def total_rho(self) -> float:
        """zCDP rho of the composition (0.0 when empty); see :func:`event_rho`."""
        return event_rho(self.composed()) if self._events else 0.0

    def is_pure(self) -> bool:
        """True when every event is pure DP."""
        return all(is_pure(e) for e in self._events)

    def total_epsilon(self) -> float:
        """Pure-DP epsilon of the composition (sum of eps); AccountingError unless pure."""
        return event_epsilon(self.composed()) if self._events else 0.0

    def epsilon_delta(self, delta: float) -> float:
        """(eps, delta)-DP of the composition: pure eps if pure, else the CKS conversion of rho."""
        if self.is_pure():
            return self.total_epsilon()
        return zcdp_to_dp(self.total_rho(), delta)


# ----------------------------------------------------------------------------
# conversions


def _check_rho_delta(rho, delta) -> tuple[float, float]:
    try:
        rho = float(rho)
        delta = float(delta)
    except (TypeError, ValueError):
        raise UsageError(f"`rho` and `delta` must be numbers. Found {rho!r}, {delta!r}.") from None
    if not (rho >= 0 and math.isfinite(rho)):
        raise UsageError(f"`rho` must be >= 0 and finite. Found {rho!r}.")
    if not (0 < delta < 1):
        raise UsageError(f"`delta` must be in (0, 1). Found {delta!r}.")
    return rho, delta


def zcdp_to_dp_simple(rho: float, delta: float) -> float:
    """eps = rho + 2 sqrt(rho log(1/delta)) (Bun & Steinke 2016, Prop. 1.3), rounded up."""
    rho, delta = _check_rho_delta(rho, delta)
    return float(np.nextafter(rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta)), math.inf))


def _eps_of_log_alpha_minus_1(x: float, rho: float, log_inv_delta: float) -> float:
    """CKS Cor. 13 with RDP(alpha) = alpha rho, as a function of x = log(alpha - 1).

    eps(alpha) = alpha rho + (log(1/delta) - log alpha) / (alpha - 1) + log(1 - 1/alpha).
    """
    am1 = math.exp(x)
    alpha = 1.0 + am1
    log_alpha = math.log1p(am1)
    return alpha * rho + (log_inv_delta - log_alpha) / am1 + (x - log_alpha)


def zcdp_to_dp(rho: float, delta: float) -> float:
    """Tight conversion of rho-zCDP to (eps, delta)-DP (Canonne, Kamath, Steinke 2020).

    eps = inf_{alpha > 1} [ alpha rho + (log(1/delta) - log alpha) / (alpha - 1)
    + log(1 - 1/alpha) ], the RDP-to-DP conversion of CKS Prop. 12 / Cor. 13
    applied to (alpha, alpha rho)-RDP for every alpha.

    The minimum is found over x = log(alpha - 1) by a grid then bounded Brent.
    Every alpha gives a valid bound, so the value returned (at the alpha
    found) is never below the true infimum; it is rounded up by a relative
    1e-12 plus 16 machine epsilons times the magnitude of the formula's terms
    at that alpha (they can nearly cancel at large alpha) to cover
    floating-point error in its evaluation.

    Parameters
    ----------
    rho : float
        zCDP parameter, >= 0 (rho = 0 gives eps = 0).
    delta : float
        In (0, 1).

    Returns
    -------
    float
        eps >= 0, never above ``zcdp_to_dp_simple(rho, delta)``; 0 when the
        bound is already <= 0 at this delta (tiny rho, large delta).

    Raises
    ------
    UsageError
        rho < 0 or delta outside (0, 1).
    AccountingError
        The optimisation failed numerically (never falls back to a guess).
    """
    rho, delta = _check_rho_delta(rho, delta)
    if rho == 0:
        return 0.0
    L = math.log(1.0 / delta)
    f = lambda x: _eps_of_log_alpha_minus_1(x, rho, L)  # noqa: E731
    grid = np.linspace(-25.0, 45.0, 561)
    vals = np.array([f(x) for x in grid])
    if not np.all(np.isfinite(vals)):
        raise AccountingError(f"zCDP->DP conversion failed numerically for rho={rho}, delta={delta}.")
    i = int(np.argmin(vals))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
    res = optimize.minimize_scalar(f, bounds=(lo, hi), method="bounded",
                                   options={"xatol": 1e-12, "maxiter": 500})
    if res.success and float(res.fun) < float(vals[i]):
        best, x_best = float(res.fun), float(res.x)
    else:
        best, x_best = float(vals[i]), float(grid[i])
    if not math.isfinite(best):
        raise AccountingError(f"zCDP->DP conversion failed numerically for rho={rho}, delta={delta}.")
    if best <= 0:
        # the bound reaches eps <= 0 at this delta: (0, delta)-DP holds (delta(alpha, eps)
        # decreases in eps), as dp_accounting also reports
        return 0.0
    # Rounding error of f at x_best: its terms can nearly cancel at large alpha, so bound the
    # error by a multiple of machine epsilon times the sum of the terms' magnitudes (absolute),
    # on top of the relative 1e-12 (never report an eps below the value at x_best).
    am1 = math.exp(x_best)
    log_alpha = math.log1p(am1)
    magnitude = (1.0 + am1) * rho + (L + log_alpha) / am1 + abs(x_best) + log_alpha
    eps = best * (1.0 + 1e-12) + 16.0 * np.finfo(float).eps * magnitude
    simple = zcdp_to_dp_simple(rho, delta)
    return min(eps, simple)


def dp_to_zcdp(epsilon: float, delta: float) -> float:
    """Largest rho whose tight conversion gives at most ``epsilon`` at ``delta``.

    Bisection on rho (``zcdp_to_dp`` is increasing in rho) to a relative
    width of 1e-13; returns the lower end, so ``zcdp_to_dp(result, delta) <=
    epsilon`` always holds.

    Raises
    ------
    UsageError
        epsilon <= 0 or delta outside (0, 1).
    AccountingError
        No bracket found (numerical failure).
    """
    epsilon = positive_finite("epsilon", epsilon)
    _check_rho_delta(0.0, delta)
    lo = 0.0
    # eps(rho) >= rho for rho above ~1e-12, so rho = epsilon is already too large or equal; below, the tight
    # conversion gives eps = 0 up to rho ~1.4e-12 (delta 1e-6), which 200 doublings from epsilon = 1e-100 never
    # reach: start the search at 1e-30 at least (eps(1e-30) = 0 <= epsilon, a valid lower end)
    hi = max(epsilon, 1e-30)
    for _ in range(200):
        if zcdp_to_dp(hi, delta) > epsilon:
            break
        lo, hi = hi, hi * 2.0
    else:
        raise AccountingError(f"dp_to_zcdp found no bracket for epsilon={epsilon}, delta={delta}.")
    for _ in range(200):
        if hi - lo <= 1e-13 * hi:
            break
        mid = 0.5 * (lo + hi)
        if zcdp_to_dp(mid, delta) <= epsilon:
            lo = mid
        else:
            hi = mid
    if lo <= 0:
        raise AccountingError(f"dp_to_zcdp failed for epsilon={epsilon}, delta={delta}.")
    return lo
