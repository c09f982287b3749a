"""The ledger's file handling: the exclusive lock, atomic writes, the head file, reading.

Every read and every charge holds an exclusive ``filelock`` lock on
``FILE.lock`` (portable); files are written through fsynced temporary files
in the ledger's folder (``privaudit.privacy.ledger``'s module docstring:
"Concurrency").
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from filelock import FileLock, Timeout

from privaudit.core.errors import ArtifactError, UsageError
from privaudit.privacy.ledger_key import sealed
from privaudit.privacy.ledger_records import HEAD_FORMAT, LEDGER_VERSION, check_header, head_path

#: Seconds to wait for another process's lock before giving up.
LOCK_TIMEOUT = 300.0
#: Seconds of waiting for the lock after which a one-line notice goes to stderr (a silent wait looks hung).
LOCK_NOTICE_AFTER = 2.0


def _lock(path: Path) -> FileLock:
    return FileLock(str(path.with_name(path.name + ".lock")), timeout=LOCK_TIMEOUT)


class Locked:
    """Context manager: the ledger's exclusive lock, with a readable error on timeout.

    Waits up to :data:`LOCK_TIMEOUT` seconds for another process's lock; after
    :data:`LOCK_NOTICE_AFTER` seconds it says so on stderr (one line), so that the
    wait is not taken for a hang.

    Raises
    ------
    UsageError
        The lock was not obtained within :data:`LOCK_TIMEOUT` seconds, or its lock file cannot be created.
    """

    def __init__(self, path: Path):
        self.path, self.lock = path, _lock(path)

    def __enter__(self):
        refuse_non_ledger(self.path)  # before FILE.lock is created beside someone's spec or README
        try:
            try:
                self.lock.acquire(timeout=min(LOCK_NOTICE_AFTER, LOCK_TIMEOUT))
            except Timeout:
                if LOCK_TIMEOUT <= LOCK_NOTICE_AFTER:
                    raise
                print(f"{self.path}: waiting for the ledger's lock {self.lock.lock_file}, held by another process "
                      f"(a release, train, pipeline or budget command on this ledger), for up to {LOCK_TIMEOUT:g} s",
                      file=sys.stderr, flush=True)
                self.lock.acquire(timeout=LOCK_TIMEOUT - LOCK_NOTICE_AFTER)
        except Timeout:
            raise UsageError(f"{self.path}: the ledger is locked by another process for more than "
                             f"{LOCK_TIMEOUT:g} s ({self.lock.lock_file}); try again later.") from None
        except OSError as e:
            raise UsageError(f"{self.path}: cannot create the ledger's lock file {self.lock.lock_file}: "
                             f"{e.strerror or e}.") from None
        return self

    def __exit__(self, *exc):
        self.lock.release()
        return False


def refuse_non_ledger(path: Path) -> None:
    """Read-only look at line 1 of an existing ``path`` before its lock file is created.

    The header line is written once, atomically, by :func:`init_ledger` and never changed, so reading
    it without the lock is safe; everything else is read and verified under the lock.

    Raises
    ------
    ArtifactError
        Line 1 is not JSON, or not a privaudit ledger header: ``path`` is some other file (a spec,
        a README), and no ``FILE.lock`` is left beside it.
    """
    try:
        with open(path, "rb") as f:
            first = f.readline(1 << 20)
    except FileNotFoundError:
        return  # the callers name a missing ledger
    except OSError as e:  # unreadable: no lock file beside it either
        raise ArtifactError(f"{path}: cannot read the ledger: {e.strerror or e}.") from None
    if not first.strip():
        return  # empty: the locked read names it
    # A ledger's line 1 is written once, atomically, by init_ledger: a line 1 that is not its header
    # says that ``path`` is some other file (a Parquet log, a README), not a corrupt ledger.
    hint = ("this is not a privaudit ledger; pass the file created by `privaudit budget init FILE "
            "--dataset ID --rho-total R` (if it was one, restore it from a backup).")
    try:
        head = json.loads(first)
    except ValueError as err:  # UnicodeDecodeError included: a binary file
        why = "a binary file" if isinstance(err, UnicodeDecodeError) else getattr(err, "msg", err)
        raise ArtifactError(f"{path}, line 1: not valid JSON ({why}): {hint}") from None
    if not isinstance(head, dict):
        raise ArtifactError(f"{path}, line 1: must be a JSON object, found {type(head).__name__}: {hint}")
    check_header(path, head)


def write_atomic(path: Path, text: str, *, replace: bool) -> None:
    """Write ``text`` to ``path`` through a fsynced temporary file in the same folder.

    ``replace=False`` refuses an existing ``path`` (hard link, atomic); else ``os.replace``.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)  # atomic, and fails if path appeared meanwhile
            except FileExistsError:
                raise UsageError(f"{path}: ledger already exists; a ledger is never overwritten.") from None
    finally:
        Path(tmp).unlink(missing_ok=True)


def write_head(path: Path, ledger_id: str, last: dict, key: bytes | None) -> None:
    """Rewrite ``FILE.head`` atomically: the ledger id, the last line's ``seq`` and digest, sealed under ``key``."""
    head = {"format": HEAD_FORMAT, "format_version": LEDGER_VERSION, "ledger_id": ledger_id,
            "seq": int(last.get("seq", 0)), "last_digest": last["digest"]}
    write_atomic(head_path(path), json.dumps(sealed(head, key)) + "\n", replace=True)


def read_text(path: Path) -> str:
    """The ledger's text; UsageError when it is missing, ArtifactError when it cannot be read."""
    try:
        return path.read_text()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such ledger. Create it with "
                         f"`privaudit budget init {path} --dataset ID --rho-total R`.") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ArtifactError(f"{path}: cannot read the ledger: {e}") from None


def must_exist(path: Path) -> None:
    """UsageError unless ``path`` is an existing ledger file (not a folder)."""
    if path.is_dir():
        raise UsageError(f"{path}: is a folder, not a ledger file; pass the ledger's file (created by "
                         f"`privaudit budget init FILE --dataset ID --rho-total R`).")
    if not path.is_file():
        raise UsageError(f"{path}: no such ledger. Create it with "
                         f"`privaudit budget init {path} --dataset ID --rho-total R`.")
