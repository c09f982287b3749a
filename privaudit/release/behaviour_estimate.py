"""The clinicians' value and its finite-sample interval from the released statistics (post-processing).

The noisy statistics of the behaviour-value release (:class:`ValueStatistics`, from
:meth:`privaudit.release.behaviour_value.BehaviourValueRelease.apply`) and what is read from them:
the estimate, the delta-method standard error over privacy units and the finite-sample interval
(``privaudit.release.unit_mean``; proof: docs/certificates.md, "The clinicians' value interval").
The derivation of the statistics, their sensitivities and their noise is in
:mod:`privaudit.release.behaviour_value`, which re-exports this module's names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.release.unit_mean import unit_ratio_interval

__all__ = ["ValueStatistics", "estimate_behaviour_value", "CONFIDENCE_DEFAULT"]

#: Confidence of the reported interval.
CONFIDENCE_DEFAULT = 0.95


@dataclass(frozen=True)
class ValueStatistics:
    """The released (noisy) statistics, in real units, and the public facts needed to read them."""

    #: N' (noisy episode count).
    episodes: float
    #: T' (noisy sum of centred clipped returns, declared reward units).
    return_sum: float
    #: Q' (noisy sum over privacy units of the squared unit totals of c, units squared; the sum of c^2 when k = 1).
    return_squares: float
    #: Float, shape (S,): n'_0(s), noisy start-state counts (may be negative).
    start_states: np.ndarray = field(repr=False)
    #: Noise standard deviation of each family (str -> float), real units.
    sigma: dict = field(default_factory=dict)
    #: The declared return range's low end; ``mid`` = (low + high) / 2 is the centre.
    low: float = 0.0
    #: The declared return range's high end.
    high: float = 1.0
    #: Largest error of one episode's c, declared units: its lattice rounding (2^-b) plus the bound on the error of
    #: its summed return (``BehaviourValueRelease.sum_error``, about 10^-14 H r_max).
    rounding: float = 0.0
    #: B' (noisy sum over units of t_u n_u, declared units); None when k = 1 (then B = T).
    unit_cross: float | None = None
    #: D' (noisy sum over units of n_u^2); None when k = 1 (then D = N).
    unit_count_squares: float | None = None
    #: k, the most episodes one unit contributes (public, from the spec).
    max_episodes: int = 1

    @property
    def mid(self) -> float:
        return 0.5 * (self.low + self.high)


def estimate_behaviour_value(stats: ValueStatistics, confidence: float = CONFIDENCE_DEFAULT) -> dict:
    """The behaviour policy's value and a confidence interval from the noisy statistics (post-processing).

    Parameters
    ----------
    stats : ValueStatistics
        From :meth:`BehaviourValueRelease.apply`.
    confidence : float
        Nominal coverage of the interval, in (0, 1).

    Returns
    -------
    dict
        ``estimate`` (declared reward units), ``interval`` [lo, hi] (inside
        the return range), ``confidence``, ``standard_error`` and its parts
        ``sampling_sd``, ``noise_sd`` (of the estimate), ``method``.
        ``sampling_sd`` is over i.i.d. privacy units (cluster-robust).

    Raises
    ------
    UsageError
        ``confidence`` outside (0, 1).

    Notes
    -----
    n = max(N', 1); c-hat = clip(T'/n, -C, C); the units' squared residuals
    V = clip(Q' - 2 c-hat B' + c-hat^2 D', 0, k C^2 n), with B' = c-hat n and
    D' = n when k = 1 (B = T, D = N there);
    Var = V/n^2 + sigma_T^2/n^2 + c-hat^2 sigma_N^2/n^2: the delta-method
    (sandwich) variance of the ratio estimator sum_u t_u / sum_u n_u over
    i.i.d. privacy units (Cochran 1977, Sec. 6.4 and 9.2; Liang & Zeger
    1986), plus the first-order effect of the independent noises of T and N
    (``standard_error`` = sqrt(Var)). At k = 1, V = Q' - c-hat^2 n = n s^2 with s^2 = Q'/n - c-hat^2 clipped to [0, C^2]. The
    ``interval`` is not est -+ z se (a normal interval undercovers with few
    units or values near the range's ends) but the finite-sample interval of
    :func:`_interval` (Hoeffding and empirical Bernstein over privacy units and
    the noise's Gaussian tails; docs/certificates.md).
    """
    conf = float(confidence)
    if not (0 < conf < 1):
        raise UsageError(f"`confidence` must lie in (0, 1). Found {confidence!r}.")
    C = 0.5 * (stats.high - stats.low)
    k = int(stats.max_episodes)
    n = max(stats.episodes, 1.0)
    c_hat = float(np.clip(stats.return_sum / n, -C, C))
    B = c_hat * n if stats.unit_cross is None else stats.unit_cross
    D = n if stats.unit_count_squares is None else stats.unit_count_squares
    resid = float(np.clip(stats.return_squares - 2.0 * c_hat * B + c_hat * c_hat * D, 0.0, k * C * C * n))
    sampling = resid / (n * n)
    noise = (stats.sigma["return_sum"] ** 2 + c_hat * c_hat * stats.sigma["episode_count"] ** 2) / (n * n)
    se = math.sqrt(sampling + noise)
    est = stats.mid + c_hat
    lo, hi = _interval(stats, 1.0 - conf)
    return {"estimate": est, "interval": [lo, hi], "confidence": conf, "standard_error": se,
            "sampling_sd": math.sqrt(sampling), "noise_sd": math.sqrt(noise),
            "method": ("mean of the clipped episode returns from noisy sums (N', T'); interval: the intersection "
                       f"of a Hoeffding and an empirical-Bernstein interval over the privacy units (k = {k} episodes "
                       "each, correlated in any way), widened by the DP noise (union bound; coverage >= the "
                       "confidence in finite samples); standard error: delta method for a ratio (noisy "
                       "unit-level Q'" + (")" if k == 1 else ", B', D')"))}


def _interval(stats: ValueStatistics, miss: float) -> tuple[float, float]:
    """The finite-sample interval of :func:`estimate_behaviour_value`, missing w.p. <= ``miss``:
    ``unit_mean.unit_ratio_interval`` on (T', N', Q', B', D') (B = T and D = N at k = 1), each end widened
    by the lattice rounding (< 2^-b per episode), inside [low, high]. Proof: docs/certificates.md, "The
    clinicians' value interval"."""
    sg = stats.sigma
    B, sB = ((stats.return_sum, sg["return_sum"]) if stats.unit_cross is None
             else (stats.unit_cross, sg["unit_return_cross"]))
    D, sD = ((stats.episodes, sg["episode_count"]) if stats.unit_count_squares is None
             else (stats.unit_count_squares, sg["unit_count_squares"]))
    lo, hi = unit_ratio_interval((stats.return_sum, stats.episodes, stats.return_squares, B, D),
                                 (sg["return_sum"], sg["episode_count"], sg["return_squares"], sB, sD),
                                 0.5 * (stats.high - stats.low), max_episodes=int(stats.max_episodes), miss=miss)
    return max(stats.low, stats.mid + lo - stats.rounding), min(stats.high, stats.mid + hi + stats.rounding)
