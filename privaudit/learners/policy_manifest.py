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
stationary, no spec hash, no extras). Both are
:class:`privaudit.core.artifact.Record` s (the manifest an
:class:`~privaudit.core.artifact.Artifact`: schema on write and read, atomic
:meth:`~privaudit.core.artifact.Artifact.write` and
:meth:`~privaudit.core.artifact.Artifact.read`). The guarantee is what the
mechanism's ``Budget.guarantee`` (``privaudit.privacy.accounting.guarantee``)
stated, held as a :class:`privaudit.core.artifact.Guarantee` and written as
stated: this module types the record around it, not the accounting.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from privaudit import FORMAT_VERSION
from privaudit.core.artifact import Artifact, ArtifactFormat, Guarantee, Record, jfield
from privaudit.core.envelope import as_envelope
from privaudit.core.errors import ArtifactError

__all__ = ["PolicyManifest", "PolicyPrivacy", "POLICY_KIND"]

#: The manifest's ``kind``.
POLICY_KIND = "privaudit-policy"


@dataclass(frozen=True)
class PolicyPrivacy(Record):
    """A policy's privacy record (``policy.json``'s ``privacy``).

    Attributes
    ----------
    private : bool
        True only when the guarantee holds against everyone: a DP learner (or a
        DP release) whose noise came from OS entropy. Seeded noise keeps the
        guarantee for reference but is not private.
    guarantee : Guarantee or None
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
    guarantee: Guarantee | None = jfield(default=None, omit_none=True, repr=False)
    release: str | None = jfield(default=None, omit_none=True)
    note: str | None = jfield(default=None, omit_none=True)

    def __post_init__(self):
        super().__post_init__()
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
    def envelope(self) -> Guarantee | None:
        """The guarantee in the envelope's shape (``privaudit.core.envelope.as_envelope``: files written before
        the envelope read so too); None without a guarantee.

        Raises
        ------
        ArtifactError
            A guarantee stated by hand without the envelope's facts (mechanism, privacy unit, ...).
        """
        return None if self.guarantee is None else as_envelope(self.guarantee)

    @property
    def event(self) -> dict | None:
        """The mechanism's privacy event (``PrivacyEvent.to_dict()``), when its guarantee records one."""
        return None if self.guarantee is None else self.guarantee.get("event")


@dataclass(frozen=True)
class PolicyManifest(Artifact):
    """The public description of one policy (``policy.json``).

    Build it with ``Policy.manifest()`` (writer) or :meth:`from_dict` (reader);
    write :meth:`to_dict` (or :meth:`write`).

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

    FORMAT = ArtifactFormat("policy manifest", "policy", FORMAT_VERSION, kind=POLICY_KIND)
    _JSON_ORDER = ("format_version", "kind", "algorithm", "parameters", "horizon", "n_states", "n_actions",
                   "stationary", "spec_hash", "software_version", "created", "extras", "privacy")

    algorithm: str
    parameters: dict = field(repr=False)
    horizon: int
    n_states: int
    n_actions: int
    stationary: bool = jfield(missing=False)
    spec_hash: str | None = jfield(missing=None)
    software_version: str
    created: str
    extras: tuple = jfield(default=(), skip=True)
    privacy: PolicyPrivacy = field(default_factory=lambda: PolicyPrivacy(False))
    format_version: int = FORMAT_VERSION

    @property
    def shape(self) -> tuple:
        """(H, S, A)."""
        return (self.horizon, self.n_states, self.n_actions)

    def _json_derived(self) -> dict:
        return {**super()._json_derived(), "extras": sorted(self.extras)}

    @classmethod
    def _json_read(cls, doc: dict) -> dict:
        return {"extras": tuple(doc.get("extras") or ())}
