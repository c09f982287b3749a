"""`privaudit release --max-per-cell c`: capped counts, smaller sensitivities, recorded in the manifest."""

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from privaudit.cli import main
from privaudit.core.errors import ArtifactError, UsageError
from privaudit.privacy import accounting
from privaudit.privacy.events import event_from_dict
from privaudit.core.schemas import schema_errors
from privaudit.core.spec import load_spec
from privaudit.data.counts import sparse_counts
from privaudit.data.parts import PART_ROWS_VARIABLE
from privaudit.data.prepare import prepare_logs
from privaudit.data.repairs import RepairLimit
from privaudit.release.tabular import ReleaseOptions, load_release, release_logs
from tests._release_logs import random_log, slow_counts, write_spec
from tests.privacy.test_sensitivity import capped_unit

H, S, A = 5, 4, 2  # few cells: many revisits of an (s, a) inside a stay


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("cap")
    df = random_log(np.random.default_rng(11), 300, H=H, S=S, A=A)
    logs = d / "logs.parquet"
    df.write_parquet(logs)
    return {"df": df, "logs": logs, "spec": write_spec(d, H=H, S=S, A=A, terminals=())}


def _capped_reference(df, c, stationary):
    """Slow counts of the logs capped by the reference rule (one episode per unit: steps in order)."""
    n = np.zeros((S, A) if stationary else (H, S, A), dtype=np.int64)
    t = np.zeros(n.shape + (S,), dtype=np.int64)
    for _, ep in df.sort(["episode_id", "step"]).group_by("episode_id", maintain_order=True):
        steps = [(r["state"], r["action"], r["reward"], r["next_state"]) for r in ep.iter_rows(named=True)]
        for h, (s, a, _, s2) in capped_unit([steps], c, stationary)[0]:
            idx = (s, a) if stationary else (h, s, a)
            n[idx] += 1
            t[idx + (s2,)] += 1
    return n, t


@pytest.mark.parametrize("c", [1, 2])
def test_capped_release_counts_and_manifest(data, tmp_path, c):
    # rho = 1e3: sigma = sqrt(f(5, c) / rho) <= 0.095, so the discrete Gaussian draws 0 in every count
    # cell except with probability < 40 * 2 exp(-1 / (2 * 0.095^2)) < 1e-22: the release equals the
    # capped counts (zero noise reduces to the exact capped statistics).
    info = release_logs(data["logs"], data["spec"], rho=1e3, stationary=True, max_per_cell=c,
                        out=tmp_path / "r", seed=1)
    rel = load_release(info.out)  # the reader's consistency check accepts the capped sensitivities
    n, t = _capped_reference(data["df"], c, True)
    n_all, _, _ = slow_counts(data["df"], H, S, A, stationary=True)
    assert n.sum() < n_all.sum()  # the cap dropped steps
    np.testing.assert_array_equal(rel.visits, n)
    np.testing.assert_array_equal(rel.transitions_at(0), t)
    np.testing.assert_array_equal(rel.transitions_at(0).sum(axis=2), rel.visits)  # one set of kept steps
    m = info.manifest.to_dict()
    assert schema_errors(m, "release_manifest") == []
    assert m["privacy_unit"]["max_per_cell"] == c and f"c={c}" in m["bounding"]["per_cell"]
    f = {5: {1: 5, 2: 9}}[H][c]  # f(kH, c) = floor(5/c) c^2 + (5 mod c)^2
    for fam in ("visits", "transitions", "rewards"):
        natural = m["families"][fam]["l2_sensitivity"] * m["families"][fam]["value_unit"]  # stored x 1/q
        assert natural == pytest.approx(math.sqrt(2 * f))
    ev = event_from_dict(m["event"])
    assert all(leaf["max_per_cell"] == c for leaf in m["event"]["events"])
    assert accounting.event_rho(ev) <= 1e3
    assert info.bounding.cell_steps_dropped == n_all.sum() - n.sum()


def test_per_step_cap_is_a_noop_for_one_episode_units_and_keeps_the_uncapped_noise(data, tmp_path):
    a = release_logs(data["logs"], data["spec"], rho=1.0, stationary=False, max_per_cell=1, out=tmp_path / "a")
    b = release_logs(data["logs"], data["spec"], rho=1.0, stationary=False, out=tmp_path / "b")
    assert a.bounding.cell_steps_dropped == 0
    assert a.manifest.to_dict()["families"]["visits"]["noise_scale"] == b.manifest.to_dict()["families"]["visits"]["noise_scale"]


def test_manifest_without_its_cap_is_refused(data, tmp_path):
    info = release_logs(data["logs"], data["spec"], rho=1.0, max_per_cell=1, stationary=True, out=tmp_path / "r")
    m = json.loads((info.out / "manifest.json").read_text())
    del m["privacy_unit"]["max_per_cell"]
    (info.out / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ArtifactError, match="l2_sensitivity .* is below the formula"):
        load_release(info.out)


def test_cli_max_per_cell(data, tmp_path):
    r = CliRunner().invoke(main, ["release", str(data["logs"]), "--spec", str(data["spec"]), "--rho", "1",
                                  "--out", str(tmp_path / "r"), "--max-per-cell", "1", "--stationary", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert json.loads((tmp_path / "r" / "manifest.json").read_text())["privacy_unit"]["max_per_cell"] == 1
    assert out["rho"] == 1.0
    for bad, code in ((["--max-per-cell", "0"], 2),):  # (the Spark engine caps too: tests/data/spark/test_spark_engine.py)
        r = CliRunner().invoke(main, ["release", str(data["logs"]), "--spec", str(data["spec"]), "--rho", "1",
                                      "--out", str(tmp_path / "bad")] + bad)
        assert r.exit_code == code and "Traceback" not in r.output, r.output
        assert not (tmp_path / "bad").exists()


def test_prepared_logs_capped_twice_refused(data):
    from privaudit.data.prepare import prepare_logs
    from privaudit.core.spec import load_spec

    p = prepare_logs(data["logs"], load_spec(data["spec"])).with_cell_cap(1, stationary=True)
    with pytest.raises(UsageError, match="already capped"):
        p.with_cell_cap(1, stationary=True)


def test_capped_parts_are_counted_one_by_one_with_the_same_release(tmp_path, monkeypatch):
    """Units of several episodes, capped in many parts (issue 33: the parts are read one after the other,
    not as one concatenation): the same cells as the concatenation's count, the same release files."""
    df = random_log(np.random.default_rng(33), 400, H=H, S=S, A=A, n_units=120)
    df.write_parquet(tmp_path / "logs.parquet")
    spec = write_spec(tmp_path, H=H, S=S, A=A, k=2, terminals=(), unit_column="patient")
    outs = {}
    for rows in ("100000000", "200"):  # one part; parts of 100 rows (CAP_PER = 2): about 15 parts
        monkeypatch.setenv(PART_ROWS_VARIABLE, rows)
        p = prepare_logs(tmp_path / "logs.parquet", load_spec(spec)).with_cell_cap(1, stationary=True)
        parts = p.bounded_parts()
        assert (len(parts) > 5) == (rows == "200")
        whole = sparse_counts(p.bounded, p.spec, stationary=True, rewards=True, quantum=64)
        split = sparse_counts(parts, p.spec, stationary=True, rewards=True, quantum=64)
        assert whole.cells.equals(split.cells) and whole.cells.height > 10
        outs[rows] = tmp_path / f"r{rows}"
        release_logs(tmp_path / "logs.parquet", spec, rho=1.0, stationary=True, max_per_cell=1, seed=5,
                     out=outs[rows], options=ReleaseOptions(repairs=RepairLimit(accept=True)))
    for f in ("visits.parquet", "transitions.parquet"):
        assert (outs["200"] / f).read_bytes() == (outs["100000000"] / f).read_bytes(), f
