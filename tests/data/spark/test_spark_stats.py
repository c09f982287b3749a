"""The clinicians' value, the evaluated stays' cells, the held-out split and ``evaluate --logs`` on Spark equal
polars', bit for bit.

One session-scoped ``local[2]`` SparkSession (tests/_spark.py), tiny random logs with float rewards (so a float
sum in another order would differ in its last bits). Skipped (with the reason) only where pyspark or Java is absent.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import polars as pl
import pytest
import xxhash

from tests._spark import skip_without_spark

skip_without_spark()

from click.testing import CliRunner  # noqa: E402

from privaudit.cli import main  # noqa: E402
from privaudit.core.errors import EngineError  # noqa: E402
from privaudit.core.spec import DomainSpec  # noqa: E402
from privaudit.data.prepare import prepare_logs  # noqa: E402
from privaudit.data.spark import prepare as spark_prepare  # noqa: E402
from privaudit.data.spark.prepare import prepare_spark_logs  # noqa: E402
from privaudit.data.spark.stats import seed_preimage  # noqa: E402
from privaudit.ope.evaluate import evaluate_policy_on_logs  # noqa: E402
from privaudit.ope.model import held_out_stays  # noqa: E402
from privaudit.ope.split import HELD_OUT, SPLIT_HASH_SEED, in_part, part_of  # noqa: E402
from privaudit.privacy import ledger as ledger_mod  # noqa: E402
from privaudit.privacy.budget import resolve_budget  # noqa: E402
from privaudit.release.behaviour_value import BehaviourValueRelease  # noqa: E402
from tests._release_logs import spec_doc  # noqa: E402
from tests._spark import spark_test_logs as _logs  # noqa: E402

pytestmark = pytest.mark.spark


def _both(path, spec, spark):
    """The bounded logs of each engine: (polars LazyFrame, Spark DataFrame)."""
    return prepare_logs(path, spec).bounded, prepare_spark_logs(str(path), spec, spark=spark).bounded


def _return_bound_spec(k: int) -> DomainSpec:
    """The random logs' spec with return_bound [0, 1.5]: bounding clips the running return of some episodes."""
    return DomainSpec.from_dict({**spec_doc(H=4, S=5, A=3, k=k, terminals=(4,), unit_column="patient"),
                                 "return_bound": [0.0, 1.5]})


def test_the_seed_preimage_makes_sparks_hash_xxh64_with_any_seed():
    """Oracle: the xxhash package. XXH64(8 bytes of v, seed 42) is the wanted seed (Spark chains column hashes)."""
    for seed in (SPLIT_HASH_SEED, 0, 1, 2 ** 64 - 1, 12345):
        v = seed_preimage(seed)
        assert -2 ** 63 <= v < 2 ** 63
        assert xxhash.xxh64_intdigest(struct.pack("<q", v), seed=42) == seed


def test_the_held_out_split_is_the_same_on_spark_for_integer_string_and_non_ascii_ids(spark):
    ids = {"int": pl.Series("unit_id", [0, 1, -7, 2 ** 40, 123456789] + list(range(10, 400)), dtype=pl.Int64),
           "str": pl.Series("unit_id", ["a", "", "patient-17", "ÉpisodE-€-ß", "日本語", "x" * 200]
                            + [f"p{i}" for i in range(300)])}
    for kind, s in ids.items():
        df = pl.DataFrame([s, pl.Series("episode_id", range(s.len()))])
        sdf = spark.createDataFrame(df.to_arrow())
        for f in (0.3, 0.5):
            for part in (1 - HELD_OUT, HELD_OUT):
                exp = set(df.filter(in_part("unit_id", part, f))["unit_id"].to_list())
                got = {r[0] for r in part_of(sdf, part, f).select("unit_id").collect()}
                assert got == exp, (kind, f, part)
                assert 0 < len(exp) < s.len()


# k = 1 and k > 1, integer (incl. negative) and non-ASCII string ids, a folder of parts, a return bound. The first
# case runs by default; the others (slow marker) in CI's second run (`python -m pytest -m slow`).
@pytest.mark.parametrize("ids,k,parts,bound", [
    ("string", 2, 3, False),
    pytest.param("int", 1, 1, False, marks=pytest.mark.slow),
    pytest.param("negative", 3, 1, True, marks=pytest.mark.slow),
    pytest.param("string", 1, 2, True, marks=pytest.mark.slow)])
def test_value_statistics_and_stay_cells_are_identical_on_spark(spark, tmp_path, ids, k, parts, bound):
    path, spec = _logs(tmp_path, ids=ids, k=k, n_units=40, parts=parts)
    if bound:
        spec = _return_bound_spec(k)
    lf, sdf = _both(path, spec, spark)
    plan = BehaviourValueRelease.plan(spec, resolve_budget(rho=0.5))
    exp, got = plan.exact_statistics(lf), plan.exact_statistics(sdf)
    assert set(got) == set(exp) == set(plan.families)
    for f in plan.families:
        np.testing.assert_array_equal(np.asarray(got[f]), np.asarray(exp[f]), err_msg=f)
    assert exp["episode_count"] > 30 and exp["return_squares"] > 0  # the logs hold stays and returns
    a, b = held_out_stays(lf, spec), held_out_stays(sdf, spec)
    for name in ("start_counts", "step", "state", "action", "next_state", "count", "reward_hi", "reward_lo"):
        np.testing.assert_array_equal(getattr(b, name), getattr(a, name), err_msg=name)
    assert 30 < a.n_units <= 40 and a.count.sum() > a.n_units
    # and the noisy statistics with one seed: the same floats
    sa = plan.apply(lf, rng=np.random.default_rng(3))
    sb = plan.apply(sdf, rng=np.random.default_rng(3))
    assert (sa.episodes, sa.return_sum, sa.return_squares) == (sb.episodes, sb.return_sum, sb.return_squares)
    assert np.array_equal(sa.start_states, sb.start_states)


@pytest.mark.slow  # 8-13 s; the default suite keeps the CLI evaluate --engine spark byte-for-byte test
def test_evaluation_from_logs_is_identical_on_spark_whole_and_held_out_part(spark, tmp_path):
    """evaluate_policy_on_logs, same seed: the same result dict on the whole logs and on the held-out part."""
    path, spec = _logs(tmp_path, ids="string", k=2, n_units=40, parts=2)
    pi = np.random.default_rng(4).dirichlet(np.ones(spec.A), size=(spec.H, spec.S))
    budget = resolve_budget(rho=1.0)
    kw = dict(budget=budget, coverage=5.0, seed=11)
    exp = evaluate_policy_on_logs(str(path), spec, pi, **kw)
    got = evaluate_policy_on_logs(str(path), spec, pi, engine="spark", spark=spark, **kw)
    assert json.dumps(got, sort_keys=True) == json.dumps(exp, sort_keys=True)
    lf, sdf = _both(path, spec, spark)
    parts = [(part_of(lf, HELD_OUT, 0.4), part_of(sdf, HELD_OUT, 0.4))]
    for a, b in parts:
        sa, sb = held_out_stays(a, spec), held_out_stays(b, spec)
        assert 0 < sa.n_units < 40 and np.array_equal(sa.count, sb.count)
        assert np.array_equal(sa.reward_hi, sb.reward_hi) and np.array_equal(sa.reward_lo, sb.reward_lo)


def _cli(tmp_path, path, *extra):
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec_doc(H=4, S=5, A=3, k=2, terminals=(4,), unit_column="patient")))
    pol = tmp_path / "pi.npy"
    np.save(pol, np.full((4, 5, 3), 1 / 3))
    return ["evaluate", str(pol), "--logs", str(path), "--spec", str(spec_file), "--rho", "1", "--seed", "7",
            "--coverage", "5", *extra]


def test_cli_evaluate_with_spark_prints_the_polars_output_byte_for_byte(spark, tmp_path):
    path, _ = _logs(tmp_path, ids="int", k=2, n_units=30)
    outs = {}
    for engine in ("polars", "spark"):
        res = CliRunner().invoke(main, _cli(tmp_path, path, "--json", "--engine", engine))
        assert res.exit_code == 0, res.output
        outs[engine] = res.stdout
    assert outs["spark"] == outs["polars"] and json.loads(outs["polars"])["rng"] == "seeded-insecure"


def test_cli_evaluate_with_spark_checks_the_ledger_before_spark_reads(spark, tmp_path, monkeypatch):
    path, spec = _logs(tmp_path, ids="int", k=2, n_units=30)
    led = tmp_path / "budget.jsonl"
    ledger_mod.init_ledger(led, spec.dataset_id, 0.5)
    reads = []
    monkeypatch.setattr(spark_prepare, "read_logs", lambda *a, **kw: reads.append(a))
    res = CliRunner().invoke(main, _cli(tmp_path, path, "--engine", "spark", "--ledger", str(led)))
    assert res.exit_code == 3 and "exceed" in res.output, res.output
    assert reads == []


def test_a_spark_failure_in_evaluate_is_one_line_exit_1_nothing_charged(spark, tmp_path):
    path, spec = _logs(tmp_path, ids="int", k=2, n_units=30, parts=2)
    (path / "part-009.parquet").write_bytes(b"PAR1" + b"\0" * 64 + b"PAR1")  # read only when the job runs
    led = tmp_path / "budget.jsonl"
    ledger_mod.init_ledger(led, spec.dataset_id, 10)
    before = led.read_text()
    res = CliRunner().invoke(main, _cli(tmp_path, path, "--engine", "spark", "--ledger", str(led)))
    err = res.output.strip()
    assert res.exit_code == 1, err
    assert err.startswith("error: ") and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "Spark failed while" in err and "part-009" in err, err
    assert led.read_text() == before


def test_a_failing_spark_frame_is_an_engine_error_in_the_value_statistics(spark, tmp_path):
    from pyspark.sql import functions as F

    path, spec = _logs(tmp_path, ids="int", k=2, n_units=30)
    sdf = prepare_spark_logs(str(path), spec, spark=spark).bounded.withColumn(
        "state", F.when(F.col("step") == 2, F.raise_error(F.lit("bad row"))).otherwise(F.col("state")))
    plan = BehaviourValueRelease.plan(spec, resolve_budget(rho=0.5))
    with pytest.raises(EngineError, match=r"^Spark failed while computing the clinicians' value statistics") as e:
        plan.apply(sdf, rng=np.random.default_rng(0))
    assert "\n" not in str(e.value)


def test_held_out_certification_on_spark_prepared_logs_equals_polars(spark, tmp_path):
    """pipeline.certify on prepared logs whose ``bounded`` is a Spark DataFrame (the shape of the Spark engine's
    prepared logs): the same split and the same certified values as on polars' PreparedLogs, same seed."""
    from dataclasses import dataclass

    from privaudit.pipeline.certify import certify_policies, split_held_out

    @dataclass(frozen=True)
    class SparkPrepared:
        bounded: object
        spec: DomainSpec

        def check_spec(self, spec):
            assert spec.hash() == self.spec.hash()

    path, spec = _logs(tmp_path, ids="string", k=2, n_units=40)
    polars_prepared = prepare_logs(path, spec)
    spark_prepared = SparkPrepared(prepare_spark_logs(str(path), spec, spark=spark).bounded, spec)
    rng = np.random.default_rng(9)
    tables = {"dp-pbb": rng.dirichlet(np.ones(spec.A), size=(spec.H, spec.S)),
              "dp-apvi": np.eye(spec.A)[rng.integers(0, spec.A, (spec.H, spec.S))]}
    out = []
    for prepared in (polars_prepared, spark_prepared):
        train, held = split_held_out(prepared, 0.4)
        assert type(held) is type(prepared)
        out.append(certify_policies(held, spec, tables, resolve_budget(rho=1.0), seed=3,
                                    clinicians_interval=[0.1, 0.2], units=20.0))
    assert json.dumps(out[1], sort_keys=True) == json.dumps(out[0], sort_keys=True)
    assert set(out[0]) == {"dp-pbb", "dp-apvi"}
