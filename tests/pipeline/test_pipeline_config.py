"""``PipelineConfig``: one checked record of a run's choices; its public part in summary.json (issue 27)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from privaudit.core.errors import UsageError
from privaudit.pipeline import PipelineConfig, run_pipeline
from privaudit.pipeline.config import SAMPLE_LOGS, SAMPLE_MDP, SAMPLE_SPEC


@pytest.mark.parametrize("kw, message", [
    ({"spec": "s.json"}, "`spec` needs LOGS"),
    ({"logs": "l.parquet"}, "LOGS needs `spec`"),
    ({"logs": "l.parquet", "spec": "s.json", "engine": "dask"}, "`engine` must be 'polars' or 'spark'"),
    ({"spark": "local[2]"}, "needs `engine` 'spark'"),
    ({"stationary": "yes"}, "`stationary` must be True, False or None"),
    ({"audit_trials": 5}, "`audit_trials` must be 0"),
    ({"audit_trials": True}, "`audit_trials` must be 0"),
    ({"seed": -1}, "`seed` must be a non-negative integer"),
    ({"seed": 1.5}, "`seed` must be a non-negative integer"),
])
def test_a_bad_choice_is_refused_when_the_config_is_built(kw, message, tmp_path):
    with pytest.raises(UsageError, match=message):
        PipelineConfig(out=tmp_path / "o", **kw)
    assert not (tmp_path / "o").exists()


def test_out_is_required_and_unknown_fields_are_refused(tmp_path):
    with pytest.raises(TypeError, match="out"):
        PipelineConfig(rho=1.0)
    with pytest.raises(TypeError, match="rhoo"):
        PipelineConfig(out=tmp_path, rhoo=1.0)
    with pytest.raises(TypeError):  # run_pipeline passes its options through: the same refusals
        run_pipeline(rho=1.0, out=tmp_path / "o", rhoo=1.0)


def test_the_config_is_frozen(tmp_path):
    c = PipelineConfig(out=tmp_path, rho=1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.rho = 2.0
    assert dataclasses.replace(c, rho=2.0).rho == 2.0


def test_no_logs_means_the_bundled_sample_and_its_mdp(tmp_path):
    c = PipelineConfig(out=tmp_path, rho=1.0)
    assert c.bundled and c.inputs() == (SAMPLE_LOGS, SAMPLE_SPEC, SAMPLE_MDP)
    assert PipelineConfig(out=tmp_path, rho=1.0, mdp="x.npz").inputs()[2] == "x.npz"
    logs, spec, mdp = PipelineConfig(logs="a.parquet", spec="s.json", out=tmp_path).inputs()
    assert (logs, spec, mdp) == (Path("a.parquet"), "s.json", None)
    # Spark may read a URL: it is passed on as given, not made a local path
    url = PipelineConfig(logs="s3a://b/logs", spec="s.json", out=tmp_path, engine="spark", value_share=0).inputs()[0]
    assert url == "s3a://b/logs"


def test_the_public_part_holds_no_path_no_seed_and_no_spark_target(tmp_path):
    c = PipelineConfig(logs=tmp_path / "secret-ward" / "l.parquet", spec=tmp_path / "s.json", out=tmp_path / "o",
                       rho=1.0, mdp=tmp_path / "m.npz", seed=918273645, instance_seed=4242, ledger=tmp_path / "led",
                       engine="spark", spark="spark://ward-7:7077", value_share=0, audit_trials=0)
    pub = c.public()
    text = json.dumps(pub)
    for secret in ("secret-ward", "918273645", "4242", "ward-7", str(tmp_path)):
        assert secret not in text, secret
    assert pub == {"bundled_sample": False, "mdp": "file", "stationary": None, "audit_trials": 0,
                   "linear_share": None, "value_share": 0.0, "engine": "spark", "ledger": True, "overwrite": False,
                   "hold_out": False}
    assert PipelineConfig(out=tmp_path, rho=1, mdp="icu-sepsis").public()["mdp"] == "icu-sepsis"
