"""Issue 33: validation, bounding and the behaviour-value statistics aggregate episodes and units in parts
(a hash of the key) with memory bounded by one part; the results must not depend on the split.

The logs break the screened rules (flags before an episode's last step, returns outside the declared
bound, units over k); each test compares the report with an independent in-memory computation of the
rule and, where the code splits, the one-pass result with a many-part one.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from privaudit.core.spec import DomainSpec
from privaudit.data import episode_checks
from privaudit.data.bounding import bound_contributions
from privaudit.data.io import open_log
from privaudit.data.parts import PART_ROWS_VARIABLE, hash_parts, part_count
from privaudit.data.validate import validate_logs
from privaudit.privacy.budget import resolve_budget
from privaudit.release.behaviour_value import BehaviourValueRelease
from tests.conftest import tiny_spec_doc
from tests.data.test_validate import random_log

H, S, A, K = 6, 9, 3, 2
G_LO, G_HI = 0.5, 2.5


def broken_log(seed: int, n_episodes: int = 400) -> pl.DataFrame:
    """Valid chains and steps; units of 1-4 episodes (k = 2 is exceeded); flags on the last step and, in
    about one episode in ten, on an earlier one too; rewards in [0, 1.2] (some clipped) summing to returns
    on both sides of [G_LO, G_HI]."""
    rng = np.random.default_rng(seed)
    df = random_log(rng, n_episodes, H, S, A)
    last = pl.col("step") == pl.col("step").max().over("episode_id")
    early = (pl.col("step") == 0) & ~last & (pl.col("episode_id") % 10 == 3)
    units = np.cumsum(rng.integers(0, 2, size=n_episodes) | (rng.random(n_episodes) < 0.5))
    return df.with_columns(terminated=pl.lit(False), truncated=last | early,
                           reward=pl.col("reward") * 1.2,
                           unit_id=pl.lit(pl.Series(units)).gather(pl.col("episode_id")))


def spec() -> DomainSpec:
    doc = tiny_spec_doc(H=H, S=S, A=A, k=K, terminals=(), unit_column="unit_id")
    doc["return_bound"] = [G_LO, G_HI]
    return DomainSpec.from_dict(doc)


def reference(df: pl.DataFrame) -> dict[str, set[int]]:
    """The rows each screened rule must report, computed directly on the whole frame in memory."""
    c = pl.col
    d = df.with_row_index("row").with_columns(hmax=c("step").max().over("episode_id"),
                                              r=c("reward").clip(0.0, 1.0))
    flags = d.filter(c("truncated") & (c("step") < c("hmax")))["row"]
    d = d.sort("episode_id", "step").with_columns(run=c("r").cum_sum().over("episode_id"),
                                                  G=c("r").sum().over("episode_id"))
    above = d.filter(c("run") > G_HI).group_by("episode_id").agg(c("row").first())["row"]
    below = d.filter((c("G") < G_LO) & (c("step") == c("hmax")))["row"]
    eps = d.group_by("episode_id").agg(c("row").min().alias("row0"), c("unit_id").first())
    over = (eps.sort("row0").with_columns(rank=pl.int_range(pl.len()).over("unit_id"))
            .filter(c("rank") == K)["row0"])
    return {"flag_not_last": set(flags.to_list()), "return_above_bound": set(above.to_list()),
            "return_below_bound": set(below.to_list()), "too_many_episodes": set(over.to_list())}


def reported(rep) -> dict[str, set[int]]:
    return {rule: {v["row"] for v in rep.violations if v["rule"] == rule}
            for rule in ("flag_not_last", "return_above_bound", "return_below_bound", "too_many_episodes")}


@pytest.mark.parametrize("seed, text_ids", [(1, False), (2, True)])
def test_screened_rules_report_exactly_the_reference_rows_in_one_and_many_passes(tmp_path, monkeypatch, seed,
                                                                                   text_ids):
    df = broken_log(seed)
    if text_ids:  # string ids: the units' sort and the screens do not depend on the id type
        df = df.with_columns(pl.format("e{}", "episode_id").alias("episode_id"),
                             pl.format("u{}", "unit_id").alias("unit_id"))
    path = tmp_path / "l.parquet"
    df.write_parquet(path)
    want = reference(df)
    assert all(len(rows) >= 5 for rows in want.values()), {r: len(v) for r, v in want.items()}
    one = validate_logs(path, spec(), max_errors=10_000)
    assert reported(one) == want
    assert {r: one.counts[r] for r in want} == {r: len(v) for r, v in want.items()}
    assert one.units == df["unit_id"].n_unique() and one.episodes == df["episode_id"].n_unique()
    monkeypatch.setenv(PART_ROWS_VARIABLE, "97")
    many = validate_logs(path, spec(), max_errors=10_000)
    assert many.to_dict() == one.to_dict()


def test_the_screen_flags_exactly_the_breaking_episodes(tmp_path):
    """The episode table's screens (one streaming aggregate) flag the episodes the rules then re-read: here
    (no duplicate steps) exactly the episodes with a violation, so valid episodes are never re-read."""
    df = broken_log(6)
    path = tmp_path / "l.parquet"
    df.write_parquet(path)
    sp = spec()
    log = open_log(path, sp)
    bounds = episode_checks.ReturnBounds(H, *sp.reward_range, *sp.return_bound)
    table = episode_checks.episode_table(log, True, True, ["terminated", "truncated"], bounds).frame
    episode_of = dict(zip(range(df.height), df["episode_id"].to_list()))
    want = {r: {episode_of[row] for row in rows} for r, rows in reference(df).items()}
    for rule, column in (("flag_not_last", "flag_suspect"), ("return_above_bound", "return_high"),
                         ("return_below_bound", "return_low")):
        assert set(table.filter(pl.col(column))["episode_id"].to_list()) == want[rule], rule


def test_bounding_in_parts_keeps_the_same_rows_and_report(monkeypatch):
    df = broken_log(4).filter(pl.col("step") != 99)
    one_bounded, one = bound_contributions(df.lazy(), spec())
    assert one.episodes_dropped > 0 and one.returns_clipped > 0
    monkeypatch.setenv(PART_ROWS_VARIABLE, "56")  # parts of 56 // 8 = 7 episodes
    many_bounded, many = bound_contributions(df.lazy(), spec(), n_episodes=df["episode_id"].n_unique())
    assert many == one
    key = ["episode_id", "step"]
    assert many_bounded.collect().sort(key).equals(one_bounded.collect().sort(key))


@pytest.mark.parametrize("k", [1, 2])
def test_behaviour_value_statistics_in_parts_are_the_same(monkeypatch, k):
    doc = tiny_spec_doc(H=H, S=S, A=A, k=k, terminals=(), unit_column="unit_id")
    sp = DomainSpec.from_dict(doc)
    bounded, report = bound_contributions(broken_log(5).lazy(), sp)
    rel = BehaviourValueRelease.plan(sp, resolve_budget(rho=1.0))
    one = rel.exact_statistics(bounded)
    monkeypatch.setenv(PART_ROWS_VARIABLE, "50")
    many = rel.exact_statistics(bounded, rows=report.rows_kept)
    assert part_count(report.rows_kept, 50) >= 20
    assert set(many) == set(one) and one["episode_count"] == report.episodes - report.episodes_dropped
    for f in one:
        assert np.array_equal(np.asarray(many[f]), np.asarray(one[f])), f


def test_hash_parts_split_the_keys_whole_and_disjoint():
    df = pl.DataFrame({"u": np.repeat(np.arange(300), 3), "x": np.arange(900)})
    parts = [p.collect() for p in hash_parts(df.lazy(), "u", 7, seed=0x33)]
    assert len(parts) == 7 and all(p.height for p in parts)
    assert pl.concat(parts).sort("x").equals(df)
    assert sum(p["u"].n_unique() for p in parts) == 300
    assert hash_parts(df.lazy(), "u", 1, seed=0)[0] is not None and part_count(None, 10) == 1
    assert part_count(21, 10) == 3 and part_count(0, 10) == 1


def surplus_reference(df: pl.DataFrame, k: int) -> tuple[int, list[str]]:
    """Brute force, episode by episode: the units over k and, for each in the order of its (k+1)-th episode's
    first row, the message validation prints for that episode (the rule's text before issue 33's change)."""
    first_row: dict = {}
    for row, (ep, unit) in enumerate(zip(df["episode_id"].to_list(), df["unit_id"].to_list())):
        first_row.setdefault(ep, (row, unit))
    episodes: dict = {}
    for ep, (row, unit) in sorted(first_row.items(), key=lambda e: e[1][0]):
        episodes.setdefault(unit, []).append((row, ep))
    third = sorted((eps[k], unit, len(eps)) for unit, eps in episodes.items() if len(eps) > k)
    return len(third), [f"row {row}, episode {ep}: unit {unit} has {m} episodes; at most {k} allowed (spec "
                        f"privacy_unit.max_episodes); this is its episode number {k + 1}"
                        for (row, ep), unit, m in third]


@pytest.mark.parametrize("text_ids", [False, True])
def test_too_many_episodes_examples_are_the_brute_force_ones(tmp_path, monkeypatch, text_ids):
    """Most units over k, their episodes interleaved in the rows: the count is exact and the examples are the
    first ones by row with the same text, for any max_errors, also when the examples' prefix grows from one
    episode (SURPLUS_PREFIX = 1: several prefixes, the last one every episode)."""
    rng = np.random.default_rng(33)
    n = 900
    df = random_log(rng, n, H, S, A).sort("episode_id")  # episodes in blocks, units interleaved across them
    df = df.with_columns(unit_id=pl.lit(pl.Series(rng.integers(0, n // 3, n))).gather(pl.col("episode_id")))
    if text_ids:
        df = df.with_columns(pl.format("e{}", "episode_id").alias("episode_id"),
                             pl.format("u{}", "unit_id").alias("unit_id"))
    path = tmp_path / "l.parquet"
    df.write_parquet(path)
    over, messages = surplus_reference(df, K)
    assert over > 100 and len(messages) == over
    for prefix in (episode_checks.SURPLUS_PREFIX, 1):
        monkeypatch.setattr(episode_checks, "SURPLUS_PREFIX", prefix)
        for max_errors in (0, 1, 20, 10_000):
            rep = validate_logs(path, spec(), max_errors=max_errors)
            got = [v["message"] for v in rep.violations if v["rule"] == "too_many_episodes"]
            assert rep.counts["too_many_episodes"] == over
            assert got == messages[:max_errors], (prefix, max_errors)
