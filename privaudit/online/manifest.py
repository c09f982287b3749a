"""The explore manifest as a typed, immutable object (``manifest.json`` of a ``privaudit explore`` folder).

:class:`ExploreManifest` is what :func:`privaudit.online.explore.write_explore`
builds and writes, and what :func:`read_explore_manifest` returns: fields
instead of string keys (``manifest.guarantee.private``, ``manifest.summary.
cumulative_regret``), as :class:`privaudit.release.manifest.ReleaseManifest` for
releases and :class:`privaudit.learners.policy_manifest.PolicyManifest` for
policies.

The on-disk format is unchanged (format version 1), now with a JSON Schema
(``schemas/explore_manifest.schema.json``): :meth:`ExploreManifest.to_dict`
gives the document, checked against the schema on every write;
:meth:`ExploreManifest.from_dict` checks the format version and the schema on
every read, and reads manifests written before the guarantee recorded ``rng``,
``sampler`` or ``grid`` (None when absent). The schema refuses a ``seed`` in
``config`` (the noise seed is never written). The records are
:class:`privaudit.core.artifact.Record` s and the manifest an
:class:`~privaudit.core.artifact.Artifact`; the guarantee is the one
in-memory :class:`privaudit.core.artifact.Guarantee` (``ExploreGuarantee`` is
its former name), written in the one envelope shape of every artifact
(``privaudit.core.envelope``: the run's statement, then sampler, mechanism,
noise, the JDP relation and unit in words, rng, the composed event and the JDP
words under ``details``). A manifest written before the envelope keeps its
flat joint-DP shape on disk (:func:`explore_guarantee` puts its keys in that
order); :attr:`ExploreManifest.envelope` reads either shape as the envelope.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from privaudit.core.artifact import Artifact, ArtifactFormat, Guarantee, Record, jfield
from privaudit.core.envelope import as_envelope
from privaudit.core.errors import MissingInputError

__all__ = ["ExploreManifest", "ExploreEnvironment", "ExploreGuarantee", "ExploreSummary", "EXPLORE_KIND",
           "EXPLORE_FORMAT_VERSION", "read_explore_manifest", "explore_guarantee"]

#: The manifest's ``kind``.
EXPLORE_KIND = "privaudit-explore"
#: Version of the explore output folder (manifest and Parquet).
EXPLORE_FORMAT_VERSION = 1
#: The guarantee's typed keys in their order on disk, after the JDP text (what is protected, from whom);
#: the value written when a key is absent (older manifests), ``...``: left out.
_EXPLORE_KEYS = {"rng": ..., "private": False, "epsilon": None, "delta": None, "rho": None, "statement": ...,
                 "sampler": None, "events": [], "grid": ..., "note": ...}

#: The former name of the run's guarantee: one :class:`~privaudit.core.artifact.Guarantee` for every artifact.
ExploreGuarantee = Guarantee


def explore_guarantee(g) -> Guarantee:
    """The run's JDP guarantee in the explore manifest's shape: the JDP text first, then ``rng``, ``private``,
    ``epsilon``, ``delta``, ``rho``, ``statement``, ``sampler``, ``events``, ``grid``, ``note``.

    ``private``, ``epsilon``, ``delta``, ``rho``, ``sampler`` and ``events``
    are always written (``sampler`` None and ``events`` empty in manifests
    written before they were recorded); ``rng``, ``statement``, ``grid`` and
    ``note`` only when recorded.

    Parameters
    ----------
    g : Mapping
        The guarantee as ``privaudit.online.explore`` builds it, or as read.
    """
    text = {k: v for k, v in g.items() if k not in _EXPLORE_KEYS}
    typed = {k: g.get(k, absent) for k, absent in _EXPLORE_KEYS.items() if k in g or absent is not ...}
    return Guarantee(text, **typed | {"private": bool(typed["private"])})


@dataclass(frozen=True)
class ExploreEnvironment(Record):
    """The simulated user stream (public: all data is simulated from a known MDP)."""

    name: str
    horizon: int
    n_states: int
    n_actions: int
    #: Key of the users' response trees.
    world_key: int | None = None

    def _json_derived(self) -> dict:
        return {"simulated": True}


@dataclass(frozen=True)
class ExploreSummary(Record):
    """The regret summary (simulated users)."""

    #: K.
    episodes: int
    #: sum_k V*_0(s_0^k) - V^{pi_k}_0(s_0^k).
    cumulative_regret: float
    mean_regret_last_10pct: float
    mean_regret_first_10pct: float


@dataclass(frozen=True)
class ExploreManifest(Artifact):
    """The public description of one ``privaudit explore`` run."""

    FORMAT = ArtifactFormat("explore manifest", "explore_manifest", EXPLORE_FORMAT_VERSION, kind=EXPLORE_KIND)
    _JSON_ORDER = ("format_version", "kind")

    #: Versions (privaudit, python, numpy).
    software: dict = field(repr=False)
    #: The run's configuration (never a seed).
    config: dict = field(repr=False)
    environment: ExploreEnvironment
    #: The run's JDP guarantee in the envelope's shape (``privaudit.core.envelope``: ``private``, ``epsilon``,
    #: ``delta``, ``rho``, ``statement``, ``note``, then ``sampler``, ``mechanism``, ``noise``, ``neighbouring``,
    #: ``privacy_unit``, ``rng``, ``event``, ``details``), as ``online.explore`` writes it; a manifest written
    #: before the envelope keeps its flat shape, ordered by :func:`explore_guarantee` (:attr:`envelope` reads either
    #: in the envelope's shape).
    guarantee: Guarantee
    #: The counters' noise calibration (tabular explorers).
    calibration: dict | None = jfield(missing=None, repr=False)
    summary: ExploreSummary
    #: ``regret`` (Parquet) and ``plot`` (PNG), relative to the folder.
    files: dict = field(default_factory=lambda: {"regret": "regret.parquet", "plot": "regret.png"}, repr=False)
    #: 1.
    format_version: int = EXPLORE_FORMAT_VERSION

    def __post_init__(self):
        """The guarantee as a :class:`Guarantee`: the envelope as given, a guarantee written before it in that
        shape's key order (:func:`explore_guarantee`)."""
        g = self.guarantee
        object.__setattr__(self, "guarantee", Guarantee(g) if "details" in g else explore_guarantee(g))

    @property
    def envelope(self) -> Guarantee:
        """The run's guarantee in the envelope's shape (``privaudit.core.envelope.as_envelope``: manifests
        written before the envelope read so too; the file is not rewritten)."""
        return as_envelope(self.guarantee)


def read_explore_manifest(path) -> ExploreManifest:
    """Read the manifest of an explore folder (or the ``manifest.json`` itself).

    Raises
    ------
    MissingInputError
        The path does not exist.
    ArtifactError
        Not an explore folder, unreadable JSON, an unknown format version or a schema error.
    """
    path = Path(path)
    if not path.exists():
        raise MissingInputError(f"{path}: no such explore folder or manifest.")
    return ExploreManifest.read(path / "manifest.json" if path.is_dir() else path)
