"""Append-only privacy-budget ledger (JSON lines, exact amounts, file lock).

Format (version 1), one JSON object per line:

* line 1, the header::

    {"format": "privaudit-ledger", "format_version": 1, "type": "init",
     "dataset_id": "icu-2024", "rho_total": "1.5", "created": "2025-...Z"}

* then one line per charge::

    {"type": "charge", "seq": 1, "dataset_id": "icu-2024", "rho": "0.25",
     "description": "release visits+transitions gaussian", "timestamp": "..."}

Amounts are zCDP rho, stored as exact decimal (or ``p/q``) strings and added
with ``fractions.Fraction``: no rounding ever decides a refusal. A float
amount is stored as its ``repr`` (the shortest decimal that reads back as the
same float, e.g. 0.1 -> "0.1"). A pure eps-DP release is charged
rho = eps^2 / 2, a valid zCDP bound for pure DP (Bun & Steinke 2016, Prop. 1.4;
see :func:`rho_of_pure_dp`), so one ledger covers both kinds of release.

Concurrency: :func:`charge` takes an exclusive ``fcntl.flock`` on the ledger
file, re-reads every entry, checks the budget, appends one line and fsyncs
before releasing the lock, so two releases at once never lose or
double-count an entry and never exceed the total together. POSIX only.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import sys
import tempfile
from datetime import datetime, timezone
from decimal import Decimal, localcontext
from fractions import Fraction
from pathlib import Path

from privaudit.errors import ArtifactError, BudgetExceededError, UsageError

LEDGER_FORMAT = "privaudit-ledger"
LEDGER_VERSION = 1


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


def init_ledger(path, dataset_id: str, rho_total) -> dict:
    """Create a ledger for ``dataset_id`` with total budget ``rho_total`` (zCDP rho).

    Parameters
    ----------
    path : str or Path
        Ledger file to create; it must not exist.
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
        ``path`` exists, or bad ``dataset_id`` / ``rho_total``.
    """
    path = Path(path)
    if not isinstance(dataset_id, str) or not dataset_id.strip():
        raise UsageError(f"`dataset_id` must be a non-empty string. Found {dataset_id!r}.")
    _, text = _amount("rho_total", rho_total)
    if path.exists():
        raise UsageError(f"{path}: ledger already exists; a ledger is never overwritten. "
                         f"Use another path or `privaudit budget show {path}`.")
    header = {"format": LEDGER_FORMAT, "format_version": LEDGER_VERSION, "type": "init",
              "dataset_id": dataset_id, "rho_total": text, "created": _now()}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(header) + "\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # atomic, and fails if path appeared meanwhile
        except FileExistsError:
            raise UsageError(f"{path}: ledger already exists; a ledger is never overwritten.") from None
    finally:
        Path(tmp).unlink(missing_ok=True)
    return header


def _parse(path: Path, text: str) -> tuple[dict, list[dict]]:
    """Parse and validate every line of a ledger; the header and the charges.

    Checked on every read (``check_budget``, ``charge``, ``ledger_status``):
    each line is one JSON object; line 1 is the header (format, known
    ``format_version``, non-empty ``dataset_id``, ``rho_total`` a positive,
    finite, normal amount); every later line is a charge with ``seq`` = line
    number - 1 (contiguous, no second header), the header's ``dataset_id``,
    and a positive, finite, normal ``rho``.

    Raises
    ------
    ArtifactError
        The first line that breaks a rule, with its line number and the rule.
    """
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
    head = entries[0]
    if head.get("format") != LEDGER_FORMAT or head.get("type") != "init":
        raise ArtifactError(f"{path}, line 1: not a privaudit ledger header "
                            f"(expected format {LEDGER_FORMAT!r} and type 'init').")
    if head.get("format_version") != LEDGER_VERSION:
        raise ArtifactError(f"{path}, line 1: unknown ledger format_version "
                            f"{head.get('format_version')!r}; this privaudit reads {LEDGER_VERSION}.")
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
    return head, entries[1:]


def _totals(head: dict, charges: list[dict]) -> tuple[Fraction, Fraction]:
    return Fraction(head["rho_total"]), sum((Fraction(c["rho"]) for c in charges), Fraction(0))


def _read_shared(path: Path) -> tuple[dict, list[dict]]:
    """Parse the ledger under a shared lock."""
    with _open(path, "r") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_SH)
        try:
            return _parse(path, f.read())
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _refuse_if_over(path: Path, head: dict, charges: list[dict], dataset_id: str,
                    want: Fraction) -> Fraction:
    """Raise BudgetExceededError if spent + want > total; returns spent (exact)."""
    _check_dataset(path, head, dataset_id)
    total, spent = _totals(head, charges)
    if spent + want > total:
        raise BudgetExceededError(
            f"{path}: rho={_fmt(want)} would exceed the budget of dataset {dataset_id!r}: "
            f"total {_fmt(total)}, spent {_fmt(spent)}, remaining {_fmt(total - spent)}. "
            f"Nothing was charged; lower --rho/--epsilon or use a new dataset budget.")
    return spent


def _open(path: Path, mode: str):
    try:
        return open(path, mode)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such ledger. Create it with "
                         f"`privaudit budget init {path} --dataset ID --rho-total R`.") from None


def _check_dataset(path: Path, head: dict, dataset_id: str) -> None:
    if head["dataset_id"] != dataset_id:
        raise UsageError(f"{path}: this ledger is for dataset {head['dataset_id']!r}, "
                         f"not {dataset_id!r}.")


def check_budget(path, dataset_id: str, rho) -> Fraction:
    """Raise unless ``rho`` more fits in the remaining budget; returns the remaining rho.

    Call it before any noise is drawn; then :func:`charge` (which re-checks
    atomically) once the release is about to be written.

    Raises
    ------
    BudgetExceededError
        spent + rho > total (exit code 3).
    UsageError
        No ledger, wrong dataset, bad amount.
    ArtifactError
        Corrupt ledger.
    """
    path = Path(path)
    want, _ = _amount("rho", rho)
    head, charges = _read_shared(path)
    spent = _refuse_if_over(path, head, charges, dataset_id, want)
    return Fraction(head["rho_total"]) - spent


def charge(path, dataset_id: str, rho, description: str) -> dict:
    """Atomically check the budget and append one charge of ``rho``.

    Under an exclusive lock on the ledger file: re-read every entry, refuse
    if spent + rho > total, else append one line and fsync.

    Parameters
    ----------
    path : str or Path
    dataset_id : str
        Must match the ledger's dataset.
    rho : float, str, Fraction or Decimal
        Amount (zCDP rho) > 0; for a pure eps-DP release pass
        ``rho_of_pure_dp(eps)``.
    description : str
        What the release was (family, mechanism, output folder).

    Returns
    -------
    dict
        The entry appended.

    Raises
    ------
    BudgetExceededError, UsageError, ArtifactError
        As for :func:`check_budget`; nothing is written on error.
    """
    path = Path(path)
    want, text = _amount("rho", rho)
    with _open(path, "r+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            f.seek(0)
            head, charges = _parse(path, f.read())
            _refuse_if_over(path, head, charges, dataset_id, want)
            entry = {"type": "charge", "seq": len(charges) + 1, "dataset_id": dataset_id,
                     "rho": text, "description": str(description), "timestamp": _now()}
            f.seek(0, os.SEEK_END)
            f.write(json.dumps(entry) + "\n")
            f.flush()
            os.fsync(f.fileno())
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
    return entry


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
    """Read a ledger: dataset, total, spent, remaining (exact strings) and entries.

    Returns
    -------
    dict
        ``{"dataset_id", "rho_total", "rho_spent", "rho_remaining",
        "rho_*_float", "n_entries", "entries", "format_version"}``.

    Raises
    ------
    UsageError
        No ledger. ArtifactError: corrupt ledger.
    """
    head, charges = _read_shared(Path(path))
    total, spent = _totals(head, charges)
    return {"format_version": head["format_version"], "dataset_id": head["dataset_id"],
            "created": head.get("created"),
            "rho_total": _fmt(total), "rho_spent": _fmt(spent), "rho_remaining": _fmt(total - spent),
            "rho_total_float": float(total), "rho_spent_float": float(spent),
            "rho_remaining_float": float(total - spent),
            "n_entries": len(charges), "entries": charges}
