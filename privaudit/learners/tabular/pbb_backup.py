"""DP-PBB's private Bellman backup and its lower confidence bound (docs/certificates.md, "DP-PBB").

One backup at step h releases the noisy (s, a)-sums of the quantised
W_{h+1}(s') = r(s') + V_{h+1}(s') over the logged transitions (and, with
second moments, of their squares) with fresh noise, and turns them into a
lower confidence bound on E[W] per (s, a) that holds with the union bound's
probability (:func:`n_events` counts its events).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.learners.confidence import mean_radius
from privaudit.learners.tabular import pbb_noise
from privaudit.learners.tabular.pbb_noise import BackupNoise
from privaudit.learners.tabular.pessimism import RewardFrame

__all__ = ["Widths", "backup_ranges", "n_events", "backup", "lower_bound"]


def backup_ranges(H: int, frame: RewardFrame, return_bound, next_state: bool) -> list[tuple[float, float]]:
    """Per backup h: (B_h bound on the backed-up W, bound on Q_h), planning units."""
    out = []
    for h in range(H):
        left = H - h
        cap = float(left)
        if return_bound is not None:
            G = (float(return_bound) - left * frame.low) / frame.width
            if not (G > 0 and math.isfinite(G)):
                raise UsageError(f"`return_bound` must give a positive bound in planning units. Got {return_bound!r}.")
            cap = min(cap, G)
        # next-state reward: W = r(s') + V_{h+1}(s') is the whole return from h; mean reward: W = V_{h+1}
        w = cap if next_state else max(min(cap, float(left - 1)), 1.0)  # V_H = 0: any positive bound
        out.append((w, cap))
    return out


def n_events(K: int, G: int, SA: int, starts: bool) -> int:
    """Number of events in the certificate's union bound (docs/certificates.md, "DP-PBB"); K backups.

    Per backup and cell one noise event (the first moment's noise >= -t sigma): K SA; per slice and
    cell the two sides of the visit count (2 G SA) and one event uniform over every subset of next
    states (G SA; its own log term carries the 2^S subsets); 4 for the start bound (its noise, both
    sides of N, its sampling event).
    """
    return K * SA + 3 * G * SA + (4 if starts else 0)


@dataclass(frozen=True)
class Widths:
    """The union bound's per-event widths shared by every backup of one fit.

    Attributes
    ----------
    t : float
        Gaussian tail quantile at the per-event failure probability alpha
        (``confidence.gaussian_tail``): a noise draw of scale sigma exceeds t sigma w.p. <= alpha.
    L : float
        The stitched log term of the time-uniform mean radius (``confidence.stitched_log``).
    second : bool
        Second moments are released (Bernstein widths on top of Hoeffding).
    uniform : float or None
        The certificate's log term (``confidence.uniform_log_term``): the radius is then
        range x r(n) for the indicators of every subset of next states, a bound that holds for every
        W at once (W is computed from the same logs); L and ``second`` are not used. None: the
        fixed-W bounds (the selection chain, which needs no validity).
    """

    t: float
    L: float
    second: bool
    uniform: float | None = None


def backup(N, W, r_sa, B: float, bq: BackupNoise, n_lo, n_up, widths: Widths, rng, paths: set | None = None):
    """One private backup: release the noisy (s, a)-sums of W over the transitions and bound E[W] from below.

    Parameters
    ----------
    N : scipy.sparse matrix, shape (S * A, S)
        Exact capped transition counts of this step (PRIVATE).
    W : ndarray, shape (S,)
        The backed-up value r(s') + V_{h+1}(s') (next-state reward) or V_{h+1}(s') (mean reward),
        planning units.
    r_sa : ndarray, shape (S * A,), or None
        A known mean reward r_h(s, a), added after the bound (None with a next-state reward).
    B : float
        The public bound on W at this step (W is clipped to [0, B] and quantised down).
    bq : BackupNoise
        This backup's quantum, centre and noise scales.
    n_lo, n_up : ndarray, shape (S * A,)
        Lower and upper confidence bounds on the visit counts n(s, a).
    widths : Widths
    rng : numpy.random.Generator
        Fresh noise (independent of W, which depends on earlier releases only).
    paths : set, optional
        Collects the exact sampler paths used.

    Returns
    -------
    (lcb, est, ok) : three ndarrays of shape (S * A,)
        Lower confidence bound, plug-in estimate, and the cells with n_lo >= 1.
    """
    x = np.floor(np.clip(W, 0.0, B) * bq.q).astype(np.int64)                 # quantised, <= W (pessimistic)
    u = np.minimum(x, bq.m + bq.b_u) - bq.m
    T = pbb_noise.add_noise(N @ u, bq.sigma, rng, paths) / bq.q             # noisy sum of W - m/q
    s2 = None
    if widths.second:
        sq = np.ceil(u.astype(np.float64) ** 2 * bq.q2 / (bq.q * bq.q)).astype(np.int64)
        s2 = pbb_noise.add_noise(N @ sq, bq.sigma_2, rng, paths) / bq.q2
    lcb, est, ok = lower_bound(T, s2, n_lo, n_up, bq, widths)
    lcb, est = lcb + bq.m / bq.q, est + bq.m / bq.q
    if r_sa is not None:
        lcb, est = lcb + r_sa, est + r_sa
    return lcb, est, ok


def lower_bound(T, s2, n_lo, n_up, bq: BackupNoise, widths: Widths):
    """Lower confidence bound on E[W - m/q] per cell from noisy sums (docs/certificates.md, "DP-PBB").

    ``T`` (S * A,): noisy first-moment sums in units of W; ``s2``: noisy second-moment sums (units of
    W^2) or None. Returns (lcb, plug-in estimate, ok) with ok where n_lo >= 1.
    """
    t, L, second = widths.t, widths.L, widths.second
    R = bq.range
    ok = n_lo >= 1.0
    nl = np.where(ok, n_lo, 1.0)
    nu = np.where(ok, n_up, 1.0)
    est = T / np.where(ok, np.maximum((n_lo + n_up) / 2.0, 1.0), 1.0)
    half = bq.b_u / bq.q                          # centred values lie in [-m/q, b_u/q]
    lo_c, hi_c = -bq.m / bq.q, half
    T_lo = T - t * bq.sigma / bq.q
    xc_lo = np.minimum(T_lo / nl, T_lo / nu)
    if widths.uniform is not None:                # uniform over W: (P_hat - P) W >= -R sup_A (P - P_hat)(A)
        return np.maximum(xc_lo - R * mean_radius(nl, 0.25, 0.0, widths.uniform), lo_c), est, ok
    r_h = mean_radius(nl, R * R / 4.0, 0.0, L)
    lcb = xc_lo - r_h                             # Hoeffding
    if second:
        T_up = T + t * bq.sigma / bq.q
        xc_up = np.maximum(T_up / nl, T_up / nu)
        lo = np.maximum(xc_lo - r_h, lo_c)
        hi = np.minimum(xc_up + r_h, hi_c)
        min_sq = np.where((lo <= 0) & (hi >= 0), 0.0, np.minimum(lo * lo, hi * hi))
        S2_up = np.maximum(s2 + t * bq.sigma_2 / bq.q2, 0.0)
        R2 = bq.s_max / bq.q2
        m2_up = S2_up / nl + mean_radius(nl, R2 * R2 / 4.0, 0.0, L)
        v = np.clip(m2_up - min_sq, 0.0, R * R / 4.0)
        lcb = np.maximum(lcb, xc_lo - mean_radius(nl, v, R, L))  # Bernstein with the private variance bound
    lcb = np.maximum(lcb, lo_c)
    return lcb, est, ok
