"""Atomic writes: nothing half-written ever appears under the final name."""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from filelock import FileLock, Timeout

from privaudit.core.errors import UsageError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _default_mode(path: Path, directory: bool = False) -> None:
    """Give a temporary file/folder the permissions a plain open()/mkdir() would
    (mkstemp/mkdtemp create 0600/0700)."""
    os.chmod(path, (0o777 if directory else 0o666) & ~_umask())


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


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        _default_mode(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary file path next to ``path``; rename it to ``path`` on success.

    The caller writes the file (e.g. ``df.write_parquet(tmp)``). On an
    exception the temporary file is removed and ``path`` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        _default_mode(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def atomic_paths(paths: list[Path]) -> Iterator[list[Path]]:
    """Temporary file paths next to each of ``paths``, renamed to them together on success.

    For a command whose outputs belong together (``simulate``: logs, spec, MDP): the caller writes
    every temporary file; only when all are written are they renamed, so a failure while writing
    the last one (disk full, out of memory) leaves none of them, and an existing file replaced with
    ``--overwrite`` is kept as it was. On an exception every temporary file is removed.
    """
    tmps: list[Path] = []
    try:
        for path in map(Path, paths):
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            os.close(fd)
            tmps.append(Path(tmp))
        yield list(tmps)
        for tmp, path in zip(tmps, paths):
            _default_mode(tmp)
            os.replace(tmp, path)
    except BaseException:
        for tmp in tmps:
            tmp.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_dir(path: Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary folder next to ``path``; rename it to ``path`` on success.

    If ``path`` exists and ``overwrite`` is False, raises FileExistsError
    before anything is written, and again at the rename if another process
    created ``path`` meanwhile (a folder is never replaced without
    ``overwrite``; hold :func:`output_lock` for the whole run to refuse a
    concurrent writer up front). On an exception the temporary folder is removed.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} already exists; choose another `out` or remove it")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        _default_mode(tmp, directory=True)
        if overwrite and path.exists():
            shutil.rmtree(path)
        try:
            os.rename(tmp, path)  # fails on an existing non-empty folder: never silently replaced
        except OSError as e:
            if path.exists():
                raise FileExistsError(f"{path} was created by another run meanwhile; this run's output was "
                                      "not written. Choose another `out`.") from None
            raise e
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


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


def json_default(o: Any):
    """``json.dumps(..., default=json_default)``: numpy integers, floats and arrays as JSON numbers and lists.

    Raises
    ------
    TypeError
        Any other object (as ``json`` does).
    """
    # duck-typed (numpy's scalars have .item(), its arrays .tolist()) so that this module, which the
    # CLI loads for every command, does not import numpy
    kind = type(o).__module__.split(".")[0]
    if kind == "numpy" and hasattr(o, "tolist"):
        return o.tolist()  # arrays -> nested lists, scalars -> int / float / bool
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def numpy_load_reason(err: Exception) -> str:
    """Why ``np.load(path, allow_pickle=False)`` failed, in a user's words.

    numpy reports a file without a NumPy header or zip signature as "pickled
    (object) data" and suggests loading it unsafely; privaudit never unpickles
    a file, so the reason given is that the file is not NumPy's format.
    """
    if isinstance(err, IsADirectoryError):
        return "it is a folder, not a file"
    if isinstance(err, OSError) and err.strerror:  # "[Errno 13] Permission denied: 'x'" -> "Permission denied"
        return err.strerror
    msg = str(err)
    if msg.startswith("Object arrays cannot be loaded"):  # a real .npy header, dtype object
        return "a NumPy array of Python objects (dtype object: pickled data, never loaded); save numbers"
    if "pickle" in msg:
        return "not a NumPy .npy/.npz file (no NumPy header or zip signature; pickled files are never loaded)"
    return msg
