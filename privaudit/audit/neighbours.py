"""Neighbouring pairs (D, D') for an audit: canaries and explicit pairs.

privaudit's neighbouring relation is substitution: D' is D with all the data
of one privacy unit replaced by other data (docs/privacy.md). An audit's violation finding is only
sound for such a pair, so explicit pairs are checked before use
(:mod:`privaudit.audit.explicit_pairs`).

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

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from privaudit.core.errors import UsageError
from privaudit.core.spec import DomainSpec

CANARY_STRATEGIES = ("rare", "repeat", "random", "synthetic", "synthetic-repeat")


@dataclass(frozen=True)
class NeighbouringPair:
    """Two datasets that differ in one privacy unit (substitution).

    Attributes
    ----------
    d : polars.DataFrame
        D, standard trajectory schema.
    d_prime : polars.DataFrame
        D', same schema.
    description : dict
        JSON-able: ``kind`` (``canary-rare``, ``canary-random``, ``explicit``,
        ``identical``), ``relation`` (``substitution``), the removed unit (as
        its row count only: neither its id nor a hash of it), the canary
        episode's steps.
    """

    d: pl.DataFrame
    d_prime: pl.DataFrame
    description: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"NeighbouringPair(kind={self.description.get('kind')!r}, rows={self.d.height}/{self.d_prime.height})"


def unit_column(df: pl.DataFrame) -> str:
    return "unit_id" if "unit_id" in df.columns else "episode_id"


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
        counts = _visit_counts(logs, H, S, A)[:, nonterm, :].sum(axis=0).reshape(-1)
        flat = np.full(H, int(counts.argmin()), dtype=np.int64)
        states = nonterm[flat // A]
        actions = flat % A
    elif strategy == "rare":
        counts = _visit_counts(logs, H, S, A)[:, nonterm, :].reshape(H, -1)  # (H, S_nt * A)
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
        description["visits_change"] = _visits_change(logs, d_prime, spec, k, pooled=strategy == "repeat")
        if "warning" in description["visits_change"]:
            description["warning"] = description["visits_change"].pop("warning")
    return NeighbouringPair(logs, d_prime, description)


def check_synthetic_pair_exists(spec: DomainSpec) -> np.ndarray:
    """The spec's non-terminal states, after checking that :func:`synthetic_units` can build its pair.

    From the spec alone, so a caller that audits late (the pipeline) can refuse before it reads a
    row or charges a budget.

    Returns
    -------
    ndarray of int, shape (n,)
        The non-terminal states, in index order.

    Raises
    ------
    UsageError
        If the spec has fewer than two non-terminal (s, a) cells (no pair of disjoint units exists;
        the declared sensitivity is then not attained).
    """
    nonterm = np.setdiff1d(np.arange(spec.n_states), np.asarray(spec.terminal_states, dtype=int))
    if nonterm.size * spec.n_actions < 2:
        raise UsageError("the spec has fewer than two non-terminal (state, action) cells: no two units "
                         "on disjoint cells exist, so no audit pair attains the declared sensitivity.")
    return nonterm


def synthetic_units(spec: DomainSpec, pooled: bool, spread: int | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Two synthetic privacy units u*, v* built from the spec alone.

    Each unit is k = ``spec.max_episodes_per_unit`` identical full-length
    (H-step) episodes; the two units sit on disjoint cells at every step, so
    the pair (logs + u*, logs + v*) attains the declared sensitivity of every
    count family at once (``privaudit.privacy.sensitivity``, "Both are
    attained"): per step h, L2 = k sqrt(2H) and L1 = 2kH; pooled over h
    (``pooled=True``), L2 = kH sqrt(2).

    Cells: let c_0, c_1, ... be the non-terminal (s, a) cells in index order
    (cyclically). Per step: u* is at c_h at step h and v* at c_{h+1}, so at
    each h they differ (needs >= 2 cells), and a cell of v* at step h is a
    cell of u* at step h + 1 (noise shared across steps h becomes visible in
    the difference of those two view cells). Each episode moves to the state
    of its next cell (its next state at the last step: the state of the cell
    after). Pooled: u* stays in c_0 and v* in c_1 for all H steps with the
    self-loop s -> s (one repeated cell: the pooled worst case). Rewards: the
    spec's public reward of the next state when it declares one, else r_max at
    every step (scaled reward 1, the reward sums' worst case).

    Parameters
    ----------
    spec : DomainSpec
        Supplies H, S, A, k, terminal states, the reward range and public reward.
    pooled : bool
        True for statistics pooled over h (``--stationary`` releases).
    spread : int, optional
        For a per-unit per-cell cap c' (DP-PBB's ``max_per_cell``): each unit
        puts exactly ``spread`` of its k H transitions in each of its cells
        (the last one the remainder), walking the cells in the order step h,
        then episode e (transition t = h k + e in cell t // spread), and v*
        starts on the first cell of a state after u*'s last one. Every
        episode of a unit then starts in one state when ceil(k / spread) <= A.
        The visit vector changes by L2 sqrt(2 f(kH, spread)) pooled (f as in
        ``privacy.sensitivity``: sqrt(2 c' k H) when c' divides k H) and the
        start counts by sqrt(2) k. ``pooled`` is ignored: distinct cells are
        distinct per step too (with ``spread`` = min(c, k) per step).

    Returns
    -------
    (u_star, v_star) : tuple of polars.DataFrame
        Standard schema (``episode_id``, ``step``, ``state``, ``action``,
        ``reward``, ``next_state``, ``unit_id``; Int64 ids and cells, Float64
        reward), k * H rows each; u*'s unit and episode ids are 0 and 0..k-1,
        v*'s 1 and k..2k-1.

    Raises
    ------
    UsageError
        If the spec has fewer than two non-terminal (s, a) cells (no pair of
        disjoint units exists; the sensitivity is then not attained).
    """
    H, A, k = spec.horizon, spec.n_actions, spec.max_episodes_per_unit
    nonterm = check_synthetic_pair_exists(spec)
    M = nonterm.size * A
    pub = spec.public_reward_vector()
    hi = float(spec.reward_range[1])
    if spread is not None:
        return _spread_units(spec, nonterm, int(spread), pub, hi)
    frames = []
    for which in (0, 1):
        j = np.full(H + 1, which) if pooled else (np.arange(H + 1) + which)
        cell = j % M
        states, actions = nonterm[cell // A], cell % A
        next_states = states[1:]
        rewards = pub[next_states] if pub is not None else np.full(H, hi)
        ep = which * k + np.repeat(np.arange(k), H)
        frames.append(pl.DataFrame({
            "episode_id": ep.astype(np.int64), "step": np.tile(np.arange(H), k).astype(np.int64),
            "state": np.tile(states[:H], k).astype(np.int64), "action": np.tile(actions[:H], k).astype(np.int64),
            "reward": np.tile(np.asarray(rewards, dtype=np.float64), k),
            "next_state": np.tile(next_states, k).astype(np.int64),
            "unit_id": np.full(k * H, which, dtype=np.int64)}))
    return frames[0], frames[1]


def _spread_units(spec: DomainSpec, nonterm: np.ndarray, spread: int, pub, hi: float):
    """The units of :func:`synthetic_units` with ``spread`` transitions per cell (see there)."""
    H, A, k = spec.horizon, spec.n_actions, spec.max_episodes_per_unit
    if spread < 1:
        raise UsageError(f"`spread` must be an integer >= 1. Found {spread!r}.")
    n_cells = -(-k * H // spread)
    offset = -(-n_cells // A) * A                      # v* starts on a fresh state
    if offset + n_cells > nonterm.size * A:
        raise UsageError(f"the spec has {nonterm.size * A} non-terminal (state, action) cells; two synthetic units "
                         f"with {spread} transitions per cell need {offset + n_cells}.")
    e, h = np.meshgrid(np.arange(k), np.arange(H), indexing="ij")  # (k, H): episode-major rows
    t = h * k + e
    frames = []
    for which in (0, 1):
        cell = which * offset + t // spread
        after = which * offset + np.minimum((t + k) // spread, n_cells)  # the next step's cell (last: one after)
        states, actions = nonterm[cell // A], cell % A
        next_states = nonterm[np.minimum(after, nonterm.size * A - 1) // A]
        rewards = pub[next_states] if pub is not None else np.full(next_states.shape, hi)
        frames.append(pl.DataFrame({
            "episode_id": (which * k + e).ravel().astype(np.int64), "step": h.ravel().astype(np.int64),
            "state": states.ravel().astype(np.int64), "action": actions.ravel().astype(np.int64),
            "reward": np.asarray(rewards, dtype=np.float64).ravel(), "next_state": next_states.ravel().astype(np.int64),
            "unit_id": np.full(k * H, which, dtype=np.int64)}))
    return frames[0], frames[1]


def synthetic_pair(spec: DomainSpec, pooled: bool, logs: pl.DataFrame | None = None,
                   spread: int | None = None) -> NeighbouringPair:
    """The pair (logs + u*, logs + v*) of :func:`synthetic_units`: it depends on no real unit.

    Parameters
    ----------
    spec : DomainSpec
    pooled : bool
        One repeated cell (statistics pooled over h) instead of a walk over cells.
    spread : int, optional
        Transitions per cell of each unit (:func:`synthetic_units`; DP-PBB's
        per-cell cap). The description's ``visits_change`` is then left to
        the caller (the declared sensitivity is the capped one).
    logs : polars.DataFrame, optional
        The common part of both datasets (standard schema). None: the empty
        dataset. For a mechanism whose output is its exact statistics plus
        noise drawn independently of their values (the tabular release:
        statistics are sums over units after per-unit bounding, and
        x + Z with x integer is x + rint(Z) when rounded), the trade-off curve of
        (logs + u*, logs + v*) is that of (u*, v*) shifted by the bijection
        y -> y + stats(logs), applied to both sides: the same for every
        ``logs``. Auditing with ``logs=None`` is then the audit of every such
        pair, and reads nothing of the private logs.

    Returns
    -------
    NeighbouringPair
        ``description``: ``kind`` ``synthetic`` (or ``synthetic-repeat`` when
        pooled), ``relation`` substitution, ``baseline`` (``empty`` or
        ``logs``), the units' steps, ``visits_change`` (achieved and
        declared L2 of the visits, per step or pooled).

    Raises
    ------
    UsageError
        See :func:`synthetic_units`.
    """
    u, v = synthetic_units(spec, pooled, spread)
    if logs is not None and logs.height:
        unit = unit_column(logs)
        base_ep, base_unit = _next_int_id(logs["episode_id"]), _next_int_id(logs[unit])
        k = spec.max_episodes_per_unit

        def onto(frame, which):
            ep = frame["episode_id"] - which * k
            add = frame.with_columns(
                episode_id=_shifted_ids(logs["episode_id"], ep + base_ep + which * k, "synthetic-ep"),
                unit_id=_shifted_ids(logs[unit], frame["unit_id"] + base_unit, "synthetic-unit"))
            if unit == "episode_id":
                add = add.drop("unit_id")
            return pl.concat([logs, add.with_columns(
                [pl.lit(None).cast(logs.schema[c]).alias(c) for c in logs.columns if c not in add.columns]
            ).select(logs.columns).cast(logs.schema)])
        d, d_prime = onto(u, 0), onto(v, 1)
    else:
        d, d_prime = u, v
    steps = {}
    for name, f in (("u", u), ("v", v)):
        one = f.head(spec.horizon)  # episode 0 (rows are episode-major)
        steps[name] = [{"h": int(h), "state": int(s), "action": int(a), "reward": float(r), "next_state": int(n)}
                       for h, s, a, r, n in one.select("step", "state", "action", "reward", "next_state").iter_rows()]
    description = {
        "kind": "synthetic-spread" if spread is not None else ("synthetic-repeat" if pooled else "synthetic"),
        "relation": "substitution",
        "baseline": "logs" if logs is not None and logs.height else "empty",
        "units": {"episodes_each": spec.max_episodes_per_unit, "u": steps["u"], "v": steps["v"]},
    }
    if spread is not None:
        description["units"]["transitions_per_cell"] = int(spread)
        return NeighbouringPair(d, d_prime, description)
    # the achieved change, recorded as for the canaries of real units (equals the declared one)
    description["visits_change"] = _visits_change(d, d_prime, spec, spec.max_episodes_per_unit, pooled=pooled)
    if "warning" in description["visits_change"]:
        description["warning"] = description["visits_change"].pop("warning")
    return NeighbouringPair(d, d_prime, description)


def _next_int_id(series: pl.Series):
    return int(series.max()) + 1 if series.dtype.is_integer() and series.len() else 0


def _shifted_ids(existing: pl.Series, ids: pl.Series, tag: str) -> pl.Series:
    """Fresh ids (integers above the existing ones, or tagged strings) in the dtype of ``existing``."""
    if existing.dtype.is_integer():
        return ids.cast(existing.dtype)
    return pl.Series(ids.name, [f"{tag}-{i}" for i in ids.to_list()], dtype=pl.Utf8)  # k * H ids


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


def _visits_change(d: pl.DataFrame, d_prime: pl.DataFrame, spec: DomainSpec, k: int, pooled: bool) -> dict:
    """L2 change of the visits between D and D' (raw rows) against the declared sensitivity.

    Declared (a unit of k episodes of H steps, docs/privacy.md):
    k sqrt(2H) per step h, k H sqrt(2) pooled over h. A warning is added when
    the pair falls short (the removed unit has fewer or shorter episodes, or
    episodes in different cells): the audit then tests a weaker pair.
    """
    H, S, A = spec.horizon, spec.n_states, spec.n_actions
    diff = _visit_counts(d_prime, H, S, A) - _visit_counts(d, H, S, A)
    if pooled:
        diff = diff.sum(axis=0)
    achieved = float(np.sqrt((diff.astype(np.float64) ** 2).sum()))
    declared = float(k * H * np.sqrt(2)) if pooled else float(k * np.sqrt(2 * H))
    out = {"statistic": "visits pooled over h" if pooled else "visits per step h",
           "l2": achieved, "declared_l2": declared}
    if achieved < declared * (1 - 1e-9):
        out["warning"] = (f"the canary pair changes the {out['statistic']} by L2 {achieved:.4g}, below the declared "
                          f"sensitivity {declared:.4g} (k={k}, H={H}): no unit of D has {k} full-length "
                          "episode(s) in the same cells, so this audit tests a weaker pair than the worst case")
    return out


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


def _visit_counts(logs: pl.DataFrame, H: int, S: int, A: int) -> np.ndarray:
    """n_h(s, a) of D over the declared domain (rows outside it are ignored)."""
    cells = (logs.filter((pl.col("step") < H) & pl.col("state").is_between(0, S - 1)
                         & pl.col("action").is_between(0, A - 1))
             .group_by("step", "state", "action").len())
    out = np.zeros((H, S, A), dtype=np.int64)
    out[cells["step"].to_numpy(), cells["state"].to_numpy(), cells["action"].to_numpy()] = cells["len"].to_numpy()
    return out
