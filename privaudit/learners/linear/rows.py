"""Per-row features (spec ``features.map = "column-x-action"``): phi(s, a) = x ⊗ e_a.

The logs carry a ``features`` list column: x, the features of the row's
state. phi(row, a) = clip(x) ⊗ e_a with clip(x) = x / max(1, ||x||), so
||phi|| <= 1 whatever the data (per-vector, data-independent: a
``rescale`` by the largest norm would read the private logs, so it is refused).
d = m * A, with m = ``features.dim`` / A from the spec (never read off the
data; a row of another length is refused with its location).

V_{h+1}(s') needs the features of the next state. They are taken from the
row of the same episode at step h+1. V_{h+1} = 0 when h = H-1; when the
next state is terminal, V_{h+1} is the terminal states' value (0 for a
declared reward range starting at 0, see ``pessimism.RewardFrame``); V_{h+1} = 0
when the episode has no row at h+1 (truncated
before H, or cut by bounding): the value of an unknown state is taken as 0,
its smallest possible value. This is pessimistic (consistent with PEVI /
VAPVI's pessimism: it can only lower Q) and keeps every sensitivity valid,
since the statistics need only 0 <= V <= H. It is a bias for logs truncated
early; the docs say so.

Each row is its own "pair" (``StepData`` with n = 1): ``row_steps`` builds the
``RowStep`` of each step and ``providers.RowFeatures`` hands them to the one
backward pass of :mod:`core`, through the learners' ``fit`` like any provider.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from privaudit.core.errors import SpecError, UsageError
from privaudit.learners.linear.providers import RowStep
from privaudit.learners.tabular.pessimism import reward_frame
from privaudit.mdp.features import enforce_norm


def clip_features(X: np.ndarray) -> np.ndarray:
    """x / max(1, ||x||) per row (then a hair below 1 if rounding left it above), shape (n, m)."""
    return enforce_norm(X, "clip")[0]


def row_steps(df: pl.DataFrame, spec, m: int) -> tuple[RowStep, ...]:
    """Group bounded rows (with ``features``) by step and link each row to its episode's row at h+1.

    Raises
    ------
    UsageError
        A features list of length != m (row located by episode and step).
    """
    H = spec.horizon
    lens = df["features"].list.len()
    bad = df.filter(lens != m)
    if bad.height:
        raise UsageError(f"column `features` must hold {m} numbers per row (spec $.features.dim / A); "
                         f"episode {bad['episode_id'][0]!r}, step {bad['step'][0]} has {bad['features'].list.len()[0]}.")
    df = df.sort("episode_id", "step").with_row_index("_i")
    term = np.isin(df["next_state"].to_numpy(), np.asarray(spec.terminal_states, dtype=np.int64))
    nxt = df.select(pl.col("_i").shift(-1).over("episode_id").alias("n"),
                    pl.col("step").shift(-1).over("episode_id").alias("ns"))
    n_idx = nxt["n"].fill_null(-1).to_numpy().astype(np.int64)
    ok = (nxt["ns"].fill_null(-1).to_numpy() == df["step"].to_numpy() + 1) & ~term
    n_idx = np.where(ok, n_idx, np.where(term, -1, -2))  # -1: terminal (its value), -2: unknown (0)
    frame = reward_frame(spec.reward_range)  # plan for the declared reward (terminal states earn 0 in it)
    X = clip_features(np.asarray(df["features"].to_list(), dtype=np.float64).reshape(-1, m))
    h = df["step"].to_numpy()
    pos = np.empty(len(h), dtype=np.int64)  # position of each row inside its step
    steps = []
    for k in range(H):
        rows = np.flatnonzero(h == k)
        pos[rows] = np.arange(len(rows))
        steps.append(rows)
    out = []
    for k in range(H):
        rows = steps[k]
        nx = n_idx[rows]
        nx = np.where(nx >= 0, pos[np.maximum(nx, 0)], nx) if k < H - 1 else np.full(len(rows), -1)
        out.append(RowStep(X=X[rows], a=df["action"].to_numpy()[rows].astype(np.int64),
                           r=frame.scale * df["reward"].to_numpy()[rows].astype(np.float64) + frame.shift, nxt=nx,
                           end_value=frame.terminal * (H - k - 1)))
    return tuple(out)


def column_dims(spec) -> int:
    """m, the state-feature length: ``features.dim`` / A.

    Raises
    ------
    SpecError
        ``dim`` missing or not a multiple of A, or ``norm: rescale``.
    """
    f = spec.features
    if f.get("norm", "clip") != "clip":
        raise SpecError("spec $.features.norm must be 'clip' for column-x-action: a rescale constant would be "
                        "read off the private logs (per-vector clipping is data-independent).")
    if "dim" not in f or int(f["dim"]) % spec.n_actions:
        raise SpecError(f"spec $.features.dim is required for column-x-action and must be m * A (A = "
                        f"{spec.n_actions}, m = the length of the `features` lists). Found {f.get('dim')}.")
    return int(f["dim"]) // spec.n_actions
