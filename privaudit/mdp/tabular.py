"""A finite-horizon tabular MDP with exact, vectorized evaluation.

Conventions: steps h = 0..H-1 (the papers' h = 1..H shifted by one), values
are undiscounted sums of rewards over at most H steps from a start state drawn
from ``d0``. Terminal states are absorbing with reward 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import sparse

from privaudit.core.errors import UsageError
from privaudit.core.spec import StateActionSizes

#: Exact evaluation multiplies by P_h in compressed sparse rows when at most this share of its
#: entries is nonzero (ICU-Sepsis: 12%, 1.5 M of 12.8 M; a mat-vec then reads about a fifth of the
#: bytes of the dense one); denser tables (the random tabular MDPs) stay dense.
SPARSE_MAX_DENSITY = 0.25


@dataclass(frozen=True, repr=False)
class TabularMDP(StateActionSizes):
    """An episodic tabular MDP.

    Attributes
    ----------
    P : ndarray, shape (H, S, A, S) or (S, A, S), float64
        Transition probabilities P_h(s' | s, a); rows sum to 1. A 3-d array
        is a stationary MDP (the same P at every step).
    r : ndarray, shape (S, A), (S, A, S), (H, S, A) or (H, S, A, S), float64
        Reward r(s, a) or r(s, a, s') in reward units, optionally per step.
        When H = S = A, a 3-d ``r`` is read as r_h(s, a) if ``P`` is per-step
        (4-d) and as r(s, a, s') if ``P`` is stationary.
    d0 : ndarray, shape (S,)
        Initial-state distribution.
    horizon : int
        H, the number of steps.
    terminal_states : tuple of int
        Absorbing states with reward 0; their rows of P and r are overridden.
    name : str
        A label for reports.

    Notes
    -----
    ``expected_reward(h)`` gives r_h(s, a) = sum_{s'} P_h(s'|s,a) r(s,a,s') of
    shape (S, A); ``transition(h)`` gives P_h of shape (S, A, S). Both already
    apply the terminal-state override.
    """

    P: np.ndarray
    r: np.ndarray
    d0: np.ndarray
    horizon: int
    terminal_states: tuple[int, ...] = ()
    name: str = "tabular"
    #: True when ``r`` is read as r(s, a, s') (shape (S, A, S) or (H, S, A, S)), False for r(s, a) /
    #: r_h(s, a); the one reading every consumer (simulation, online environments) follows.
    reward_next_state: bool = field(init=False, compare=False, default=False)
    _Pt: np.ndarray = field(init=False, compare=False)
    _rt: np.ndarray = field(init=False, compare=False)
    #: Cache of :meth:`transition_operator` (one entry when P is stationary, else one per step).
    _ops: dict = field(init=False, compare=False, default_factory=dict)

    def __post_init__(self):
        P = np.asarray(self.P, dtype=np.float64)
        r = np.asarray(self.r, dtype=np.float64)
        d0 = np.asarray(self.d0, dtype=np.float64)
        H = int(self.horizon)
        if H < 1:
            raise UsageError(f"`horizon` must be >= 1. Got {H}.")
        if P.ndim not in (3, 4):
            raise UsageError(f"`P` must have shape (S, A, S) or (H, S, A, S). Got {P.shape}.")
        if P.ndim == 4 and P.shape[0] != H:
            raise UsageError(f"`P` has {P.shape[0]} steps but horizon is {H}.")
        S, A = P.shape[-3], P.shape[-2]
        if P.shape[-1] != S:
            raise UsageError(f"`P` last axis must be S={S}. Got shape {P.shape}.")
        for name, x in (("P", P), ("r", r), ("d0", d0)):  # NaN passes every comparison below
            if not np.isfinite(x).all():
                raise UsageError(f"`{name}` must hold finite numbers; it has {int((~np.isfinite(x)).sum())} "
                                 "NaN or infinite entries.")
        if d0.shape != (S,) or abs(d0.sum() - 1) > 1e-6 or (d0 < 0).any():
            raise UsageError(f"`d0` must be a probability vector of shape ({S},).")
        if (P < -1e-12).any() or np.abs(P.sum(-1) - 1).max() > 1e-6:
            raise UsageError("`P` rows must be probability vectors (non-negative, summing to 1).")
        # Expected reward r_h(s, a) per step, shape (H?, S, A). When H = S = A a 3-d r is both
        # (S, A, S) and (H, S, A): it is read as per-step r_h(s, a) when P is per-step (the
        # random tabular MDPs) and as r(s, a, s') when P is stationary (ICU-Sepsis).
        if r.shape == (S, A):
            rsa = r
        elif r.shape == (H, S, A) and (P.ndim == 4 or r.shape != (S, A, S)):
            rsa = r
        elif r.shape == (S, A, S):
            rsa = None
        elif r.shape == (H, S, A, S):
            rsa = None
        else:
            raise UsageError(f"`r` must have shape (S, A), (S, A, S), (H, S, A) or (H, S, A, S). Got {r.shape}.")
        object.__setattr__(self, "reward_next_state", rsa is None)
        if rsa is None:
            rsa = (P * r).sum(-1)  # broadcasts over H when either is per-step
        Pt, rt = P.copy(), np.array(rsa, dtype=np.float64)
        for t in self.terminal_states:
            Pt[..., t, :, :] = 0.0
            Pt[..., t, :, t] = 1.0
            rt[..., t, :] = 0.0
        object.__setattr__(self, "_Pt", Pt)
        object.__setattr__(self, "_rt", rt)
        object.__setattr__(self, "P", P)
        object.__setattr__(self, "r", r)
        object.__setattr__(self, "d0", d0)
        object.__setattr__(self, "horizon", H)
        object.__setattr__(self, "terminal_states", tuple(int(t) for t in self.terminal_states))

    def _sizes(self) -> tuple:
        return self.P.shape[-1], self.P.shape[-2]

    @property
    def stationary(self) -> bool:
        """True when P (and the expected reward) do not depend on h."""
        return self.P.ndim == 3 and self._rt.ndim == 2

    def transition(self, h: int) -> np.ndarray:
        """P_h of shape (S, A, S) with terminal states absorbing."""
        return self._Pt if self._Pt.ndim == 3 else self._Pt[h]

    def transition_operator(self, h: int) -> np.ndarray | sparse.csr_matrix:
        """P_h as an (S A, S) matrix, row s A + a = P_h(. | s, a), terminal states absorbing.

        The rows of :meth:`transition` flattened: a ``scipy.sparse`` CSR matrix when at most
        ``SPARSE_MAX_DENSITY`` of its entries are nonzero, else the dense array (a view). Built once
        per distinct P_h and cached. ``op @ V`` (V of shape (S,) or (S, k)) and ``op.T @ x`` give
        the same values as the dense products up to floating-point rounding (the nonzero terms
        are summed in another order: differences of a few units in the last place).
        """
        key = 0 if self._Pt.ndim == 3 else int(h)
        op = self._ops.get(key)
        if op is None:
            S = self.n_states
            dense = self.transition(h).reshape(-1, S)
            nonzero = dense != 0
            per_row = np.count_nonzero(nonzero, axis=1)
            if per_row.sum() <= SPARSE_MAX_DENSITY * dense.size:
                flat = np.flatnonzero(nonzero)
                indptr = np.concatenate(([0], np.cumsum(per_row)))
                op = sparse.csr_matrix((dense.ravel()[flat], (flat % S).astype(np.int32), indptr),
                                       shape=dense.shape)
            else:
                op = dense
            self._ops[key] = op
        return op

    def expected_reward(self, h: int) -> np.ndarray:
        """r_h(s, a) = E[r | s, a] of shape (S, A), 0 at terminal states."""
        return self._rt if self._rt.ndim == 2 else self._rt[h]

    def __repr__(self) -> str:
        return (f"TabularMDP(name={self.name!r}, H={self.horizon}, S={self.n_states}, "
                f"A={self.n_actions}, stationary={self.stationary}, terminals={len(self.terminal_states)})")


def _policy_at(pi: np.ndarray, h: int) -> np.ndarray:
    return pi if pi.ndim == 2 else pi[h]


def _check_policy(mdp: TabularMDP, pi: np.ndarray) -> np.ndarray:
    pi = np.asarray(pi, dtype=np.float64)
    S, A, H = mdp.n_states, mdp.n_actions, mdp.horizon
    if pi.shape not in ((S, A), (H, S, A)):
        raise UsageError(f"policy must have shape ({S}, {A}) or ({H}, {S}, {A}). Got {pi.shape}.")
    if not np.isfinite(pi).all() or (pi < -1e-12).any() or np.abs(pi.sum(-1) - 1).max() > 1e-6:
        raise UsageError("policy rows pi(. | s) must be probability vectors (non-negative, summing to 1).")
    return pi


def policy_values(mdp: TabularMDP, pi: np.ndarray) -> np.ndarray:
    """Exact state values V^pi_h(s) by backward induction.

    Parameters
    ----------
    mdp : TabularMDP
    pi : ndarray, shape (H, S, A) or (S, A)
        Stochastic policy pi_h(a | s).

    Returns
    -------
    ndarray, shape (H + 1, S)
        V[h, s] = expected sum of rewards from step h on; V[H] = 0.

    Raises
    ------
    UsageError
        If the policy's shape or rows are invalid.

    Notes
    -----
    Each step is one product with :meth:`TabularMDP.transition_operator`
    (sparse rows when P_h is sparse): equal to the dense backward induction
    up to floating-point rounding.
    """
    pi = _check_policy(mdp, pi)
    H, S = mdp.horizon, mdp.n_states
    V = np.zeros((H + 1, S))
    for h in range(H - 1, -1, -1):  # backward over steps, vectorized over (s, a, s')
        Q = mdp.expected_reward(h) + (mdp.transition_operator(h) @ V[h + 1]).reshape(S, -1)
        V[h] = (_policy_at(pi, h) * Q).sum(-1)
    return V


def evaluate_policy(mdp: TabularMDP, pi: np.ndarray) -> float:
    """Exact value v^pi = E_{s ~ d0}[V^pi_0(s)] of a stochastic policy.

    Parameters
    ----------
    mdp : TabularMDP
    pi : ndarray, shape (H, S, A) or (S, A)

    Returns
    -------
    float
        The expected undiscounted return over H steps.
    """
    return float(mdp.d0 @ policy_values(mdp, pi)[0])


def value_iteration(mdp: TabularMDP) -> tuple[np.ndarray, np.ndarray, float]:
    """Optimal policy and values by finite-horizon backward induction.

    Returns
    -------
    pi : ndarray, shape (H, S, A)
        A deterministic optimal policy (one-hot rows; ties to the lowest action).
    V : ndarray, shape (H + 1, S)
        Optimal values V*_h(s); V[H] = 0.
    value : float
        v* = d0 . V*_0.
    """
    H, S, A = mdp.horizon, mdp.n_states, mdp.n_actions
    V = np.zeros((H + 1, S))
    pi = np.zeros((H, S, A))
    for h in range(H - 1, -1, -1):
        Q = mdp.expected_reward(h) + (mdp.transition_operator(h) @ V[h + 1]).reshape(S, A)
        best = Q.argmax(-1)
        pi[h, np.arange(S), best] = 1.0
        V[h] = Q[np.arange(S), best]
    return pi, V, float(mdp.d0 @ V[0])


def reference_regrets(mdp: TabularMDP) -> dict[str, float]:
    """Expected regret per episode, v* - v^pi, of three policies that learn nothing.

    Reference levels for a regret curve (issue 31, D3): ``uniform`` (pi_h(a | s) = 1/A),
    ``action0`` (always action 0) and ``reward_greedy`` (argmax_a r_h(s, a), the expected reward
    of :meth:`TabularMDP.expected_reward`, ties to the lowest action: what an explorer given the
    reward function plays without learning anything about the transitions). Exact, by backward
    induction (:func:`evaluate_policy`, :func:`value_iteration`); the start state is drawn from d0.

    Returns
    -------
    dict
        ``{"uniform": float, "action0": float, "reward_greedy": float}``, in reward units per
        episode (>= 0).
    """
    H, S, A = mdp.horizon, mdp.n_states, mdp.n_actions
    v_star = value_iteration(mdp)[2]
    greedy = np.zeros((H, S, A))
    best = np.stack([mdp.expected_reward(h).argmax(-1) for h in range(H)])        # (H, S)
    np.put_along_axis(greedy, best[..., None], 1.0, axis=2)
    first = np.zeros((S, A))
    first[:, 0] = 1.0
    policies = {"uniform": np.full((S, A), 1.0 / A), "action0": first, "reward_greedy": greedy}
    return {name: v_star - evaluate_policy(mdp, pi) for name, pi in policies.items()}

