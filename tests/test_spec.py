"""The domain spec: schema errors name the key; valid specs load."""

import json

import pytest

from privaudit.errors import SpecError
from privaudit.spec import DomainSpec, load_spec
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
