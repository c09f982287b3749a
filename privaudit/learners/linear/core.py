"""The backward pass shared by PEVI, VAPVI and DP-VAPVI (finite states).

One function, :func:`backward_pass`, reads top to bottom as seed 000
Algorithm 2 (line numbers of the paper in comments; steps are 0-based here,
h = H-1, ..., 0 for the paper's h = H, ..., 1, so the paper's H - h + 1 is
H - h). VAPVI is the same pass without noise; PEVI skips the variance
estimate (sigma^2 = 1) and uses the penalty beta * ||phi||_{Lambda^-1}.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from privaudit import progress
from privaudit.learners.linear.data import LinearData, StepData
from privaudit.mdp.features import FeatureMap

#: Default memory cap (bytes) of one chunk of phi(s, .) blocks when computing Q over states.
DEFAULT_CHUNK_BYTES = 64 * 2**20


@dataclass(frozen=True, repr=False)
class LinearFit:
    """Result of a backward pass (all post-processing of the released statistics).

    Attributes
    ----------
    w : ndarray, shape (H, d)
        Regression weights w_h (line 10).
    Lambda_inv : ndarray, shape (H, d, d)
        Inverse of the (noisy, eigenvalue-floored) weighted Gram matrix Lambda_h (line 9).
    Q : ndarray, shape (H, S, A)
        Pessimistic Q_h(s, a) in [0, H - h] (line 13).
    offset : ndarray, shape (H,)
        The additive penalty term (D/K) per step.
    """

    w: np.ndarray
    Lambda_inv: np.ndarray
    Q: np.ndarray
    offset: np.ndarray

    def __repr__(self) -> str:
        return f"LinearFit(H={self.w.shape[0]}, d={self.w.shape[1]})"


def floored_inverse(M: np.ndarray, floor: float) -> np.ndarray:
    """Inverse of sym(M) with eigenvalues floored at ``floor`` (ALGORITHMS.md 2.5 "Robustness").

    Post-processing of a released matrix: costs no privacy. Without noise
    (M = Gram + floor * I) the floor changes nothing.
    """
    S = 0.5 * (M + M.T)
    e, U = np.linalg.eigh(S)
    e = np.maximum(e, floor)
    return (U / e) @ U.T


def _step_values(step: StepData, V_next: np.ndarray) -> np.ndarray:
    """V_{h+1}(s') of each distinct transition, shape (t,); ``step.end_value`` where t_next = -1
    (terminal next state), 0 where t_next = -2 (unknown next state)."""
    return np.where(step.t_next >= 0, V_next[np.maximum(step.t_next, 0)],
                    np.where(step.t_next == -1, step.end_value, 0.0))


def _pair_sum(step: StepData, values: np.ndarray) -> np.ndarray:
    """sum over rows of each pair of values(s'), shape (m,): sum_{s'} n_h(s,a,s') values."""
    return np.bincount(step.t_pair, weights=step.t_n * values, minlength=len(step.s))


def variance_statistics(step: StepData, Phi: np.ndarray, V_next: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact statistics of lines 4-6 (before noise): sum phi phi^T, sum phi V^2, sum phi V.

    Parameters
    ----------
    step : StepData
        D' at step h.
    Phi : ndarray, shape (m, d)
        phi(s, a) of the step's pairs.
    V_next : ndarray, shape (S,)
        V_{h+1} over the states.

    Returns
    -------
    gram : ndarray, shape (d, d)
    b1 : ndarray, shape (d,)
        Sensitivity 2H^2 k (``privacy.sensitivities``).
    b2 : ndarray, shape (d,)
        Sensitivity 2H k.
    """
    v = _step_values(step, V_next)
    gram = (Phi * step.n[:, None]).T @ Phi
    return gram, Phi.T @ _pair_sum(step, v**2), Phi.T @ _pair_sum(step, v)


def regression_statistics(step: StepData, Phi: np.ndarray, V_next: np.ndarray,
                          sig2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact statistics of lines 9-10 (before noise): sum phi phi^T / sigma^2 and sum phi (r + V) / sigma^2.

    Parameters
    ----------
    step : StepData
        D at step h.
    Phi : ndarray, shape (m, d)
    V_next : ndarray, shape (S,)
    sig2 : ndarray, shape (m,)
        sigma_h^2(s, a) >= 1 per pair (1 for PEVI).

    Returns
    -------
    gram : ndarray, shape (d, d)
        Frobenius sensitivity sqrt(2) k.
    b3 : ndarray, shape (d,)
        Sensitivity 2H k.
    """
    v = _step_values(step, V_next)
    gram = (Phi * (step.n / sig2)[:, None]).T @ Phi
    return gram, Phi.T @ ((step.r_sum + _pair_sum(step, v)) / sig2)


def q_values(fmap: FeatureMap, w: np.ndarray, Lambda_inv: np.ndarray, penalty_scale: float, offset: float,
             cap: float, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> np.ndarray:
    """Q(s, a) = clip(phi^T w - penalty_scale * ||phi||_{Lambda^-1} - offset, 0, cap) for every state.

    Processes states in chunks of at most ``chunk_bytes`` of phi blocks (memory cap).

    Returns
    -------
    ndarray, shape (S, A)
    """
    S, A, d = fmap.table.shape
    per_state = max(1, A * d * 8 * 2)
    c = max(1, int(chunk_bytes // per_state))
    Q = np.empty((S, A))
    for lo in range(0, S, c):  # chunks of states, vectorized inside
        Phi = fmap.table[lo:lo + c]  # (c, A, d)
        lin = Phi @ w
        quad = np.einsum("cad,cad->ca", Phi @ Lambda_inv, Phi)
        Q[lo:lo + c] = lin - penalty_scale * np.sqrt(np.maximum(quad, 0.0)) - offset
    return np.clip(Q, 0.0, cap)


def _floored_inverse_batch(M: np.ndarray, floor: float) -> np.ndarray:
    """``floored_inverse`` over a leading batch axis, shape (n, d, d)."""
    S = 0.5 * (M + np.swapaxes(M, -1, -2))
    e, U = np.linalg.eigh(S)
    e = np.maximum(e, floor)
    return (U / e[..., None, :]) @ np.swapaxes(U, -1, -2)


def step_statistics(step: StepData, Phi: np.ndarray, V_next: np.ndarray, *, lam: float, cap: float,
                    variance_aware: bool, step_var: StepData | None = None, Phi_var: np.ndarray | None = None,
                    noise: dict | None = None) -> dict:
    """The 5 statistics of one step h (seed 000 Alg. 2 lines 4-10), noisy when ``noise`` is given.

    The one place where the statistics of a step and their noise meet: used by
    :func:`backward_pass` (hence by every learner's ``fit``) and by
    ``DPVAPVI.step_release`` (the auditor's view of a step).

    Parameters
    ----------
    step : StepData
        D at step h (regression data, lines 9-10).
    Phi : ndarray, shape (m, d)
        phi(s, a) of ``step``'s pairs.
    V_next : ndarray, shape (S,)
        V_{h+1} over the states (zeros at h = H-1).
    lam : float
        Ridge lambda (also the eigenvalue floor of the inverse of Sigma).
    cap : float
        H - h (0-based h; the paper's H - h + 1): V_{h+1} <= cap - 1.
    variance_aware : bool
        False: sigma^2 = 1 and ``v2``, ``v`` are not computed (PEVI).
    step_var, Phi_var : StepData, ndarray (m', d), optional
        D' at step h and its features (variance data, lines 4-6); ``step``, ``Phi`` when None.
    noise : dict, optional
        ``phi1, phi2, phi3`` of shape (d,) or (n, d) and ``K1, K2`` of shape
        (d, d) or (n, d, d) from ``privacy.draw_step_noise``; a leading axis
        n gives n independent runs at once (sigma^2 then differs per run).

    Returns
    -------
    dict
        ``gram`` sum phi phi^T (+ K_1), ``v2`` sum phi V^2 (+ phi_1), ``v``
        sum phi V (+ phi_2), ``weighted_gram`` sum phi phi^T / sigma^2 (+ K_2),
        ``r_plus_v`` sum phi (r + V) / sigma^2 (+ phi_3) (the released
        statistics, without the public lambda I), and ``sigma2`` (m,) or
        (n, m), sigma_h^2 >= 1 per pair (post-processing of the first three).
        Shapes gain the leading n when the noise has it.
    """
    batched = noise is not None and np.ndim(noise["phi3"]) == 2
    sv = step if step_var is None else step_var
    Pv = Phi if Phi_var is None else Phi_var
    d = Phi.shape[1]
    out = {}
    if variance_aware:
        # lines 4-6: Sigma_h = sum phi phi^T + lambda I (+ K_1); second and first moments (+ phi_1, phi_2)
        gram, b1, b2 = variance_statistics(sv, Pv, V_next)
        if noise is not None:
            gram, b1, b2 = gram + noise["K1"], b1 + noise["phi1"], b2 + noise["phi2"]
        out.update(gram=gram, v2=b1, v=b2)
        Sigma = gram + lam * np.eye(d)
        if batched:
            Sinv = _floored_inverse_batch(Sigma, lam)
            beta, theta = np.einsum("nij,nj->ni", Sinv, b1), np.einsum("nij,nj->ni", Sinv, b2)
            pb, pt = beta @ Phi.T, theta @ Phi.T  # (n, m)
        else:
            Sinv = floored_inverse(Sigma, lam)
            pb, pt = Phi @ (Sinv @ b1), Phi @ (Sinv @ b2)
        # lines 7-8: clipped variance, sigma^2 = max(1, Var)
        var = np.clip(pb, 0.0, cap**2) - np.clip(pt, 0.0, cap) ** 2
        sig2 = np.maximum(1.0, var)
    else:
        sig2 = np.ones((noise["phi3"].shape[0], len(step.s)) if batched else len(step.s))
    # lines 9-10: sum phi phi^T / sigma^2 (+ K_2) and sum phi (r + V_{h+1}(s')) / sigma^2 (+ phi_3)
    if batched:
        v = _step_values(step, V_next)
        wgram = np.einsum("md,nm,me->nde", Phi, step.n / sig2, Phi)
        b3 = ((step.r_sum + _pair_sum(step, v)) / sig2) @ Phi
    else:
        wgram, b3 = regression_statistics(step, Phi, V_next, sig2)
    if noise is not None:
        wgram, b3 = wgram + noise["K2"], b3 + noise["phi3"]
    out.update(weighted_gram=wgram, r_plus_v=b3, sigma2=sig2)
    return out


def backward_pass(data: LinearData, fmap: FeatureMap, *, lam: float, penalty_scale: float, offset: float,
                  variance_aware: bool, data_var: LinearData | None = None,
                  noise: Callable[[int], dict] | None = None,
                  chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> LinearFit:
    """Pessimistic value iteration over h = H-1..0 (seed 000 Alg. 2 lines 2-14).

    Parameters
    ----------
    data : LinearData
        D, the regression data (lines 9-10).
    fmap : FeatureMap
        phi over the spec's (S, A), ||phi|| <= 1.
    lam : float
        Ridge lambda > 0 (also the eigenvalue floor).
    penalty_scale : float
        C * sqrt(d) (VAPVI, DP-VAPVI; line 11) or beta (PEVI).
    offset : float
        The additive penalty D/K (line 11), 0 for PEVI.
    variance_aware : bool
        Estimate sigma_h^2 (lines 4-8); False gives sigma^2 = 1 (PEVI).
    data_var : LinearData, optional
        D', the variance data (lines 4-6); ``data`` when None (no split).
    noise : callable, optional
        ``noise(h)`` returns that step's fresh draws ``phi1, phi2, phi3, K1, K2``
        (see ``privacy.draw_step_noise``); None means no noise (VAPVI, PEVI).
    chunk_bytes : int
        Memory cap of one chunk in ``q_values``.

    Returns
    -------
    LinearFit
    """
    H, S, A, d = data.H, fmap.n_states, fmap.n_actions, fmap.dim
    dv = data if data_var is None else data_var
    I = np.eye(d)
    w_all, Li_all, Q_all = np.zeros((H, d)), np.zeros((H, d, d)), np.zeros((H, S, A))
    V_next = np.zeros(S)  # V_H = 0 (paper: V_{H+1} = 0)
    for h in progress.iterate(range(H - 1, -1, -1), H, "backward pass", "step"):
        z = noise(h) if noise is not None else None  # fresh draws for this h only
        cap = float(H - h)  # paper's H - h + 1
        st = data.steps[h]
        P = fmap.phi(st.s, st.a)  # (m, d)
        sv = dv.steps[h]
        stats = step_statistics(st, P, V_next, lam=lam, cap=cap, variance_aware=variance_aware,
                                step_var=sv, Phi_var=fmap.phi(sv.s, sv.a) if variance_aware else None, noise=z)
        Lam, b3 = stats["weighted_gram"] + lam * I, stats["r_plus_v"]
        Linv = floored_inverse(Lam, lam)
        w = Linv @ b3
        # lines 11-13: Gamma = scale * ||phi||_{Lambda^-1} + D/K ; Q = min(phi^T w - Gamma, H - h + 1)^+
        Q = q_values(fmap, w, Linv, penalty_scale, offset, cap, chunk_bytes)
        # line 14: greedy policy and V_h = max_a Q_h (computed once on the S states, then indexed)
        V_next = Q.max(-1)
        w_all[h], Li_all[h], Q_all[h] = w, Linv, Q
    return LinearFit(w=w_all, Lambda_inv=Li_all, Q=Q_all, offset=np.full(H, float(offset)))
