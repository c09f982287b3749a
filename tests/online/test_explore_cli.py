"""``privaudit explore``: outputs, guarantee in the manifest, refusals."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from matplotlib.figure import Figure

from privaudit.cli import main
from privaudit.core.errors import ArtifactError, MissingInputError, UsageError
from privaudit.online.env import make_env
from privaudit.privacy.budget import Budget, resolve_budget
from privaudit.online.explore import run_explore, validate_budget
from privaudit.privacy.accounting import event_epsilon
from privaudit.privacy import samplers
from privaudit.privacy.events import event_from_dict
from privaudit.online.manifest import ExploreManifest, read_explore_manifest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _run(args):
    return CliRunner().invoke(main, ["explore", *args])


def test_explore_writes_regret_manifest_and_plot(tmp_path):
    out = tmp_path / "run"
    r = _run(["--algo", "pucb", "--env", "riverswim", "--horizon", "5", "--episodes", "300", "--epsilon", "2",
              "--seed", "3", "--out", str(out)])
    assert r.exit_code == 0, r.output
    df = pl.read_parquet(out / "regret.parquet")
    assert df.columns == ["episode", "initial_state", "regret", "cumulative_regret", "realised_return"]
    assert pq.read_schema(out / "regret.parquet").metadata[b"privaudit_format_version"] == b"1"
    # the same seed through the library gives the same regret
    env = make_env("riverswim", horizon=5)
    agent, res = run_explore(env, "pucb", 300, validate_budget("pucb", 2.0, None, None), seed=3)
    np.testing.assert_array_equal(df["regret"].to_numpy(), res.regret)
    m = json.loads((out / "manifest.json").read_text())
    g = m["guarantee"]
    # --seed: the guarantee is kept for reference, but the run is seeded-insecure, not private, and no seed is written
    assert m["format_version"] == 1 and g["private"] is False and g["delta"] == 0.0
    assert g["rng"] == "seeded-insecure" and "seed" in g["note"] and "seed" not in m["config"]
    assert "seeded" in r.stderr and "guarantee: none" in r.stdout
    assert g["epsilon"] == pytest.approx(2.0) and g["epsilon"] >= 2.0
    assert sum(event_epsilon(event_from_dict(e)) for e in g["event"]["events"]) <= g["epsilon"]
    assert event_epsilon(event_from_dict(g["event"])) <= g["epsilon"] and g["event"]["label"] == "explore"
    assert "replaced" in g["neighbouring"] and "herself" in g["details"]["not_protected"]
    assert (g["mechanism"], g["noise"], g["privacy_unit"]) == ("laplace", "exact", "one user = one episode")
    # exact discrete counters: the release manifest's sampler statement (total variation 0, no extra delta)
    assert g["sampler"]["total_variation_per_draw"] == 0.0 and g["sampler"]["extra_delta"] == 0.0
    assert {e["noise"] for e in g["event"]["events"]} == {"exact"} and "not certified" not in g["statement"]
    # and names the samplers its counters drew from
    paths = {c.sampler_path for c in agent.counters_.values()}
    assert paths and None not in paths
    assert g["sampler"] == samplers.noise_statement("exact", paths=paths)
    assert m["calibration"]["lattice"]["rewards"].startswith("2^-")
    assert (out / "regret.png").stat().st_size > 1000


@pytest.mark.parametrize("kind", ["pipeline", "plain", "file"])
def test_overwrite_replaces_only_a_previous_explore_output(tmp_path, kind):
    """Before: `explore --out DIR --overwrite` deleted whatever DIR held (a pipeline run with its private log,
    a data folder) and wrote the explore run in its place (fresh-user pass)."""
    out = tmp_path / "d"
    if kind == "file":
        out.write_text("keep\n")
    else:
        out.mkdir()
        (out / "data.parquet").write_text("keep\n")
        if kind == "pipeline":
            (out / "summary.json").write_text('{"kind": "privaudit-pipeline-summary"}\n')
            (out / "manifest.json").write_text('{"kind": "privaudit-release"}\n')
    before = sorted(p.name for p in tmp_path.rglob("*"))
    args = ["--algo", "pucb", "--env", "riverswim", "--horizon", "3", "--episodes", "5", "--epsilon", "1",
            "--out", str(out)]
    r = _run(args + ["--overwrite"])
    assert r.exit_code == 2, r.output
    if kind != "file":
        assert r.output.strip() == (f"error: `--overwrite` replaces only a previous explore output (a folder whose "
                                    f"manifest.json has kind 'privaudit-explore'); {out} is not one, and it would "
                                    "be deleted. Choose another `--out`.")
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    # a previous explore output is replaced
    other = tmp_path / "e"
    assert _run(args[:-1] + [str(other)]).exit_code == 0
    r = _run(args[:-1] + [str(other), "--overwrite", "--seed", "1"])
    assert r.exit_code == 0, r.output
    assert json.loads((other / "manifest.json").read_text())["guarantee"]["rng"] == "seeded-insecure"


def test_explore_figure_title_fits_the_figure(tmp_path, monkeypatch):
    """Before: "ngo on synthetic-linear (H=20, S=2, A=100), (7.76622, 1e-06)-JDP (seeded: not private)" on one
    line ran off the 6-inch figure (fresh-user pass)."""
    seen = []
    save = Figure.savefig

    def spy(fig, *a, **k):
        fig.canvas.draw()
        seen.append([(ax.title.get_window_extent(), fig.bbox) for ax in fig.axes])
        return save(fig, *a, **k)

    monkeypatch.setattr(Figure, "savefig", spy)
    r = _run(["--algo", "ngo", "--env", "synthetic-linear", "--horizon", "2", "--episodes", "20", "--rho", "1",
              "--seed", "1", "--out", str(tmp_path / "run")])
    assert r.exit_code == 0, r.output
    [[(title, fig)]] = seen
    assert fig.x0 <= title.x0 and title.x1 <= fig.x1, (title, fig)


def test_explore_rho_reports_eps_delta_and_twin_has_no_guarantee(tmp_path):
    r = _run(["--algo", "pucb", "--env", "random-tabular", "--states", "3", "--actions", "2", "--horizon", "3",
              "--episodes", "50", "--rho", "0.5", "--delta", "1e-5", "--seed", "1", "--out", str(tmp_path / "a"),
              "--json"])
    assert r.exit_code == 0, r.output
    g = json.loads(r.stdout)["guarantee"]
    assert g["rng"] == "seeded-insecure" and g["private"] is False
    from privaudit.privacy.accounting import zcdp_to_dp
    assert g["rho"] == pytest.approx(0.5) and g["epsilon"] == pytest.approx(zcdp_to_dp(g["rho"], 1e-5))
    r = _run(["--algo", "ucb-vi", "--env", "riverswim", "--episodes", "20", "--out", str(tmp_path / "b"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["guarantee"]["private"] is False
    assert json.loads(r.output)["guarantee"]["sampler"] is None


@pytest.mark.parametrize("args, match", [
    (["--algo", "ucb-vi", "--epsilon", "1"], "not private"),
    (["--algo", "pucb"], "give a budget"),
    (["--algo", "pucb", "--epsilon", "1", "--rho", "1"], "not both"),
    (["--algo", "pucb", "--delta", "0.1"], "`--delta` alone is not a budget"),
    (["--algo", "luyo", "--epsilon", "1"], "`--epsilon` alone is a pure epsilon-DP budget"),
    (["--algo", "pucb", "--epsilon", "-1"], "must be a positive finite number"),
    (["--algo", "pucb", "--epsilon", "1", "--actions", "3"], "does not apply"),
    # one rule for tiny budgets in every command (privacy.budget.check_reportable), as `release` refuses them
    (["--algo", "pucb", "--rho", "1e-300"], "`--rho` = 1e-300 is too small"),
    (["--algo", "pucb", "--epsilon", "1e-300"], "`--epsilon` = 1e-300 is too small"),
])
def test_explore_refuses_bad_arguments(tmp_path, args, match):
    out = tmp_path / "x"
    r = _run([*args, "--env", "riverswim", "--episodes", "10", "--out", str(out)])
    assert r.exit_code == 2 and match in r.output and "Traceback" not in r.output
    assert not out.exists()


def test_explore_refuses_existing_out_and_oversized_state(tmp_path):
    out = tmp_path / "x"
    out.mkdir()
    r = _run(["--algo", "ucb-vi", "--env", "riverswim", "--episodes", "10", "--out", str(out)])
    assert r.exit_code == 2 and "already exists" in r.output
    r = _run(["--algo", "ucb-vi", "--env", "icu-sepsis", "--episodes", "10", "--out", str(tmp_path / "icu")])
    assert r.exit_code == 2 and "GiB" in r.output and not (tmp_path / "icu").exists()


def test_epsilon_inf_is_the_twin(tmp_path):
    r = _run(["--algo", "pucb", "--env", "riverswim", "--episodes", "20", "--epsilon", "inf", "--seed", "0",
              "--out", str(tmp_path / "a"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["guarantee"]["private"] is False
    m = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert m["config"]["epsilon"] == "inf" and m["guarantee"]["event"] is None
    assert (m["guarantee"]["mechanism"], m["guarantee"]["noise"], m["guarantee"]["sampler"]) == (None, None, None)


def test_explore_budget_is_the_shared_budget():
    """explore resolves its budget with privaudit.privacy.budget (no budget type of its own)."""
    lap = validate_budget("pucb", 2.0, None, None)
    assert isinstance(lap, Budget) and lap == resolve_budget(epsilon=2.0, mechanism="laplace")
    gau = validate_budget("pucb", None, 0.5, 1e-5)
    assert (gau.mechanism, gau.rho, gau.delta, gau.requested) == ("gaussian", 0.5, 1e-5, {"rho": 0.5, "delta": 1e-5})
    assert validate_budget("pucb", None, 0.5, None).delta == resolve_budget(rho=0.5).delta
    assert validate_budget("pucb", math.inf, None, None) is None and validate_budget("ucb-vi", None, None, None) is None
    with pytest.raises(UsageError, match="pure epsilon-DP"):
        lap.reported_at(1e-5)
    with pytest.raises(UsageError, match="`delta` must be in"):
        resolve_budget(rho=0.5).reported_at(1.5)


def test_seeded_linear_explore_writes_no_seed_and_is_not_private(tmp_path):
    r = _run(["--algo", "ngo", "--env", "synthetic-linear", "--episodes", "30", "--rho", "1", "--seed", "987654",
              "--out", str(tmp_path / "ngo")])
    assert r.exit_code == 0, r.output
    text = (tmp_path / "ngo" / "manifest.json").read_text()
    m = json.loads(text)
    assert "987654" not in text and "seed" not in m["config"]
    assert m["guarantee"]["private"] is False and m["guarantee"]["rng"] == "seeded-insecure"
    assert "WARNING" in r.stderr and "seeded-insecure" in r.stderr
    r = _run(["--algo", "ngo", "--env", "synthetic-linear", "--episodes", "30", "--rho", "1",
              "--out", str(tmp_path / "ngo2")])
    assert r.exit_code == 0, r.output
    g = json.loads((tmp_path / "ngo2" / "manifest.json").read_text())["guarantee"]
    assert g["private"] is True and g["rng"] == "secure" and "WARNING" not in r.stderr


def test_explore_missing_mdp_file_is_a_usage_error_with_its_path(tmp_path):
    """A missing MDP.npz is bad input (exit 2, as `evaluate --mdp`), located by its absolute path."""
    out = tmp_path / "x"
    r = _run(["--algo", "ucb-vi", "--env", str(tmp_path / "nope.npz"), "--episodes", "10", "--out", str(out)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "`--env`" in r.output and str(tmp_path / "nope.npz") in r.output and "does not exist" in r.output
    assert not out.exists()
    (tmp_path / "bad.npz").write_bytes(b"not a zip")  # unreadable: invalid data, exit 1 (as evaluate)
    r = _run(["--algo", "ucb-vi", "--env", str(tmp_path / "bad.npz"), "--episodes", "10", "--out", str(out)])
    assert r.exit_code == 1 and "cannot read MDP file" in r.output and not out.exists()


def test_explore_manifest_is_typed_and_reads_back(tmp_path):
    """write_explore returns the typed manifest; read_explore_manifest reads the folder back to an equal object
    (schema checked both ways); a manifest of the first explore version (no rng, sampler or grid; events in the
    older mechanism/family/scale form) still reads; a future version and a seed in config are refused."""
    out = tmp_path / "run"
    r = _run(["--algo", "pucb", "--env", "random-tabular", "--states", "3", "--actions", "2", "--horizon", "3",
              "--episodes", "40", "--epsilon", "1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    m = read_explore_manifest(out)
    assert isinstance(m, ExploreManifest) and m.guarantee.private and m.guarantee.rng == "secure"
    assert m.guarantee.epsilon == 1.0 and m.guarantee.rho is None and m.summary.episodes == 40
    assert m.environment.n_states == 3 and m.to_dict() == json.loads((out / "manifest.json").read_text())
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.guarantee.private = False  # type: ignore[misc]
    old = read_explore_manifest(FIXTURES / "explore_v1")
    assert old.guarantee.rng is None and old.guarantee.sampler is None and old.guarantee.private is True
    assert old.guarantee.events[0]["mechanism"] == "laplace" and "herself" in old.guarantee.text["not_protected"]
    assert old.summary.cumulative_regret == 12.5
    doc = json.loads((out / "manifest.json").read_text())
    for bad, match in ((dict(doc, format_version=2), "format_version 2 is not supported"),
                       (dict(doc, config={**doc["config"], "seed": 3}), r"\$\.config"),
                       (dict(doc, summary={**doc["summary"], "episodes": 0}), r"\$\.summary\.episodes")):
        with pytest.raises(ArtifactError, match=match):
            ExploreManifest.from_dict(bad, "m.json")
    with pytest.raises(MissingInputError):
        read_explore_manifest(tmp_path / "nope")
