"""Sensitivities checked by brute force over ALL substitutions on tiny domains.

Counts are additive over units, so for neighbouring datasets D = R + {u} and
D' = R + {v} (substitution of one unit) the change of a count vector is
c(u) - c(v), whatever the rest R is. The maximum over all neighbouring pairs
is therefore the maximum over all pairs of possible unit contributions (u, v):
every multiset of at most k episodes, each of 1..H steps over the tiny (S, A)
(shorter episodes = terminated early; their last transition is counted,
nothing after it). Rewards, scaled into [0, 1], are enumerated at the vertices
{0, 1}: the distance is convex in each reward, so its maximum over the box
[0, 1] is attained at a vertex.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from privaudit.errors import UsageError
from privaudit.privacy.sensitivity import Sensitivity, combine, count_sensitivity


def episodes(H, S, A, rewards=(0.0,)):
    """Every episode of 1..H steps: list of (s, a, r, s_next) steps."""
    out = []
    for L in range(1, H + 1):
        for states in itertools.product(range(S), repeat=L + 1):
            for actions in itertools.product(range(A), repeat=L):
                for rs in itertools.product(rewards, repeat=L):
                    out.append([(states[h], actions[h], rs[h], states[h + 1]) for h in range(L)])
    return out


def reference_counts(unit, H, S, A, family, stationary):
    """Slow reference counter: one unit's contribution to a family, flattened."""
    shapes = {"visits": (H, S, A), "transitions": (H, S, A, S), "rewards": (H, S, A)}
    vec = np.zeros(shapes[family])
    for ep in unit:
        for h, (s, a, r, s2) in enumerate(ep):
            if family == "visits":
                vec[h, s, a] += 1
            elif family == "transitions":
                vec[h, s, a, s2] += 1
            else:
                vec[h, s, a] += r
    if stationary:
        vec = vec.sum(axis=0)
    return vec.ravel()


def units(eps, k):
    """Every multiset of at most k episodes (including the empty unit)."""
    for size in range(k + 1):
        yield from itertools.combinations_with_replacement(range(len(eps)), size)


def max_distances(vectors):
    """Max L1 and L2 distance over all pairs of rows."""
    V = np.asarray(vectors, dtype=float)
    l1 = l2 = 0.0
    for start in range(0, len(V), 256):
        D = V[start:start + 256, None, :] - V[None, :, :]
        l1 = max(l1, float(np.abs(D).sum(axis=2).max()))
        l2 = max(l2, float(np.sqrt((D ** 2).sum(axis=2)).max()))
    return l1, l2


def brute_force(H, S, A, k, families, stationary):
    rewards = (0.0, 1.0) if "rewards" in families else (0.0,)
    eps = episodes(H, S, A, rewards)
    vecs = []
    for u in units(eps, k):
        unit = [eps[i] for i in u]
        vecs.append(np.concatenate([reference_counts(unit, H, S, A, f, stationary)
                                    for f in families]))
    return max_distances(vecs)


DOMAINS = [  # (H, S, A, k)
    (1, 2, 1, 1), (2, 2, 1, 1), (2, 2, 1, 2), (3, 2, 1, 1), (2, 1, 2, 2), (3, 1, 2, 1),
]


@pytest.mark.parametrize("H,S,A,k", DOMAINS)
@pytest.mark.parametrize("family", ["visits", "transitions"])
@pytest.mark.parametrize("stationary", [False, True])
def test_count_families_attained(H, S, A, k, family, stationary):
    l1, l2 = brute_force(H, S, A, k, [family], stationary)
    sens = count_sensitivity(H, k, stationary, family)
    assert l1 == pytest.approx(sens.l1, rel=1e-12)
    assert l2 == pytest.approx(sens.l2, rel=1e-12)


@pytest.mark.parametrize("H,S,A,k", [(1, 2, 1, 2), (2, 2, 1, 1), (2, 1, 2, 2)])
@pytest.mark.parametrize("stationary", [False, True])
def test_rewards_attained(H, S, A, k, stationary):
    l1, l2 = brute_force(H, S, A, k, ["rewards"], stationary)
    sens = count_sensitivity(H, k, stationary, "rewards")
    assert l1 == pytest.approx(sens.l1, rel=1e-12)
    assert l2 == pytest.approx(sens.l2, rel=1e-12)


@pytest.mark.parametrize("families", [["visits", "transitions"], ["visits", "transitions", "rewards"]])
@pytest.mark.parametrize("H,S,A,k", [(2, 2, 1, 1), (2, 2, 1, 2)])
@pytest.mark.parametrize("stationary", [False, True])
def test_combined_attained(families, H, S, A, k, stationary):
    l1, l2 = brute_force(H, S, A, k, families, stationary)
    sens = count_sensitivity(H, k, stationary, "+".join(families))
    via_combine = combine(count_sensitivity(H, k, stationary, f) for f in families)
    assert l1 == pytest.approx(sens.l1, rel=1e-12) == via_combine.l1
    assert l2 == pytest.approx(sens.l2, rel=1e-12)
    assert via_combine.l2 == pytest.approx(sens.l2, rel=1e-12)


def test_single_cell_domain_is_only_an_upper_bound():
    # With S = A = 1 every episode visits the same cells, so u and v cannot be
    # disjoint: the true L1 is kH, half the bound 2kH. The bound still holds.
    H, k = 2, 2
    l1, l2 = brute_force(H, 1, 1, k, ["visits"], False)
    sens = count_sensitivity(H, k, False, "visits")
    assert l1 == k * H < sens.l1
    assert l2 == pytest.approx(k * math.sqrt(H)) and l2 < sens.l2


def test_paper_values_seed000():
    # ALGORITHMS.md 1.3 / 1.4: k = 1, visits + transitions: L2 = 2 sqrt(H), L1 = 4H,
    # so sigma^2 = L2^2 / (2 rho) = 2H / rho.
    for H in (1, 5, 20):
        s = count_sensitivity(H, 1, False, "visits+transitions")
        assert s.l2 == pytest.approx(2 * math.sqrt(H), rel=1e-15)
        assert s.l1 == 4 * H
        assert s.l2 ** 2 / 2 == pytest.approx(2 * H)
        assert s.neighbouring == "substitution"


def test_formulas():
    s = count_sensitivity(20, 3, False, "transitions")
    assert (s.l1, s.l2) == (120.0, pytest.approx(3 * math.sqrt(40)))
    s = count_sensitivity(20, 3, True, "visits")
    assert (s.l1, s.l2) == (120.0, pytest.approx(60 * math.sqrt(2)))
    assert isinstance(s, Sensitivity)
    with pytest.raises(AttributeError):
        s.l1 = 0  # frozen


@pytest.mark.parametrize("kwargs", [
    dict(horizon=0, max_episodes=1, stationary=False, family="visits"),
    dict(horizon=2, max_episodes=0, stationary=False, family="visits"),
    dict(horizon=2.0, max_episodes=1, stationary=False, family="visits"),
    dict(horizon=2, max_episodes=1, stationary=False, family="states"),
    dict(horizon=2, max_episodes=1, stationary=False, family="visits+visits"),
])
def test_bad_arguments(kwargs):
    with pytest.raises(UsageError):
        count_sensitivity(**kwargs)
