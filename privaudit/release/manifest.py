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
version 2 (written now) stores ``transitions.parquet`` as one dense
``value`` column, one row group per h, its order and shapes recorded in
``families.transitions.dense``; version 1 (still read) had four index
columns beside ``value``. :meth:`ReleaseManifest.to_dict` gives the
document, checked against the schema on every write;
:meth:`ReleaseManifest.from_dict` checks the format version (refusing
versions it does not know) and the schema on every read, and reads
manifests written before ``event``,
``privacy_unit.file_column``, ``bounding.episode_key`` and ``private``
existed (``private`` is then derived from ``rng``). The guarantee stays the
dict ``privaudit.privacy.accounting.guarantee`` builds (the one function
that states guarantees); the consistency of the stated guarantee with the
mechanism facts is checked on reading by
:func:`privaudit.release.manifest_check.check_manifest_guarantee`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from privaudit.core.errors import ArtifactError
from privaudit.core.schemas import check_on_write, validate_or_raise

__all__ = ["ReleaseManifest", "Domain", "UnitRecord", "FamilyRecord", "DenseLayout", "RELEASE_KIND",
           "RELEASE_FORMAT_VERSION", "READABLE_FORMAT_VERSIONS", "DENSE_ORDER"]

#: The release format version this privaudit writes (2: dense transition slices).
RELEASE_FORMAT_VERSION = 2
#: The release format versions this privaudit reads; others are refused (ArtifactError).
READABLE_FORMAT_VERSIONS = (1, 2)
#: The documented cell order of a dense transition row group (format version 2).
DENSE_ORDER = ("row-major (C order) over (state, action, next_state): cell (s, a, s') is row (s * A + a) * S + s' "
               "of its row group; row group h holds step h (one row group when stationary)")

#: The manifest's ``kind``.
RELEASE_KIND = "privaudit-release"
_SCHEMA = "release_manifest"


@dataclass(frozen=True)
class Domain:
    """The declared domain of a release (all from the spec).

    Attributes
    ----------
    H, S, A : int
        Horizon, states, actions (>= 1).
    stationary : bool
        Counts pooled over h (tables without an h column).
    terminal_states : tuple of int
    reward_range : tuple of (float, float)
        The spec's declared reward range (rewards are scaled from it into [0, 1]).
    """

    H: int  # noqa: N815
    S: int  # noqa: N815
    A: int  # noqa: N815
    stationary: bool
    terminal_states: tuple
    reward_range: tuple

    def to_dict(self) -> dict:
        return {"H": self.H, "S": self.S, "A": self.A, "stationary": self.stationary,
                "terminal_states": list(self.terminal_states), "reward_range": list(self.reward_range)}

    @classmethod
    def from_dict(cls, d: dict) -> "Domain":
        return cls(int(d["H"]), int(d["S"]), int(d["A"]), bool(d["stationary"]),
                   tuple(int(x) for x in d["terminal_states"]), tuple(d["reward_range"]))


@dataclass(frozen=True)
class UnitRecord:
    """Whom the release protects (``privacy_unit``).

    Attributes
    ----------
    column : str
        The unit column (``episode_id`` when the spec names none).
    max_episodes : int
        k: most episodes kept per unit.
    file_column : str or None
        The column of the log files bounding grouped on; None in manifests
        written before it was recorded.
    max_per_cell : int or None
        c: most steps kept per unit and released cell; None: no per-cell cap.
    """

    column: str
    max_episodes: int
    file_column: str | None = None
    max_per_cell: int | None = None

    def to_dict(self) -> dict:
        return {"column": self.column, **({} if self.file_column is None else {"file_column": self.file_column}),
                "max_episodes": self.max_episodes,
                **({} if self.max_per_cell is None else {"max_per_cell": self.max_per_cell})}

    @classmethod
    def from_dict(cls, d: dict) -> "UnitRecord":
        return cls(d["column"], int(d["max_episodes"]), d.get("file_column"), d.get("max_per_cell"))


@dataclass(frozen=True)
class DenseLayout:
    """How a dense family table is stored (``families.<f>.dense``, format version 2).

    Attributes
    ----------
    row_groups : int
        H (one row group per step h), or 1 when stationary.
    row_group_shape : tuple of int
        Shape of one row group's values, (S, A, S) for transitions.
    order : str
        The cell order inside a row group, in words (:data:`DENSE_ORDER`).
    """

    row_groups: int
    row_group_shape: tuple
    order: str = DENSE_ORDER

    def to_dict(self) -> dict:
        return {"row_groups": self.row_groups, "row_group_shape": list(self.row_group_shape), "order": self.order}

    @classmethod
    def from_dict(cls, d: dict) -> "DenseLayout":
        return cls(int(d["row_groups"]), tuple(int(x) for x in d["row_group_shape"]), d["order"])


@dataclass(frozen=True)
class FamilyRecord:
    """One released family (``families.<name>``): its table and its noise, in stored value units.

    Attributes
    ----------
    file : str
        Its Parquet file in the release folder.
    columns : tuple of str
        Index columns then ``value``; only ``("value",)`` for a dense table.
    shape : tuple of int
        Dense shape, e.g. (H, S, A) or (S, A, S).
    value_unit : float
        A stored value v means v x value_unit (1 for counts, 1/reward_quantum for reward sums).
    l1_sensitivity, l2_sensitivity : float
        Sensitivities in stored units under the neighbouring relation.
    noise_scale : float
        sigma (Gaussian) or b (Laplace) in stored units.
    noise_scale_name : {"sigma", "laplace_b"}
    budget : dict
        This family's share: ``{"rho": ...}`` or ``{"epsilon": ...}``.
    dense : DenseLayout or None
        Set when the table holds the values alone (format version 2
        transitions); None: index columns beside ``value`` (format 1, and
        visits and rewards in format 2).
    """

    file: str
    columns: tuple
    shape: tuple
    value_unit: float
    l1_sensitivity: float
    l2_sensitivity: float
    noise_scale: float
    noise_scale_name: str
    budget: dict
    dense: DenseLayout | None = None

    def to_dict(self) -> dict:
        return {"file": self.file, "columns": list(self.columns), "shape": list(self.shape),
                **({} if self.dense is None else {"dense": self.dense.to_dict()}),
                "value_unit": self.value_unit, "l1_sensitivity": self.l1_sensitivity,
                "l2_sensitivity": self.l2_sensitivity, "noise_scale": self.noise_scale,
                "noise_scale_name": self.noise_scale_name, "budget": dict(self.budget)}

    @classmethod
    def from_dict(cls, d: dict) -> "FamilyRecord":
        return cls(d["file"], tuple(d["columns"]), tuple(int(x) for x in d["shape"]), d["value_unit"],
                   d["l1_sensitivity"], d["l2_sensitivity"], d["noise_scale"], d["noise_scale_name"],
                   dict(d["budget"]), None if "dense" not in d else DenseLayout.from_dict(d["dense"]))


@dataclass(frozen=True)
class ReleaseManifest:
    """The public description of one tabular count release (``manifest.json``).

    Build it with ``TabularRelease.manifest`` (writer) or :meth:`from_dict`
    (reader); write :meth:`to_dict`. Holds no seed, no exact statistic and no
    count of rows, episodes or units of the private logs.

    Attributes
    ----------
    software_version : str
        privaudit version that wrote it.
    created : str
        UTC timestamp, ISO 8601.
    spec_hash : str
        ``DomainSpec.hash()`` of the spec used (64 hex digits).
    dataset_id : str
        The spec's dataset (the ledger's).
    domain : Domain
    privacy_unit : UnitRecord
    neighbouring : str
        The relation in words (``Neighbouring.SUBSTITUTION.description``).
    bounding : dict[str, str]
        The bounding rules in words (keep-k, steps, rewards, terminal; episode_key).
    mechanism : {"gaussian", "laplace"}
    noise : {"exact", "rounded"}
        ``rounded`` only in old releases and the auditor's simulations.
    rng : {"secure", "seeded-insecure"}
    families : dict[str, FamilyRecord]
        visits, transitions and (private reward) rewards, in that order.
    guarantee : dict
        As ``privaudit.privacy.accounting.guarantee`` states it (plus ``sampler``).
    budget_split, values : str
        The split rule and what the value columns hold, in words.
    public_reward : dict or None
        The spec's public reward declaration (rewards not released).
    reward_quantum : int or None
        q, when reward sums are released.
    event : dict or None
        The release's privacy event (``PrivacyEvent.to_dict()``); None in
        manifests written before events existed.
    format_version : int
        :data:`RELEASE_FORMAT_VERSION` (2) when written now; 1 for releases
        written before dense transition slices (still read).
    """

    software_version: str
    created: str
    spec_hash: str
    dataset_id: str
    domain: Domain
    privacy_unit: UnitRecord
    neighbouring: str
    bounding: dict = field(repr=False)
    mechanism: str
    noise: str
    rng: str
    families: dict = field(repr=False)
    guarantee: dict = field(repr=False)
    budget_split: str = field(repr=False)
    values: str = field(repr=False)
    public_reward: dict | None = field(repr=False)
    reward_quantum: int | None = None
    event: dict | None = field(default=None, repr=False)
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

    def to_dict(self) -> dict:
        """The ``manifest.json`` document, checked against ``schemas/release_manifest.schema.json``.

        Raises
        ------
        ArtifactError
            The document breaks its schema (an internal error: nothing is written).
        """
        d = {
            "format_version": self.format_version,
            "kind": RELEASE_KIND,
            "software": {"name": "privaudit", "version": self.software_version},
            "created": self.created,
            "spec_hash": self.spec_hash,
            "dataset_id": self.dataset_id,
            "domain": self.domain.to_dict(),
            "privacy_unit": self.privacy_unit.to_dict(),
            "neighbouring": self.neighbouring,
            "bounding": dict(self.bounding),
            "mechanism": self.mechanism,
            "noise": self.noise,
            "rng": self.rng,
            "private": self.private,
            "families": {f: p.to_dict() for f, p in self.families.items()},
            "guarantee": copy.deepcopy(self.guarantee),
            **({} if self.event is None else {"event": copy.deepcopy(self.event)}),
            "budget_split": self.budget_split,
            "values": self.values,
            "public_reward": copy.deepcopy(self.public_reward),
        }
        if self.reward_quantum is not None:
            d["reward_quantum"] = self.reward_quantum
        return check_on_write(d, _SCHEMA, "release manifest")

    @classmethod
    def from_dict(cls, doc, where="release manifest") -> "ReleaseManifest":
        """Read a ``manifest.json`` document: format version, schema, then the typed fields.

        Parameters
        ----------
        doc : object
            The parsed JSON.
        where : str or Path
            The manifest's path, for messages.

        Raises
        ------
        ArtifactError
            Not an object, a ``format_version`` not in
            :data:`READABLE_FORMAT_VERSIONS` (the message names the version
            found and the ones this privaudit reads), or a document breaking
            the schema (every error named by its JSON path), or a
            ``private`` flag that contradicts ``rng``.
        """
        if not isinstance(doc, dict):
            raise ArtifactError(f"{where}: a release manifest must be a JSON object. Found {type(doc).__name__!r}.")
        found = doc.get("format_version")
        if isinstance(found, bool) or found not in READABLE_FORMAT_VERSIONS:
            known = " and ".join(str(v) for v in READABLE_FORMAT_VERSIONS)
            newer = isinstance(found, int) and not isinstance(found, bool) and found > max(READABLE_FORMAT_VERSIONS)
            raise ArtifactError(f"{where}: unknown release format version: format_version is {found!r}, and this "
                                f"privaudit reads release format versions {known} only. "
                                + ("The release was written by a newer privaudit: upgrade privaudit to read it."
                                   if newer else "Use the privaudit version that wrote it."))
        validate_or_raise(doc, _SCHEMA, ArtifactError, str(where))
        if "private" in doc and doc["private"] != (doc["rng"] == "secure"):
            raise ArtifactError(f"{where}: private is {doc['private']!r} but rng is {doc['rng']!r} (a release is "
                                "private exactly when its noise came from OS entropy). The manifest is "
                                "inconsistent (edited by hand?); do not trust or use this release.")
        return cls(
            software_version=doc["software"]["version"], created=doc["created"], spec_hash=doc["spec_hash"],
            dataset_id=doc["dataset_id"], domain=Domain.from_dict(doc["domain"]),
            privacy_unit=UnitRecord.from_dict(doc["privacy_unit"]), neighbouring=doc["neighbouring"],
            bounding=dict(doc["bounding"]), mechanism=doc["mechanism"], noise=doc["noise"], rng=doc["rng"],
            families={f: FamilyRecord.from_dict(p) for f, p in doc["families"].items()},
            guarantee=copy.deepcopy(doc["guarantee"]), budget_split=doc["budget_split"], values=doc["values"],
            public_reward=copy.deepcopy(doc["public_reward"]), reward_quantum=doc.get("reward_quantum"),
            event=copy.deepcopy(doc.get("event")), format_version=doc["format_version"])
