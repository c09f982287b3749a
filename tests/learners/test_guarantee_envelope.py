"""One shape of a policy's guarantee (the envelope) for every DP learner, and the reader of the shapes before it.

Fresh tiny runs of dp-apvi (on a release), dp-pbb and dp-vapvi from the CLI must write the same keys in the same
order; the fixtures in tests/fixtures/guarantee_v1 (written by main before the envelope, one per learner) must
still load, be written back byte for byte, evaluate from the CLI, and read as the envelope the learner writes now.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from privaudit.cli import main
from privaudit.core.artifact import Guarantee
from privaudit.core.envelope import as_envelope, privacy_unit
from privaudit.core.errors import ArtifactError
from privaudit.learners.policy import load_policy
from privaudit.learners.policy_manifest import PolicyManifest, PolicyPrivacy
from privaudit.release.tabular import load_release

OLD = Path(__file__).resolve().parents[1] / "fixtures" / "guarantee_v1"
RELEASE_V1 = Path(__file__).resolve().parents[1] / "fixtures" / "release_v1" / "per_step"
#: The accountant's statement for rho = 1 at the default delta, then the envelope's keys, in their order on disk.
KEYS = ["definition", "rho", "epsilon", "delta", "conversion", "epsilon_simple", "requested", "ledger_charge_rho",
        "sampler", "mechanism", "noise", "neighbouring", "privacy_unit", "rng", "event", "details"]
STATEMENT = KEYS[:8]


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _all_ok(*commands):
    for command in commands:
        r = run(*command)
        assert r.exit_code == 0, r.output


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """The three DP learners' policies, as the fixtures were made (same sizes, rho = 1), by today's code."""
    d = tmp_path_factory.mktemp("env")
    _all_ok(("simulate", "random-tabular", "--states", 3, "--actions", 2, "--horizon", 2, "--instance-seed", 8,
             "--episodes", 300, "--seed", 0, "--out", d / "logs.parquet", "--spec-out", d / "spec.json",
             "--mdp-out", d / "mdp.npz"),
            ("simulate", "synthetic-linear", "--episodes", 40, "--seed", 1, "--horizon", 2,
             "--out", d / "lin.parquet", "--spec-out", d / "lin.json"))
    pbb_spec = {**json.loads((d / "spec.json").read_text()), "public_reward": {"kind": "next_state",
                                                                                "values": {"0": 1.0}}}
    (d / "spec_pbb.json").write_text(json.dumps(pbb_spec))  # dp-pbb backs up a public next-state reward
    pl.read_parquet(d / "logs.parquet").with_columns((pl.col("next_state") == 0).cast(pl.Float64).alias(
        "reward")).write_parquet(d / "logs_pbb.parquet")
    _all_ok(("release", d / "logs.parquet", "--spec", d / "spec.json", "--rho", 1, "--out", d / "rel"),
            ("train", "--release", d / "rel", "--algo", "dp-apvi", "--out", d / "dp_apvi"),
            ("train", d / "logs_pbb.parquet", "--spec", d / "spec_pbb.json", "--algo", "dp-pbb", "--rho", 1,
             "--out", d / "dp_pbb"),
            ("train", d / "lin.parquet", "--spec", d / "lin.json", "--algo", "dp-vapvi", "--rho", 1,
             "--out", d / "dp_vapvi"))
    return d


@pytest.mark.parametrize("name", ["dp_apvi", "dp_pbb", "dp_vapvi"])
def test_every_dp_learner_writes_the_one_envelope(fresh, name):
    """Same keys, same order, privacy_unit an object, the mechanism's own facts under details; the stated numbers
    are those main wrote before the envelope (same rho and delta)."""
    g = json.loads((fresh / name / "policy.json").read_text())["privacy"]["guarantee"]
    assert list(g) == KEYS
    assert g["privacy_unit"] == ({"column": "unit_id", "max_episodes": 1} if name != "dp_apvi" else
                                 {"column": "unit_id", "file_column": "unit_id", "max_episodes": 1})
    assert (g["mechanism"], g["noise"], g["rng"]) == ("gaussian", "exact", "secure")
    old = json.loads((OLD / name / "policy.json").read_text())["privacy"]["guarantee"]
    assert {k: g[k] for k in STATEMENT} == {k: old[k] for k in STATEMENT}
    assert g["sampler"] == old.get("sampler") and g["neighbouring"] == old["neighbouring"]
    if name == "dp_vapvi":
        assert g["details"] == {"description": old["mechanism"], "released_object": old["released_object"],
                                "grid": old["grid"]}
        assert g["sampler"] is None
    else:
        assert g["details"] == {}
    assert (g["event"] is None) == (name == "dp_apvi")  # a policy fitted on a release adds no event of its own
    # the policy reads back as written, and the envelope reads as itself
    p = load_policy(fresh / name)
    assert p.privacy.envelope == g and privacy_unit(p.privacy.guarantee) == g["privacy_unit"]
    assert p.privacy.guarantee.grid == g["details"].get("grid")  # the lattices, where DP-VAPVI records them now


@pytest.mark.parametrize("name", ["dp_apvi", "dp_pbb", "dp_vapvi"])
def test_old_shapes_load_unchanged_and_read_as_the_envelope(fresh, name, tmp_path):
    path = OLD / name / "policy.json"
    m = PolicyManifest.read(path)
    assert m.write(tmp_path / "policy.json").read_text() == path.read_text()  # not rewritten on reading
    old = json.loads(path.read_text())["privacy"]["guarantee"]
    env = m.privacy.envelope
    new = json.loads((fresh / name / "policy.json").read_text())["privacy"]["guarantee"]
    assert list(env) == list(new) == KEYS
    # every fact but the run's own (the noise drawn differs; the events are those of the same plan) matches
    same = {k: v for k, v in new.items() if k != "event"}
    assert {k: v for k, v in dict(env).items() if k != "event"} == same
    assert env["event"] == old.get("event")
    assert privacy_unit(m.privacy.guarantee) == new["privacy_unit"]
    assert m.privacy.guarantee.rho == 1.0 and m.privacy.event == old.get("event")
    # the converted guarantee is a valid new document (the schema's envelope, details included)
    back = dataclasses.replace(m, privacy=PolicyPrivacy(True, env, m.privacy.release)).to_dict()
    assert back["privacy"]["guarantee"] == dict(env)


def test_the_dp_apvi_fixture_of_the_first_format_reads_too():
    """The oldest dp-apvi policy (no sampler statement): sampler and event read as null."""
    g = load_policy(Path(__file__).resolve().parents[1] / "fixtures" / "policy_v1" / "dp_apvi").privacy.guarantee
    env = as_envelope(g)
    assert env["sampler"] is None and env["event"] is None and env["details"] == {}
    assert list(env) == [k for k in KEYS if k != "epsilon_simple"]
    assert env["privacy_unit"] == {"column": "episode_id", "max_episodes": 1} and env.rho == 0.3


@pytest.mark.parametrize("name", ["dp_apvi", "dp_pbb"])
def test_evaluate_reads_the_old_shapes_from_the_cli(fresh, name):
    r = run("evaluate", OLD / name, "--mdp", fresh / "mdp.npz", "--json")
    assert r.exit_code == 0, r.output
    assert 0.0 <= json.loads(r.stdout)["value"] <= json.loads(r.stdout)["optimal_value"] + 1e-12


def test_the_schema_holds_new_files_to_the_envelope(fresh):
    """A guarantee with ``details`` (the envelope) must have every envelope key in its type; without it, it is
    read as a file written before the envelope."""
    m = PolicyManifest.read(fresh / "dp_pbb" / "policy.json")
    g = dict(m.privacy.guarantee)
    for bad in ({**g, "privacy_unit": "unit_id"}, {**g, "grid": {}}, {k: v for k, v in g.items() if k != "rng"},
                {**g, "privacy_unit": {"column": "unit_id"}}):
        with pytest.raises(ArtifactError, match=r"\$\.privacy\.guarantee"):
            dataclasses.replace(m, privacy=PolicyPrivacy(True, bad)).to_dict()


def test_the_release_states_its_envelope_and_other_statements_have_none():
    """A release written before the envelope reads as one from its own fields (its event included); a statement
    alone, without the artifact's facts, has no envelope shape."""
    rel = load_release(RELEASE_V1)
    env = rel.manifest.envelope
    assert list(env)[-8:] == KEYS[-8:] and env["event"] == rel.manifest.event and env["details"] == {}
    assert env["privacy_unit"] == rel.manifest.privacy_unit.to_dict() and env["privacy_unit"]["max_episodes"] == 1
    assert {k: env[k] for k in rel.manifest.guarantee if k != "sampler"} == \
        {k: v for k, v in rel.manifest.guarantee.items() if k != "sampler"}
    with pytest.raises(ArtifactError, match="no envelope shape"):
        as_envelope(rel.manifest.guarantee)
    with pytest.raises(ArtifactError, match="no envelope shape"):
        as_envelope(Guarantee({"private": True, "epsilon": 1.0, "privacy_unit": "one user = one episode"}))
