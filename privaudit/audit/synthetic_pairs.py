"""Synthetic neighbouring pairs: two units built from the spec alone, added to the logs.

D = logs + u*, D' = logs + v*: no real unit is removed, and u*, v* are built
so that the pair reaches the declared sensitivity whatever the logs hold
(docs/audit.md, "Neighbouring pairs"). A pair that reads no real unit may be
shared (``audit.report.sharing``).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from privaudit.audit.pairs import NeighbouringPair, unit_column, visits_change
from privaudit.core.errors import UsageError
from privaudit.core.spec import DomainSpec


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
    description["visits_change"] = visits_change(d, d_prime, spec, spec.max_episodes_per_unit, pooled=pooled)
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
