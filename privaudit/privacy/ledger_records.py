"""The ledger's records: exact amounts, the header, the hash chain and the head file, parsed and verified.

The format (version 2, one JSON object per line, schema
``schemas/ledger_entry.schema.json``) and what verification detects are
described in ``privaudit.privacy.ledger``'s module docstring. Everything here
is pure (reads a text, or the head file beside the ledger); locking and
writing are in ``privaudit.privacy.ledger_io``.
"""

from __future__ import annotations

import hmac
import json
import math
import sys
from datetime import datetime, timezone
from decimal import Decimal, localcontext
from fractions import Fraction
from pathlib import Path

from privaudit.core.errors import ArtifactError, LedgerIntegrityError, UsageError
from privaudit.core.schemas import schema_errors
from privaudit.privacy.ledger_key import LEDGER_VERSION, entry_digest, verification_key

LEDGER_FORMAT = "privaudit-ledger"
HEAD_FORMAT = "privaudit-ledger-head"


def now_utc() -> str:
    """The current UTC time as an ISO 8601 string to the second, ``Z``-suffixed."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def parse_amount(name: str, value) -> tuple[Fraction, str]:
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
            text = exact_text(value) if is_decimal(value) else str(value)
        else:
            text = str(value).strip()
        # Fraction("1_0") is 10 (PEP 515): a typo of 1.0 as likely; Fraction("٣") is 3, stored as "\u0663"
        frac = None if "_" in text or not text.isascii() else Fraction(text)
    except (ValueError, ZeroDivisionError, TypeError):
        raise UsageError(f"`{name}` must be a positive, finite number. Found {value!r}.") from None
    if frac is None:
        raise UsageError(f"`{name}` must be a number written in ASCII digits, without underscores. Found {value!r}.")
    problem = amount_problem(frac)
    if problem:
        raise UsageError(f"`{name}` {problem}. Found {value!r}.")
    if isinstance(value, float):
        text = exact_text(frac)  # the same exact decimal, as users write it: 1.0 -> "1", 0.25 -> "0.25"
    return frac, text


def amount_problem(frac: Fraction) -> str | None:
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


def check_entry_amount(path: Path, line: int, key: str, value) -> Fraction:
    """The exact amount stored under ``key`` on ``line``; ArtifactError unless valid."""
    if not isinstance(value, str):
        raise ArtifactError(f"{path}, line {line}: `{key}` must be an exact decimal string such as \"0.25\". "
                            f"Found {value!r}. The ledger is corrupt; restore it from a backup.")
    try:
        frac = Fraction(value.strip())
    except (ValueError, ZeroDivisionError):
        raise ArtifactError(f"{path}, line {line}: `{key}` is not a number: {value!r}. "
                            f"The ledger is corrupt; restore it from a backup.") from None
    problem = amount_problem(frac)
    if problem:
        raise ArtifactError(f"{path}, line {line}: `{key}` {problem}. Found {value!r}. "
                            f"The ledger is corrupt (a hand edit?); restore it from a backup.")
    return frac


def is_decimal(x: Fraction) -> bool:
    """True when x has a finite decimal expansion."""
    d = x.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    return d == 1


def exact_text(x: Fraction) -> str:
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


def head_path(path: Path) -> Path:
    """The head file beside the ledger: ``FILE.head``."""
    return path.with_name(path.name + ".head")


def split_lines(path: Path, text: str) -> list[dict]:
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


def check_header(path: Path, head: dict) -> int:
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


def verify_chain(path: Path, entries: list[dict], key: bytes | None) -> None:
    """Schema, digests and ``prev`` links of a version-2 ledger (the head: :func:`verify_head`).

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
        if not hmac.compare_digest(e["digest"], entry_digest(e, key)):
            raise LedgerIntegrityError(f"{path}, line {i}: its digest does not match its content (an edited "
                                       f"amount, description or field). {fix}")
        want_prev = None if i == 1 else entries[i - 2]["digest"]
        if e["prev"] != want_prev:
            raise LedgerIntegrityError(f"{path}, line {i}: its `prev` does not match line {i - 1}'s digest "
                                       f"(a line removed, inserted or moved before it). {fix}")


def verify_head(path: Path, entries: list[dict], key: bytes | None) -> None:
    """The head file names a line of this ledger (after the charges' ``seq`` were checked)."""
    fix = "The ledger was edited or truncated; restore the ledger and its .head file from a backup."
    hp = head_path(path)
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
          and hmac.compare_digest(head["digest"], entry_digest(head, key)))
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


def parse_ledger(path: Path, text: str, *, unkeyed_ok: bool = False) -> tuple[dict, list[dict], bytes | None]:
    """Parse and verify every line of a ledger; the header, the charges and the key.

    Checked on every read (``check_budget``, ``charge``, ``ledger_status``):
    each line is one JSON object; line 1 is the header (format, known
    ``format_version``, non-empty ``dataset_id``, ``rho_total`` a positive,
    finite, normal amount); for version 2 the chain and the head file
    (:func:`verify_chain`, :func:`verify_head`); every later line is a charge with ``seq`` = line
    number - 1 (contiguous, no second header), the header's ``dataset_id``,
    and a positive, finite, normal ``rho``.

    Raises
    ------
    ArtifactError
        The first line that breaks a rule, with its line number and the rule.
    LedgerIntegrityError
        A broken chain or head (exit 3).
    UsageError
        An authenticated ledger without its key, or with another key.
    LedgerIntegrityError
        Also: a key is set and the ledger is not keyed with it (unless ``unkeyed_ok``: ``budget upgrade``),
        or it is not the ledger pinned by ``PRIVAUDIT_LEDGER_ID`` (``ledger_key.verification_key``).
    """
    entries = split_lines(path, text)
    head = entries[0]
    version = check_header(path, head)
    key = verification_key(path, head, version, unkeyed_ok=unkeyed_ok)  # the reader's settings decide
    if version == LEDGER_VERSION:
        verify_chain(path, entries, key)
    dataset_id = head.get("dataset_id")
    if not isinstance(dataset_id, str) or not dataset_id.strip():
        raise ArtifactError(f"{path}, line 1: `dataset_id` must be a non-empty string. Found {dataset_id!r}.")
    check_entry_amount(path, 1, "rho_total", head.get("rho_total"))
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
        check_entry_amount(path, i, "rho", e.get("rho"))
    if version == LEDGER_VERSION:
        verify_head(path, entries, key)
    return head, entries[1:], key
