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

Each row is its own "pair" (``StepData`` with n = 1), and the backward pass
is the one of :mod:`core` through :func:`core.step_statistics` with the
same noise (``DPVAPVI.noise_scales`` + ``privacy.draw_step_noise``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from privaudit.errors import SpecError, UsageError
from privaudit.learners.linear import privacy as lp
from privaudit.learners.linear.core import floored_inverse, step_statistics
from privaudit.learners.linear.data import StepData
from privaudit.learners.linear.estimators import DPVAPVI, PEVI
from privaudit.learners.pessimism import reward_frame
from privaudit.mdp.features import enforce_norm


@dataclass(frozen=True, repr=False)
class RowStep:
    """Rows of one step h: features X (n, m), actions (n,), rewards in [0, 1] (n,), next row index (n,) or -1."""

    X: np.ndarray
    a: np.ndarray
    r: np.ndarray
    nxt: np.ndarray
    end_value: float = 0.0  # V_{h+1} where nxt = -1 (terminal next state or h = H-1); nxt = -2: unknown, 0

    def step_data(self) -> StepData:
        n = len(self.a)
        idx = np.arange(n)
        return StepData(s=idx, a=self.a, n=np.ones(n), r_sum=self.r, t_pair=idx, t_next=self.nxt, t_n=np.ones(n),
                        end_value=self.end_value)


def clip_features(X: np.ndarray) -> np.ndarray:
    """x / max(1, ||x||) per row (then a hair below 1 if rounding left it above), shape (n, m)."""

    return enforce_norm(X, "clip")[0]


def row_phi(X: np.ndarray, a: np.ndarray, A: int) -> np.ndarray:
    """phi = x ⊗ e_a for rows, shape (n, m * A) (block a holds x)."""
    n, m = X.shape
    P = np.zeros((n, A, m))
    P[np.arange(n), a] = X
    return P.reshape(n, A * m)


def q_rows(X: np.ndarray, w: np.ndarray, Linv: np.ndarray, A: int, penalty_scale: float, offset: float,
           cap: float) -> np.ndarray:
    """Q(x, a) = clip(phi^T w - scale ||phi||_{Lambda^-1} - offset, 0, cap) for rows x, shape (n, A)."""
    n, m = X.shape
    W = w.reshape(A, m)
    blocks = Linv.reshape(A, m, A, m)[np.arange(A), :, np.arange(A), :]  # (A, m, m) diagonal blocks
    lin = X @ W.T
    quad = np.einsum("nm,amk,nk->na", X, blocks, X)
    return np.clip(lin - penalty_scale * np.sqrt(np.maximum(quad, 0.0)) - offset, 0.0, cap)


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


def fit_rows(learner, steps: tuple, A: int, *, rng: np.random.Generator | None = None) -> dict:
    """The backward pass of seed 000 Alg. 2 over per-row features (PEVI, VAPVI or DP-VAPVI).

    Parameters
    ----------
    learner : PEVI, VAPVI or DPVAPVI
        Supplies lam, the penalty scale and (DP-VAPVI) the noise scales.
    steps : tuple of RowStep, length H
    A : int
    rng : numpy.random.Generator
        DP-VAPVI only: one child stream per step (``rng.spawn(H)``), as ``fit``.

    Returns
    -------
    dict
        ``w`` (H, d), ``Lambda_inv`` (H, d, d), ``offset`` (H,), ``penalty_scale``.
    """

    H = len(steps)
    m = steps[0].X.shape[1]
    d = m * A
    lam = learner.lam
    variance_aware = not isinstance(learner, PEVI)
    if isinstance(learner, PEVI):
        K = max(1, len(steps[0].a))  # episodes = rows at step 0
        scale = learner.beta if learner.beta is not None else learner.c * d * H * np.sqrt(np.log(2 * d * H * K / learner.xi))
    else:
        scale = learner.C * np.sqrt(d)
    noise = None
    if isinstance(learner, DPVAPVI):
        if rng is None:
            raise UsageError("DP-VAPVI needs an rng.")
        scales = learner.noise_scales(H, d)
        streams = rng.spawn(H)
        noise = lambda h: lp.draw_step_noise(streams[h], d, scales, shift=learner.shift)  # noqa: E731
        learner.scales_ = scales
    if getattr(learner, "d_scale", 0):
        raise UsageError("d_scale > 0 is not supported with per-row features; use d_scale = 0.")
    w_all, Li_all = np.zeros((H, d)), np.zeros((H, d, d))
    V_next = np.zeros(1)
    for h in range(H - 1, -1, -1):  # 0-based: the paper's h = H..1
        st = steps[h]
        P = row_phi(st.X, st.a, A)
        cap = float(H - h)
        stats = step_statistics(st.step_data(), P, V_next if len(V_next) else np.zeros(1), lam=lam, cap=cap,
                                variance_aware=variance_aware, noise=noise(h) if noise else None)
        Linv = floored_inverse(stats["weighted_gram"] + lam * np.eye(d), lam)
        w = Linv @ stats["r_plus_v"]
        V_next = q_rows(st.X, w, Linv, A, scale, 0.0, cap).max(-1) if len(st.a) else np.zeros(1)
        w_all[h], Li_all[h] = w, Linv
    return {"w": w_all, "Lambda_inv": Li_all, "offset": np.zeros(H), "penalty_scale": float(scale)}


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
