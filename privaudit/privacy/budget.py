"""The privacy budget: resolved once from the user's arguments at each entry point.

Every entry point that spends budget (``release``, ``train --algo dp-vapvi``,
``pipeline``, the auditor's built-in mechanisms) calls :func:`resolve_budget`
exactly once and hands the resulting :class:`Budget` down. A mechanism
calibrates its noise to a budget and returns a privacy event
(``privaudit.privacy.events``); the guarantee, the ledger charge and the
audit claim are derived from that event by ``privaudit.privacy.accounting``,
never from the budget itself.

References
----------
Bun & Steinke 2016, arXiv:1605.02065, Prop. 1.4 (pure eps-DP implies
eps^2/2-zCDP). Canonne, Kamath & Steinke 2020, arXiv:2004.00010 (the tight
zCDP -> (eps, delta) conversion used to turn (epsilon, delta) into rho).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

from privaudit.errors import UsageError
from privaudit.privacy import accounting
from privaudit.fmt import num
from privaudit.privacy.accounting import DEFAULT_REPORT_DELTA, dp_to_zcdp, zcdp_to_dp

__all__ = ["Budget", "resolve_budget", "check_reportable", "DEFAULT_REPORT_DELTA", "MECHANISMS"]

#: Noise families a budget can be resolved for.
MECHANISMS = ("gaussian", "laplace")


@dataclass(frozen=True)
class Budget:
    """The privacy budget of one run, resolved from the user's arguments.

    Attributes
    ----------
    mechanism : {"gaussian", "laplace"}
        Gaussian noise is calibrated to ``rho`` (zCDP); Laplace noise to
        ``epsilon`` (pure DP).
    rho : float
        zCDP parameter. Gaussian: the budget; Laplace: eps^2/2 (Bun & Steinke
        2016, Prop. 1.4).
    epsilon : float or None
        Pure-DP epsilon (Laplace only).
    delta : float
        delta at which a zCDP guarantee is reported as (epsilon, delta): the
        requested delta, else :data:`DEFAULT_REPORT_DELTA`; 0.0 for Laplace.
    requested : dict
        The arguments as given (``rho``; or ``epsilon`` and ``delta``; or
        ``epsilon`` alone for Laplace).
    """

    mechanism: str
    rho: float
    epsilon: float | None
    delta: float
    requested: dict

    @property
    def amount(self) -> float:
        """What the noise is calibrated to: rho (Gaussian) or epsilon (Laplace)."""
        return self.rho if self.mechanism == "gaussian" else self.epsilon

    def guarantee(self, event) -> dict:
        """The guarantee of ``event``, a mechanism calibrated to this budget (``accounting.guarantee``).

        States this budget (rho, or epsilon) when the event's exact cost is at
        most it; raises AccountingError when the event costs more.
        """
        return accounting.guarantee(event, delta=self.delta, requested=self.requested, bound=self.amount)

    def reported_at(self, delta: float) -> "Budget":
        """This Gaussian budget with its zCDP guarantee reported as (epsilon, ``delta``).

        The noise (calibrated to rho) is unchanged; ``requested`` gains the delta.

        Raises
        ------
        UsageError
            A Laplace budget (pure DP has delta = 0), ``delta`` outside (0, 1),
            or a rho too small to report at ``delta`` (:func:`check_reportable`).
        """
        if self.mechanism != "gaussian":
            raise UsageError("the Laplace mechanism is pure epsilon-DP (delta = 0): omit `delta`.")
        d = _delta(delta)
        check_reportable(self.rho, d)
        return Budget("gaussian", self.rho, None, d, {**self.requested, "delta": d})

    def part(self, share: float, name: str = "part of rho") -> "Budget":
        """A Gaussian part holding ``share`` of rho (zCDP composes by adding rho).

        The part is reported at the same delta; its ``requested`` is
        ``{"rho": part}`` (plus the delta when the whole budget stated one).

        Raises
        ------
        UsageError
            ``share`` outside (0, 1], a Laplace budget (parts of pure budgets
            are not needed by any entry point), or a part too small to report
            (:func:`check_reportable`, the message names ``name``).
        """
        if self.mechanism != "gaussian":
            raise UsageError("only a Gaussian (zCDP) budget can be split into parts.")
        s = float(share)
        if not (math.isfinite(s) and 0 < s <= 1):
            raise UsageError(f"`share` must lie in (0, 1]. Found {share!r}.")
        rho = self.rho * s
        check_reportable(rho, self.delta, name)
        req = {"rho": rho, **({"delta": self.delta} if "delta" in self.requested else {})}
        return Budget("gaussian", rho, None, self.delta, req)


def _positive(name: str, v) -> float:
    if isinstance(v, bool):
        raise UsageError(f"`{name}` must be a number > 0. Found {v!r}.")
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise UsageError(f"`{name}` must be a number > 0. Found {v!r}.") from None
    if not (math.isfinite(x) and x > 0):
        raise UsageError(f"`{name}` must be a finite number > 0. Found {v!r}.")
    if x < sys.float_info.min:  # subnormal: no usable noise scale, and the ledger refuses it
        raise UsageError(f"`{name}` must be at least {sys.float_info.min:.6g} (a normal float). Found {v!r}.")
    return x


def resolve_budget(*, rho=None, epsilon=None, delta=None, mechanism: str = "gaussian") -> Budget:
    """Check the budget arguments and turn them into a :class:`Budget`.

    Gaussian: ``rho`` alone, or ``epsilon`` and ``delta`` (converted by
    :func:`privaudit.privacy.accounting.dp_to_zcdp`: the largest rho whose
    tight CKS conversion gives at most epsilon at delta; a rho budget is
    reported at :data:`DEFAULT_REPORT_DELTA`). Laplace: ``epsilon`` alone
    (pure DP).

    Parameters
    ----------
    rho : float, optional
        zCDP budget, > 0.
    epsilon : float, optional
        (epsilon, delta)-DP target (Gaussian) or pure epsilon (Laplace), > 0.
    delta : float, optional
        In (0, 1); Gaussian only.
    mechanism : {"gaussian", "laplace"}

    Returns
    -------
    Budget

    Raises
    ------
    UsageError
        Missing, conflicting or out-of-range values; the message names the
        parameter (``rho``, ``epsilon``, ``delta``, ``mechanism``), never a CLI flag.
    """
    if mechanism not in MECHANISMS:
        raise UsageError(f"`mechanism` must be one of {MECHANISMS}. Found {mechanism!r}.")
    if mechanism == "laplace":
        if rho is not None:
            raise UsageError("the Laplace mechanism is pure epsilon-DP: give `epsilon`, not `rho`.")
        if epsilon is None:
            raise UsageError("the Laplace mechanism needs a budget `epsilon`.")
        if delta not in (None, 0, 0.0):
            raise UsageError(f"the Laplace mechanism is pure epsilon-DP (delta = 0): omit `delta`. Found {delta!r}.")
        eps = _positive("epsilon", epsilon)
        return Budget("laplace", eps * eps / 2.0, eps, 0.0, {"epsilon": eps})
    if rho is not None:
        if epsilon is not None or delta is not None:
            raise UsageError("give either a budget `rho`, or `epsilon` with `delta`, not both.")
        r = _positive("rho", rho)
        check_reportable(r, DEFAULT_REPORT_DELTA)
        return Budget("gaussian", r, None, DEFAULT_REPORT_DELTA, {"rho": r})
    if epsilon is None or delta is None:
        raise UsageError("give a budget: `rho`, or `epsilon` with `delta`.")
    eps = _positive("epsilon", epsilon)
    d = _delta(delta)
    r = float(dp_to_zcdp(eps, d))
    check_reportable(r, d, "rho converted from epsilon")
    return Budget("gaussian", r, None, d, {"epsilon": eps, "delta": d})


def check_reportable(rho: float, delta: float, name: str = "rho") -> None:
    """Refuse, before any work, a zCDP budget whose (epsilon, delta) statement is epsilon = 0.

    At a tiny rho (about 3e-12 and below at delta = 1e-6) the tight conversion
    gives epsilon = 0: the Gaussian noise is so wide that every count drowns,
    and the manifest has no positive epsilon to state.

    Raises
    ------
    UsageError
        The conversion of ``rho`` at ``delta`` gives epsilon = 0.
    """
    if not float(zcdp_to_dp(rho, delta)) > 0:
        raise UsageError(f"`{name}` = {num(rho)} is too small: at delta = {num(delta)} its epsilon is exactly 0 "
                         f"(the tight conversion: the mechanism is already (0, {num(delta)})-DP), so the noise "
                         "would drown every count and nothing useful could be released. Give a larger budget.")


def _delta(delta) -> float:
    d = _positive("delta", delta)
    if d >= 1:
        raise UsageError(f"`delta` must be in (0, 1). Found {delta!r}.")
    return d
