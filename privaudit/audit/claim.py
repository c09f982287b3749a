"""The DP claim an audit tests: (epsilon, delta), rho-zCDP, or a privacy event's guarantee."""

from __future__ import annotations

import math
from dataclasses import dataclass

from privaudit.audit.bounds import gdp_mu_from_eps
from privaudit.core.errors import UsageError
from privaudit.privacy import accounting
from privaudit.privacy.accounting import zcdp_to_dp
from privaudit.privacy.budget import check_not_too_large

CLAIM_KINDS = ("generic", "gaussian")


@dataclass(frozen=True)
class Claim:
    """A DP claim under test (substitution of one privacy unit).

    Attributes
    ----------
    epsilon : float
        Claimed epsilon at ``delta`` (for a rho claim: the tight
        Canonne-Kamath-Steinke conversion).
    delta : float
        0 <= delta < 1.
    rho : float or None
        The zCDP parameter when the claim was stated as rho-zCDP.
    kind : {"generic", "gaussian"}
        ``generic`` (default): the (epsilon, delta) test only. ``gaussian``: an
        explicit opt-in stating that the mechanism is mu-GDP (continuous
        Gaussian noise, post-processed); the GDP test is then added and its
        numbers are labelled as GDP-derived in the report.
    mu : float or None
        The GDP parameter a Gaussian claim implies: sqrt(2 rho), or the
        largest mu whose privacy profile gives (epsilon, delta).
    """

    epsilon: float
    delta: float
    rho: float | None = None
    kind: str = "generic"
    mu: float | None = None
    conversion: str = "as stated"

    @classmethod
    def from_epsilon(cls, epsilon: float, delta: float, kind: str = "generic") -> "Claim":
        """An (epsilon, delta) claim.

        Raises
        ------
        UsageError
            epsilon <= 0, delta outside [0, 1), unknown kind, a Gaussian
            claim with delta = 0 (no Gaussian mechanism is pure DP), or an
            epsilon too large (``privacy.budget.check_not_too_large``, the rule
            of every budget: a pure epsilon above 1.414e144, else above 1e288).
        """
        _check_claim(epsilon, delta, kind)
        mu = None
        if kind == "gaussian":
            if delta <= 0:
                raise UsageError("a Gaussian claim needs `delta` > 0 (no Gaussian mechanism is pure DP).")
            mu = gdp_mu_from_eps(epsilon, delta)
        return cls(float(epsilon), float(delta), None, kind, mu, "as stated")

    @classmethod
    def from_rho(cls, rho: float, delta: float, kind: str = "generic") -> "Claim":
        """A rho-zCDP claim, compared at ``delta`` through the tight CKS conversion.

        ``kind="generic"`` (default): tested by the (epsilon, delta) test only,
        valid for every rho-zCDP mechanism. ``kind="gaussian"`` (opt-in): the
        claim is read as sqrt(2 rho)-GDP and the GDP test is added; valid only
        when the mechanism really is a post-processing of continuous Gaussian
        noise. rho-zCDP does not imply sqrt(2 rho)-GDP: the discrete
        Gaussian at sigma^2 = 1 (0.5-zCDP) and randomized response claimed as
        rho fail the GDP test at 1e5 runs while meeting their claims.

        Raises
        ------
        UsageError
            rho <= 0, rho above 1e288 (``privacy.budget.check_not_too_large``,
            the rule of every budget) or delta outside (0, 1).
        """
        if not (isinstance(rho, (int, float)) and math.isfinite(rho) and rho > 0):
            raise UsageError(f"`claim_rho` must be a finite number > 0. Found {rho}.")
        check_not_too_large(rho, "claim_rho")
        if not 0 < delta < 1:
            raise UsageError(f"`delta` must lie in (0, 1) for a rho claim. Found {delta}.")
        if kind not in CLAIM_KINDS:
            raise UsageError(f"`claim_kind` must be one of {CLAIM_KINDS}. Found {kind!r}.")
        eps = zcdp_to_dp(rho, delta)
        eps = float(eps[0] if isinstance(eps, tuple) else getattr(eps, "epsilon", eps))
        mu = math.sqrt(2 * rho) if kind == "gaussian" else None
        return cls(eps, float(delta), float(rho), kind, mu, "zCDP -> (eps, delta): Canonne-Kamath-Steinke 2020")

    @classmethod
    def from_event(cls, event, delta: float, kind: str = "generic", bound: float | None = None,
                   stated: float | None = None) -> "Claim":
        """The claim a mechanism's privacy event implies (``privaudit.privacy.accounting``).

        A pure-DP event claims (eps, 0) with eps = sum of l1/b (generic);
        any other event claims its rho, compared at ``delta``, of ``kind``
        (``gaussian`` opts in to the GDP test, as :meth:`from_rho`). With
        ``bound`` (the budget the event was calibrated to), the claim is the
        guarantee its artifact states (``accounting.guarantee``: the budget,
        after checking the event costs no more), so an audit tests the very
        number the manifest and the pipeline's summary state (``stated``: a
        split budget part's decimal share, ``Budget.shown``).

        Raises
        ------
        AccountingError
            An event the accountant does not know.
        UsageError
            delta outside (0, 1) for a zCDP event; unknown kind.
        """
        pure = accounting.is_pure(event)
        if bound is not None:
            g = accounting.guarantee(event, delta=0.0 if pure else delta, requested={}, bound=bound, stated=stated)
            return cls.from_epsilon(g["epsilon"], 0.0) if pure else cls.from_rho(g["rho"], delta, kind=kind)
        if pure:
            return cls.from_epsilon(accounting.event_epsilon(event), 0.0)
        return cls.from_rho(accounting.event_rho(event), delta, kind=kind)

    def to_dict(self) -> dict:
        return {"epsilon": self.epsilon, "delta": self.delta, "rho": self.rho, "kind": self.kind,
                "mu": self.mu, "conversion": self.conversion}


def _check_claim(epsilon, delta, kind):
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise UsageError(f"`claim_epsilon` must be a finite number > 0. Found {epsilon}.")
    if not (isinstance(delta, (int, float)) and 0 <= delta < 1):
        raise UsageError(f"`delta` must lie in [0, 1). Found {delta}.")
    if kind not in CLAIM_KINDS:
        raise UsageError(f"`claim_kind` must be one of {CLAIM_KINDS}. Found {kind!r}.")
    check_not_too_large(epsilon, "claim_epsilon", form="pure" if delta == 0 else "epsilon")
