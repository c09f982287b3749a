"""The domain spec: schema errors name the key; valid specs load."""

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from privaudit.cli import main
from privaudit.core.errors import SpecError
from privaudit.core.spec import WRITTEN_BY_KEY, DomainSpec, load_spec, mark_written_by, written_by
from tests.conftest import tiny_spec_doc


def test_valid_spec_loads(tiny_spec_file):
    spec = load_spec(tiny_spec_file)
    assert (spec.H, spec.S, spec.A, spec.max_episodes_per_unit) == (3, 4, 2, 1)
    assert spec.column("episode_id") == "episode_id"
    assert len(spec.hash()) == 64


@pytest.mark.parametrize("key,value,needle", [
    ("horizon", 0, "$.horizon"),
    ("n_states", "4", "$.n_states"),
    ("privacy_unit", {"column": None}, "max_episodes"),
    ("bogus", 1, "bogus"),
])
def test_schema_error_names_the_key(tmp_path, key, value, needle):
    doc = tiny_spec_doc()
    doc[key] = value
    p = tmp_path / "s.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(SpecError) as ei:
        load_spec(p)
    assert needle in str(ei.value)


def test_inconsistent_reward_range():
    doc = tiny_spec_doc(reward_range=(1.0, 0.0))
    with pytest.raises(SpecError, match="reward_range"):
        DomainSpec.from_dict(doc)


@pytest.mark.parametrize("rr", [(0.0, float("inf")), (float("-inf"), 1.0), (0.0, float("nan"))])
def test_non_finite_reward_range_says_finite(rr):
    """[0, inf] has r_min < r_max: the message must name what is wrong, that an end is not finite."""
    with pytest.raises(SpecError, match="both finite") as ei:
        DomainSpec.from_dict(tiny_spec_doc(reward_range=rr))
    assert "reward_range" in str(ei.value)


@pytest.mark.parametrize("columns, unit, needle", [
    ({"state": "next_state"}, None, "'next_state' is read as state and next_state"),
    ({"episode_id": "stay", "step": "stay"}, None, "'stay' is read as episode_id and step"),
    ({}, "action", "'action' is read as action and unit_id"),
])
def test_one_file_column_in_two_roles_is_refused(columns, unit, needle):
    """Session 11: {"state": "next_state"} passed the spec and failed validation as a next_state_mismatch."""
    doc = dict(tiny_spec_doc(unit_column=unit), columns=columns)
    with pytest.raises(SpecError, match="each role needs its own column") as ei:
        DomainSpec.from_dict(doc)
    assert needle in str(ei.value)


@pytest.mark.parametrize("columns, unit", [({}, "episode_id"), ({"episode_id": "stay_id"}, "stay_id"),
                                           ({"state": "s", "next_state": "s2"}, "patient_id")])
def test_the_unit_may_be_the_episode_column(columns, unit):
    assert DomainSpec.from_dict(dict(tiny_spec_doc(unit_column=unit), columns=columns)).unit_column == unit


def test_terminal_outside_domain():
    with pytest.raises(SpecError, match="terminal_states"):
        DomainSpec.from_dict(tiny_spec_doc(terminals=(9,)))


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(SpecError, match="not valid JSON"):
        load_spec(bad)


def test_deeply_nested_json_is_a_spec_error(tmp_path):
    """Before: 10^5 nested brackets raised RecursionError out of json.loads, a traceback (fresh-user pass)."""
    p = tmp_path / "deep.json"
    p.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(SpecError, match=rf"spec {p} nests its arrays or objects too deeply"):
        load_spec(p)


def test_duplicate_key_is_a_spec_error(tmp_path):
    """Before: '"horizon": 20, "horizon": 5' loaded as H = 5 without a word, and validate called the sample
    'valid for release' with 8,695 steps to cut (fresh-user pass)."""
    p = tmp_path / "dup.json"
    p.write_text(json.dumps(tiny_spec_doc()).replace('"horizon": 3', '"horizon": 3, "horizon": 2'))
    with pytest.raises(SpecError, match=rf"spec {p}: key 'horizon' appears twice in one object"):
        load_spec(p)
    p.write_text(json.dumps(tiny_spec_doc()).replace('"max_episodes": 1', '"max_episodes": 1, "max_episodes": 3'))
    with pytest.raises(SpecError, match="key 'max_episodes' appears twice"):
        load_spec(p)


def test_spec_not_utf8_is_a_spec_error(tmp_path):
    """A spec saved in another encoding (UTF-16's BOM, Latin-1) gave a UnicodeDecodeError traceback (exit 1);
    it is a spec error naming the file and the byte (fresh-user pass)."""
    bad = tmp_path / "latin1.json"
    bad.write_bytes(b'\xff\xfe{"horizon": 3}')
    with pytest.raises(SpecError, match=r"latin1\.json is not UTF-8 text: byte 0xff at position 0"):
        load_spec(bad)


def test_public_reward_naming_a_state_twice_is_a_spec_error(tmp_path):
    """'3' and '03' are both state 3: the two values contradict each other. validate blamed the logs
    ("reading the log failed (`old` input for `replace` must not contain duplicates). A file may be
    corrupt", exit 1; fresh-user pass); a single zero-padded key stays a valid name of its state."""
    doc = tiny_spec_doc()
    doc["public_reward"] = {"kind": "next_state", "values": {"3": 1.0, "03": 0.0, "2": 0.5}}
    with pytest.raises(SpecError, match=r"\$\.public_reward\.values names state 3 2 times \('3', '03'\)"):
        DomainSpec.from_dict(doc)
    doc["public_reward"]["values"] = {"03": 1.0}
    assert DomainSpec.from_dict(doc).public_reward_vector().tolist() == [0.0, 0.0, 0.0, 1.0]
    logs = tmp_path / "logs.parquet"
    pl.DataFrame({"episode_id": [0], "step": [0], "state": [0], "action": [0], "reward": [1.0],
                  "next_state": [3]}).write_parquet(logs)
    doc["public_reward"]["values"] = {"3": 1.0, "003": 0.0}
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(doc))
    res = CliRunner().invoke(main, ["validate", str(logs), "--spec", str(spec)])
    assert res.exit_code == 2, res.output
    assert res.output.strip().splitlines() == [
        f"error: spec {spec}: $.public_reward.values names state 3 2 times ('3', '003'); list each state once."]


# ---------------------------------------------------------------- declared return bound


def _with_return(bound, **kw):
    doc = tiny_spec_doc(**kw)
    doc["return_bound"] = bound
    return doc


def test_return_bound_loaded_and_exposed():
    s = DomainSpec.from_dict(_with_return([0, 1], H=5))
    assert s.return_bound == (0.0, 1.0) and s.scaled_return_max == 1.0
    assert s.value_bounds().tolist() == [1, 1, 1, 1, 1, 0]
    plain = DomainSpec.from_dict(tiny_spec_doc(H=5))
    assert plain.return_bound is None and plain.scaled_return_max == 5.0
    assert plain.value_bounds().tolist() == [5, 4, 3, 2, 1, 0]
    # rewards in [0, 2], G_max = 3: scaled max = 1.5; H = 5 caps nothing, value_bounds min(H - h, 1.5)
    s = DomainSpec.from_dict(_with_return([0, 3], H=5, reward_range=(0.0, 2.0)))
    assert s.scaled_return_max == 1.5 and s.value_bounds().tolist() == [1.5, 1.5, 1.5, 1.5, 1, 0]
    # r_min = -1, r_max = 1, G_max = 1, H = 3: max over L of min(L, (1 + L) / 2) = 2 at L = 3
    s = DomainSpec.from_dict(_with_return([-1, 1], H=3, reward_range=(-1.0, 1.0)))
    assert s.scaled_return_max == 2.0
    assert "return_bound=(-1.0, 1.0)" in repr(s)


@pytest.mark.parametrize("bound,needle", [
    ([1, 0], "G_min < G_max"),
    ([0, 0], "G_min < G_max"),                        # degenerate: every learner and the value estimate refuse it
    ([5, 6], "inconsistent with reward_range"),       # H = 3, rewards in [0, 1]: returns in [0, 3]
    ([-3, -1], "inconsistent with reward_range"),
    ([0], "return_bound"),                            # schema: two numbers
    (["a", 1], "return_bound"),
])
def test_return_bound_refused(bound, needle):
    with pytest.raises(SpecError, match=needle):
        DomainSpec.from_dict(_with_return(bound))


@pytest.mark.parametrize("bound,kw,widest", [
    ([-100, 100], {"H": 20}, "declare at most [0, 20]"),           # unreachable on both sides
    ([-1, 1], {}, "declare at most [0, 1]"),                        # rewards in [0, 1]: no return is negative
    ([0, 4], {}, "declare at most [0, 3]"),                         # H = 3
    ([-7, 2], {"reward_range": (-2.0, 1.0)}, "declare at most [-6, 2]"),
    ([3, 5], {}, "declare a bound inside it"),                      # touches [0, 3] only at 3: nothing meaningful
])
def test_return_bound_wider_than_H_times_the_range_refused(bound, kw, widest):
    """A bound no return can reach clips nothing, yet the behaviour value's noise scales with its width (10x at
    [-100, 100] for [0, 20]): refused when read, naming the field and the widest meaningful bound."""
    with pytest.raises(SpecError, match=r"\$\.return_bound .* is wider than any episode can return") as e:
        DomainSpec.from_dict(_with_return(bound, **kw))
    assert widest in str(e.value)


@pytest.mark.parametrize("bound,kw", [([0, 3], {}), ([-6, 3], {"reward_range": (-2.0, 1.0)}), ([0.5, 1], {}),
                                      ([-0.5, 0], {"reward_range": (-1.0, -0.5)})])
def test_return_bound_within_H_times_the_range_accepted(bound, kw):
    assert DomainSpec.from_dict(_with_return(bound, **kw)).return_bound == tuple(map(float, bound))


def test_degenerate_return_bound_refused_when_the_spec_is_read(tmp_path):
    """[0, 0] used to pass load_spec and validate, then stop train/pipeline with a message naming no spec."""
    spec = tmp_path / "deg.json"
    spec.write_text(json.dumps(_with_return([0.5, 0.5])))
    with pytest.raises(SpecError, match=r"deg\.json: \$\.return_bound .*G_min < G_max.*\[0\.5, 0\.5\]"):
        load_spec(spec)


def test_bundled_icu_spec_declares_the_return_bound():
    s = load_spec(Path(__file__).resolve().parents[2] / "sample_data" / "icu_sepsis_spec.json")
    assert s.return_bound == (0.0, 1.0) and s.scaled_return_max == 1.0


def test_written_by_mark_is_ignored_by_readers_and_broken_by_an_edit(tmp_path):
    """The provenance mark simulate writes (``$.written_by``) passes the schema, leaves the spec and its hash
    unchanged, and holds only until the spec is edited."""
    doc = tiny_spec_doc()
    marked = mark_written_by(doc, "privaudit simulate")
    assert written_by(marked) == "privaudit simulate" and written_by(doc) is None
    assert marked[WRITTEN_BY_KEY]["sha256"] == DomainSpec.from_dict(doc).hash() == DomainSpec.from_dict(marked).hash()
    (tmp_path / "m.json").write_text(json.dumps(marked))
    assert load_spec(tmp_path / "m.json").H == DomainSpec.from_dict(doc).H
    edited = {**marked, "horizon": marked["horizon"] + 1}
    assert written_by(edited) is None
    for bad in ({"tool": "x"}, {"tool": "x", "sha256": "ABC"}, {"tool": "x", "sha256": "0" * 64, "extra": 1}):
        with pytest.raises(SpecError, match=r"written_by"):
            DomainSpec.from_dict({**doc, WRITTEN_BY_KEY: bad})
    assert written_by([1]) is None and written_by({WRITTEN_BY_KEY: "x"}) is None
