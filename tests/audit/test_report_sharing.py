"""The audit report's ``shareable`` field: true only when nothing in the report depends on the logs.

A report on synthetic units added to the logs (the CLI's default pair) holds
thresholds fitted on thousands of runs of the mechanism on the logs: here
two neighbouring logs, run with the same seed, give different reports (the
report is a statistic of the logs outside any DP budget), while the same
audit on the empty baseline reads no logs at all.
"""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from privaudit.audit import Claim, load_report, run_audit
from privaudit.audit.mechanisms.release import ReleaseMechanism
from privaudit.audit.neighbours import make_pair
from privaudit.audit.synthetic_pairs import synthetic_pair
from privaudit.audit.report import AuditReport, sharing
from privaudit.audit.choice import MIN_TRIALS
from privaudit.core.errors import ArtifactError
from tests.audit.helpers import tiny_logs, tiny_spec


@pytest.mark.parametrize("pair, builtin, shareable", [
    ({"kind": "synthetic", "baseline": "empty"}, True, True),
    ({"kind": "synthetic-repeat", "baseline": "empty"}, True, True),
    ({"kind": "synthetic-spread", "baseline": "empty"}, True, True),
    ({"kind": "online-canary"}, True, True),
    ({"kind": "synthetic", "baseline": "empty"}, False, False),     # user code: may read anything
    ({"kind": "online-canary"}, False, False),
    ({"kind": "synthetic", "baseline": "logs"}, True, False),       # the CLI's default: logs + u*, logs + v*
    ({"kind": "synthetic-spread", "baseline": "logs"}, True, False),
    ({"kind": "canary-rare"}, True, False), ({"kind": "canary-repeat"}, True, False),
    ({"kind": "canary-random"}, True, False), ({"kind": "canary-linear"}, True, False),
    ({"kind": "explicit"}, True, False), ({"kind": "identical"}, True, False),
    ({"kind": "something-new"}, True, False), (None, True, False),
])
def test_sharing_by_pair_kind_and_mechanism(pair, builtin, shareable):
    ok, why = sharing(pair, builtin)
    assert ok is shareable and why and "\n" not in why


def _audit(pair, seed=3):
    spec = tiny_spec()
    return run_audit(ReleaseMechanism(spec, rho=0.5, delta=1e-6), claim=Claim.from_rho(0.5, 1e-6), pair=pair,
                     trials=MIN_TRIALS, seed=seed, progress=False)


def test_synthetic_units_on_the_logs_make_a_report_of_the_logs():
    spec = tiny_spec()
    logs = tiny_logs()
    # a neighbour of the logs: unit 0 (in u*'s cell (s, a) = (0, 0) at h = 0) removed
    nb = logs.filter(pl.col("unit_id") != 0)
    reps = [_audit(make_pair(d, spec, "synthetic", rng=np.random.default_rng(0))) for d in (logs, nb)]
    assert [r.data["neighbouring_pair"]["baseline"] for r in reps] == ["logs", "logs"]
    assert all(r.data["shareable"] is False for r in reps)
    assert "private logs plus synthetic units" in reps[0].data["shareable_reason"]
    # why: the same seed, one unit less, and the report's events move (their thresholds are fitted on
    # runs on the logs: they carry the logs' counts in the canary's cells)
    assert reps[0].data["events"][0]["threshold"] != reps[1].data["events"][0]["threshold"]

    empty = _audit(synthetic_pair(spec, pooled=False))
    assert empty.data["neighbouring_pair"]["baseline"] == "empty"
    assert empty.data["shareable"] is True and "no logs were read" in empty.data["shareable_reason"]


def test_a_plain_callable_on_the_empty_baseline_is_not_marked_shareable():
    spec = tiny_spec()
    mech = ReleaseMechanism(spec, rho=0.5, delta=1e-6)

    def mine(logs, rng, n_runs=1):  # user code: what else it reads, the auditor cannot tell
        return mech(logs, rng, n_runs=n_runs)
    mine.prepare = lambda d, d2: (mech.prepare(d, d2), mine)[1]
    rep = run_audit(mine, claim=Claim.from_rho(0.5, 1e-6), pair=synthetic_pair(spec, pooled=False),
                    trials=MIN_TRIALS, seed=1, progress=False)
    assert rep.data["shareable"] is False and "user code" in rep.data["shareable_reason"]


def test_reports_without_the_field_still_read_and_written_ones_must_hold_it(tmp_path):
    rep = _audit(synthetic_pair(tiny_spec(), pooled=False))
    path = rep.write_json(tmp_path / "r.json")
    assert load_report(path)["shareable"] is True
    old = json.loads(path.read_text())
    del old["shareable"], old["shareable_reason"]          # a report written before the field
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert "shareable" not in load_report(tmp_path / "old.json")
    half = {**old, "shareable": True}                        # a flag without its reason is refused
    (tmp_path / "half.json").write_text(json.dumps(half))
    with pytest.raises(ArtifactError, match="shareable_reason"):
        load_report(tmp_path / "half.json")
    with pytest.raises(ArtifactError, match="'shareable' is a required property"):
        AuditReport(rep.verdict, rep.epsilon_lower_bound, old).write_json(tmp_path / "new.json")
    assert not (tmp_path / "new.json").exists()


def test_the_report_is_written_as_its_data_with_numpy_numbers_as_json(tmp_path):
    rep = _audit(synthetic_pair(tiny_spec(), pooled=False))
    data = {**rep.data, "trials": np.int64(rep.data["trials"]), "confidence": np.float64(rep.data["confidence"])}
    rep2 = AuditReport(rep.verdict, rep.epsilon_lower_bound, data)
    text = rep2.write_json(tmp_path / "r.json").read_text()
    assert text == json.dumps(rep.to_dict(), indent=2) + "\n" and rep2.validate() == rep.to_dict()
    assert load_report(tmp_path / "r.json") == rep.to_dict()
    with pytest.raises(ArtifactError, match="audit report .*absent.json: the file is missing"):
        load_report(tmp_path / "absent.json")
