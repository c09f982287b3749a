"""A hospital-style log from the bundled ICU-Sepsis sample, for docs/guide.md, "A fresh run on a hospital-style log".

Writes, into the folder given (default ``hospital``):

* ``icu_logs/year=2020..2023/part-0.parquet``: the 20,000 sample stays with the
  hospital's own column names (``stay_id``, ``patient_id``, ``window``,
  ``cluster``, ``treatment_bin``, ``outcome``, ``next_cluster``,
  ``died_or_discharged``), string ids, one to three stays per patient
  (75% / 20% / 5%, seeded), rewards coded -1 on death, +1 on survival, 0
  otherwise (range [-1, 1]), and ``survived`` (the same outcome coded 1 / 0);
* ``spec.json`` (reward ``outcome`` in [-1, 1], patient-level unit, k = 2, and
  the public fact that a stay has one outcome: ``return_bound`` [-1, 1]) and
  ``spec01.json`` (reward ``survived`` in [0, 1], ``return_bound`` [0, 1]).

Run: ``python experiments/make_hospital_logs.py [FOLDER]``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import polars as pl

import privaudit

SEED = 2024


def make(folder: Path) -> None:
    df = pl.read_parquet(privaudit.sample_data().logs)
    rng = np.random.default_rng(SEED)
    eps = df["episode_id"].unique().sort().to_numpy()
    pat = np.repeat(np.arange(len(eps)), rng.choice([1, 2, 3], size=len(eps), p=[0.75, 0.2, 0.05]))[:len(eps)]
    ids = pl.DataFrame({"episode_id": eps, "patient_id": [f"P{p:06d}" for p in pat]})
    outcome = (pl.when(pl.col("next_state") == 714).then(1.0)
               .when(pl.col("next_state") == 713).then(-1.0).otherwise(0.0))
    df = df.join(ids, on="episode_id").select(
        pl.format("S{}", pl.col("episode_id")).alias("stay_id"), "patient_id", pl.col("step").alias("window"),
        pl.col("state").alias("cluster"), pl.col("action").alias("treatment_bin"), outcome.alias("outcome"),
        pl.col("next_state").alias("next_cluster"), pl.col("terminated").alias("died_or_discharged"),
        (pl.col("next_state") == 714).cast(pl.Float64).alias("survived"),
        (pl.col("episode_id") % 4).alias("_part"))
    for key, part in df.partition_by("_part", as_dict=True, include_key=False).items():
        d = folder / "icu_logs" / f"year={2020 + int(key[0])}"
        d.mkdir(parents=True, exist_ok=True)
        part.write_parquet(d / "part-0.parquet")
    spec = {"format_version": 1, "dataset_id": "icu-sepsis-hospital", "horizon": 20, "n_states": 716,
            "n_actions": 25, "terminal_states": [713, 714, 715], "reward_range": [-1.0, 1.0],
            "return_bound": [-1.0, 1.0],
            "privacy_unit": {"column": "patient_id", "max_episodes": 2},
            "columns": {"episode_id": "stay_id", "step": "window", "state": "cluster", "action": "treatment_bin",
                        "reward": "outcome", "next_state": "next_cluster", "terminated": "died_or_discharged"}}
    (folder / "spec.json").write_text(json.dumps(spec, indent=2) + "\n")
    spec["reward_range"], spec["return_bound"], spec["columns"]["reward"] = [0.0, 1.0], [0.0, 1.0], "survived"
    (folder / "spec01.json").write_text(json.dumps(spec, indent=2) + "\n")


if __name__ == "__main__":
    make(Path(sys.argv[1] if len(sys.argv) > 1 else "hospital"))
