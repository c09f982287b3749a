"""The ledger's key and digests: SHA-256 chaining, or HMAC-SHA256 under a secret key.

``digest`` of an entry is SHA-256 (``auth: sha256``) or HMAC-SHA256 with a
secret key (``auth: hmac-sha256``) of its canonical JSON without ``digest``
(sorted keys, no spaces). The key comes from ``PRIVAUDIT_LEDGER_KEY_FILE``
(a file whose bytes are the key, outside the ledger's folder) or
``PRIVAUDIT_LEDGER_KEY`` (the key itself), at least 16 bytes; a ledger records
the key's id, never the key. What the chain and the key detect:
``privaudit.privacy.ledger``'s module docstring.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path

from privaudit.core.errors import LedgerIntegrityError, UsageError

#: Environment variables holding the HMAC key (a file path, or the key itself).
KEY_FILE_ENV = "PRIVAUDIT_LEDGER_KEY_FILE"
KEY_ENV = "PRIVAUDIT_LEDGER_KEY"
#: Environment variable pinning the reader to one ledger id (``budget show`` prints it).
LEDGER_ID_ENV = "PRIVAUDIT_LEDGER_ID"
#: The chained format version (``ledger_records.LEDGER_VERSION``, which imports this module).
LEDGER_VERSION = 2
_MIN_KEY_BYTES = 16


def key_for(path: Path) -> bytes | None:
    """The HMAC key from the environment (None when neither variable is set).

    Raises
    ------
    UsageError
        Both variables set, an unreadable key file, a key file in the ledger's
        folder, or a key shorter than 16 bytes.
    """
    kfile, ktext = os.environ.get(KEY_FILE_ENV), os.environ.get(KEY_ENV)
    if kfile and ktext:
        raise UsageError(f"set only one of {KEY_FILE_ENV} and {KEY_ENV}.")
    if kfile:
        kpath = Path(kfile)
        if kpath.resolve().parent == path.resolve().parent:
            raise UsageError(f"{KEY_FILE_ENV}={kfile}: the ledger key file is in the ledger's own folder; whoever "
                             f"can edit the ledger could read it. Keep the key file elsewhere.")
        try:
            key = kpath.read_bytes().rstrip(b"\r\n")
        except OSError as e:
            raise UsageError(f"{KEY_FILE_ENV}={kfile}: cannot read the ledger key file: {e.strerror or e}.") from None
    elif ktext:
        key = ktext.encode()
    else:
        return None
    if len(key) < _MIN_KEY_BYTES:
        raise UsageError(f"the ledger key must hold at least {_MIN_KEY_BYTES} bytes. Found {len(key)}.")
    return key


def key_id(key: bytes) -> str:
    """The key's public id (16 hex digits of an HMAC of a fixed label): recorded in the header, never the key."""
    return hmac.new(key, b"privaudit-ledger-key-id", hashlib.sha256).hexdigest()[:16]


def entry_digest(entry: dict, key: bytes | None) -> str:
    """SHA-256, or HMAC-SHA256 under ``key``, of ``entry``'s canonical JSON without ``digest``."""
    body = {k: v for k, v in entry.items() if k != "digest"}
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    if key is None:
        return hashlib.sha256(canon).hexdigest()
    return hmac.new(key, canon, hashlib.sha256).hexdigest()


def sealed(entry: dict, key: bytes | None) -> dict:
    """``entry`` with its ``digest`` (:func:`entry_digest` under ``key``)."""
    return {**entry, "digest": entry_digest(entry, key)}


def verification_key(path: Path, head: dict, version: int, *, unkeyed_ok: bool = False) -> bytes | None:
    """The key a ledger is verified with: decided by the reader's settings, never by the file alone.

    The reader's settings are the key in the environment (:func:`key_for`) and, optionally, the ledger id
    in ``PRIVAUDIT_LEDGER_ID``. The file's own ``auth`` field only says how it claims to be sealed: with a
    key set, a ledger not keyed with that very key is refused, since anyone who can write the folder can
    rewrite an ``hmac-sha256`` ledger as ``sha256`` (recomputing every digest) or delete it and ``init``
    an unkeyed one.

    Parameters
    ----------
    path : Path
        The ledger (for messages and the key file's folder check).
    head : dict
        Its header line.
    version : int
        Its ``format_version`` (1: unchained, no ``auth``).
    unkeyed_ok : bool
        Accept an unkeyed ledger although a key is set (``budget upgrade``, which then seals it with the key).

    Returns
    -------
    bytes or None
        The key (``auth: hmac-sha256``), None for an unkeyed ledger.

    Raises
    ------
    UsageError
        A keyed ledger without a key set, or with another key (key ids differ).
    LedgerIntegrityError
        A key is set and the ledger is not keyed (exit 3), or ``PRIVAUDIT_LEDGER_ID`` is set and names
        another ledger.
    """
    key = key_for(path)
    auth = head.get("auth") if version == LEDGER_VERSION else None
    if auth == "hmac-sha256":
        if key is None:
            raise UsageError(f"{path}: this ledger is authenticated (hmac-sha256); set {KEY_FILE_ENV} (or {KEY_ENV}) "
                             f"to its key to read or charge it.")
        if not hmac.compare_digest(str(head.get("key_id")), key_id(key)):
            raise UsageError(f"{path}: the key in {KEY_FILE_ENV}/{KEY_ENV} is not this ledger's key "
                             f"(key id {key_id(key)}, the ledger's {head.get('key_id')!r}).")
    elif key is not None and not unkeyed_ok:
        shown = f"auth {auth!r}" if version == LEDGER_VERSION else f"format_version {version}, unchained"
        raise LedgerIntegrityError(
            f"{path}: a ledger key is set ({KEY_FILE_ENV}/{KEY_ENV}, key id {key_id(key)}) but this ledger is not "
            f"keyed ({shown}); a keyed reader refuses it, since anyone who can write its folder can rewrite or "
            f"re-create an unkeyed ledger. If it was keyed, it was replaced: restore it and its .head from a "
            f"backup. If it never was, unset the key to read it, or check its entries and seal it with the key "
            f"(`privaudit budget upgrade {path}`).")
    pinned = os.environ.get(LEDGER_ID_ENV)
    if pinned and not hmac.compare_digest(str(head.get("ledger_id")), pinned.strip()):
        raise LedgerIntegrityError(f"{path}: this ledger's id is {head.get('ledger_id')!r}, not the {pinned.strip()!r} "
                                   f"set in {LEDGER_ID_ENV}: it is another ledger (re-created or swapped in). Restore "
                                   f"the ledger with that id and its .head from a backup, or unset {LEDGER_ID_ENV}.")
    return key if auth == "hmac-sha256" else None
