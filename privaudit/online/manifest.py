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
``config`` (the noise seed is never written).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path

from privaudit.core.errors import MissingInputError
from privaudit.core.schemas import check_on_write, check_versioned, load_versioned_json

__all__ = ["ExploreManifest", "ExploreEnvironment", "ExploreGuarantee", "ExploreSummary", "EXPLORE_KIND",
           "EXPLORE_FORMAT_VERSION", "read_explore_manifest"]

#: The manifest's ``kind``.
EXPLORE_KIND = "privaudit-explore"
#: Version of the explore output folder (manifest and Parquet).
EXPLORE_FORMAT_VERSION = 1
_SCHEMA = "explore_manifest"
#: The guarantee's typed keys; every other key is the JDP text (what is protected, from whom).
_TYPED = ("private", "rng", "epsilon", "delta", "rho", "statement", "sampler", "events", "grid", "note")


@dataclass(frozen=True)
class ExploreEnvironment:
    """The simulated user stream (public: all data is simulated from a known MDP).

    Attributes
    ----------
    name : str
    horizon, n_states, n_actions : int
    world_key : int or None
        Key of the users' response trees.
    """

    name: str
    horizon: int
    n_states: int
    n_actions: int
    world_key: int | None = None

    def to_dict(self) -> dict:
        return {"name": self.name, "horizon": self.horizon, "n_states": self.n_states, "n_actions": self.n_actions,
                "world_key": self.world_key, "simulated": True}

    @classmethod
    def from_dict(cls, d: dict) -> "ExploreEnvironment":
        return cls(d["name"], int(d["horizon"]), int(d["n_states"]), int(d["n_actions"]), d.get("world_key"))


@dataclass(frozen=True)
class ExploreGuarantee:
    """The run's JDP guarantee (``guarantee``).

    Attributes
    ----------
    private : bool
        False for a non-private explorer, and for a seeded run (kept for reference).
    epsilon, delta, rho : float or None
        The composed guarantee (``rho`` None for pure epsilon-JDP; all None when not private).
    rng : {"secure", "seeded-insecure"} or None
        None in manifests written before it was recorded.
    statement : str or None
        The guarantee in words.
    note : str or None
        Why a run with a guarantee is not private (seeded noise).
    sampler : dict or None
        What the noise samplers deliver (``privacy.samplers.noise_statement``).
    events : tuple of dict
        The privacy events of every counter family (``PrivacyEvent.to_dict()``).
    grid : dict or None
        The linear explorers' lattices.
    text : dict
        What joint DP protects, from whom and what it does not (``online.explore.JDP_TEXT``).
    """

    private: bool
    epsilon: float | None
    delta: float | None
    rho: float | None
    rng: str | None = None
    statement: str | None = None
    note: str | None = None
    sampler: dict | None = field(default=None, repr=False)
    events: tuple = field(default=(), repr=False)
    grid: dict | None = field(default=None, repr=False)
    text: dict = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict:
        d = dict(copy.deepcopy(self.text))
        if self.rng is not None:
            d["rng"] = self.rng
        d.update({"private": self.private, "epsilon": self.epsilon, "delta": self.delta, "rho": self.rho})
        if self.statement is not None:
            d["statement"] = self.statement
        d["sampler"] = copy.deepcopy(self.sampler)
        d["events"] = [copy.deepcopy(e) for e in self.events]
        if self.grid is not None:
            d["grid"] = copy.deepcopy(self.grid)
        if self.note is not None:
            d["note"] = self.note
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "ExploreGuarantee":
        return cls(bool(d["private"]), d["epsilon"], d["delta"], d["rho"], d.get("rng"), d.get("statement"),
                   d.get("note"), copy.deepcopy(d.get("sampler")), tuple(copy.deepcopy(d["events"])),
                   copy.deepcopy(d.get("grid")), {k: v for k, v in d.items() if k not in _TYPED})


@dataclass(frozen=True)
class ExploreSummary:
    """The regret summary (simulated users).

    Attributes
    ----------
    episodes : int
        K.
    cumulative_regret : float
        sum_k V*_0(s_0^k) - V^{pi_k}_0(s_0^k).
    mean_regret_last_10pct, mean_regret_first_10pct : float
    """

    episodes: int
    cumulative_regret: float
    mean_regret_last_10pct: float
    mean_regret_first_10pct: float

    def to_dict(self) -> dict:
        return {"episodes": self.episodes, "cumulative_regret": self.cumulative_regret,
                "mean_regret_last_10pct": self.mean_regret_last_10pct,
                "mean_regret_first_10pct": self.mean_regret_first_10pct}

    @classmethod
    def from_dict(cls, d: dict) -> "ExploreSummary":
        return cls(int(d["episodes"]), float(d["cumulative_regret"]), float(d["mean_regret_last_10pct"]),
                   float(d["mean_regret_first_10pct"]))


@dataclass(frozen=True)
class ExploreManifest:
    """The public description of one ``privaudit explore`` run.

    Attributes
    ----------
    software : dict
        Versions (privaudit, python, numpy).
    config : dict
        The run's configuration (never a seed).
    environment : ExploreEnvironment
    guarantee : ExploreGuarantee
    calibration : dict or None
        The counters' noise calibration (tabular explorers).
    summary : ExploreSummary
    files : dict
        ``regret`` (Parquet) and ``plot`` (PNG), relative to the folder.
    format_version : int
        1.
    """

    software: dict = field(repr=False)
    config: dict = field(repr=False)
    environment: ExploreEnvironment
    guarantee: ExploreGuarantee
    calibration: dict | None = field(repr=False)
    summary: ExploreSummary
    files: dict = field(default_factory=lambda: {"regret": "regret.parquet", "plot": "regret.png"}, repr=False)
    format_version: int = EXPLORE_FORMAT_VERSION

    def to_dict(self) -> dict:
        """The ``manifest.json`` document, checked against ``schemas/explore_manifest.schema.json``.

        Raises
        ------
        ArtifactError
            The document breaks its schema (an internal error: nothing is written).
        """
        d = {"format_version": self.format_version, "kind": EXPLORE_KIND, "software": dict(self.software),
             "config": copy.deepcopy(self.config), "environment": self.environment.to_dict(),
             "guarantee": self.guarantee.to_dict(), "calibration": copy.deepcopy(self.calibration),
             "summary": self.summary.to_dict(), "files": dict(self.files)}
        d = json.loads(json.dumps(d, default=_json_default))  # numpy scalars -> JSON numbers, as written
        return check_on_write(d, _SCHEMA, "explore manifest")

    @classmethod
    def from_dict(cls, doc, where="explore manifest") -> "ExploreManifest":
        """Read an explore ``manifest.json`` document (the parsed JSON ``doc``; ``where``: its path, for messages).

        Raises
        ------
        ArtifactError
            As :func:`privaudit.core.schemas.check_versioned` (format version 1, then the schema).
        """
        check_versioned(doc, _SCHEMA, str(where), EXPLORE_FORMAT_VERSION)
        return cls(software=dict(doc["software"]), config=copy.deepcopy(doc["config"]),
                   environment=ExploreEnvironment.from_dict(doc["environment"]),
                   guarantee=ExploreGuarantee.from_dict(doc["guarantee"]),
                   calibration=copy.deepcopy(doc.get("calibration")), summary=ExploreSummary.from_dict(doc["summary"]),
                   files=dict(doc["files"]), format_version=doc["format_version"])


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
    mpath = path / "manifest.json" if path.is_dir() else path
    return ExploreManifest.from_dict(load_versioned_json(mpath, _SCHEMA, "explore manifest", EXPLORE_FORMAT_VERSION),
                                     mpath)


def _json_default(o):
    """numpy scalars as JSON numbers (the writer's ``json.dumps(default=...)``)."""
    item = getattr(o, "item", None)
    if callable(item):
        return item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
