"""Privacy events: immutable, serialisable descriptions of what a mechanism did.

Every mechanism that touches the private data returns an event (the tabular
release, DP-VAPVI's noisy statistics, an online explorer's private counters).
An event states the facts its guarantee rests on (sensitivity, noise scale,
neighbouring relation, privacy unit and k), never a bare epsilon or rho: the
guarantee is *derived* from the event by ``privaudit.privacy.accounting``,
the only place that turns events into numbers (and refuses events it does
not know). Manifests store ``event.to_dict()``; readers rebuild the event
with :func:`event_from_dict` and re-derive the guarantee with the same
function, so a stated guarantee can never be weaker than the facts imply.

Modelled on Google's ``dp_accounting`` (``DpEvent``, ``GaussianDpEvent``,
``LaplaceDpEvent``, ``ComposedDpEvent``, ``SelfComposedDpEvent``): frozen
dataclasses, composition as a tree, an accountant separate from the events.
Differences: an event here carries the sensitivity and the noise scale
separately (dp_accounting normalises to a noise multiplier), and the
neighbouring relation and the privacy unit, so that composing events over
different units is refused instead of silently mis-accounted.

Plugging in a new mechanism: build one of these events from the public
noise plan (before any noise is drawn), return it with the output, and let
the caller compose it. Nothing else is needed for the ledger, the manifest,
the pipeline's composed guarantee or the auditor's claim.

References
----------
Bun & Steinke, "Concentrated Differential Privacy", TCC 2016,
arXiv:1605.02065, Prop. 1.6 (Gaussian: rho = Delta_2^2 / (2 sigma^2)),
Prop. 1.4 (pure eps-DP implies eps^2/2-zCDP), Lemma 2.3 (composition).
Dwork & Roth 2014, Thm 3.6 (Laplace: eps = Delta_1 / b).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import ClassVar, Union

from privaudit.core.errors import AccountingError, positive_finite

__all__ = ["Neighbouring", "PrivacyUnit", "GaussianEvent", "LaplaceEvent", "ComposedEvent",
           "SelfComposedEvent", "PrivacyEvent", "event_from_dict", "NOISE_KINDS"]

#: How the noise of an event is drawn: rounded continuous noise, exact
#: discrete samplers, or continuous (float) noise (DP-VAPVI's statistics).
NOISE_KINDS = ("rounded", "exact", "continuous")


class Neighbouring(str, Enum):
    """The neighbouring relation an event's sensitivity is computed for.

    privaudit supports one: substitution of all data of one privacy unit
    (Qiao & Wang 2023's "replace one trajectory" is the case k = 1). The value is the
    short name stored in events; :attr:`description` is the sentence stored
    in manifests (``"substitution: replace all data of one privacy unit"``).
    """

    SUBSTITUTION = "substitution"

    @property
    def description(self) -> str:
        """The manifest sentence, ``"<name>: <meaning>"``."""
        return {"substitution": "substitution: replace all data of one privacy unit"}[self.value]

    @classmethod
    def parse(cls, text: str) -> "Neighbouring":
        """The relation named by ``text`` (its short name or its manifest sentence).

        Raises
        ------
        AccountingError
            An unknown relation ("`neighbouring` must be one of ...").
        """
        for n in cls:
            if text in (n.value, n.description):
                return n
        raise AccountingError(f"`neighbouring` must be one of {[n.value for n in cls]}. Found {text!r}.")


@dataclass(frozen=True)
class PrivacyUnit:
    """Who is protected: all rows sharing ``column``, at most ``k`` episodes of them."""

    #: The unit column of the spec (``"episode_id"`` when each episode is a unit).
    column: str
    #: Most episodes one unit contributes after bounding (>= 1).
    k: int

    def __post_init__(self):
        if not isinstance(self.column, str) or not self.column:
            raise AccountingError(f"`PrivacyUnit.column` must be a non-empty string. Found {self.column!r}.")
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise AccountingError(f"`PrivacyUnit.k` must be an integer >= 1. Found {self.k!r}.")

    def __str__(self) -> str:
        return f"{self.column}, at most k={self.k} episodes"

    def to_dict(self) -> dict:
        return {"column": self.column, "k": self.k}

    @classmethod
    def from_dict(cls, d: dict) -> "PrivacyUnit":
        return cls(_field(d, "column", "privacy unit"), _field(d, "k", "privacy unit"))


def _field(d, key: str, what: str):
    if not isinstance(d, dict) or key not in d:
        raise AccountingError(f"a serialised {what} must hold `{key}`. Found {d!r}.")
    return d[key]


def _positive(name: str, v) -> float:
    return positive_finite(name, v, AccountingError)


@dataclass(frozen=True, kw_only=True)
class _Leaf:
    """Fields shared by the noise-adding events (keyword-only)."""

    #: What was released (the family).
    family: str
    #: Whom it protects.
    unit: PrivacyUnit
    #: For which neighbouring relation.
    neighbouring: Neighbouring = Neighbouring.SUBSTITUTION
    #: How the noise was drawn (:data:`NOISE_KINDS`).
    noise: str = "rounded"
    #: c, the per-cell contribution bound the sensitivity rests on
    #: (``privaudit.data.bounding.cap_per_cell``); None: no per-cell cap. A fact of the mechanism, not of the
    #: unit: events with different c over the same unit compose.
    max_per_cell: int | None = None

    def _check_leaf(self):
        if not isinstance(self.family, str) or not self.family:
            raise AccountingError(f"`family` must be a non-empty string. Found {self.family!r}.")
        if not isinstance(self.unit, PrivacyUnit):
            raise AccountingError(f"`unit` must be a PrivacyUnit. Found {type(self.unit).__name__}.")
        if not isinstance(self.neighbouring, Neighbouring):
            object.__setattr__(self, "neighbouring", Neighbouring.parse(self.neighbouring))
        if self.noise not in NOISE_KINDS:
            raise AccountingError(f"`noise` must be one of {NOISE_KINDS}. Found {self.noise!r}.")
        c = self.max_per_cell
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < 1):
            raise AccountingError(f"`max_per_cell` must be None or an integer >= 1. Found {c!r}.")

    #: the serialised ``kind`` and the names of the (sensitivity, scale) fields, both > 0
    KIND: ClassVar[str] = ""
    FIELDS: ClassVar[tuple] = ()

    def __post_init__(self):
        self._check_leaf()
        for name in self.FIELDS:
            object.__setattr__(self, name, _positive(name, getattr(self, name)))

    def to_dict(self) -> dict:
        return {"kind": self.KIND, **{name: getattr(self, name) for name in self.FIELDS}, **self._leaf_dict()}

    def _leaf_dict(self) -> dict:
        d = {"family": self.family, "unit": self.unit.to_dict(),
             "neighbouring": self.neighbouring.value, "noise": self.noise}
        if self.max_per_cell is not None:  # absent when uncapped: older manifests read unchanged
            d["max_per_cell"] = self.max_per_cell
        return d


@dataclass(frozen=True, kw_only=True)
class GaussianEvent(_Leaf):
    """Gaussian noise N(0, sigma^2) added to each coordinate of a statistic of L2 sensitivity ``l2``.

    Notes
    -----
    The exact discrete Gaussian with the same sigma satisfies the same
    rho-zCDP (Canonne, Kamath & Steinke 2020, Thm 14), so one event serves both.
    """

    KIND: ClassVar[str] = "gaussian"
    FIELDS: ClassVar[tuple] = ("l2", "sigma")

    #: L2 sensitivity under :attr:`neighbouring` for :attr:`unit` (in the statistic's stored units), > 0.
    l2: float
    #: Noise standard deviation (same units), > 0. Its zCDP cost is rho = l2^2 / (2 sigma^2) (Bun & Steinke 2016,
    #: Prop. 1.6); the accountant derives it.
    sigma: float


@dataclass(frozen=True, kw_only=True)
class LaplaceEvent(_Leaf):
    """Laplace noise Lap(b) added to each coordinate of a statistic of L1 sensitivity ``l1``."""

    KIND: ClassVar[str] = "laplace"
    FIELDS: ClassVar[tuple] = ("l1", "b")

    #: L1 sensitivity (stored units), > 0.
    l1: float
    #: Laplace scale (same units), > 0. Its cost is pure eps = l1 / b (Dwork & Roth 2014, Thm 3.6); the exact
    #: discrete Laplace with the same b gives the same eps.
    b: float


@dataclass(frozen=True)
class ComposedEvent:
    """Sequential (possibly adaptive) composition of the events in ``events``."""

    #: The composed events (each a ``PrivacyEvent``): at least one; a list is converted to a tuple.
    events: tuple
    #: What the composition released (e.g. ``"release"``, ``"dp-vapvi"``).
    label: str = ""

    def __post_init__(self):
        evs = tuple(self.events) if isinstance(self.events, (list, tuple)) else None
        if not evs:
            raise AccountingError(f"`ComposedEvent.events` must be a non-empty sequence of events. "
                                  f"Found {self.events!r}.")
        bad = [type(e).__name__ for e in evs if not isinstance(e, _EVENT_TYPES)]
        if bad:
            raise AccountingError(f"`ComposedEvent.events` must hold privacy events. Found {bad}.")
        object.__setattr__(self, "events", evs)

    def to_dict(self) -> dict:
        return {"kind": "composed", "label": self.label, "events": [e.to_dict() for e in self.events]}


@dataclass(frozen=True)
class SelfComposedEvent:
    """``event`` run ``count`` times with fresh noise (e.g. one statistic per step h)."""

    event: "PrivacyEvent"
    count: int

    def __post_init__(self):
        if not isinstance(self.event, _EVENT_TYPES):
            raise AccountingError(f"`SelfComposedEvent.event` must be a privacy event. "
                                  f"Found {type(self.event).__name__}.")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise AccountingError(f"`SelfComposedEvent.count` must be an integer >= 1. Found {self.count!r}.")

    def to_dict(self) -> dict:
        return {"kind": "self_composed", "count": self.count, "event": self.event.to_dict()}


_EVENT_TYPES = (GaussianEvent, LaplaceEvent, ComposedEvent, SelfComposedEvent)
#: the noise-adding events by their serialised ``kind``
_LEAF_TYPES = {leaf.KIND: leaf for leaf in (GaussianEvent, LaplaceEvent)}
PrivacyEvent = Union[GaussianEvent, LaplaceEvent, ComposedEvent, SelfComposedEvent]


def leaves(event: PrivacyEvent):
    """The noise-adding events of ``event`` with their multiplicities: yields (leaf, count)."""
    if isinstance(event, (GaussianEvent, LaplaceEvent)):
        yield event, 1
    elif isinstance(event, ComposedEvent):
        for e in event.events:
            yield from leaves(e)
    elif isinstance(event, SelfComposedEvent):
        for e, c in leaves(event.event):
            yield e, c * event.count
    else:
        raise AccountingError(f"unknown privacy event {type(event).__name__}; known: "
                              f"{[t.__name__ for t in _EVENT_TYPES]}.")


def event_from_dict(d: dict) -> PrivacyEvent:
    """Rebuild an event from ``to_dict()`` output (a manifest's ``event`` field).

    Raises
    ------
    AccountingError
        An unknown ``kind``, a missing field or an invalid value; the message
        names the field.
    """
    kind = _field(d, "kind", "privacy event")
    leaf = _LEAF_TYPES.get(kind) if isinstance(kind, str) else None
    if leaf is not None:
        what = kind + " event"
        common = dict(family=_field(d, "family", what), unit=PrivacyUnit.from_dict(_field(d, "unit", what)),
                      neighbouring=Neighbouring.parse(_field(d, "neighbouring", what)),
                      noise=_field(d, "noise", what), max_per_cell=d.get("max_per_cell"))
        return leaf(**{name: _field(d, name, what) for name in leaf.FIELDS}, **common)
    if kind == "composed":
        evs = _field(d, "events", "composed event")
        if not isinstance(evs, list):
            raise AccountingError(f"`events` of a composed event must be a list. Found {evs!r}.")
        return ComposedEvent(tuple(event_from_dict(e) for e in evs), str(d.get("label", "")))
    if kind == "self_composed":
        return SelfComposedEvent(event_from_dict(_field(d, "event", "self-composed event")),
                                 _field(d, "count", "self-composed event"))
    raise AccountingError(f"`kind` of a privacy event must be one of 'gaussian', 'laplace', 'composed', "
                          f"'self_composed'. Found {kind!r}.")
