"""``pipeline --engine spark`` equals ``--engine polars`` byte for byte: summary, policies, release, guarantee.

Random logs whose rewards are a public r(s') (so DP-PBB trains, with its per-cell cap c = 1), heavy
repairs on purpose (units over k, episodes beyond H). The same seed on both engines. What is normalised
(creation times, the engine's name) and what is compared: ``tests/_identity.py``; every byte of every
Parquet table must be equal.

Each case is one line of :data:`CASES` (with or without the clinicians' value part, ``value_share``,
and the held-out certification, ``hold_out``). Uses the session-scoped local[2] SparkSession (tests/conftest.py).
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests._spark import skip_without_spark

skip_without_spark()

from privaudit.cli import main  # noqa: E402
from privaudit.data.spark import counts as spark_counts  # noqa: E402
from privaudit.data.spark import prepare as spark_prepare  # noqa: E402
from privaudit.privacy.ledger import init_ledger, ledger_status  # noqa: E402
from tests._identity import assert_same_outputs  # noqa: E402
from tests._spark import spark_pbb_logs  # noqa: E402

pytestmark = pytest.mark.spark

#: (ids, k, parts, stationary, return_bound, value_share, hold_out): the first case runs by default, the others
#: in CI's slow run. Together: integer, negative and non-ASCII string ids, k = 1 and k > 1, one file and a folder
#: of parts, per step and pooled, with and without a return bound (clipping returns).
CASES = [
    pytest.param("int", 2, 1, False, None, 0.1, False, id="int-k2-per-step-value"),
    pytest.param("string", 2, 2, False, None, 0.1, True, id="string-k2-parts-value-hold-out",
                 marks=pytest.mark.slow),
    pytest.param("string", 3, 3, True, (0.0, 1.5), 0.0, False, id="string-k3-parts-pooled-return-bound",
                 marks=pytest.mark.slow),
    pytest.param("negative", 1, 2, False, (0.0, 2.0), 0.0, False, id="negative-k1-parts-return-bound",
                 marks=pytest.mark.slow),
]


def _pipeline(args, engine, out):
    return CliRunner().invoke(main, ["pipeline", *map(str, args), "--engine", engine, "--out", str(out)])


@pytest.mark.parametrize("ids,k,parts,stationary,return_bound,value_share,hold_out", CASES)
def test_spark_pipeline_equals_polars_byte_for_byte(spark, tmp_path, monkeypatch, ids, k, parts, stationary,
                                                   return_bound, value_share, hold_out):
    logs, doc, spec = spark_pbb_logs(tmp_path, ids=ids, k=k, n_units=40, parts=parts, return_bound=return_bound)
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(doc))
    args = [logs, "--spec", spec_file, "--rho", 2, "--seed", 7, "--audit-trials", 0, "--accept-repairs",
            "--stationary" if stationary else "--per-step", "--value-share", value_share,
            *(["--hold-out"] if hold_out else [])]
    reads = []
    real = spark_prepare.read_logs
    monkeypatch.setattr(spark_prepare, "read_logs", lambda *a, **kw: reads.append(a) or real(*a, **kw))
    outs = {}
    for engine in ("polars", "spark"):
        outs[engine] = tmp_path / engine
        res = _pipeline(args, engine, outs[engine])
        assert res.exit_code == 0, res.output
        assert "dp-pbb is not trained" not in res.output
    assert len(reads) == 1  # Spark read (and checked and bounded) the logs once for the whole run
    p, s = outs["polars"], outs["spark"]
    files = assert_same_outputs(p, s)
    assert {"summary.json", "policies/dp-pbb/policy.parquet", "policies/dp-apvi/policy.parquet",
            "release/transitions.parquet"} <= {str(f) for f in files}
    summary = json.loads((s / "summary.json").read_text())
    assert [x["name"] for x in summary["privacy"]["details"]["parts"]] == (
        ["release", "behaviour-value", "dp-pbb"] if value_share else ["release", "dp-pbb"])
    private = [json.loads((o / "private" / "local-log.json").read_text()) for o in (p, s)]
    assert private[0]["bounding"] == private[1]["bounding"] and private[1]["engine"] == "spark"
    assert private[0]["bounding"]["episodes_dropped"] > 0 and private[0]["bounding"]["steps_dropped"] > 0


def test_spark_failure_in_dp_pbb_keeps_only_the_charged_release(spark, tmp_path, monkeypatch):
    """Spark fails while counting DP-PBB's cells, after the release was charged: one error line, exit 1, the
    release kept (marked incomplete) and charged, DP-PBB neither written nor charged, said on stderr."""
    from py4j.protocol import Py4JNetworkError

    logs, doc, spec = spark_pbb_logs(tmp_path, ids="int", k=2, n_units=40)
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(doc))
    ledger = tmp_path / "budget.jsonl"
    init_ledger(ledger, spec.dataset_id, 10)

    def lost(*a, **kw):  # DP-PBB's start counts (read from the release's cells, DP-PBB's only): the JVM
        raise Py4JNetworkError("Answer from Java side is empty")  # stops answering

    monkeypatch.setattr(spark_counts.SparkSparseCounts, "start_counts", lost)
    monkeypatch.setattr(spark_prepare, "to_polars", lost)  # (their own pass, when the release did not count them)
    out = tmp_path / "out"
    res = _pipeline([logs, "--spec", spec_file, "--rho", 2, "--seed", 7, "--audit-trials", 0, "--accept-repairs",
                     "--per-step", "--value-share", 0, "--ledger", ledger], "spark", out)
    assert res.exit_code == 1, res.output
    assert "Traceback" not in res.output
    errors = [line for line in res.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, res.output  # one line; the notes around it say what was kept and charged
    assert "stopped answering" in errors[0] and "no budget was charged" not in errors[0]
    assert "only the parts charged before it are kept" in errors[0]
    assert "what was already charged (release) is kept" in res.output
    assert "note: the budget ledger" in res.output
    assert (out / "release" / "manifest.json").is_file() and not (out / "policies" / "dp-pbb").exists()
    spent = ledger_status(ledger)["rho_spent_float"]
    assert 0 < spent < 2  # the release's part only
