"""The capped empirical model of a policy's value on held-out logs (exact, PRIVATE statistics).

One stay per privacy unit, per-step counts, and a public coverage scale m
(docs/certificates.md, "Policy evaluation from logs"). The model pushes the
policy's state distribution forward through the logged transitions, but lets
at most n_h(s, a) / m of mass through each cell (h, s, a); the rest is
absorbed with value 0. With x = d'_h(s) pi_h(a|s) the mass arriving at a cell
and n = n_h(s, a) its logged transitions, each transition carries weight

    w = x / max(n, m x)          (w <= 1/m; n w = min(x, n/m)),

the next distribution is d'_{h+1}(s') = sum over transitions into s' of w
(terminal states absorb with value 0), and the model value is
V' = sum over steps and transitions of w r. The start is a cell of its own:
mass 1, n = number of units, so d'_0(s) = min(1, n/m) n_0(s) / n.

Every quantity is a function of the kept stays' (step, state, action,
next state, reward) rows; the loops run over the H steps only (each step
is vectorised over its transitions).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from privaudit.core.errors import UsageError
from privaudit.core.spec import DomainSpec
from privaudit.data.bounding import episode_id_text, episode_priority, unit_column_of

__all__ = ["HeldOutStays", "held_out_stays", "ModelValue", "capped_model_value", "policy_table_for",
           "lipschitz_bounds", "EvaluationFrame", "evaluation_frame", "frame_value_bounds"]


@dataclass(frozen=True)
class EvaluationFrame:
    """The non-negative reward units the evaluation works in (docs/certificates.md, "Reward ranges").

    With the declared range [r_min, r_max] and low = min(r_min, 0), width =
    max(r_max, 0) - low, a bounded reward r' = (r - r_min) / (r_max - r_min)
    becomes r'' = scale r' + shift = (r - low) / width in [0, 1], and a
    terminal state (declared reward 0) earns ``terminal`` = -low / width per
    remaining step. A declared value v over H steps is then width v'' + H low
    (:meth:`declared`), an increasing affine map. For r_min = 0 the frame is
    r'' = r / r_max (scale 1, shift 0, terminal 0). The learners plan in the same
    frame (``learners.tabular.pessimism.RewardFrame``; the import layers keep
    ``ope`` and ``learners`` apart, hence this copy of its three formulas).
    """

    scale: float
    shift: float
    terminal: float
    low: float
    width: float

    def declared(self, x: float, steps: int) -> float:
        """A value in r'' units over ``steps`` steps -> declared reward units."""
        return self.width * float(x) + steps * self.low


def evaluation_frame(spec: DomainSpec) -> EvaluationFrame:
    """The :class:`EvaluationFrame` of the spec's declared ``reward_range`` (public)."""
    lo, hi = (float(x) for x in spec.reward_range)
    low, width = min(lo, 0.0), max(hi, 0.0) - min(lo, 0.0)
    return EvaluationFrame(scale=(hi - lo) / width, shift=(lo - low) / width, terminal=-low / width, low=low,
                           width=width)


def frame_value_bounds(spec: DomainSpec) -> np.ndarray:
    """b''_h, h = 0..H: bounds of any value-to-go from step h in r'' units (shape (H + 1,)).

    A step earns scale r' + shift alive or ``terminal`` dead, and the scaled rewards of any suffix sum to at
    most ``spec.value_bounds()[h]`` (bounding clips the running scaled return), so
    b''_h = min(H - h, scale b'_h + (H - h) max(shift, terminal)); for r_min = 0, b'_h itself.
    """
    f = evaluation_frame(spec)
    left = np.arange(spec.horizon, -1, -1, dtype=float)
    return np.minimum(left, f.scale * spec.value_bounds() + left * max(f.shift, f.terminal))


@dataclass(frozen=True, repr=False)
class HeldOutStays:
    """One stay per privacy unit, as flat arrays in step order. PRIVATE.

    Attributes
    ----------
    start_states : ndarray of int64, shape (n,)
        s_0 of each unit's kept stay (n = number of units).
    step, state, action, next_state : ndarray of int64, shape (T,)
        The kept stays' transitions (T rows, every step h < H).
    reward : ndarray of float, shape (T,)
        The reward of each transition in the evaluation frame's r'' units
        (:func:`evaluation_frame`; the spec's public reward of the next state
        when it declares one, else the logged one), plus, on a transition
        into a terminal state at step h, the frame's terminal reward for each
        of the H - h - 1 remaining steps (0 when r_min >= 0).
    """

    start_states: np.ndarray
    step: np.ndarray
    state: np.ndarray
    action: np.ndarray
    next_state: np.ndarray
    reward: np.ndarray

    @property
    def n_units(self) -> int:
        return int(self.start_states.size)

    def __repr__(self) -> str:  # private: sizes only
        return f"HeldOutStays(units=?, rows=?)"


def held_out_stays(bounded: pl.LazyFrame | pl.DataFrame, spec: DomainSpec) -> HeldOutStays:
    """Keep one stay per privacy unit of bounded logs and return its rows as arrays.

    Parameters
    ----------
    bounded : polars frame
        Bounded logs (``data.prepare.PreparedLogs.bounded``): columns
        ``episode_id``, ``step``, ``state``, ``action``, ``next_state``,
        ``reward`` (scaled to [0, 1]) and ``unit_id`` (absent: each episode is
        its own unit).
    spec : DomainSpec
        Its public reward (``public_reward``), when declared, replaces the
        logged reward (scaled as bounding scales rewards).

    Returns
    -------
    HeldOutStays

    Notes
    -----
    The kept stay of a unit is the one with the smallest keep-k priority key
    (``data.bounding.episode_priority``, ties by the id's text): a function
    of the unit's own data, so replacing another unit never changes it. One
    stay per unit makes the units' stays independent (a patient's stays may
    be correlated in any way).
    """
    lf = bounded.lazy() if isinstance(bounded, pl.DataFrame) else bounded
    unit = unit_column_of(lf)
    c = pl.col
    ep = c("episode_id")
    if unit != "episode_id":  # several stays per unit: keep the one with the smallest priority key
        keep = (lf.select(unit, "episode_id").unique()
                .with_columns(episode_priority(ep).alias("_p"), episode_id_text(ep).alias("_t"))
                .sort(unit, "_p", "_t").group_by(unit, maintain_order=True).first().select("episode_id"))
        lf = lf.join(keep, on="episode_id", how="semi")
    rows = lf.select("episode_id", "step", "state", "action", "next_state", "reward").sort("step").collect()
    h = rows["step"].to_numpy().astype(np.int64)
    s2 = rows["next_state"].to_numpy().astype(np.int64)
    public = spec.public_reward_scaled()
    r = public[s2] if public is not None else rows["reward"].to_numpy().astype(np.float64)
    f = evaluation_frame(spec)
    r = f.scale * r + f.shift
    if f.terminal > 0 and spec.terminal_states:  # the dead earn `terminal` per remaining step in r'' units
        dead = np.isin(s2, np.asarray(spec.terminal_states, dtype=np.int64))
        r = r + dead * f.terminal * (spec.horizon - h - 1)
    return HeldOutStays(start_states=rows["state"].to_numpy().astype(np.int64)[h == 0], step=h,
                        state=rows["state"].to_numpy().astype(np.int64),
                        action=rows["action"].to_numpy().astype(np.int64), next_state=s2, reward=r)


def policy_table_for(pi: np.ndarray, spec: DomainSpec) -> np.ndarray:
    """pi as an (H, S, A) table of probabilities, checked against the spec.

    Parameters
    ----------
    pi : ndarray, shape (H, S, A) or (S, A)
        pi_h(a | s) or a stationary pi(a | s); rows sum to 1.

    Raises
    ------
    UsageError
        Wrong shape, negative or non-finite entries, or rows not summing to 1
        (tolerance 1e-6).
    """
    H, S, A = spec.horizon, spec.n_states, spec.n_actions
    pi = np.asarray(pi, dtype=np.float64)
    if pi.shape == (S, A):
        pi = np.broadcast_to(pi, (H, S, A))
    if pi.shape != (H, S, A):
        raise UsageError(f"the policy table must have shape (H, S, A) = {(H, S, A)} or (S, A) = {(S, A)}. "
                         f"Found {pi.shape}.")
    if not np.all(np.isfinite(pi)) or pi.min() < 0:
        raise UsageError("the policy table must hold finite probabilities >= 0.")
    bad = np.argwhere(np.abs(pi.sum(axis=2) - 1.0) > 1e-6)
    if bad.size:
        h, s = (int(v) for v in bad[0])
        raise UsageError(f"the policy table's row pi_h(. | s) must sum to 1: step h={h}, state s={s} sums to "
                         f"{pi[h, s].sum():.6g} ({len(bad)} such rows).")
    return pi


def lipschitz_bounds(spec: DomainSpec) -> np.ndarray:
    """l_h for h = 0..H: the most scaled reward one unit of model mass earns from step h on (public).

    Returns
    -------
    ndarray of float, shape (H + 1,)
        l_H = 0; with a public reward r(s') (scaled),
        l_h = min(H - h, max over s' of r(s') + [s' not terminal] l_{h+1});
        otherwise l_h = H - h (one scaled reward <= 1 per step). The model
        value from step h is l_h-Lipschitz in its start mass (L1) and any
        true or model target r + V_{h+1}(s') lies in [0, l_h]
        (docs/certificates.md, "Sensitivity").
    """
    H = spec.horizon
    public = spec.public_reward_scaled()
    out = np.zeros(H + 1)
    if public is None:
        out[:H] = np.arange(H, 0, -1, dtype=float)
        return out
    f = evaluation_frame(spec)
    public = f.scale * public + f.shift
    nonterminal = np.ones(spec.n_states, dtype=bool)
    nonterminal[list(spec.terminal_states)] = False
    for h in range(H - 1, -1, -1):
        after = np.where(nonterminal, out[h + 1], f.terminal * (H - h - 1))
        out[h] = min(H - h, float(np.max(public + after)))
    return out


@dataclass(frozen=True)
class ModelValue:
    """The capped model's statistics (exact, PRIVATE; scaled reward units).

    Attributes
    ----------
    value : float
        V' (absorbed mass earns 0), in [0, l_0].
    lost_mass : float
        L = mass absorbed by the caps (start cell included), in [0, 1].
    weight_squares : ndarray, shape (H + 1,)
        q_j = sum of w^2 over the start cell (j = 0) and over step j - 1's
        transitions (j = 1..H); each q_j <= 1/m.
    """

    value: float
    lost_mass: float
    weight_squares: np.ndarray


def capped_model_value(stays: HeldOutStays, pi: np.ndarray, spec: DomainSpec, coverage: float) -> ModelValue:
    """V' and the absorbed mass L of the capped model (module docstring), exactly.

    Parameters
    ----------
    stays : HeldOutStays
        One stay per unit (:func:`held_out_stays`).
    pi : ndarray, shape (H, S, A)
        pi_h(a | s) (:func:`policy_table_for`).
    spec : DomainSpec
        S, A, H, terminal states.
    coverage : float
        m > 0, public.

    Returns
    -------
    ModelValue

    Notes
    -----
    Per step h: x = d'_h(s) pi_h(a|s), w = x / max(n_h(s,a), m x) (0 where
    x = 0), value += sum of w r over the step's transitions, L += sum of
    x - n w, q_{h+1} = sum of w^2, d'_{h+1} = sum of w into each next state,
    terminal states set to 0. Cost O(T + H S A).
    """
    S, A, H = spec.n_states, spec.n_actions, spec.horizon
    m = float(coverage)
    n = stays.n_units
    y0 = min(1.0, n / m) if n else 0.0
    d = y0 * np.bincount(stays.start_states, minlength=S) / max(n, 1)
    lost = 1.0 - y0
    value = 0.0
    q = np.zeros(H + 1)
    q[0] = y0 * y0 / n if n else 0.0
    bounds = np.searchsorted(stays.step, np.arange(H + 1))
    terminal = list(spec.terminal_states)
    for h in range(H):
        sl = slice(bounds[h], bounds[h + 1])
        cell = stays.state[sl] * A + stays.action[sl]
        n_sa = np.bincount(cell, minlength=S * A).astype(np.float64)
        x = (d[:, None] * pi[h]).reshape(-1)
        M = np.maximum(n_sa, m * x)
        f = np.divide(x, M, out=np.zeros_like(x), where=M > 0)
        lost += float(np.sum(x - f * n_sa))
        q[h + 1] = float(np.dot(n_sa, f * f))
        w = f[cell]
        value += float(np.dot(w, stays.reward[sl]))
        d = np.bincount(stays.next_state[sl], weights=w, minlength=S)
        d[terminal] = 0.0
    return ModelValue(value=value, lost_mass=min(max(lost, 0.0), 1.0), weight_squares=q)
