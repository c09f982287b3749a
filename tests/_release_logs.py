"""Small random trajectory logs and slow reference statistics for the release tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl


def spec_doc(H=4, S=5, A=3, k=1, terminals=(4,), unit_column=None, reward_range=(0.0, 1.0),
             public_reward=None, dataset_id="tiny-release"):
    doc = {
        "format_version": 1, "dataset_id": dataset_id, "horizon": H, "n_states": S, "n_actions": A,
        "terminal_states": list(terminals), "reward_range": list(reward_range),
        "privacy_unit": {"column": unit_column, "max_episodes": k},
    }
    if public_reward is not None:
        doc["public_reward"] = {"kind": "next_state", "values": {str(s): v for s, v in public_reward.items()}}
    return doc


def write_spec(tmp_path: Path, name="spec.json", **kw) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(spec_doc(**kw)))
    return p


def random_log(rng: np.random.Generator, n_episodes: int, *, H: int, S: int, A: int,
               terminals=(), max_len: int | None = None, n_units: int | None = None,
               reward_range=(0.0, 1.0), reward_spill: float = 0.0,
               avoid_states=()) -> pl.DataFrame:
    """Episodes of random states/actions, a valid chain (next_state = next row's state).

    An episode stops on entering a terminal state or after ``max_len`` steps
    (default H; longer values make episodes that break the horizon).
    ``n_units`` groups episodes into units (unit_id column); ``reward_spill``
    widens the reward draw beyond the declared range (clipping tests).
    States in ``avoid_states`` (and terminals) never start an episode.
    """
    max_len = H if max_len is None else max_len
    start_ok = np.setdiff1d(np.arange(S), np.array(list(terminals) + list(avoid_states), dtype=int))
    rows = {c: [] for c in ("episode_id", "step", "state", "action", "reward", "next_state")}
    lo, hi = reward_range
    width = hi - lo
    for e in range(n_episodes):
        s = int(rng.choice(start_ok))
        length = int(rng.integers(1, max_len + 1))
        for h in range(length):
            a = int(rng.integers(A))
            s2 = int(rng.integers(S))
            while s2 in avoid_states:
                s2 = int(rng.integers(S))
            r = float(rng.uniform(lo - reward_spill * width, hi + reward_spill * width))
            for c, v in zip(rows, (e, h, s, a, r, s2)):
                rows[c].append(v)
            if s2 in terminals:
                break
            s = s2
    df = pl.DataFrame(rows, schema={"episode_id": pl.Int64, "step": pl.Int64, "state": pl.Int64,
                                    "action": pl.Int64, "reward": pl.Float64, "next_state": pl.Int64})
    if n_units is not None:
        units = rng.integers(n_units, size=n_episodes)
        df = df.with_columns(pl.Series("patient", units)[df["episode_id"]].alias("patient"))
    return df


def slow_counts(df: pl.DataFrame, H: int, S: int, A: int, terminals=(), stationary=False):
    """Reference visits, transitions, reward sums by a plain loop over rows (bounded logs)."""
    shape = (S, A) if stationary else (H, S, A)
    n = np.zeros(shape, dtype=np.int64)
    t = np.zeros(shape + (S,), dtype=np.int64)
    r = np.zeros(shape, dtype=np.float64)
    for row in df.iter_rows(named=True):
        h, s, a, s2 = row["step"], row["state"], row["action"], row["next_state"]
        if s in terminals:
            continue
        idx = (s, a) if stationary else (h, s, a)
        n[idx] += 1
        t[idx + (s2,)] += 1
        r[idx] += row["reward"]
    return n, t, r
