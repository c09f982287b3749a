"""Append-only, hash-chained privacy-budget ledger (JSON lines, exact amounts, file lock).

Format (version 2), one JSON object per line (schema ``schemas/ledger_entry.schema.json``):

* line 1, the header::

    {"format": "privaudit-ledger", "format_version": 2, "type": "init",
     "dataset_id": "icu-2024", "rho_total": "1.5", "created": "2025-...Z",
     "ledger_id": "<32 hex>", "auth": "sha256" | "hmac-sha256", "key_id": null | "<16 hex>",
     "prev": null, "digest": "<64 hex>"}

* then one line per charge::

    {"type": "charge", "seq": 1, "dataset_id": "icu-2024", "rho": "0.25",
     "description": "release visits+transitions gaussian", "timestamp": "...",
     "run": "<run id>", "output": "/abs/path/of/the/output",      (optional)
     "prev": "<digest of line seq>", "digest": "<64 hex>"}

``digest`` is SHA-256 (``auth: sha256``) or HMAC-SHA256 with a secret key
(``auth: hmac-sha256``) of the entry's canonical JSON without ``digest``
(sorted keys, no spaces); ``prev`` is the previous line's digest, so every
line commits to all lines before it. A sidecar ``FILE.head`` holds the last
charge's ``seq`` and ``digest`` (with its own digest), rewritten atomically
after each append; ``FILE.lock`` is the lock file.

Amounts are zCDP rho, stored as exact decimal (or ``p/q``) strings and added
with ``fractions.Fraction``: no rounding ever decides a refusal. A float
amount is stored as its ``repr`` (the shortest decimal that reads back as the
same float, e.g. 0.1 -> "0.1"). A pure eps-DP release is charged
rho = eps^2 / 2, a valid zCDP bound for pure DP (Bun & Steinke 2016, Prop. 1.4;
see :func:`rho_of_pure_dp`), so one ledger covers both kinds of release.

Integrity (verified on every read: ``check_budget``, ``charge``, ``ledger_status``)
------------------------------------------------------------------------------------
Detected, and the ledger then refuses to spend (:class:`LedgerIntegrityError`,
exit 3, the first bad line named):

* an edited line (an amount lowered, a description changed): its digest no
  longer matches its content;
* a line deleted, inserted or moved anywhere but at the end: the next line's
  ``prev`` no longer matches;
* the last line(s) deleted: the ledger ends before the charge the head file
  names; a missing or edited head file.

Not detected:

* Without a key (``auth: sha256``) anyone who can write the file can
  recompute every digest and the head after an edit: the chain then only
  catches accidental corruption and naive hand edits. Set a key (below) to
  make edits require the key.
* Even with a key, a rollback of BOTH the ledger and its head file to an
  earlier pair of copies (a backup restored over both) looks like a valid,
  shorter ledger. Only a record kept outside the folder catches it: note the
  ``head`` that ``privaudit budget show`` prints (seq and digest) somewhere
  else, or keep the ledger on append-only storage.

Key: ``PRIVAUDIT_LEDGER_KEY_FILE`` (path of a file whose bytes are the key) or
``PRIVAUDIT_LEDGER_KEY`` (the key itself), at least 16 bytes, read when the
ledger is created (it is then ``hmac-sha256`` and records the key's id, not
the key) and required on every later read. A key file in the ledger's own
folder is refused: whoever can edit the ledger could read it.

Old ledgers: format_version 1 (no chain) is read by ``ledger_status`` (shown
as unverified) but refused for spending with a format-version error until
:func:`upgrade_ledger` (``privaudit budget upgrade FILE``) chains its current
content, which it then trusts as it stands.

Concurrency: every read and every charge holds an exclusive ``filelock`` lock
on ``FILE.lock`` (portable); :func:`charge` re-reads and re-verifies every
entry, checks the budget, appends one line, fsyncs, then rewrites the head,
so two releases at once never lose or double-count an entry and never exceed
the total together. A crash between the append and the head rewrite leaves a
ledger one charge ahead of its head: accepted (the budget spent is only
larger) and the head is brought up to date by the next charge.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import secrets
import sys
import tempfile
from datetime import datetime, timezone
from decimal import Decimal, localcontext
from fractions import Fraction
from pathlib import Path

from filelock import FileLock, Timeout

from privaudit.core.errors import ArtifactError, BudgetExceededError, LedgerIntegrityError, UsageError
from privaudit.core.formatting import bound
from privaudit.privacy import accounting
from privaudit.core.schemas import schema_errors

LEDGER_FORMAT = "privaudit-ledger"
HEAD_FORMAT = "privaudit-ledger-head"
LEDGER_VERSION = 2
#: Environment variables holding the HMAC key (a file path, or the key itself).
KEY_FILE_ENV = "PRIVAUDIT_LEDGER_KEY_FILE"
KEY_ENV = "PRIVAUDIT_LEDGER_KEY"
#: Seconds to wait for another process's lock before giving up.
LOCK_TIMEOUT = 300.0
#: Said after amounts printed rounded (``privaudit.core.formatting.bound``: spent and wanted rounded up, totals
#: and remaining down, 6 significant digits).
_ROUNDING_NOTE = (" (~: rounded to 6 significant digits in the safe direction; "
                  "`privaudit budget show --json` gives the exact values)")
_MIN_KEY_BYTES = 16
#: (ledger path, entry) of every charge this process appended, oldest first: what a run
#: interrupted after charging reports (``charges_by_this_process``).
_PROCESS_CHARGES: list[tuple[str, dict]] = []


def charges_by_this_process(since: int = 0) -> list[tuple[str, dict]]:
    """The charges this process appended (ledger path, entry), from the ``since``-th on."""
    return list(_PROCESS_CHARGES[since:])


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _amount(name: str, value) -> tuple[Fraction, str]:
    """Exact positive amount and its string form from float/int/str/Fraction/Decimal.

    The amount must be > 0 and, as a float, finite and normal (>= the smallest
    normal double, ~2.2e-308): an amount that underflows (``1e-400``), a
    subnormal, inf or nan is refused, so every amount has a readable float value.

    Raises
    ------
    UsageError
        Not a number, <= 0, infinite, nan, or outside the normal float range.
    """
    if isinstance(value, bool):
        raise UsageError(f"`{name}` must be a positive number. Found {value!r}.")
    try:
        if isinstance(value, float):
            text = repr(value)
        elif isinstance(value, Fraction):
            text = _fmt(value) if _is_decimal(value) else str(value)
        else:
            text = str(value).strip()
        frac = Fraction(text)
    except (ValueError, ZeroDivisionError, TypeError):
        raise UsageError(f"`{name}` must be a positive, finite number. Found {value!r}.") from None
    problem = _amount_problem(frac)
    if problem:
        raise UsageError(f"`{name}` {problem}. Found {value!r}.")
    if isinstance(value, float):
        text = _fmt(frac)  # the same exact decimal, as users write it: 1.0 -> "1", 0.25 -> "0.25"
    return frac, text


def _amount_problem(frac: Fraction) -> str | None:
    """Why ``frac`` is not a valid ledger amount (None when it is).

    Valid: > 0 and a finite, normal float value (sys.float_info.min <= x <= max).
    """
    if frac <= 0:
        return "must be > 0"
    try:
        x = float(frac)
    except OverflowError:
        x = math.inf
    if not math.isfinite(x):
        return f"must be a finite number (at most {sys.float_info.max:.6g})"
    if x < sys.float_info.min:
        return (f"is too small: amounts must be at least {sys.float_info.min:.6g} (the smallest normal "
                f"float); a smaller value underflows and has no readable value")
    return None


def _check_entry_amount(path: Path, line: int, key: str, value) -> Fraction:
    """The exact amount stored under ``key`` on ``line``; ArtifactError unless valid."""
    if not isinstance(value, str):
        raise ArtifactError(f"{path}, line {line}: `{key}` must be an exact decimal string such as \"0.25\". "
                            f"Found {value!r}. The ledger is corrupt; restore it from a backup.")
    try:
        frac = Fraction(value.strip())
    except (ValueError, ZeroDivisionError):
        raise ArtifactError(f"{path}, line {line}: `{key}` is not a number: {value!r}. "
                            f"The ledger is corrupt; restore it from a backup.") from None
    problem = _amount_problem(frac)
    if problem:
        raise ArtifactError(f"{path}, line {line}: `{key}` {problem}. Found {value!r}. "
                            f"The ledger is corrupt (a hand edit?); restore it from a backup.")
    return frac


def rho_of_pure_dp(epsilon) -> Fraction:
    """rho = eps^2 / 2 charged for a pure eps-DP release (Bun & Steinke 2016, Prop. 1.4).

    Exact: eps is read through its decimal form (floats through ``repr``).
    """
    eps, _ = _amount("epsilon", epsilon)
    rho = eps * eps / 2
    problem = _amount_problem(rho)
    if problem:
        raise UsageError(f"the charge rho = epsilon^2/2 for epsilon={epsilon!r} {problem}.")
    return rho


# ----------------------------------------------------------------------------- key and digests
def _key_for(path: Path) -> bytes | None:
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


def _key_id(key: bytes) -> str:
    return hmac.new(key, b"privaudit-ledger-key-id", hashlib.sha256).hexdigest()[:16]


def _digest(entry: dict, key: bytes | None) -> str:
    """SHA-256, or HMAC-SHA256 under ``key``, of ``entry``'s canonical JSON without ``digest``."""
    body = {k: v for k, v in entry.items() if k != "digest"}
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    if key is None:
        return hashlib.sha256(canon).hexdigest()
    return hmac.new(key, canon, hashlib.sha256).hexdigest()


def _sealed(entry: dict, key: bytes | None) -> dict:
    return {**entry, "digest": _digest(entry, key)}


def _head_path(path: Path) -> Path:
    return path.with_name(path.name + ".head")


def _lock(path: Path) -> FileLock:
    return FileLock(str(path.with_name(path.name + ".lock")), timeout=LOCK_TIMEOUT)


class _Locked:
    """Context manager: the ledger's exclusive lock, with a readable error on timeout."""

    def __init__(self, path: Path):
        self.path, self.lock = path, _lock(path)

    def __enter__(self):
        _refuse_non_ledger(self.path)  # before FILE.lock is created beside someone's spec or README
        try:
            self.lock.acquire()
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


def _refuse_non_ledger(path: Path) -> None:
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
    _check_header(path, head)


def _write_atomic(path: Path, text: str, *, replace: bool) -> None:
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


def _write_head(path: Path, ledger_id: str, last: dict, key: bytes | None) -> None:
    head = {"format": HEAD_FORMAT, "format_version": LEDGER_VERSION, "ledger_id": ledger_id,
            "seq": int(last.get("seq", 0)), "last_digest": last["digest"]}
    _write_atomic(_head_path(path), json.dumps(_sealed(head, key)) + "\n", replace=True)


def init_ledger(path, dataset_id: str, rho_total) -> dict:
    """Create a ledger for ``dataset_id`` with total budget ``rho_total`` (zCDP rho).

    The ledger is authenticated (``auth: hmac-sha256``) when a key is set in
    ``PRIVAUDIT_LEDGER_KEY_FILE`` or ``PRIVAUDIT_LEDGER_KEY``, else chained
    with plain SHA-256 (see the module docstring for what each detects).

    Parameters
    ----------
    path : str or Path
        Ledger file to create; it must not exist. ``path.head`` and
        ``path.lock`` are created next to it.
    dataset_id : str
        Non-empty identifier of the dataset the budget protects.
    rho_total : float, str, Fraction or Decimal
        Total rho, > 0.

    Returns
    -------
    dict
        The header entry written.

    Raises
    ------
    UsageError
        ``path`` exists, its folder does not, bad ``dataset_id`` / ``rho_total``, or a bad key.
    """
    path = Path(path)
    if not isinstance(dataset_id, str) or not dataset_id.strip():
        raise UsageError(f"`dataset_id` must be a non-empty string. Found {dataset_id!r}.")
    _, text = _amount("rho_total", rho_total)
    if path.exists():
        raise UsageError(f"{path}: ledger already exists; a ledger is never overwritten. "
                         f"Use another path or `privaudit budget show {path}`.")
    if not path.parent.is_dir():  # a typo in the folder would otherwise start a second, fresh ledger
        raise UsageError(f"{path}: the folder {path.parent} does not exist; create it first "
                         "(a ledger's folder is never created, so a typo cannot start a second ledger).")
    key = _key_for(path)
    header = _sealed({"format": LEDGER_FORMAT, "format_version": LEDGER_VERSION, "type": "init",
                      "dataset_id": dataset_id, "rho_total": text, "created": _now(),
                      "ledger_id": secrets.token_hex(16), "auth": "sha256" if key is None else "hmac-sha256",
                      "key_id": None if key is None else _key_id(key), "prev": None}, key)
    with _Locked(path):
        _write_atomic(path, json.dumps(header) + "\n", replace=False)
        _write_head(path, header["ledger_id"], header, key)
    return header


# ----------------------------------------------------------------------------- reading and verifying
def _split_lines(path: Path, text: str) -> list[dict]:
    """Each line of ``text`` as a JSON object; ArtifactError naming the first bad line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    else:
        raise ArtifactError(f"{path}: the last line is incomplete (an interrupted write?); "
                            f"inspect the file and remove the partial line.")
    if not lines:
        raise ArtifactError(f"{path}: empty ledger (no header line).")
    entries = []
    for i, line in enumerate(lines, start=1):
        try:
            e = json.loads(line)
        except json.JSONDecodeError as err:
            raise ArtifactError(f"{path}, line {i}: not valid JSON ({err.msg}). "
                                f"The ledger is corrupt; restore it from a backup.") from None
        if not isinstance(e, dict):
            raise ArtifactError(f"{path}, line {i}: must be a JSON object, found {type(e).__name__}. "
                                f"The ledger is corrupt; restore it from a backup.")
        entries.append(e)
    return entries


def _check_header(path: Path, head: dict) -> int:
    """The header's format version (1 or 2); ArtifactError for anything else."""
    if head.get("format") != LEDGER_FORMAT or head.get("type") != "init":
        raise ArtifactError(f"{path}, line 1: not a privaudit ledger header "
                            f"(expected format {LEDGER_FORMAT!r} and type 'init'); pass the file created by "
                            f"`privaudit budget init FILE --dataset ID --rho-total R`.")
    version = head.get("format_version")
    if version not in (1, LEDGER_VERSION) or isinstance(version, bool):
        raise ArtifactError(f"{path}, line 1: unknown ledger format_version {version!r}; this privaudit "
                            f"reads versions 1 (unchained, read-only) and {LEDGER_VERSION}.")
    return version


def _verify_chain(path: Path, entries: list[dict], key: bytes | None) -> None:
    """Schema, digests and ``prev`` links of a version-2 ledger (the head: :func:`_verify_head`).

    Raises
    ------
    LedgerIntegrityError
        The first line whose schema, digest or link does not hold.
    """
    fix = "The ledger was edited or truncated; restore the ledger and its .head file from a backup."
    for i, e in enumerate(entries, start=1):
        errors = schema_errors(e, "ledger_entry")
        if errors:
            raise LedgerIntegrityError(f"{path}, line {i}: not a version-{LEDGER_VERSION} ledger entry "
                                       f"({'; '.join(errors[:3])}). {fix}")
        if not hmac.compare_digest(e["digest"], _digest(e, key)):
            raise LedgerIntegrityError(f"{path}, line {i}: its digest does not match its content (an edited "
                                       f"amount, description or field). {fix}")
        want_prev = None if i == 1 else entries[i - 2]["digest"]
        if e["prev"] != want_prev:
            raise LedgerIntegrityError(f"{path}, line {i}: its `prev` does not match line {i - 1}'s digest "
                                       f"(a line removed, inserted or moved before it). {fix}")


def _verify_head(path: Path, entries: list[dict], key: bytes | None) -> None:
    """The head file names a line of this ledger (after the charges' ``seq`` were checked)."""
    fix = "The ledger was edited or truncated; restore the ledger and its .head file from a backup."
    hp = _head_path(path)
    try:
        head = json.loads(hp.read_text())
    except FileNotFoundError:
        raise LedgerIntegrityError(f"{path}: its head file {hp} is missing, so a deletion of the last "
                                   f"lines cannot be ruled out. {fix}") from None
    except (OSError, ValueError, UnicodeDecodeError) as err:
        raise LedgerIntegrityError(f"{path}: cannot read its head file {hp}: {err}. {fix}") from None
    ok = (isinstance(head, dict) and head.get("format") == HEAD_FORMAT
          and head.get("ledger_id") == entries[0]["ledger_id"] and type(head.get("seq")) is int
          and isinstance(head.get("last_digest"), str) and isinstance(head.get("digest"), str)
          and hmac.compare_digest(head["digest"], _digest(head, key)))
    if not ok:
        raise LedgerIntegrityError(f"{path}: its head file {hp} is not this ledger's, or was edited. {fix}")
    last_seq = len(entries) - 1
    if head["seq"] > last_seq:
        raise LedgerIntegrityError(f"{path}, line {last_seq + 1}: the ledger ends at charge #{last_seq}, but its "
                                   f"head file names charge #{head['seq']} (line {head['seq'] + 1}): the last "
                                   f"line(s) were deleted. {fix}")
    if not hmac.compare_digest(entries[head["seq"]]["digest"], head["last_digest"]):
        raise LedgerIntegrityError(f"{path}, line {head['seq'] + 1}: the head file's digest for charge "
                                   f"#{head['seq']} does not match this line. {fix}")


def _verification_key(path: Path, head: dict) -> bytes | None:
    """The key a version-2 ledger is verified with (None for ``auth: sha256``)."""
    if head.get("auth") != "hmac-sha256":
        return None
    key = _key_for(path)
    if key is None:
        raise UsageError(f"{path}: this ledger is authenticated (hmac-sha256); set {KEY_FILE_ENV} (or {KEY_ENV}) "
                         f"to its key to read or charge it.")
    if not hmac.compare_digest(str(head.get("key_id")), _key_id(key)):
        raise UsageError(f"{path}: the key in {KEY_FILE_ENV}/{KEY_ENV} is not this ledger's key "
                         f"(key id {_key_id(key)}, the ledger's {head.get('key_id')!r}).")
    return key


def _parse(path: Path, text: str) -> tuple[dict, list[dict], bytes | None]:
    """Parse and verify every line of a ledger; the header, the charges and the key.

    Checked on every read (``check_budget``, ``charge``, ``ledger_status``):
    each line is one JSON object; line 1 is the header (format, known
    ``format_version``, non-empty ``dataset_id``, ``rho_total`` a positive,
    finite, normal amount); for version 2 the chain and the head file
    (:func:`_verify_chain`, :func:`_verify_head`); every later line is a charge with ``seq`` = line
    number - 1 (contiguous, no second header), the header's ``dataset_id``,
    and a positive, finite, normal ``rho``.

    Raises
    ------
    ArtifactError
        The first line that breaks a rule, with its line number and the rule.
    LedgerIntegrityError
        A broken chain or head (exit 3).
    UsageError
        An authenticated ledger without its key.
    """
    entries = _split_lines(path, text)
    head = entries[0]
    version = _check_header(path, head)
    key = None
    if version == LEDGER_VERSION:
        key = _verification_key(path, head)
        _verify_chain(path, entries, key)
    dataset_id = head.get("dataset_id")
    if not isinstance(dataset_id, str) or not dataset_id.strip():
        raise ArtifactError(f"{path}, line 1: `dataset_id` must be a non-empty string. Found {dataset_id!r}.")
    _check_entry_amount(path, 1, "rho_total", head.get("rho_total"))
    for i, e in enumerate(entries[1:], start=2):
        if e.get("type") == "init":
            raise ArtifactError(f"{path}, line {i}: a second ledger header; only line 1 may be a header. "
                                f"The ledger is corrupt; restore it from a backup.")
        if e.get("type") != "charge":
            raise ArtifactError(f"{path}, line {i}: expected a charge entry (type 'charge'). "
                                f"Found type {e.get('type')!r}.")
        if isinstance(e.get("seq"), bool) or e.get("seq") != i - 1:
            raise ArtifactError(f"{path}, line {i}: charge sequence numbers must be contiguous: expected "
                                f"seq {i - 1}, found {e.get('seq')!r}. The ledger is corrupt (a line removed, "
                                f"duplicated or reordered?); restore it from a backup.")
        if e.get("dataset_id") != dataset_id:
            raise ArtifactError(f"{path}, line {i}: charge for dataset {e.get('dataset_id')!r} in the ledger of "
                                f"dataset {dataset_id!r}. The ledger is corrupt; restore it from a backup.")
        _check_entry_amount(path, i, "rho", e.get("rho"))
    if version == LEDGER_VERSION:
        _verify_head(path, entries, key)
    return head, entries[1:], key


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such ledger. Create it with "
                         f"`privaudit budget init {path} --dataset ID --rho-total R`.") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ArtifactError(f"{path}: cannot read the ledger: {e}") from None


def _refuse_unchained(path: Path, head: dict) -> None:
    if head["format_version"] != LEDGER_VERSION:
        raise ArtifactError(f"{path}: ledger format_version {head['format_version']} has no hash chain, so "
                            f"edits cannot be detected; this privaudit spends only from version "
                            f"{LEDGER_VERSION}. Check its entries (`privaudit budget show {path}`), then chain it "
                            f"with `privaudit budget upgrade {path}`.")


def _verified(path: Path) -> tuple[dict, list[dict], bytes | None]:
    """Read and verify under the lock, for spending: version-1 ledgers refused."""
    with _Locked(path):
        head, charges, key = _parse(path, _read_text(path))
    _refuse_unchained(path, head)
    return head, charges, key


def _must_exist(path: Path) -> None:
    if path.is_dir():
        raise UsageError(f"{path}: is a folder, not a ledger file; pass the ledger's file (created by "
                         f"`privaudit budget init FILE --dataset ID --rho-total R`).")
    if not path.is_file():
        raise UsageError(f"{path}: no such ledger. Create it with "
                         f"`privaudit budget init {path} --dataset ID --rho-total R`.")


def _totals(head: dict, charges: list[dict]) -> tuple[Fraction, Fraction]:
    return Fraction(head["rho_total"]), sum((Fraction(c["rho"]) for c in charges), Fraction(0))


def _refuse_if_over(path: Path, head: dict, charges: list[dict], dataset_id: str,
                    want: Fraction) -> Fraction:
    """Raise BudgetExceededError if spent + want > total; returns spent (exact)."""
    _check_dataset(path, head, dataset_id)
    total, spent = _totals(head, charges)
    if spent + want > total:
        raise BudgetExceededError(
            f"{path}: rho={bound(want, 'up')} would exceed the budget of dataset {dataset_id!r}: "
            f"total {bound(total, 'down')}, spent {bound(spent, 'up')}, remaining {bound(total - spent, 'down')}"
            f"{_ROUNDING_NOTE if '~' in bound(want, 'up') + bound(spent, 'up') + bound(total - spent, 'down') else ''}. "
            f"Nothing was charged; lower `rho`/`epsilon` or use a new dataset budget.")
    return spent


def _check_dataset(path: Path, head: dict, dataset_id: str) -> None:
    if head["dataset_id"] != dataset_id:
        raise UsageError(f"{path}: this ledger is for dataset {head['dataset_id']!r}, "
                         f"not {dataset_id!r}.")


def check_budget(path, dataset_id: str, rho) -> Fraction:
    """Raise unless ``rho`` more fits in the remaining budget; returns the remaining rho.

    Call it before any noise is drawn; then :func:`charge` (which re-checks
    atomically) once the release is about to be written. The chain is
    verified first.

    Raises
    ------
    BudgetExceededError
        spent + rho > total (exit code 3).
    LedgerIntegrityError
        A broken chain or head file (exit code 3, the line named).
    UsageError
        No ledger, wrong dataset, bad amount, missing or wrong key.
    ArtifactError
        Corrupt ledger, or a format_version 1 ledger (not chained).
    """
    path = Path(path)
    want, _ = _amount("rho", rho)
    _must_exist(path)
    for where in (path, path.parent):  # the charge appends to FILE and replaces FILE.head in its folder
        if not os.access(where, os.W_OK):
            raise UsageError(f"{path}: the ledger cannot be charged: {'its folder ' if where != path else ''}"
                             f"{where} is not writable by this user. Fix the permissions before spending "
                             "(nothing was read or charged).")
    head, charges, _ = _verified(path)
    spent = _refuse_if_over(path, head, charges, dataset_id, want)
    return Fraction(head["rho_total"]) - spent


def charge(path, dataset_id: str, rho, description: str, *, run: str | None = None,
           output: str | os.PathLike | None = None) -> dict:
    """Atomically verify the ledger, check the budget and append one charge of ``rho``.

    Under the ledger's exclusive lock: re-read and verify every entry (chain
    and head), refuse if spent + rho > total, else append one chained line,
    fsync, and rewrite the head file.

    Parameters
    ----------
    path : str or Path
    dataset_id : str
        Must match the ledger's dataset.
    rho : float, str, Fraction or Decimal
        Amount (zCDP rho) > 0; for a pure eps-DP release pass
        ``rho_of_pure_dp(eps)``.
    description : str
        What the release was (family, mechanism).
    run : str, optional
        Identifier of the run that spends (so a retry can be matched to it).
    output : str or Path, optional
        Where the run writes what it releases (stored as an absolute path).

    Returns
    -------
    dict
        The entry appended.

    Raises
    ------
    BudgetExceededError, LedgerIntegrityError, UsageError, ArtifactError
        As for :func:`check_budget`; nothing is written on error.
    """
    path = Path(path)
    want, text = _amount("rho", rho)
    _must_exist(path)
    with _Locked(path):
        head, charges, key = _parse(path, _read_text(path))
        _refuse_unchained(path, head)
        _refuse_if_over(path, head, charges, dataset_id, want)
        last = charges[-1] if charges else head
        entry = {"type": "charge", "seq": len(charges) + 1, "dataset_id": dataset_id,
                 "rho": text, "description": str(description), "timestamp": _now()}
        if run is not None:
            entry["run"] = str(run)
        if output is not None:
            entry["output"] = str(Path(output).absolute())
        entry = _sealed({**entry, "prev": last["digest"]}, key)
        with open(path, "a") as f:
            f.write(json.dumps(entry) + "\n")
            f.flush()
            os.fsync(f.fileno())
        _write_head(path, head["ledger_id"], entry, key)
    _PROCESS_CHARGES.append((str(path), entry))
    return entry


def upgrade_ledger(path) -> dict:
    """Chain a format_version 1 ledger in place (version 2), trusting its current content.

    The version-1 file is kept as ``path.v1`` (refused if that exists). The
    new header gets a fresh ``ledger_id`` and is keyed as :func:`init_ledger`
    would be; every charge keeps its fields and gains ``prev`` and ``digest``.

    Returns
    -------
    dict
        :func:`ledger_status` of the upgraded ledger.

    Raises
    ------
    UsageError
        No ledger, already version 2, ``path.v1`` exists, bad key.
    ArtifactError
        The version-1 ledger breaks a rule (it is not upgraded).
    """
    path = Path(path)
    _must_exist(path)
    backup = path.with_name(path.name + ".v1")
    with _Locked(path):
        head, charges, _ = _parse(path, _read_text(path))
        if head["format_version"] == LEDGER_VERSION:
            raise UsageError(f"{path}: already format_version {LEDGER_VERSION}; nothing to upgrade.")
        if backup.exists():
            raise UsageError(f"{backup} exists; move it away before upgrading {path}.")
        key = _key_for(path)
        new_head = _sealed({**head, "format_version": LEDGER_VERSION, "ledger_id": secrets.token_hex(16),
                            "auth": "sha256" if key is None else "hmac-sha256",
                            "key_id": None if key is None else _key_id(key), "prev": None}, key)
        lines, last = [new_head], new_head
        for c in charges:
            last = _sealed({**c, "prev": last["digest"]}, key)
            lines.append(last)
        os.link(path, backup)
        _write_head(path, new_head["ledger_id"], last, key)  # first: a version-1 ledger ignores a head file
        _write_atomic(path, "".join(json.dumps(e) + "\n" for e in lines), replace=True)
    return ledger_status(path)


def _is_decimal(x: Fraction) -> bool:
    """True when x has a finite decimal expansion."""
    d = x.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    return d == 1


def _fmt(x: Fraction) -> str:
    """Exact decimal string when x has a finite decimal expansion, else 'p/q (~float)'."""
    d = x.denominator
    twos = fives = 0
    while d % 2 == 0:
        d //= 2
        twos += 1
    while d % 5 == 0:
        d //= 5
        fives += 1
    if d != 1:
        return f"{x} (~{float(x):.6g})"
    with localcontext() as ctx:
        ctx.prec = len(str(x.numerator)) + max(twos, fives) + 5  # enough for an exact quotient
        dec = Decimal(x.numerator) / Decimal(x.denominator)
        s = format(dec, "f")
        if "." in s:
            s = s.rstrip("0").rstrip(".")
        return s if len(s) <= 24 else format(dec.normalize(), "e")


def ledger_status(path) -> dict:
    """Read and verify a ledger: dataset, total, spent, remaining (exact strings), entries and head.

    A version-2 ledger is verified as for spending (chain and head file); a
    version-1 ledger is read without verification (``verified`` False).

    Returns
    -------
    dict
        ``{"dataset_id", "rho_total", "rho_spent", "rho_remaining",
        "rho_*_float", "n_entries", "entries", "format_version", "verified",
        "auth", "head"}``; ``head`` = ``{"seq", "digest"}`` of the last line,
        worth noting outside the folder (it catches a rollback of both files).

    Raises
    ------
    UsageError
        No ledger, missing or wrong key. LedgerIntegrityError: broken chain.
        ArtifactError: corrupt ledger.
    """
    path = Path(path)
    _must_exist(path)
    with _Locked(path):
        head, charges, _ = _parse(path, _read_text(path))
    total, spent = _totals(head, charges)
    chained = head["format_version"] == LEDGER_VERSION
    last = charges[-1] if charges else head
    return {"format_version": head["format_version"], "dataset_id": head["dataset_id"],
            "created": head.get("created"), "verified": chained, "auth": head.get("auth"),
            "head": {"seq": int(last.get("seq", 0)), "digest": last.get("digest")},
            "rho_total": _fmt(total), "rho_spent": _fmt(spent), "rho_remaining": _fmt(total - spent),
            "rho_total_float": float(total), "rho_spent_float": float(spent),
            "rho_remaining_float": float(total - spent),
            "n_entries": len(charges), "entries": charges}


# ----------------------------------------------------------------------------
# charging from events (what every mechanism calls)


def charge_of(event, budget=None) -> float | Fraction:
    """The ledger amount for a privacy event (``privaudit.privacy.events``).

    The accountant's cost of the event: for a pure-DP event rho = eps^2/2
    exactly (:func:`rho_of_pure_dp` of its epsilon, Bun & Steinke 2016
    Prop. 1.4), otherwise its rho (exact rational cost rounded up to a
    double). With ``budget`` (a ``privacy.budget.Budget`` the event was
    calibrated to), the budget's own amount (``Budget.shown``: a split
    part's decimal share) is charged instead, after checking that the event
    costs no more (so the ledger reads "0.25", not "0.24999999999999997").

    Raises
    ------
    AccountingError
        An event the accountant does not know, or one costing more than ``budget``.
    """
    pure = accounting.is_pure(event)
    if budget is not None:
        accounting.guarantee(event, delta=budget.delta, requested=budget.requested, bound=budget.amount)  # checks
        return rho_of_pure_dp(budget.epsilon) if pure else budget.shown
    return rho_of_pure_dp(accounting.event_epsilon(event)) if pure else accounting.event_rho(event)


def check_event(path, dataset_id: str, event, budget=None) -> Fraction:
    """:func:`check_budget` for :func:`charge_of` ``(event, budget)``: raise unless it fits; returns the remaining rho."""
    return check_budget(path, dataset_id, charge_of(event, budget))


def charge_event(path, dataset_id: str, event, description: str, budget=None, *, run: str | None = None,
                 output: str | os.PathLike | None = None) -> dict:
    """:func:`charge` :func:`charge_of` ``(event, budget)`` (atomic re-check, one appended line)."""
    return charge(path, dataset_id, charge_of(event, budget), description, run=run, output=output)
