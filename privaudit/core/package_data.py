"""Where the bundled files are: the JSON Schemas and the sample data.

In a source checkout (and an editable install) they are the repository's
top-level ``schemas/`` and ``sample_data/`` folders; a regular install ships
them inside the package as ``privaudit._schemas`` and
``privaudit._sample_data`` (see ``pyproject.toml``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import NamedTuple

_REPO = Path(__file__).resolve().parents[2]


def _locate(repo_folder: str, package: str) -> Path:
    here = _REPO / repo_folder
    if here.is_dir():
        return here
    spec = importlib.util.find_spec(package)  # data-only (namespace) package: no __init__.py
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise FileNotFoundError(f"privaudit's bundled {repo_folder}/ is missing from this installation "
                                f"(package {package}); reinstall privaudit.")
    return Path(locations[0])


def schema_dir() -> Path:
    """The folder holding ``<name>.schema.json`` files."""
    return _locate("schemas", "privaudit._schemas")


def sample_dir() -> Path:
    """The folder holding the bundled sample data (ICU-Sepsis tables, sample logs)."""
    return _locate("sample_data", "privaudit._sample_data")


class SampleData(NamedTuple):
    """Paths of the bundled sample files (``privaudit.sample_data()``)."""

    logs: Path
    spec: Path
    broken_logs: Path
    broken_spec: Path
