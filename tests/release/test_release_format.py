"""Release format versions: version 3 (transition rows (h, state, next_state), a count column per action) written,
versions 1 and 2 still read, others refused.

The fixtures (a per-step release with private rewards and a stationary one, H=3, S=4, A=2, seeded, so not
private) were written by privaudit itself: tests/fixtures/release_v1 before format version 2 existed,
tests/fixtures/release_v2 (the bare value column) before format version 3 existed.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import polars as pl
import pytest
from click.testing import CliRunner

import privaudit
from privaudit.cli import main
from privaudit.core.errors import ArtifactError
from privaudit.learners.tabular.dp_apvi import DPAPVI
from privaudit.privacy.budget import resolve_budget
from privaudit.core.spec import load_spec
from privaudit.data import counts
from privaudit.release.artifact import numpy_of
from privaudit.release.writer import TransitionWriter
from privaudit.release.manifest import WIDE_ORDER
from privaudit.release.mechanism import TabularRelease
from privaudit.release.tabular import load_release, release_logs
from tests._release_logs import random_log, write_spec

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "release_v1"
FIXTURE_2 = FIXTURE.parent / "release_v2"
H, S, A = 3, 4, 2
ACTIONS = ["action_0", "action_1"]


def _scatter(path: Path, names: list[str], shape: tuple) -> np.ndarray:
    """Independent oracle for a long (index columns + value) table: scatter value by its index columns."""
    tab = pq.read_table(path)
    out = np.full(shape, np.iinfo(np.int64).min, dtype=np.int64)
    idx = tuple(tab.column(n).to_numpy().astype(np.int64) for n in names)
    out[idx] = tab.column("value").to_numpy()
    assert (out != np.iinfo(np.int64).min).all()  # every cell present
    return out


@pytest.mark.parametrize("kind", ["per_step", "stationary"])
def test_version_1_fixture_reads_as_written(kind):
    rel = load_release(FIXTURE / kind)
    assert rel.manifest.format_version == 1 and rel.stationary == (kind == "stationary")
    lead = [] if rel.stationary else ["h"]
    shape_sa = (S, A) if rel.stationary else (H, S, A)
    t = _scatter(FIXTURE / kind / "transitions.parquet", lead + ["state", "action", "next_state"], shape_sa + (S,))
    for h in range(H):
        np.testing.assert_array_equal(rel.transitions_at(h), t if rel.stationary else t[h])
    np.testing.assert_array_equal(rel.visits, _scatter(FIXTURE / kind / "visits.parquet", lead + ["state", "action"],
                                                       shape_sa))
    assert rel.rewards is not None and rel.rewards.shape == shape_sa
    assert (rel.transitions_at(0) != 0).mean() > 0.5  # noisy values, not an empty table


@pytest.mark.parametrize("kind", ["per_step", "stationary"])
def test_version_2_fixture_reads_as_written(kind):
    """The bare value column of version 2, read with pyarrow alone in its documented order, is what the reader
    returns (the old layout still reads)."""
    rel = load_release(FIXTURE_2 / kind)
    assert rel.manifest.format_version == 2 and rel.stationary == (kind == "stationary")
    pf = pq.ParquetFile(FIXTURE_2 / kind / "transitions.parquet")
    assert pf.schema_arrow.names == ["value"]
    for h in range(H):
        want = pf.read_row_group(0 if rel.stationary else h).column("value").to_numpy().reshape(S, A, S)
        np.testing.assert_array_equal(rel.transitions_at(h), want)
    assert (rel.transitions_at(0) != 0).mean() > 0.5 and rel.rewards is not None


def _as_version_3(src: Path, dst: Path) -> None:
    """Rewrite an older release as version 3 (the values unchanged) with the version-3 writer."""
    old = load_release(src)
    shutil.copytree(src, dst)
    st = old.stationary
    w = TransitionWriter(dst / "transitions.parquet", H, S, A, stationary=st)
    for h, sl in old.iter_transitions():
        w.write(h, sl)
    w.close()
    m = json.loads((src / "manifest.json").read_text())
    m["format_version"] = 3
    m["families"]["transitions"].update(columns=([] if st else ["h"]) + ["state", "next_state"] + ACTIONS, dense={
        "row_groups": 1 if st else H, "row_group_shape": [S, A, S], "order": WIDE_ORDER})
    (dst / "manifest.json").write_text(json.dumps(m))


@pytest.mark.parametrize("fixture", [FIXTURE, FIXTURE_2], ids=["v1", "v2"])
@pytest.mark.parametrize("kind", ["per_step", "stationary"])
def test_every_version_gives_the_same_arrays_and_the_same_policy(fixture, kind, tmp_path):
    """One reader for every version: identical arrays, so DP-APVI (the learner that reads releases) learns the
    identical policy from the old layout and from the new one."""
    _as_version_3(fixture / kind, tmp_path / "v3")
    old, new = load_release(fixture / kind), load_release(tmp_path / "v3")
    assert new.manifest.format_version == 3 and old.manifest.format_version in (1, 2)
    assert pq.ParquetFile(tmp_path / "v3" / "transitions.parquet").schema_arrow.names == (
        ([] if kind == "stationary" else ["h"]) + ["state", "next_state"] + ACTIONS)
    for h in range(H):
        np.testing.assert_array_equal(old.transitions_at(h), new.transitions_at(h))
    np.testing.assert_array_equal(old.visits, new.visits)
    p1 = DPAPVI().fit(old).policy_
    p2 = DPAPVI().fit(new).policy_
    np.testing.assert_array_equal(p1.table, p2.table)


@pytest.mark.parametrize("fixture", [FIXTURE, FIXTURE_2], ids=["v1", "v2"])
def test_train_release_cli_reads_older_versions_and_refuses_a_future_version(fixture, tmp_path):
    res = CliRunner().invoke(main, ["train", "--release", str(fixture / "per_step"), "--spec",
                                    str(fixture / "spec.json"), "--algo", "dp-apvi", "--out", str(tmp_path / "p")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "p" / "policy.parquet").exists()
    future = tmp_path / "future"
    shutil.copytree(fixture / "per_step", future)
    m = json.loads((future / "manifest.json").read_text())
    (future / "manifest.json").write_text(json.dumps({**m, "format_version": 4}))
    with pytest.raises(ArtifactError, match="unknown release format version: format_version is 4.*upgrade"):
        load_release(future)
    res = CliRunner().invoke(main, ["train", "--release", str(future), "--algo", "dp-apvi", "--out",
                                    str(tmp_path / "p3")])
    assert res.exit_code == 1 and "release format version" in res.stderr and "Traceback" not in res.output
    assert not (tmp_path / "p3").exists()


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    d = tmp_path_factory.mktemp("v2")
    spec_path = write_spec(d, H=H, S=S, A=A, terminals=(3,))
    df = random_log(np.random.default_rng(4), 60, H=H, S=S, A=A, terminals=(3,))
    df.write_parquet(d / "logs.parquet")
    release_logs(d / "logs.parquet", spec_path, rho=0.5, out=d / "r", seed=9)
    release_logs(d / "logs.parquet", spec_path, rho=0.5, out=d / "rs", seed=9, stationary=True)
    return {"dir": d, "spec": load_spec(spec_path), "df": df}


def _noisy_slices(written, stationary: bool) -> dict:
    """The noisy transition slices TabularRelease.apply draws with the release's seed (an independent oracle)."""
    rel = TabularRelease.plan(written["spec"], resolve_budget(rho=0.5), stationary=stationary)
    exact = counts.sparse_counts(written["df"].select("step", "state", "action", "next_state", "reward"),
                                 written["spec"], stationary=stationary, rewards=True,
                                 quantum=rel.families["rewards"].quantum)
    return dict(rel.apply(exact, rng=np.random.default_rng(9)).transitions)


@pytest.mark.parametrize("stationary", [False, True])
def test_version_3_table_reads_with_polars_alone_and_names_every_cell(written, stationary):
    """Read with polars alone (no privaudit reader, no manifest): one row per (h, state, next_state) and a count
    column per action; unpivoted, every cell (h, state, action, next_state) is named by its index columns and
    holds the noisy count TabularRelease.apply draws with the same seed, which load_release returns too."""
    out = written["dir"] / ("rs" if stationary else "r")
    df = pl.read_parquet(out / "transitions.parquet")
    lead = [] if stationary else ["h"]
    assert df.columns == lead + ["state", "next_state"] + ACTIONS and df.height == (1 if stationary else H) * S * S
    cells = (df.unpivot(index=lead + ["state", "next_state"], variable_name="action", value_name="value")
             .with_columns(pl.col("action").str.strip_prefix("action_").cast(pl.Int64)))
    assert cells.height == (1 if stationary else H) * S * A * S
    got = np.full(((1 if stationary else H), S, A, S), np.iinfo(np.int64).min)
    h_idx = np.zeros(cells.height, int) if stationary else cells["h"].to_numpy()
    got[h_idx, cells["state"].to_numpy(), cells["action"].to_numpy(), cells["next_state"].to_numpy()] = \
        cells["value"].to_numpy()
    rel = load_release(out)
    for h, want in _noisy_slices(written, stationary).items():
        np.testing.assert_array_equal(got[h], want)
        np.testing.assert_array_equal(rel.transitions_at(h), want)


@pytest.mark.parametrize("stationary", [False, True])
def test_version_3_file_states_its_layout_to_pyarrow(written, stationary):
    """pyarrow alone: the schema (index columns, an integer count column per action), the key-value metadata
    (version, shape, dimension names, order), one row group per h; the manifest says the same."""
    out = written["dir"] / ("rs" if stationary else "r")
    pf = pq.ParquetFile(out / "transitions.parquet")
    assert all(pf.schema_arrow.field(c).type == pa.int32() for c in ACTIONS)
    meta = {k.decode(): v.decode() for k, v in pf.schema_arrow.metadata.items()}
    shape = [S, A, S] if stationary else [H, S, A, S]
    dims = ["state", "action", "next_state"] if stationary else ["h", "state", "action", "next_state"]
    assert meta["privaudit.format_version"] == "3" and json.loads(meta["privaudit.shape"]) == shape
    assert json.loads(meta["privaudit.dims"]) == dims
    assert meta["privaudit.order"] == WIDE_ORDER and pf.num_row_groups == (1 if stationary else H)
    for h, want in _noisy_slices(written, stationary).items():
        tab = pf.read_row_group(h)
        for a, c in enumerate(ACTIONS):  # column action_a, rows (state, next_state) row-major
            np.testing.assert_array_equal(tab.column(c).to_numpy().reshape(S, S), want[:, a, :])
    m = json.loads((out / "manifest.json").read_text())
    assert m["format_version"] == 3 and m["families"]["transitions"]["shape"] == shape
    assert m["families"]["transitions"]["columns"] == pf.schema_arrow.names
    assert m["families"]["transitions"]["dense"]["row_group_shape"] == [S, A, S]


def test_version_3_corruption_is_refused(written, tmp_path):
    out = tmp_path / "r"
    shutil.copytree(written["dir"] / "r", out)
    m = json.loads((out / "manifest.json").read_text())
    # a version-2 file under a version-3 manifest
    shutil.copy(FIXTURE_2 / "per_step" / "transitions.parquet", out / "transitions.parquet")
    with pytest.raises(ArtifactError, match=r"format version 3 stores integer columns \['h', 'state', 'next_state'\] "
                                            r"and action_0 .. action_1.*found columns \['value'\]"):
        load_release(out)
    # rows out of order in row group 1 (the cells would be silently misplaced)
    w = TransitionWriter(out / "transitions.parquet", H, S, A, stationary=False)
    for h, sl in load_release(written["dir"] / "r").iter_transitions():
        w.write(h, sl)
    w.close()
    tab = pq.read_table(out / "transitions.parquet")
    order = np.arange(tab.num_rows)
    order[S * S], order[S * S + 1] = order[S * S + 1], order[S * S]
    pq.write_table(tab.take(pa.array(order)), out / "transitions.parquet", row_group_size=S * S)
    rel = load_release(out)
    rel.transitions_at(0)
    with pytest.raises(ArtifactError, match=r"rows must list every cell of \['state', 'next_state'\].*once, sorted"):
        rel.transitions_at(1)
    # a manifest whose dense layout disagrees with the domain
    m["families"]["transitions"]["dense"]["row_group_shape"] = [S, S, A]
    (out / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ArtifactError, match=r"row groups of shape \(4, 4, 2\).*inconsistent"):
        load_release(out)


@pytest.mark.parametrize("kind,missing", [("per_step", "visits.parquet"), ("stationary", "transitions.parquet"),
                                           ("per_step", "rewards.parquet")])
def test_a_missing_release_file_says_missing(kind, missing, tmp_path):
    """A release folder without one of its tables said "visits.parquet: cannot read: .../visits.parquet" (the
    path twice, no reason); it says the file is missing and the release incomplete (fresh-user pass, hfu)."""
    out = tmp_path / kind
    shutil.copytree(FIXTURE / kind, out)
    (out / missing).unlink()
    with pytest.raises(ArtifactError, match=rf"{missing}: missing: the release is incomplete"):
        load_release(out)


def test_one_reader_for_release_tables():
    """Only privaudit.release.artifact opens a release's Parquet tables: every other reader (learners,
    train --release, the pipeline, the auditor, the Spark engine's output) goes through load_release."""
    root = Path(privaudit.__file__).resolve().parent
    pattern = re.compile(r"read_row_group|ParquetFile\(|FILES\[\"(visits|transitions|rewards)\"\]")
    users = sorted(str(p.relative_to(root)) for p in root.rglob("*.py") if pattern.search(p.read_text()))
    # artifact.py reads; release.py only writes (FILES for the output paths)
    assert users == ["release/artifact.py", "release/tabular.py"], users
    src = (root / "release" / "tabular.py").read_text()
    assert "read_row_group" not in src and "ParquetFile(" not in src


def test_numpy_of_reads_integer_columns_from_their_buffers():
    """Several chunks, a sliced chunk (non-zero offset) and an empty chunk give the values in order; nulls and
    non-integer columns are refused (a release never holds them)."""
    a = pa.array(np.arange(10, dtype=np.int16))
    col = pa.chunked_array([a.slice(3, 4), pa.array(np.zeros(0, dtype=np.int16)), a.slice(0, 2)])
    np.testing.assert_array_equal(numpy_of(col, "x"), [3, 4, 5, 6, 0, 1])
    assert numpy_of(col, "x").dtype == np.int16
    assert numpy_of(pa.chunked_array([], type=pa.int32()), "x").shape == (0,)
    with pytest.raises(ArtifactError, match=r"f.parquet: value: must hold integers without nulls.*1 nulls"):
        numpy_of(pa.chunked_array([pa.array([1, None, 3], type=pa.int32())]), "f.parquet: value")
    with pytest.raises(ArtifactError, match="found type double"):
        numpy_of(pa.chunked_array([pa.array([1.0])]), "f.parquet: value")


def test_writing_and_reading_a_release_does_not_import_pandas(tmp_path):
    """pa.array(ndarray), Array.to_numpy and pq.read_table import pandas inside pyarrow (about 1 s of CPU,
    issue 19); the release writer and reader avoid them. Checked in a fresh interpreter."""
    spec_path = write_spec(tmp_path, H=H, S=S, A=A, terminals=(3,))
    random_log(np.random.default_rng(4), 30, H=H, S=S, A=A, terminals=(3,)).write_parquet(tmp_path / "logs.parquet")
    code = ("import sys\nfrom privaudit.release.tabular import load_release, release_logs\n"
            f"release_logs({str(tmp_path / 'logs.parquet')!r}, {str(spec_path)!r}, rho=0.5, "
            f"out={str(tmp_path / 'r')!r}, seed=1)\n"
            f"r = load_release({str(tmp_path / 'r')!r})\nr.transitions_at(1)\n"
            f"load_release({str(FIXTURE / 'per_step')!r}).transitions_at(1)\n"
            f"load_release({str(FIXTURE_2 / 'per_step')!r}).transitions_at(1)\n"
            "print('pandas' in sys.modules)")
    root = Path(privaudit.__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"
