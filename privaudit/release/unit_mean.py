"""Confidence bounds on a per-episode mean from noisy sums over privacy units, and Gaussian noise tails.

Shared by the clinicians' value interval (:mod:`privaudit.release.behaviour_value`) and the start-state
bound of the learners' certificates (:mod:`privaudit.learners.confidence`). A privacy unit (a patient)
may hold up to k episodes (stays) that are correlated in any way, so the bounds concentrate over units,
not episodes. Theorem and proof: docs/certificates.md, "Means over privacy units".
"""

from __future__ import annotations

import math

from privaudit.core.errors import UsageError

__all__ = ["check_alpha", "gaussian_tail", "unit_mean_lower_bound"]


def check_alpha(alpha: float) -> float:
    """``alpha`` as a float in (0, 1), else UsageError."""
    a = float(alpha)
    if not (0 < a < 1):
        raise UsageError(f"`alpha` must lie in (0, 1). Got {alpha!r}.")
    return a


def gaussian_tail(alpha: float) -> float:
    """t such that P(Z >= t sigma) <= alpha for Z ~ N(0, sigma^2) or the discrete Gaussian N_Z(0, sigma^2).

    t = sqrt(2 log(1 / alpha)), from the sub-Gaussian tail exp(-t^2 / 2), which
    both laws satisfy (the discrete Gaussian is sigma^2-sub-Gaussian:
    Canonne, Kamath & Steinke 2020, Cor. 9). One-sided.
    """
    return math.sqrt(2.0 * math.log(1.0 / check_alpha(alpha)))


def unit_mean_lower_bound(total: float, sigma_total: float, count: float, sigma_count: float, width: float, *,
                          max_episodes: int, t: float, t_count: float, log_term: float) -> float:
    """A lower confidence bound on a per-episode mean from noisy sums over privacy units (not episodes).

    The one concentration step behind the start-state bound
    (:func:`start_mean_lower_bound`) and the clinicians' value interval
    (``privaudit.release.behaviour_value.estimate_behaviour_value``); theorem
    and proof: docs/certificates.md, "Means over privacy units".

    Model: n_U privacy units, i.i.d.; unit u holds n_u <= k episodes (k =
    ``max_episodes``, public) with values x in [0, width], correlated in any
    way within the unit; X_u = the sum of x over its episodes. The estimand is
    mu = E[X_u] / E[n_u] (the mean over a random episode). Then Y_u = X_u -
    mu n_u has mean 0 and lies in an interval of length k width, so by
    Hoeffding's inequality P(sum_u Y_u >= k width sqrt(n_U log_term / 2)) <=
    exp(-log_term); n_U <= N (every unit has an episode) <= n_up. With the
    released total X' = X + Z_X and count N' = N + Z_N (Z sub-Gaussian with
    variance proxies sigma_total^2, sigma_count^2; the discrete Gaussian is:
    Canonne, Kamath & Steinke 2020, Cor. 9) and the events X >= X' - t
    sigma_total, N in [n_lo, n_up] = N' -+ t_count sigma_count:
    mu >= min(num / n_lo, num / n_up), num = X' - t sigma_total - k width
    sqrt(n_up log_term / 2), clipped into [0, width]; 0 when n_lo < 1.

    Parameters
    ----------
    total, sigma_total : float
        X' and its noise scale (units of x).
    count, sigma_count : float
        N' (noisy number of episodes) and its noise scale.
    width : float
        The public upper end of x's range [0, width] (> 0).
    max_episodes : int
        k, the most episodes of one unit (>= 1).
    t, t_count : float
        :func:`gaussian_tail` of the failure probabilities of X's noise and of
        each side of N's.
    log_term : float
        log(1 / beta) for a sampling failure probability beta (plus any
        union's log count, e.g. S log 2 for every subset of states).

    Returns
    -------
    float
        The bound in [0, width].

    References
    ----------
    Hoeffding (1963), Thm 2 (independent bounded summands). Our derivation [D] for the unit-level form.
    """
    k = int(max_episodes)
    if k < 1:
        raise UsageError(f"`max_episodes` must be >= 1. Got {max_episodes!r}.")
    half = t_count * sigma_count
    n_lo, n_up = count - half, count + half
    if n_lo < 1.0:
        return 0.0
    num = total - t * sigma_total - k * width * math.sqrt(n_up * log_term / 2.0)
    return float(min(max(min(num / n_lo, num / n_up), 0.0), width))
