"""Privacy events, their composition, and conversions between zCDP and (eps, delta)-DP.

Each mechanism call is described by an immutable :class:`PrivacyEvent`; an
:class:`Accountant` composes them. zCDP composes by adding rho (also
adaptively); pure eps-DP composes by adding eps. A pure eps-DP mechanism is
also (eps^2 / 2)-zCDP (Bun & Steinke 2016, Prop. 1.4), so the accountant can
mix both: ``total_rho()`` counts a Laplace event as eps^2/2, while
``total_epsilon()`` is only defined when every event is pure DP.

References
----------
Bun & Steinke, "Concentrated Differential Privacy: Simplifications,
Extensions, and Lower Bounds", TCC 2016, arXiv:1605.02065 (Prop. 1.3, 1.4,
1.6, Lemma 2.3). Canonne, Kamath & Steinke, "The Discrete Gaussian for
Differential Privacy", NeurIPS 2020, arXiv:2004.00010 (Prop. 12, Cor. 13).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np
from scipy import optimize

from privaudit.errors import AccountingError, UsageError
from privaudit.privacy.sensitivity import NEIGHBOURING, Sensitivity


@dataclass(frozen=True)
class PrivacyEvent:
    """One mechanism call on the private data.

    Attributes
    ----------
    mechanism : str
        ``"gaussian"`` (rho-zCDP) or ``"laplace"`` (pure eps-DP).
    family : str
        Released family, e.g. ``"visits+transitions"``.
    l1, l2 : float or None
        Sensitivities the guarantee rests on (the one used must be set).
    scale : float
        Noise scale: sigma (Gaussian) or b (Laplace).
    rho : float or None
        zCDP parameter (Gaussian: l2^2 / (2 sigma^2)).
    epsilon : float or None
        Pure-DP parameter (Laplace: l1 / b).
    neighbouring : str
        Neighbouring relation (``"substitution"``).
    privacy_unit : str
        What one unit is (e.g. ``"patient_id, <= 1 episode"``).
    noise : str
        ``"rounded"`` or ``"exact"``.
    """

    mechanism: str
    family: str
    l1: float | None
    l2: float | None
    scale: float
    rho: float | None
    epsilon: float | None
    neighbouring: str = NEIGHBOURING
    privacy_unit: str = "episode"
    noise: str = "rounded"

    def as_dict(self) -> dict:
        """JSON-ready dict (for manifests)."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _pos(name: str, v) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise AccountingError(f"`{name}` must be a positive number. Found {v!r}.") from None
    if not (f > 0 and math.isfinite(f)):
        raise AccountingError(f"`{name}` must be a positive finite number. Found {v!r}.")
    return f


def gaussian_event(family: str, l2: float, sigma: float, *, l1: float | None = None,
                   neighbouring: str = NEIGHBOURING, privacy_unit: str = "episode",
                   noise: str = "rounded") -> PrivacyEvent:
    """Event of a Gaussian mechanism: rho = l2^2 / (2 sigma^2) (Bun & Steinke Prop. 1.6).

    rho is rounded up by one ulp so the recorded guarantee is never optimistic.

    Raises
    ------
    AccountingError
        ``l2`` or ``sigma`` not positive and finite.
    """
    l2 = _pos("l2", l2)
    sigma = _pos("sigma", sigma)
    rho = float(np.nextafter(l2 * l2 / (2.0 * sigma * sigma), math.inf))
    return PrivacyEvent("gaussian", family, l1, l2, sigma, rho, None, neighbouring,
                        privacy_unit, noise)


def laplace_event(family: str, l1: float, b: float, *, l2: float | None = None,
                  neighbouring: str = NEIGHBOURING, privacy_unit: str = "episode",
                  noise: str = "rounded") -> PrivacyEvent:
    """Event of a Laplace mechanism: eps = l1 / b (rounded up by one ulp).

    Raises
    ------
    AccountingError
        ``l1`` or ``b`` not positive and finite.
    """
    l1 = _pos("l1", l1)
    b = _pos("b", b)
    eps = float(np.nextafter(l1 / b, math.inf))
    return PrivacyEvent("laplace", family, l1, l2, b, None, eps, neighbouring,
                        privacy_unit, noise)


@dataclass
class Accountant:
    """Composes privacy events (sequential, possibly adaptive composition).

    ``add`` checks an event completely before recording it: an event the
    accountant does not know (unknown mechanism, missing or invalid
    parameter, another neighbouring relation than the first event's) raises
    :class:`AccountingError` and leaves the state unchanged.
    """

    events: list[PrivacyEvent] = field(default_factory=list)

    def add(self, event: PrivacyEvent) -> "Accountant":
        """Record ``event``; returns self. Raises AccountingError (state unchanged)."""
        if not isinstance(event, PrivacyEvent):
            raise AccountingError(f"`event` must be a PrivacyEvent. Found {type(event).__name__}.")
        if event.mechanism == "gaussian":
            if event.rho is None or not (event.rho > 0 and math.isfinite(event.rho)):
                raise AccountingError(f"a gaussian event must hold rho > 0. Found {event.rho!r}.")
        elif event.mechanism == "laplace":
            if event.epsilon is None or not (event.epsilon > 0 and math.isfinite(event.epsilon)):
                raise AccountingError(
                    f"a laplace event must hold epsilon > 0. Found {event.epsilon!r}.")
        else:
            raise AccountingError(f"unknown mechanism {event.mechanism!r}; the accountant "
                                  f"supports 'gaussian' (zCDP) and 'laplace' (pure DP).")
        if event.neighbouring != NEIGHBOURING:
            raise AccountingError(f"unknown neighbouring relation {event.neighbouring!r}; "
                                  f"only {NEIGHBOURING!r} is supported.")
        if self.events and event.privacy_unit != self.events[0].privacy_unit:
            raise AccountingError(
                f"cannot compose events over different privacy units: "
                f"{self.events[0].privacy_unit!r} and {event.privacy_unit!r}.")
        self.events.append(event)
        return self

    def total_rho(self) -> float:
        """zCDP rho of the composition: sum of rho, a Laplace event counted as eps^2/2.

        Rounded up (math.fsum then one ulp).
        """
        terms = [e.rho if e.mechanism == "gaussian" else e.epsilon ** 2 / 2.0 for e in self.events]
        return float(np.nextafter(math.fsum(terms), math.inf)) if terms else 0.0

    def total_epsilon(self) -> float:
        """Pure-DP eps of the composition (sum of eps).

        Raises
        ------
        AccountingError
            Some event is not pure DP (use ``epsilon_delta``).
        """
        if any(e.mechanism != "laplace" for e in self.events):
            raise AccountingError("the composition is not pure DP (it holds gaussian events); "
                                  "use total_rho() or epsilon_delta(delta).")
        terms = [e.epsilon for e in self.events]
        return float(np.nextafter(math.fsum(terms), math.inf)) if terms else 0.0

    def is_pure(self) -> bool:
        """True when every event is pure DP."""
        return all(e.mechanism == "laplace" for e in self.events)

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
    try:
        epsilon = float(epsilon)
    except (TypeError, ValueError):
        raise UsageError(f"`epsilon` must be a positive number. Found {epsilon!r}.") from None
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise UsageError(f"`epsilon` must be > 0 and finite. Found {epsilon!r}.")
    _check_rho_delta(0.0, delta)
    lo = 0.0
    hi = epsilon  # eps(rho) >= rho, so rho = epsilon is already too large or equal
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


# ----------------------------------------------------------------------------
# budget split between released families


@dataclass(frozen=True)
class BudgetSplit:
    """How one budget is spent on several families released with one noise scale.

    Attributes
    ----------
    mechanism : str
        ``"gaussian"`` or ``"laplace"``.
    total : float
        rho (Gaussian) or epsilon (Laplace) of the whole release.
    scale : float
        The one noise scale used for every family: sigma or b.
    combined : Sensitivity
        Sensitivity of the concatenated released vector.
    shares : dict[str, float]
        Family -> its part of ``total`` (rho_f = l2_f^2 / (2 sigma^2), or
        eps_f = l1_f / b); the shares add up to ``total``.
    """

    mechanism: str
    total: float
    scale: float
    combined: Sensitivity
    shares: dict

    def as_dict(self) -> dict:
        return {"mechanism": self.mechanism, "total": self.total, "scale": self.scale,
                "combined_sensitivity": self.combined.as_dict(), "shares": dict(self.shares)}


def split_budget(total: float, sensitivities: Sequence[Sensitivity] | Iterable[Sensitivity], *,
                 mechanism: str = "gaussian") -> BudgetSplit:
    """Split a budget between released families by using one noise scale for all.

    The released object is the concatenation of the families, whose
    sensitivity is L1 = sum of l1, L2 = sqrt(sum of l2^2). One scale from the
    combined sensitivity (sigma = L2 / sqrt(2 rho), or b = L1 / eps) spends
    exactly ``total``; family f's share is l2_f^2 / (2 sigma^2) (zCDP) or
    l1_f / b (pure DP). With equal per-family sensitivities the budget is
    split equally (visits + transitions: rho/2 each; seed 000 eq. (1)).

    Parameters
    ----------
    total : float
        rho (``mechanism="gaussian"``) or epsilon (``"laplace"``), > 0.
    sensitivities : sequence of Sensitivity
        One per released family.
    mechanism : {"gaussian", "laplace"}

    Returns
    -------
    BudgetSplit

    Raises
    ------
    UsageError
        Bad total, mechanism, or empty / duplicated families.
    """
    from privaudit.privacy.mechanisms import gaussian_sigma, laplace_scale
    from privaudit.privacy.sensitivity import combine

    sens = list(sensitivities)
    names = [s.family for s in sens]
    if len(set(names)) != len(names):
        raise UsageError(f"`sensitivities` must name each family once. Found {names}.")
    comb = combine(sens)
    if mechanism == "gaussian":
        scale = gaussian_sigma(comb.l2, total)
        shares = {s.family: s.l2 ** 2 / (2.0 * scale ** 2) for s in sens}
    elif mechanism == "laplace":
        scale = laplace_scale(comb.l1, total)
        shares = {s.family: s.l1 / scale for s in sens}
    else:
        raise UsageError(f"`mechanism` must be 'gaussian' or 'laplace'. Found {mechanism!r}.")
    return BudgetSplit(mechanism, float(total), scale, comb, shares)
