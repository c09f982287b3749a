"""Time-uniform confidence bounds for means of bounded samples, and Gaussian noise tails.

DP-PBB (:mod:`privaudit.learners.tabular.dp_pbb`) needs lower confidence bounds on
P_h W(s, a) = E[W(s') | s, a] from a *random* number n of next-state samples
(the number of logged visits to (s, a) is itself random and depends on the
samples). A bound that holds for one fixed n does not hold at a random n, so
every bound here is **time-uniform**: it holds for all n >= 1 at once.

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

#: Number of stitching epochs [2^j, 2^(j+1)): the bounds hold for every n < 2^EPOCHS.
EPOCHS = 48


def _check_alpha(alpha: float) -> float:
    a = float(alpha)
    if not (0 < a < 1):
        raise UsageError(f"`alpha` must lie in (0, 1). Got {alpha!r}.")
    return a


def stitched_log(alpha: float) -> float:
    """L = log(EPOCHS / alpha): the log term of a time-uniform bound failing w.p. <= ``alpha``."""
    return math.log(EPOCHS / _check_alpha(alpha))


def gaussian_tail(alpha: float) -> float:
    """t such that P(Z >= t sigma) <= alpha for Z ~ N(0, sigma^2) or the discrete Gaussian N_Z(0, sigma^2).

    t = sqrt(2 log(1 / alpha)), from the sub-Gaussian tail exp(-t^2 / 2), which
    both laws satisfy (the discrete Gaussian is sigma^2-sub-Gaussian:
    Canonne, Kamath & Steinke 2020, Cor. 9). One-sided.
    """
    return math.sqrt(2.0 * math.log(1.0 / _check_alpha(alpha)))


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
                           t: float, t_total: float, L: float) -> float:
    """A lower confidence bound on E_{s ~ d0}[W(s)] from released (noisy) start-state counts.

    The one implementation behind DP-PBB's ``certified_value()`` without a
    public d0 and the pipeline's ``values.start_lower_bound``. With m the
    exact start counts (N = sum m episodes, their start states a sample of
    d0), m' = m + Z the released counts (Z independent, each sub-Gaussian
    with variance proxy sigma^2: the discrete Gaussian, Canonne, Kamath &
    Steinke 2020, Cor. 9) and W in [0, bound], three kinds of events:

    * m . W >= m' . W - t sigma ||W||_2 (one-sided, fails w.p. <= exp(-t^2/2));
    * N in [n_lo, n_up] = sum m' -+ t_total sigma sqrt(S) (each side fails
      w.p. <= exp(-t_total^2/2));
    * time-uniform Hoeffding (:func:`mean_radius` with v = bound^2 / 4, b = 0):
      E_d0[W] >= (m . W) / N - r(N) for every N at once (N is random), and
      r(N) <= r(n_lo) since r is non-increasing (fails w.p. <= EPOCHS exp(-L)).

    On all of them, (m . W) / N >= min(num / n_lo, num / n_up) with
    num = m' . W - t sigma ||W|| (whatever the sign of num), hence
    E_d0[W] >= min(num / n_lo, num / n_up) - r(n_lo), clipped into [0, bound]
    (W's range); 0 when n_lo < 1.

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
    t, t_total : float
        :func:`gaussian_tail` of the numerator's and of each side of N's
        failure probabilities.
    L : float
        :func:`stitched_log` of the sampling bound's failure probability.

    Returns
    -------
    float
        The bound, in [0, bound], in W's units.

    References
    ----------
    Our derivation [D] (docs/learners.md, "Validity", event family 4; docs/pipeline.md,
    certified values); Hoeffding's case of the stitched bound of the module docstring.
    """
    W = np.clip(np.asarray(values, dtype=np.float64), 0.0, bound)
    m = np.asarray(noisy_starts, dtype=np.float64)
    tot = float(m.sum())
    half = t_total * sigma * math.sqrt(m.size)
    n_lo, n_up = tot - half, tot + half
    if n_lo < 1.0:
        return 0.0
    num = float(m @ W) - t * sigma * float(np.linalg.norm(W))
    lb = min(num / n_lo, num / n_up) - float(mean_radius(n_lo, bound * bound / 4.0, 0.0, L))
    return float(min(max(lb, 0.0), bound))


__all__ = ["EPOCHS", "stitched_log", "gaussian_tail", "mean_radius", "start_mean_lower_bound"]
