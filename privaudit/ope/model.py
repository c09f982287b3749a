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

Every quantity is a function of the kept stays' observed cells (h, s, a, s'):
their transition counts and reward sums (:class:`HeldOutStays`), which either
engine aggregates (polars: :func:`stay_tables`; Spark:
``privaudit.data.spark.stats.spark_stay_cells``, the same tables), so the
driver never holds the rows. The rewards of a cell are summed exactly as
integer limbs (``privaudit.data.exact_sums``: each scaled reward floored to
a multiple of 2^-52), so both engines give the same bits; the loops run over
the H steps only (each step is vectorised over its cells).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from privaudit.core.errors import UsageError
from privaudit.core.spec import DomainSpec
from privaudit.data.bounding import episode_id_text, episode_priority, unit_column_of
from privaudit.data.exact_sums import limbs_value, reward_limbs

__all__ = ["HeldOutStays", "held_out_stays", "stay_tables", "ModelValue", "capped_model_value", "policy_table_for",
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
    """One stay per privacy unit, aggregated into its observed cells (sorted by h, s, a, s'). PRIVATE."""

    #: Shape (S,), int64: n_0(s), kept stays starting in state s (their sum is the number of units n).
    start_counts: np.ndarray
    #: Shape (C,), int64: h of the observed cells (h, s, a, s') of the kept stays' transitions (every step h < H),
    #: sorted.
    step: np.ndarray
    #: Shape (C,), int64: s of those cells.
    state: np.ndarray
    #: Shape (C,), int64: a of those cells.
    action: np.ndarray
    #: Shape (C,), int64: s' of those cells.
    next_state: np.ndarray
    #: Shape (C,), int64: transitions in each cell.
    count: np.ndarray
    #: Shape (C,), int64: the summed high limbs (``privaudit.data.exact_sums``) of the logged scaled rewards of each
    #: cell's transitions.
    reward_hi: np.ndarray
    #: Shape (C,), int64: the summed low limbs of the same.
    reward_lo: np.ndarray

    @property
    def n_units(self) -> int:
        return int(self.start_counts.sum())

    def __repr__(self) -> str:  # private: sizes only
        return "HeldOutStays(units=?, cells=?)"

    @classmethod
    def from_tables(cls, cells: pl.DataFrame, starts: pl.DataFrame, n_states: int) -> "HeldOutStays":
        """From the tables of :func:`stay_tables` (or of its Spark twin)."""
        col = (lambda name: cells[name].to_numpy().astype(np.int64))
        start = np.zeros(int(n_states), dtype=np.int64)
        start[starts["state"].to_numpy().astype(np.int64)] = starts["n"].to_numpy().astype(np.int64)
        return cls(start_counts=start, step=col("step"), state=col("state"), action=col("action"),
                   next_state=col("next_state"), count=col("n"), reward_hi=col("r_hi"), reward_lo=col("r_lo"))


def stay_tables(bounded: pl.LazyFrame | pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """One stay per privacy unit of bounded logs, aggregated: (cells, starts) tables (polars).

    Parameters
    ----------
    bounded : polars frame
        Bounded logs (``data.prepare.PreparedLogs.bounded``): columns
        ``episode_id``, ``step``, ``state``, ``action``, ``next_state``,
        ``reward`` (scaled to [0, 1]) and ``unit_id`` (absent: each episode is
        its own unit).

    Returns
    -------
    cells : polars.DataFrame
        ``step, state, action, next_state, n, r_hi, r_lo`` (Int64), one row per
        observed cell of the kept stays, sorted by the four indices.
    starts : polars.DataFrame
        ``state, n`` (Int64), sorted by state.

    Notes
    -----
    The kept stay of a unit is the one with the smallest keep-k priority key
    (``data.bounding.episode_priority``, ties by the id's text): a function
    of the unit's own data, so replacing another unit never changes it. One
    stay per unit makes the units' stays independent (a patient's stays may
    be correlated in any way). The Spark twin is
    ``privaudit.data.spark.stats.spark_stay_cells``: the same tables.
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
    keys = ["step", "state", "action", "next_state"]
    hi, lo = reward_limbs(c("reward"))
    cells = (lf.group_by([c(k).cast(pl.Int64) for k in keys])
             .agg(pl.len().cast(pl.Int64).alias("n"), hi.sum(), lo.sum()).sort(keys))
    starts = (lf.filter(c("step") == 0).group_by(c("state").cast(pl.Int64))
              .agg(pl.len().cast(pl.Int64).alias("n")).sort("state"))
    cells, starts = pl.collect_all([cells, starts])
    return cells, starts


def held_out_stays(bounded, spec: DomainSpec) -> HeldOutStays:
    """Keep one stay per privacy unit of bounded logs and aggregate it into its cells.

    Parameters
    ----------
    bounded : polars frame or pyspark DataFrame
        Bounded logs (:func:`stay_tables`); a Spark frame is aggregated on the
        cluster (``privaudit.data.spark.stats.spark_stay_cells``, the same tables).
    spec : DomainSpec
        S, and k (the Spark engine keeps a unit's first stay only when k > 1).

    Returns
    -------
    HeldOutStays
    """
    if isinstance(bounded, (pl.LazyFrame, pl.DataFrame)):
        cells, starts = stay_tables(bounded)
    else:
        from privaudit.data.spark import session, stats  # optional dependency: pyspark only with a Spark frame

        with session.spark_errors("aggregating the evaluated stays"):
            cells, starts = stats.spark_stay_cells(bounded, max_episodes=int(spec.max_episodes_per_unit),
                                                    horizon=int(spec.H))
    return HeldOutStays.from_tables(cells, starts, spec.n_states)


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
    """The capped model's statistics (exact, PRIVATE; scaled reward units)."""

    #: V' (absorbed mass earns 0), in [0, l_0].
    value: float
    #: L = mass absorbed by the caps (start cell included), in [0, 1].
    lost_mass: float
    #: Shape (H + 1,): q_j = sum of w^2 over the start cell (j = 0) and over step j - 1's transitions
    #: (j = 1..H); each q_j <= 1/m.
    weight_squares: np.ndarray


def capped_model_value(stays: HeldOutStays, pi: np.ndarray, spec: DomainSpec, coverage: float) -> ModelValue:
    """V' and the absorbed mass L of the capped model (module docstring), exactly.

    Parameters
    ----------
    stays : HeldOutStays
        One stay per unit, aggregated (:func:`held_out_stays`).
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
    terminal states set to 0; each sum over transitions is taken over the
    step's cells (count times the cell's weight). Rewards are in the evaluation frame's r''
    units (:func:`evaluation_frame`): the cell's reward sum r' times scale, plus
    count times shift, plus, into a terminal state, count times the frame's
    terminal reward per remaining step. Cost O(C + H S A) for C
    observed cells.
    """
    S, A, H = spec.n_states, spec.n_actions, spec.horizon
    m = float(coverage)
    n = stays.n_units
    y0 = min(1.0, n / m) if n else 0.0
    d = y0 * stays.start_counts / max(n, 1)
    lost = 1.0 - y0
    value = 0.0
    q = np.zeros(H + 1)
    q[0] = y0 * y0 / n if n else 0.0
    bounds = np.searchsorted(stays.step, np.arange(H + 1))
    terminal = list(spec.terminal_states)
    public = spec.public_reward_scaled()
    count = stays.count.astype(np.float64)
    reward = count * public[stays.next_state] if public is not None else limbs_value(stays.reward_hi,
                                                                                     stays.reward_lo)
    f = evaluation_frame(spec)  # r'' = scale r' + shift; the dead earn `terminal` per remaining step
    reward = f.scale * reward + f.shift * count
    if f.terminal > 0 and terminal:
        dead = np.isin(stays.next_state, np.asarray(terminal, dtype=np.int64))
        reward = reward + count * dead * f.terminal * (H - stays.step - 1)
    for h in range(H):
        sl = slice(bounds[h], bounds[h + 1])
        cell = stays.state[sl] * A + stays.action[sl]
        n_sa = np.bincount(cell, weights=count[sl], minlength=S * A)
        x = (d[:, None] * pi[h]).reshape(-1)
        M = np.maximum(n_sa, m * x)
        f = np.divide(x, M, out=np.zeros_like(x), where=M > 0)
        lost += float(np.sum(x - f * n_sa))
        q[h + 1] = float(np.dot(n_sa, f * f))
        w = f[cell]
        value += float(np.dot(w, reward[sl]))
        d = np.bincount(stays.next_state[sl], weights=w * count[sl], minlength=S)
        d[terminal] = 0.0
    return ModelValue(value=value, lost_mass=min(max(lost, 0.0), 1.0), weight_squares=q)
