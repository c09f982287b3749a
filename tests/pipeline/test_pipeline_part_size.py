"""The part size (``PRIVAUDIT_PART_ROWS``, ``privaudit.data.parts.part_rows``) changes no result (issue 33).

Validation's episode table, bounding's unit statistics and return sums, the per-cell cap and the
behaviour-value statistics run in hash parts of whole episodes or units; the memory guard
(tests/perf/test_memory_guard.py) shrinks the parts so that its logs span many of them. Here the
seeded pipeline runs at the default size (one part: the logs are tiny) and at a part size of 16 rows
(parts of 16 rows, of 2 episodes in bounding, of 8 rows in the cap: tens of parts each), with heavy
repairs (units over k, episodes beyond H, returns clipped at the declared bound), DP-PBB's per-cell cap
and the clinicians' value part. Every shared file must be byte-identical (``tests/_identity.py``:
creation times normalised), and so must the data holder's private bounding facts.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from privaudit.cli import main
from privaudit.core.errors import UsageError
from privaudit.data.parts import PART_ROWS, PART_ROWS_VARIABLE, part_count, part_rows
from tests._identity import assert_same_outputs
from tests._spark import spark_pbb_logs

#: The shrunk part size (rows) of the second run.
SMALL_PART = 16


def test_pipeline_is_byte_identical_at_two_part_sizes(tmp_path, monkeypatch):
    logs, doc, _ = spark_pbb_logs(tmp_path, ids="string", k=2, n_units=40, return_bound=(0.0, 1.5))
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(doc))
    args = [logs, "--spec", spec_file, "--rho", 2, "--seed", 7, "--audit-trials", 0, "--accept-repairs",
            "--per-step", "--value-share", 0.1]
    outs = {}
    for size in (None, SMALL_PART):
        if size is None:
            monkeypatch.delenv(PART_ROWS_VARIABLE, raising=False)
        else:
            monkeypatch.setenv(PART_ROWS_VARIABLE, str(size))
        outs[size] = tmp_path / f"out-{size}"
        res = CliRunner().invoke(main, ["pipeline", *map(str, args), "--out", str(outs[size])])
        assert res.exit_code == 0, res.output
        assert "dp-pbb is not trained" not in res.output
    files = assert_same_outputs(outs[None], outs[SMALL_PART])
    assert {"summary.json", "policies/dp-pbb/policy.parquet", "release/transitions.parquet"} <= {str(f) for f in files}
    private = [json.loads((outs[s] / "private" / "local-log.json").read_text())["bounding"] for s in outs]
    assert private[0] == private[1]
    bounding = private[0]
    # the second run did split: every stage's part count is well above one, and the repairs all happened
    assert part_count(bounding["episodes"], SMALL_PART // 8) >= 10
    assert part_count(bounding["rows_kept"], SMALL_PART) >= 10
    assert bounding["episodes_dropped"] > 0 and bounding["steps_dropped"] > 0 and bounding["returns_clipped"] > 0


def test_part_rows_reads_the_variable_and_refuses_a_bad_value(monkeypatch):
    monkeypatch.delenv(PART_ROWS_VARIABLE, raising=False)
    assert part_rows() == PART_ROWS and part_rows(8) == PART_ROWS // 8
    for raw, want in (("400000", 400_000), ("4e5", 400_000), ("400_000", 400_000), (" 7 ", 7)):
        monkeypatch.setenv(PART_ROWS_VARIABLE, raw)
        assert part_rows() == want and part_rows(8) == max(1, want // 8)
    for raw in ("0", "-5", "2.5", "many", "nan", "inf", "1e400"):
        monkeypatch.setenv(PART_ROWS_VARIABLE, raw)
        with pytest.raises(UsageError, match=PART_ROWS_VARIABLE):
            part_rows()
