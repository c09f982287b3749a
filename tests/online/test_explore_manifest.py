"""The explore manifest on the artifact base: old manifests read and written as before, one guarantee object."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from privaudit.core.artifact import Guarantee
from privaudit.core.errors import ArtifactError
from privaudit.online.manifest import ExploreManifest, explore_guarantee, read_explore_manifest

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "explore_v1" / "manifest.json"


def test_an_old_manifest_is_written_back_with_its_keys_in_place(tmp_path):
    """Written before the guarantee recorded sampler and rng: read, and written with ``sampler`` null in its
    place (as the explore writer always did), every other byte unchanged."""
    old = json.loads(FIXTURE.read_text())
    m = read_explore_manifest(FIXTURE.parent)
    assert isinstance(m.guarantee, Guarantee) and m.guarantee.rng is None and m.guarantee.sampler is None
    text = m.write(tmp_path / "manifest.json").read_text()
    g = dict(old["guarantee"])
    expected = {k: g[k] for k in list(g)[:list(g).index("statement") + 1]} | {"sampler": None} | \
        {k: g[k] for k in list(g)[list(g).index("statement") + 1:]}
    assert text == json.dumps({**old, "guarantee": expected}, indent=2) + "\n"
    assert ExploreManifest.read(tmp_path / "manifest.json") == m


def test_the_guarantee_takes_the_explore_order_whatever_order_it_is_built_in():
    built = {"notion": "JDP", "rng": "secure", "private": False, "epsilon": None, "delta": None, "rho": None,
             "events": [], "sampler": None}  # a non-private run, as the writer builds it (events first)
    g = explore_guarantee(built)
    assert list(g) == ["notion", "rng", "private", "epsilon", "delta", "rho", "sampler", "events"]
    assert g.text == {"notion": "JDP"} and g.private is False and g.events == ()
    assert explore_guarantee(g) == g and list(explore_guarantee(g)) == list(g)


def test_a_broken_manifest_is_refused_on_read(tmp_path):
    doc = json.loads(FIXTURE.read_text())
    doc["config"]["seed"] = 3  # the noise seed is never written
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(ArtifactError, match=r"explore manifest .*manifest.json breaks schema"):
        read_explore_manifest(tmp_path)
