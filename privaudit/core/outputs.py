"""Output locations: checks before any work, one writer at a time, stale temporaries, run ids.

The writes themselves are atomic (:mod:`privaudit.core.atomic`); this module refuses, before any
work, an output that would replace an input or anything but an earlier output of its own kind
(:func:`check_outputs`, the one check of every command), or that cannot be written
(:func:`check_writable`, :func:`check_sidecar_free`); it holds the per-output lock of a run and
removes the hidden temporaries a killed run left (:func:`output_lock`), and draws the run id named
in ledger entries and messages (:func:`new_run_id`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import struct
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

from filelock import FileLock, Timeout

from privaudit.core.errors import UsageError


def check_writable(path, name: str = "out") -> None:
    """Refuse, before any work, an output location that cannot be written.

    A file or folder will be created at ``path``: its nearest existing
    ancestor must be a folder in which a file can be created (tried by
    creating and removing an empty temporary file: this catches read-only
    mounts and missing permissions, which ``os.access`` can miss) and which
    has free space.

    Parameters
    ----------
    path : str or Path
        The output to create.
    name : str
        How to name it in the message (a parameter name, or a CLI flag).

    Raises
    ------
    UsageError
        The location cannot be written (one line: what, where, why).
    """
    target = Path(path).absolute()
    anc = target.parent
    while not anc.exists() and anc != anc.parent:
        anc = anc.parent
    if not anc.is_dir():
        raise UsageError(f"`{name}` {path}: {anc} is not a folder; choose a writable location.")
    try:
        fd, probe = tempfile.mkstemp(prefix=".privaudit-write-check.", dir=anc)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise UsageError(f"`{name}` {path}: cannot write in {anc} ({e.strerror or e}); "
                         f"choose a writable location.") from None
    if shutil.disk_usage(anc).free == 0:
        raise UsageError(f"`{name}` {path}: no free space left on the disk of {anc}; free some space "
                         f"or choose another location.")


#: The key of the mark privaudit writes into the files it makes that carry no JSON of their own: a PNG
#: ``tEXt`` chunk, a Parquet key-value metadata entry (the value names the kind, e.g. ``audit-plot``).
MARK_KEY = "privaudit_kind"


@dataclass(frozen=True)
class OutputKind:
    """What an earlier output of one kind looks like: ``--overwrite`` replaces only that.

    Attributes
    ----------
    name : str
        Said in messages: "a previous pipeline output (a folder with a summary.json of kind ...)".
    recognise : callable
        ``recognise(path) -> bool`` for an existing ``path``; never raises on a foreign file.
    """

    name: str
    recognise: Callable[[Path], bool]


def json_object(path: Path) -> dict | None:
    """The JSON object in ``path`` (None: not a readable JSON object file)."""
    try:
        doc = json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def json_output(name: str, test: Callable[[dict], bool]) -> OutputKind:
    """An output that is a JSON object file passing ``test`` (e.g. a report with privaudit's ``software``)."""
    return OutputKind(name, lambda p: (doc := json_object(p)) is not None and bool(test(doc)))


def folder_output(name: str, filename: str, key: str, value: str) -> OutputKind:
    """An output folder whose ``filename`` is a JSON object with ``key`` = ``value`` (e.g. summary.json's kind)."""
    return OutputKind(name, lambda p: p.is_dir() and (json_object(p / filename) or {}).get(key) == value)


def png_mark(path: Path) -> str | None:
    """The :data:`MARK_KEY` ``tEXt`` value of a PNG file (None: not a PNG, or unmarked).

    Reads the chunks before the image data (matplotlib writes its ``tEXt`` there).
    """
    try:
        with open(path, "rb") as f:
            if f.read(8) != b"\x89PNG\r\n\x1a\n":
                return None
            while True:
                head = f.read(8)
                if len(head) < 8:
                    return None
                size, ctype = struct.unpack(">I4s", head)
                if ctype in (b"IDAT", b"IEND") or size > 1 << 20:
                    return None
                body = f.read(size)
                f.read(4)  # CRC
                if ctype == b"tEXt":
                    key, _, value = body.partition(b"\0")
                    if key == MARK_KEY.encode():
                        return value.decode("latin-1")
    except OSError:
        return None


def png_output(name: str, mark: str) -> OutputKind:
    """An output PNG carrying the :data:`MARK_KEY` mark ``mark`` (write it with ``savefig(metadata=...)``)."""
    return OutputKind(name, lambda p: p.is_file() and png_mark(p) == mark)


def _inside(inner: Path, outer: Path) -> bool:
    return inner == outer or outer in inner.parents


def check_outputs(outputs: Sequence[tuple[str, object, OutputKind | None]], reads: Sequence[tuple[str, object]],
                  overwrite: bool | None = False) -> None:
    """The one check of every command's outputs, before any work.

    Refuses (1) two outputs at one path or one inside the other; (2) an output at a path the command
    reads, or around one (a folder replaced with an input inside: a ledger, a spec); (3) an existing
    output unless ``overwrite``, and then unless it is an earlier output of the same kind
    (:class:`OutputKind`): never someone's logs, spec or another command's results; (4) an output
    that cannot be written (:func:`check_writable`).

    Parameters
    ----------
    outputs : sequence of (name, path, kind)
        Each output: the name of its option in messages (``--out``, or a parameter name), its path
        (None: not asked for, skipped) and its :class:`OutputKind` (None for a command without
        ``overwrite``).
    reads : sequence of (name, path)
        What the command reads (logs, spec, ledger, MDP file, ...); None paths skipped.
    overwrite : bool or None
        The command's ``--overwrite``; None when it has none (an existing output is always refused).

    Raises
    ------
    UsageError
        One line naming the option, the path and what to do.
    """
    outs = [(name, Path(p), kind) for name, p, kind in outputs if p is not None]
    full = [(name, Path(os.path.realpath(p)), p, kind) for name, p, kind in outs]
    for i, (name, real, path, _) in enumerate(full):
        for other, oreal, opath, _ in full[:i]:
            if real == oreal:
                raise UsageError(f"`{other}` and `{name}` must be different files (both are {opath}).")
            if _inside(real, oreal) or _inside(oreal, real):
                raise UsageError(f"`{other}` {opath} and `{name}` {path}: one is inside the other; choose "
                                 f"separate paths.")
    for rname, rpath in ((n, p) for n, p in reads if _local_file(p)):
        rreal = Path(os.path.realpath(rpath))
        for name, real, path, _ in full:
            if real == rreal:
                raise UsageError(f"`{name}` {path} is the file `{rname}` this command reads: an output never "
                                 f"replaces an input. Choose another `{name}`.")
            if _inside(rreal, real) and real.exists():
                raise UsageError(f"`{name}` {path} holds `{rname}` {rpath}, which this command reads: an output "
                                 f"never replaces an input. Choose another `{name}`.")
    for name, real, path, kind in full:
        if not (path.exists() or path.is_symlink()):
            continue
        if not overwrite:
            hint = "" if overwrite is None else f", remove it, or pass `overwrite`, which replaces only {kind.name}"
            raise UsageError(f"`{name}` {path} already exists; choose another path{hint}.")
        if not kind.recognise(path):
            raise UsageError(f"`overwrite` replaces only {kind.name}; {path} is not one, and it would be "
                             f"deleted. Choose another `{name}`.")
    for name, path, _ in outs:
        check_writable(path, name)


def _local_file(path) -> bool:
    """An existing local path (not None, a Spark DataFrame, a URL read by Spark, or a registry name)."""
    return isinstance(path, (str, os.PathLike)) and "://" not in str(path) and os.path.lexists(path)


def check_sidecar_free(path, what: str, earlier: str, name: str = "out") -> None:
    """Refuse anything already at the path of a private file written beside the output, before any work.

    Parameters
    ----------
    path : str or Path
        The file written next to the output at the end (e.g. ``DIR.local-log.json``).
    what : str
        What goes there, for the message ("the release's private bounding log").
    earlier : str
        What wrote such a file before ("release", "policy"), for the message.
    name : str
        The option naming the output (``out``).

    Raises
    ------
    UsageError
        ``path`` exists. A folder (or other non-file): the run would otherwise read the logs, draw its
        noise and charge its budget, then fail writing it. A regular file: the private log of an earlier
        output to the same ``out`` whose folder was removed, never overwritten silently.
    """
    path = Path(path)
    if path.exists() and not path.is_file():
        raise UsageError(f"{path} (where {what} goes) is not a file; remove it or choose another `{name}`.")
    if path.is_file():
        raise UsageError(f"{path} already exists: the private bounding log of an earlier {earlier} "
                         f"written to this `{name}`; move it away (keep it "
                         f"with that {earlier}'s records) or choose another `{name}`.")


#: The marker file of an incomplete run's kept output (``privaudit.pipeline.resume``).
INCOMPLETE_MARKER = "INCOMPLETE.json"


def kept_incomplete(output, run: str | None) -> bool:
    """True when ``output`` holds the incomplete-run marker of run ``run``: what it charged was kept there."""
    try:
        doc = json.loads((Path(output) / INCOMPLETE_MARKER).read_text())
    except (OSError, TypeError, ValueError):
        return False
    return isinstance(doc, dict) and run is not None and doc.get("run_id") == run


def new_run_id() -> str:
    """A fresh random run identifier (16 hex digits), named in ledger entries and messages."""
    return secrets.token_hex(8)


def _lock_path(path: Path) -> Path:
    """The lock file of output ``path``: in the system's temporary folder (nothing left next to the output),
    named by a hash of the absolute path, so every run on this machine finds the same one."""
    key = hashlib.sha256(str(path.absolute()).encode()).hexdigest()[:32]
    user = os.getuid() if hasattr(os, "getuid") else "user"
    folder = Path(tempfile.gettempdir()) / f"privaudit-output-locks-{user}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder / f"{key}.lock"


def stale_temporaries(path: Path) -> list[Path]:
    """The hidden temporary files/folders ``.NAME.XXXXXXXX.tmp`` left next to ``path`` by a killed run."""
    pat = re.compile(rf"^\.{re.escape(path.name)}\.[A-Za-z0-9_]{{8}}\.tmp$")
    if not path.parent.is_dir():
        return []
    return sorted(p for p in path.parent.iterdir() if pat.match(p.name))


@contextmanager
def output_lock(path, name: str = "out") -> Iterator[list[Path]]:
    """Hold an exclusive lock on the output ``path`` for a whole run; clean what killed runs left.

    The lock (``filelock`` on a file of the system's temporary folder named
    by the output's absolute path; the operating system releases it when the
    process dies, even on SIGKILL) is taken without waiting: a second run writing the same
    output at the same time is refused at once. While it is held, every
    hidden temporary ``.NAME.XXXXXXXX.tmp`` next to ``path`` belongs to a run
    that died (a live writer would hold the lock), so they are removed.

    Yields
    ------
    list of Path
        The stale temporaries removed (for the caller to report).

    Raises
    ------
    UsageError
        Another run holds the lock.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(_lock_path(path)), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise UsageError(f"`{name}` {path}: another run is writing it now (lock {_lock_path(path)}); wait for "
                         "it to finish or choose another location.") from None
    try:
        removed = stale_temporaries(path)
        for p in removed:
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
        yield removed
    finally:
        lock.release()
