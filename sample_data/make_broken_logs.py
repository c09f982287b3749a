"""Make ``sample_data/broken_logs.parquet`` and ``sample_data/broken_spec.json``.

A small, deliberately broken trajectory log that shows what
``privaudit validate`` reports. It uses a hospital's own column names
(``stay_id``, ``hour``, ...) mapped through the spec's ``columns``. Twelve
valid episodes are drawn with a fixed seed (deterministic output), then
seven rules are broken on purpose, one place each:

===========================  ==================================================
rule                         what was changed
===========================  ==================================================
null_value                   stay 103, hour 1: reward set to null
action_out_of_range          stay 104, hour 0: action 7 (A = 4)
reward_out_of_range          stay 105, hour 2: reward 2.5 (range [0, 1])
next_state_mismatch          stay 106, hour 0: next_state differs from hour 1's state
step_gap                     stay 107: the row of hour 1 removed        
flag_not_last                stay 108, hour 0: truncated set on the first row
too_many_episodes            stays 110, 111 moved to patient P05 (3 stays, k = 2)
===========================  ==================================================

Run: ``python sample_data/make_broken_logs.py`` (writes next to this file).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import polars as pl

HERE = Path(__file__).resolve().parent
H, S, A, TERMINAL = 5, 6, 4, 5

SPEC = {
    "format_version": 1,
    "dataset_id": "broken-sample",
    "description": "A deliberately broken log for the validation docs (sample_data/make_broken_logs.py).",
    "horizon": H,
    "n_states": S,
    "n_actions": A,
    "terminal_states": [TERMINAL],
    "reward_range": [0.0, 1.0],
    "privacy_unit": {"column": "patient_id", "max_episodes": 2},
    "columns": {"episode_id": "stay_id", "step": "hour", "state": "state", "action": "treatment",
                "reward": "reward", "next_state": "next_state", "terminated": "discharged_or_died",
                "truncated": "cut_at_horizon", "unit_id": "patient_id"},
}


def valid_logs(rng: np.random.Generator, n_episodes: int = 12) -> pl.DataFrame:
    """Valid episodes (standard names) of length 3..H; state TERMINAL ends an episode.

    Stays 101..112; patients P01.. with at most two stays each.
    """
    L = rng.integers(3, H + 1, size=n_episodes)
    n = int(L.sum())
    ep = np.repeat(np.arange(n_episodes), L)
    step = np.arange(n) - np.repeat(np.cumsum(L) - L, L)
    chain = rng.integers(0, TERMINAL, size=n + n_episodes)      # non-terminal states
    idx = np.arange(n) + ep
    last = step == np.repeat(L - 1, L)
    dies = np.repeat(rng.random(n_episodes) < 0.4, L) & last
    next_state = np.where(dies, TERMINAL, chain[idx + 1])
    # two stays each for P01..P04, then one each
    patient = np.array([f"P{i // 2 + 1:02d}" if i < 8 else f"P{i - 3:02d}" for i in range(n_episodes)])
    return pl.DataFrame({
        "episode_id": 101 + ep, "step": step, "state": chain[idx], "action": rng.integers(0, A, n),
        "reward": np.where(dies, 0.0, np.round(rng.random(n), 2)), "next_state": next_state,
        "terminated": dies, "truncated": last & ~dies & (step == H - 1),
        "unit_id": patient[ep],
    })


def break_rules(df: pl.DataFrame) -> pl.DataFrame:
    """Apply the breaks listed in the module docstring (standard names)."""
    c = pl.col
    at = lambda ep, h: (c("episode_id") == ep) & (c("step") == h)  # noqa: E731
    return df.filter(~at(107, 1)).with_columns(
        reward=pl.when(at(103, 1)).then(None).when(at(105, 2)).then(2.5).otherwise(c("reward")),
        action=pl.when(at(104, 0)).then(7).otherwise(c("action")),
        next_state=pl.when(at(106, 0)).then((c("next_state") + 1) % TERMINAL).otherwise(c("next_state")),
        truncated=pl.when(at(108, 0)).then(True).otherwise(c("truncated")),
        unit_id=pl.when(c("episode_id").is_in([110, 111])).then(pl.lit("P05")).otherwise(c("unit_id")),
    )


def make_broken_logs(out_dir: Path = HERE) -> tuple[Path, Path]:
    """Write ``broken_logs.parquet`` and ``broken_spec.json`` into ``out_dir``."""
    from privaudit.core.atomic import atomic_path, atomic_write_text
    from privaudit.core.spec import DomainSpec

    DomainSpec.from_dict(SPEC)  # the spec itself is valid
    rng = np.random.default_rng(20260101)
    df = break_rules(valid_logs(rng))
    df = df.rename({std: SPEC["columns"][std] for std in df.columns})
    logs, spec = Path(out_dir) / "broken_logs.parquet", Path(out_dir) / "broken_spec.json"
    with atomic_path(logs) as tmp:
        df.write_parquet(tmp)
    atomic_write_text(spec, json.dumps(SPEC, indent=2) + "\n")
    return logs, spec


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else HERE
    for p in make_broken_logs(out):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
