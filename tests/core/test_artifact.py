"""The artifact base: typed records <-> JSON, the format checks, the atomic write, the guarantee object."""

from __future__ import annotations

import copy
import json
import pickle
from dataclasses import FrozenInstanceError, dataclass
from enum import Enum
from pathlib import Path

import numpy as np
import pytest

from privaudit.core.artifact import ArtifactFormat, Guarantee, Number, Record, jfield, read_json_file, to_json
from privaudit.core.errors import ArtifactError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


class Colour(Enum):
    RED = "red"


@dataclass(frozen=True)
class Inner(Record):
    shape: tuple[int, ...]
    scale: Number


@dataclass(frozen=True)
class Outer(Record):
    _JSON_ORDER = ("kind", "name", "count", "inner")

    name: str
    count: int
    inner: Inner
    parts: dict[str, Inner] = jfield(default_factory=dict)
    colour: Colour = Colour.RED
    ratio: float = 1.0
    label: str | None = jfield(default=None, omit_none=True, key="the_label")
    flag: bool = jfield(default=True, missing=False)

    def _json_derived(self) -> dict:
        return {"kind": "outer"}


def test_a_record_round_trips_with_its_keys_in_order():
    o = Outer("a", 3, Inner((2, 3), 0.5), {"x": Inner((1,), 2)}, label="L")
    d = o.to_dict()
    assert list(d) == ["kind", "name", "count", "inner", "parts", "colour", "ratio", "the_label", "flag"]
    assert d["inner"] == {"shape": [2, 3], "scale": 0.5} and d["colour"] == "red"
    assert Outer.from_dict(d) == o


def test_reading_casts_typed_fields_and_keeps_numbers_as_read():
    d = {"name": "a", "count": 3.0, "inner": {"shape": [2.0], "scale": 2}, "ratio": 1, "colour": "red"}
    o = Outer.from_dict(d)
    assert type(o.count) is int and o.inner.shape == (2,) and type(o.inner.shape[0]) is int
    assert type(o.inner.scale) is int  # a Number stays as read: written back as 2, not 2.0
    assert type(o.ratio) is float
    assert o.flag is False  # absent: `missing`, not the default True
    assert o.label is None and "the_label" not in o.to_dict()


def test_to_dict_is_a_copy_and_numpy_becomes_json():
    parts = {"x": Inner((1,), np.float64(0.25))}
    o = Outer("a", 1, Inner((1,), np.int64(4)), parts)
    d = o.to_dict()
    assert type(d["inner"]["scale"]) is int and type(d["parts"]["x"]["scale"]) is float
    d["parts"]["x"]["shape"].append(9)
    assert o.parts["x"].shape == (1,)
    assert to_json({"a": (np.arange(2), Colour.RED)}) == {"a": [[0, 1], "red"]}


def test_missing_required_key_raises():
    with pytest.raises(TypeError):
        Outer.from_dict({"name": "a"})


POLICY = FIXTURES / "policy_v1" / "minimal" / "policy.json"
FMT = ArtifactFormat("policy manifest", "policy", 1, kind="privaudit-policy")


def test_format_writes_atomically_indented_and_reads_back(tmp_path):
    doc = json.loads(POLICY.read_text())
    out = FMT.write(doc, tmp_path / "sub" / "policy.json")
    assert out.read_text() == json.dumps(doc, indent=2) + "\n"
    assert [p.name for p in out.parent.iterdir()] == ["policy.json"]  # no temporary left behind
    assert FMT.read(out) == doc


def test_format_refuses_a_bad_document_on_write_and_writes_nothing(tmp_path):
    doc = json.loads(POLICY.read_text())
    del doc["algorithm"]
    with pytest.raises(ArtifactError, match=r"internal error: nothing was written"):
        FMT.write(doc, tmp_path / "policy.json")
    assert not (tmp_path / "policy.json").exists()


def test_format_refuses_other_versions_and_schema_errors_on_read(tmp_path):
    doc = json.loads(POLICY.read_text())
    with pytest.raises(ArtifactError, match="format_version 2 is not supported"):
        FMT.check_read({**doc, "format_version": 2}, "here")
    with pytest.raises(ArtifactError, match=r"\$\.horizon"):
        FMT.check_read({**doc, "horizon": "three"}, "here")
    with pytest.raises(ArtifactError, match="the file is missing"):
        FMT.read(tmp_path / "absent.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ArtifactError, match="cannot read policy manifest"):
        read_json_file(tmp_path / "bad.json", "policy manifest")


def test_a_format_reading_several_versions_names_them():
    fmt = ArtifactFormat("release manifest", "release_manifest", 2, kind="privaudit-release", readable=(1, 2))
    with pytest.raises(ArtifactError, match="unknown release format version: format_version is 3, and this "
                                            "privaudit reads release format versions 1 and 2 only.*upgrade"):
        fmt.check_read({"format_version": 3}, "m")
    with pytest.raises(ArtifactError, match="format_version is True.*Use the privaudit version"):
        fmt.check_read({"format_version": True}, "m")
    with pytest.raises(ArtifactError, match="must be a JSON object"):
        fmt.check_read([], "m")


def test_the_guarantee_is_a_read_only_mapping_in_its_stated_order():
    stated = {"definition": "zCDP", "rho": 0.5, "epsilon": 3.2, "delta": 1e-6, "requested": {"rho": 0.5},
              "sampler": {"extra_delta": 0.0}, "event": {"kind": "gaussian"}}
    g = Guarantee(stated)
    assert list(g) == list(stated) and g == stated and dict(g) == stated and g.to_dict() == stated
    assert (g.rho, g.epsilon, g.delta, g.definition, g.private) == (0.5, 3.2, 1e-6, "zCDP", None)
    assert g.events == ({"kind": "gaussian"},) and g.sampler == {"extra_delta": 0.0}
    with pytest.raises(FrozenInstanceError):
        g.rho = 1.0
    with pytest.raises(TypeError):
        g["rho"] = 1.0
    g.sampler["extra_delta"] = 1.0
    stated["requested"]["rho"] = 9
    assert g["sampler"]["extra_delta"] == 0.0 and g["requested"] == {"rho": 0.5}
    assert copy.deepcopy(g) == g and pickle.loads(pickle.dumps(g)) == g
    h = g.updated(rng="secure", rho=0.25)
    assert list(h)[-1] == "rng" and h.rho == 0.25 and g.rho == 0.5


def test_the_explore_shape_reads_through_the_same_object():
    doc = json.loads((FIXTURES / "explore_v1" / "manifest.json").read_text())["guarantee"]
    g = Guarantee.from_dict(doc)
    assert g.to_dict() == doc and json.dumps(g.to_dict()) == json.dumps(doc)
    assert g.private == doc["private"] and g.epsilon == doc["epsilon"] and g.events == tuple(doc["events"])
    assert "private" not in g.text and set(g.text) <= set(doc)


def test_a_plain_document_may_hold_a_guarantee_and_numpy_numbers(tmp_path):
    """As the pipeline's summary does: the guarantee object and numpy values are written as JSON."""
    fmt = ArtifactFormat("policy manifest", "policy", 1, kind="privaudit-policy")
    doc = json.loads((FIXTURES / "policy_v1" / "dp_apvi" / "policy.json").read_text())
    held = {**doc, "horizon": np.int64(doc["horizon"]),
            "privacy": {**doc["privacy"], "guarantee": Guarantee(doc["privacy"]["guarantee"])}}
    assert fmt.check_write(held) == doc
    assert fmt.write(held, tmp_path / "p.json").read_text() == json.dumps(doc, indent=2) + "\n"
