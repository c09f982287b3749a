"""Feature providers: what the backward pass of ``core`` needs to know about the data and phi.

The backward pass (Qiao & Wang 2023, Algorithm 2, :func:`privaudit.learners.linear.dp_vapvi.backward_pass`) reads each
step h through four things, supplied by a provider:

* ``step(h)``: the rows of step h aggregated into pairs (``StepData``); its
  ``t_next`` indexes the value array that ``q(h + 1, ...)`` returns (-1: the
  terminal value ``end_value``, -2: unknown, V = 0);
* ``phi(h)``: phi of those pairs, shape (m, d), ||phi|| <= 1;
* ``q(h, w, Lambda_inv, scale, offset, cap)``: the pessimistic Q_h over the
  points that step h-1's transitions lead to, shape (n_h, A);
* ``H``, ``dim``, ``n_episodes`` (K; used by PEVI's non-private beta only).

Two providers:

* :class:`FiniteFeatures` - a public table phi(s, a) over the spec's S states
  (one-hot, synthetic-linear, state-table-x-action); the points are the S
  states, so Q_h is the (S, A) table of the policy;
* :class:`RowFeatures` - per-row features x of the logs (``column-x-action``,
  phi(row, a) = x ⊗ e_a); each row is its own pair, the points of step h are
  the rows of step h (V_{h+1}(s') uses the features of the episode's next row).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.learners.linear.data import REWARD_BITS, LinearData, StepData
from privaudit.learners.policy import greedy_table
from privaudit.mdp.features import FeatureMap
from privaudit.privacy.fixed_point import to_grid_nearest

#: Default memory cap (bytes) of one chunk of phi(s, .) blocks when computing Q over states.
DEFAULT_CHUNK_BYTES = 64 * 2**20


def q_values(fmap: FeatureMap, w: np.ndarray, Lambda_inv: np.ndarray, penalty_scale: float, offset: float,
             cap: float, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> np.ndarray:
    """Q(s, a) = clip(phi^T w - penalty_scale * ||phi||_{Lambda^-1} - offset, 0, cap) for every state.

    Qiao & Wang 2023, Algorithm 2, lines 11-13 over a feature table, in chunks of at most
    ``chunk_bytes`` of phi blocks (memory cap).

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


def row_phi(X: np.ndarray, a: np.ndarray, A: int) -> np.ndarray:
    """phi = x ⊗ e_a for rows, shape (n, m * A) (block a holds x)."""
    n, m = X.shape
    P = np.zeros((n, A, m))
    P[np.arange(n), a] = X
    return P.reshape(n, A * m)


def q_rows(X: np.ndarray, w: np.ndarray, Linv: np.ndarray, A: int, penalty_scale: float, offset: float,
           cap: float) -> np.ndarray:
    """Q(x, a) = clip(phi^T w - scale ||phi||_{Lambda^-1} - offset, 0, cap) for rows x, shape (n, A).

    phi(x, a) = x ⊗ e_a touches only the diagonal block a of Lambda^-1.
    """
    n, m = X.shape
    W = w.reshape(A, m)
    blocks = Linv.reshape(A, m, A, m)[np.arange(A), :, np.arange(A), :]  # (A, m, m) diagonal blocks
    lin = X @ W.T
    quad = np.einsum("nm,amk,nk->na", X, blocks, X)
    return np.clip(lin - penalty_scale * np.sqrt(np.maximum(quad, 0.0)) - offset, 0.0, cap)


class FiniteFeatures:
    """Aggregated logs over the spec's S states with a public feature table.

    Parameters
    ----------
    data : LinearData
    fmap : FeatureMap
        phi over the spec's (S, A), ||phi|| <= 1.
    chunk_bytes : int
        Memory cap of one chunk in :func:`q_values`.

    Raises
    ------
    UsageError
        If the map's (S, A) differs from the data's.
    """

    def __init__(self, data: LinearData, fmap: FeatureMap, chunk_bytes: int = DEFAULT_CHUNK_BYTES):
        if (data.S, data.A) != (fmap.n_states, fmap.n_actions):
            raise UsageError(f"feature map covers (S, A) = ({fmap.n_states}, {fmap.n_actions}) "
                             f"but the data has ({data.S}, {data.A}).")
        self.data, self.fmap, self.chunk_bytes = data, fmap, chunk_bytes
        self.H, self.dim, self.n_episodes = data.H, fmap.dim, data.n_episodes

    def step(self, h: int) -> StepData:
        return self.data.steps[h]

    def phi(self, h: int) -> np.ndarray:
        st = self.data.steps[h]
        return self.fmap.phi(st.s, st.a)

    def q(self, h: int, w, Lambda_inv, scale: float, offset: float, cap: float) -> np.ndarray:
        """Q_h over the S states, shape (S, A) (the policy's table at step h)."""
        return q_values(self.fmap, w, Lambda_inv, scale, offset, cap, self.chunk_bytes)

    def greedy_table(self, Q: tuple) -> np.ndarray:
        """The policy over the S states, (H, S, A), from the per-step Q tables of a fit."""
        return greedy_table(np.stack(Q))

    def manifest(self) -> dict:
        return self.fmap.manifest()

    def __repr__(self) -> str:
        return f"FiniteFeatures({self.data!r}, {self.fmap!r})"


@dataclass(frozen=True, repr=False)
class RowStep:
    """Rows of one step h (per-row features)."""

    #: Shape (n, m): clipped state features, ||x|| <= 1.
    X: np.ndarray
    #: Shape (n,), int64: the rows' actions.
    a: np.ndarray
    #: Shape (n,), float64: rewards in [0, 1].
    r: np.ndarray
    #: Shape (n,), int64: index of the episode's row at step h+1 among that step's rows; -1: terminal next state
    #: or h = H-1 (V = ``end_value``); -2: unknown next state (V = 0).
    nxt: np.ndarray
    #: V_{h+1} of a terminal next state (``pessimism.RewardFrame``; 0 at h = H-1).
    end_value: float = 0.0

    def step_data(self) -> StepData:
        """Each row its own pair (n = 1), its transition to row ``nxt`` of step h+1."""
        n = len(self.a)
        idx = np.arange(n)
        return StepData(s=idx, a=self.a, n=np.ones(n), r_sum=self.r,
                        r_fixed=to_grid_nearest(self.r, REWARD_BITS).astype(np.float64), t_pair=idx,
                        t_next=self.nxt, t_n=np.ones(n), end_value=self.end_value)


class RowFeatures:
    """Per-row features phi(row, a) = x ⊗ e_a (spec ``features.map = "column-x-action"``).

    Parameters
    ----------
    steps : tuple of RowStep, length H
        From ``rows.row_steps``.
    A : int
        Number of actions (spec).
    """

    def __init__(self, steps: tuple, A: int):
        self.steps, self.A = tuple(steps), int(A)
        self.H = len(self.steps)
        self.m = self.steps[0].X.shape[1]
        self.dim = self.m * self.A
        self.n_episodes = max(1, len(self.steps[0].a))  # rows at step 0 (PEVI's non-private K)
        self._data = tuple(st.step_data() for st in self.steps)

    def step(self, h: int) -> StepData:
        return self._data[h]

    def phi(self, h: int) -> np.ndarray:
        st = self.steps[h]
        return row_phi(st.X, st.a, self.A)

    def q(self, h: int, w, Lambda_inv, scale: float, offset: float, cap: float) -> np.ndarray:
        """Q_h at the rows of step h, shape (n_h, A) (the next states of step h-1's rows)."""
        st = self.steps[h]
        if not len(st.a):
            return np.zeros((1, self.A))
        return q_rows(st.X, w, Lambda_inv, self.A, scale, offset, cap)

    def greedy_table(self, Q: tuple) -> None:
        """None: the rows' features are private, so they give no table over the spec's states."""
        return None

    def __repr__(self) -> str:
        return f"RowFeatures(H={self.H}, m={self.m}, A={self.A})"
