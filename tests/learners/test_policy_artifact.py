"""Policy artifact round trip and version check."""

import json

import numpy as np
import pytest

from privaudit.errors import ArtifactError
from privaudit.learners.policy import Policy, greedy_table, load_policy, save_policy


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
    assert q.algorithm == "dp-apvi" and q.privacy["guarantee"]["rho"] == 1.0 and q.spec_hash == "abc"


def test_unknown_version_refused(tmp_path):
    p = Policy(greedy_table(np.random.default_rng(1).random((2, 3, 2))), "ve")
    save_policy(p, tmp_path / "pol")
    doc = json.loads((tmp_path / "pol" / "policy.json").read_text())
    doc["format_version"] = 99
    (tmp_path / "pol" / "policy.json").write_text(json.dumps(doc))
    with pytest.raises(ArtifactError, match="format_version 99"):
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
