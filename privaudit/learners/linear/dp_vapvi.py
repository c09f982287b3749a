"""DP-VAPVI, Qiao & Wang (2023) Algorithm 2, top to bottom; VAPVI and PEVI as its variants.

One backward pass, :func:`backward_pass`, over a feature provider
(``providers.FiniteFeatures``: a feature table over S states;
``providers.RowFeatures``: per-row features). The estimator
(``estimators``) supplies its penalty and how the 5 statistics of a step are
formed and released (its ``Statistics``):

=========  ==============  =========================================  ====================
learner    variance-aware  statistics                                 penalty (line 11)
=========  ==============  =========================================  ====================
DP-VAPVI   yes             lattice-encoded + exact discrete Gaussian   C sqrt(d) ||phi|| + D/K
                           (``privacy.LatticeGaussian``)
VAPVI      yes             exact floats (:class:`ExactStatistics`)     C sqrt(d) ||phi|| + D/K
PEVI       no (sigma = 1)  exact floats                                beta ||phi||_{Lambda^-1}
=========  ==============  =========================================  ====================

Line numbers in comments are the paper's (docs/linear.md, "DP-VAPVI, as implemented"). Steps are
0-based here, h = H-1, ..., 0 for the paper's h = H, ..., 1, so the paper's
H - h + 1 is H - h. Departures from the pseudo-code (docs/linear.md): fresh
noise for every h (the pseudo-code draws once, in line 1), matrix
noise calibrated for substitution, eigenvalues of Sigma and Lambda floored
at lambda (post-processing), and for DP-VAPVI every input of a statistic
rounded to a power-of-two grid before the sums (``privacy.grid()``; the
statistic is then an exact lattice point and the noise an exact discrete
Gaussian: no float side channel).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np

from privaudit.core import progress
from privaudit.learners.linear.data import StepData


@dataclass(frozen=True, repr=False)
class LinearFit:
    """Result of a backward pass (all post-processing of the released statistics).

    Attributes
    ----------
    w : ndarray, shape (H, d)
        Regression weights w_h (line 10).
    Lambda_inv : ndarray, shape (H, d, d)
        Inverse of the (noisy, eigenvalue-floored) weighted Gram matrix Lambda_h (line 9).
    Q : tuple of ndarray, length H
        Pessimistic Q_h (line 13) at the provider's points: (S, A) tables for
        ``FiniteFeatures``, (rows of step h, A) for ``RowFeatures``.
    offset : ndarray, shape (H,)
        The additive penalty term (D/K) per step.
    penalty_scale : float
        C sqrt(d) (VAPVI, DP-VAPVI) or beta (PEVI).
    """

    w: np.ndarray
    Lambda_inv: np.ndarray
    Q: tuple
    offset: np.ndarray
    penalty_scale: float

    def __repr__(self) -> str:
        return f"LinearFit(H={self.w.shape[0]}, d={self.w.shape[1]})"


class Statistics(Protocol):
    """How one step's 5 statistics are formed from their inputs and released.

    ``features``/``values``/``squares``/``weights``/``rewards`` map the inputs
    (phi of the pairs, V_{h+1}, 1/sigma^2, the pairs' rewards) to what enters
    the sums; ``outer(name, Phi, w)`` = sum_i w_i phi_i phi_i^T and
    ``inner(name, Phi, x)`` = sum_i x_i phi_i (w, x of shape (m,) or (n, m)
    for n batched runs); ``release(name, stat)`` returns the released value
    (float64; noisy for DP-VAPVI); ``ridge_shift`` is the public multiple of I
    added to the released matrices (DP-VAPVI's (E/2) I in K_1, K_2; else 0).
    """

    ridge_shift: float

    def features(self, Phi: np.ndarray) -> np.ndarray: ...
    def values(self, V: np.ndarray) -> np.ndarray: ...
    def squares(self, V: np.ndarray) -> np.ndarray: ...
    def weights(self, sigma2: np.ndarray) -> np.ndarray: ...
    def rewards(self, step: StepData) -> np.ndarray: ...
    def outer(self, name: str, Phi: np.ndarray, w: np.ndarray): ...
    def inner(self, name: str, Phi: np.ndarray, x: np.ndarray): ...
    def release(self, name: str, stat) -> np.ndarray: ...


class ExactStatistics:
    """The non-private statistics (VAPVI, PEVI; DP-VAPVI with the noise removed is VAPVI)."""

    ridge_shift = 0.0

    def features(self, Phi):
        return Phi

    def values(self, V):
        return V

    def squares(self, V):
        return V**2

    def weights(self, sigma2):
        return 1.0 / sigma2

    def rewards(self, step):
        return step.r_sum

    def outer(self, name, Phi, w):
        if np.ndim(w) == 2:
            return np.einsum("md,nm,me->nde", Phi, w, Phi)
        return (Phi * w[:, None]).T @ Phi

    def inner(self, name, Phi, x):
        return x @ Phi

    def release(self, name, stat):
        return stat


def floored_inverse(M: np.ndarray, floor: float) -> np.ndarray:
    """Inverse of sym(M) with eigenvalues floored at ``floor``, over any leading batch axes.

    A departure from Qiao & Wang (2023), Algorithm 2 (docs/linear.md, "DP-VAPVI, as implemented"):
    post-processing of a released matrix, costs
    no privacy. Without noise (M = Gram + floor * I) the floor changes nothing.

    Parameters
    ----------
    M : ndarray, shape (..., d, d)
    floor : float
        > 0.

    Returns
    -------
    ndarray, shape (..., d, d)
    """
    S = 0.5 * (M + np.swapaxes(M, -1, -2))
    e, U = np.linalg.eigh(S)
    e = np.maximum(e, floor)
    return (U / e[..., None, :]) @ np.swapaxes(U, -1, -2)


def _pair_sum(step: StepData, V_next: np.ndarray, f: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """sum_{s'} n_h(s, a, s') f(V_{h+1}(s')) per pair, shape (m,).

    V_{h+1}(s') is V_next[s'] where t_next >= 0, the terminal states' value
    ``step.end_value`` where t_next = -1, and 0 where t_next = -2 (unknown
    next state, per-row data).
    """
    v = np.where(step.t_next >= 0, V_next[np.maximum(step.t_next, 0)],
                 np.where(step.t_next == -1, step.end_value, 0.0))
    return np.bincount(step.t_pair, weights=step.t_n * f(v), minlength=len(step.s))


def step_statistics(step: StepData, Phi: np.ndarray, V_next: np.ndarray, *, stats: Statistics, lam: float,
                    cap: float, variance_aware: bool, step_var: StepData | None = None,
                    Phi_var: np.ndarray | None = None, n_runs: int | None = None) -> dict:
    """The 5 released statistics of one step h (Qiao & Wang 2023, Algorithm 2, lines 4-10).

    Parameters
    ----------
    step : StepData
        D at step h (regression data, lines 9-10).
    Phi : ndarray, shape (m, d)
        phi(s, a) of ``step``'s pairs.
    V_next : ndarray, shape (n_{h+1},)
        V_{h+1} at the points ``step.t_next`` indexes (zeros at h = H-1).
    stats : Statistics
        Forms and releases the sums (:class:`ExactStatistics`, or the DP
        ``privacy.LatticeGaussian``).
    lam : float
        Ridge lambda (also the eigenvalue floor of the inverse of Sigma).
    cap : float
        H - h (0-based h; the paper's H - h + 1): V_{h+1} <= cap - 1.
    variance_aware : bool
        False: sigma^2 = 1 and ``v2``, ``v`` are not computed (PEVI).
    step_var, Phi_var : StepData, ndarray (m', d), optional
        D' at step h and its features (variance data, lines 4-6); ``step``, ``Phi`` when None.
    n_runs : int, optional
        The noise of ``stats`` has this leading axis (the auditor's batched runs).

    Returns
    -------
    dict
        Released ``gram`` sum phi phi^T (+ K_1), ``v2`` sum phi V^2 (+ phi_1),
        ``v`` sum phi V (+ phi_2), ``weighted_gram`` sum phi phi^T / sigma^2
        (+ K_2), ``r_plus_v`` sum phi (r + V) / sigma^2 (+ phi_3), without the
        public lambda I and (E/2) I (``stats.ridge_shift``); and ``sigma2`` (m,)
        or (n, m), post-processing of the first three. Shapes gain the leading
        n_runs when given.
    """
    sv = step if step_var is None else step_var
    Pv = Phi if Phi_var is None else Phi_var
    d = Phi.shape[1]
    V_next = np.clip(np.asarray(V_next, dtype=np.float64), 0.0, cap - 1.0)  # no-op in a run; the bound is a sensitivity's
    out = {}
    if variance_aware:
        # line 4: Sigma_h = sum phi phi^T + lambda I + K_1 (over D')
        Fv = stats.features(Pv)
        out["gram"] = stats.release("gram", stats.outer("gram", Fv, sv.n))
        # lines 5-6: beta_h = Sigma^-1 (sum phi V^2 + phi_1); theta_h = Sigma^-1 (sum phi V + phi_2)
        out["v2"] = stats.release("v2", stats.inner("v2", Fv, _pair_sum(sv, V_next, stats.squares)))
        out["v"] = stats.release("v", stats.inner("v", Fv, _pair_sum(sv, V_next, stats.values)))
        Sinv = floored_inverse(out["gram"] + (lam + stats.ridge_shift) * np.eye(d), lam)
        beta = np.einsum("...ij,...j->...i", Sinv, out["v2"])
        theta = np.einsum("...ij,...j->...i", Sinv, out["v"])
        # line 7: Var_h = [<phi, beta>]_[0, (H-h+1)^2] - ([<phi, theta>]_[0, H-h+1])^2
        var = np.clip(beta @ Phi.T, 0.0, cap**2) - np.clip(theta @ Phi.T, 0.0, cap) ** 2
        # line 8: sigma_h^2 = max(1, Var_h)
        sig2 = np.maximum(1.0, var)
    else:
        sig2 = np.ones(len(step.s) if n_runs is None else (n_runs, len(step.s)))
    # line 9: Lambda_h = sum phi phi^T / sigma^2 + lambda I + K_2 (over D)
    F = stats.features(Phi)
    omega = stats.weights(sig2)
    out["weighted_gram"] = stats.release("weighted_gram", stats.outer("weighted_gram", F, step.n * omega))
    # line 10 (its vector): sum phi (r + V_{h+1}(s')) / sigma^2 + phi_3
    r_plus_v = stats.rewards(step) + _pair_sum(step, V_next, stats.values)
    out["r_plus_v"] = stats.release("r_plus_v", stats.inner("r_plus_v", F, omega * r_plus_v))
    out["sigma2"] = sig2
    return out


def backward_pass(provider, *, stats: Callable[[int], Statistics], lam: float, penalty_scale: float,
                  offset: float, variance_aware: bool, provider_var=None) -> LinearFit:
    """Pessimistic value iteration over h = H-1..0 (Qiao & Wang 2023, Algorithm 2, lines 2-14).

    Parameters
    ----------
    provider : FiniteFeatures or RowFeatures
        D, the regression data (lines 9-10), and phi (``providers``).
    stats : callable
        ``stats(h)`` returns the ``Statistics`` of step h (for DP-VAPVI: with
        that step's own noise stream, so the 5H releases are independent).
    lam : float
        Ridge lambda > 0 (also the eigenvalue floor).
    penalty_scale : float
        C * sqrt(d) (VAPVI, DP-VAPVI; line 11) or beta (PEVI).
    offset : float
        The additive penalty D/K (line 11), 0 for PEVI.
    variance_aware : bool
        Estimate sigma_h^2 (lines 4-8); False gives sigma^2 = 1 (PEVI).
    provider_var : same type as ``provider``, optional
        D', the variance data (lines 4-6); ``provider`` when None (no split).

    Returns
    -------
    LinearFit
    """
    H, d = provider.H, provider.dim
    pv = provider if provider_var is None else provider_var
    I = np.eye(d)
    w_all, Li_all, Q_all = np.zeros((H, d)), np.zeros((H, d, d)), [None] * H
    # line 1: V_{H+1} = 0 (0-based: V_H); the noise of each step is drawn inside stats(h)
    V_next = np.zeros(1)
    for h in progress.iterate(range(H - 1, -1, -1), H, "backward pass", "step"):  # line 2: for h = H, ..., 1
        cap = float(H - h)  # the paper's H - h + 1
        st = stats(h)
        rel = step_statistics(provider.step(h), provider.phi(h), V_next, stats=st, lam=lam, cap=cap,
                              variance_aware=variance_aware, step_var=pv.step(h),
                              Phi_var=pv.phi(h) if variance_aware else None)  # lines 4-10's statistics
        # lines 9-10: Lambda_h^-1 (eigenvalues floored at lambda) and w_h = Lambda_h^-1 (sum phi (r+V)/sigma^2 + phi_3)
        Linv = floored_inverse(rel["weighted_gram"] + (lam + st.ridge_shift) * I, lam)
        w = Linv @ rel["r_plus_v"]
        # lines 11-13: Gamma = scale * ||phi||_{Lambda^-1} + D/K ; Q = min(phi^T w - Gamma, H - h + 1)^+
        Q = provider.q(h, w, Linv, penalty_scale, offset, cap)
        # line 14: pi_h = argmax_a Q_h, V_h = max_a Q_h (at the points step h-1 leads to)
        V_next = Q.max(-1)
        w_all[h], Li_all[h], Q_all[h] = w, Linv, Q
    return LinearFit(w=w_all, Lambda_inv=Li_all, Q=tuple(Q_all), offset=np.full(H, float(offset)),
                     penalty_scale=float(penalty_scale))
