"""``pipeline --engine spark`` equals ``--engine polars`` byte for byte: summary, policies, release, guarantee.

Random logs whose rewards are a public r(s') (so DP-PBB trains, with its per-cell cap c = 1), heavy
repairs on purpose (units over k, episodes beyond H). The same seed on both engines. Normalised, and
only these: ``summary.json``'s ``created`` (a timestamp) and ``config.engine`` (the engine's name);
``policy.json``'s ``created``; the release manifest's ``created``; the same timestamp in ``report.md``. The
figures (PNG) are drawn from the equal summaries and not compared. Everything else, every byte of every
Parquet table included, must be equal.

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

#: Fields that legitimately differ between the two runs, normalised before comparing.
NORMALISED = {"summary.json": (("created",), ("config", "engine")), "policy.json": (("created",),),
              "manifest.json": (("created",),)}


def _normalised(path) -> dict:
    doc = json.loads(path.read_text())
    for keys in NORMALISED.get(path.name, ()):
        d = doc
        for key in keys[:-1]:
            d = d[key]
        assert keys[-1] in d, (path, keys)  # a field that vanished is a change to look at, not to normalise
        d[keys[-1]] = "<normalised>"
    return doc


def _report(out) -> str:
    """report.md with its creation time (the summary's ``created``, once) normalised."""
    created = json.loads((out / "summary.json").read_text())["created"]
    text = (out / "report.md").read_text()
    assert text.count(created) == 1
    return text.replace(created, "<normalised>")


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
    files = sorted(f.relative_to(p) for f in p.rglob("*") if f.is_file() and f.parts[len(p.parts)] != "private")
    assert files == sorted(f.relative_to(s) for f in s.rglob("*") if f.is_file()
                           and f.parts[len(s.parts)] != "private")
    assert {"summary.json", "policies/dp-pbb/policy.parquet", "policies/dp-apvi/policy.parquet",
            "release/transitions.parquet"} <= {str(f) for f in files}
    for f in files:
        if f.suffix == ".json":
            assert _normalised(p / f) == _normalised(s / f), f
        elif f.suffix == ".md":  # the report: every byte but its creation time (summary.json's `created`)
            assert _report(p) == _report(s)
        elif f.suffix != ".png":  # Parquet tables: every byte (figures: drawn from equal summaries)
            assert (p / f).read_bytes() == (s / f).read_bytes(), f
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
