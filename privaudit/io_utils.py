"""Atomic writes: nothing half-written ever appears under the final name."""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from privaudit.errors import UsageError


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
def atomic_dir(path: Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary folder next to ``path``; rename it to ``path`` on success.

    If ``path`` exists and ``overwrite`` is False, raises FileExistsError
    before anything is written. On an exception the temporary folder is removed.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} already exists; choose another --out or remove it")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        _default_mode(tmp, directory=True)
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
