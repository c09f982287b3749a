"""Backward pessimistic value iteration: the shared core of the tabular learners.

One function, :func:`pessimistic_value_iteration`, runs the loop of Qiao &
Wang (2023), *Offline RL with DP*, Algorithm 1, lines 2-9, restated in
docs/learners.md, "DP-APVI step by step", step 6. DP-APVI, APVI, their Hoeffding variants and the
certainty-equivalent baseline all call it with different counts, thresholds
and penalties:

================  ======================  ==========  ==================
learner           counts n                E           penalty
================  ======================  ==========  ==================
DP-APVI           projected noisy ñ        E_rho/E_eps bernstein
APVI              exact n                  0           bernstein
APVI-Hoeffding    exact n (or ñ)           0 (or E)    hoeffding
VE (CE baseline)  exact n                  0           none
================  ======================  ==========  ==================

Steps are 0-based in code, h = 0..H-1 (the paper's h = 1..H shifted by one),
so the paper's clip to [0, H - h + 1] is the clip to [0, H - h] here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from privaudit.core import progress
from privaudit.core.errors import UsageError

#: Paper constants (Qiao & Wang 2023, Algorithm 1; docs/learners.md, "DP-APVI step by step", step 1).
C1_DEFAULT = math.sqrt(2.0)
C2_DEFAULT = 16.0
#: "any constant C > 1" of the fallback penalty C*H; 2 is our choice.
C_DEFAULT = 2.0
#: Default failure probability delta of the learner's confidence bounds
#: (not a privacy parameter; the paper leaves its value free).
FAILURE_PROB_DEFAULT = 0.05
#: Coefficient of APVI's optional lower-order term 16 H iota / n
#: (Yin & Wang 2021, as we recall it, not checked against the paper: docs/learners.md, "APVI").
APVI_LOWER_ORDER_COEF = 16.0

PENALTIES = ("bernstein", "hoeffding", "none")


@dataclass(frozen=True)
class Penalty:
    """The penalty Γ_h(s, a) of :func:`pessimistic_value_iteration`: its kind and constants.

    Attributes
    ----------
    kind : {"bernstein", "hoeffding", "none"}
        Main term: Bernstein C1 sqrt(Var_P̃(Ṽ_{h+1}) ι / (ñ - E)) (Qiao & Wang 2023,
        Algorithm 1 line 5), Hoeffding C1 H sqrt(ι / (ñ - E)) (their section 3,
        "Comparison to Hoeffding type pessimism"), or none (certainty equivalence).
    C1, C2 : float
        Penalty constants, paper values sqrt(2) and 16. The C2 S H E ι / ñ
        term is added for every kind (it is 0 when E = 0).
    C : float, default 2
        Fallback penalty C * H for pairs with ñ <= E; must be > 1 so that the
        clip makes those Q values exactly 0.
    failure_prob : float, default 0.05
        delta of ι = log(H S A / delta).
    lower_order : bool, default False
        Add APVI's lower-order term 16 H ι / ñ (Yin & Wang 2021).
    """

    kind: str = "bernstein"
    C1: float = C1_DEFAULT
    C2: float = C2_DEFAULT
    C: float = C_DEFAULT
    failure_prob: float = FAILURE_PROB_DEFAULT
    lower_order: bool = False

    def check(self) -> None:
        """Raise :class:`UsageError` for an unknown kind, C <= 1, failure_prob outside (0, 1), C1 or C2 < 0."""
        if self.kind not in PENALTIES:
            raise UsageError(f"`penalty` must be one of {PENALTIES}. Got {self.kind!r}.")
        if not self.C > 1:
            raise UsageError(f"`C` must be > 1 (the fallback C*H must exceed every value). Got {self.C}.")
        if not 0 < self.failure_prob < 1:
            raise UsageError(f"`failure_prob` must lie in (0, 1). Got {self.failure_prob}.")
        if self.C1 < 0 or self.C2 < 0:
            raise UsageError(f"`C1` and `C2` must be >= 0. Got C1={self.C1}, C2={self.C2}.")


@dataclass(frozen=True)
class RewardFrame:
    """The reward units the tabular and linear learners optimise in.

    Logs and releases carry rewards scaled by the spec's declared range,
    r' = (r - r_min) / (r_max - r_min) in [0, 1], and terminal states are
    absorbing with reward 0 *in the declared units*. Planning with r' and a
    terminal value of 0 is wrong whenever r_min != 0: with r_min < 0 every
    step still alive earns -r_min / (r_max - r_min) > 0 more than being dead,
    so the learner prefers long episodes (e.g. keeping patients in the ICU);
    with r_min > 0 the opposite. The learners therefore plan with

        r'' = scale * r' + shift  in [0, 1],
        terminal states earning ``terminal`` in [0, 1] per remaining step,

    the affine image (positive factor) of the declared reward over the range
    [min(r_min, 0), max(r_max, 0)], which contains both the rewards and the
    terminal reward 0. Every episode then lasts H steps in r'' units and its
    return is (G - H min(r_min, 0)) / width with G the declared return, so
    every policy's value is the same increasing affine function of its
    declared value: the learned policy is the one for the declared reward,
    whatever the range (widening it or multiplying rewards and range by
    a > 0 changes the model only through the penalty's width), and values
    stay in [0, H - h] as the paper's analysis assumes (Qiao & Wang 2023, rewards in
    [0, 1]). For the range [0, 1] the frame is the identity (scale 1, shift
    0, terminal 0).

    Attributes
    ----------
    scale, shift : float
        r'' = scale * r' + shift; scale in (0, 1], shift in [0, 1).
    terminal : float
        Per-step value of a terminal state in r'' units, in [0, 1].
    low, width : float
        min(r_min, 0) and max(r_max, 0) - min(r_min, 0): a value V'' over m
        remaining steps is ``width * V'' + m * low`` in declared units.
    """

    scale: float = 1.0
    shift: float = 0.0
    terminal: float = 0.0
    low: float = 0.0
    width: float = 1.0

    def declared(self, values: np.ndarray, steps_left) -> np.ndarray:
        """Values in r'' units over ``steps_left`` remaining steps -> declared reward units."""
        return self.width * np.asarray(values, dtype=np.float64) + np.asarray(steps_left) * self.low


def reward_frame(reward_range: Sequence[float] | None) -> RewardFrame:
    """The :class:`RewardFrame` of a declared reward range (None: [0, 1]).

    Raises
    ------
    UsageError
        A range that is not finite with r_min < r_max.
    """
    if reward_range is None:
        return RewardFrame()
    lo, hi = (float(x) for x in reward_range)
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise UsageError(f"`reward_range` must hold finite (r_min, r_max) with r_min < r_max. Got {reward_range}.")
    low, high = min(lo, 0.0), max(hi, 0.0)
    width = high - low
    return RewardFrame(scale=(hi - lo) / width, shift=(lo - low) / width, terminal=-low / width,
                       low=low, width=width)

ArrayOrStep = np.ndarray | Callable[[int], np.ndarray]


@dataclass(frozen=True, repr=False)
class PVIResult:
    """Output of :func:`pessimistic_value_iteration`.

    Attributes
    ----------
    Q : ndarray, shape (H, S, A), float64
        Q̄_h(s, a), the clipped pessimistic action values.
    V : ndarray, shape (H + 1, S), float64
        Ṽ_h(s) = max_a Q̄_h(s, a); V[H] = 0.
    penalty : ndarray, shape (H, S, A), float64
        Γ_h(s, a) as used (C * H on fallback pairs).
    trusted : ndarray, shape (H, S, A), bool
        Pairs with n_h(s, a) > E (the others got the fallback Γ = C * H).
    iota : float
        ι = log(H S A / delta).
    """

    Q: np.ndarray
    V: np.ndarray
    penalty: np.ndarray
    trusted: np.ndarray
    iota: float

    def __repr__(self) -> str:
        return f"PVIResult(Q={self.Q.shape}, V={self.V.shape}, iota={self.iota:.3f})"


def _step_getter(x: ArrayOrStep | Sequence[np.ndarray], ndim: int, name: str) -> Callable[[int], np.ndarray]:
    """Turn an array with an optional leading H axis, or a callable h -> array, into h -> array."""
    if callable(x):
        return x
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim == ndim:
        return lambda h: arr
    if arr.ndim == ndim + 1:
        return lambda h: arr[h]
    raise UsageError(f"`{name}` must have {ndim} or {ndim + 1} dimensions (stationary or per step). "
                     f"Found shape {arr.shape}.")


class _TrustedRows:
    """The rows of P̃_h that :func:`pessimistic_value_iteration` multiplies by Ṽ_{h+1}.

    Only trusted pairs (ñ > E) can end with a nonzero Q: elsewhere Γ = C H > H - h >= r + P̃ Ṽ_{h+1}
    (r in [0, 1], Ṽ_{h+1} <= H - h - 1 by the clip), so the clip of line 7 gives exactly 0 whatever
    P̃ Ṽ_{h+1} is. When fewer than half of the pairs are trusted (a release with noise bound E far
    above most counts: the bundled sample has 25 of 17,900 pairs), the products are taken over the
    trusted rows only, a copy kept while P̃_h and the trusted set stay the same object and set (every
    h of a stationary model); untrusted pairs get P̃ Ṽ = 0 (their Q is 0 either way). Otherwise the
    whole (S A, S) matrix is used, as before.
    """

    def __init__(self):
        self._P, self._trusted, self._rows, self._sub = None, None, None, None

    def __call__(self, P_raw, trusted: np.ndarray, S: int) -> np.ndarray:
        self.shape = trusted.shape
        if self._P is P_raw and np.array_equal(self._trusted, trusted):
            return self._sub
        P = np.asarray(P_raw, dtype=np.float64)
        A = trusted.shape[1]
        if P.shape != (S, A, S):
            raise UsageError(f"`P` at step h must have shape ({S}, {A}, {S}). Got {P.shape}.")
        P = P.reshape(S * A, S)
        rows = np.flatnonzero(trusted)
        if 2 * rows.size < trusted.size:
            self._rows, self._sub = rows, P[rows]
        else:
            self._rows, self._sub = None, P
        self._P, self._trusted = P_raw, trusted.copy()
        return self._sub

    def scatter(self, x: np.ndarray) -> np.ndarray:
        """A product over the rows used, as an (S, A) array (0 on the rows left out)."""
        if self._rows is None:
            return x.reshape(self.shape)
        out = np.zeros(self.shape)
        out.ravel()[self._rows] = x
        return out


def pessimistic_value_iteration(
    P: ArrayOrStep,
    r: ArrayOrStep,
    n: ArrayOrStep,
    *,
    horizon: int,
    E: float = 0.0,
    penalty: Penalty = Penalty(),
    terminal_states: Sequence[int] = (),
    next_state_reward: np.ndarray | None = None,
    terminal_value: float = 0.0,
) -> PVIResult:
    """Backward pessimistic value iteration (Qiao & Wang 2023, Algorithm 1, lines 2-9).

    Parameters
    ----------
    P : ndarray (S, A, S) or (H, S, A, S), or callable h -> (S, A, S)
        Transition estimate P̃_h(s' | s, a) (rows are probability vectors;
        uniform 1/S where n <= E, eq. (3)). A 3-d array is used at every h
        (stationary model).
    r : ndarray (S, A) or (H, S, A), or callable h -> (S, A)
        Known (or estimated) mean reward r_h(s, a) in [0, 1].
    n : ndarray (S, A) or (H, S, A), or callable h -> (S, A)
        Visit counts ñ_h(s, a) (projected private counts for DP-APVI, exact
        counts for APVI), float or int.
    horizon : int
        H.
    E : float, default 0
        Noise bound E_rho / E_eps (docs/learners.md, "DP-APVI step by step", step 1,
        and "The Laplace variant"); 0 for the
        non-private learners.
    penalty : Penalty
        Kind and constants of Γ_h(s, a) (default: Bernstein with the paper's constants).
    terminal_states : sequence of int
        Public absorbing states (from the spec): their Q at step h is set to
        ``terminal_value * (H - h)``, their true value.
    terminal_value : float in [0, 1], default 0
        Per-step reward of a terminal state in the units of ``r``: 0 when
        ``r`` is the declared reward scaled from [0, r_max]; in general
        ``reward_frame(range).terminal`` (see :class:`RewardFrame`).
    next_state_reward : ndarray (S,), optional
        When the reward is a public function of the next state, r(s') (then
        ``r`` must be sum_s' P̃ r(s')), the Bernstein variance is taken of
        r(s') + Ṽ_{h+1}(s'), the quantity whose mean Q̃ estimates; the paper's
        r(s, a) is deterministic and adds no variance (our addition: a departure
        from Algorithm 1 line 5, which takes the variance of Ṽ_{h+1} alone).

    Returns
    -------
    PVIResult
        Q (H, S, A), V (H + 1, S), penalty (H, S, A), trusted (H, S, A), iota.

    Raises
    ------
    UsageError
        Bad constants (C <= 1, failure_prob outside (0, 1), E < 0, unknown
        penalty) or inconsistent shapes.

    Notes
    -----
    Vectorized over (s, a, s') at each h; only h is looped. Var_p(V) is
    computed as sum p V^2 - (sum p V)^2 and clipped at 0 (rounding).
    With 0-based h the clip of line 7 is [0, H - h]. A pair with ñ <= E gets
    Γ = C H > H >= r + P̃ Ṽ_{h+1}, so its clipped Q is exactly 0
    (docs/learners.md, "When ñ ≤ E"); when fewer than half
    of the pairs are trusted, P̃ Ṽ_{h+1} and the variance are therefore
    computed on the trusted rows only (the outputs are the same up to the
    rounding of the row products).

    References
    ----------
    Qiao & Wang 2023, Offline RL with DP, Algorithm 1 and eqs. (1)-(3);
    docs/learners.md, "DP-APVI step by step", step 6, "The Hoeffding variant", "APVI".
    """
    H = int(horizon)
    if H < 1:
        raise UsageError(f"`horizon` must be >= 1. Got {horizon}.")
    penalty.check()
    C1, C2, C = penalty.C1, penalty.C2, penalty.C
    if not (E >= 0 and np.isfinite(E)):
        raise UsageError(f"`E` must be a finite number >= 0. Got {E}.")
    if not 0.0 <= terminal_value <= 1.0:
        raise UsageError(f"`terminal_value` must lie in [0, 1] (a per-step reward). Got {terminal_value}.")
    P_at, r_at, n_at = _step_getter(P, 3, "P"), _step_getter(r, 2, "r"), _step_getter(n, 2, "n")
    P0 = np.asarray(P_at(H - 1))
    S, A = P0.shape[0], P0.shape[1]
    if P0.shape != (S, A, S):
        raise UsageError(f"`P` at step h must have shape (S, A, S). Got {P0.shape}.")
    iota = math.log(H * S * A / penalty.failure_prob)          # step 1: ι = log(HSA/δ)
    terminals = np.asarray(list(terminal_states), dtype=np.int64)

    Q = np.zeros((H, S, A))
    V = np.zeros((H + 1, S))                                    # Ṽ_{H+1} = 0 (paper indexing)
    G = np.zeros((H, S, A))
    trusted_all = np.zeros((H, S, A), dtype=bool)
    rows_of = _TrustedRows()
    for h in progress.iterate(range(H - 1, -1, -1), H, "backward pass", "step"):  # Alg. 1: h = H..1 (paper)
        P_raw = P_at(h)
        r_h = np.asarray(r_at(h), dtype=np.float64)
        n_h = np.asarray(n_at(h), dtype=np.float64)
        if r_h.shape != (S, A) or n_h.shape != (S, A):
            raise UsageError(f"`r` and `n` at step h={h} must have shape ({S}, {A}). "
                             f"Got {r_h.shape} and {n_h.shape}.")
        trusted = n_h > E
        P_h = rows_of(P_raw, trusted, S)                        # the rows whose Q̃ reaches the output
        V_next = V[h + 1]
        W = V_next if next_state_reward is None else V_next + next_state_reward
        PV = rows_of.scatter(P_h @ V_next)
        Q_tilde = r_h + PV                                      # 6.1: Q̃ = r + P̃ Ṽ_{h+1}
        PW = PV if next_state_reward is None else Q_tilde
        n_safe = np.where(trusted, n_h, 1.0)                    # avoid 0-division; masked below
        gap = np.where(trusted, n_h - E, 1.0)                   # ñ - E > 0 on trusted pairs
        if penalty.kind == "bernstein":                         # 6.2, Alg. 1 line 5 (Bernstein)
            var = np.maximum(rows_of.scatter(P_h @ (W * W)) - PW * PW, 0.0)
            gamma = C1 * np.sqrt(var * iota / gap)
        elif penalty.kind == "hoeffding":                       # section 3 Hoeffding variant
            gamma = C1 * H * np.sqrt(iota / gap)
        else:
            gamma = np.zeros((S, A))
        if E > 0:                                               # + C2 S H E ι / ñ
            gamma = gamma + C2 * S * H * E * iota / n_safe
        if penalty.lower_order:                                 # APVI's 16 H ι / n (recalled)
            gamma = gamma + APVI_LOWER_ORDER_COEF * H * iota / n_safe
        gamma = np.where(trusted, gamma, C * H)                 # 6.2 else-branch: Γ = C H
        Q_h = np.clip(Q_tilde - gamma, 0.0, float(H - h))       # 6.3-6.4: clip to [0, H-h+1] (1-based h)
        if terminals.size:
            Q_h[terminals] = terminal_value * (H - h)          # absorbing: the terminal reward until H
        Q[h], G[h], trusted_all[h] = Q_h, gamma, trusted
        V[h] = Q_h.max(axis=1)                                  # 6.5: Ṽ_h = max_a Q̄_h (greedy π̂_h)
    return PVIResult(Q=Q, V=V, penalty=G, trusted=trusted_all, iota=iota)
