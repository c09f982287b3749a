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

The reader decides, not the file (``ledger_key.verification_key``): with a key
set, only a ledger keyed with that key (same key id) is read or charged; an
unkeyed ledger (``auth: sha256`` or format_version 1) is refused
(:class:`LedgerIntegrityError`, exit 3). So without the key nobody can make a
keyed reader accept an edited ledger, one rewritten as ``auth: sha256`` with
re-computed digests, or one deleted and re-created by ``init``. With
``PRIVAUDIT_LEDGER_ID`` also set, only the ledger of that id is read (a ledger
re-created even by a key holder has a fresh id; the id is under the key's MAC).
``init`` refuses a path whose ``FILE.head`` exists (a deleted ledger).

Not detected:

* Without a key (``auth: sha256``) anyone who can write the file can
  recompute every digest and the head after an edit, or delete and re-create
  the ledger: the chain then only catches accidental corruption and naive
  hand edits. Set a key (below) to make edits require the key.
* Even with a key, a rollback of BOTH the ledger and its head file to an
  earlier pair of copies (a backup restored over both) looks like a valid,
  shorter ledger. Only a record kept outside the folder catches it: note the
  ``head`` that ``privaudit budget show`` prints (seq and digest) somewhere
  else, or keep the ledger on append-only storage.
* Whoever can delete the files can always deny service (nothing is left to
  spend from), key or not.

Key: ``PRIVAUDIT_LEDGER_KEY_FILE`` (path of a file whose bytes are the key) or
``PRIVAUDIT_LEDGER_KEY`` (the key itself), at least 16 bytes, read when the
ledger is created (it is then ``hmac-sha256`` and records the key's id, not
the key) and required on every later read. A key file in the ledger's own
folder is refused: whoever can edit the ledger could read it. An unkeyed
ledger is put under the key by :func:`upgrade_ledger`, trusting its content.

Old ledgers: format_version 1 (no chain) is read by ``ledger_status`` (shown
as unverified; with no key set) but refused for spending with a format-version error until
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

import json
import os
import secrets
from fractions import Fraction
from pathlib import Path

from privaudit.core.errors import ArtifactError, BudgetExceededError, UsageError
from privaudit.core.formatting import bound
from privaudit.privacy import accounting
from privaudit.privacy.ledger_io import LOCK_TIMEOUT, Locked, must_exist, read_text, write_atomic, write_head
from privaudit.privacy.ledger_key import KEY_ENV, KEY_FILE_ENV, key_for, key_id, sealed
from privaudit.privacy.ledger_records import (HEAD_FORMAT, LEDGER_FORMAT, LEDGER_VERSION, amount_problem,
                                              exact_text, head_path, now_utc, parse_amount, parse_ledger)

__all__ = ["init_ledger", "check_budget", "charge", "upgrade_ledger", "ledger_status", "charge_of", "check_event",
           "charge_event", "rho_of_pure_dp", "charges_by_this_process", "LEDGER_FORMAT", "HEAD_FORMAT",
           "LEDGER_VERSION", "KEY_FILE_ENV", "KEY_ENV", "LOCK_TIMEOUT"]

#: Said after amounts printed rounded (``privaudit.core.formatting.bound``: spent and wanted rounded up, totals
#: and remaining down, 6 significant digits).
_ROUNDING_NOTE = (" (~: rounded to 6 significant digits in the safe direction; "
                  "`privaudit budget show --json` gives the exact values)")
#: (ledger path, entry) of every charge this process appended, oldest first: what a run
#: interrupted after charging reports (``charges_by_this_process``).
_PROCESS_CHARGES: list[tuple[str, dict]] = []


def charges_by_this_process(since: int = 0) -> list[tuple[str, dict]]:
    """The charges this process appended (ledger path, entry), from the ``since``-th on."""
    return list(_PROCESS_CHARGES[since:])


def rho_of_pure_dp(epsilon) -> Fraction:
    """rho = eps^2 / 2 charged for a pure eps-DP release (Bun & Steinke 2016, Prop. 1.4).

    Exact: eps is read through its decimal form (floats through ``repr``).
    """
    eps, _ = parse_amount("epsilon", epsilon)
    rho = eps * eps / 2
    problem = amount_problem(rho)
    if problem:
        raise UsageError(f"the charge rho = epsilon^2/2 for epsilon={epsilon!r} {problem}.")
    return rho


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
        ``path`` or ``path.head`` exists, its folder does not, bad ``dataset_id`` / ``rho_total``, or a bad
        key.
    """
    path = Path(path)
    if not isinstance(dataset_id, str) or not dataset_id.strip():
        raise UsageError(f"`dataset_id` must be a non-empty string. Found {dataset_id!r}.")
    _, text = parse_amount("rho_total", rho_total)
    if path.exists():
        raise UsageError(f"{path}: ledger already exists; a ledger is never overwritten. "
                         f"Use another path or `privaudit budget show {path}`.")
    if not path.parent.is_dir():  # a typo in the folder would otherwise start a second, fresh ledger
        raise UsageError(f"{path}: the folder {path.parent} does not exist; create it first "
                         "(a ledger's folder is never created, so a typo cannot start a second ledger).")
    if head_path(path).exists():  # the head of a ledger deleted from this path: never re-created silently
        raise UsageError(f"{path}: {head_path(path)} exists, the head file of an earlier ledger at this path; "
                         f"a deleted ledger is never re-created (its budget was spent). Restore the ledger from "
                         f"a backup, or use another path for a new dataset.")
    key = key_for(path)
    header = sealed({"format": LEDGER_FORMAT, "format_version": LEDGER_VERSION, "type": "init",
                      "dataset_id": dataset_id, "rho_total": text, "created": now_utc(),
                      "ledger_id": secrets.token_hex(16), "auth": "sha256" if key is None else "hmac-sha256",
                      "key_id": None if key is None else key_id(key), "prev": None}, key)
    with Locked(path):
        write_atomic(path, json.dumps(header) + "\n", replace=False)
        write_head(path, header["ledger_id"], header, key)
    return header


def _refuse_unchained(path: Path, head: dict) -> None:
    if head["format_version"] != LEDGER_VERSION:
        raise ArtifactError(f"{path}: ledger format_version {head['format_version']} has no hash chain, so "
                            f"edits cannot be detected; this privaudit spends only from version "
                            f"{LEDGER_VERSION}. Check its entries (`privaudit budget show {path}`), then chain it "
                            f"with `privaudit budget upgrade {path}`.")


def _verified(path: Path) -> tuple[dict, list[dict], bytes | None]:
    """Read and verify under the lock, for spending: version-1 ledgers refused."""
    with Locked(path):
        head, charges, key = parse_ledger(path, read_text(path))
    _refuse_unchained(path, head)
    return head, charges, key


def _totals(head: dict, charges: list[dict]) -> tuple[Fraction, Fraction]:
    return Fraction(head["rho_total"]), sum((Fraction(c["rho"]) for c in charges), Fraction(0))


def _refuse_if_over(path: Path, head: dict, charges: list[dict], dataset_id: str,
                    want: Fraction) -> Fraction:
    """Raise BudgetExceededError if spent + want > total; returns spent (exact)."""
    _check_dataset(path, head, dataset_id)
    total, spent = _totals(head, charges)
    if spent + want > total:
        left = total - spent
        shown = bound(want, 'up') + bound(spent, 'up') + bound(left, 'down')
        advice = (f"The budget of dataset {dataset_id!r} is spent: nothing more may be released from this data"
                  if left <= 0 else "Lower `rho`/`epsilon` to fit in what remains; once it is spent, nothing more "
                  "may be released from this data")
        raise BudgetExceededError(
            f"{path}: rho={bound(want, 'up')} would exceed the budget of dataset {dataset_id!r}: "
            f"total {bound(total, 'down')}, spent {bound(spent, 'up')}, remaining {bound(left, 'down')}"
            f"{_ROUNDING_NOTE if '~' in shown else ''}. Nothing was charged. {advice} (a new ledger for the same "
            f"data would not keep its guarantee).")
    return spent


def _check_dataset(path: Path, head: dict, dataset_id: str) -> None:
    if head["dataset_id"] != dataset_id:
        raise UsageError(f"{path}: this ledger is for dataset {head['dataset_id']!r}, not for {dataset_id!r}, the "
                         f"dataset being spent on (for release, train and pipeline: the dataset_id of the spec "
                         f"given). A ledger holds one dataset's budget: pass the ledger of {dataset_id!r}, or "
                         f"correct the spec's dataset_id.")


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
        A broken chain or head file (exit code 3, the line named); a key is set and the ledger is not
        keyed with it; ``PRIVAUDIT_LEDGER_ID`` names another ledger.
    UsageError
        No ledger, wrong dataset, bad amount, missing or wrong key.
    ArtifactError
        Corrupt ledger, or a format_version 1 ledger (not chained).
    """
    path = Path(path)
    want, _ = parse_amount("rho", rho)
    must_exist(path)
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
    want, text = parse_amount("rho", rho)
    must_exist(path)
    with Locked(path):
        head, charges, key = parse_ledger(path, read_text(path))
        _refuse_unchained(path, head)
        _refuse_if_over(path, head, charges, dataset_id, want)
        last = charges[-1] if charges else head
        entry = {"type": "charge", "seq": len(charges) + 1, "dataset_id": dataset_id,
                 "rho": text, "description": str(description), "timestamp": now_utc()}
        if run is not None:
            entry["run"] = str(run)
        if output is not None:
            entry["output"] = str(Path(output).absolute())
        entry = sealed({**entry, "prev": last["digest"]}, key)
        with open(path, "a") as f:
            f.write(json.dumps(entry) + "\n")
            f.flush()
            os.fsync(f.fileno())
        write_head(path, head["ledger_id"], entry, key)
    _PROCESS_CHARGES.append((str(path), entry))
    return entry


def upgrade_ledger(path) -> dict:
    """Chain a format_version 1 ledger, or seal an unkeyed one with the key set, in place, trusting its content.

    A version-1 ledger is chained (version 2); a version-2 ``auth: sha256`` ledger (its chain verified
    first) is re-sealed with the key set in the environment (``auth: hmac-sha256``). The old file is kept
    as ``path.v1`` / ``path.unkeyed`` (refused if that exists). The new header gets a fresh ``ledger_id``
    and is keyed as :func:`init_ledger` would be; every charge keeps its fields and gains (new) ``prev``
    and ``digest``. Nothing proves that an unkeyed ledger was not rewritten before: check its entries first.

    Returns
    -------
    dict
        :func:`ledger_status` of the upgraded ledger, with ``backup`` (the old file's path).

    Raises
    ------
    UsageError
        No ledger, nothing to upgrade (already keyed, or unkeyed with no key set), the backup exists, bad key.
    ArtifactError
        The old ledger breaks a rule (it is not upgraded).
    """
    path = Path(path)
    must_exist(path)
    with Locked(path):
        head, charges, _ = parse_ledger(path, read_text(path), unkeyed_ok=True)
        key = key_for(path)
        if head["format_version"] == LEDGER_VERSION and (key is None or head.get("auth") == "hmac-sha256"):
            raise UsageError(f"{path}: already format_version {LEDGER_VERSION} ({head.get('auth')}); nothing to "
                             f"upgrade" + ("" if key else f" (set {KEY_FILE_ENV} to seal an unkeyed ledger with "
                                                          "that key)") + ".")
        backup = path.with_name(path.name + (".v1" if head["format_version"] != LEDGER_VERSION else ".unkeyed"))
        if backup.exists():
            raise UsageError(f"{backup} exists; move it away before upgrading {path}.")
        new_head = sealed({**head, "format_version": LEDGER_VERSION, "ledger_id": secrets.token_hex(16),
                            "auth": "sha256" if key is None else "hmac-sha256",
                            "key_id": None if key is None else key_id(key), "prev": None}, key)
        lines, last = [new_head], new_head
        for c in charges:
            last = sealed({**c, "prev": last["digest"]}, key)
            lines.append(last)
        os.link(path, backup)
        write_head(path, new_head["ledger_id"], last, key)  # first: a version-1 ledger ignores a head file
        write_atomic(path, "".join(json.dumps(e) + "\n" for e in lines), replace=True)
    return {**ledger_status(path), "backup": str(backup)}


def ledger_status(path) -> dict:
    """Read and verify a ledger: dataset, total, spent, remaining (exact strings), entries and head.

    A version-2 ledger is verified as for spending (chain and head file); a
    version-1 ledger is read without verification (``verified`` False).

    Returns
    -------
    dict
        ``{"dataset_id", "rho_total", "rho_spent", "rho_remaining",
        "rho_*_float", "n_entries", "entries", "format_version", "verified",
        "auth", "ledger_id", "key_id", "head"}``; ``head`` = ``{"seq", "digest"}`` of the last line,
        worth noting outside the folder (it catches a rollback of both files).

    Raises
    ------
    UsageError
        No ledger, missing or wrong key. LedgerIntegrityError: broken chain, a ledger not keyed with
        the key set, or not the one ``PRIVAUDIT_LEDGER_ID`` pins. ArtifactError: corrupt ledger.
    """
    path = Path(path)
    must_exist(path)
    with Locked(path):
        head, charges, _ = parse_ledger(path, read_text(path))
    total, spent = _totals(head, charges)
    chained = head["format_version"] == LEDGER_VERSION
    last = charges[-1] if charges else head
    return {"format_version": head["format_version"], "dataset_id": head["dataset_id"],
            "created": head.get("created"), "verified": chained, "auth": head.get("auth"),
            "ledger_id": head.get("ledger_id"), "key_id": head.get("key_id"),
            "head": {"seq": int(last.get("seq", 0)), "digest": last.get("digest")},
            "rho_total": exact_text(total), "rho_spent": exact_text(spent), "rho_remaining": exact_text(total - spent),
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
