"""Feature maps and the synthetic linear MDP (Qiao & Wang 2023; docs/mdp.md)."""

import numpy as np
import pytest

from privaudit.core.errors import SpecError, UsageError
from privaudit.mdp.features import FeatureMap, enforce_norm, one_hot_features, state_table_x_action
from privaudit.mdp.spec_features import feature_map_from_spec
from privaudit.mdp.synthetic_linear import (behaviour_policy, raw_features, synthetic_linear_features,
                                            synthetic_linear_instance, synthetic_linear_mdp,
                                            synthetic_linear_spec_doc)
from privaudit.mdp.tabular import value_iteration
from privaudit.core.spec import DomainSpec


def test_enforce_norm_rescale_and_clip():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 4)) * 3
    R, c = enforce_norm(X, "rescale")
    assert np.linalg.norm(R, axis=1).max() <= 1.0
    assert c == pytest.approx(np.linalg.norm(X, axis=1).max())
    np.testing.assert_allclose(R * c, X)  # one public divisor for every vector
    C, c2 = enforce_norm(X, "clip")
    n = np.linalg.norm(X, axis=1)
    assert c2 == 1.0 and np.linalg.norm(C, axis=1).max() <= 1.0
    np.testing.assert_allclose(C[n <= 1], X[n <= 1])  # short vectors untouched
    np.testing.assert_allclose(np.linalg.norm(C[n > 1], axis=1), 1.0)
    with pytest.raises(UsageError, match="below the largest feature norm"):
        enforce_norm(X, "rescale", scale=1.0)
    with pytest.raises(UsageError):
        enforce_norm(X, "bogus")


def test_feature_map_refuses_long_vectors():
    with pytest.raises(UsageError, match=r"\|\|phi\(s, a\)\|\| <= 1"):
        FeatureMap(np.full((1, 1, 2), 0.8), "x")


def test_synthetic_features_by_hand():
    phi = raw_features()
    # a = 0 in s = 0: delta = 1 -> (0,...,0, 1, 0); in s = 1: delta = 0 -> (0,...,0, 0, 1)
    np.testing.assert_array_equal(phi[0, 0], [0] * 8 + [1, 0])
    np.testing.assert_array_equal(phi[1, 0], [0] * 8 + [0, 1])
    # a = 5 = 0b101 (LSB first): bits (1,0,1,0,0,0,0,0); s = 0, a != 0: delta = 0; s = 1: delta = 1
    np.testing.assert_array_equal(phi[0, 5], [1, 0, 1, 0, 0, 0, 0, 0, 0, 1])
    np.testing.assert_array_equal(phi[1, 5], [1, 0, 1, 0, 0, 0, 0, 0, 1, 0])
    f = synthetic_linear_features()
    # largest popcount of a < 100 is 6 (a = 63, 95): ||phi|| = sqrt(7), scaled by the public 1/3
    assert np.linalg.norm(f.table, axis=-1).max() == pytest.approx(np.sqrt(7) / 3)
    assert f.scale == 3.0 and f.norm == "rescale"


def test_synthetic_mdp_matches_formulas():
    inst = synthetic_linear_instance(7)
    mdp = synthetic_linear_mdp(7)
    h, r = 3, inst.r[3]
    a1, a2 = inst.alpha[h]
    P = mdp.transition(h)
    # P_h(0 | s, a) = alpha1 delta + alpha2 (1 - delta)
    assert P[0, 0, 0] == pytest.approx(a1) and P[0, 5, 0] == pytest.approx(a2)
    assert P[1, 0, 0] == pytest.approx(a2) and P[1, 5, 0] == pytest.approx(a1)
    # r_h(0, 5) = r/8 + r/8 (bits 0, 2) + (1/2 - r/2) (delta = 0); r_h(1, 0) = 1/2 - r/2
    R = mdp.expected_reward(h)
    assert R[0, 5] == pytest.approx(r / 4 + 0.5 - r / 2)
    assert R[1, 0] == pytest.approx(0.5 - r / 2)
    assert R.min() >= 0 and R.max() <= 1
    pi = behaviour_policy()
    assert pi[0, 0] == 0.6 and pi[1, 7] == pytest.approx(0.4 / 99)
    # among a != 0, transitions are equal and a = 93 = bits {0,2,3,4,6} is the lowest a < 100 with every
    # rewarded bit (95 adds bit 1, whose weight is 0); so the optimal action is 0 or 93 in every (h, s)
    assert (mdp.r[:, :, 1:].argmax(-1) + 1 == 93).all()
    np.testing.assert_array_equal(mdp.r[:, :, 93], mdp.r[:, :, 95])
    pi_star, _, _ = value_iteration(mdp)
    assert np.isin(pi_star.argmax(-1), [0, 93]).all()


def test_state_table_x_action_blocks_and_projection():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(6, 5))
    f1 = state_table_x_action(X, 3, projection_dim=2, projection_seed=4)
    f2 = state_table_x_action(X, 3, projection_dim=2, projection_seed=4)
    f3 = state_table_x_action(X, 3, projection_dim=2, projection_seed=5)
    assert f1.dim == 3 * 3  # (p + bias) * A
    np.testing.assert_array_equal(f1.table, f2.table)  # public seed -> same map
    assert not np.allclose(f1.table, f3.table)
    # phi(s, a) and phi(s, a') live in disjoint blocks
    assert np.abs(np.einsum("sad,sbd->sab", f1.table, f1.table)[:, 0, 1]).max() == 0
    assert np.linalg.norm(f1.table, axis=-1).max() <= 1.0
    assert state_table_x_action(X, 3, norm="clip").norm == "clip"


def test_spec_features():
    spec = DomainSpec.from_dict(synthetic_linear_spec_doc())
    f = feature_map_from_spec(spec)
    assert f.name == "synthetic-linear" and f.dim == 10
    doc = synthetic_linear_spec_doc()
    doc["features"] = {"map": "one-hot"}
    assert feature_map_from_spec(DomainSpec.from_dict(doc)).dim == 200
    doc["features"] = {"map": "one-hot", "dim": 3}
    with pytest.raises(SpecError, match="dim"):
        feature_map_from_spec(DomainSpec.from_dict(doc))
    del doc["features"]
    with pytest.raises(SpecError, match="features"):
        feature_map_from_spec(DomainSpec.from_dict(doc))
    assert one_hot_features(2, 3).table[1, 2, 5] == 1.0
