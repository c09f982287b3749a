"""The typed release manifest (privaudit.stats.manifest.ReleaseManifest): round trip, schema on write and read,
old manifests, format version."""

from __future__ import annotations

import dataclasses
import json

import pytest

from privaudit.errors import ArtifactError, PrivauditError
from privaudit.privacy.budget import resolve_budget
from privaudit.schemas import schema_errors
from privaudit.spec import load_spec
from privaudit.stats.manifest import FamilyRecord, ReleaseManifest
from privaudit.stats.mechanism import TabularRelease
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
    with pytest.raises(PrivauditError, match=r"internal error(.|\n)*\$\.mechanism"):
        broken.to_dict()
    d = manifest.to_dict()
    d["domain"]["H"] = 0
    with pytest.raises(ArtifactError, match=r"breaks schema 'release_manifest':\n  \$\.domain\.H"):
        ReleaseManifest.from_dict(d, "x/manifest.json")


def test_format_version_refused_with_its_number(manifest):
    d = dict(manifest.to_dict(), format_version=2)
    with pytest.raises(ArtifactError, match="format_version must be 1. Found 2; use the privaudit version"):
        ReleaseManifest.from_dict(d, "x/manifest.json")
    with pytest.raises(ArtifactError, match="Found 'list'"):
        ReleaseManifest.from_dict([], "x/manifest.json")


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
