"""Policy artifact round trip and version check."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from privaudit.core.artifact import Guarantee
from privaudit.core.errors import ArtifactError, UsageError
from privaudit.learners.policy import Policy, greedy_table, load_policy, save_policy
from privaudit.learners.policy_manifest import PolicyManifest, PolicyPrivacy


def _random_policy(rng, H=3, S=4, A=2):
    t = rng.random((H, S, A))
    return t / t.sum(-1, keepdims=True)


def test_round_trip_with_extras(tmp_path):
    rng = np.random.default_rng(0)
    table = _random_policy(rng)
    w = rng.normal(size=(3, 5))
    M = rng.normal(size=(3, 5, 5))
    p = Policy(table, "dp-apvi", {"C": 2.0}, {"private": True, "guarantee": {"rho": 1.0}}, "abc",
               extras={"w": w, "Lambda_inv": M})
    save_policy(p, tmp_path / "pol")
    q = load_policy(tmp_path / "pol")
    np.testing.assert_array_equal(q.table, table)
    np.testing.assert_array_equal(q.extras["w"], w)
    np.testing.assert_array_equal(q.extras["Lambda_inv"], M)
    assert q.algorithm == "dp-apvi" and q.privacy.guarantee["rho"] == 1.0 and q.spec_hash == "abc"


def test_unknown_version_refused(tmp_path):
    p = Policy(greedy_table(np.random.default_rng(1).random((2, 3, 2))), "ve")
    save_policy(p, tmp_path / "pol")
    doc = json.loads((tmp_path / "pol" / "policy.json").read_text())
    doc["format_version"] = 99
    (tmp_path / "pol" / "policy.json").write_text(json.dumps(doc))
    with pytest.raises(ArtifactError, match="format_version 99"):
        load_policy(tmp_path / "pol")


def test_nan_probability_is_a_corrupt_artifact(tmp_path):
    """Before: a policy.parquet with a NaN probability loaded (NaN compares false) and `evaluate` printed
    'policy value nan' (exit 0); now the folder is named as corrupt (fresh-user pass)."""
    save_policy(Policy(greedy_table(np.random.default_rng(2).random((2, 3, 2))), "ve"), tmp_path / "pol")
    f = tmp_path / "pol" / "policy.parquet"
    df = pl.read_parquet(f)
    df.with_columns(pl.when(pl.int_range(pl.len()) == 0).then(float("nan")).otherwise(pl.col("probability"))
                    .alias("probability")).write_parquet(f)
    with pytest.raises(ArtifactError, match=r"pol: policy table rows pi_h\(\. \| s\) must be probability vectors "
                                            r"\(finite"):
        load_policy(tmp_path / "pol")


def test_missing_manifest_and_existing_out(tmp_path):
    with pytest.raises(ArtifactError, match="policy.json is missing"):
        load_policy(tmp_path)
    p = Policy(greedy_table(np.zeros((1, 2, 2))), "ve")
    save_policy(p, tmp_path / "pol")
    with pytest.raises(FileExistsError):
        save_policy(p, tmp_path / "pol")


def test_greedy_ties_to_lowest_action():
    Q = np.array([[[1.0, 1.0, 0.0], [0.0, 2.0, 2.0]]])
    np.testing.assert_array_equal(greedy_table(Q)[0], [[1, 0, 0], [0, 1, 0]])


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "policy_v1"


def test_policies_written_before_the_typed_manifest_still_read():
    """Fixtures in the policy.json form main wrote before PolicyManifest (format 1, byte for byte): a dp-apvi
    policy whose privacy record is the release's guarantee (no event), and the schema's minimum (no stationary,
    spec_hash or extras keys)."""
    p = load_policy(FIXTURES / "dp_apvi")
    assert isinstance(p.privacy, PolicyPrivacy) and p.privacy.private is True
    assert p.privacy.rho == 0.3 and p.privacy.release == "run1/release" and p.privacy.event is None
    assert p.privacy.definition == "zCDP" and p.stationary is True and p.spec_hash == "ab" * 32
    np.testing.assert_array_equal(p.table.argmax(-1), [[1, 0, 1], [0, 0, 1]])
    m = load_policy(FIXTURES / "minimal")
    assert (m.algorithm, m.stationary, m.spec_hash, m.extras) == ("ve", False, None, {})
    assert m.privacy == PolicyPrivacy(False, None, None, "trained on exact counts of the logs; not differentially "
                                                         "private")
    # read -> write -> read keeps every field of the old document (format unchanged, version 1)
    old = json.loads((FIXTURES / "dp_apvi" / "policy.json").read_text())
    new = p.manifest().to_dict()
    assert {k: v for k, v in new.items() if k not in ("created", "software_version")} == \
        {k: v for k, v in old.items() if k not in ("created", "software_version")}


def test_manifest_is_typed_frozen_and_checked_both_ways(tmp_path):
    p = Policy(greedy_table(np.zeros((1, 2, 2))), "ve", privacy=PolicyPrivacy.none("exact"))
    man = p.manifest()
    assert isinstance(man, PolicyManifest) and man.shape == (1, 2, 2) and man.privacy.note == "exact"
    with pytest.raises(dataclasses.FrozenInstanceError):
        man.algorithm = "dp-apvi"  # type: ignore[misc]
    with pytest.raises(ArtifactError, match=r"(?s)breaks schema .policy.*algorithm"):  # checked on write
        dataclasses.replace(man, algorithm="").to_dict()
    doc = man.to_dict()
    doc["horizon"] = 0
    with pytest.raises(ArtifactError, match=r"\$\.horizon"):  # checked on read
        PolicyManifest.from_dict(doc, "x/policy.json")
    with pytest.raises(ArtifactError, match="must record its guarantee"):
        PolicyPrivacy(True)
    with pytest.raises(UsageError, match="`privacy` must be a PolicyPrivacy"):
        Policy(greedy_table(np.zeros((1, 2, 2))), "ve", privacy="private")


def test_policy_json_read_and_written_again_is_byte_identical(tmp_path):
    """The artifact base writes the old document's bytes; the minimal one gains its defaults, in place."""
    path = FIXTURES / "dp_apvi" / "policy.json"
    m = PolicyManifest.read(path)
    assert isinstance(m.privacy.guarantee, Guarantee) and m.privacy.guarantee.rho == 0.3
    assert m.write(tmp_path / "policy.json").read_text() == path.read_text()
    minimal = json.loads((FIXTURES / "minimal" / "policy.json").read_text())
    back = PolicyManifest.read(FIXTURES / "minimal" / "policy.json").to_dict()
    assert back == {**minimal, "stationary": False, "spec_hash": None, "extras": []}
    assert list(back)[:8] == ["format_version", "kind", "algorithm", "parameters", "horizon", "n_states",
                              "n_actions", "stationary"]
    with pytest.raises(ArtifactError, match="policy manifest .*absent.json: the file is missing"):
        PolicyManifest.read(tmp_path / "absent.json")
