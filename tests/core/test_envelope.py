"""One shape of the guarantee (the envelope) in the release manifest, the explore manifest, summary.json and the
audit report's claim.

The fixtures in tests/fixtures/before_envelope were written by main before the envelope (a version-3 release of
300 simulated episodes at rho = 1, two explore runs, a pipeline summary, an audit report; README.md there): each must still load,
be written back byte for byte, and read through its one reader (``as_envelope``) as exactly the envelope today's
code writes for the same run (a guarantee depends on public facts and the budget only, not on the noise drawn).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from privaudit.audit.claim import Claim
from privaudit.audit.report import REPORT_FORMAT, AuditReport, load_report
from privaudit.cli import main
from privaudit.core.envelope import (AUDIT_UNIT, ENVELOPE_KEYS, EXPLORE_WORDS, PIPELINE_DETAILS, as_envelope,
                                     claim_envelope, noise_mode, report_claim)
from privaudit.core.errors import ArtifactError
from privaudit.core.spec import WRITTEN_BY_KEY, written_by
from privaudit.online.manifest import ExploreManifest
from privaudit.pipeline.render import render_markdown
from privaudit.pipeline.report import SUMMARY_FORMAT, audit_summary, load_summary, summary_guarantee
from privaudit.pipeline.values import upgrade_policy_entry
from privaudit.release.manifest import ReleaseManifest
from privaudit.release.tabular import load_release

OLD = Path(__file__).resolve().parents[1] / "fixtures" / "before_envelope"
#: How each fixture was made (the same command today, in a fresh folder).
EXPLORE_RUNS = {"explore_pucb": ["--algo", "pucb", "--env", "riverswim", "--episodes", "50", "--epsilon", "1"],
                "explore_ngo": ["--algo", "ngo", "--env", "synthetic-linear", "--episodes", "30", "--rho", "2"]}


def run(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """Today's artifacts for the fixtures' runs: the release from the same spec and budget, the explore runs."""
    d = tmp_path_factory.mktemp("fresh")
    run("simulate", "random-tabular", "--states", 3, "--actions", 2, "--horizon", 2, "--instance-seed", 8,
        "--episodes", 300, "--seed", 0, "--out", d / "logs.parquet", "--spec-out", d / "spec.json")
    new_spec = json.loads((d / "spec.json").read_text())
    # the same spec plus the provenance mark simulate writes since 2026-12-03 (the fixture predates it)
    assert written_by(new_spec) == "privaudit simulate"
    assert {k: v for k, v in new_spec.items() if k != WRITTEN_BY_KEY} == json.loads((OLD / "spec.json").read_text())
    run("release", d / "logs.parquet", "--spec", OLD / "spec.json", "--rho", 1, "--out", d / "release")
    for name, args in EXPLORE_RUNS.items():
        run("explore", *args, "--out", d / name)
    return d


def _old_and_new(fresh, name):
    if name == "release":
        return load_release(OLD / "release").manifest, load_release(fresh / "release").manifest
    return ExploreManifest.read(OLD / f"{name}.json"), ExploreManifest.read(fresh / name / "manifest.json")


@pytest.mark.parametrize("name", ["release", "explore_pucb", "explore_ngo"])
def test_an_old_manifest_reads_as_the_envelope_written_now(fresh, name, tmp_path):
    old, new = _old_and_new(fresh, name)
    assert "details" not in old.guarantee and list(new.guarantee)[-8:] == list(ENVELOPE_KEYS)
    assert new.envelope == new.guarantee  # written in the envelope's shape: read as written
    old_env, new_env = dict(old.envelope), dict(new.guarantee)
    if name == "explore_ngo":  # Ngo et al.'s noisy targets are now released on the public switch schedule
        # (fewer releases, so a different composed event than the fixture's run): the old event, as recorded
        assert old_env.pop("event")["events"] == list(old.guarantee["events"])
        new_env.pop("event")
    assert old_env == new_env  # every key and value, in the same order
    assert list(old_env) == list(new_env)
    # not rewritten on reading: the old file comes back byte for byte
    src = OLD / ("release/manifest.json" if name == "release" else f"{name}.json")
    assert old.write(tmp_path / "m.json").read_text() == src.read_text()


def test_the_release_envelope_repeats_the_manifests_facts(fresh):
    m = load_release(fresh / "release").manifest
    g = m.guarantee
    assert (g["mechanism"], g["noise"], g["neighbouring"], g["rng"]) == (m.mechanism, m.noise, m.neighbouring,
                                                                          m.rng)
    assert g["privacy_unit"] == m.privacy_unit.to_dict() and g["event"] == m.event and g["details"] == {}
    assert g.events == tuple(m.event["events"])  # the composed event's families


@pytest.mark.parametrize("key, value", [("rng", "seeded-insecure"), ("noise", "rounded"),
                                        ("privacy_unit", {"column": "unit_id", "max_episodes": 2})])
def test_an_envelope_that_contradicts_its_manifest_is_refused(fresh, tmp_path, key, value):
    """Each fact stands twice on disk: an edit of one copy alone is refused on reading, naming the key."""
    dst = tmp_path / "rel"
    dst.mkdir()
    for f in (fresh / "release").iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    doc = json.loads((dst / "manifest.json").read_text())
    doc["guarantee"][key] = value
    (dst / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(ArtifactError, match=rf"guarantee\.{key} is .* but the manifest's {key} is"):
        load_release(dst)


def test_explore_envelope_of_a_non_private_run(tmp_path):
    run("explore", "--algo", "ucb-vi", "--env", "riverswim", "--episodes", 20, "--out", tmp_path / "twin")
    g = ExploreManifest.read(tmp_path / "twin" / "manifest.json").guarantee
    assert list(g) == ["private", "epsilon", "delta", "rho", *ENVELOPE_KEYS]
    assert (g.private, g["mechanism"], g["noise"], g["event"], g["sampler"]) == (False, None, None, None, None)
    assert set(g["details"]) == set(EXPLORE_WORDS) and g.events == ()


def test_the_first_explore_format_reads_as_the_envelope():
    """The oldest explore manifest (no rng, float Laplace counters): rng null (never guessed), the noise mode of
    its events, its events as one composed event."""
    m = ExploreManifest.read(Path(__file__).resolve().parents[1] / "fixtures" / "explore_v1" / "manifest.json")
    env = m.envelope
    assert list(env)[-8:] == list(ENVELOPE_KEYS) and env["rng"] is None
    assert (env["mechanism"], env["noise"]) == ("laplace", "rounded")
    assert env["event"]["events"] == list(m.guarantee["events"]) and env.events == m.guarantee.events


def test_an_old_summary_loads_renders_and_reads_as_the_envelope(tmp_path):
    old = load_summary(OLD / "summary.json")
    # written back as read: the file's own content, but for its policies' certificates, which a summary from
    # before `pessimistic_estimate` states for unproven learners too (pipeline.values.upgrade_policy_entry)
    raw = json.loads((OLD / "summary.json").read_text())
    raw["policies"] = [upgrade_policy_entry(p) for p in raw["policies"]]
    assert json.loads(SUMMARY_FORMAT.dump(old, tmp_path / "s.json").read_text()) == raw
    env = summary_guarantee(old)
    assert list(env)[-8:] == list(ENVELOPE_KEYS) and set(env["details"]) == set(PIPELINE_DETAILS)
    assert (env["mechanism"], env["noise"], env["rng"]) == ("gaussian", "exact", old["rng"])
    assert env["sampler"] == old["privacy"]["parts"][0]["sampler"] and env["event"] == old["privacy"]["event"]
    # the same summary with its guarantee in the envelope's shape: valid now, and rendered the same
    new = {**old, "privacy": dict(env)}
    SUMMARY_FORMAT.check_write(new)
    assert summary_guarantee(new) == env and render_markdown(new) == render_markdown(old)
    for bad in ({**env, "details": {}}, {**env, "parts": env["details"]["parts"]}, {**env, "mechanism": "laplace"}):
        with pytest.raises(ArtifactError, match=r"\$\.privacy"):
            SUMMARY_FORMAT.check_write({**old, "privacy": bad})


def test_a_statement_alone_has_no_envelope_and_noise_modes_combine():
    statement = json.loads((OLD / "release" / "manifest.json").read_text())["guarantee"]
    with pytest.raises(ArtifactError, match="no envelope shape"):
        as_envelope(statement)
    assert ReleaseManifest.read(OLD / "release" / "manifest.json").envelope["details"] == {}
    assert noise_mode([]) is None and noise_mode(["exact", "exact"]) == "exact"
    assert noise_mode(["exact", "rounded", "continuous"]) == "continuous"


def test_an_old_audit_report_loads_and_its_claim_reads_as_the_envelope(tmp_path):
    """The fixture: ``audit --mechanism release --claim-rho 1 --trials 2000`` on the fixtures' logs."""
    old = load_report(OLD / "audit_report.json")
    assert REPORT_FORMAT.dump(old, tmp_path / "r.json").read_text() == (OLD / "audit_report.json").read_text()
    env = report_claim(old)
    written_now = claim_envelope(Claim.from_rho(1.0, 1e-6).to_dict(), relation="substitution", rng="secure")
    assert dict(env) == dict(written_now) and list(env) == list(written_now)
    assert list(env) == ["epsilon", "delta", "rho", "kind", "mu", "conversion", *ENVELOPE_KEYS]
    assert env["privacy_unit"] == AUDIT_UNIT and env["mechanism"] is None and env["event"] is None
    # the same report with the claim in the envelope's shape: valid now, and summarised the same by the pipeline
    new = {**old, "claim": dict(env)}
    REPORT_FORMAT.check_write(new)
    assert report_claim(new) == env
    summarise = (lambda d: audit_summary(AuditReport(d["verdict"], d["epsilon_lower_bound"], d)))
    assert summarise(new) == summarise(old)
    with pytest.raises(ArtifactError, match=r"\$\.claim"):
        REPORT_FORMAT.check_write({**old, "claim": {**env, "events": []}})
