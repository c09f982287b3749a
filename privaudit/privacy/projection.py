"""Consistency projection of noisy transition counts and the private transition estimate.

Seed 000 eq. (2) (ICLR eq. (3)) and eq. (3) (ICLR eq. (5)); ALGORITHMS.md 1.2
steps 4-5 and the numpy recipe of 1.6. Both are post-processing of a release:
they spend no privacy budget.
"""

from __future__ import annotations

import numpy as np

from privaudit.errors import UsageError


def _lo_inverse(a_desc: np.ndarray, csum: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Smallest u >= 0 with Lo(u) = sum_i max(0, a_i - u) <= c, row by row.

    a_desc : (R, S) rows sorted descending (>= 0); csum : its cumulative sums;
    c : (R,) >= 0. With k = #{i : a_i > u}, Lo(u) = C_k - k u on
    [a_(k+1), a_(k)], so u = (C_k - c) / k where k counts the sorted
    positions j with Lo(a_(j)) = C_j - j a_(j) < c (non-decreasing in j).
    When c >= sum(a) the answer is 0; when c = 0 it is max(a).
    """
    R, S = a_desc.shape
    j = np.arange(1, S + 1, dtype=np.float64)
    lo_at = csum - j * a_desc  # Lo(a_(j)), (R, S), non-decreasing along the row
    k = np.count_nonzero(lo_at < c[:, None], axis=1)  # >= 1 when c > 0
    kk = np.maximum(k, 1)
    ck = np.take_along_axis(csum, (kk - 1)[:, None], axis=1)[:, 0]
    u = np.where(k > 0, (ck - c) / kk, a_desc[:, 0])
    return np.where(c >= csum[:, -1], 0.0, np.maximum(u, 0.0))


def project_counts(n_sas: np.ndarray, n_sa: np.ndarray, E: float) -> tuple[np.ndarray, np.ndarray]:
    """Make noisy transition counts consistent with noisy visit counts (seed 000 eq. (2)).

    For every leading index (h, s, a) at once, solves

        min_x max_{s'} |x_{s'} - n'_{s'}|  s.t.  |sum_{s'} x_{s'} - n'| <= E/2,  x >= 0,

    exactly (no iterative tolerance): with a = n'_{h,s,a,.}, b = n'_{h,s,a},
    e = E/2, the optimal max-deviation is t* = max(t1, t2) where
    t1 = max(0, (b - e - sum a)/S) and t2 is the smallest t with
    Lo(t) = sum max(0, a_i - t) <= b + e (sort-based, piecewise linear). A
    minimiser is x_i = max(a_i + c, 0) with c in [-t*, t*] chosen so that
    sum x = T, T the target sum closest to sum a inside
    [max(Lo(t*), b - e), min(sum a + S t*, b + e)] (ALGORITHMS.md 1.6).

    Parameters
    ----------
    n_sas : np.ndarray, shape (..., S), float
        Noisy transition counts n'_{h,s,a,s'} already clipped at 0.
    n_sa : np.ndarray, shape (...), float
        Noisy visit counts n'_{h,s,a} already clipped at 0.
    E : float
        E_rho (or E_eps), >= 0; E = 0 forces sum x = n' exactly.

    Returns
    -------
    n_tilde_sas : np.ndarray, shape (..., S), float64
        ñ_{h,s,a,s'} >= 0.
    n_tilde_sa : np.ndarray, shape (...), float64
        ñ_{h,s,a} = sum over s' of ñ_{h,s,a,s'}.

    Raises
    ------
    UsageError
        Shapes disagree, negative or non-finite inputs, E < 0.

    Notes
    -----
    Memory: a few float64 copies of ``n_sas``; call per h for large domains.

    References
    ----------
    Qiao & Wang, seed 000 eq. (2) and Remark 3.1 (ICLR eq. (3)); ALGORITHMS.md 1.2 step 4, 1.6.
    """
    a = np.asarray(n_sas, dtype=np.float64)
    b = np.asarray(n_sa, dtype=np.float64)
    if a.ndim < 1 or a.shape[:-1] != b.shape:
        raise UsageError(f"`n_sas` must have shape (..., S) and `n_sa` shape (...). "
                         f"Found {a.shape} and {b.shape}.")
    if not (np.isfinite(E) and E >= 0):
        raise UsageError(f"`E` must be >= 0 and finite. Found {E!r}.")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))) or (a < 0).any() or (b < 0).any():
        raise UsageError("`n_sas` and `n_sa` must be finite and >= 0 (clip the noisy counts "
                         "at 0 first).")
    lead, S = a.shape[:-1], a.shape[-1]
    a2 = a.reshape(-1, S)
    b1 = b.reshape(-1)
    e = 0.5 * float(E)
    total = a2.sum(axis=1)
    a_desc = -np.sort(-a2, axis=1)
    csum = np.cumsum(a_desc, axis=1)
    t1 = np.maximum(0.0, (b1 - e - total) / S)
    t2 = _lo_inverse(a_desc, csum, b1 + e)
    t = np.maximum(t1, t2)
    lo_t = np.maximum(0.0, a_desc - t[:, None]).sum(axis=1)
    low = np.maximum(lo_t, b1 - e)
    high = np.minimum(total + S * t, b1 + e)
    target = np.clip(total, low, np.maximum(low, high))
    target = np.where(t == 0, total, target)  # already consistent: x = a exactly
    up = target >= total
    # sum x must rise: x = a + c, c = (target - total)/S in [0, t]
    c_up = np.where(up, (target - total) / S, 0.0)
    # sum x must fall: x = max(a - u, 0), u = Lo^{-1}(target) in [0, t]
    u = _lo_inverse(a_desc, csum, np.where(up, total, target))
    x = np.where(up[:, None], a2 + c_up[:, None], np.maximum(a2 - u[:, None], 0.0))
    return x.reshape(lead + (S,)), x.sum(axis=1).reshape(lead)


def private_transition_estimate(n_tilde_sas: np.ndarray, n_tilde_sa: np.ndarray,
                                E: float) -> np.ndarray:
    """Private transition estimate P̃_h(s' | s, a) (seed 000 eq. (3)).

    P̃ = ñ_{h,s,a,s'} / ñ_{h,s,a} where ñ_{h,s,a} > E, else the uniform 1/S.

    Parameters
    ----------
    n_tilde_sas : np.ndarray, shape (..., S)
        Projected transition counts (from ``project_counts``).
    n_tilde_sa : np.ndarray, shape (...)
        Their sums over s'.
    E : float
        E_rho (or E_eps), >= 0.

    Returns
    -------
    np.ndarray, shape (..., S), float64
        Each row a probability vector.

    Raises
    ------
    UsageError
        Shapes disagree or E < 0.

    References
    ----------
    Seed 000 eq. (3) (ICLR eq. (5)); ALGORITHMS.md 1.2 step 5.
    """
    x = np.asarray(n_tilde_sas, dtype=np.float64)
    n = np.asarray(n_tilde_sa, dtype=np.float64)
    if x.ndim < 1 or x.shape[:-1] != n.shape:
        raise UsageError(f"`n_tilde_sas` must have shape (..., S) and `n_tilde_sa` shape (...). "
                         f"Found {x.shape} and {n.shape}.")
    if not (np.isfinite(E) and E >= 0):
        raise UsageError(f"`E` must be >= 0 and finite. Found {E!r}.")
    S = x.shape[-1]
    ok = n > E
    denom = np.where(ok, n, 1.0)[..., None]
    return np.where(ok[..., None], x / denom, 1.0 / S)
