"""Shared plumbing of the tabular learners: per-step model, rewards, fitted attributes.

Not public API: the learners are :class:`privaudit.learners.tabular.apvi.APVI`,
:class:`privaudit.learners.tabular.dp_apvi.DPAPVI` and
:class:`privaudit.learners.tabular.ve.ValueIterationCE`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.learners.tabular.pessimism import (Penalty, PVIResult, RewardFrame, pessimistic_value_iteration,
                                                  reward_frame)
from privaudit.learners.policy import Policy
from privaudit.learners.policy_manifest import PolicyPrivacy
from privaudit.privacy.projection import private_transition_estimate

#: Tie-breaking rules among actions of equal (pessimistic) value.
TIE_BREAKS = ("visits", "first")


def greedy_with_ties(Q: np.ndarray, visits: np.ndarray, tie_break: str = "visits") -> np.ndarray:
    """One-hot greedy policy argmax_a Q_h(s, a) with a documented tie-break.

    Parameters
    ----------
    Q : ndarray, shape (H, S, A)
    visits : ndarray, shape (H, S, A)
        The counts the learner used (exact n, or projected noisy ñ: using
        them is post-processing of the release).
    tie_break : {"visits", "first"}
        Among the maximisers of Q_h(s, .) (exactly equal values, typically
        all 0 where every action fell back), "visits" takes the most-visited
        action (the behaviour's habit; then the lowest index), "first" the
        lowest action index. Any maximiser is an argmax, so both are the
        paper's greedy step (Qiao & Wang 2023, Algorithm 1; docs/learners.md, "DP-APVI step by step", step 6.5).

    Returns
    -------
    ndarray, shape (H, S, A), one-hot rows.
    """
    if tie_break not in TIE_BREAKS:
        raise UsageError(f"`tie_break` must be one of {TIE_BREAKS}. Got {tie_break!r}.")
    if tie_break == "first":
        best = Q.argmax(-1)
    else:
        is_max = Q == Q.max(-1, keepdims=True)
        best = np.where(is_max, visits, -np.inf).argmax(-1)
    pi = np.zeros(Q.shape)
    np.put_along_axis(pi, best[..., None], 1.0, axis=-1)
    return pi
from privaudit.data.counts_protocol import Counts


def transition_estimate(n_sas: np.ndarray, n_sa: np.ndarray, E: float) -> np.ndarray:
    """P̃(s' | s, a) = ñ_{s,a,s'} / ñ_{s,a} where ñ_{s,a} > E, else 1/S (Qiao & Wang 2023, eq. (3)).

    Delegates to ``privaudit.privacy.projection.private_transition_estimate``
    (E = 0 gives the empirical P̂ of APVI with uniform rows where n = 0).

    Parameters
    ----------
    n_sas : ndarray, shape (..., S)
    n_sa : ndarray, shape (...)
    E : float

    Returns
    -------
    ndarray, shape (..., S), float64, rows summing to 1.
    """

    return private_transition_estimate(n_sas, n_sa, E)


def known_reward(reward, S: int, A: int, H: int) -> tuple[np.ndarray, str]:
    """Check a known reward in [0, 1]: ``(array, "next_state")`` for r(s') of shape (S,), ``(array, "mean")``
    for r(s, a) / r_h(s, a) of shape (S, A) / (H, S, A).

    Raises
    ------
    UsageError
        Another shape, or values outside [0, 1] (scale them by the spec's reward_range).
    """
    reward = np.asarray(reward, dtype=np.float64)
    if reward.shape == (S,):
        kind = "next_state"
    elif reward.shape in ((S, A), (H, S, A)):
        kind = "mean"
    else:
        raise UsageError(f"`reward` must have shape ({S},) (next-state reward), ({S}, {A}) or "
                         f"({H}, {S}, {A}). Got {reward.shape}.")
    if not np.isfinite(reward).all() or reward.min() < 0 or reward.max() > 1:
        raise UsageError("`reward` must lie in [0, 1] (scale it by the spec's reward_range).")
    return reward, kind


class StepModel:
    """(P̃_h, r_h, ñ_h) for one step at a time, computed on demand and cached for one h.

    Parameters
    ----------
    counts : Counts
    reward : None, ndarray (S,), (S, A) or (H, S, A)
        None: mean reward from the reward sums, clip(R_h / ñ_h, 0, 1) on pairs
        with ñ_h > E (0 elsewhere; those pairs get the fallback anyway).
        (S,): public next-state reward r(s'); r̃_h(s, a) = sum_s' P̃_h(s'|s,a) r(s').
        (S, A) / (H, S, A): known mean reward r_h(s, a) (paper footnote 3).
    E : float
        Noise bound (0 for exact counts).
    prepare : callable (n_sas (S, A, S), n_sa (S, A)) -> (ñ_sas, ñ_sa)
        Turns the raw slices into the counts used (identity for exact counts;
        clip-and-project for DP-APVI).
    frame : RewardFrame
        Every reward above (in [0, 1], scaled by the declared range) is
        planned with as ``frame.scale * r + frame.shift`` (identity for the
        range [0, 1]; see :class:`privaudit.learners.tabular.pessimism.RewardFrame`).
    """

    def __init__(self, counts: Counts, reward, E: float, prepare, frame: RewardFrame = RewardFrame()):
        self.counts, self.E, self.prepare, self.frame = counts, float(E), prepare, frame
        S, A, H = counts.n_states, counts.n_actions, counts.horizon
        self._key = None
        self._val = None
        self._h = None
        self._out = None
        if reward is None:
            if not counts.has_reward_sums:
                raise UsageError("no reward: the counts carry no reward sums and no reward was given. "
                                 "Pass the known reward r(s, a) / public next-state reward r(s'), or "
                                 "use logs/a release whose spec has private rewards.")
            self.kind = "sums"
        else:
            reward, self.kind = known_reward(reward, S, A, H)
            reward = frame.scale * reward + frame.shift
        self.reward = reward

    def step(self, h: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """P̃_h (S, A, S), r_h (S, A), ñ_h (S, A) for step h."""
        if h == self._h:
            return self._out
        key = 0 if self.counts.stationary else h
        if key != self._key:
            n_sas, n_sa = self.prepare(self.counts.transitions_at(h), self.counts.visits_at(h))
            P = transition_estimate(n_sas, n_sa, self.E)
            del n_sas
            # a public next-state reward: r = P r(s') depends on h only through P, so it is computed
            # once per P (once in all for stationary counts; an (S A S) product per step otherwise)
            self._val = (P, n_sa, P @ self.reward if self.kind == "next_state" else None)
            self._key = key
        P, n_sa, r_next = self._val
        if self.kind == "next_state":
            r = r_next
        elif self.kind == "mean":
            r = self.reward if self.reward.ndim == 2 else self.reward[h]
        else:
            R = np.asarray(self.counts.reward_sums_at(h), dtype=np.float64)
            ok = n_sa > self.E
            r = np.where(ok, self.frame.scale * np.clip(R / np.where(ok, n_sa, 1.0), 0.0, 1.0) + self.frame.shift,
                         0.0)
        self._h, self._out = h, (P, r, n_sa)
        return self._out


class TabularLearnerBase:
    """sklearn-style base: parameters in ``__init__``, ``fit`` returns self.

    Fitted attributes (set by ``_run``):

    Q_ : ndarray (H, S, A)
        Clipped pessimistic Q̄_h(s, a), in the planning units of
        ``reward_frame_`` (the declared range [0, 1]: the declared units).
    V_ : ndarray (H + 1, S)
        Ṽ_h(s) = max_a Q̄_h(s, a), V_[H] = 0: the learner's (pessimistic)
        value estimate of its policy from each state, in planning units
        (:meth:`declared_values` converts to the declared reward's units).
    reward_frame_ : RewardFrame
        How rewards scaled by the declared range were planned with.
    penalty_ : ndarray (H, S, A)
        Γ_h(s, a).
    trusted_ : ndarray (H, S, A) bool
        Pairs with ñ_h(s, a) > E (the rest got the fallback, Q = 0).
    visits_used_ : ndarray (H, S, A)
        ñ_h(s, a) the penalty used (see the learner for what it holds).
    E_ : float
        The noise bound used (0 for the non-private learners).
    iota_ : float
        ι = log(H S A / delta).
    policy_ : Policy
        Greedy policy argmax_a Q̄_h(s, a); ties (e.g. every action fell back
        to 0) go to the most-visited action (``tie_break="visits"``) or the
        lowest index (``"first"``), see :func:`greedy_with_ties`.
    """

    algorithm = "tabular"
    #: The :class:`privaudit.core.registry.OfflineLearner` answers of a non-private learner on exact
    #: counts; a learner that differs sets its own.
    private = False
    reads = "counts"
    options: frozenset = frozenset()
    pipeline_output = None
    _param_names: tuple[str, ...] = ()

    def _store_params(self, given: dict) -> None:
        """Keep the constructor's arguments (``locals()`` of ``__init__``) as attributes, unchecked
        (sklearn style: ``fit`` validates them)."""
        for name, value in given.items():
            if name not in ("self", "__class__"):
                setattr(self, name, value)

    def get_params(self) -> dict:
        """The constructor parameters (JSON-serialisable)."""
        return {k: getattr(self, k) for k in self._param_names}

    def declared_values(self) -> np.ndarray:
        """Ṽ_h(s) in the declared reward's units, shape (H + 1, S)."""
        H = self.V_.shape[0] - 1
        return self.reward_frame_.declared(self.V_, (H - np.arange(H + 1))[:, None])

    def value_estimate(self, d0: np.ndarray) -> float:
        """Pessimistic value estimate d0 . Ṽ_0 at the start distribution ``d0`` (S,), declared units."""
        return float(np.asarray(d0, dtype=np.float64) @ self.declared_values()[0])

    def _run(self, counts: Counts, reward, *, E: float, prepare, penalty: Penalty,
             terminal_states: Sequence[int], privacy: PolicyPrivacy, spec_hash: str | None,
             reward_range: Sequence[float] | None = None) -> None:
        """Plan on ``counts`` (after ``prepare``) with ``penalty`` and set the fitted attributes and ``policy_``."""
        frame = reward_frame(reward_range)
        model = StepModel(counts, reward, E, prepare, frame)
        H = counts.horizon
        used = np.zeros((H, counts.n_states, counts.n_actions))

        def n_at(h):
            n = model.step(h)[2]
            used[h] = n
            return n

        res: PVIResult = pessimistic_value_iteration(
            lambda h: model.step(h)[0], lambda h: model.step(h)[1], n_at,
            horizon=H, E=E, penalty=penalty, terminal_states=terminal_states,
            next_state_reward=model.reward if model.kind == "next_state" else None, terminal_value=frame.terminal)
        self.reward_frame_ = frame
        self.Q_, self.V_, self.penalty_, self.trusted_ = res.Q, res.V, res.penalty, res.trusted
        self.visits_used_ = used
        self.E_, self.iota_ = float(E), res.iota
        params = dict(self.get_params(), E=float(E), stationary=bool(counts.stationary))
        self.policy_ = Policy(table=greedy_with_ties(res.Q, used, getattr(self, "tie_break", "visits")), algorithm=self.algorithm, parameters=params,
                              privacy=privacy, spec_hash=spec_hash, stationary=bool(counts.stationary))
