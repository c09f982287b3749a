"""Time-uniform confidence bounds for means of bounded samples, and Gaussian noise tails.

DP-PBB (:mod:`privaudit.learners.tabular.dp_pbb`) needs lower confidence bounds on
P_h W(s, a) = E[W(s') | s, a] from a *random* number n of next-state samples
(the number of logged visits to (s, a) is itself random and depends on the
samples). A bound that holds for one fixed n does not hold at a random n, so
every bound here is **time-uniform**: it holds for all n >= 1 at once. Because
W is itself computed from the same logs, DP-PBB's certificate applies the bound
to the indicators of every subset of next states (:func:`uniform_log_term`),
which bounds P W for every W at once. Means over privacy units (a unit's
episodes may be correlated): :func:`unit_mean_lower_bound`.

Construction (our derivation, [D]; the technique is the "stitching" of
Howard, Ramdas, McAuliffe & Sekhon, *Time-uniform, nonparametric,
nonasymptotic confidence sequences*, Ann. Statist. 49(2), 2021, section 3):

* Let Y_1, Y_2, ... be i.i.d., E Y = 0, Var Y <= v and Y <= b (b >= 0). By
  Bernstein's moment bound, log E exp(lam Y) <= psi(lam) = lam^2 v / (2 (1 - lam b / 3))
  for 0 <= lam < 3 / b (Boucheron, Lugosi & Massart 2013, Thm 2.10), so
  M_t = exp(lam S_t - t psi(lam)) (S_t = Y_1 + ... + Y_t) is a non-negative
  supermartingale and by Ville's inequality
  P(exists t: S_t >= (L + t psi(lam)) / lam) <= exp(-L).
  With b = 0 and v the range^2 / 4 this is Hoeffding's case (sub-Gaussian).
* Epochs: t in [2^j, 2^(j+1)), j = 0 .. J - 1 (:data:`EPOCHS` = 48, so any
  n < 2^48). In epoch j, lam_j is the optimal lam at t0 = 2^(j + 1/2),
  lam_j = 1 / (sqrt(t0 v / (2 L)) + b / 3); the boundary becomes
  D_j(t) = sqrt(t0 v L / 2) + b L / 3 + t sqrt(v L / (2 t0)), which at
  t = t0 is the fixed-n Bernstein deviation sqrt(2 t0 v L) + b L / 3 and
  on the whole epoch is within a factor (2^(1/4) + 2^(-1/4)) / 2 = 1.015 of
  the fixed-n one's leading term.
* A union bound over the J epochs at exp(-L) each: with
  L = log(J / alpha), P(exists t: S_t / t >= D_{j(t)}(t) / t) <= alpha.

:func:`mean_radius` returns r(n) = sup_{t >= n} D_{j(t)}(t) / t, an envelope
that is non-increasing in n (within an epoch D_j(t)/t decreases; the values at
epoch starts decrease in j), so a radius at a *lower bound* of the unknown n
is valid for every n above it. It is also non-decreasing in v and b.

References
----------
Howard, Ramdas, McAuliffe, Sekhon (2021), arXiv:1810.08240, section 3
(stitching). Boucheron, Lugosi, Massart, *Concentration Inequalities* (2013),
Thm 2.10 (Bernstein), Lemma 2.2 (Hoeffding). Ville (1939).
"""

from __future__ import annotations

import math

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.release.unit_mean import check_alpha, gaussian_tail, unit_mean_lower_bound

#: Number of stitching epochs [2^j, 2^(j+1)): the bounds hold for every n < 2^EPOCHS.
EPOCHS = 48


def stitched_log(alpha: float) -> float:
    """L = log(EPOCHS / alpha): the log term of a time-uniform bound failing w.p. <= ``alpha``."""
    return math.log(EPOCHS / check_alpha(alpha))


def uniform_log_term(alpha: float, n_states: int) -> float:
    """L = log(EPOCHS / alpha) + S log 2: the log term of a time-uniform bound on P_hat(A) - P(A)
    that holds for every subset A of the S next states and every n at once w.p. >= 1 - ``alpha``
    (a union bound over the 2^S subsets; DP-PBB's bound uniform over value functions,
    docs/certificates.md, "DP-PBB")."""
    S = int(n_states)
    if S < 1:
        raise UsageError(f"`n_states` must be >= 1. Got {n_states!r}.")
    return stitched_log(alpha) + S * math.log(2.0)


def mean_radius(n, v, b, L: float) -> np.ndarray:
    """Time-uniform deviation of a sample mean: the envelope r(n) of the module docstring.

    Parameters
    ----------
    n : array_like
        Sample sizes (a lower bound on the unknown size is fine: r is
        non-increasing); entries < 1 give +inf.
    v : array_like
        Upper bound on the variance of one sample (broadcast with ``n``), >= 0.
    b : float or array_like
        Upper bound on the one-sided excursion Y = +-(X - mu) <= b (Bernstein);
        0 with v = range^2 / 4 gives the Hoeffding (sub-Gaussian) case.
    L : float
        :func:`stitched_log` of the failure probability.

    Returns
    -------
    ndarray
        r(n) >= 0: P(exists n >= 1: mean_n - mu >= r(n)) <= alpha (and the
        same for mu - mean_n), where alpha = EPOCHS exp(-L).
    """
    n = np.asarray(n, dtype=np.float64)
    v = np.maximum(np.asarray(v, dtype=np.float64), 0.0)
    b = np.asarray(b, dtype=np.float64)
    ok = n >= 1.0
    t = np.where(ok, n, 1.0)
    j = np.floor(np.log2(t))

    def d(tt, jj):
        t0 = 2.0 ** (jj + 0.5)
        return (np.sqrt(t0 * v * L / 2.0) + b * L / 3.0) / tt + np.sqrt(v * L / (2.0 * t0))

    r = np.maximum(d(t, j), d(2.0 ** (j + 1.0), j + 1.0))
    return np.where(ok, r, np.inf)


def start_mean_lower_bound(values: np.ndarray, noisy_starts: np.ndarray, sigma: float, bound: float, *,
                           max_episodes: int, t: float, t_total: float, log_term: float) -> float:
    """A lower confidence bound on E_{s ~ d0}[W(s)] from released (noisy) start-state counts,
    uniform over W and concentrated over privacy units.

    The one implementation behind DP-PBB's ``certified_value()`` without a
    public d0 and the pipeline's ``values.start_lower_bound``. m(s) = the
    episodes starting in s (each unit contributes at most k of them, sharing
    start states in any way), m' = m + Z the released counts (Z independent,
    sub-Gaussian with proxy sigma^2), d0 the start distribution of an episode
    (E[m] / E[N], N = sum m). W in [0, bound]^S may be computed from the same
    logs (a learner's V_0): the sampling event is taken for every subset A of
    the S states at once (2^S one-sided events of :func:`unit_mean_lower_bound`
    with x = 1[s_0 in A], log term ``log_term`` + S log 2), which bounds
    d0 . W for every W in [0, bound]^S together (W's layer-cake
    decomposition; docs/certificates.md, "Start distribution"). The noise
    events: m . W >= m' . W - t sigma ||W||_2 and each side of N in sum m' -+
    t_total sigma sqrt(S).

    Parameters
    ----------
    values : ndarray, shape (S',)
        W(s) in [0, bound] (values outside are clipped into it).
    noisy_starts : ndarray, shape (S',)
        m', the released start-state counts (float; may be negative).
    sigma : float
        Noise standard deviation of each count (>= 0).
    bound : float
        The public upper end of W's range (> 0).
    max_episodes : int
        k, the most episodes of one privacy unit.
    t, t_total : float
        :func:`gaussian_tail` of the numerator's and of each side of N's
        failure probabilities.
    log_term : float
        log(1 / beta), beta the sampling event's failure probability.

    Returns
    -------
    float
        The bound, in [0, bound], in W's units.
    """
    W = np.clip(np.asarray(values, dtype=np.float64), 0.0, bound)
    m = np.asarray(noisy_starts, dtype=np.float64)
    return unit_mean_lower_bound(float(m @ W), sigma * float(np.linalg.norm(W)), float(m.sum()),
                                 sigma * math.sqrt(m.size), bound, max_episodes=max_episodes, t=t,
                                 t_count=t_total, log_term=log_term + m.size * math.log(2.0))


__all__ = ["EPOCHS", "stitched_log", "gaussian_tail", "mean_radius", "uniform_log_term", "unit_mean_lower_bound",
           "start_mean_lower_bound"]
