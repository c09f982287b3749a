"""Privacy events (privaudit.privacy.events): immutable, serialisable, validated."""

import dataclasses
import json

import pytest

from privaudit.core.errors import AccountingError
from privaudit.privacy.events import (ComposedEvent, GaussianEvent, LaplaceEvent, Neighbouring, PrivacyUnit,
                                      SelfComposedEvent, event_from_dict, leaves)

UNIT = PrivacyUnit("patient_id", 2)


def _tree():
    g = GaussianEvent(family="visits", unit=UNIT, l2=2.0, sigma=3.0)
    lap = LaplaceEvent(family="counter", unit=UNIT, l1=1.0, b=0.5, noise="exact")
    return ComposedEvent([g, SelfComposedEvent(lap, 3)], label="parts")


def test_round_trip_through_json_is_identity():
    ev = _tree()
    back = event_from_dict(json.loads(json.dumps(ev.to_dict())))
    assert back == ev
    assert back.events[0].neighbouring is Neighbouring.SUBSTITUTION


def test_events_are_frozen():
    g = _tree().events[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.sigma = 100.0


def test_leaves_carry_multiplicity():
    got = [(type(e).__name__, c) for e, c in leaves(SelfComposedEvent(_tree(), 2))]
    assert got == [("GaussianEvent", 2), ("LaplaceEvent", 6)]


@pytest.mark.parametrize("bad, where", [
    (dict(kind="gaussian", l2=-1.0, sigma=1.0), "`l2`"),
    (dict(kind="gaussian", l2=1.0, sigma=float("inf")), "`sigma`"),
    (dict(kind="laplace", l1=1.0, b=0.0), "`b`"),
    (dict(kind="gaussian", l2=1.0, sigma=1.0, neighbouring="add/remove"), "`neighbouring`"),
    (dict(kind="gaussian", l2=1.0, sigma=1.0, noise="float"), "`noise`"),
    (dict(kind="gaussian", l2=1.0, sigma=1.0, unit={"column": "u", "k": 0}), "`PrivacyUnit.k`"),
    (dict(kind="cauchy"), "`kind`"),
    (dict(kind="gaussian", sigma=1.0), "`l2`"),
    (dict(kind="composed", events=[]), "`ComposedEvent.events`"),
    (dict(kind="self_composed", count=0, event=GaussianEvent(family="v", unit=UNIT, l2=1, sigma=1).to_dict()),
     "`SelfComposedEvent.count`"),
])
def test_invalid_events_are_refused_with_the_field_named(bad, where):
    d = {"family": "visits", "unit": UNIT.to_dict(), "neighbouring": "substitution", "noise": "rounded", **bad}
    with pytest.raises(AccountingError, match=where.replace("(", r"\(")):
        event_from_dict(d)


def test_manifest_sentence_parses_to_the_enum():
    n = Neighbouring.parse("substitution: replace all data of one privacy unit")
    assert n is Neighbouring.SUBSTITUTION and n.description.startswith("substitution: ")
