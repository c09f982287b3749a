"""One base for every versioned JSON artifact privaudit writes, and one shape of the stated guarantee.

privaudit writes five JSON artifacts: the release manifest (``manifest.json``
of a release), the policy manifest (``policy.json``), the explore manifest
(``manifest.json`` of an explore run), the audit report and the pipeline's
``summary.json``. Each has a ``format_version`` (and, except the audit
report, a ``kind``), a JSON Schema in ``schemas/`` checked on every write and
every read, and is written atomically (a temporary file, then a rename:
nothing half-written ever appears under the final name). This module holds
that once:

- :class:`ArtifactFormat`: the kind, schema, versions and name of one
  artifact, with ``check_write`` / ``check_read`` / ``write`` / ``read`` of
  its JSON document (for artifacts kept as plain dicts: the audit report and
  the summary);
- :class:`Record`: a frozen dataclass whose fields map to the keys of a JSON
  object (nested records, tuples, dicts, enums; JSON numbers kept exactly as
  read unless a field is typed ``int``, ``float`` or ``bool``), so a typed
  record writes no ``to_dict`` / ``from_dict`` of its own;
- :class:`Artifact`: a :class:`Record` with an :class:`ArtifactFormat`
  (the typed manifests: release, policy, explore);
- :class:`Guarantee`: the stated privacy guarantee as one read-only object
  (``rho``, ``epsilon``, ``delta``, ``definition``, ``rng``, ``sampler``,
  ``events``, ...) that every artifact holds in memory. On disk the
  guarantee keeps the shape of its artifact (the accountant's keys in a
  release manifest, the envelope in a policy's ``privacy.guarantee``:
  ``privaudit.core.envelope``, the flat joint-DP record of an explore
  manifest): :class:`Guarantee` keeps the keys it was built from, in their
  order, so a file read and written again is byte-identical (a policy written
  before the envelope included; ``privaudit.core.envelope.as_envelope`` reads
  it in the envelope's shape).

Field options (:func:`jfield`): ``key`` (the JSON key, when it differs from
the field name), ``omit_none`` (the key is left out when the value is None),
``missing`` (the value when the key is absent on reading, for documents
written before the key existed) and ``skip`` (the field is written and read
by the record's own hooks :meth:`Record._json_derived` /
:meth:`Record._json_read`). A record's ``_JSON_ORDER`` gives the order of its
keys on disk when it is not the field order.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import types
import typing
from collections.abc import Mapping
from enum import Enum
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar, Union

from privaudit.core.errors import ArtifactError
from privaudit.core.atomic import atomic_write_text
from privaudit.core.jsonio import json_default
from privaudit.core.schemas import check_on_write, check_versioned, load_versioned_json

__all__ = ["ArtifactFormat", "Record", "Artifact", "Guarantee", "jfield", "Number", "to_json", "read_json_file"]

#: A JSON number kept exactly as read or given (an integer stays an integer): the annotation of fields
#: whose value is written as it was stated (noise scales, sensitivities, a guarantee's epsilon).
Number = Union[int, float]

_NOTHING = object()


def jfield(*, key: str | None = None, omit_none: bool = False, missing: Any = _NOTHING, skip: bool = False,
           default: Any = dataclasses.MISSING, default_factory: Any = dataclasses.MISSING,
           repr: bool = True) -> Any:  # noqa: A002 (as dataclasses.field)
    """A dataclass field with its JSON options (see the module docstring).

    Parameters
    ----------
    key : str, optional
        The JSON key (default: the field name).
    omit_none : bool
        Leave the key out of the document when the value is None.
    missing : object, optional
        The value when the key is absent from a document being read (default:
        the field's default).
    skip : bool
        Not written or read field by field: the record's hooks handle it.
    default, default_factory, repr
        As :func:`dataclasses.field`.
    """
    meta = {"key": key, "omit_none": omit_none, "skip": skip}
    if missing is not _NOTHING:
        meta["missing"] = missing
    return dataclasses.field(default=default, default_factory=default_factory, repr=repr, metadata=meta)


def to_json(value: Any) -> Any:
    """``value`` as JSON-ready data: records and guarantees as objects, tuples as lists, enums as values,
    numpy scalars and arrays as numbers and lists; containers are new (a deep copy), leaves as given."""
    if isinstance(value, (Record, Guarantee)):
        return value.to_dict()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Mapping):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if type(value).__module__.split(".")[0] == "numpy" and hasattr(value, "tolist"):
        return value.tolist()
    return value


def _from_json(hint: Any, value: Any) -> Any:
    """Read ``value`` (parsed JSON) as the annotation ``hint`` says (the inverse of :func:`to_json`)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if value is None:
            return None
        kinds = [a for a in args if a is not type(None)]
        return _from_json(kinds[0], value) if len(kinds) == 1 else copy.deepcopy(value)  # a Number: as read
    if isinstance(hint, type) and issubclass(hint, (Record, Guarantee)):
        return hint.from_dict(value)
    if isinstance(hint, type) and issubclass(hint, Enum):
        return hint(value)
    if hint in (int, float, bool):
        return hint(value)
    if hint is tuple or origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_from_json(args[0], v) for v in value)
        return tuple(copy.deepcopy(value))
    if origin is dict and args:
        return {k: _from_json(args[1], v) for k, v in value.items()}
    return copy.deepcopy(value)


@lru_cache(maxsize=None)
def _hints(cls: type) -> dict:
    return typing.get_type_hints(cls)


class Record:
    """Mixin for a frozen dataclass stored as one JSON object, field by field.

    Subclasses declare their fields (with :func:`jfield` options where the
    JSON differs from the field), optionally ``_JSON_ORDER`` (the keys in
    their order on disk), :meth:`_json_derived` (keys computed from the
    fields, e.g. a constant or a derived flag) and :meth:`_json_read`
    (fields stored in another shape).
    """

    #: The document's keys in their order on disk (default: field order, then derived keys).
    _JSON_ORDER: ClassVar[tuple] = ()

    def __post_init__(self):
        """A guarantee given as a plain mapping (as the accountant states it) becomes a :class:`Guarantee`."""
        hints = _hints(type(self))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if (isinstance(value, Mapping) and not isinstance(value, Guarantee)
                    and Guarantee in (hints[f.name], *typing.get_args(hints[f.name]))):
                object.__setattr__(self, f.name, Guarantee(value))

    def _json_derived(self) -> dict:
        """Keys written beside the fields (derived from them; not read back as fields)."""
        return {}

    @classmethod
    def _json_read(cls, doc: dict) -> dict:
        """Constructor arguments read from ``doc`` by hand (for ``skip`` fields)."""
        return {}

    def to_dict(self) -> dict:
        """The JSON object (new containers: changing it does not change the record)."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("skip") or (value is None and f.metadata.get("omit_none")):
                continue
            out[f.metadata.get("key") or f.name] = to_json(value)
        out.update(self._json_derived())
        order = [k for k in self._JSON_ORDER if k in out]
        return {**{k: out[k] for k in order}, **{k: v for k, v in out.items() if k not in order}}

    @classmethod
    def from_dict(cls, doc: dict):
        """The record of a JSON object (keys absent from ``doc`` take the field's ``missing`` or default).

        Raises
        ------
        TypeError
            ``doc`` lacks a key without default (callers check the schema first).
        """
        hints = _hints(cls)
        kwargs = {}
        for f in dataclasses.fields(cls):
            if not f.init or f.metadata.get("skip"):
                continue
            key = f.metadata.get("key") or f.name
            if key in doc:
                kwargs[f.name] = _from_json(hints[f.name], doc[key])
            elif "missing" in f.metadata:
                kwargs[f.name] = copy.deepcopy(f.metadata["missing"])
        kwargs.update(cls._json_read(doc))
        return cls(**kwargs)


@dataclasses.dataclass(frozen=True)
class ArtifactFormat:
    """What identifies one kind of JSON artifact on disk.

    Attributes
    ----------
    what : str
        Its name in messages ("release manifest", "audit report").
    schema : str
        Its JSON Schema, ``schemas/<schema>.schema.json``.
    version : int
        The ``format_version`` written now.
    kind : str or None
        The ``kind`` key it carries (None: the audit report has none).
    readable : tuple of int
        The format versions read (default: ``(version,)``).
    """

    what: str
    schema: str
    version: int
    kind: str | None = None
    readable: tuple = ()

    @property
    def versions(self) -> tuple:
        """The format versions this privaudit reads."""
        return self.readable or (self.version,)

    def check_write(self, doc: dict) -> dict:
        """Return ``doc`` as JSON-ready data (:func:`to_json`: a guarantee, a record or numpy numbers inside
        a plain dict included) after checking it against the schema (before anything is written).

        Raises
        ------
        ArtifactError
            The document breaks its schema (an internal error: nothing is written).
        """
        return check_on_write(to_json(doc), self.schema, self.what)

    def check_read(self, doc: Any, where) -> dict:
        """Return ``doc`` (parsed JSON) after checking its ``format_version`` and its schema.

        Raises
        ------
        ArtifactError
            Not an object, a format version this privaudit does not read, or a
            schema error (every error named by its JSON path).
        """
        if len(self.versions) == 1:
            return check_versioned(doc, self.schema, str(where), self.version)
        if not isinstance(doc, dict):
            raise ArtifactError(f"{where}: a {self.what} must be a JSON object. Found {type(doc).__name__!r}.")
        found = doc.get("format_version")
        if isinstance(found, bool) or found not in self.versions:
            noun = self.what.removesuffix(" manifest")
            names = [str(v) for v in self.versions]
            known = ", ".join(names[:-1]) + " and " + names[-1]  # "1 and 2", "1, 2 and 3"
            newer = isinstance(found, int) and not isinstance(found, bool) and found > max(self.versions)
            raise ArtifactError(f"{where}: unknown {noun} format version: format_version is {found!r}, and this "
                                f"privaudit reads {noun} format versions {known} only. "
                                + (f"The {noun} was written by a newer privaudit: upgrade privaudit to read it."
                                   if newer else "Use the privaudit version that wrote it."))
        return check_versioned(doc, self.schema, str(where), found)

    def write(self, doc: dict, path) -> Path:
        """Check ``doc`` against the schema, then write it to ``path`` atomically (2-space indented JSON and
        a final newline); returns the path.

        Raises
        ------
        ArtifactError
            The document breaks its schema (nothing is written).
        OSError
            The file cannot be written (nothing appears under ``path``).
        """
        return self.dump(self.check_write(doc), path)

    @staticmethod
    def dump(doc: dict, path) -> Path:
        """Write ``doc``, already checked, to ``path`` atomically (2-space indented JSON and a final newline;
        guarantees and records as objects, numpy numbers as JSON numbers); returns the path.

        Raises
        ------
        OSError
            The file cannot be written (nothing appears under ``path``).
        """
        atomic_write_text(Path(path), json.dumps(to_json(doc), indent=2, default=json_default) + "\n")
        return Path(path)

    def read(self, path) -> dict:
        """Read the document at ``path`` and check it (:meth:`check_read`).

        Raises
        ------
        ArtifactError
            Missing or unreadable file, not JSON, or as :meth:`check_read`.
        """
        if len(self.versions) == 1:
            return load_versioned_json(path, self.schema, self.what, self.version)
        return self.check_read(read_json_file(path, self.what), f"{self.what} {path}")


def read_json_file(path, what: str) -> Any:
    """The parsed JSON of ``path``.

    Raises
    ------
    ArtifactError
        The file is missing, unreadable or not JSON (the message names ``what`` and the path).
    """
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ArtifactError(f"cannot read {what} {path}: the file is missing") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ArtifactError(f"cannot read {what} {path}: {e}") from None


class Artifact(Record):
    """Mixin for a frozen dataclass that is a whole versioned JSON artifact.

    Subclasses set ``FORMAT`` (an :class:`ArtifactFormat`) and may override
    :meth:`_check_doc` (a consistency check on reading beyond the schema).
    ``to_dict`` checks the schema; ``from_dict`` checks the format version,
    the schema and :meth:`_check_doc` before reading the fields.
    """

    FORMAT: ClassVar[ArtifactFormat]

    def _json_derived(self) -> dict:
        """The ``kind`` key (when the format has one); subclasses add theirs to it."""
        return {} if self.FORMAT.kind is None else {"kind": self.FORMAT.kind}

    def to_dict(self) -> dict:
        """The document, checked against the schema.

        Raises
        ------
        ArtifactError
            The document breaks its schema (an internal error: nothing is written).
        """
        return self.FORMAT.check_write(super().to_dict())

    @classmethod
    def _check_doc(cls, doc: dict, where) -> None:
        """Raise ArtifactError when a schema-valid ``doc`` is inconsistent (default: nothing to check)."""

    @classmethod
    def from_dict(cls, doc, where=None):
        """Read a parsed document: format version, schema, consistency, then the typed fields.

        Parameters
        ----------
        doc : object
            The parsed JSON.
        where : str or Path, optional
            The file's path, for messages (default: the artifact's name).

        Raises
        ------
        ArtifactError
            As :meth:`ArtifactFormat.check_read`, or an inconsistent document.
        """
        where = cls.FORMAT.what if where is None else where
        cls.FORMAT.check_read(doc, where)
        cls._check_doc(doc, where)
        return super().from_dict(doc)

    def write(self, path) -> Path:
        """Write the document to ``path`` atomically (as :meth:`ArtifactFormat.write`); returns the path."""
        return self.FORMAT.write(self.to_dict(), path)

    @classmethod
    def read(cls, path):
        """Read and check the artifact at ``path`` (a file).

        Raises
        ------
        ArtifactError
            As :meth:`ArtifactFormat.read` and :meth:`from_dict`.
        """
        return cls.from_dict(read_json_file(path, cls.FORMAT.what), f"{cls.FORMAT.what} {path}")


#: The keys :class:`Guarantee` types; the others are its words (``Guarantee.text``).
_TYPED = ("private", "rng", "definition", "epsilon", "delta", "rho", "statement", "sampler", "events", "event",
          "grid", "note", "requested", "conversion", "epsilon_simple", "ledger_charge_rho", "details")


def _stated(key: str, doc: str) -> property:
    """A read-only property giving the guarantee's ``key`` (a copy; None when not recorded)."""
    return property(lambda self: copy.deepcopy(self._doc.get(key)), doc=doc)


class Guarantee(Mapping):
    """A stated privacy guarantee: read-only, typed, and written back exactly as it was stated.

    Every artifact holds its guarantee as this object: a release manifest's
    ``guarantee`` (the accountant's statement, ``privaudit.privacy.accounting.guarantee``,
    plus ``sampler``), a policy's ``privacy.guarantee`` (the same, plus the
    mechanism's facts), an explore run's ``guarantee`` (the flat joint-DP
    record: ``private``, ``epsilon``, ``delta``, ``rho``, ``statement``,
    ``events`` and the words of what joint DP protects). It is a mapping of
    those keys in their stated order (``g["rho"]``, ``g.get("sampler")``,
    ``dict(g)``), so each artifact keeps its on-disk shape; the properties
    give the typed values, None where the artifact does not record them.
    """

    __slots__ = ("_doc",)

    def __init__(self, doc: Mapping = (), /, **keys):
        object.__setattr__(self, "_doc", to_json({**dict(doc), **keys}))

    def __setattr__(self, name, value):
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __getitem__(self, key):
        return self._doc[key]

    def __iter__(self):
        return iter(self._doc)

    def __len__(self) -> int:
        return len(self._doc)

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={self._doc[k]!r}" for k in ("definition", "rho", "epsilon", "delta", "private", "rng")
                          if k in self._doc)
        return f"Guarantee({shown})"

    def __reduce__(self):
        return (Guarantee, (self._doc,))

    def to_dict(self) -> dict:
        """The guarantee as written (a new dict, keys in their stated order)."""
        return copy.deepcopy(self._doc)

    @classmethod
    def from_dict(cls, doc: Mapping) -> "Guarantee":
        """The guarantee of a parsed JSON object (any of the shapes above)."""
        return cls(doc)

    def updated(self, **keys) -> "Guarantee":
        """A copy with ``keys`` set (existing keys keep their place, new ones come last)."""
        return Guarantee(self._doc, **keys)

    private = _stated("private", "The recorded ``private`` flag (explore runs); None where the artifact records it "
                                 "outside the guarantee (``ReleaseManifest.private``, ``PolicyPrivacy.private``).")
    definition = _stated("definition", "``zCDP`` or ``pure-DP`` (None in an explore run's record).")
    rho = _stated("rho", "The stated zCDP rho (pure DP: epsilon^2/2; None for pure JDP or a non-private run).")
    epsilon = _stated("epsilon", "The stated epsilon (at ``delta``).")
    delta = _stated("delta", "The stated delta (0 for pure DP).")
    rng = _stated("rng", "``secure`` or ``seeded-insecure``, where the guarantee records it.")
    statement = _stated("statement", "The guarantee in words (explore runs).")
    note = _stated("note", "Why a stated guarantee does not hold (seeded noise).")
    sampler = _stated("sampler", "What the noise samplers deliver (``privaudit.privacy.samplers.noise_statement``).")
    event = _stated("event", "The one recorded privacy event (``PrivacyEvent.to_dict()``), if any.")
    details = _stated("details", "A policy envelope's mechanism-specific facts (``privaudit.core.envelope``).")

    @property
    def grid(self):
        """The lattices of the linear learners and explorers, if recorded (``grid``, or ``details.grid``)."""
        found = self._doc["grid"] if "grid" in self._doc else (self._doc.get("details") or {}).get("grid")
        return copy.deepcopy(found)

    @property
    def events(self) -> tuple:
        """The privacy events recorded (``PrivacyEvent.to_dict()``): ``events`` (an explore run's, before the
        envelope), the parts of a composed ``event`` (an explore run's counter families, a release's families),
        or the one ``event``."""
        if "events" in self._doc:
            return tuple(copy.deepcopy(self._doc["events"]))
        event = self._doc.get("event")
        if event is None:
            return ()
        return tuple(copy.deepcopy(event["events"] if event.get("kind") == "composed" else [event]))

    @property
    def text(self) -> dict:
        """The keys in words (what is protected, from whom, the neighbouring relation, ...): every key
        outside the typed ones."""
        return {k: copy.deepcopy(v) for k, v in self._doc.items() if k not in _TYPED}
