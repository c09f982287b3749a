"""DP-PBB on Spark: the same capped counts as polars from prepared logs, one step h at a time to the driver;
``train --algo dp-pbb --engine spark`` writes the polars policy; a Spark failure is one line, nothing written.

Uses the session-scoped local[2] SparkSession of tests/conftest.py; skipped (with the reason) where pyspark or
Java is absent, and failed instead in CI (PRIVAUDIT_REQUIRE_SPARK=1).
"""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from tests._spark import skip_without_spark

skip_without_spark()

from click.testing import CliRunner  # noqa: E402

from privaudit.cli import main  # noqa: E402
from privaudit.data.prepare import prepare_logs  # noqa: E402
from privaudit.data.spark import counts as spark_counts  # noqa: E402
from privaudit.data.spark import prepare as spark_prepare  # noqa: E402
from privaudit.learners.tabular.pbb_counts import capped_counts_from_logs  # noqa: E402
from privaudit.privacy import ledger as ledger_mod  # noqa: E402
from tests._spark import spark_pbb_logs  # noqa: E402

pytestmark = pytest.mark.spark


def _assert_same_counts(a, b):
    assert (a.horizon, a.max_episodes, a.max_per_cell, a.unit_column, a.stationary) == \
        (b.horizon, b.max_episodes, b.max_per_cell, b.unit_column, b.stationary)
    assert len(a.transitions) == len(b.transitions)
    for x, y in zip(a.transitions, b.transitions):
        assert x.shape == y.shape and (x != y).nnz == 0
    np.testing.assert_array_equal(a.starts, b.starts)


# The first case runs by default; the others in CI's slow run. Together: integer, negative and non-ASCII string
# ids, k = 1 and k > 1, one file and a folder of parts, per step and pooled, caps c = 1, 2, 3, a return bound.
@pytest.mark.parametrize("ids,k,parts,stationary,c,return_bound", [
    ("int", 2, 1, False, 1, None),
    pytest.param("string", 3, 3, True, 2, (0.0, 1.5), marks=pytest.mark.slow),
    pytest.param("negative", 1, 2, False, 3, None, marks=pytest.mark.slow),
    pytest.param("string", 2, 1, True, 1, None, marks=pytest.mark.slow)])
def test_spark_capped_counts_identical_to_polars(spark, tmp_path, ids, k, parts, stationary, c, return_bound):
    path, _, spec = spark_pbb_logs(tmp_path, ids=ids, k=k, n_units=40, parts=parts, return_bound=return_bound)
    polars_logs = prepare_logs(path, spec)
    spark_logs = spark_prepare.prepare_spark_logs(str(path), spec, spark=spark)
    try:
        assert spark_logs.bounding == polars_logs.bounding
        assert polars_logs.bounding.episodes_dropped > 0 or k == 1
        exp = capped_counts_from_logs(polars_logs, spec, stationary=stationary, max_per_cell=c)
        got = capped_counts_from_logs(spark_logs, spec, stationary=stationary, max_per_cell=c)
    finally:
        spark_logs.close()
    _assert_same_counts(got, exp)
    if c == 1 and k > 1:  # the cap bites (a unit's k episodes meet in some cell)
        uncapped = capped_counts_from_logs(polars_logs, spec, stationary=stationary, max_per_cell=None)
        assert sum(t.sum() for t in exp.transitions) < sum(t.sum() for t in uncapped.transitions)


def test_per_step_cells_reach_the_driver_one_step_at_a_time(spark, tmp_path, monkeypatch):
    """Only per-cell aggregates come back, through Arrow: the domain bounds (one row), then step h's cells for each
    h in turn (never more than one step's), and the start counts (at most S rows)."""
    path, _, spec = spark_pbb_logs(tmp_path, ids="int", k=2, n_units=40)
    collected = []
    for module in (spark_counts, spark_prepare):
        real = module.to_polars
        monkeypatch.setattr(module, "to_polars", lambda df, real=real: collected.append(real(df)) or collected[-1])
    prepared = spark_prepare.prepare_spark_logs(str(path), spec, spark=spark)
    try:
        capped_counts_from_logs(prepared, spec, stationary=False, max_per_cell=1)
    finally:
        prepared.close()
    per_h = spec.S * spec.A * spec.S
    slices = [t for t in collected if t.columns == ["i", "n"]]
    assert len(slices) == spec.H
    for h, t in enumerate(slices):
        assert t.height > 0 and (t["i"] // per_h == h).all()
    starts = [t for t in collected if t.columns == ["state", "n"]]
    assert len(starts) == 1 and starts[0].height <= spec.S
    others = [t for t in collected if t.columns not in (["i", "n"], ["state", "n"])]
    assert len(others) == 1 and others[0].height == 1  # the domain check's min/max row


def _train_args(tmp_path, path, doc, out, *extra):
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(doc))
    return ["train", str(path), "--spec", str(spec_file), "--algo", "dp-pbb", "--rho", "2", "--seed", "3",
            "--per-step", "--max-per-cell", "2", "--accept-repairs", "--out", str(out), *extra]


@pytest.mark.slow  # the default suite runs train's Spark path through the failure and fatal-rule tests below
def test_cli_train_dp_pbb_with_spark_writes_the_polars_policy(spark, tmp_path):
    path, doc, _ = spark_pbb_logs(tmp_path, ids="string", k=2, n_units=40, parts=2)
    outs = {}
    for engine in ("polars", "spark"):
        outs[engine] = tmp_path / engine
        res = CliRunner().invoke(main, _train_args(tmp_path, path, doc, outs[engine], "--engine", engine))
        assert res.exit_code == 0, res.output
        assert "certificate:" in res.output
    p, s = outs["polars"], outs["spark"]
    assert (p / "policy.parquet").read_bytes() == (s / "policy.parquet").read_bytes()
    docs = [json.loads((o / "policy.json").read_text()) for o in (p, s)]
    for d in docs:
        d.pop("created")  # the only field that differs (a timestamp)
    assert docs[0] == docs[1]
    assert pl.read_parquet(p / "policy.parquet").height > 0


def test_cli_train_spark_refusals_before_spark_reads(spark, tmp_path, monkeypatch):
    path, doc, spec = spark_pbb_logs(tmp_path, ids="int", k=2, n_units=30)
    reads = []
    monkeypatch.setattr(spark_prepare, "read_logs", lambda *a, **kw: reads.append(a))
    res = CliRunner().invoke(main, _train_args(tmp_path, path, doc, tmp_path / "o", "--engine", "spark")
                             [:-2] + ["--algo", "apvi", "--engine", "spark"])
    assert res.exit_code == 2 and "--engine spark reads LOGS for --algo" in res.output, res.output
    led = tmp_path / "budget.jsonl"
    ledger_mod.init_ledger(led, spec.dataset_id, 1)
    res = CliRunner().invoke(main, _train_args(tmp_path, path, doc, tmp_path / "o", "--engine", "spark",
                                               "--ledger", str(led)))
    assert res.exit_code == 3 and "exceed" in res.output, res.output
    res = CliRunner().invoke(main, _train_args(tmp_path, path, doc, tmp_path / "o", "--master", "local[1]"))
    assert res.exit_code == 2 and "--master needs --engine spark" in res.output
    assert reads == [] and not (tmp_path / "o").exists()


def test_cli_train_spark_failure_is_one_line_nothing_written_or_charged(spark, tmp_path, monkeypatch):
    from py4j.protocol import Py4JJavaError

    path, doc, spec = spark_pbb_logs(tmp_path, ids="int", k=2, n_units=30)
    led = tmp_path / "budget.jsonl"
    ledger_mod.init_ledger(led, spec.dataset_id, 10)
    before = led.read_bytes()
    oom = Py4JJavaError("An error occurred while calling o99.collectToPython.\n",
                        spark._jvm.java.lang.OutOfMemoryError("Java heap space"))

    def boom(*a, **kw):
        raise oom

    monkeypatch.setattr(spark_prepare, "exact_counts", boom)  # DP-PBB's capped cells
    out = tmp_path / "o"
    res = CliRunner().invoke(main, _train_args(tmp_path, path, doc, out, "--engine", "spark", "--ledger", str(led)))
    assert res.exit_code == 1, res.output
    errors = [line for line in res.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "ran out of memory" in errors[0] and "no budget was charged" in errors[0]
    assert "Traceback" not in res.output
    assert not out.exists() and not list(tmp_path.glob(".o*")) and led.read_bytes() == before


def test_cli_train_dp_pbb_refuses_a_fatal_rule_with_both_engines(spark, tmp_path):
    """Logs whose rewards contradict the public r(s') (one row): both engines refuse them (reward_not_public, exit 1)
    with nothing written or charged. Every fatal rule's count on Spark is polars' (test_spark_engine.py); this is
    the rule DP-PBB's input adds."""
    path, doc, spec = spark_pbb_logs(tmp_path, ids="int", k=2, n_units=30)
    bad = pl.read_parquet(path).with_columns(
        reward=pl.when(pl.int_range(pl.len()) == 3).then(pl.col("reward") + 0.125).otherwise(pl.col("reward")))
    bad.write_parquet(path)
    led = tmp_path / "budget.jsonl"
    ledger_mod.init_ledger(led, spec.dataset_id, 10)
    before = led.read_bytes()
    for engine in ("polars", "spark"):
        out = tmp_path / engine
        res = CliRunner().invoke(main, _train_args(tmp_path, path, doc, out, "--engine", engine, "--ledger", str(led)))
        assert res.exit_code == 1 and "reward_not_public" in res.output, res.output
        assert "Traceback" not in res.output and not out.exists() and led.read_bytes() == before
