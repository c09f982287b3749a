"""Access to the JSON Schemas in the repository's ``schemas/`` folder."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry, Resource

from privaudit import FORMAT_VERSION
from privaudit.core.errors import ArtifactError
from privaudit.core.package_data import schema_dir

#: Folder of the JSON Schemas (``schemas/`` at the repository root).
SCHEMA_DIR = schema_dir()


@lru_cache(maxsize=None)
def load_schema(name: str) -> dict[str, Any]:
    """Return the JSON Schema ``schemas/<name>.schema.json`` as a dict.

    Raises
    ------
    FileNotFoundError
        If no such schema exists.
    """
    path = SCHEMA_DIR / f"{name}.schema.json"
    with path.open() as f:
        return json.load(f)


@lru_cache(maxsize=None)
def _registry() -> Registry:
    """Every schema of ``schemas/`` under its ``$id``, so one schema refers to another (the envelope)."""
    schemas = [json.loads(p.read_text()) for p in sorted(SCHEMA_DIR.glob("*.schema.json"))]
    return Registry().with_resources((s["$id"], Resource.from_contents(s)) for s in schemas)


def schema_errors(instance: Any, name: str) -> list[str]:
    """Validate ``instance`` against schema ``name``; return readable errors.

    Each message names the key (as a JSON path such as ``$.privacy_unit.max_episodes``)
    and the reason. An empty list means the instance is valid.
    """
    validator = jsonschema.Draft202012Validator(load_schema(name), registry=_registry())
    out = []
    for err in sorted(validator.iter_errors(instance), key=lambda e: list(map(str, e.absolute_path))):
        path = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path)
        out.append(f"{path}: {err.message}")
    return out


def validate_or_raise(instance: Any, name: str, exc_type: type[Exception], what: str) -> None:
    """Raise ``exc_type`` naming ``what`` and every schema error, if any."""
    errors = schema_errors(instance, name)
    if errors:
        raise exc_type(f"{what} breaks schema '{name}':\n  " + "\n  ".join(errors))


def load_versioned_json(path, schema_name: str, what: str, version: int | None = None) -> dict:
    """Read a JSON artifact, check its ``format_version`` and its schema.

    Parameters
    ----------
    path : str or Path
        The JSON file (a manifest, a report, a summary).
    schema_name : str
        The schema in ``schemas/`` it must satisfy.
    what : str
        How to name the artifact in error messages ("audit report", ...).
    version : int, optional
        The format version readers accept (default ``privaudit.FORMAT_VERSION``).

    Raises
    ------
    privaudit.core.errors.ArtifactError
        If the file is missing or not JSON, its ``format_version`` is another
        one (the message names the version found), or it breaks the schema.
    """

    version = FORMAT_VERSION if version is None else version
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ArtifactError(f"cannot read {what} {path}: the file is missing") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ArtifactError(f"cannot read {what} {path}: {e}") from None
    return check_versioned(doc, schema_name, f"{what} {path}", version)


def check_versioned(doc: Any, schema_name: str, where: str, version: int | None = None) -> dict:
    """Check a parsed artifact document on reading: its ``format_version``, then its schema.

    Raises
    ------
    privaudit.core.errors.ArtifactError
        Not an object or another ``format_version`` (the message names the
        version found and the one this privaudit reads), or a schema error
        (every error named by its JSON path).
    """
    version = FORMAT_VERSION if version is None else version
    found = doc.get("format_version") if isinstance(doc, dict) else type(doc).__name__
    if found != version:
        raise ArtifactError(f"{where}: format_version {found!r} is not supported "
                            f"(this privaudit reads version {version}); use the privaudit version that wrote it.")
    validate_or_raise(doc, schema_name, ArtifactError, where)
    return doc


def check_on_write(doc: dict, schema_name: str, what: str) -> dict:
    """Check a document privaudit is about to write against its schema (an error is internal: nothing is written).

    Raises
    ------
    privaudit.core.errors.ArtifactError
        The document breaks ``schemas/<schema_name>.schema.json``.
    """
    validate_or_raise(doc, schema_name, ArtifactError, f"{what} (internal error: nothing was written)")
    return doc
