"""Confidence bounds on a per-episode mean from noisy sums over privacy units, and Gaussian noise tails.

Shared by the clinicians' value interval (:mod:`privaudit.release.behaviour_value`) and the start-state
bound of the learners' certificates (:mod:`privaudit.learners.confidence`). A privacy unit (a patient)
may hold up to k episodes (stays) that are correlated in any way, so the bounds concentrate over units,
not episodes. Theorem and proof: docs/certificates.md, "Means over privacy units".
"""

from __future__ import annotations

import math

import numpy as np

from privaudit.core.errors import UsageError

__all__ = ["check_alpha", "gaussian_tail", "unit_mean_lower_bound", "unit_ratio_lower_bound", "unit_ratio_interval"]


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


def unit_ratio_lower_bound(sums: tuple, sigmas: tuple, half_range: float, *, max_episodes: int, miss: float,
                           cells: int = 2000) -> float:
    """An empirical-Bernstein lower confidence bound on gamma = E[t_u] / E[n_u] from noisy unit-level sums.

    Units u = 1..n_U i.i.d., unit u with n_u in [1, k] episodes whose values c lie in [-C, C] (C =
    ``half_range``), t_u their sum. Released (each with independent sub-Gaussian noise of the given
    scale): T = sum t_u, N = sum n_u, Q = sum t_u^2, B = sum t_u n_u, D = sum n_u^2 (at k = 1 pass T, N
    as B, D). For the true gamma, Y_u = t_u - gamma n_u are i.i.d. with mean 0 in an interval of length
    2kC, and by Maurer & Pontil (2009, Thm 4) on (Y_u + k(C + gamma)) / (2kC) in [0, 1],
    sum_u Y_u <= sqrt(2 L f sum_u Y_u^2) + 14 k C L f / 3 except w.p. delta, with L = log(2 / delta),
    f = n_U / (n_U - 1) and sum_u Y_u^2 = Q - 2 gamma B + gamma^2 D. A gamma is excluded when even
    the most favourable values on the noise events violate this; [-C, C] is cut into ``cells`` cells
    and a cell is excluded when its smallest T - gamma N exceeds its largest deviation (U below is
    convex, so its maximum over a cell is at an end). The bound is the left end of the first cell not
    excluded: every gamma left of it is excluded. Failure probability <= ``miss``, split in eight
    (T's noise, both sides of N, Q's, both sides of B, D's, the Bernstein event). Proof:
    docs/certificates.md, "The clinicians' value interval".

    Parameters
    ----------
    sums : (T', N', Q', B', D')
    sigmas : (sigma_T, sigma_N, sigma_Q, sigma_B, sigma_D)
    half_range : float
        C > 0.
    max_episodes : int
        k.
    miss : float
        In (0, 1).
    cells : int
        Resolution of the search over [-C, C].

    Returns
    -------
    float
        The bound in [-C, C]; -C when N's lower bound is below 2k (fewer than two units for sure).

    References
    ----------
    Maurer & Pontil (2009), "Empirical Bernstein Bounds and Sample Variance Penalization", Thm 4.
    """
    T, N, Q, B, D = (float(x) for x in sums)
    sT, sN, sQ, sB, sD = (float(x) for x in sigmas)
    C, k = float(half_range), int(max_episodes)
    t, L = gaussian_tail(check_alpha(miss) / 8.0), math.log(16.0 / miss)
    n_lo, n_up = N - t * sN, N + t * sN
    units_lo = n_lo / k                                       # n_U >= N / k >= n_lo / k
    if units_lo < 2.0:
        return -C
    f = units_lo / (units_lo - 1.0)                           # n_U / (n_U - 1) is decreasing in n_U
    g = np.linspace(-C, C, int(cells) + 1)
    a, b = g[:-1], g[1:]

    def upper_sq(x):                                          # >= sum_u (t_u - x n_u)^2 on the noise events
        return (Q + t * sQ) - 2.0 * x * B + 2.0 * np.abs(x) * t * sB + x * x * max(D + t * sD, 0.0)

    dev = np.sqrt(2.0 * L * f * np.maximum(np.maximum(upper_sq(a), upper_sq(b)), 0.0)) + 14.0 * k * C * L * f / 3.0
    low_sum = (T - t * sT) - np.where(b >= 0, b * n_up, b * n_lo)   # <= T - x N for every x in the cell
    keep = np.flatnonzero(low_sum <= dev)
    return float(a[keep[0]]) if keep.size else C


def unit_ratio_interval(sums: tuple, sigmas: tuple, half_range: float, *, max_episodes: int,
                        miss: float) -> tuple[float, float]:
    """An interval [lo, hi] containing gamma = E[t_u] / E[n_u] (values c in [-C, C]) w.p. >= 1 - ``miss``.

    The intersection of two intervals, each missing w.p. <= miss / 2: (1) Hoeffding, each side (miss / 4)
    :func:`unit_mean_lower_bound` on x = C + c (lower side) or C - c (upper side) in [0, 2C], from the
    total X' = T' + C N' (resp. C N' - T', noise proxy sigma_T^2 + C^2 sigma_N^2) and N', its failure
    probability split in thirds (X's noise, N's two sides, Hoeffding); (2) empirical Bernstein, each side
    (miss / 4) :func:`unit_ratio_lower_bound` (the upper side on -c: T' and B' negated), which adapts to the
    spread of the values when it is small next to [-C, C]. Proof: docs/certificates.md, "The clinicians'
    value interval" (Theorem 5).

    Parameters
    ----------
    sums, sigmas, half_range, max_episodes
        As :func:`unit_ratio_lower_bound`: (T', N', Q', B', D'), their noise scales, C, k.
    miss : float
        In (0, 1).

    Returns
    -------
    (lo, hi) : floats in [-C, C]
    """
    T, N, Q, B, D = (float(x) for x in sums)
    sT, sN = float(sigmas[0]), float(sigmas[1])
    C, k, side = float(half_range), int(max_episodes), check_alpha(miss) / 4.0
    sig_x = math.hypot(sT, C * sN)
    ends = []
    for sign in (1.0, -1.0):
        hoeffding = unit_mean_lower_bound(sign * T + C * N, sig_x, N, sN, 2.0 * C, max_episodes=k,
                                          t=gaussian_tail(side / 3.0), t_count=gaussian_tail(side / 6.0),
                                          log_term=math.log(3.0 / side)) - C
        bernstein = unit_ratio_lower_bound((sign * T, N, Q, sign * B, D), sigmas, C, max_episodes=k, miss=side)
        ends.append(max(hoeffding, bernstein))
    return ends[0], -ends[1]
