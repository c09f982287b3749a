"""Named exceptions for privaudit.

Every error raised on bad user input is one of these, with a message that
says what is wrong, where (file, episode, row, column or key) and how to fix
it. The CLI maps them to exit codes (see ``EXIT_CODES``).
"""

from __future__ import annotations

import math


class PrivauditError(Exception):
    """Base class of every privaudit error."""

    exit_code = 1


class SpecError(PrivauditError, ValueError):
    """The domain spec is missing, unreadable or breaks its JSON Schema (exit 2)."""

    exit_code = 2


class UsageError(PrivauditError, ValueError):
    """A parameter has an invalid value, e.g. ``rho <= 0`` (exit 2)."""

    exit_code = 2


class UserCodeError(UsageError):
    """User code given as ``FILE.py:NAME`` (an audited mechanism, an attack
    score) cannot be loaded, has the wrong signature, raises, or returns an
    unusable value (exit 2: the given code is unusable). Raised only at the
    boundary where privaudit calls user code; errors of privaudit itself are
    never turned into this."""


class NoiseScaleTooLarge(UsageError):
    """A noise scale above what the exact sampler draws (its sensitivity too large for the budget; exit 2).

    Raised where the scale is checked; a planner that knows k (episodes per privacy unit) turns it into
    "k is too large" when a smaller k would fit (``privaudit.privacy.k_bound``)."""


class MissingInputError(UsageError):
    """An input path given on the command line does not exist: logs, a spec,
    a release, a policy, an MDP file (exit 2, a usage error as click's own
    missing-path errors; an input that exists but is unreadable or corrupt is
    invalid data, exit 1)."""


class LogReadError(PrivauditError, ValueError):
    """The logs cannot be read: not Parquet, an empty folder, unusable column types (exit 1)."""

    exit_code = 1


class ValidationFailed(PrivauditError, ValueError):
    """The logs break one or more validation rules (exit 1).

    ``report`` holds the full validation report (a dict, see
    ``privaudit.data.validate``).
    """

    exit_code = 1

    def __init__(self, message: str, report: dict | None = None):
        super().__init__(message)
        self.report = report


class RepairsRefused(ValidationFailed):
    """Contribution bounding would change more of the logs than the data holder's
    ``max_repair_share`` allows (``privaudit.data.repairs``), and they did not
    accept it: the run stops before anything is spent, charged or written
    (exit 1, as logs refused by validation)."""


class ArtifactError(PrivauditError, ValueError):
    """An artifact (release, policy, report, MDP file) is missing, corrupt,
    of an unknown format version, or does not match the spec (exit 1)."""

    exit_code = 1


class BudgetExceededError(PrivauditError, ValueError):
    """A release would exceed the budget recorded in the ledger (exit 3)."""

    exit_code = 3


class LedgerIntegrityError(ArtifactError):
    """The budget ledger's hash chain or head file does not verify: a line was
    edited, removed, inserted or moved, or the last lines were deleted. The
    ledger refuses to spend (exit 3, the first bad line named)."""

    exit_code = 3


class AccountingError(PrivauditError, ValueError):
    """A privacy event or conversion the accountant does not support (exit 2)."""

    exit_code = 2


class EngineError(PrivauditError, RuntimeError):
    """The compute engine (Apache Spark, ``--engine spark``) failed while it read,
    checked, bounded or counted the logs: the JVM could not start, a query failed
    analysis, a job failed (out of memory, a lost executor, a corrupt part), or
    the driver lost the JVM (exit 1). Raised before the failing part's output is
    written or its budget charged; the message names the cause in one line and
    ends with :data:`NOTHING_DONE` (a pipeline that had charged earlier parts
    says :data:`PARTS_KEPT` instead)."""

    exit_code = 1


#: How an :class:`EngineError` ends: what the failure left (nothing).
NOTHING_DONE = "Nothing was written and no budget was charged."
#: How it ends in a pipeline that had already charged parts (kept, marked incomplete: said on the line before).
PARTS_KEPT = ("Nothing more was written or charged: only the parts charged before it are kept (see above; the "
              "same command finishes the run).")


EXIT_CODES = {
    "ok": 0,
    "invalid_data": 1,
    "usage": 2,
    "budget_or_violation": 3,
}


class Terminated(BaseException):
    """Raised in the main thread when the process receives SIGTERM (see ``privaudit.cli``).

    A BaseException, like KeyboardInterrupt, so no ``except Exception`` swallows
    it and every context manager (temporary outputs) unwinds.
    """


def interrupted_import(e: BaseException) -> bool:
    """True when ``e`` is a Ctrl-C that an import turned into an ImportError.

    A KeyboardInterrupt during the initialisation of a compiled module built
    with pybind11 (several of matplotlib's and scipy's, imported lazily by the
    figures) is re-raised as ``ImportError("initialization failed")`` from
    it; the CLI treats that as the interrupt it is (exit 130, no traceback).
    """
    return isinstance(e, ImportError) and isinstance(e.__cause__ or e.__context__, KeyboardInterrupt)


def positive_finite(name: str, value, error: type[PrivauditError] = UsageError) -> float:
    """``float(value)`` if it is a finite number > 0 (not a bool), else ``error`` naming ``name``.

    The one check of a positive finite parameter (noise scales, sensitivities, budgets), shared
    by the mechanisms (``UsageError``) and the privacy events (``AccountingError``).
    """
    if isinstance(value, bool):
        raise error(f"`{name}` must be a positive finite number. Found {value!r}.")
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise error(f"`{name}` must be a positive finite number. Found {value!r}.") from None
    if not (f > 0 and math.isfinite(f)):
        raise error(f"`{name}` must be a positive finite number. Found {value!r}.")
    return f
