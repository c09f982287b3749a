"""The Spark engine gives the polars path's exact counts, bounding facts and fatal-rule verdicts.

One session-scoped ``local[2]`` SparkSession, tiny logs. Skipped (with the reason) only where
pyspark or Java is absent.
"""

from __future__ import annotations

import json
import re

import numpy as np
import polars as pl
import pytest

from tests._spark import skip_without_spark

skip_without_spark()

from click.testing import CliRunner  # noqa: E402

from privaudit.cli import main  # noqa: E402
from privaudit.data.prepare import prepare_logs  # noqa: E402
from privaudit.data.repairs import RepairLimit  # noqa: E402
from privaudit.data.validate import validate_logs  # noqa: E402
from privaudit.core.errors import ValidationFailed  # noqa: E402
from privaudit.privacy import ledger as ledger_mod  # noqa: E402
from privaudit.core.spec import DomainSpec  # noqa: E402
from privaudit.data.spark import counts as spark_counts, engine as se, fatal_rules  # noqa: E402
from privaudit.data.spark import logs as spark_logs  # noqa: E402
from privaudit.data.spark import prepare as spark_prepare  # noqa: E402
from privaudit.data.counts import sparse_counts  # noqa: E402
from tests._release_logs import spec_doc  # noqa: E402
from tests._spark import spark_test_logs as _logs  # noqa: E402

pytestmark = pytest.mark.spark

Q = 1 << 16


def _polars(path, spec, stationary):
    prepared = prepare_logs(path, spec)
    cols = [pl.col(c).cast(pl.Int32) for c in ("step", "state", "action", "next_state")]
    frame = prepared.bounded.select(cols + [pl.col("reward")]).collect()
    return sparse_counts(frame, spec, stationary=stationary, quantum=Q), prepared.bounding


def _assert_identical(a, b, spec, stationary):
    assert a.cells.equals(b.cells)
    np.testing.assert_array_equal(a.visits, b.visits)
    np.testing.assert_array_equal(a.rewards, b.rewards)
    for h in range(1 if stationary else spec.H):
        np.testing.assert_array_equal(a.transitions_at(h), b.transitions_at(h))


# Few cases, each a few Spark jobs: together they cover k = 1 and k > 1, integer (incl. negative) and
# non-ASCII string ids, per step and pooled, one file and a folder of parts.
# The first case runs by default; the others (slow marker) in CI's second run (`python -m pytest -m slow`).
@pytest.mark.parametrize("ids,k,parts,stationary", [
    ("int", 1, 1, False),
    pytest.param("int", 3, 1, True, marks=pytest.mark.slow),
    pytest.param("string", 2, 1, False, marks=pytest.mark.slow),
    pytest.param("negative", 2, 3, True, marks=pytest.mark.slow)])
def test_spark_counts_identical_to_polars(spark, tmp_path, ids, k, parts, stationary):
    path, spec = _logs(tmp_path, ids=ids, k=k, n_units=40, parts=parts)
    exp, exp_report = _polars(path, spec, stationary)
    got, report = se.spark_sparse_counts(str(path), spec, spark=spark, stationary=stationary, quantum=Q)
    assert exp_report.episodes_dropped > 0 and exp_report.steps_dropped > 0 and exp_report.rewards_clipped > 0
    assert report == exp_report
    _assert_identical(got, exp, spec, stationary)


@pytest.mark.slow  # 10 s; kept out of the default suite's time (CI runs -m slow too)
def test_spark_takes_a_dataframe(spark, tmp_path):
    path, spec = _logs(tmp_path, ids="int", k=2, n_units=30)
    exp, _ = _polars(path, spec, False)
    got, _ = se.spark_sparse_counts(spark.read.parquet(str(path)), spec, stationary=False, quantum=Q)
    _assert_identical(got, exp, spec, False)


def _good(n=6):
    rows = []
    for e in range(n):
        for h, (s, a, s2) in enumerate([(0, 1, 1), (1, 0, 2), (2, 1, 3)]):
            rows.append({"episode_id": e, "patient": e // 2, "step": h, "state": s, "action": a,
                         "reward": 0.5, "next_state": s2, "terminated": s2 == 3, "truncated": False})
    return pl.DataFrame(rows)


def _spec(public=None):
    """The spec of :func:`_good`'s logs; its public reward r(1) = r(2) = r(3) = 0.5 is the logged one."""
    doc = spec_doc(H=4, S=4, A=2, k=2, terminals=(3,), unit_column="patient",
                   public_reward={1: 0.5, 2: 0.5, 3: 0.5} if public is None else public)
    return DomainSpec.from_dict(doc)


BREAKS = {
    "null_value": lambda d: d.with_columns(pl.when(pl.int_range(pl.len()) == 4).then(None)
                                           .otherwise(pl.col("action")).alias("action")),
    "not_finite": lambda d: d.with_columns(pl.when(pl.int_range(pl.len()) == 2).then(float("nan"))
                                           .otherwise(pl.col("reward")).alias("reward")),
    "state_out_of_range": lambda d: d.with_columns(pl.when(pl.int_range(pl.len()) == 0).then(9)
                                                   .otherwise(pl.col("state")).alias("state")),
    "action_out_of_range": lambda d: d.with_columns(pl.when(pl.int_range(pl.len()) == 0).then(-1)
                                                    .otherwise(pl.col("action")).alias("action")),
    "next_state_out_of_range": lambda d: d.with_columns(pl.when(pl.int_range(pl.len()) == 5).then(7)
                                                        .otherwise(pl.col("next_state")).alias("next_state")),
    "terminated_and_truncated": lambda d: d.with_columns(pl.col("terminated").alias("truncated")),
    "continues_after_terminal": lambda d: pl.concat([d, d.filter(pl.col("step") == 2).with_columns(
        step=pl.lit(3, pl.Int64), state=pl.lit(3, pl.Int64), next_state=pl.lit(3, pl.Int64),
        terminated=pl.lit(True))]),
    "terminated_mismatch": lambda d: d.with_columns(terminated=pl.lit(False)),
    "step_duplicate": lambda d: pl.concat([d, d.filter((pl.col("episode_id") == 1) & (pl.col("step") == 1))]),
    "step_gap": lambda d: d.filter(~((pl.col("episode_id") == 2) & (pl.col("step") == 1))),
    "next_state_mismatch": lambda d: d.with_columns(pl.when(pl.int_range(pl.len()) == 3).then(0)
                                                    .otherwise(pl.col("next_state")).alias("next_state")),
    "flag_not_last": lambda d: d.with_columns(pl.when(pl.int_range(pl.len()) == 0).then(True)
                                              .otherwise(pl.col("truncated")).alias("truncated")),
    "unit_not_unique": lambda d: d.with_columns(pl.when(pl.int_range(pl.len()) == 1).then(99)
                                                .otherwise(pl.col("patient")).alias("patient")),
    "reward_not_public": lambda d: d.with_columns(pl.when(pl.int_range(pl.len()) == 7).then(0.25)
                                                  .otherwise(pl.col("reward")).alias("reward")),
}


def _spark_refusal(path, spec, spark) -> dict:
    """rule -> count of the fatal rules Spark's refusal names (its message, from one Spark action)."""
    with pytest.raises(ValidationFailed) as e:
        fatal_rules.check_fatal_rules(spark_logs.read_logs(str(path), spec, spark), spec)
    return {r: int(n) for r, n in re.findall(r"(\w+) \((\d+)\)", str(e.value))}


@pytest.mark.parametrize("rule", sorted(BREAKS))
def test_each_fatal_rule_caught_by_both_engines(spark, tmp_path, rule):
    """Spark refuses the logs naming the broken rules with polars' counts (not only the verdict)."""
    spec = _spec()
    path = tmp_path / "bad.parquet"
    BREAKS[rule](_good()).write_parquet(path)
    fatal = validate_logs(path, spec).fatal
    assert rule in fatal
    assert _spark_refusal(path, spec, spark) == fatal


def test_rows_without_an_episode_id_counted_as_polars(spark, tmp_path):
    """Each episode its own unit (read_logs copies the id into unit_id): a null id is one null_value, not two,
    and the null-id rows form no episode for the structural rules (polars' episode table skips them), so only
    the gap they leave in episode 1 is a step_gap. And two rows of one episode under other units: 2, not 3."""
    spec = DomainSpec.from_dict(spec_doc(H=4, S=4, A=2, k=1, terminals=(3,)))
    i = pl.int_range(pl.len())
    d = _good().drop("patient").with_columns(episode_id=pl.when(i == 4).then(None).otherwise(pl.col("episode_id")))
    path = tmp_path / "null-id.parquet"
    d.write_parquet(path)
    fatal = validate_logs(path, spec).fatal
    assert fatal == {"null_value": 1, "step_gap": 1}
    assert _spark_refusal(path, spec, spark) == fatal
    two = BREAKS["unit_not_unique"](_good()).with_columns(
        patient=pl.when(i == 2).then(98).otherwise(pl.col("patient")))
    two.write_parquet(path)
    fatal = validate_logs(path, _spec()).fatal
    assert fatal == {"unit_not_unique": 2}
    assert _spark_refusal(path, _spec(), spark) == fatal


def test_clean_logs_break_no_rule_in_spark(spark, tmp_path):
    spec = _spec()  # with the logs' own public reward: checked, and not broken
    path = tmp_path / "good.parquet"
    _good().write_parquet(path)
    assert validate_logs(path, spec).releasable
    assert not any(fatal_rules.fatal_rule_counts(spark_logs.read_logs(str(path), spec, spark), spec).values())


def test_reward_not_public_counts_identical_in_both_engines(spark, tmp_path):
    """Same rows flagged at the tolerance edge; rows broken by another rule are not flagged twice."""
    spec = _spec()
    tol = spec.public_reward_tolerance()
    assert tol == 1e-6
    d = _good()
    i = pl.int_range(pl.len())
    d = d.with_columns(
        reward=pl.when(i == 0).then(0.5 + 0.9 * tol).when(i == 1).then(0.5 + 1.1 * tol)
        .when(i == 3).then(0.5 - 1.1 * tol).when(i == 4).then(float("nan")).when(i == 10).then(None)
        .when(i == 8).then(0.7).otherwise(pl.col("reward")),
        next_state=pl.when(i == 8).then(9).otherwise(pl.col("next_state")))
    path = tmp_path / "edge.parquet"
    d.write_parquet(path)
    counts = validate_logs(path, spec).counts
    assert counts["reward_not_public"] == 2  # rows 1 and 3; not row 0 (within), 4 (NaN), 8 (next_state 9), 10 (null)
    got = fatal_rules.fatal_rule_counts(spark_logs.read_logs(str(path), spec, spark), spec)  # one Spark job
    assert got["reward_not_public"] == 2
    assert {r: counts[r] for r in got} == got
    # the wrong declaration of the fresh-user test, in miniature: r(3) = 0 but the logs earn 0.5 entering 3
    _good().write_parquet(path)
    wrong = _spec({1: 0.5, 2: 0.5})
    assert validate_logs(path, wrong).fatal == {"reward_not_public": 6}
    with pytest.raises(ValidationFailed, match=r"reward_not_public \(6\)"):
        fatal_rules.check_fatal_rules(spark_logs.read_logs(str(path), wrong, spark), wrong)


def test_a_features_column_is_checked_as_polars(spark, tmp_path):
    """A tabular release reads no features, but polars' validation checks a features column the logs carry (nulls,
    NaN or infinite entries, its type); Spark refuses the same logs with the same counts."""
    spec = _spec()
    i = pl.int_range(pl.len())
    nan, inf = float("nan"), float("inf")
    feats = (pl.when(i == 0).then(pl.lit([0.5, nan])).when(i == 2).then(pl.lit([None, 1.0], pl.List(pl.Float64)))
             .when(i == 5).then(pl.lit(None, pl.List(pl.Float64))).when(i == 7).then(pl.lit([-inf, 1.0]))
             .when(i == 9).then(pl.lit([], pl.List(pl.Float64))).otherwise(pl.concat_list(pl.col("reward"), 1.0)))
    d = _good().with_columns(features=feats,
                             reward=pl.when(i == 7).then(nan).otherwise(pl.col("reward")))  # row 7: both columns
    path = tmp_path / "features.parquet"
    d.write_parquet(path)
    fatal = validate_logs(path, spec).fatal
    assert fatal == {"null_value": 1, "not_finite": 4}  # rows 0, 2, 7 (features) and 7 (reward); 5 is null
    assert _spark_refusal(path, spec, spark) == fatal
    _good().with_columns(features=pl.concat_list(pl.col("reward"), 1.0)).write_parquet(path)
    assert validate_logs(path, spec).releasable
    assert not any(fatal_rules.fatal_rule_counts(spark_logs.read_logs(str(path), spec, spark), spec).values())
    _good().with_columns(features=pl.concat_list(pl.col("reward").cast(pl.String))).write_parquet(path)
    assert "column_type" in validate_logs(path, spec).fatal
    with pytest.raises(ValidationFailed, match=r"column_type \(features \(array<string>\)\)"):
        spark_logs.read_logs(str(path), spec, spark)


#: episode -> rewards of steps 0, 1, ... (H = 3, reward_range [0, 1], return_bound [1.25, 2.5]), and whether its
#: return (steps h < 3, finite rewards clipped into [0, 1]) is below G_min = 1.25. Rewards are multiples of 2^-2:
#: every sum is exact in float64, in any order.
RETURN_CASES = {
    0: ([0.5, 0.5, 0.5], False),  # 1.5
    1: ([0.25, 0.5, 0.5], False),  # exactly G_min: not a violation
    2: ([0.25, 0.25, 0.5], True),  # 1.0
    3: ([3.0, 0.0, 0.0], True),  # clipped 1.0 (unclipped 3.0 would pass)
    4: ([0.25, -1.0, 1.0], False),  # clipped 0.25 + 0 + 1 = G_min (unclipped 0.25 would fail)
    5: ([0.25, 0.25, 0.5, 1.0, 1.0], True),  # steps 3 and 4 >= H are not summed (with them: 3.0)
    6: ([float("nan"), 0.5, 0.5], True),  # the NaN row is not summed (NaN < G_min is false)
    7: ([None, 0.5, 0.5], True),  # nor the null one
    8: ([float("inf"), 0.5, 0.5], True),  # nor +inf (clipped it would give 2.0)
    9: ([float("nan")] * 3, False),  # no finite reward: no return, no violation (as polars: no group)
    10: ([1.5, 0.0, 0.0], True),  # clipped 1.0 (unclipped 1.5 would pass)
}


def _return_logs() -> pl.DataFrame:
    """:data:`RETURN_CASES` as logs of a valid chain 0 -> 1 -> 2 -> 3 -> 0 ... (S=4, no terminal state)."""
    rows = [{"episode_id": e, "patient": e, "step": h, "state": h % 4, "action": h % 2, "reward": r,
             "next_state": (h + 1) % 4} for e, (rewards, _) in RETURN_CASES.items() for h, r in enumerate(rewards)]
    return pl.DataFrame(rows, schema_overrides={"reward": pl.Float64})


def _return_spec(g_min=1.25, g_max=2.5) -> DomainSpec:
    return DomainSpec.from_dict({**spec_doc(H=3, S=4, A=2, k=1, terminals=(), unit_column="patient"),
                                 "return_bound": [g_min, g_max]})


def test_return_below_bound_counts_identical_in_both_engines(spark, tmp_path):
    """Same episodes below G_min: clipped rewards, steps h < H and finite rewards only, G_min itself allowed."""
    spec = _return_spec()
    path = tmp_path / "returns.parquet"
    _return_logs().write_parquet(path)
    expected = sum(below for _, below in RETURN_CASES.values())
    assert expected == 7
    report = validate_logs(path, spec)
    assert report.counts["return_below_bound"] == expected
    assert sorted(v["episode_id"] for v in report.violations if v["rule"] == "return_below_bound") == \
        [e for e, (_, below) in RETURN_CASES.items() if below]
    got = fatal_rules.fatal_rule_counts(spark_logs.read_logs(str(path), spec, spark), spec)  # one Spark action
    assert got["return_below_bound"] == expected
    assert {r: report.counts[r] for r in got} == got  # not_finite, null_value... too
    with pytest.raises(ValidationFailed, match=rf"return_below_bound \({expected}\)"):
        fatal_rules.check_fatal_rules(spark_logs.read_logs(str(path), spec, spark), spec)
    # no bound declared: the rule is not checked by either engine
    plain = DomainSpec.from_dict(spec_doc(H=3, S=4, A=2, k=1, terminals=(), unit_column="patient"))
    plain_logs = spark_logs.read_logs(str(path), plain, spark)
    assert "return_below_bound" not in fatal_rules.fatal_rule_counts(plain_logs, plain)
    assert validate_logs(path, plain).counts["return_below_bound"] == 0


def test_return_below_bound_identical_on_random_logs_in_parts(spark, tmp_path):
    """120 random episodes (rewards spilling out of [0, 1], episodes longer than H, text ids), rows of an episode
    spread over 3 Parquet parts: the same count of episodes below G_min in both engines, and it is neither 0
    nor all of them (the bound splits the episodes)."""
    path, spec = _logs(tmp_path, ids="string", k=2, n_units=40, parts=3)
    spec = DomainSpec.from_dict({**spec_doc(H=4, S=5, A=3, k=2, terminals=(4,), unit_column="patient"),
                                 "return_bound": [1.0, 4.0]})
    report = validate_logs(path, spec)
    n = report.counts["return_below_bound"]
    assert 0 < n < report.episodes
    got = fatal_rules.fatal_rule_counts(spark_logs.read_logs(str(path), spec, spark), spec)
    assert got["return_below_bound"] == n
    assert {r: report.counts[r] for r in got} == got


def test_missing_and_mistyped_columns_are_fatal(spark, tmp_path):
    spec = DomainSpec.from_dict(spec_doc(H=4, S=4, A=2, k=2, terminals=(3,), unit_column="patient"))
    _good().drop("action").write_parquet(tmp_path / "a.parquet")
    with pytest.raises(ValidationFailed, match="missing_column.*action"):
        spark_logs.read_logs(str(tmp_path / "a.parquet"), spec, spark)
    _good().with_columns(pl.col("state").cast(pl.Float64)).write_parquet(tmp_path / "b.parquet")
    with pytest.raises(ValidationFailed, match="column_type.*state"):
        spark_logs.read_logs(str(tmp_path / "b.parquet"), spec, spark)


def _release_both(tmp_path, path, doc: dict, seed: int):
    """``privaudit release`` of ``path`` with spec ``doc``, rho 1 and ``seed``, once per engine, into
    ``tmp_path / rel-ENGINE``; each must succeed. Returns (engine -> release folder, the two outputs)."""
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(doc))
    outs, said = {}, []
    for engine in ("polars", "spark"):
        outs[engine] = tmp_path / f"rel-{engine}"
        res = CliRunner().invoke(main, ["release", str(path), "--spec", str(spec_file), "--rho", "1", "--seed",
                                        str(seed), "--out", str(outs[engine]), "--engine", engine,
                                        "--accept-repairs"])  # the random logs are bounded heavily on purpose
        assert res.exit_code == 0, res.output
        said.append(res.output)
    return outs, said


def test_cli_release_with_spark_equals_polars_release(spark, tmp_path):
    """Same logs, same seed: the Spark release's noisy tables are the polars release's, byte for byte."""
    path, spec = _logs(tmp_path, ids="string", k=2, n_units=30)
    outs, _ = _release_both(tmp_path, path, spec_doc(H=4, S=5, A=3, k=2, terminals=(4,), unit_column="patient"), 3)
    for f in ("visits.parquet", "rewards.parquet"):
        assert pl.read_parquet(outs["polars"] / f).equals(pl.read_parquet(outs["spark"] / f))
    tp = sorted(p.relative_to(outs["polars"]) for p in outs["polars"].rglob("*transitions*") if p.is_file())
    assert tp and tp == sorted(p.relative_to(outs["spark"]) for p in outs["spark"].rglob("*transitions*")
                               if p.is_file())
    for p in tp:
        assert pl.read_parquet(outs["polars"] / p).equals(pl.read_parquet(outs["spark"] / p))


def test_cli_spark_release_checks_the_ledger_before_spark_reads(spark, tmp_path, monkeypatch):
    path, spec = _logs(tmp_path, ids="int", k=2, n_units=30)
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec_doc(H=4, S=5, A=3, k=2, terminals=(4,), unit_column="patient")))
    led = tmp_path / "budget.jsonl"
    ledger_mod.init_ledger(led, spec.dataset_id, 0.5)
    reads = []
    monkeypatch.setattr(spark_prepare, "read_logs", lambda *a, **kw: reads.append(a))
    res = CliRunner().invoke(main, ["release", str(path), "--spec", str(spec_file), "--rho", "0.6",
                                    "--out", str(tmp_path / "r"), "--ledger", str(led), "--engine", "spark"])
    assert res.exit_code == 3 and "exceed" in res.output, res.output
    assert reads == [] and not (tmp_path / "r").exists()


# ------------------------------------------------------------------ failures of Spark itself: one line, exit != 0,
# nothing written, nothing charged


def _release_args(tmp_path, path, *extra):
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec_doc(H=4, S=5, A=3, k=2, terminals=(4,), unit_column="patient")))
    led = tmp_path / "budget.jsonl"
    ledger_mod.init_ledger(led, "tiny-release", 10)
    before = led.read_text()
    args = ["release", str(path), "--spec", str(spec_file), "--rho", "1", "--stationary", "--out",
            str(tmp_path / "rel"), "--ledger", str(led), "--engine", "spark", "--accept-repairs", *extra]
    return args, led, before


def _assert_clean_failure(res, tmp_path, led, before, code, *needles):
    err = res.output.strip()
    assert res.exit_code == code, err
    assert err.startswith("error: ") and len(err.splitlines()) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in err, err
    assert not (tmp_path / "rel").exists() and not list(tmp_path.glob(".rel*"))
    assert led.read_text() == before  # nothing charged


def test_corrupt_part_fails_the_job_cleanly(spark, tmp_path):
    path, _ = _logs(tmp_path, ids="int", k=2, n_units=30, parts=2)
    (path / "part-009.parquet").write_bytes(b"PAR1" + b"\0" * 64 + b"PAR1")  # read only when the job runs
    args, led, before = _release_args(tmp_path, path)
    res = CliRunner().invoke(main, args)
    _assert_clean_failure(res, tmp_path, led, before, 1, "Spark failed while", "FAILED_READ_FILE", "part-009")


def test_runtime_failure_in_a_dataframe_is_an_engine_error(spark, tmp_path):
    """A notebook's DataFrame whose plan fails while the job runs (a view with a failing expression)."""
    from pyspark.sql import functions as F

    from privaudit.core.errors import EngineError
    from privaudit.release.tabular import ReleaseOptions, release_logs

    path, spec = _logs(tmp_path, ids="int", k=2, n_units=30)
    df = spark.read.parquet(str(path)).withColumn(
        "state", F.when(F.col("step") == 2, F.raise_error(F.lit("bad row in the view"))).otherwise(F.col("state")))
    led = tmp_path / "budget.jsonl"
    ledger_mod.init_ledger(led, spec.dataset_id, 10)
    before = led.read_text()
    with pytest.raises(EngineError, match=r"^Spark failed while .*USER_RAISED_EXCEPTION\] bad row in the view") as e:
        release_logs(df, spec, rho=1, out=tmp_path / "rel", ledger=led,
                     options=ReleaseOptions(engine="spark", spark=spark))
    assert "\n" not in str(e.value)
    assert not (tmp_path / "rel").exists() and led.read_text() == before


@pytest.mark.parametrize("kind", ["oom", "jvm_lost"])
def test_out_of_memory_and_lost_jvm_are_one_line_errors(spark, tmp_path, monkeypatch, kind):
    """A real Java OutOfMemoryError object (made in the JVM) as Py4J delivers it, and a JVM that stopped answering."""
    from py4j.protocol import Py4JJavaError, Py4JNetworkError

    if kind == "oom":
        exc = Py4JJavaError("An error occurred while calling o99.collectToPython.\n",
                            spark._jvm.java.lang.OutOfMemoryError("Java heap space"))
    else:
        exc = Py4JNetworkError("Answer from Java side is empty")

    def boom(*a, **kw):
        raise exc

    monkeypatch.setattr(spark_prepare, "exact_counts", boom)
    path, _ = _logs(tmp_path, ids="int", k=2, n_units=30)
    args, led, before = _release_args(tmp_path, path)
    res = CliRunner().invoke(main, args)
    needles = (["ran out of memory", "java.lang.OutOfMemoryError: Java heap space", "spark.driver.memory"]
               if kind == "oom" else ["stopped answering", "Answer from Java side is empty"])
    _assert_clean_failure(res, tmp_path, led, before, 1, *needles, "no budget was charged")


@pytest.mark.parametrize("java", ["absent", "bad_home"])
def test_missing_java_is_a_usage_error_before_spark_starts(spark, tmp_path, monkeypatch, java):
    path, _ = _logs(tmp_path, ids="int", k=2, n_units=30)
    args, led, before = _release_args(tmp_path, path, "--master", "local[1]")
    if java == "absent":
        monkeypatch.delenv("JAVA_HOME", raising=False)
        monkeypatch.setenv("PATH", str(tmp_path))  # no java on it
    else:
        monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    res = CliRunner().invoke(main, args)  # --master: a new session is asked for (the test one would be reused)
    _assert_clean_failure(res, tmp_path, led, before, 2, "Java runtime" if java == "absent" else "bin/java")


# ------------------------------------------------------------------ per-cell cap (--max-per-cell) in Spark


@pytest.mark.parametrize("stationary,c", [pytest.param(True, 2, marks=pytest.mark.slow), (False, 1)])
def test_spark_per_cell_cap_keeps_the_polars_steps(spark, tmp_path, stationary, c):
    """Same kept steps as polars' cap_per_cell (same portable key order): identical cells and report."""
    path, spec = _logs(tmp_path, ids="string", k=3, n_units=25, seed=11)
    prepared = prepare_logs(path, spec).with_cell_cap(c, stationary=stationary)
    cols = [pl.col(x).cast(pl.Int32) for x in ("step", "state", "action", "next_state")]
    exp = sparse_counts(prepared.bounded.select(cols + [pl.col("reward")]).collect(), spec,
                        stationary=stationary, quantum=Q)
    expected_report = prepared.bounding.with_cell_kept(int(exp.cells["n"].sum()))
    assert expected_report.cell_steps_dropped > 0  # the cap bites: a wrong keep order would show
    got, report = se.spark_sparse_counts(str(path), spec, spark=spark, stationary=stationary, quantum=Q,
                                         max_per_cell=c)
    assert report == expected_report
    _assert_identical(got, exp, spec, stationary)


def _same_release(outs) -> dict:
    """Assert the releases in ``outs["polars"]`` and ``outs["spark"]`` (one-file tables) are the same: tables equal,
    manifests equal but for their creation time. Returns the manifest."""
    for f in ("visits.parquet", "rewards.parquet", "transitions.parquet"):
        assert pl.read_parquet(outs["polars"] / f).equals(pl.read_parquet(outs["spark"] / f)), f
    m = [json.loads((outs[e] / "manifest.json").read_text()) for e in ("polars", "spark")]
    for x in m:
        del x["created"]
    assert m[0] == m[1]
    return m[0]


@pytest.mark.slow
def test_cli_release_with_per_cell_cap_equals_polars(spark, tmp_path):
    """--max-per-cell with --engine spark: the polars release's tables and manifest, byte for byte."""
    path, _ = _logs(tmp_path, ids="int", k=2, n_units=30)
    args, led, _ = _release_args(tmp_path, path, "--max-per-cell", "2", "--seed", "4")
    outs = {}
    for engine in ("polars", "spark"):
        outs[engine] = tmp_path / f"rel-{engine}"
        a = [str(outs[engine]) if x == str(tmp_path / "rel") else engine if x == "spark" else x for x in args]
        res = CliRunner().invoke(main, a)
        assert res.exit_code == 0, res.output
        assert "at most c=2 steps per unit" in res.output, res.output
    assert _same_release(outs)["privacy_unit"]["max_per_cell"] == 2


def _bounded_return_doc():
    """The random logs' spec with return_bound [0, 1.5]: B = 1.5 < H = 4 scaled units, so bounding clips the
    running return of the episodes that earn more (G_min = 0: no clipped return is below it)."""
    return {**spec_doc(H=4, S=5, A=3, k=2, terminals=(4,), unit_column="patient"), "return_bound": [0.0, 1.5]}


def test_spark_clips_returns_as_polars(spark, tmp_path):
    """Bounding rule 4 (running scaled return clipped at B) in Spark: the polars report (returns_clipped) and the
    same reward sums, which differ from the unclipped ones."""
    path, plain = _logs(tmp_path, ids="string", k=2, n_units=40, parts=2)
    spec = DomainSpec.from_dict(_bounded_return_doc())
    assert spec.scaled_return_max == 1.5
    exp, exp_report = _polars(path, spec, False)
    got, report = se.spark_sparse_counts(str(path), spec, spark=spark, stationary=False, quantum=Q)
    assert 0 < exp_report.returns_clipped < exp_report.episodes
    assert report == exp_report
    _assert_identical(got, exp, spec, False)
    unclipped, _ = _polars(path, plain, False)
    np.testing.assert_array_equal(unclipped.visits, exp.visits)
    assert (unclipped.rewards >= exp.rewards).all() and (unclipped.rewards > exp.rewards).any()


@pytest.mark.slow
def test_cli_spark_release_with_a_return_bound_equals_polars(spark, tmp_path):
    """A return_bound with private rewards, once refused with Spark (exit 2): now the polars release's tables
    and manifest byte for byte, and the same private bounding log (returns clipped)."""
    path, _ = _logs(tmp_path, ids="int", k=2, n_units=30)
    outs, said = _release_both(tmp_path, path, _bounded_return_doc(), 6)
    assert all("clipped at the declared return bound" in x for x in said), said
    _same_release(outs)
    logs = [json.loads(outs[e].with_name(outs[e].name + ".local-log.json").read_text()) for e in ("polars", "spark")]
    assert logs[0]["bounding"] == logs[1]["bounding"] and logs[0]["bounding"]["returns_clipped"] > 0


# ------------------------------------------------------------------ one h at a time to the driver


def test_transitions_come_to_the_driver_one_step_at_a_time(spark, tmp_path, monkeypatch):
    """The release collects the (H, S, A) tables once and then one transition slice per h; same release."""
    from privaudit.release.tabular import ReleaseOptions, release_logs

    path, spec = _logs(tmp_path, ids="int", k=2, n_units=40)
    collected = []
    real = spark_counts.to_polars

    def spy(df):
        out = real(df)
        collected.append(out)
        return out

    monkeypatch.setattr(spark_counts, "to_polars", spy)
    per_h = spec.S * spec.A * spec.S
    accept = RepairLimit(accept=True)  # the random logs are bounded heavily on purpose
    info = release_logs(str(path), spec, rho=1, out=tmp_path / "spark", seed=9,
                        options=ReleaseOptions(engine="spark", spark=spark, repairs=accept))
    slices = [t for t in collected if t.columns == ["i", "n"]]
    assert len(slices) == spec.H  # one collection per step h, in order, each holding step h's cells only
    for h, t in enumerate(slices):
        assert t.height > 0 and (t["i"] // per_h == h).all()
    tables = [t for t in collected if "j" in t.columns]
    assert len(tables) == 1  # visits and reward sums together, once
    assert not any("i" in t.columns and t.height > max(s.height for s in slices) for t in collected)
    ref = release_logs(path, spec, rho=1, out=tmp_path / "polars", seed=9, options=ReleaseOptions(repairs=accept))
    for f in ("visits.parquet", "rewards.parquet", "transitions.parquet"):
        assert pl.read_parquet(ref.out / f).equals(pl.read_parquet(info.out / f))
