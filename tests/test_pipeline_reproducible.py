"""A seeded pipeline run gives the same artifacts as before a change that should not alter them.

Performance work on the pipeline (issue 19: fewer passes over the logs,
narrower dtypes, counts computed once and shared, samplers built once) must
not change a single released number, policy entry or audit figure for a
fixed seed. These tests pin a digest of every shared artifact of two seeded
runs, computed with the code before that work:

* ``icu-pooled``: the first 3,000 stays of the bundled ICU-Sepsis sample,
  two stays per privacy unit (k = 2, so the keep-k rule and the per-cell
  cap's episode ranking run), counts pooled over h (DP-PBB, DP-APVI, the
  behaviour-value release, the release audit);
* ``random-per-step``: 3,000 episodes of a random tabular MDP (S = 6,
  A = 3, H = 5) with a public next-state reward, three episodes per unit
  (k = 3), counts per step h.

What is digested is the content, not the file bytes: the release's tables
as read back (``load_release``: independent of the Parquet layout), the
policies' probability tables, and every JSON artifact with its ``created``
timestamps removed. The private local log (timings, paths) and the PNG
figures are left out. A change meant to alter outputs (a new mechanism, a
new field) must update :data:`EXPECTED` and say why in its commit message.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import privaudit
from privaudit.learners.policy import load_policy
from privaudit.mdp.random_tabular import random_tabular_mdp, random_tabular_spec_doc
from privaudit.mdp.simulate import behaviour_policy, simulate, write_logs
from privaudit.pipeline import run_pipeline
from privaudit.stats.release import load_release

#: Component -> SHA-256 (first 16 hex digits) of each case's artifacts, from main at b44e736 (before issue 19's
#: pipeline work; h19b's in-place noise, landed just before, draws other values for the same seed than a9d87c8).
EXPECTED = {
    "icu-pooled": {
        "release.visits": "f7ccc8f94f8b1c8d",
        "release.rewards": "140bedbf9c3f6d56",
        "release.transitions": "8e1ba30345a8ffc3",
        "policy.dp-apvi": "ab2d4f1d3f6dc6bd",
        "policy.dp-pbb": "21856dc174dc32db",
        "audit/audit_report.json": "0bf951ab870bc01a",
        "policies/dp-apvi/policy.json": "4563d1b0e89d919a",
        "policies/dp-pbb/policy.json": "1f56f63f6924c9b8",
        "summary.json": "1b9b6c1ac92a1b48",
    },
    "random-per-step": {
        "release.visits": "6cc7d12742ad51d6",
        "release.rewards": "140bedbf9c3f6d56",
        "release.transitions": "4b4cc8ecff5de90b",
        "policy.dp-apvi": "b9eaa367f085e689",
        "policy.dp-pbb": "1ed07573e0ecd7ff",
        "audit/audit_report.json": "be7350f45a99a480",
        "policies/dp-apvi/policy.json": "39936c0b7f3efbfb",
        "policies/dp-pbb/policy.json": "51bb48bfdcfdab63",
        "summary.json": "6ad2e9b3cc97e49d",
    },
}


def _no_created(x):
    """The JSON document without its ``created`` timestamps (the only part that changes between runs)."""
    if isinstance(x, dict):
        return {k: _no_created(v) for k, v in x.items() if k != "created"}
    if isinstance(x, list):
        return [_no_created(v) for v in x]
    return x


def _h(*arrays_or_text) -> str:
    d = hashlib.sha256()
    for a in arrays_or_text:
        if isinstance(a, str):
            d.update(a.encode())
        else:
            a = np.ascontiguousarray(a)
            d.update(f"{a.dtype.str}{a.shape}".encode())
            d.update(a.tobytes())
    return d.hexdigest()[:16]


def digests(out: Path) -> dict[str, str]:
    """Component -> digest of one pipeline output folder (see the module docstring)."""
    rel = load_release(out / "release")
    slices = [t for _, t in rel.iter_transitions()]
    found = {
        "release.visits": _h(rel.visits),
        "release.rewards": _h("none") if rel.rewards is None else _h(rel.rewards),
        "release.transitions": _h(*slices),
    }
    for pdir in sorted((out / "policies").iterdir()):
        found[f"policy.{pdir.name}"] = _h(np.asarray(load_policy(pdir).table, dtype=np.float64))
    jsons = sorted(p for p in out.rglob("*.json") if p.relative_to(out).parts[0] != "private")
    for p in jsons:
        if p.name == "manifest.json" and p.parent.name == "release":
            continue  # the release's file format is its own (issue 19's dense layout); its guarantee is in summary
        found[str(p.relative_to(out))] = _h(json.dumps(_no_created(json.loads(p.read_text())), sort_keys=True))
    return found


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    d = tmp_path_factory.mktemp("repro")
    sample = privaudit.sample_data()
    icu = (pl.read_parquet(sample.logs).filter(pl.col("episode_id") < 3000)
           .with_columns((pl.col("episode_id") // 2).alias("unit_id")))
    icu.write_parquet(d / "icu.parquet")
    spec = json.loads(Path(sample.spec).read_text())
    spec["privacy_unit"]["max_episodes"] = 2
    (d / "icu.json").write_text(json.dumps(spec))

    mdp = random_tabular_mdp(6, 3, 5, instance_seed=4)
    df = simulate(mdp, behaviour_policy("mix:0.5", mdp), 3000, np.random.default_rng(5))
    df = df.with_columns((pl.col("next_state") == 0).cast(pl.Float64).alias("reward"),
                         (pl.col("episode_id") // 3).alias("unit_id"))
    write_logs(df, d / "rt.parquet")
    doc = dict(random_tabular_spec_doc(mdp, dataset_id="rt-repro"),
               public_reward={"kind": "next_state", "values": {"0": 1.0}},
               privacy_unit={"column": "unit_id", "max_episodes": 3})
    (d / "rt.json").write_text(json.dumps(doc))
    return {"icu-pooled": (d / "icu.parquet", d / "icu.json", True),
            "random-per-step": (d / "rt.parquet", d / "rt.json", False)}, d


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_seeded_pipeline_artifacts_unchanged(cases, case):
    paths, d = cases
    logs, spec, stationary = paths[case]
    out = d / f"out-{case}"
    run_pipeline(logs, spec, rho=1.0, out=out, seed=20261201, stationary=stationary, audit_trials=500,
                 progress=False)
    found = digests(out)
    assert found == EXPECTED[case], {k: (found.get(k), EXPECTED[case].get(k))
                                     for k in set(found) | set(EXPECTED[case])
                                     if found.get(k) != EXPECTED[case].get(k)}
