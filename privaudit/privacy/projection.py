"""Consistency projection of noisy transition counts and the private transition estimate.

Qiao & Wang (2023), eq. (2) (the projection) and eq. (3) (the transition
estimate); docs/privacy.md, "Projection", gives the exact solution used here.
Both are post-processing of a release: they spend no privacy budget.
"""

from __future__ import annotations

import numpy as np

from privaudit.core.errors import UsageError


def _counts_and_margin(sas, sa, E: float, sas_name: str, sa_name: str) -> tuple[np.ndarray, np.ndarray]:
    """``sas`` (..., S) and ``sa`` (...) as float64 arrays of matching shapes; UsageError naming them, or E."""
    x = np.asarray(sas, dtype=np.float64)
    n = np.asarray(sa, dtype=np.float64)
    if x.ndim < 1 or x.shape[:-1] != n.shape:
        raise UsageError(f"`{sas_name}` must have shape (..., S) and `{sa_name}` shape (...). "
                         f"Found {x.shape} and {n.shape}.")
    if not (np.isfinite(E) and E >= 0):
        raise UsageError(f"`E` must be >= 0 and finite. Found {E!r}.")
    return x, n


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
    lo_at = np.multiply(a_desc, j)          # Lo(a_(j)) = C_j - j a_(j), non-decreasing in j
    np.subtract(csum, lo_at, out=lo_at)
    k = np.count_nonzero(lo_at < c[:, None], axis=1)  # >= 1 when c > 0
    kk = np.maximum(k, 1)
    ck = np.take_along_axis(csum, (kk - 1)[:, None], axis=1)[:, 0]
    u = np.where(k > 0, (ck - c) / kk, a_desc[:, 0])
    return np.where(c >= csum[:, -1], 0.0, np.maximum(u, 0.0))


def project_counts(n_sas: np.ndarray, n_sa: np.ndarray, E: float) -> tuple[np.ndarray, np.ndarray]:
    """Make noisy transition counts consistent with noisy visit counts (Qiao & Wang 2023, eq. (2)).

    For every leading index (h, s, a) at once, solves

        min_x max_{s'} |x_{s'} - n'_{s'}|  s.t.  |sum_{s'} x_{s'} - n'| <= E/2,  x >= 0,

    exactly (no iterative tolerance). With a = n'_{h,s,a,.}, b = n'_{h,s,a},
    e = E/2 and Lo(t) = sum_i max(0, a_i - t) (docs/privacy.md, "Projection"), the optimal
    max-deviation is t* = max(t1, t2), t1 = max(0, (b - e - sum a)/S) and t2
    the smallest t >= 0 with Lo(t) <= b + e (sort-based: Lo is piecewise
    linear with breakpoints at the a_i). At most one of them is positive, and
    a minimiser is then explicit:

    * sum a < b - e: x = a + t1 (every cell raised equally; sum x = b - e);
    * sum a > b + e: x = max(a - t2, 0) (sum x = Lo(t2) = b + e);
    * otherwise x = a (already consistent, t* = 0).

    Each |x_i - a_i| <= t*, so x attains the optimum of the LP of Remark 3.1.

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
    Qiao & Wang (2023), eq. (2), also written there as a linear program in
    (x, t); solved here in closed form instead of by an LP solver (any
    minimiser serves: the paper's analysis uses only the constraints and the
    max-deviation bound).
    """
    a, b = _counts_and_margin(n_sas, n_sa, E, "n_sas", "n_sa")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))) or (a < 0).any() or (b < 0).any():
        raise UsageError("`n_sas` and `n_sa` must be finite and >= 0 (clip the noisy counts "
                         "at 0 first).")
    lead, S = a.shape[:-1], a.shape[-1]
    a2 = a.reshape(-1, S)
    b1 = b.reshape(-1)
    x = np.empty_like(a2)
    rows = max(1, _BLOCK_CELLS // max(S, 1))  # blocks of rows keep temporaries in cache
    for start in range(0, a2.shape[0], rows):
        x[start:start + rows] = _project_block(a2[start:start + rows], b1[start:start + rows],
                                               0.5 * float(E))
    return x.reshape(lead + (S,)), x.sum(axis=1).reshape(lead)


#: cells per block of rows in project_counts (about 4 MB of float64 per temporary)
_BLOCK_CELLS = 1 << 19


def _project_block(a2: np.ndarray, b1: np.ndarray, e: float) -> np.ndarray:
    """project_counts on rows (R, S) with visit counts (R,) and half-width e."""
    S = a2.shape[1]
    total = a2.sum(axis=1)
    x = a2.copy()
    # sum too small: t* = t1 = (b - e - sum a) / S, x = a + t1 (sum x = b - e)
    low = np.nonzero(total < b1 - e)[0]
    if low.size:
        x[low] += ((b1[low] - e - total[low]) / S)[:, None]
    # sum too large: t* = t2 = Lo^{-1}(b + e), x = max(a - t2, 0) (sum x = Lo(t2) = b + e)
    high = np.nonzero(total > b1 + e)[0]
    if high.size:
        a = a2[high]
        a_desc = -np.sort(-a, axis=1)
        csum = np.cumsum(a_desc, axis=1)
        t2 = _lo_inverse(a_desc, csum, b1[high] + e)
        np.subtract(a, t2[:, None], out=a)
        np.maximum(a, 0.0, out=a)
        x[high] = a
    return x


def private_transition_estimate(n_tilde_sas: np.ndarray, n_tilde_sa: np.ndarray,
                                E: float) -> np.ndarray:
    """Private transition estimate P̃_h(s' | s, a) (Qiao & Wang 2023, eq. (3)).

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
    Qiao & Wang (2023), eq. (3): the uniform row below the threshold keeps
    every row a probability vector.
    """
    x, n = _counts_and_margin(n_tilde_sas, n_tilde_sa, E, "n_tilde_sas", "n_tilde_sa")
    S = x.shape[-1]
    ok = n > E
    denom = np.where(ok, n, 1.0)[..., None]
    return np.where(ok[..., None], x / denom, 1.0 / S)
