"""Noise families: what distinguishes Gaussian (rho-zCDP) from Laplace (pure epsilon-DP) noise, in one object.

A string ``"gaussian"`` or ``"laplace"`` comes in from a file (a manifest, a
plan) or a CLI flag; :func:`noise_family` turns it into :data:`GAUSSIAN` or
:data:`LAPLACE` once, and the code then asks the object instead of branching
on the string:

============================  =====================  =======================
                              :data:`GAUSSIAN`       :data:`LAPLACE`
============================  =====================  =======================
``budget_unit`` (calibrated)  ``"rho"`` (zCDP)       ``"epsilon"`` (pure DP)
``definition`` (manifests)    ``"zCDP"``             ``"pure-DP"``
``norm`` (sensitivity)        ``"l2"``               ``"l1"``
``scale_symbol``              ``"sigma"``            ``"b"``
``scale_key`` (manifests)     ``"sigma"``            ``"laplace_b"``
:meth:`~NoiseFamily.calibrate`  l2 / sqrt(2 rho)     l1 / epsilon
:meth:`~NoiseFamily.event`      ``GaussianEvent``    ``LaplaceEvent``
:meth:`~NoiseFamily.cost`       ``event_rho``        ``event_epsilon``
============================  =====================  =======================

The strings stay what files and flags hold (:attr:`NoiseFamily.name`); file
formats do not change.

References
----------
Bun & Steinke 2016, arXiv:1605.02065, Prop. 1.6 (Gaussian: rho = l2^2 /
(2 sigma^2)) and Prop. 1.4 (pure eps-DP implies eps^2/2-zCDP). Dwork,
McSherry, Nissim & Smith 2006; Dwork & Roth 2014, Thm 3.6 (Laplace:
eps = l1 / b). Canonne, Kamath & Steinke 2020, arXiv:2004.00010, Thm 14
(the discrete Gaussian gives the same rho for integer statistics).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privaudit.core.errors import UsageError, positive_finite
from privaudit.privacy import accounting, samplers
from privaudit.privacy.events import GaussianEvent, LaplaceEvent

__all__ = ["NoiseFamily", "GAUSSIAN", "LAPLACE", "FAMILIES", "NOISE_FAMILY_NAMES", "noise_family",
           "gaussian_sigma", "laplace_scale"]


def gaussian_sigma(l2: float, rho: float) -> float:
    """Noise standard deviation for rho-zCDP: sigma = l2 / sqrt(2 rho).

    Parameters
    ----------
    l2 : float
        L2 sensitivity of the released vector (> 0).
    rho : float
        zCDP budget (> 0).

    Returns
    -------
    float
        sigma, in the units of the counts. Rounded up by one ulp so that the
        resulting guarantee is never weaker than ``rho``.

    Raises
    ------
    UsageError
        ``l2`` or ``rho`` not positive and finite.

    References
    ----------
    Bun & Steinke 2016, Prop. 1.6; Qiao & Wang (2023), eq. (1) (sigma^2 = 2H/rho
    for visits and transitions).
    """
    return _up(positive_finite("l2", l2) / math.sqrt(2.0 * positive_finite("rho", rho)))


def laplace_scale(l1: float, epsilon: float) -> float:
    """Laplace scale for pure eps-DP: b = l1 / epsilon, raised by one ulp as :func:`gaussian_sigma` is.

    ``l1`` is the L1 sensitivity (> 0), ``epsilon`` the budget (> 0); b is in
    the units of the counts. UsageError when either is not positive and
    finite. Source: the Laplace mechanism (Dwork, McSherry, Nissim & Smith
    2006); Qiao & Wang (2023), paragraph "Apply Laplace Mechanism to achieve
    pure DP": Lap(4H/eps) for visits and transitions (L1 sensitivity 4H).
    """
    return _up(positive_finite("l1", l1) / positive_finite("epsilon", epsilon))


def _up(scale: float) -> float:
    """``scale`` raised by one ulp: the noise is never narrower than the exact calibration."""
    return float(np.nextafter(scale, math.inf))


@dataclass(frozen=True)
class NoiseFamily:
    """One noise family: its budget unit, calibration, samplers, privacy event and statement.

    Attributes
    ----------
    name : str
        ``"gaussian"`` or ``"laplace"``: the string files and CLI flags hold.
    title : str
        ``"Gaussian"`` or ``"Laplace"`` (messages).
    budget_unit : str
        The budget the noise is calibrated to: ``"rho"`` (zCDP) or ``"epsilon"`` (pure DP).
    definition : str
        The privacy definition a manifest's guarantee states (``"zCDP"``, ``"pure-DP"``).
    norm : str
        The sensitivity norm the calibration uses: ``"l2"`` or ``"l1"``.
    scale_symbol : str
        The scale's name: ``"sigma"`` (standard deviation) or ``"b"``.
    scale_key : str
        The scale's key in a release manifest's family record: ``"sigma"`` or ``"laplace_b"``.
    pure : bool
        True for pure epsilon-DP (the reporting delta is 0).
    """

    name: str
    title: str
    budget_unit: str
    definition: str
    norm: str
    scale_symbol: str
    scale_key: str
    pure: bool

    def __str__(self) -> str:
        return self.name

    # -- calibration ----------------------------------------------------------

    def calibrate(self, sensitivity: float, amount: float) -> float:
        """The noise scale for ``sensitivity`` (in :attr:`norm`) at budget ``amount`` (in :attr:`budget_unit`).

        Gaussian: :func:`gaussian_sigma`; Laplace: :func:`laplace_scale`
        (both rounded up by one ulp). Raises UsageError on a bad argument.
        """
        return (laplace_scale if self.pure else gaussian_sigma)(sensitivity, amount)

    def amount(self, budget) -> float:
        """What the noise is calibrated to in a ``Budget``: its rho (Gaussian) or its epsilon (Laplace)."""
        return getattr(budget, self.budget_unit)

    def std(self, scale: float) -> float:
        """Standard deviation of one continuous draw at ``scale``: sigma, or sqrt(2) b (Laplace)."""
        return scale * math.sqrt(2.0) if self.pure else scale

    def stacked_sensitivity(self, sensitivity: float, count: int) -> float:
        """Sensitivity of ``count`` statistics stacked into one vector, each of ``sensitivity`` in :attr:`norm`.

        L1 adds (count x sensitivity); L2 adds in squares (sqrt(count) x
        sensitivity). E.g. a tree counter's node-noise vector over L levels.
        """
        return (count if self.pure else math.sqrt(count)) * float(sensitivity)

    # -- the privacy event and its cost --------------------------------------

    def event(self, sensitivity: float, scale: float, **leaf):
        """The privacy event of adding this noise at ``scale`` to a statistic of ``sensitivity``.

        ``leaf``: the event's other fields (``family``, ``unit``,
        ``noise``, ``max_per_cell``, ``neighbouring``). Returns a
        :class:`~privaudit.privacy.events.GaussianEvent` (l2, sigma) or a
        :class:`~privaudit.privacy.events.LaplaceEvent` (l1, b).
        """
        if self.pure:
            return LaplaceEvent(l1=sensitivity, b=scale, **leaf)
        return GaussianEvent(l2=sensitivity, sigma=scale, **leaf)

    def cost(self, event) -> float:
        """The exact cost of ``event`` in :attr:`budget_unit`, rounded up: ``event_rho`` or ``event_epsilon``.

        Raises AccountingError for an event the accountant refuses (or a
        Gaussian part in a Laplace cost).
        """
        return accounting.event_epsilon(event) if self.pure else accounting.event_rho(event)

    def dp_statement(self, amount: float, delta: float) -> tuple[float, float]:
        """The (epsilon, delta)-DP statement of a budget ``amount``.

        Gaussian: (the tight Canonne, Kamath & Steinke 2020 conversion of rho
        at ``delta``, ``delta``); Laplace: (epsilon, 0.0).
        """
        if self.pure:
            return float(amount), 0.0
        return float(accounting.zcdp_to_dp(amount, delta)), float(delta)

    # -- samplers ---------------------------------------------------------------

    def rounded_noise(self, rng: np.random.Generator, scale: float, m: int) -> np.ndarray:
        """``m`` draws of numpy's continuous noise at ``scale``, rounded to the nearest integer (int64).

        Not certified (numpy's float samplers); ``add_noise(noise="rounded")``.
        """
        draw = rng.laplace if self.pure else rng.normal
        return np.rint(draw(0.0, scale, m)).astype(np.int64)

    def exact_noise(self, scale: float, n: int, *, rng: np.random.Generator) -> np.ndarray:
        """``n`` exact discrete draws (discrete Gaussian N_Z(0, scale^2) or discrete Laplace of scale b).

        :func:`privaudit.privacy.samplers.exact_noise` (total variation 0).
        """
        return samplers.exact_noise(self.name, scale, n, rng=rng)

    def exact_sampler(self, scale: float) -> "samplers.ExactSampler":
        """The cached exact table sampler at ``scale`` (:func:`privaudit.privacy.samplers.get_sampler`)."""
        return samplers.get_sampler(self.name, scale)

    def tail_half_width(self, scale: float, n: float, delta: float, exact: bool) -> float:
        """x such that n draws all satisfy |noise| <= x at once with probability >= 1 - delta (union bound).

        Gaussian: sigma sqrt(2 log(2n/delta)), from P(|Z| > x) <=
        2 exp(-x^2 / (2 sigma^2)), also for the discrete Gaussian, which is
        sub-Gaussian with parameter sigma (Canonne, Kamath & Steinke 2020,
        Cor. 9). Laplace: b log(n/delta), from P(|Lap(b)| > x) = exp(-x/b);
        ``exact`` (discrete Laplace, P(|Y| > x) <= c exp(-x/b), c = 2 / (1 +
        exp(-1/b))): b log(c n / delta).
        """
        if not self.pure:
            return scale * math.sqrt(2.0 * math.log(2.0 * n / delta))
        c = 2.0 / (1.0 + math.exp(-1.0 / scale)) if exact else 1.0
        return scale * math.log(c * n / delta)


#: Gaussian noise, calibrated to rho (zCDP), L2 sensitivity.
GAUSSIAN = NoiseFamily("gaussian", "Gaussian", "rho", "zCDP", "l2", "sigma", "sigma", pure=False)
#: Laplace noise, calibrated to epsilon (pure DP), L1 sensitivity.
LAPLACE = NoiseFamily("laplace", "Laplace", "epsilon", "pure-DP", "l1", "b", "laplace_b", pure=True)
#: The families by name.
FAMILIES = {f.name: f for f in (GAUSSIAN, LAPLACE)}
#: The names files and CLI flags hold.
NOISE_FAMILY_NAMES = tuple(FAMILIES)


def noise_family(name, what: str = "mechanism") -> NoiseFamily:
    """The :class:`NoiseFamily` named ``name`` (a NoiseFamily is returned as is).

    Parameters
    ----------
    name : str or NoiseFamily
        ``"gaussian"`` or ``"laplace"``.
    what : str
        The parameter named in the message.

    Raises
    ------
    UsageError
        An unknown name ("`mechanism` must be one of ('gaussian', 'laplace'). Found ...").
    """
    if isinstance(name, NoiseFamily):
        return name
    try:
        return FAMILIES[name]
    except (KeyError, TypeError):
        raise UsageError(f"`{what}` must be one of {NOISE_FAMILY_NAMES}. Found {name!r}.") from None
