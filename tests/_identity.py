"""Two pipeline output folders compared byte for byte, creation times aside (tests of identical results).

Normalised, and only these: ``summary.json``'s ``created`` (a timestamp) and ``config.engine`` (the
engine's name); ``policy.json``'s ``created``; the release manifest's ``created``; the same timestamp in
``report.md``. The figures (PNG) are drawn from the equal summaries and not compared; ``private/`` (the
data holder's local log: timings, paths) is left to the caller. Every other byte of every file, the
Parquet tables included, must be equal.
"""

from __future__ import annotations

import json
from pathlib import Path

#: Fields that legitimately differ between two runs, normalised before comparing.
NORMALISED = {"summary.json": (("created",), ("config", "engine")), "policy.json": (("created",),),
              "manifest.json": (("created",),)}


def normalised(path: Path) -> dict:
    """The JSON document at ``path`` with its :data:`NORMALISED` fields replaced (each must be present)."""
    doc = json.loads(path.read_text())
    for keys in NORMALISED.get(path.name, ()):
        d = doc
        for key in keys[:-1]:
            d = d[key]
        assert keys[-1] in d, (path, keys)  # a field that vanished is a change to look at, not to normalise
        d[keys[-1]] = "<normalised>"
    return doc


def report_text(out: Path) -> str:
    """report.md with its creation time (the summary's ``created``, once) normalised."""
    created = json.loads((out / "summary.json").read_text())["created"]
    text = (out / "report.md").read_text()
    assert text.count(created) == 1
    return text.replace(created, "<normalised>")


def shared_files(out: Path) -> list[Path]:
    """The files of an output folder outside ``private/``, relative to it, sorted."""
    return sorted(f.relative_to(out) for f in out.rglob("*") if f.is_file() and f.parts[len(out.parts)] != "private")


def assert_same_outputs(p: Path, s: Path) -> list[Path]:
    """Assert that the output folders ``p`` and ``s`` hold the same files with the same bytes (module
    docstring: creation times and the engine's name normalised, figures not compared). Returns the files."""
    files = shared_files(p)
    assert files == shared_files(s)
    for f in files:
        if f.suffix == ".json":
            assert normalised(p / f) == normalised(s / f), f
        elif f.suffix == ".md":  # the report: every byte but its creation time (summary.json's `created`)
            assert report_text(p) == report_text(s)
        elif f.suffix != ".png":  # Parquet tables: every byte (figures: drawn from equal summaries)
            assert (p / f).read_bytes() == (s / f).read_bytes(), f
    return files
