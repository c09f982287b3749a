"""Session 10 (fresh user): the pipeline printed DP-PBB's certified value in the *certified* column with no level;
report.md said "with probability at least 1 - failure_prob" without the number, and summary.json held it nowhere.
Now summary.json has ``certified_confidence`` and stdout a line naming the number, what it is and its level."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
from click.testing import CliRunner

from privaudit.cli import main
from privaudit.mdp.random_tabular import random_tabular_mdp, random_tabular_spec_doc
from privaudit.mdp.simulate import behaviour_policy, simulate
from privaudit.pipeline.values import START_FAILURE_PROB


def test_a_certified_value_says_its_level(tmp_path):
    mdp = random_tabular_mdp(5, 3, 4, instance_seed=3)
    logs = simulate(mdp, behaviour_policy("mix:0.5", mdp), 600, np.random.default_rng(5))
    logs.with_columns(reward=(pl.col("next_state") == 2).cast(pl.Float64)).write_parquet(tmp_path / "logs.parquet")
    doc = dict(random_tabular_spec_doc(mdp, dataset_id="rt-level"),
               public_reward={"kind": "next_state", "values": {"2": 1.0}})
    (tmp_path / "spec.json").write_text(json.dumps(doc))
    res = CliRunner().invoke(main, ["pipeline", str(tmp_path / "logs.parquet"), "--spec", str(tmp_path / "spec.json"),
                                    "--rho", "2", "--out", str(tmp_path / "run"), "--audit-trials", "0"])
    assert res.exit_code == 0, res.output
    p = {q["name"]: q for q in json.loads((tmp_path / "run" / "summary.json").read_text())["policies"]}
    assert p["dp-pbb"]["certified_value"] is not None
    level = 1 - 0.05 - START_FAILURE_PROB  # DP-PBB's default failure_prob; the start distribution is released
    assert abs(p["dp-pbb"]["certified_confidence"] - level) < 1e-12
    assert p["dp-apvi"]["certified_confidence"] is None
    line = next(x for x in res.stdout.splitlines() if x.strip().startswith("certified") and "dp-pbb" in x)
    assert f"{p['dp-pbb']['certified_value']:.4f}" in line and "lower bound" in line and f"{100 * level:g}%" in line
