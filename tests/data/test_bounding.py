"""Contribution bounding: keep-k by the unit-local rule, truncation at H, reward clipping + scaling."""

import numpy as np
import polars as pl
import pytest
import xxhash

from privaudit.data.bounding import PRIORITY_HASH_SEED, bound_contributions, cap_per_cell, episode_priority
from privaudit.data.parts import PART_ROWS_VARIABLE
from privaudit.core.errors import UsageError
from privaudit.core.spec import DomainSpec
from tests._release_logs import spec_doc


def _spec(**kw):
    return DomainSpec.from_dict(spec_doc(**kw))


def _log(episodes):
    """episodes: list of (episode_id, unit, n_steps, rewards or None)."""
    rows = []
    for e, u, n, rew in episodes:
        for h in range(n):
            rows.append({"episode_id": e, "unit_id": u, "step": h, "state": 0, "action": 0,
                         "reward": 0.5 if rew is None else rew[h], "next_state": 0})
    return pl.DataFrame(rows).lazy()


def _xxh64_signed(text: str) -> int:
    """Independent oracle of the priority key: the `xxhash` package, 64 bits read as signed."""
    v = xxhash.xxh64_intdigest(text.encode("utf-8"), seed=42)
    return v - (1 << 64) if v >= 1 << 63 else v


def _reference_kept(df: pl.DataFrame, k: int) -> set:
    """Slow reference of the keep-k rule: per unit, sort ids by (xxh64 of the id's text, text), keep k."""
    by_unit: dict = {}
    for e, u in df.select("episode_id", "unit_id").unique().iter_rows():
        by_unit.setdefault(u, []).append((_xxh64_signed(str(e)), str(e).encode(), e))
    return {e for lst in by_unit.values() for *_, e in sorted(lst)[:k]}


# Pinned key values: a polars / polars-hash / engine upgrade must not change which episodes are kept.
# Computed once with xxhash.xxh64_intdigest(text.encode(), seed=42) viewed as int64; Spark's
# xxhash64(cast(id as string)) gives the same numbers.
PINNED_STR = {"ep-1": -9118941787761037255, "ep-2": 7602443284458394659, "é€": -3905329090847307182,
              "12345": -4985319033745306281}
PINNED_INT = {12345: -4985319033745306281, -7: -3744000183942445030, 0: -6091425354261976140,
              9223372036854775807: 2407216688009111440}


def test_priority_key_pinned_on_string_ids():
    assert PRIORITY_HASH_SEED == 42
    df = pl.DataFrame({"episode_id": list(PINNED_STR)})
    got = df.select(episode_priority(pl.col("episode_id")))["episode_id"]
    assert got.dtype == pl.Int64
    assert got.to_list() == list(PINNED_STR.values())
    assert [_xxh64_signed(t) for t in PINNED_STR] == list(PINNED_STR.values())


@pytest.mark.parametrize("dtype", [pl.Int64, pl.Int32, pl.UInt64])
def test_priority_key_pinned_on_integer_ids(dtype):
    """Integer ids hash their decimal text: 12345 and "12345" get the same key; negatives keep their sign."""
    ids = [i for i in PINNED_INT if pl.Series([i]).cast(dtype, strict=False).null_count() == 0]
    df = pl.DataFrame({"episode_id": pl.Series(ids).cast(dtype)})
    got = df.select(episode_priority(pl.col("episode_id")))["episode_id"].to_list()
    assert got == [PINNED_INT[i] for i in ids] and len(ids) >= 2
    assert PINNED_INT[12345] == PINNED_STR["12345"]


def test_priority_key_on_categorical_ids_is_the_text_key():
    df = pl.DataFrame({"episode_id": pl.Series(list(PINNED_STR), dtype=pl.Categorical)})
    got = df.select(episode_priority(pl.col("episode_id")))["episode_id"].to_list()
    assert got == list(PINNED_STR.values())


def test_keep_k_episodes_per_unit_matches_reference():
    rng = np.random.default_rng(11)
    k = 2
    n_ep = 300
    units = rng.integers(0, 60, n_ep)  # many units over k
    eps = [(int(e), f"u{units[e]}", int(rng.integers(1, 4)), None) for e in range(n_ep)]
    lf = _log(eps)
    bounded, rep = bound_contributions(lf, _spec(k=k, H=5, unit_column="patient"))
    kept = set(bounded.select("episode_id").unique().collect()["episode_id"].to_list())
    assert kept == _reference_kept(lf.collect(), k)
    per_unit = bounded.select("episode_id", "unit_id").unique().collect().group_by("unit_id").len()
    assert per_unit["len"].max() <= k
    n_per_unit = np.bincount(units)
    assert rep.episodes == n_ep and rep.units == int((n_per_unit > 0).sum())
    assert rep.episodes_dropped == int(np.maximum(n_per_unit - k, 0).sum())
    assert rep.units_over_k == int((n_per_unit > k).sum())
    dropped_rows = sum(n for e, u, n, _ in eps if e not in kept)
    assert rep.rows_dropped_with_episodes == dropped_rows


def test_keep_rule_depends_only_on_the_units_own_data():
    """Replacing every other unit (ids, count, order) never changes which of u's episodes are kept."""
    k = 2
    mine = [(e, "u", 2, None) for e in (101, 7, 55, 9000, 3)]
    others_a = [(e, f"v{e % 5}", 1, None) for e in range(200, 230)]
    others_b = [(e, f"w{e % 3}", 3, None) for e in range(5000, 5011)] + [(42, "x", 1, None)]
    spec = _spec(k=k, H=5, unit_column="patient")
    kept = []
    for others in (others_a, others_b[::-1], others_b + others_a):
        for order in (mine + others, others + mine[::-1]):
            bounded, _ = bound_contributions(_log(order), spec)
            got = bounded.filter(pl.col("unit_id") == "u").select("episode_id").unique().collect()
            kept.append(frozenset(got["episode_id"].to_list()))
    assert len(set(kept)) == 1 and len(kept[0]) == k


def test_truncation_at_horizon():
    H = 3
    lf = _log([(1, "a", 5, None), (2, "b", 3, None), (3, "c", 1, None)])
    bounded, rep = bound_contributions(lf, _spec(H=H, k=1, unit_column="patient"))
    df = bounded.collect()
    assert df["step"].max() == H - 1
    assert df.group_by("episode_id").len().sort("episode_id")["len"].to_list() == [3, 3, 1]
    assert (rep.steps_dropped, rep.episodes_truncated, rep.episodes_dropped) == (2, 1, 0)


def test_rewards_clipped_and_scaled():
    lf = _log([(1, "a", 5, [-3.0, -1.0, 1.0, 3.0, 9.0])])
    bounded, rep = bound_contributions(lf, _spec(H=5, k=1, reward_range=(-1.0, 3.0), unit_column="patient"))
    r = bounded.sort("step").collect()["reward"].to_list()
    assert r == pytest.approx([0.0, 0.0, 0.5, 1.0, 1.0], abs=1e-15)
    assert rep.rewards_clipped == 2


def test_clipped_rewards_counted_only_on_kept_rows():
    # the out-of-range rewards sit at steps >= H: they are dropped, not clipped
    lf = _log([(1, "a", 4, [0.2, 0.3, 7.0, -7.0])])
    _, rep = bound_contributions(lf, _spec(H=2, k=1, unit_column="patient"))
    assert (rep.rewards_clipped, rep.steps_dropped) == (0, 2)


def test_no_unit_column_each_episode_is_its_own_unit():
    df = _log([(1, "a", 2, None), (2, "a", 2, None), (3, "a", 2, None)]).collect().drop("unit_id")
    bounded, rep = bound_contributions(df.lazy(), _spec(H=5, k=1))
    assert bounded.collect().height == 6 and rep.episodes_dropped == 0 and rep.units == 3


def test_report_repr_hides_private_counts():
    lf = _log([(1, "a", 9, None)])
    _, rep = bound_contributions(lf, _spec(H=2, k=1, unit_column="patient"))
    assert "7" not in repr(rep) and rep.steps_dropped == 7 and rep.changed
    assert "7 steps dropped" in rep.summary()


# ---------------------------------------------------------------- per-cell cap


def _reference_cell_cap(df: pl.DataFrame, c: int, stationary: bool, by_unit: bool) -> set:
    """Slow reference of the keep rule: per unit, episodes by (xxh64 key, text), then steps; first c per cell."""
    order = {}
    for e in df["episode_id"].unique().to_list():
        order[e] = (_xxh64_signed(str(e)), str(e).encode())
    rows = sorted(df.iter_rows(named=True),
                  key=lambda r: ((r["unit_id"] if by_unit else r["episode_id"]), order[r["episode_id"]], r["step"]))
    seen, kept = {}, set()
    for r in rows:
        cell = (r["state"], r["action"]) if stationary else (r["step"], r["state"], r["action"])
        key = ((r["unit_id"] if by_unit else r["episode_id"]),) + cell
        if seen.get(key, 0) < c:
            seen[key] = seen.get(key, 0) + 1
            kept.add((r["episode_id"], r["step"]))
    return kept


@pytest.mark.parametrize("c,stationary", [(1, True), (2, True), (1, False), (2, False)])
@pytest.mark.parametrize("by_unit", [True, False])
@pytest.mark.parametrize("split", [False, True])
def test_cell_cap_matches_reference(c, stationary, by_unit, split, monkeypatch):
    if split:  # units split into parts of about 40 rows, capped one after the other: the same rows kept
        monkeypatch.setenv(PART_ROWS_VARIABLE, "80")  # part_rows(CAP_PER) = 40
    rng = np.random.default_rng(7)
    n, H = 60, 6
    rows = []
    for e in range(n):  # few states and actions: many revisits of a cell inside a unit
        u = int(rng.integers(15))
        for h in range(int(rng.integers(1, H + 1))):
            rows.append({"episode_id": f"e{e}", "unit_id": u, "step": h, "state": int(rng.integers(2)),
                         "action": int(rng.integers(2)), "reward": 0.5, "next_state": 0})
    df = pl.DataFrame(rows)
    if not by_unit:
        df = df.drop("unit_id")
    spec = _spec(H=H, S=2, A=2, k=3, terminals=(), unit_column="unit_id" if by_unit else None)
    bounded, report = bound_contributions(df.lazy(), spec)
    kept_df = bounded.collect()
    capped, rep = cap_per_cell(bounded, report, c, stationary=stationary)
    assert rep.cell_steps_dropped is None  # the cap reads no row: the count that follows completes it
    got = set(capped.select("episode_id", "step").collect().iter_rows())
    want = _reference_cell_cap(kept_df, c, stationary, by_unit)
    assert got == want
    rep = rep.with_cell_kept(len(got))
    assert rep.cell_steps_seen == kept_df.height and rep.cell_steps_dropped == kept_df.height - len(want)
    # per step, one episode visits each (h, s, a) once: nothing to drop when each episode is its own unit
    assert (rep.cell_steps_dropped > 0) == (stationary or by_unit)
    assert rep.max_per_cell == c and rep.cell_cap_stationary is stationary and rep.changed == (stationary or by_unit)
    assert set(capped.collect_schema().names()) == set(bounded.collect_schema().names())


def test_cell_cap_keep_rule_is_unit_local():
    # replacing another unit never changes which steps of unit 0 survive (substitution proof)
    spec = _spec(H=5, S=2, A=1, k=2, terminals=(), unit_column="unit_id")
    base = [("a", 0, 5, None), ("b", 0, 3, None)]
    out = []
    for other in ([("x", 1, 4, None)], [("y", 1, 2, None), ("z", 1, 5, None)]):
        bounded, report = bound_contributions(_log(base + other), spec)
        capped, _ = cap_per_cell(bounded, report, 2, stationary=True)
        out.append(set(capped.filter(pl.col("unit_id") == 0).select("episode_id", "step").collect().iter_rows()))
    assert out[0] == out[1] and len(out[0]) == 2  # one (s, a) cell: two steps kept


def test_cell_cap_per_step_with_c_at_least_k_drops_nothing():
    spec = _spec(H=4, S=2, A=1, k=1, terminals=())
    bounded, report = bound_contributions(_log([(0, 0, 4, None), (1, 1, 4, None)]), spec)
    capped, rep = cap_per_cell(bounded, report, 1, stationary=False)
    rep = rep.with_cell_kept(capped.collect().height)
    assert rep.cell_steps_dropped == 0 and rep.cell_steps_seen == 8
    capped, rep = cap_per_cell(bounded, report, 1, stationary=True)  # pooled: 3 revisits per episode
    assert "8 steps seen" in rep.summary()
    rep = rep.with_cell_kept(capped.collect().height)
    assert rep.cell_steps_dropped == 6 and "6 of 8 steps dropped (75.00%)" in rep.summary()
    with pytest.raises(UsageError, match="kept"):
        rep.with_cell_kept(9)


@pytest.mark.parametrize("c", [0, 1.0, True])
def test_cell_cap_refuses_bad_c(c):
    spec = _spec(H=2, S=2, A=1, k=1, terminals=())
    bounded, report = bound_contributions(_log([(0, 0, 2, None)]), spec)
    with pytest.raises(UsageError, match="max_per_cell"):
        cap_per_cell(bounded, report, c, stationary=True)


# ---------------------------------------------------------------- declared return bound


def _spec_with_return(bound, **kw):
    doc = spec_doc(**kw)
    doc["return_bound"] = bound
    return DomainSpec.from_dict(doc)


def test_running_return_clipped_at_the_declared_bound():
    spec = _spec_with_return([0, 1], H=4, S=2, A=1, terminals=(), reward_range=(0.0, 2.0))  # scaled bound 0.5
    assert spec.scaled_return_max == 0.5
    lf = _log([(0, 0, 3, [0.4, 0.8, 2.0]), (1, 1, 2, [0.2, 0.6]), (2, 2, 4, [5.0, 0, 0, 0])])
    bounded, report = bound_contributions(lf, spec)
    got = {(e, h): r for e, h, r in bounded.select("episode_id", "step", "reward").collect().iter_rows()}
    # episode 0 scaled 0.2, 0.4, 1.0: running 0.2, 0.6 -> clipped at 0.5: 0.2, 0.3, 0
    assert [got[(0, h)] for h in range(3)] == pytest.approx([0.2, 0.3, 0.0], abs=1e-15)
    assert [got[(1, h)] for h in range(2)] == pytest.approx([0.1, 0.3])  # returns 0.4 <= 0.5: untouched
    assert [got[(2, h)] for h in range(4)] == pytest.approx([0.5, 0, 0, 0])  # 5 clipped to 2 -> 1 -> 0.5
    assert report.returns_clipped == 2 and report.rewards_clipped == 1 and report.changed
    assert "return was clipped at the declared return bound: 2" in report.summary()


def test_return_bound_holds_for_any_input():
    # property: after bounding, every episode's scaled return and every suffix is <= B (what learners use)
    rng = np.random.default_rng(3)
    spec = _spec_with_return([-1, 1], H=6, S=3, A=2, terminals=(), reward_range=(-1.0, 1.0))
    B = spec.scaled_return_max
    eps = [(e, e, int(rng.integers(1, 9)), None) for e in range(80)]
    lf = _log([(e, u, n, list(rng.uniform(-1.5, 1.5, n))) for e, u, n, _ in eps])
    bounded, report = bound_contributions(lf, spec)
    df = bounded.collect().sort(["episode_id", "step"])
    per_ep = df.group_by("episode_id").agg(pl.col("reward").sum().alias("G"), pl.col("reward").min().alias("m"))
    assert per_ep["G"].max() <= B + 1e-12 and per_ep["m"].min() >= 0.0
    assert report.returns_clipped > 0  # the draw made some episodes exceed B (else the test proves nothing)
    assert spec.value_bounds()[0] == B
