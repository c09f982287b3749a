"""The release manifest as a typed, immutable object (``manifest.json`` of a release folder).

:class:`ReleaseManifest` is what the release writer builds
(``TabularRelease.manifest``), what :func:`privaudit.release.artifact.read_manifest`
returns and what every reader uses (``Release``, DP-APVI's noise bound and
privacy record, ``train --release``, the pipeline's summary and audit, the
CLI): fields instead of string keys, so a misspelt field is an
AttributeError at the line that reads it, not a KeyError (or a silent
``.get`` default) somewhere later.

Release format versions (``schemas/release_manifest.schema.json``; the
tables are described in ``privaudit.release.artifact`` and docs/release.md):
version 3 (written now) stores ``transitions.parquet`` with index columns
(h,) state, next_state and one count column ``action_<a>`` per action, one
row group per h, its order and shapes recorded in
``families.transitions.dense``; version 2 (still read)
stored the bare ``value`` column in a documented order; version 1 (still
read) had four index columns beside ``value``. :meth:`ReleaseManifest.to_dict` gives the
document, checked against the schema on every write;
:meth:`ReleaseManifest.from_dict` checks the format version (refusing
versions it does not know) and the schema on every read, and reads
manifests written before ``event``,
``privacy_unit.file_column``, ``bounding.episode_key`` and ``private``
existed (``private`` is then derived from ``rng``). The records are
:class:`privaudit.core.artifact.Record` s (their JSON keys follow from their
fields) and the manifest an :class:`privaudit.core.artifact.Artifact`
(schema on write and read, atomic :meth:`ReleaseManifest.write`). The
guarantee is what ``privaudit.privacy.accounting.guarantee`` builds (the one
function that states guarantees), held as a
:class:`privaudit.core.artifact.Guarantee` and written as stated; the consistency of the stated guarantee with the
mechanism facts is checked on reading by
:func:`privaudit.release.manifest_check.check_manifest_guarantee`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from privaudit.core.artifact import Artifact, ArtifactFormat, Guarantee, Number, Record, jfield
from privaudit.core.envelope import as_envelope
from privaudit.core.errors import ArtifactError

__all__ = ["ReleaseManifest", "Domain", "UnitRecord", "FamilyRecord", "DenseLayout", "RELEASE_KIND",
           "RELEASE_FORMAT_VERSION", "READABLE_FORMAT_VERSIONS", "DENSE_ORDER", "WIDE_ORDER"]

#: The release format version this privaudit writes (3: transition rows (h, state, next_state) with one count
#: column per action, readable by pyarrow or polars alone).
RELEASE_FORMAT_VERSION = 3
#: The release format versions this privaudit reads; others are refused (ArtifactError).
READABLE_FORMAT_VERSIONS = (1, 2, 3)
#: The documented cell order of a dense transition row group (format version 2: the bare value column).
DENSE_ORDER = ("row-major (C order) over (state, action, next_state): cell (s, a, s') is row (s * A + a) * S + s' "
               "of its row group; row group h holds step h (one row group when stationary)")
#: The same for format version 3: one row per (state, next_state), one count column per action.
WIDE_ORDER = ("one row per (state, next_state), sorted row-major, with index columns (h,) state, next_state; "
              "column action_<a> holds the count of action a: n'_h(state, a, next_state); row group h holds "
              "step h (one row group when stationary)")

#: The manifest's ``kind``.
RELEASE_KIND = "privaudit-release"


@dataclass(frozen=True)
class Domain(Record):
    """The declared domain of a release (all from the spec)."""

    #: Horizon (>= 1).
    H: int  # noqa: N815
    #: States (>= 1).
    S: int  # noqa: N815
    #: Actions (>= 1).
    A: int  # noqa: N815
    #: Counts pooled over h (tables without an h column).
    stationary: bool
    terminal_states: tuple[int, ...]
    #: The spec's declared reward range, (float, float) (rewards are scaled from it into [0, 1]).
    reward_range: tuple


@dataclass(frozen=True)
class UnitRecord(Record):
    """Whom the release protects (``privacy_unit``)."""

    _JSON_ORDER = ("column", "file_column", "max_episodes", "max_per_cell")

    #: The unit column (``episode_id`` when the spec names none).
    column: str
    #: k: most episodes kept per unit.
    max_episodes: int
    #: The column of the log files bounding grouped on; None in manifests written before it was recorded.
    file_column: str | None = jfield(default=None, omit_none=True)
    #: c: most steps kept per unit and released cell; None: no per-cell cap.
    max_per_cell: int | None = jfield(default=None, omit_none=True)


@dataclass(frozen=True)
class DenseLayout(Record):
    """How a dense family table is stored (``families.<f>.dense``, format versions 2 and 3)."""

    #: H (one row group per step h), or 1 when stationary.
    row_groups: int
    #: Shape of one row group's values, (S, A, S) for transitions.
    row_group_shape: tuple[int, ...]
    #: The cell order inside a row group, in words (:data:`DENSE_ORDER`; :data:`WIDE_ORDER` in version 3).
    order: str = DENSE_ORDER


@dataclass(frozen=True)
class FamilyRecord(Record):
    """One released family (``families.<name>``): its table and its noise, in stored value units.

    The numbers are written and read exactly as stated (an integer stays an integer).
    """

    _JSON_ORDER = ("file", "columns", "shape", "dense")

    #: The family's Parquet file in the release folder.
    file: str
    #: Column names (str): index columns then ``value``; only ``("value",)`` for version-2 transitions; for
    #: version-3 transitions (h,) state, next_state, then ``action_0`` ... ``action_<A-1>``.
    columns: tuple
    #: Dense shape, e.g. (H, S, A) or (S, A, S).
    shape: tuple[int, ...]
    #: A stored value v means v x value_unit (1 for counts, 1/reward_quantum for reward sums); a float.
    value_unit: Number
    #: L1 sensitivity in stored units under the neighbouring relation; a float.
    l1_sensitivity: Number
    #: L2 sensitivity in stored units under the neighbouring relation; a float.
    l2_sensitivity: Number
    #: sigma (Gaussian) or b (Laplace) in stored units; a float.
    noise_scale: Number
    #: ``"sigma"`` or ``"laplace_b"``.
    noise_scale_name: str
    #: This family's share: ``{"rho": ...}`` or ``{"epsilon": ...}``.
    budget: dict
    #: Set for the transitions of format versions 2 (the values alone) and 3 (index columns and a count column per
    #: action); None: one row per cell, index columns beside ``value`` (format 1, and visits and rewards).
    dense: DenseLayout | None = jfield(default=None, omit_none=True)


@dataclass(frozen=True)
class ReleaseManifest(Artifact):
    """The public description of one tabular count release (``manifest.json``).

    Build it with ``TabularRelease.manifest`` (writer) or :meth:`from_dict`
    (reader); write :meth:`to_dict` (or :meth:`write`). Holds no seed, no
    exact statistic and no count of rows, episodes or units of the private logs.
    """

    FORMAT = ArtifactFormat("release manifest", "release_manifest", RELEASE_FORMAT_VERSION, kind=RELEASE_KIND,
                            readable=READABLE_FORMAT_VERSIONS)
    _JSON_ORDER = ("format_version", "kind", "software", "created", "spec_hash", "dataset_id", "domain",
                   "privacy_unit", "neighbouring", "bounding", "mechanism", "noise", "rng", "private", "families",
                   "guarantee", "event", "budget_split", "values", "public_reward", "reward_quantum")

    #: privaudit version that wrote it (``software.version``).
    software_version: str = jfield(skip=True)
    #: UTC timestamp, ISO 8601.
    created: str
    #: ``DomainSpec.hash()`` of the spec used (64 hex digits).
    spec_hash: str
    #: The spec's dataset (the ledger's).
    dataset_id: str
    domain: Domain
    privacy_unit: UnitRecord
    #: The relation in words (``Neighbouring.SUBSTITUTION.description``).
    neighbouring: str
    #: The bounding rules in words, str -> str (keep-k, steps, rewards, terminal; episode_key).
    bounding: dict = field(repr=False)
    #: ``"gaussian"`` or ``"laplace"``.
    mechanism: str
    #: ``"exact"`` or ``"rounded"``; ``rounded`` only in old releases and the auditor's simulations.
    noise: str
    #: ``"secure"`` or ``"seeded-insecure"``.
    rng: str
    #: visits, transitions and (private reward) rewards, in that order.
    families: dict[str, FamilyRecord] = field(repr=False)
    #: As ``privaudit.privacy.accounting.guarantee`` states it (plus ``sampler``); a plain dict given here becomes a
    #: Guarantee.
    guarantee: Guarantee = field(repr=False)
    #: The split rule, in words.
    budget_split: str = field(repr=False)
    #: What the value columns hold, in words.
    values: str = field(repr=False)
    #: The spec's public reward declaration (rewards not released).
    public_reward: dict | None = field(repr=False)
    #: q, when reward sums are released.
    reward_quantum: int | None = jfield(default=None, omit_none=True)
    #: The release's privacy event (``PrivacyEvent.to_dict()``); None in manifests written before events existed.
    event: dict | None = jfield(default=None, omit_none=True, repr=False)
    #: :data:`RELEASE_FORMAT_VERSION` (3) when written now; 2 (bare value column) or 1 (one row per cell) for older
    #: releases (still read).
    format_version: int = RELEASE_FORMAT_VERSION

    @property
    def private(self) -> bool:
        """False when the noise came from a user seed (``rng`` seeded-insecure): not private against whoever knows it."""
        return self.rng == "secure"

    @property
    def has_rewards(self) -> bool:
        """True when reward sums were released (the reward is private)."""
        return "rewards" in self.families

    @property
    def rho(self) -> float:
        """The stated zCDP rho of the whole release (pure DP: epsilon^2/2)."""
        return float(self.guarantee["rho"])

    @property
    def envelope(self) -> Guarantee:
        """The release's guarantee in the envelope's shape (``privaudit.core.envelope.as_envelope``).

        The accountant's statement and sampler, then mechanism, noise, neighbouring relation, privacy unit (as
        recorded here: column, file column, k, c), rng, the release's event and no details: as written since
        the envelope, and read so from manifests written before it (from the manifest's own fields).
        """
        return as_envelope(self.guarantee, mechanism=self.mechanism, noise=self.noise,
                           neighbouring=self.neighbouring, privacy_unit=self.privacy_unit.to_dict(), rng=self.rng,
                           event=self.event)

    def enveloped(self) -> "ReleaseManifest":
        """This manifest with its guarantee written in the envelope's shape (what the release writer writes)."""
        return replace(self, guarantee=self.envelope)

    def _json_derived(self) -> dict:
        return {**super()._json_derived(), "software": {"name": "privaudit", "version": self.software_version},
                "private": self.private}

    @classmethod
    def _json_read(cls, doc: dict) -> dict:
        return {"software_version": doc["software"]["version"]}

    @classmethod
    def _check_doc(cls, doc: dict, where) -> None:
        """Refuse a ``private`` flag that contradicts ``rng`` (ArtifactError)."""
        if "private" in doc and doc["private"] != (doc["rng"] == "secure"):
            raise ArtifactError(f"{where}: private is {doc['private']!r} but rng is {doc['rng']!r} (a release is "
                                "private exactly when its noise came from OS entropy). The manifest is "
                                "inconsistent (edited by hand?); do not trust or use this release.")
