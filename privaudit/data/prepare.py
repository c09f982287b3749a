"""Prepared logs: validated once, bounded once, then handed to every consumer.

Each entry point (``privaudit release``, ``train``, ``audit``, ``pipeline``
and their Python functions) calls :func:`prepare_logs` once, after every
check that costs nothing (arguments, spec, budget, ledger), and passes the
:class:`PreparedLogs` down: the release, the learners and the auditor never
validate or bound the same logs again.

1. validate (``privaudit.data.validate.validate_logs``); :func:`refuse_fatal`
   is the one gate: every broken rule except :data:`BOUNDING_RULES` refuses the
   logs, with the located examples ``privaudit validate`` prints;
2. bound contributions (``privaudit.data.bounding.bound_contributions``: keep k
   episodes per unit, steps h < H, rewards clipped and scaled to [0, 1]).

The two reports are facts about the private data: they are shown to the data
holder only (terminal, local log beside an artifact) and never released.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, ClassVar

import polars as pl

from privaudit.data.bounding import BoundingReport, bound_contributions, cap_parts_of
from privaudit.data.io import ROW, scan_logs
from privaudit.data.repairs import RepairLimit, check_repairs
from privaudit.data.validate import BOUNDING_RULES, RULES, ValidationReport, validate_logs, violation_line
from privaudit.core.errors import LogReadError, UsageError, ValidationFailed
from privaudit.core.spec import DomainSpec


#: Examples listed per broken rule in the refusal message.
MAX_EXAMPLES = 20


@dataclass(frozen=True, repr=False)
class PreparedLogs:
    """Logs that passed the fatal rules, with their bounded view. PRIVATE.

    Attributes
    ----------
    path : Path
        The logs (a Parquet file or a folder of parts).
    spec : DomainSpec
        The spec they were validated and bounded under.
    validation : ValidationReport
        Private counts and examples (only bounding rules may be broken).
    bounding : BoundingReport
        What bounding dropped or clipped (private).
    raw : polars.LazyFrame
        The validated logs in the standard schema (``scan_logs`` without its
        ``row`` column), unbounded: the auditor's D, whose mechanism bounds
        each neighbouring dataset itself.
    bounded : polars.LazyFrame
        Standard columns (with ``row``); at most k episodes per unit, steps
        h < H, ``reward`` Float64 in [0, 1]. Lazy: each consumer selects its
        columns and collects them (the bounding decisions are already made).
    parts : tuple of polars.LazyFrame
        ``bounded`` in parts of whole units, to be read one after the other
        (:meth:`bounded_parts`); set by :meth:`with_cell_cap`, whose windows
        polars would otherwise hold for every part at once, and kept by
        :meth:`restricted`. Empty: one part. Derived from ``bounded``, so not
        an ``__init__`` argument: ``dataclasses.replace(logs, bounded=...)``
        resets it to one part rather than keep the parts of another frame.
    engine : "polars"
        Which engine prepared the logs (Spark's twin,
        ``privaudit.data.spark.prepare.SparkPreparedLogs``, says "spark").
    """

    path: Path
    spec: DomainSpec
    validation: ValidationReport
    bounding: BoundingReport
    raw: pl.LazyFrame
    bounded: pl.LazyFrame
    parts: tuple[pl.LazyFrame, ...] = field(default=(), init=False, compare=False)

    engine: ClassVar[str] = "polars"

    def close(self) -> None:
        """Nothing to release (Spark's twin drops its cached rows): every consumer of a run may call it."""

    def check_spec(self, spec: DomainSpec) -> None:
        """Raise UsageError unless ``spec`` is the spec these logs were prepared under."""
        if spec.hash() != self.spec.hash():
            raise UsageError(f"{self.path}: the logs were prepared under another spec "
                             f"(hash {self.spec.hash()}, given {spec.hash()}); prepare them with this spec.")

    def with_cell_cap(self, max_per_cell: int | None, *, stationary: bool) -> "PreparedLogs":
        """These logs with at most c steps per unit and cell (``data.bounding.cap_parts_of``).

        Parameters
        ----------
        max_per_cell : int or None
            c >= 1; None returns ``self`` unchanged.
        stationary : bool
            Cells (s, a) pooled over h (True) or (h, s, a) (False): the layout
            of the statistics that will be counted from the result.

        Returns
        -------
        PreparedLogs
            Same ``raw``; ``bounded`` capped; ``bounding`` with the cap's
            (private) counts. Pair it with sensitivities computed with the
            same c and layout (``privacy.sensitivity.count_sensitivity``).

        Raises
        ------
        UsageError
            c not an integer >= 1; the logs were already capped.
        LogReadError
            Reading the logs failed.
        """
        if max_per_cell is None:
            return self
        if self.bounding.max_per_cell is not None:
            raise UsageError(f"{self.path}: the logs are already capped at c={self.bounding.max_per_cell} "
                             "per cell; cap the uncapped PreparedLogs instead.")
        try:
            parts, report = cap_parts_of(self.bounded, self.bounding, max_per_cell, stationary=stationary)
        except pl.exceptions.PolarsError as e:
            raise read_failed(self.path, e) from None
        capped = pl.concat(parts, parallel=False) if len(parts) > 1 else parts[0]
        return replace(self, bounded=capped, bounding=report)._split(parts)

    def restricted(self, keep: Callable[[pl.LazyFrame], pl.LazyFrame]) -> "PreparedLogs":
        """These logs with ``keep`` applied to ``bounded`` and to each of its parts.

        Parameters
        ----------
        keep : callable, LazyFrame -> LazyFrame
            A row filter that keeps or drops whole privacy units (``ope.split.part_of``: the held-out
            split), so each filtered part is still made of whole units.

        Returns
        -------
        PreparedLogs
            ``bounded`` and :meth:`bounded_parts` filtered alike (still counted part by part); the same
            ``raw``, ``validation`` and ``bounding`` (the whole logs' private reports).
        """
        return replace(self, bounded=keep(self.bounded))._split([keep(p) for p in self.parts])

    def _split(self, parts) -> "PreparedLogs":
        """``self`` (just built by ``replace``) with its ``bounded`` in ``parts`` (one part: none kept)."""
        object.__setattr__(self, "parts", tuple(parts) if len(parts) > 1 else ())
        return self

    def bounded_parts(self) -> list[pl.LazyFrame]:
        """``bounded`` as lazy parts of whole units (``[bounded]`` when not split): count them one by one.

        Reading every row through ``bounded`` gives the same rows, but polars' streaming engine reads the
        parts of a capped ``bounded`` concurrently, holding every part's per-cell windows (issue 33).
        """
        return list(self.parts) or [self.bounded]

    def collect(self, columns: list[str]) -> pl.DataFrame:
        """The bounded rows restricted to ``columns`` (raises LogReadError on a read failure)."""
        return collect_or_raise(self.bounded.select(columns), self.path)

    def __repr__(self) -> str:  # private counts: shown only through the reports' own summaries
        return f"PreparedLogs(path={str(self.path)!r}, spec_hash={self.spec.hash()!r})"


def read_failed(path, e: Exception) -> LogReadError:
    """The LogReadError of a polars failure while reading ``path`` (its first line as the reason)."""
    reason = str(e).splitlines()[0] if str(e) else type(e).__name__
    return LogReadError(f"{path}: reading the logs failed ({reason}); nothing was computed from them.")


def collect_or_raise(lf: pl.LazyFrame, path) -> pl.DataFrame:
    """``lf.collect()``, a polars failure becoming a LogReadError that names ``path``."""
    try:
        return lf.collect()
    except pl.exceptions.PolarsError as e:
        raise read_failed(path, e) from None


def refuse_fatal(report: ValidationReport) -> None:
    """The one fatal-rule gate: raise ValidationFailed if a rule bounding cannot repair is broken.

    Parameters
    ----------
    report : ValidationReport
        From :func:`privaudit.data.validate.validate_logs`.

    Raises
    ------
    ValidationFailed
        Lists every broken fatal rule with its count and located examples
        (``[rule] message (column c)``, as ``privaudit validate`` prints them);
        its ``report`` is the validation report restricted to fatal rules.
        Both describe the private data: for the data holder only.
    """
    fatal = report.fatal
    if not fatal:
        return
    logs = report.path
    width = max(len(r) for r in fatal)
    lines = [f"{logs}: the logs break {len(fatal)} validation rule(s) that contribution bounding cannot "
             f"repair; they were refused before anything was computed from them. Fix them "
             f"(`privaudit validate {logs} --spec SPEC` lists them):"]
    lines += [f"  {r:<{width}}  {n:>10,}  {RULES[r][1]}" for r, n in fatal.items()]
    examples = [v for v in report.violations if v["rule"] in fatal]
    if examples:
        lines.append(f"first violations (at most {report.max_errors} per rule):")
        lines += [violation_line(v) for v in examples]
    d = report.to_dict()
    d["ok"] = False
    d["counts"] = {r: n for r, n in report.counts.items() if r not in BOUNDING_RULES}
    d["violations"] = examples
    d["bounding_rules"] = list(BOUNDING_RULES)
    raise ValidationFailed("\n".join(lines), d)


def bound_logs(path: Path, spec: DomainSpec,
               episodes: int | None = None) -> tuple[pl.LazyFrame, pl.LazyFrame, BoundingReport]:
    """(scanned, bounded, report): the logs scanned and bounded (``bounding.bound_contributions``).

    For logs that passed the fatal rules (:func:`refuse_fatal`); a polars
    failure is a LogReadError naming ``path``. ``episodes``: their number
    (``ValidationReport.episodes``), which lets bounding aggregate in parts
    of bounded memory. The report is PRIVATE.
    """
    scanned = scan_logs(path, spec)
    try:
        bounded, bounding = bound_contributions(scanned, spec, episodes)
    except pl.exceptions.PolarsError as e:
        raise read_failed(path, e) from None
    return scanned, bounded, bounding


def prepare_logs(path: str | Path, spec: DomainSpec, *, repairs: RepairLimit | None = None) -> PreparedLogs:
    """Validate the logs once, refuse fatal breaks, bound contributions once, stop on large repairs.

    Parameters
    ----------
    path : str or Path
        A Parquet file or a folder of Parquet parts (``privaudit.data.io``).
    spec : DomainSpec
        The public domain: S, A, H, reward range, privacy unit and k, columns.
    repairs : RepairLimit, optional
        The data holder's limit on what bounding may change
        (``privaudit.data.repairs.check_repairs``); None: no limit (a caller
        that spends nothing, or that checks the report itself).

    Returns
    -------
    PreparedLogs
        The validated raw view, the bounded view and both (private) reports.

    Raises
    ------
    LogReadError
        Unreadable logs (missing, not Parquet, corrupt, parts that disagree).
    ValidationFailed
        A rule that bounding cannot repair is broken (:func:`refuse_fatal`).
    RepairsRefused
        Bounding changes a larger share of the logs than ``repairs`` allows
        (a subclass of ValidationFailed; nothing is spent yet).

    Notes
    -----
    Call it after every check that needs no row (budget, ledger, outputs):
    this is where the private logs are first read. Bounding makes the
    contribution bounds that the sensitivities assume true
    (``privaudit.data.bounding``; docs/release.md, "The privacy model").
    """
    path = Path(path)
    report = validate_logs(path, spec, max_errors=MAX_EXAMPLES)
    refuse_fatal(report)
    scanned, bounded, bounding = bound_logs(path, spec, report.episodes)
    if repairs is not None:
        check_repairs(bounding, repairs, path)
    return PreparedLogs(path=path, spec=spec, validation=report, bounding=bounding,
                        raw=scanned.drop(ROW), bounded=bounded)


__all__ = ["BOUNDING_RULES", "PreparedLogs", "prepare_logs", "bound_logs", "refuse_fatal", "collect_or_raise", "read_failed"]
