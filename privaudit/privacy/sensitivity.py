"""Sensitivities of the count statistics released from tabular logs.

Neighbouring relation: **substitution of one privacy unit** (Qiao & Wang
2023 use "replace one trajectory", the case ``max_episodes = 1``). Before any count is
taken, contribution bounding (``privaudit.data``) keeps at most ``k =
max_episodes`` episodes per unit and at most ``H`` steps per episode, and
scales rewards into [0, 1]. The bounds below hold for *any* input once that
bounding is done; they are not read off the data.

Families (steps are 0-based, h = 0..H-1; the papers use 1..H):

``visits``       n_h(s, a), shape (H, S, A): one count per logged step.
``transitions``  n_h(s, a, s'), shape (H, S, A, S): one count per logged step,
                 including a step into a terminal state; nothing after
                 termination is counted.
``rewards``      R_h(s, a), shape (H, S, A): sum of the rewards, scaled into
                 [0, 1], of the steps logged at (h, s, a).

``stationary=True`` pools each family over h (shapes (S, A), (S, A, S),
(S, A)).

Proof sketch (all families, per-h layout). Let u be the vector of one unit's
contribution to a family and v the contribution of its replacement; every
other unit contributes the same to both datasets, so the change of the count
vector is u - v. For a fixed step h, each of the unit's at most k episodes
adds at most 1 to the h-slice u_h (one step, or one reward in [0, 1]), and
u_h >= 0, so ||u_h||_1 <= k and ||u_h||_2 <= ||u_h||_1 <= k. Then

* L1: ||u - v||_1 <= sum_h (||u_h||_1 + ||v_h||_1) <= 2kH;
* L2: since u_h, v_h >= 0, <u_h, v_h> >= 0, so
  ||u_h - v_h||_2^2 <= ||u_h||_2^2 + ||v_h||_2^2 <= 2k^2, and summing over
  the H steps gives ||u - v||_2 <= k sqrt(2H).

Both are attained: let all k episodes of u be one full-length (H-step)
episode repeated k times, and all k of v another one that differs from it
at every step (needs S*A >= 2; for rewards, both with reward 1 at every step).

Stationary layout: the pooled vector has ||u||_1 <= kH, so
||u - v||_1 <= 2kH and ||u - v||_2^2 <= ||u||_2^2 + ||v||_2^2 <= 2 (kH)^2,
i.e. L2 = kH sqrt(2). Attained by k copies of an episode that stays in one
(s, a) (a self-loop s -> s for transitions) for H steps against another cell.

Several families released together: the released vector is the concatenation,
so L1 adds and L2 adds in squares; the same pair (u, v) attains every family's
maximum at once, so the combined bounds are attained too. Visits +
transitions, per-h, k = 1: L1 = 4H and L2 = 2 sqrt(H), which give Qiao & Wang
(2023)'s Lap(4H/eps) and sigma^2 = 2H/rho (their eq. (1); docs/privacy.md,
"Neighbouring relation and sensitivities").

Per-cell contribution bound c (``max_per_cell``; ``privaudit.data.bounding.cap_per_cell``).
After the cap, one unit adds at most c to each released cell: per (h, s, a)
in the per-step layout, per (s, a) when pooled over h. Transition cells
(s, a, s') follow the (s, a) cap (the cap drops whole steps, so at most c of
the unit's transitions leave any (s, a), whatever s'), and so do reward sums
(at most c rewards in [0, 1] per cell). Let

    f(m, c) = max { ||u||_2^2 : u >= 0, ||u||_1 <= m, every u_i <= c }
            = floor(m / c) c^2 + (m mod c)^2        (f(m, c) = m^2 when c >= m).

(||u||_2^2 is convex, so its maximum over that polytope is at a vertex; a
vertex has at most one coordinate strictly between 0 and c, and the rest at
0 or c with sum <= m: floor(m/c) coordinates at c and one at m mod c.)
With u, v >= 0, ||u - v||_2^2 <= ||u||_2^2 + ||v||_2^2, so

* pooled: ||u||_1 <= kH, so L2 = sqrt(2 f(kH, c)), which is sqrt(2 c k H)
  when c divides kH;
* per-step: each h-slice has ||u_h||_1 <= k, so L2 = sqrt(2 H f(k, c))
  (= sqrt(2 k H) at c = 1; the cap matters only when c < k, since one
  episode visits each (h, s, a) at most once);
* L1 = 2kH is unchanged (the cap bounds each cell, not the total).

Attained when the domain has 2 ceil(m / c) distinct cells to spread u and v
over (m = kH pooled, k per step): u fills ceil(m/c) cells with c visits each
(self-loop steps s -> s, reward 1), v other cells. c >= m gives back the
uncapped formulas above.

``tests/privacy/test_sensitivity.py`` checks every formula by brute force over all
substitutions on tiny domains, with and without the cap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from privaudit.core.errors import UsageError
from privaudit.privacy.events import Neighbouring

#: Families a release may contain.
FAMILIES = ("visits", "transitions", "rewards")



@dataclass(frozen=True)
class Sensitivity:
    """Sensitivity of one released family (or of several released together).

    Attributes
    ----------
    l1 : float
        L1 sensitivity (counts; rewards in units of the [0, 1]-scaled reward).
    l2 : float
        L2 sensitivity (same units).
    family : str
        ``"visits"``, ``"transitions"``, ``"rewards"`` or a ``+``-joined
        combination such as ``"visits+transitions"``.
    neighbouring : str
        Neighbouring relation, always ``"substitution"`` (replace one unit).
    """

    l1: float
    l2: float
    family: str
    neighbouring: str = Neighbouring.SUBSTITUTION.value

    def as_dict(self) -> dict:
        """JSON-ready dict (for manifests)."""
        return {"l1": self.l1, "l2": self.l2, "family": self.family,
                "neighbouring": self.neighbouring}


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UsageError(f"`{name}` must be an integer >= {minimum}. Found {value!r}.")
    return value


def check_max_per_cell(max_per_cell, horizon: int, max_episodes: int, stationary: bool) -> int | None:
    """Refuse a per-cell cap c above the most steps one unit can contribute at all, k H.

    One unit adds at most k H steps to one (s, a) cell pooled over h (and at
    most k to one (h, s, a) cell per step: an episode visits each (h, s, a)
    at most once), so a cap c >= k H caps nothing in either layout. A cap
    above k H is refused (an absurd value such as 99999999999999999999 would
    otherwise be recorded in the manifest as if it meant something); c = k H
    is accepted (it equals no cap), and so is k <= c <= k H per step (no
    effect there either, but the same bound holds for both layouts).

    Parameters
    ----------
    max_per_cell : int or None
        c; None: no per-cell cap (returned as is).
    horizon, max_episodes : int
        H and k from the spec.
    stationary : bool
        Counts pooled over h or per step (named in the message).

    Returns
    -------
    int or None
        c.

    Raises
    ------
    UsageError
        c not an integer >= 1, or c > k H (the message names k H and how it is derived).
    """
    if max_per_cell is None:
        return None
    c = _check_int("max_per_cell", max_per_cell, 1)
    H, k = _check_int("horizon", horizon, 1), _check_int("max_episodes", max_episodes, 1)
    M = k * H
    if c > M:
        layout = ("" if stationary else f"; per step an episode visits each (h, s, a) at most once, so a cap "
                  f"at or above k = {k} already caps nothing")
        raise UsageError(f"`max_per_cell` must be at most k H = {M}, the most steps one privacy unit contributes "
                         f"(max_episodes k = {k} times horizon H = {H}){layout}: a larger cap caps nothing. "
                         f"Found {c!r}. Give an integer in [1, {M}], or omit it for no per-cell cap.")
    return c


def capped_square_norm(total: int, cap: int | None) -> int:
    """f(m, c): the largest ||u||_2^2 of u >= 0 with ||u||_1 <= m and every u_i <= c.

    Parameters
    ----------
    total : int
        m >= 0, the most a unit adds over all cells.
    cap : int or None
        c >= 1, the most it adds to one cell; None for no cap (c = m).

    Returns
    -------
    int
        floor(m / c) c^2 + (m mod c)^2; m^2 when ``cap`` is None or c >= m.
        (Module docstring: the maximum of a convex function over the
        polytope sits at a vertex.)
    """
    if cap is None or cap >= total:
        return total * total
    q, r = divmod(total, cap)
    return q * cap * cap + r * r


def count_sensitivity(horizon: int, max_episodes: int, stationary: bool,
                      family: str, max_per_cell: int | None = None) -> Sensitivity:
    """L1 and L2 sensitivity of one count family under substitution of one unit.

    Parameters
    ----------
    horizon : int
        H, the most steps kept per episode (>= 1).
    max_episodes : int
        k, the most episodes kept per privacy unit (>= 1).
    stationary : bool
        True when the counts are pooled over h (one table instead of H).
    family : str
        ``"visits"``, ``"transitions"``, ``"rewards"``, or several joined by
        ``+`` (e.g. ``"visits+transitions"``), released together.
    max_per_cell : int or None
        c >= 1, the per-cell contribution bound applied before counting
        (``privaudit.data.bounding.cap_per_cell``: per (h, s, a) per-step,
        per (s, a) pooled; transitions and rewards follow the (s, a) cap).
        None: no cap.

    Returns
    -------
    Sensitivity
        Per family, per-h: L1 = 2kH, L2 = k sqrt(2H); stationary: L1 = 2kH,
        L2 = kH sqrt(2). With the cap c: L2 = sqrt(2 H f(k, c)) per-h and
        sqrt(2 f(kH, c)) pooled (:func:`capped_square_norm`; sqrt(2ckH)
        pooled when c divides kH), L1 unchanged. Joined families: L1 summed,
        L2 root-sum-of-squares. Every value is attained on some pair of
        neighbouring datasets when the domain has enough cells (S*A >= 2
        uncapped; see the module docstring for the proof).

    Raises
    ------
    UsageError
        Unknown family, or H, k, c not positive integers.

    References
    ----------
    Qiao & Wang (2023): sigma^2 = 2H/rho in eq. (1) (L2 = 2 sqrt(H)) and
    Delta_1 = 4H in the paragraph "Apply Laplace Mechanism to achieve pure DP",
    for visits + transitions, k = 1. The k > 1, stationary, reward and
    per-cell-cap cases are our own derivation (docs/privacy.md); the
    per-cell cap is the per-partition bound of DP SQL engines (PipelineDP's
    ``max_contributions_per_partition``).
    """
    H = _check_int("horizon", horizon, 1)
    k = _check_int("max_episodes", max_episodes, 1)
    parts = family.split("+") if isinstance(family, str) else [family]
    if not parts or any(p not in FAMILIES for p in parts) or len(set(parts)) != len(parts):
        raise UsageError(
            f"`family` must be one of {FAMILIES} or a '+'-joined combination of "
            f"distinct ones. Found {family!r}.")
    c = check_max_per_cell(max_per_cell, H, k, stationary)
    l1_one = 2.0 * k * H
    if c is None:
        l2_one = k * H * math.sqrt(2.0) if stationary else k * math.sqrt(2.0 * H)
    else:
        l2_one = math.sqrt(2.0 * (capped_square_norm(k * H, c) if stationary else H * capped_square_norm(k, c)))
    m = len(parts)
    return Sensitivity(l1=m * l1_one, l2=math.sqrt(m) * l2_one, family="+".join(parts))


def combine(sensitivities: Iterable[Sensitivity]) -> Sensitivity:
    """Sensitivity of several families released together (concatenated vector).

    L1 adds; L2 adds in squares. Valid (an upper bound) for any families;
    attained for the count families above because one pair of neighbouring
    datasets attains all their maxima at once.

    Raises
    ------
    UsageError
        Empty input, or mixed neighbouring relations.
    """
    sens = list(sensitivities)
    if not sens:
        raise UsageError("`sensitivities` must hold at least one Sensitivity. Found none.")
    rel = {s.neighbouring for s in sens}
    if len(rel) != 1:
        raise UsageError(f"cannot combine sensitivities under different neighbouring "
                         f"relations. Found {sorted(rel)}.")
    return Sensitivity(l1=sum(s.l1 for s in sens),
                       l2=math.sqrt(sum(s.l2 ** 2 for s in sens)),
                       family="+".join(s.family for s in sens),
                       neighbouring=rel.pop())
