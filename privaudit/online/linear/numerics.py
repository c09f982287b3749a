"""Numerical building blocks of the linear-MDP explorers, over plain numpy arrays.

Everything here is batched over the steps h = 0..H-1 and costs O(H S d + H d^2)
per episode whatever the episode index k, so a run's memory does not grow
with K (docs/online.md, "How the statistics are kept"):

* :class:`RidgeStats` holds, per step h, the (weighted) Gram matrix, its
  inverse and log-determinant maintained by Sherman-Morrison and the matrix
  determinant lemma, and the target statistics of a *finite* next-state
  space: ``b[h, s'] = sum_tau w_tau phi_tau 1{s'_tau = s'}`` and
  ``c[h] = sum_tau w_tau phi_tau r_tau``. Any regression target
  ``sum_tau w_tau phi_tau (r_tau + g(V(s'_tau)))`` is then
  ``c[h] + b[h]^T g(V)``: an O(S d) product instead of a pass over the past.
* the private releases (exact discrete Gaussian noise on integer lattice
  statistics) are in :mod:`privaudit.online.linear.lattice`; the binary-tree
  Gram releases of Luyo and Ngo use :class:`privaudit.online.counters.TreeCounter`
  (mechanism ``goe``, ``noise="exact"``).
* :func:`psd_inverse` turns a noisy symmetric matrix into a positive-definite
  one (eigenvalues floored: post-processing of a private release, so it costs
  no privacy) and
  returns its inverse and log-determinant.

The per-user sensitivity of every statistic is stated by the functions in
:mod:`privaudit.online.linear.sensitivity`.
"""

from __future__ import annotations

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.mdp.features import enforce_norm

try:  # np.clip's ufunc: clip(x, lo, hi) = min(max(x, lo), hi) elementwise (array bounds too), one C call
    from numpy._core.umath import clip as clip_ufunc      # numpy >= 2
except ImportError:  # pragma: no cover
    from numpy.core.umath import clip as clip_ufunc       # numpy 1.x


def checked_features(phi) -> np.ndarray:
    """Validate a public feature table and enforce ||phi(s, a)|| <= 1.

    Parameters
    ----------
    phi : array_like, shape (S, A, d)
        Public feature map phi(s, a) (the spec's, never read off private data).

    Returns
    -------
    ndarray, shape (S, A, d), float64
        Each vector divided by max(1, ||phi||) (``enforce_norm(..., "clip")``),
        so that every statistic below has the sensitivity stated for ||phi|| <= 1.

    Raises
    ------
    UsageError
        Not a finite 3-d array.
    """
    t = np.asarray(phi, dtype=np.float64)
    if t.ndim != 3 or min(t.shape) < 1:
        raise UsageError(f"`phi` must have shape (S, A, d). Found shape {t.shape}.")
    if not np.isfinite(t).all():
        raise UsageError("`phi` must hold finite numbers. Found NaN or inf.")
    table, _ = enforce_norm(t, "clip")
    return table


class RidgeStats:
    """Per-step weighted ridge statistics of a finite-state linear MDP.

    Parameters
    ----------
    horizon, n_states, dim : int
        H, S and d.
    lam : float
        Ridge regulariser lambda > 0 of the exact Gram matrix ``lam I + sum w phi phi^T``.

    Attributes
    ----------
    gram : ndarray, shape (H, d, d)
        ``lam I + sum_tau w_tau phi_tau phi_tau^T`` (the exact, non-private statistic).
    inv : ndarray, shape (H, d, d)
        Its inverse (Sherman-Morrison; re-symmetrised each update).
    logdet : ndarray, shape (H,)
        Its log-determinant (matrix determinant lemma).
    b : ndarray, shape (H, S, d)
        ``sum_tau w_tau phi_tau 1{s'_tau = s'}`` per next state s'.
    c : ndarray, shape (H, d)
        ``sum_tau w_tau phi_tau r_tau``.
    n : int
        Number of episodes added.

    Notes
    -----
    These are exact sums over the users seen so far. A private algorithm
    releases them only through noise (see the algorithms' docstrings).
    """

    def __init__(self, horizon: int, n_states: int, dim: int, lam: float):
        if not (lam > 0 and np.isfinite(lam)):
            raise UsageError(f"ridge `lam` must be > 0 and finite. Got {lam!r}.")
        H, S, d = int(horizon), int(n_states), int(dim)
        self.lam = float(lam)
        self.gram = np.broadcast_to(lam * np.eye(d), (H, d, d)).copy()
        self.inv = np.broadcast_to(np.eye(d) / lam, (H, d, d)).copy()
        self.logdet = np.full(H, d * np.log(lam))
        self.b = np.zeros((H, S, d))
        self.c = np.zeros((H, d))
        self.n = 0
        self._h = np.arange(H)

    def add(self, phi: np.ndarray, next_states: np.ndarray, rewards: np.ndarray,
            weights: np.ndarray | None = None) -> None:
        """Add one episode: one (phi, s', r, w) per step.

        Parameters
        ----------
        phi : ndarray, shape (H, d)
            phi(s_h, a_h), norms <= 1.
        next_states : ndarray, shape (H,), int
            s_{h+1}.
        rewards : ndarray, shape (H,)
            r_h in [0, 1].
        weights : ndarray, shape (H,), optional
            w_h = sigma-bar_h^{-2} (LSVI-UCB++); 1 when omitted.
        """
        w = np.ones(len(phi)) if weights is None else np.asarray(weights, dtype=np.float64)
        u = phi * np.sqrt(w)[:, None]                       # (H, d)
        Au = (self.inv @ u[:, :, None])[:, :, 0]            # (H, d)
        q = (u * Au).sum(axis=1)                            # u^T A^-1 u >= 0
        self.inv -= Au[:, :, None] * Au[:, None, :] / (1.0 + q)[:, None, None]
        self.inv = 0.5 * (self.inv + self.inv.transpose(0, 2, 1))
        self.logdet += np.log1p(q)
        self.gram += u[:, :, None] * u[:, None, :]
        wphi = phi * w[:, None]
        self.b[self._h, next_states] += wphi
        self.c += wphi * rewards[:, None]
        self.n += 1

    def targets(self, values_next: np.ndarray, with_reward: bool) -> np.ndarray:
        """``sum_tau w phi (r + V_{h+1}(s'))`` for all h at once (or without r).

        Parameters
        ----------
        values_next : ndarray, shape (H, S)
            V_{h+1}(s') for h = 0..H-1 (row H-1 is V_H = 0 for the last step).
        with_reward : bool
            Include the observed rewards (LSVI-UCB) or not (LSVI-UCB++, whose
            reward function is public).

        Returns
        -------
        ndarray, shape (H, d)
        """
        y = np.einsum("hsd,hs->hd", self.b, values_next)
        return y + self.c if with_reward else y

    def target(self, h: int, v_next: np.ndarray, with_reward: bool) -> np.ndarray:
        """One step's target vector, shape (d,); ``v_next`` has shape (S,)."""
        y = v_next @ self.b[h]
        return y + self.c[h] if with_reward else y


def goe_opnorm_bound(s: float, dim: int, fail: float) -> float:
    """High-probability bound on ||(Z + Z^T)/sqrt(2)||_2, Z_ij ~ N(0, s^2). [D]

    E||.|| <= 2 s sqrt(d) (Gordon/Slepian for the GOE) and Z -> ||(Z + Z^T)/sqrt(2)||
    is sqrt(2) s-Lipschitz in a standard Gaussian vector, so by Gaussian
    concentration ``P(||.|| > s (2 sqrt(d) + sqrt(2) t)) <= exp(-t^2/2)``; with
    t = sqrt(2 ln(1/fail)) the bound is ``s (2 sqrt(d) + 2 sqrt(ln(1/fail)))``.
    """
    return float(s * (2.0 * np.sqrt(dim) + 2.0 * np.sqrt(np.log(1.0 / fail))))


def gauss_norm_bound(sigma: float, dim: int, fail: float) -> float:
    """High-probability bound on ||eta||_2, eta ~ N(0, sigma^2 I_d): sigma (sqrt(d) + sqrt(2 ln(1/fail))). [D]"""
    return float(sigma * (np.sqrt(dim) + np.sqrt(2.0 * np.log(1.0 / fail))))


def psd_inverse(mat: np.ndarray, floor: float, *, symmetric: bool = False,
                fast: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Inverse and log-determinant of symmetric matrices with eigenvalues floored.

    Parameters
    ----------
    mat : ndarray, shape (H, d, d)
        Noisy symmetric matrices (symmetrised here unless ``symmetric``).
    floor : float
        Eigenvalue floor > 0 (post-processing of a private release: costs no
        privacy).
    symmetric : bool, default False
        ``mat`` is exactly symmetric already (e.g. integer lattice statistic
        plus symmetric integer noise, in real units): skip the symmetrisation
        (which would return the same matrix).
    fast : bool, default False
        Try the Cholesky fast path first: if every ``mat[h] - floor I`` has a
        Cholesky factor (is positive definite), no eigenvalue is below the
        floor, so the floored matrix is ``mat`` itself and its inverse and
        log-determinant (2 sum log diag of the Cholesky factor of ``mat``)
        are returned without an eigendecomposition (about a third of its
        cost); otherwise, or if any factorisation fails, the eigenvalue path.
        Both give the same matrices up to float rounding.

    Returns
    -------
    inv : ndarray, shape (H, d, d)
    logdet : ndarray, shape (H,)
    """
    m = mat if symmetric else 0.5 * (mat + np.swapaxes(mat, -1, -2))
    if fast:
        got = _inverse_above_floor(m, floor)
        if got is not None:
            return got
    vals, vecs = np.linalg.eigh(m)
    vals = np.maximum(vals, floor)
    inv = (vecs / vals[..., None, :]) @ np.swapaxes(vecs, -1, -2)      # V diag(1/vals) V^T
    return inv, np.log(vals).sum(axis=-1)


def _inverse_above_floor(m: np.ndarray, floor: float) -> tuple[np.ndarray, np.ndarray] | None:
    """(inv, logdet) of symmetric ``m`` when every m[h] - floor I is positive definite (Cholesky), else None."""
    try:
        np.linalg.cholesky(m - floor * np.eye(m.shape[-1]))
        chol = np.linalg.cholesky(m)
    except np.linalg.LinAlgError:
        return None
    return np.linalg.inv(m), 2.0 * np.log(np.diagonal(chol, axis1=-2, axis2=-1)).sum(axis=-1)


class FlooredInverse:
    """:func:`psd_inverse` of a stream of releases, with the Cholesky fast path where it pays.

    The fast path costs a failed factorisation (about a tenth of an
    eigendecomposition) whenever some eigenvalue needs the floor, which is
    the rule for some constant sets (practical DP-LSVI-UCB++: 1-2 floored
    eigenvalues per matrix) and the exception for others (theory: none). So
    after a failure it is skipped for the next ``retry`` calls; any success
    resumes it. Which path runs changes only float rounding, never the
    result's definition (the floor is post-processing of the release).

    Parameters
    ----------
    floor : float
        Eigenvalue floor > 0.
    retry : int, default 16
        Calls without the fast path after it failed.
    """

    def __init__(self, floor: float, retry: int = 16):
        self.floor = float(floor)
        self.retry = int(retry)
        self._skip = 0
        self.fast_calls = 0            # calls answered by the Cholesky fast path (diagnostics, tests)

    def __repr__(self) -> str:
        return f"FlooredInverse(floor={self.floor!r}, fast_calls={self.fast_calls})"

    def __call__(self, mat: np.ndarray, symmetric: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(inv, logdet) of ``mat`` (H, d, d) with eigenvalues floored, as :func:`psd_inverse`."""
        if self._skip > 0:
            self._skip -= 1
            return psd_inverse(mat, self.floor, symmetric=symmetric)
        m = mat if symmetric else 0.5 * (mat + np.swapaxes(mat, -1, -2))
        got = _inverse_above_floor(m, self.floor)
        if got is None:
            self._skip = self.retry
            return psd_inverse(m, self.floor, symmetric=True)
        self.fast_calls += 1
        return got


def bonus_table(phi_flat: np.ndarray, inv: np.ndarray) -> np.ndarray:
    """``||phi(s, a)||_{Lambda_h^{-1}}`` for every (h, s, a) in one product.

    Parameters
    ----------
    phi_flat : ndarray, shape (S*A, d)
    inv : ndarray, shape (H, d, d) or (d, d)

    Returns
    -------
    ndarray, shape (H, S*A) (or (S*A,))
    """
    q = ((phi_flat @ inv) * phi_flat).sum(axis=-1)
    return np.sqrt(np.maximum(q, 0.0))


#: Decimals kept when comparing Q values for the greedy action (reward units).
TIE_DECIMALS = 9


def greedy(q: np.ndarray, index: np.ndarray) -> np.ndarray:
    """argmax_a q[..., a], ties broken by the larger unclipped optimistic ``index``.

    Clipping Q at H makes every unexplored action tie at H; the papers break
    ties arbitrarily, and always taking the lowest action would never
    explore the others. Among the maximisers of ``q`` this picks the one
    with the largest ``index`` (for Jin's Q = min{index, H} simply argmax index),
    so it is still an argmax of Q.

    Values are rounded to :data:`TIE_DECIMALS` decimals first: actions whose
    features agree on the explored directions tie exactly in exact arithmetic,
    and rounding keeps the choice (the lowest such action) independent of
    floating-point noise, e.g. of Sherman-Morrison versus an eigendecomposition.

    Parameters
    ----------
    q, index : ndarray, shape (..., A)

    Returns
    -------
    ndarray, shape (...,), int64
    """
    q = np.round(q, TIE_DECIMALS)
    top = q.max(axis=-1, keepdims=True)
    return np.where(q >= top, np.round(index, TIE_DECIMALS), -np.inf).argmax(axis=-1)
