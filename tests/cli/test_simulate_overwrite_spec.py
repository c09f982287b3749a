"""`simulate --overwrite` replaces a spec only while it is exactly as simulate wrote it.

Before: a spec counted as simulate's when its description ended "(privaudit simulate).". The bundled
sample spec carries that description, so a user who copied it, edited it (their k, their columns) and
kept the description lost it to `simulate --spec-out my_spec.json --overwrite`. Simulate now writes
``$.written_by = {"tool": "privaudit simulate", "sha256": <hash of the rest>}``; an edit breaks the mark.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from privaudit.cli import main
from privaudit.core.spec import WRITTEN_BY_KEY

SAMPLE_SPEC = Path(__file__).resolve().parents[2] / "sample_data" / "icu_sepsis_spec.json"
ARGS = ["simulate", "random-tabular", "--states", "3", "--actions", "2", "--horizon", "2", "--episodes", "5",
        "--seed", "0"]


def _simulate(tmp_path, spec, *extra):
    return CliRunner().invoke(main, [*ARGS, "--out", str(tmp_path / "l.parquet"), "--spec-out", str(spec), *extra])


def test_an_edited_copy_of_the_sample_spec_is_never_replaced(tmp_path):
    doc = json.loads(SAMPLE_SPEC.read_text())
    assert doc["description"].endswith("(privaudit simulate).") and WRITTEN_BY_KEY in doc
    doc["privacy_unit"] = {"column": "patient_id", "max_episodes": 3}  # the user's own unit, mark kept
    mine = tmp_path / "my_spec.json"
    mine.write_text(json.dumps(doc, indent=2))
    before = mine.read_bytes()
    res = _simulate(tmp_path, mine, "--overwrite")
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert "replaces only an unedited spec written by privaudit simulate" in res.output
    assert mine.read_bytes() == before and not (tmp_path / "l.parquet").exists()


def test_an_unmarked_spec_describing_itself_as_simulated_is_refused_with_its_reason(tmp_path):
    # a spec simulate wrote before the mark existed, or a copy with the mark removed: edited or not cannot
    # be told, so it is refused and the message says to remove it by hand or choose another path
    doc = json.loads(SAMPLE_SPEC.read_text())
    del doc[WRITTEN_BY_KEY]
    old = tmp_path / "old_spec.json"
    old.write_text(json.dumps(doc, indent=2))
    before = old.read_bytes()
    res = _simulate(tmp_path, old, "--overwrite")
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert "no $.written_by mark" in res.output and "Remove the file yourself" in res.output
    assert old.read_bytes() == before and not (tmp_path / "l.parquet").exists()


def test_a_spec_simulate_wrote_is_replaced_even_reformatted(tmp_path):
    spec = tmp_path / "s.json"
    assert _simulate(tmp_path, spec, "--dataset-id", "first").exit_code == 0
    doc = json.loads(spec.read_text())
    spec.write_text(json.dumps(doc, sort_keys=True))  # layout changed, content not: still simulate's
    res = _simulate(tmp_path, spec, "--dataset-id", "second", "--overwrite")
    assert res.exit_code == 0, res.output
    assert json.loads(spec.read_text())["dataset_id"] == "second"
