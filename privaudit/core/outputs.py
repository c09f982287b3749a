"""Output locations: writability checks before any work, one writer at a time, stale temporaries, run ids.

The writes themselves are atomic (:mod:`privaudit.core.atomic`); this module refuses an output that
cannot be written (:func:`check_writable`, :func:`check_sidecar_free`), holds the per-output lock of a
run and removes the hidden temporaries a killed run left (:func:`output_lock`), and draws the run id
named in ledger entries and messages (:func:`new_run_id`).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

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
