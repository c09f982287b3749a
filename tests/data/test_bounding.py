"""Contribution bounding: keep-k by the unit-local rule, truncation at H, reward clipping + scaling."""

import numpy as np
import polars as pl
import pytest
import xxhash

from privaudit.data.bounding import PRIORITY_HASH_SEED, bound_contributions, episode_priority
from privaudit.spec import DomainSpec
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
