"""Atomic writes: nothing half-written ever appears under the final name.

Every writer goes through a hidden temporary ``.NAME.XXXXXXXX.tmp`` in the folder of the output and
one rename (:func:`os.replace`, or :func:`os.rename` for a folder), so a reader sees either the old
output or the whole new one. A killed run leaves only such hidden temporaries, which
:func:`privaudit.core.outputs.output_lock` removes on the next run.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _default_mode(path: Path, directory: bool = False) -> None:
    """Give a temporary file/folder the permissions a plain open()/mkdir() would
    (mkstemp/mkdtemp create 0600/0700)."""
    os.chmod(path, (0o777 if directory else 0o666) & ~_umask())


def _temporary_beside(path: Path) -> Path:
    """Create (empty, closed) the hidden temporary file ``.NAME.XXXXXXXX.tmp`` in the folder of ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    return Path(tmp)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename."""
    with atomic_path(path) as tmp:
        with open(tmp, "w") as f:
            f.write(text)


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary file path next to ``path``; rename it to ``path`` on success.

    The caller writes the file (e.g. ``df.write_parquet(tmp)``). On an
    exception the temporary file is removed and ``path`` is untouched.
    """
    with atomic_paths([path]) as (tmp,):
        yield tmp


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
            tmps.append(_temporary_beside(path))
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
    ``overwrite``; hold :func:`privaudit.core.outputs.output_lock` for the whole run to refuse a
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
