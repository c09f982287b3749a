"""Canary pairs (D, D') for an audit: D' is D with one privacy unit replaced by a canary.

privaudit's neighbouring relation is substitution: D' is D with all the data
of one privacy unit replaced by other data (docs/privacy.md). An audit's
violation finding is only sound for such a pair, so explicit pairs are checked
before use (:mod:`privaudit.audit.explicit_pairs`); pairs built from the spec
alone are :mod:`privaudit.audit.synthetic_pairs`.

Canary strategies (``make_pair``)
---------------------------------
``rare``
    Remove the unit with the most rows (the longest contribution; ties: the
    smallest id) and add one canary episode of H steps that, at each step h,
    sits in the least-visited (h, s, a) cell of D over non-terminal states
    (ties: a cell not used at an earlier step, then the smallest (s, a); so the
    canary does not repeat one cell at every h, which would hide noise shared
    across h). Its next state at step h is its state at
    h + 1, so its transition cells are as rare as its visit cells. It ends in
    an extreme reward: the state with the largest public reward when the spec
    declares a public reward function (e.g. ICU-Sepsis survival, state 714),
    else reward r_max at the last step (r_min before). This makes the pair as
    distinguishable as the data allows: removed and added cells do not cancel,
    and the added cells go from (nearly) 0 to 1 (docs/audit.md, Background:
    canaries). The auditor is the data holder's tool, so it may read D.
    When the spec's privacy unit holds k > 1 episodes, the canary unit is k
    copies of the canary walk (each canary cell changes by k) and the removed
    unit is the one whose visits have the largest sum of squares (k episodes
    in the same cells; for k = 1 the unit with the most rows). The pair then
    attains the declared per-h sensitivity k sqrt(2H) of the visits only if
    D has such a unit; the achieved and declared L2 change are recorded in
    the description (``visits_change``) with a ``warning`` when it falls short.
``repeat``
    As ``rare``, but the canary stays in one cell: the least-visited
    non-terminal (s, a) over all steps, repeated at every h with the
    self-loop s -> s. This attains the sensitivity of statistics pooled over
    h (``--stationary`` releases, L2 = kH sqrt(2)), which ``rare`` does not
    (k copies and the removed unit chosen as for ``rare``, pooled over h).
``random``
    Remove a uniformly random unit and add an episode of H steps with uniform
    non-terminal states and actions and uniform rewards in the range (or the
    public reward). A typical, not a worst-case, neighbour.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from privaudit.audit.pairs import NeighbouringPair, unit_column, visit_counts, visits_change
from privaudit.audit.synthetic_pairs import synthetic_pair
from privaudit.core.errors import UsageError
from privaudit.core.spec import DomainSpec

CANARY_STRATEGIES = ("rare", "repeat", "random", "synthetic", "synthetic-repeat")


def _fresh_id(series: pl.Series, tag: str):
    if series.dtype.is_integer():
        return int(series.max()) + 1 if series.len() else 0
    return f"{tag}-{series.n_unique()}"


def make_pair(logs: pl.DataFrame, spec: DomainSpec, strategy: str = "rare",
              *, rng: np.random.Generator) -> NeighbouringPair:
    """Build D' from D = ``logs`` by replacing one privacy unit with a canary.

    Parameters
    ----------
    logs : polars.DataFrame
        D in the standard schema (``episode_id``, ``step``, ``state``,
        ``action``, ``reward``, ``next_state``, optional ``terminated``,
        ``truncated``, ``unit_id``).
    spec : DomainSpec
        Supplies H, S, A, terminal states, the reward range and public reward.
    strategy : {"rare", "repeat", "random", "synthetic", "synthetic-repeat"}
        See the module docstring; ``synthetic`` / ``synthetic-repeat``:
        :func:`synthetic_pair` on ``logs`` (per step / pooled).
    rng : numpy.random.Generator
        Used by ``random`` only.

    Returns
    -------
    NeighbouringPair
        D = ``logs`` (or logs + u* for a synthetic pair) and D', described without any unit's id.

    Raises
    ------
    UsageError
        Unknown strategy, empty logs, or no non-terminal state.
    """
    if strategy not in CANARY_STRATEGIES:
        raise UsageError(f"`canary` must be one of {CANARY_STRATEGIES}. Found {strategy!r}.")
    if strategy.startswith("synthetic"):  # D = logs + u*, D' = logs + v*: no real unit involved
        return synthetic_pair(spec, pooled=strategy == "synthetic-repeat", logs=logs)
    if logs.height == 0:
        raise UsageError("the logs are empty: an audit needs at least one privacy unit to replace.")
    H, S, A = spec.horizon, spec.n_states, spec.n_actions
    lo, hi = spec.reward_range
    unit = unit_column(logs)
    nonterm = np.setdiff1d(np.arange(S), np.asarray(spec.terminal_states, dtype=int))
    if nonterm.size == 0:
        raise UsageError("the spec declares every state terminal; no canary episode is possible.")
    per_unit = logs.group_by(unit).len().sort([pl.col("len"), pl.col(unit)], descending=[True, False])
    # a unit of k episodes: the canary unit is k copies of the canary walk (each cell +k, the most
    # a unit of k episodes can change it), when the logs name units (else each episode is its unit)
    k = spec.max_episodes_per_unit if "unit_id" in logs.columns else 1
    if strategy != "random":
        removed = _heaviest_unit(logs, unit, pooled=strategy == "repeat")
    if strategy == "repeat":
        counts = visit_counts(logs, H, S, A)[:, nonterm, :].sum(axis=0).reshape(-1)
        flat = np.full(H, int(counts.argmin()), dtype=np.int64)
        states = nonterm[flat // A]
        actions = flat % A
    elif strategy == "rare":
        counts = visit_counts(logs, H, S, A)[:, nonterm, :].reshape(H, -1)  # (H, S_nt * A)
        flat = np.empty(H, dtype=np.int64)
        used: set[int] = set()
        for h in range(H):  # among the least-visited cells, prefer one not used at an earlier step
            ties = np.flatnonzero(counts[h] == counts[h].min())
            fresh = [c for c in ties[: H + 1] if c not in used]
            flat[h] = fresh[0] if fresh else ties[0]
            used.add(int(flat[h]))
        states = nonterm[flat // A]
        actions = flat % A
    else:
        removed = per_unit[unit][int(rng.integers(per_unit.height))]
        states = rng.choice(nonterm, size=H)
        actions = rng.integers(0, A, size=H)
    next_states = np.empty(H, dtype=np.int64)
    next_states[:-1] = states[1:]
    pub = spec.public_reward_vector()
    if pub is not None:
        next_states[-1] = int(np.argmax(pub)) if strategy != "random" else int(rng.integers(S))
        rewards = pub[next_states]
    else:
        next_states[-1] = states[-1] if strategy != "random" else int(rng.choice(nonterm))
        if strategy != "random":
            rewards = np.full(H, lo, dtype=float)
            rewards[-1] = hi
        else:
            rewards = rng.uniform(lo, hi, size=H)
    copies = 1 if strategy == "random" else k  # random: a typical neighbour, one episode
    canary_df = canary_frame(logs, spec, states, actions, rewards, next_states, copies=copies)
    d_prime = pl.concat([logs.filter(pl.col(unit) != removed), canary_df])
    removed_rows = int(logs.filter(pl.col(unit) == removed).height)
    description = {
        "kind": f"canary-{strategy}",
        "relation": "substitution",
        "removed_unit": {"rows": removed_rows},  # never its id nor a hash of it (enumerable ids)
        "canary": {"episodes": copies, "steps": [
            {"h": h, "state": int(states[h]), "action": int(actions[h]),
             "reward": float(rewards[h]), "next_state": int(next_states[h])} for h in range(H)]},
    }
    if strategy != "random":
        description["visits_change"] = visits_change(logs, d_prime, spec, k, pooled=strategy == "repeat")
        if "warning" in description["visits_change"]:
            description["warning"] = description["visits_change"].pop("warning")
    return NeighbouringPair(logs, d_prime, description)


def _heaviest_unit(logs: pl.DataFrame, unit: str, pooled: bool):
    """The unit whose visits n_h(s, a) (pooled: n(s, a)) have the largest sum of squares.

    Removing it changes the visits the most in L2 (a unit whose k episodes
    share cells counts k^2 per cell). For one episode per unit this is the
    unit with the most rows. Ties: most rows, then the smallest id.
    """
    keys = [unit, "state", "action"] if pooled else [unit, "step", "state", "action"]
    sq = (logs.group_by(keys).len().group_by(unit)
          .agg((pl.col("len").cast(pl.Int64) ** 2).sum().alias("sq"), pl.col("len").sum().alias("rows"))
          .sort(["sq", "rows", unit], descending=[True, True, False]))
    return sq[unit][0]


def canary_frame(logs: pl.DataFrame, spec: DomainSpec, states, actions, rewards, next_states,
                 copies: int = 1) -> pl.DataFrame:
    """``copies`` identical canary episodes of H rows each, one fresh privacy unit, in the schema of ``logs``.

    Each copy has a fresh episode id; all share one fresh unit id (when
    ``logs`` has ``unit_id``). ``terminated`` / ``truncated`` (when ``logs``
    has them) mark each episode's last row, terminated when its next state is
    terminal; other columns are null.
    """
    H = len(states)
    ends_terminal = int(next_states[-1]) in set(spec.terminal_states)
    ep = logs["episode_id"]
    if ep.dtype.is_integer():
        first = int(ep.max()) + 1 if ep.len() else 0
        ep_ids = [first + c for c in range(copies)]
    else:
        ep_ids = [f"canary-{ep.n_unique()}" + ("" if c == 0 else f"-{c}") for c in range(copies)]
    canary = {
        "episode_id": np.repeat(np.asarray(ep_ids, dtype=object), H).tolist(),
        "step": list(range(H)) * copies,
        "state": np.asarray(states).tolist() * copies, "action": np.asarray(actions).tolist() * copies,
        "reward": np.asarray(rewards, dtype=float).tolist() * copies,
        "next_state": np.asarray(next_states).tolist() * copies,
    }
    if "terminated" in logs.columns:
        canary["terminated"] = ([False] * (H - 1) + [ends_terminal]) * copies
    if "truncated" in logs.columns:
        canary["truncated"] = ([False] * (H - 1) + [not ends_terminal]) * copies
    if "unit_id" in logs.columns:
        canary["unit_id"] = [_fresh_id(logs["unit_id"], "canary")] * (H * copies)
    return pl.DataFrame(canary).with_columns(
        [pl.lit(None).cast(logs.schema[c]).alias(c) for c in logs.columns if c not in canary]
    ).select(logs.columns).cast(logs.schema)
