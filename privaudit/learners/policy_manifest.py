"""The policy manifest as a typed, immutable object (``policy.json`` of a policy folder).

:class:`PolicyManifest` is what :meth:`privaudit.learners.policy.Policy.manifest`
builds, what :func:`privaudit.learners.policy.save_policy` writes and what
:func:`privaudit.learners.policy.load_policy` reads; :class:`PolicyPrivacy` is
its ``privacy`` record, the ``Policy.privacy`` every learner sets and every
reader (``evaluate``, the pipeline's composition, ``train``'s summary) uses:
fields instead of string keys, so a misspelt field is an AttributeError at
the line that reads it, not a KeyError (or a silent ``.get`` default) later.

The on-disk format is unchanged (format version 1,
``schemas/policy.schema.json``, as :class:`privaudit.release.manifest.ReleaseManifest`
for releases): :meth:`PolicyManifest.to_dict` gives the document, checked
against the schema on every write; :meth:`PolicyManifest.from_dict` checks
the format version and the schema on every read, and reads policies written
before ``stationary``, ``spec_hash`` or ``extras`` existed (defaults: not
stationary, no spec hash, no extras). The guarantee stays the dict the
mechanism's ``Budget.guarantee`` (``privaudit.privacy.accounting.guarantee``)
built: this module types the record around it, not the accounting.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from privaudit import FORMAT_VERSION
from privaudit.core.errors import ArtifactError
from privaudit.core.schemas import check_on_write, check_versioned

__all__ = ["PolicyManifest", "PolicyPrivacy", "POLICY_KIND"]

#: The manifest's ``kind``.
POLICY_KIND = "privaudit-policy"
_SCHEMA = "policy"


@dataclass(frozen=True)
class PolicyPrivacy:
    """A policy's privacy record (``policy.json``'s ``privacy``).

    Attributes
    ----------
    private : bool
        True only when the guarantee holds against everyone: a DP learner (or a
        DP release) whose noise came from OS entropy. Seeded noise keeps the
        guarantee for reference but is not private.
    guarantee : dict or None
        The guarantee as the mechanism stated it (``definition``, ``rho``,
        ``epsilon``, ``delta``, ``requested``, ``rng``, ``privacy_unit``, and
        ``event`` for mechanisms that record one); None for a learner that
        adds no noise.
    release : str or None
        The release the policy was trained on (post-processing of it).
    note : str or None
        Why the policy is not private, in words.
    """

    private: bool
    guarantee: dict | None = field(default=None, repr=False)
    release: str | None = None
    note: str | None = None

    def __post_init__(self):
        if self.private and self.guarantee is None:
            raise ArtifactError("a private policy must record its guarantee (`guarantee` is None).")

    @classmethod
    def none(cls, note: str) -> "PolicyPrivacy":
        """A learner that reads exact data and adds no noise: not private, with ``note`` saying so."""
        return cls(False, None, None, note)

    @property
    def rho(self) -> float | None:
        """The stated zCDP rho (None without a guarantee)."""
        return None if self.guarantee is None else float(self.guarantee["rho"])

    @property
    def definition(self) -> str | None:
        """``zCDP`` or ``pure-DP`` (None without a guarantee)."""
        return None if self.guarantee is None else self.guarantee.get("definition", "DP")

    @property
    def event(self) -> dict | None:
        """The mechanism's privacy event (``PrivacyEvent.to_dict()``), when its guarantee records one."""
        return None if self.guarantee is None else self.guarantee.get("event")

    def to_dict(self) -> dict:
        """The ``privacy`` object of ``policy.json``."""
        d: dict = {"private": self.private}
        if self.guarantee is not None:
            d["guarantee"] = copy.deepcopy(self.guarantee)
        if self.release is not None:
            d["release"] = self.release
        if self.note is not None:
            d["note"] = self.note
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "PolicyPrivacy":
        """Read a ``privacy`` object (as written by any version of format 1)."""
        return cls(bool(d["private"]), copy.deepcopy(d.get("guarantee")), d.get("release"), d.get("note"))


@dataclass(frozen=True)
class PolicyManifest:
    """The public description of one policy (``policy.json``).

    Build it with ``Policy.manifest()`` (writer) or :meth:`from_dict` (reader);
    write :meth:`to_dict`.

    Attributes
    ----------
    algorithm : str
        Learner name (a registry entry: ``ve``, ``dp-apvi``, ``dp-pbb``, ...).
    parameters : dict
        The learner's parameters (JSON-ready).
    horizon, n_states, n_actions : int
        Shape (H, S, A) of the table in ``policy.parquet``.
    stationary : bool
        Trained on counts pooled over h.
    spec_hash : str or None
        ``DomainSpec.hash()`` of the spec it was trained under.
    software_version : str
        privaudit version that wrote it.
    created : str
        UTC timestamp, ISO 8601.
    extras : tuple of str
        Names of the arrays in ``extras.parquet`` (sorted).
    privacy : PolicyPrivacy
    format_version : int
        1.
    """

    algorithm: str
    parameters: dict = field(repr=False)
    horizon: int
    n_states: int
    n_actions: int
    stationary: bool
    spec_hash: str | None
    software_version: str
    created: str
    extras: tuple = ()
    privacy: PolicyPrivacy = field(default_factory=lambda: PolicyPrivacy(False))
    format_version: int = FORMAT_VERSION

    @property
    def shape(self) -> tuple:
        """(H, S, A)."""
        return (self.horizon, self.n_states, self.n_actions)

    def to_dict(self) -> dict:
        """The ``policy.json`` document, checked against ``schemas/policy.schema.json``.

        Raises
        ------
        ArtifactError
            The document breaks its schema (an internal error: nothing is written).
        """
        d = {
            "format_version": self.format_version,
            "kind": POLICY_KIND,
            "algorithm": self.algorithm,
            "parameters": copy.deepcopy(self.parameters),
            "horizon": self.horizon,
            "n_states": self.n_states,
            "n_actions": self.n_actions,
            "stationary": self.stationary,
            "spec_hash": self.spec_hash,
            "software_version": self.software_version,
            "created": self.created,
            "extras": sorted(self.extras),
            "privacy": self.privacy.to_dict(),
        }
        return check_on_write(d, _SCHEMA, "policy manifest")  # a bug in the caller: never write a bad artifact

    @classmethod
    def from_dict(cls, doc, where="policy manifest") -> "PolicyManifest":
        """Read a ``policy.json`` document (the parsed JSON ``doc``; ``where``: its path, for messages).

        Raises
        ------
        ArtifactError
            As :func:`privaudit.core.schemas.check_versioned` (format version 1, then the schema).
        """
        check_versioned(doc, _SCHEMA, str(where), FORMAT_VERSION)
        return cls(
            algorithm=doc["algorithm"], parameters=copy.deepcopy(doc["parameters"]), horizon=int(doc["horizon"]),
            n_states=int(doc["n_states"]), n_actions=int(doc["n_actions"]),
            stationary=bool(doc.get("stationary", False)), spec_hash=doc.get("spec_hash"),
            software_version=doc["software_version"], created=doc["created"],
            extras=tuple(doc.get("extras") or ()), privacy=PolicyPrivacy.from_dict(doc["privacy"]),
            format_version=doc["format_version"])
