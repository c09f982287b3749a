"""Shared builders for the audit tests: a tiny spec and tiny logs."""

from __future__ import annotations

import numpy as np
import polars as pl

from privaudit.core.spec import DomainSpec

H, S, A = 3, 5, 2


def tiny_spec(k: int = 1) -> DomainSpec:
    """H=3, S=5, A=2, no terminal state, rewards in [0, 1], unit column unit_id."""
    return DomainSpec.from_dict({
        "format_version": 1, "dataset_id": "audit-tiny", "horizon": H, "n_states": S, "n_actions": A,
        "terminal_states": [], "reward_range": [0.0, 1.0],
        "privacy_unit": {"column": "unit_id", "max_episodes": k},
    })


def tiny_logs(n_episodes: int = 40, seed: int = 0) -> pl.DataFrame:
    """n episodes of H steps over states 0..S-2 (state S-1 never visited), every
    (h, s, a) with s < S-1 visited, real-valued rewards; one episode per unit."""
    rng = np.random.default_rng(seed)
    n = n_episodes
    states = rng.integers(0, S - 1, size=(n, H))
    actions = rng.integers(0, A, size=(n, H))
    # make every (h, s<S-1, a) cell visited at least once
    cells = np.array([(s, a) for s in range(S - 1) for a in range(A)])
    for h in range(H):
        states[: len(cells), h], actions[: len(cells), h] = cells[:, 0], cells[:, 1]
    nxt = np.concatenate([states[:, 1:], rng.integers(0, S - 1, size=(n, 1))], axis=1)
    return pl.DataFrame({
        "episode_id": np.repeat(np.arange(n), H),
        "step": np.tile(np.arange(H), n).astype(np.int32),
        "state": states.ravel().astype(np.int32), "action": actions.ravel().astype(np.int32),
        "reward": np.round(rng.uniform(0, 1, n * H), 3), "next_state": nxt.ravel().astype(np.int32),
        "unit_id": np.repeat(np.arange(n), H),
    })
