"""The typed release manifest (privaudit.release.manifest.ReleaseManifest): round trip, schema on write and read,
old manifests, format version."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from privaudit.core.artifact import Guarantee
from privaudit.core.errors import ArtifactError
from privaudit.privacy.budget import resolve_budget
from privaudit.core.schemas import schema_errors
from privaudit.core.spec import load_spec
from privaudit.release.manifest import WIDE_ORDER, FamilyRecord, ReleaseManifest
from privaudit.release.mechanism import TabularRelease
from tests._release_logs import write_spec


@pytest.fixture
def manifest(tmp_path):
    spec = load_spec(write_spec(tmp_path, H=3, S=4, A=2, terminals=(3,)))
    return TabularRelease.plan(spec, resolve_budget(rho=0.5)).manifest(seeded=True)


def test_typed_fields_and_round_trip(manifest):
    d = manifest.to_dict()
    assert schema_errors(d, "release_manifest") == []
    assert (manifest.domain.H, manifest.domain.S, manifest.domain.A) == (3, 4, 2)
    assert isinstance(manifest.families["visits"], FamilyRecord) and manifest.has_rewards
    assert manifest.private is False and d["private"] is False and d["rng"] == "seeded-insecure"
    assert manifest.rho == 0.5 == d["guarantee"]["rho"]
    back = ReleaseManifest.from_dict(json.loads(json.dumps(d)))
    assert back == manifest and back.to_dict() == d
    with pytest.raises(dataclasses.FrozenInstanceError):
        manifest.rng = "secure"


def test_schema_checked_on_write_and_on_read(manifest):
    broken = dataclasses.replace(manifest, mechanism="cauchy")
    with pytest.raises(ArtifactError, match=r"internal error(.|\n)*\$\.mechanism"):
        broken.to_dict()
    d = manifest.to_dict()
    d["domain"]["H"] = 0
    with pytest.raises(ArtifactError, match=r"breaks schema 'release_manifest':\n  \$\.domain\.H"):
        ReleaseManifest.from_dict(d, "x/manifest.json")


def test_format_version_refused_with_its_number(manifest):
    """A future version is refused naming it and the versions read; so is a non-integer or a missing one."""
    assert manifest.format_version == 3 == manifest.to_dict()["format_version"]
    d = dict(manifest.to_dict(), format_version=4)
    with pytest.raises(ArtifactError, match=r"unknown release format version: format_version is 4, and this "
                                            r"privaudit reads release format versions 1, 2 and 3 only\. The release "
                                            r"was written by a newer privaudit: upgrade"):
        ReleaseManifest.from_dict(d, "x/manifest.json")
    for bad in (0, "2", True, None):
        with pytest.raises(ArtifactError, match=f"format_version is {bad!r}.*Use the privaudit version"):
            ReleaseManifest.from_dict(dict(d, format_version=bad), "x/manifest.json")
    with pytest.raises(ArtifactError, match="must be a JSON object. Found 'list'"):
        ReleaseManifest.from_dict([], "x/manifest.json")


def test_versions_2_and_3_require_the_dense_layout_and_version_1_forbids_it(manifest):
    """The schema ties the dense transition layout to format versions 2 (bare value column) and 3 (index
    columns and a count column per action), and to them only."""
    d = manifest.to_dict()
    t = d["families"]["transitions"]
    assert t["columns"] == ["h", "state", "next_state", "action_0", "action_1"] and t["dense"]["row_groups"] == 3
    assert t["dense"]["row_group_shape"] == [4, 2, 4] and t["dense"]["order"] == WIDE_ORDER
    assert t["shape"] == [3, 4, 2, 4]
    no_dense = json.loads(json.dumps(d))
    del no_dense["families"]["transitions"]["dense"]
    with pytest.raises(ArtifactError, match=r"\$\.families\.transitions: 'dense' is a required property"):
        ReleaseManifest.from_dict(no_dense, "x/manifest.json")
    v1_with_dense = dict(json.loads(json.dumps(d)), format_version=1)
    with pytest.raises(ArtifactError, match=r"\$\.families\.transitions: .*should not be valid"):
        ReleaseManifest.from_dict(v1_with_dense, "x/manifest.json")
    for version, columns in ((3, ["h", "state", "action", "next_state", "value"]), (3, ["value"]),
                             (2, ["h", "state", "next_state", "action_0", "action_1"])):
        bad = dict(json.loads(json.dumps(d)), format_version=version)
        bad["families"]["transitions"]["columns"] = columns
        with pytest.raises(ArtifactError, match=r"\$\.families\.transitions\.columns"):
            ReleaseManifest.from_dict(bad, "x/manifest.json")


def test_older_manifests_read(manifest):
    """Written before event, file_column, episode_key and private existed: read, private derived from rng."""
    d = manifest.to_dict()
    for key in ("event", "private"):
        d.pop(key)
    d["privacy_unit"].pop("file_column", None)
    d["bounding"].pop("episode_key")
    m = ReleaseManifest.from_dict(d)
    assert m.event is None and m.privacy_unit.file_column is None and m.private is False
    assert m.to_dict() == {**d, "private": False}


def test_private_flag_contradicting_rng_is_refused(manifest):
    d = dict(manifest.to_dict(), private=True)
    with pytest.raises(ArtifactError, match="private is True but rng is 'seeded-insecure'"):
        ReleaseManifest.from_dict(d)


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "release_v1"


@pytest.mark.parametrize("name", ["per_step", "stationary"])
def test_a_manifest_read_is_written_back_byte_for_byte(name, tmp_path):
    """Format version 1 manifests (written before the artifact base) come back unchanged, bytes included."""
    path = FIXTURES / name / "manifest.json"
    m = ReleaseManifest.read(path)
    assert m.format_version == 1 and isinstance(m.guarantee, Guarantee)
    assert m.write(tmp_path / "manifest.json").read_text() == path.read_text()


def test_the_guarantee_is_one_typed_object_written_as_stated(manifest):
    g = manifest.guarantee
    assert isinstance(g, Guarantee) and g.rho == g["rho"] == manifest.rho and g.definition == "zCDP"
    assert manifest.to_dict()["guarantee"] == g.to_dict() and list(manifest.to_dict()["guarantee"]) == list(g)
    plain = dataclasses.replace(manifest, guarantee=g.to_dict())  # a plain dict, as the accountant states it
    assert isinstance(plain.guarantee, Guarantee) and plain == manifest
