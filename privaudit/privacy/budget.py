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
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal
from fractions import Fraction

import numpy as np

from privaudit.core.errors import UsageError, positive_finite
from privaudit.privacy import accounting
from privaudit.core.formatting import num, privacy_param
from privaudit.privacy.accounting import DEFAULT_REPORT_DELTA, dp_to_zcdp, zcdp_to_dp
from privaudit.privacy.noise import GAUSSIAN, LAPLACE, NOISE_FAMILY_NAMES, NoiseFamily, noise_family

__all__ = ["Budget", "resolve_budget", "accepted_budgets", "check_reportable", "check_not_too_large", "short_floor",
           "DEFAULT_REPORT_DELTA", "NOISE_FAMILY_NAMES", "RHO_MAX", "PURE_EPSILON_MAX"]

#: The largest rho every entry point takes, and the largest epsilon of an (epsilon, delta) target (its rho is
#: below it): the tight conversion (``accounting.zcdp_to_dp``) searches alpha up to 1 + e^45 ~ 3.5e19, and
#: alpha * rho must stay a finite double (3.5e307 at 1e288); above it no epsilon can be computed.
RHO_MAX = 1e288
#: The largest pure epsilon: its rho = epsilon^2/2 (Bun & Steinke 2016 Prop. 1.4, what the ledger charges) is
#: then at most :data:`RHO_MAX` (sqrt(2e288) = 1.414e144).
PURE_EPSILON_MAX = math.sqrt(2.0 * RHO_MAX)

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
    stated : float or None
        A part of a split budget (:meth:`split`): the decimal share users
        read (0.1), when ``rho`` (what the noise is calibrated to) is the
        double just below it (0.09999999999999999) so that the parts' exact
        costs add up to at most the whole. None: ``rho`` itself.
    """

    mechanism: str
    rho: float
    epsilon: float | None
    delta: float
    requested: dict
    stated: float | None = None

    @property
    def family(self) -> NoiseFamily:
        """The noise family of :attr:`mechanism` (``privaudit.privacy.noise``)."""
        return noise_family(self.mechanism)

    @property
    def amount(self) -> float:
        """What the noise is calibrated to: rho (Gaussian) or epsilon (Laplace)."""
        return self.family.amount(self)

    @property
    def shown(self) -> float:
        """The amount manifests, summaries and the ledger state: :attr:`stated`, else :attr:`amount` (>= it)."""
        return self.amount if self.stated is None else self.stated

    @property
    def text(self) -> str:
        """The budget as every command prints it (numbers by ``core.formatting.privacy_param``).

        ``rho=0.5``; ``rho=0.5 (reported at delta=1e-5)``; ``epsilon=2,
        delta=1e-5 => rho=0.1083``; ``pure epsilon=2``.
        """
        if self.family.pure:
            return f"pure epsilon={privacy_param(self.epsilon)}"
        rho = privacy_param(self.shown)
        if "epsilon" in self.requested:
            return (f"epsilon={privacy_param(self.requested['epsilon'])}, delta={privacy_param(self.delta)} "
                    f"=> rho={rho}")
        return f"rho={rho}" + (f" (reported at delta={privacy_param(self.delta)})" if "delta" in self.requested else "")

    def guarantee(self, event) -> dict:
        """The guarantee of ``event``, a mechanism calibrated to this budget (``accounting.guarantee``).

        States this budget (:attr:`shown`: rho, or epsilon) when the event's
        exact cost is at most :attr:`amount`; raises AccountingError when the
        event costs more.
        """
        return accounting.guarantee(event, delta=self.delta, requested=self.requested, bound=self.amount,
                                    stated=self.stated)

    def reported_at(self, delta: float) -> "Budget":
        """This Gaussian budget with its zCDP guarantee reported as (epsilon, ``delta``).

        The noise (calibrated to rho) is unchanged; ``requested`` gains the delta.

        Raises
        ------
        UsageError
            A Laplace budget (pure DP has delta = 0), ``delta`` outside (0, 1),
            or a rho too small to report at ``delta`` (:func:`check_reportable`).
        """
        if self.family.pure:
            raise UsageError("the Laplace mechanism is pure epsilon-DP (delta = 0): omit `delta`.")
        d = _delta(delta)
        check_reportable(self.rho, d)
        return Budget(GAUSSIAN.name, self.rho, None, d, {**self.requested, "delta": d})

    def part(self, share: float, name: str = "part of rho") -> "Budget":
        """A Gaussian part holding ``share`` of rho (zCDP composes by adding rho).

        The part's rho is :func:`short_floor` of the exact product rho x
        share (``share`` taken at its decimal value, 0.3 as 3/10): at most
        the exact share and as short as users write it (0.5 of 1 is 0.5, not
        0.49999999999949996). Reported at the same delta; its ``requested``
        is ``{"rho": part}`` (plus the delta when the whole budget stated one).

        Raises
        ------
        UsageError
            ``share`` outside (0, 1], a Laplace budget (parts of pure budgets
            are not needed by any entry point), or a part too small to report
            (:func:`check_reportable`, the message names ``name``).
        """
        if self.family.pure:
            raise UsageError("only a Gaussian (zCDP) budget can be split into parts.")
        s = float(share)
        if not (math.isfinite(s) and 0 < s <= 1):
            raise UsageError(f"`share` must lie in (0, 1]. Found {share!r}.")
        return self._part_of(min(Fraction(repr(self.rho)), Fraction(self.rho)) * Fraction(repr(s)), name)

    def split(self, shares: dict) -> dict:
        """Split this Gaussian budget into named parts: exact decimal shares whose costs add up to at most rho.

        rho and the shares are taken at their decimal values (0.3 as 3/10) and
        each part states its exact decimal share of rho (:attr:`shown`: 0.3,
        0.6 and 0.1 of 1, whose decimals add up to 1; the ledger, which adds
        decimals, charges exactly rho). The noise of a part is calibrated to
        :attr:`rho`, the largest double at most both the stated double and its
        decimal (0.09999999999999999 for 0.1, whose double is above 1/10), and
        the last part's calibration is lowered further, if needed, so that the
        calibrations' exact sum never exceeds rho nor its decimal (zCDP
        composition, Bun & Steinke 2016, Lemma 2.3): the composed total states
        rho itself. A part that is not a short decimal (a third) states the
        double nearest below it (as a decimal), so the stated decimals never
        add up to more than rho.

        Parameters
        ----------
        shares : dict[str, float]
            Part name -> share in (0, 1); the shares must add up to 1 (to 1e-9;
            the last part is the decimal rest of rho).

        Returns
        -------
        dict[str, Budget]
            Same keys and order as ``shares``.

        Raises
        ------
        UsageError
            Shares not adding up to 1, a bad share, a Laplace budget, or a part
            too small to report.
        """
        if self.family.pure:
            raise UsageError("only a Gaussian (zCDP) budget can be split into parts.")
        names = list(shares)
        vals = [float(v) for v in shares.values()]
        if (not names or not all(math.isfinite(v) and 0 < v <= 1 for v in vals)
                or not math.isclose(sum(vals), 1.0, rel_tol=1e-9)):
            raise UsageError(f"`shares` must be in (0, 1] and add up to 1. Found {shares!r}.")
        if len(names) == 1:
            return {names[0]: self}
        whole = _decimal_of(self.shown)
        limit = min(whole, Fraction(self.rho))  # the calibrations' exact sum stays within both
        decs = [whole * Fraction(repr(v)) for v in vals[:-1]]
        rest = whole - sum(decs, Fraction(0))
        if rest <= 0:
            raise UsageError(f"`shares` leave nothing for {names[-1]!r}. Found {shares!r}.")
        decs.append(rest)
        out, used = {}, Fraction(0)
        for i, (n, d) in enumerate(zip(names, decs)):
            shown = float(d)
            while _decimal_of(shown) > d:  # a part that is not a short decimal: never state above it
                shown = float(np.nextafter(shown, 0.0))
            cap = min(d, Fraction(shown), _decimal_of(shown))
            if i == len(names) - 1:
                cap = min(cap, limit - used)
            if cap <= 0:
                raise UsageError(f"`shares` leave nothing for {n!r}. Found {shares!r}.")
            rho = _floor_double(cap)
            used += Fraction(rho)
            name = f"{n}'s share of rho"
            check_reportable(rho, self.delta, name)
            req = {"rho": shown, **({"delta": self.delta} if "delta" in self.requested else {})}
            out[n] = Budget(GAUSSIAN.name, rho, None, self.delta, req, None if rho == shown else shown)
        return out

    def _part_of(self, exact: Fraction | float, name: str) -> "Budget":
        rho = exact if isinstance(exact, float) else short_floor(exact)
        check_reportable(rho, self.delta, name)
        req = {"rho": rho, **({"delta": self.delta} if "delta" in self.requested else {})}
        return Budget(GAUSSIAN.name, rho, None, self.delta, req)


def _decimal_of(x: float) -> Fraction:
    """The double ``x`` at the decimal value it prints as (0.1 -> 1/10)."""
    return Fraction(repr(float(x)))


def _floor_double(x: Fraction) -> float:
    """The largest double <= ``x``."""
    c = float(x)
    return c if Fraction(c) <= x else float(np.nextafter(c, 0.0))


def _near_candidates(t: Fraction) -> list[float]:
    """Doubles within a relative 1e-15 of ``t`` > 0: short decimals first, then the doubles around t."""
    out = []
    for sig in range(1, 18):
        for rounding in (ROUND_FLOOR, ROUND_CEILING):
            out.append(float(Context(prec=sig, rounding=rounding).divide(Decimal(t.numerator),
                                                                           Decimal(t.denominator))))
    c = float(t)
    out += [float(np.nextafter(c, 0.0)), c, float(np.nextafter(c, math.inf))]
    seen, keep = set(), []
    for c in out:
        if c > 0 and c not in seen and abs(Fraction(c) - t) <= t * _SHORT_FLOOR_RTOL:
            seen.add(c)
            keep.append(c)
    return sorted(keep, key=lambda c: len(repr(c)))


def short_floor(x: Fraction) -> float:
    """The double <= ``x`` with the fewest significant decimal digits, at most a relative 1e-15 below ``x``.

    Budget parts are amounts users read (summary.json, the ledger): a part is
    never above its exact amount and prints as ``0.3`` rather than
    ``0.30000000000000004`` when a short decimal is that close. Falls back to
    the largest double <= ``x``.

    Raises
    ------
    UsageError
        ``x`` not positive.
    """
    if x <= 0:
        raise UsageError(f"a budget part must be > 0. Found {float(x)!r}.")
    below = [c for c in _near_candidates(x) if Fraction(c) <= x]
    if below:
        return below[0]
    c = float(x)
    return c if Fraction(c) <= x else float(np.nextafter(c, 0.0))


#: How far below the exact part :func:`short_floor` may go to print short (relative).
_SHORT_FLOOR_RTOL = Fraction(1, 10 ** 15)


def _positive(name: str, v) -> float:
    """``positive_finite`` (``privaudit.core.errors``), and a normal float: the ledger refuses subnormals."""
    x = positive_finite(name, v)
    if x < sys.float_info.min:  # subnormal: no usable noise scale, and the ledger refuses it
        raise UsageError(f"`{name}` must be at least {sys.float_info.min:.6g} (a normal float). Found {v!r}.")
    return x


def accepted_budgets(families=NOISE_FAMILY_NAMES) -> str:
    """The budget combinations an entry point accepts, in words (every refusal names them).

    ``families`` holds the noise families the entry point has: with Laplace,
    ``epsilon`` alone (pure epsilon-DP) is one of them.
    """
    forms = []
    if GAUSSIAN.name in families:
        forms += ["`rho` R (R-zCDP)", "`rho` R with `delta` D (R-zCDP reported at D)",
                  "`epsilon` E with `delta` D ((E, D)-DP, converted exactly to rho)"]
    if LAPLACE.name in families:
        forms.append("`epsilon` E alone (pure E-DP, Laplace noise)")
    return forms[0] if len(forms) == 1 else ", ".join(forms[:-1]) + " or " + forms[-1]


def resolve_budget(*, rho=None, epsilon=None, delta=None, mechanism: str | None = None,
                   families=NOISE_FAMILY_NAMES) -> Budget:
    """Check the budget arguments and turn them into a :class:`Budget`: one meaning at every entry point.

    * ``rho`` R: R-zCDP, Gaussian noise, reported as (epsilon, delta)-DP at
      :data:`DEFAULT_REPORT_DELTA`;
    * ``rho`` R with ``delta`` D: the same budget, reported at D;
    * ``epsilon`` E with ``delta`` D: an (E, D)-DP target, Gaussian noise at
      the largest rho whose tight conversion gives at most E at D
      (:func:`privaudit.privacy.accounting.dp_to_zcdp`, Canonne, Kamath &
      Steinke 2020), reported at D;
    * ``epsilon`` E alone (or with ``delta`` 0): pure E-DP, Laplace noise
      (charged as rho = E^2/2, Bun & Steinke 2016 Prop. 1.4), where
      ``families`` holds Laplace.

    The same table is in docs/privacy.md ("Budget flags").

    Parameters
    ----------
    rho : float, optional
        zCDP budget, > 0.
    epsilon : float, optional
        (epsilon, delta)-DP target (with ``delta``) or pure epsilon (alone), > 0.
    delta : float, optional
        In (0, 1): the target's delta, or the delta a ``rho`` budget is reported at.
    mechanism : {"gaussian", "laplace"}, optional
        The noise family, when the caller fixes it; None (default): the one
        the arguments name (Laplace for ``epsilon`` alone, else Gaussian).
    families : tuple of str
        The noise families the entry point has (default both); ``epsilon``
        alone is refused where Laplace is not among them.

    Returns
    -------
    Budget

    Raises
    ------
    UsageError
        No budget, ``delta`` alone, both ``rho`` and ``epsilon``, a form the
        entry point has no noise family for, or out-of-range values; the
        message names the parameters (``rho``, ``epsilon``, ``delta``,
        ``mechanism``), never a CLI flag, and lists the accepted combinations.
    """
    families = tuple(families)
    if mechanism is not None:
        noise_family(mechanism)  # an unknown name raises here
        if mechanism not in families:
            only = " or ".join(f.capitalize() for f in families)
            raise UsageError(f"`mechanism` {mechanism} is not available here (the noise is {only} only): give "
                             f"{accepted_budgets(families)}.")
    accepted = accepted_budgets(families if mechanism is None else (mechanism,))
    if rho is None and epsilon is None:
        if delta is not None:
            raise UsageError(f"`delta` alone is not a budget: give {accepted}.")
        raise UsageError(f"give a budget: {accepted}.")
    if rho is not None and epsilon is not None:
        raise UsageError(f"give one budget, `rho` or `epsilon`, not both: {accepted}.")
    no_delta = delta is None or (not isinstance(delta, bool) and delta == 0)  # (E, 0)-DP is pure E-DP
    pure = epsilon is not None and no_delta if mechanism is None else noise_family(mechanism).pure
    if pure:
        if rho is not None:
            raise UsageError("the Laplace mechanism is pure epsilon-DP: give `epsilon` alone, not `rho`.")
        if delta not in (None, 0, 0.0):
            raise UsageError(f"the Laplace mechanism is pure epsilon-DP (delta = 0): omit `delta`. Found {delta!r}.")
        if LAPLACE.name not in families:
            raise UsageError("`epsilon` alone is a pure epsilon-DP budget (Laplace noise), and here the noise is "
                             f"Gaussian (zCDP) only: give {accepted}.")
        eps = _positive("epsilon", epsilon)
        check_reportable(eps * eps / 2.0, DEFAULT_REPORT_DELTA, "epsilon", pure=eps)
        return Budget(LAPLACE.name, eps * eps / 2.0, eps, 0.0, {"epsilon": eps})
    if rho is not None:
        r = _positive("rho", rho)
        if delta is None:
            check_reportable(r, DEFAULT_REPORT_DELTA)
            return Budget(GAUSSIAN.name, r, None, DEFAULT_REPORT_DELTA, {"rho": r})
        d = _delta(delta)
        check_reportable(r, d)
        return Budget(GAUSSIAN.name, r, None, d, {"rho": r, "delta": d})
    if delta is None:
        raise UsageError(f"Gaussian noise needs `epsilon` with `delta` (or `rho`): give {accepted}.")
    eps = _positive("epsilon", epsilon)
    d = _delta(delta)
    check_not_too_large(eps, "epsilon", form="epsilon")
    r = float(dp_to_zcdp(eps, d))
    if 0 < r < math.inf and zcdp_to_dp(r, d) == 0:  # name the flag the user gave, not the converted rho
        raise UsageError(f"`epsilon` = {num(eps)} is too small: at delta = {num(d)} the largest rho it allows "
                         f"({num(r)}) is already (0, {num(d)})-DP by the tight conversion, so the noise would "
                         "drown every count and nothing useful could be released. Give a larger budget.")
    check_reportable(r, d, "rho converted from epsilon")
    return Budget(GAUSSIAN.name, r, None, d, {"epsilon": eps, "delta": d})


def check_reportable(rho: float, delta: float, name: str = "rho", *, pure: float | None = None) -> None:
    """Refuse, before any work, a budget so small that its noise would drown everything: one rule for every command.

    The rule: the budget's zCDP rho (for a pure epsilon-DP budget, the rho =
    epsilon^2/2 it implies and the ledger charges, Bun & Steinke 2016 Prop.
    1.4) must give an epsilon > 0 at ``delta`` by the tight conversion. At a
    tiny rho (about 3e-12 and below at delta = 1e-6, i.e. epsilon below about
    2.4e-6 for Laplace) the conversion gives epsilon = 0: the noise is so
    wide (sigma or b above ~4e5 sensitivities) that every count drowns.
    ``release``, ``train``, ``pipeline``, ``audit`` and ``explore`` all
    resolve their budget through :func:`resolve_budget`, hence this rule.

    Parameters
    ----------
    rho : float
        The zCDP amount (pure budgets: epsilon^2/2, possibly 0.0 by underflow).
    delta : float
        The reporting delta.
    name : str
        The parameter named in the message.
    pure : float, optional
        The pure epsilon, when the budget is one (the message then names it).

    Raises
    ------
    UsageError
        The conversion of ``rho`` at ``delta`` gives epsilon = 0, or a budget
        above the largest one the conversion takes (:func:`check_not_too_large`).
    """
    if pure is not None:
        check_not_too_large(pure, name, form="pure")
    else:
        check_not_too_large(rho, name)
    eps = float(zcdp_to_dp(rho, delta)) if rho > 0 else 0.0
    if eps > 0:
        return
    if pure is not None:
        raise UsageError(f"`{name}` = {num(pure)} is too small: its noise (scale above ~4e5 sensitivities) would "
                         f"drown every count, and the rho = epsilon^2/2 = {num(rho)} it implies (what the ledger "
                         f"charges) is already (0, {num(delta)})-DP by the tight conversion; nothing useful could "
                         "be released (the same rule as for rho budgets). Give a larger budget.")
    raise UsageError(f"`{name}` = {num(rho)} is too small: at delta = {num(delta)} its epsilon is exactly 0 "
                     f"(the tight conversion: the mechanism is already (0, {num(delta)})-DP), so the noise "
                     "would drown every count and nothing useful could be released. Give a larger budget.")


def check_not_too_large(value: float, name: str = "rho", *, form: str = "rho") -> None:
    """Refuse a budget too large for the tight zCDP -> (epsilon, delta) conversion: one rule for every entry point.

    Every command and Python entry point (:func:`resolve_budget`, :func:`check_reportable`, the audit's
    ``Claim``) checks its budget here before converting it, so a huge budget is refused in the same words
    whatever its form, naming the parameter, the value and the largest one accepted (before: "zCDP->DP
    conversion failed numerically for rho=1e+308" for ``epsilon`` 1e308 with a delta, or for a rho claim).
    The limits do not depend on delta: the conversion's search reaches alpha = 1 + e^45 at every delta in
    (0, 1). A budget that large protects nothing.

    Parameters
    ----------
    value : float
        The budget as given, > 0 (a rho, an epsilon with a delta, or a pure epsilon).
    name : str
        The parameter named in the message (the CLI maps it to its flag).
    form : {"rho", "epsilon", "pure"}
        ``rho`` and ``epsilon`` (an (epsilon, delta) target, whose rho is below epsilon) are accepted up to
        :data:`RHO_MAX`; ``pure`` (a pure epsilon, charged as rho = epsilon^2/2) up to :data:`PURE_EPSILON_MAX`.

    Raises
    ------
    UsageError
        ``value`` above its limit (inf included).
    """
    limit = PURE_EPSILON_MAX if form == "pure" else RHO_MAX
    if value <= limit:
        return
    why = {"rho": "its epsilon would overflow the tight zCDP -> (epsilon, delta) conversion",
           "epsilon": "its conversion to rho would overflow the tight zCDP -> (epsilon, delta) conversion",
           "pure": (f"the rho = epsilon^2/2 it is charged as would exceed {num(RHO_MAX)}, where the tight "
                    "zCDP -> (epsilon, delta) conversion overflows")}[form]
    raise UsageError(f"`{name}` = {num(value)} is too large: {why}, and a budget that large protects nothing. "
                     f"The largest accepted is {num(limit)} (rho, or epsilon with a delta: up to {num(RHO_MAX)}; a "
                     f"pure epsilon: up to {num(PURE_EPSILON_MAX)}).")


def _delta(delta) -> float:
    d = _positive("delta", delta)
    if d >= 1:
        raise UsageError(f"`delta` must be in (0, 1). Found {delta!r}.")
    return d
