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

from privaudit.core.errors import UsageError
from privaudit.privacy.sensitivity import Sensitivity, capped_square_norm, check_max_per_cell, combine, count_sensitivity


def episodes(H, S, A, rewards=(0.0,)):
    """Every episode of 1..H steps: list of (s, a, r, s_next) steps."""
    out = []
    for L in range(1, H + 1):
        for states in itertools.product(range(S), repeat=L + 1):
            for actions in itertools.product(range(A), repeat=L):
                for rs in itertools.product(rewards, repeat=L):
                    out.append([(states[h], actions[h], rs[h], states[h + 1]) for h in range(L)])
    return out


def reference_counts(unit, H, S, A, family, stationary, c=None):
    """Slow reference counter: one unit's contribution to a family, flattened (capped at c per cell if given)."""
    shapes = {"visits": (H, S, A), "transitions": (H, S, A, S), "rewards": (H, S, A)}
    vec = np.zeros(shapes[family])
    kept = [list(enumerate(ep)) for ep in unit] if c is None else capped_unit(unit, c, stationary)
    for steps in kept:
        for h, (s, a, r, s2) in steps:
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


def brute_force(H, S, A, k, families, stationary, c=None):
    rewards = (0.0, 1.0) if "rewards" in families else (0.0,)
    eps = episodes(H, S, A, rewards)
    vecs = []
    for u in units(eps, k):
        unit = [eps[i] for i in u]
        vecs.append(np.concatenate([reference_counts(unit, H, S, A, f, stationary, c)
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


def test_paper_values_qiao_wang_2023():
    # Qiao & Wang (2023), eq. (1) and the Laplace paragraph: k = 1, visits + transitions: L2 = 2 sqrt(H), L1 = 4H,
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


# ---------------------------------------------------------------- per-cell contribution bound c


def capped_unit(unit, c, stationary):
    """Slow reference of the per-cell cap: the first c steps of the unit in each cell, in list order.

    The sensitivity bound holds for any keep rule that keeps at most c steps per cell and
    depends on the unit alone; the maximum over all units and all episode orders is taken
    below (every multiset is enumerated, and list order is one order of it).
    """
    seen: dict = {}
    out = []
    for ep in unit:
        kept = []
        for h, step in enumerate(ep):
            cell = (step[0], step[1]) if stationary else (h, step[0], step[1])
            if seen.get(cell, 0) < c:
                seen[cell] = seen.get(cell, 0) + 1
                kept.append((h, step))
        out.append(kept)
    return out


# (H, S, A, k, c, stationary): every case has 2 ceil(m / c) <= S*A cells (m = kH pooled, k per
# step), so the bound is attained and the test checks equality, not just an upper bound.
CAPPED_ATTAINED = [
    (2, 2, 2, 1, 1, True), (3, 2, 2, 1, 2, True), (2, 2, 2, 2, 2, True), (2, 2, 2, 2, 3, True),
    (2, 2, 2, 2, 1, False), (1, 2, 2, 3, 2, False),
]


@pytest.mark.parametrize("H,S,A,k,c,stationary", CAPPED_ATTAINED)
@pytest.mark.parametrize("family", ["visits", "transitions"])
def test_capped_counts_attained(H, S, A, k, c, stationary, family):
    l1, l2 = brute_force(H, S, A, k, [family], stationary, c)
    sens = count_sensitivity(H, k, stationary, family, max_per_cell=c)
    assert l1 == pytest.approx(sens.l1, rel=1e-12)
    assert l2 == pytest.approx(sens.l2, rel=1e-12)


@pytest.mark.parametrize("H,S,A,k,c,stationary", [(2, 2, 2, 1, 1, True), (1, 2, 2, 3, 2, False)])
def test_capped_all_families_attained(H, S, A, k, c, stationary):
    fams = ["visits", "transitions", "rewards"]
    l1, l2 = brute_force(H, S, A, k, fams, stationary, c)
    sens = count_sensitivity(H, k, stationary, "+".join(fams), max_per_cell=c)
    assert l1 == pytest.approx(sens.l1, rel=1e-12)
    assert l2 == pytest.approx(sens.l2, rel=1e-12)


@pytest.mark.parametrize("H,S,A,k,c,stationary", [(3, 2, 1, 1, 1, True), (2, 2, 1, 2, 1, False),
                                                  (3, 1, 2, 1, 2, True)])
def test_capped_bound_holds_on_small_domains(H, S, A, k, c, stationary):
    # too few cells to spread u and v: the formula is a strict upper bound, never below the truth
    for family in ("visits", "transitions"):
        l1, l2 = brute_force(H, S, A, k, [family], stationary, c)
        sens = count_sensitivity(H, k, stationary, family, max_per_cell=c)
        assert l1 <= sens.l1 * (1 + 1e-12) and l2 <= sens.l2 * (1 + 1e-12)


def test_capped_formula_values():
    # the figure: pooled, c = 1, k = 1, H = 20: sqrt(2 c k H) = sqrt(40) vs sqrt(2) k H = 28.28
    s = count_sensitivity(20, 1, True, "visits", max_per_cell=1)
    assert s.l2 == pytest.approx(math.sqrt(40)) and s.l1 == 40.0
    assert count_sensitivity(20, 1, True, "visits").l2 / s.l2 == pytest.approx(math.sqrt(20))
    # c not dividing kH: f(20, 3) = 6 * 9 + 2^2 = 58
    assert capped_square_norm(20, 3) == 58
    assert count_sensitivity(20, 1, True, "visits", max_per_cell=3).l2 == pytest.approx(math.sqrt(116))
    # c = kH, or per step c >= k: the uncapped formulas
    for stationary, c in ((True, 20), (False, 1), (False, 7), (False, 20)):
        assert count_sensitivity(20, 1, stationary, "visits", max_per_cell=c).l2 == pytest.approx(
            count_sensitivity(20, 1, stationary, "visits").l2, rel=1e-15)
    # per step, c < k: sqrt(2 H f(k, c)) = sqrt(2 * 20 * (2 * 4 + 1)) for k = 5, c = 2
    assert count_sensitivity(20, 5, False, "visits", max_per_cell=2).l2 == pytest.approx(math.sqrt(360))


@pytest.mark.parametrize("c", [0, -1, 1.5, True, "2"])
def test_bad_cap(c):
    with pytest.raises(UsageError, match="max_per_cell"):
        count_sensitivity(3, 1, True, "visits", max_per_cell=c)


@pytest.mark.parametrize("stationary", [True, False])
@pytest.mark.parametrize("c", [21, 50, 99999999999999999999])
def test_cap_above_k_h_is_refused_with_the_bound(c, stationary):
    """A cap above k H caps nothing: refused, naming k H = 20 and how it is derived (before: recorded as given)."""
    with pytest.raises(UsageError, match=r"`max_per_cell` must be at most k H = 20, .*k = 1 times horizon H = 20"):
        count_sensitivity(20, 1, stationary, "visits", max_per_cell=c)
    assert check_max_per_cell(20, 20, 1, stationary) == 20 and check_max_per_cell(None, 20, 1, stationary) is None
