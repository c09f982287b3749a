"""How much contribution bounding changed the logs, and the data holder's stop before spending.

Contribution bounding (:mod:`privaudit.data.bounding`) is the right DP repair
for logs that break the spec's declared bounds: it keeps k episodes per unit,
drops steps h >= H, clips rewards into ``reward_range`` and running returns at
``return_bound``. But when the *declaration* is wrong (a ``reward_range``
[0, 1] for logs coding death as -1, an H shorter than the stays) the repair
silently changes what is estimated. :func:`repairs_of` lists each repair as a
count and a share; :func:`check_repairs` stops a run whose largest share is
above the data holder's limit (:class:`RepairLimit`, default
:data:`MAX_REPAIR_SHARE_DEFAULT`) unless they accept it.

These counts and the stop/go decision depend on the private logs: they are
shown to the data holder on their own machine (stderr, the local log beside an
output), before any release, and are never part of one. Nothing shareable
depends on them (docs/validate.md, "How much did bounding change?").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from privaudit.core.errors import RepairsRefused, UsageError
from privaudit.data.bounding import BoundingReport

#: Default largest share of the logs one repair may change before a run stops (5%).
MAX_REPAIR_SHARE_DEFAULT = 0.05


@dataclass(frozen=True)
class RepairLimit:
    """The data holder's limit on what contribution bounding may change before a run spends anything.

    Raises
    ------
    UsageError
        ``max_share`` not a number in [0, 1], ``accept`` not a bool.
    """

    #: In [0, 1]: a run stops (:class:`~privaudit.core.errors.RepairsRefused`) when any gated repair of
    #: :func:`repairs_of` changes a larger share of what it counts in. Default :data:`MAX_REPAIR_SHARE_DEFAULT`.
    max_share: float = MAX_REPAIR_SHARE_DEFAULT
    #: True: go on whatever the shares (they are still reported).
    accept: bool = False

    def __post_init__(self):
        s = self.max_share
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not (math.isfinite(s) and 0 <= s <= 1):
            raise UsageError(f"`max_repair_share` must be a number in [0, 1]. Found {s!r}.")
        if not isinstance(self.accept, bool):
            raise UsageError(f"`accept_repairs` must be True or False. Found {self.accept!r}.")


@dataclass(frozen=True)
class Repair:
    """One repair of contribution bounding: ``count`` of ``total`` ``unit`` changed. PRIVATE counts.

    ``gated`` repairs come from the spec's declarations (k, H, ``reward_range``,
    ``return_bound``) and can stop a run; the per-cell cap is a choice of the
    run itself (``max_per_cell``), reported but not gated.
    """

    rule: str
    what: str
    count: int
    total: int
    unit: str
    gated: bool = True

    @property
    def share(self) -> float:
        """count / total (0 when total is 0)."""
        return self.count / self.total if self.total else 0.0

    def line(self) -> str:
        """``what: count of total unit (share)``."""
        return f"{self.what}: {self.count:,} of {self.total:,} {self.unit} ({self.share:.2%})"


def repairs_of(report: BoundingReport) -> list[Repair]:
    """Every repair bounding made, with what it counts in (zero counts included).

    Parameters
    ----------
    report : BoundingReport
        From ``bound_contributions`` (and ``cap_per_cell``).

    Returns
    -------
    list of Repair
        One per rule, counted as ``BoundingReport.repair_counts`` counts it
        (in episodes: dropped by keep-k of all; truncated at H, with a
        clipped reward, with a clipped return, of the kept ones) and, when a
        per-cell cap ran and its count is known, its dropped steps of the
        steps it saw (not gated). No privacy unit is ever dropped whole (the
        keep-k rule keeps k >= 1 episodes of each).
    """
    n = report.repair_counts()
    kept_unit = "episodes kept"
    out = [
        Repair("too_many_episodes", f"episodes dropped (more than k={report.k} per unit; "
                                    f"{report.units_over_k:,} units over k, "
                                    f"{report.rows_dropped_with_episodes:,} rows)",
               *n["too_many_episodes"], "episodes"),
        Repair("episode_too_long", f"episodes truncated at H={report.H} ({report.steps_dropped:,} steps dropped)",
               *n["episode_too_long"], kept_unit),
        Repair("reward_out_of_range", f"episodes with a reward clipped into the declared reward_range "
                                      f"({report.rewards_clipped:,} rows clipped)",
               *n["reward_out_of_range"], kept_unit if report.episodes_rewards_clipped is not None else "rows kept"),
        Repair("return_above_bound", "returns clipped at the declared return_bound",
               *n["return_above_bound"], kept_unit),
    ]
    if "max_per_cell" in n:
        out.append(Repair("max_per_cell", f"steps dropped by the per-cell cap c={report.max_per_cell}",
                          *n["max_per_cell"], "steps", gated=False))
    return out


def repairs_text(report: BoundingReport) -> str:
    """The repairs that changed something, one line each with its share (PRIVATE; for the data holder)."""
    lines = ["  " + r.line() for r in repairs_of(report) if r.count]
    return "\n".join(lines) if lines else "  nothing: every row, reward and episode is kept as logged"


def check_repairs(report: BoundingReport, limit: RepairLimit, where) -> list[Repair]:
    """Stop a run (before it spends anything) whose repairs change more than ``limit.max_share``.

    Parameters
    ----------
    report : BoundingReport
        What bounding did to the logs.
    limit : RepairLimit
        The data holder's limit and whether they accept larger repairs.
    where : str or Path
        The logs, for the message.

    Returns
    -------
    list of Repair
        The gated repairs above the limit (empty when none; non-empty only
        when ``limit.accept``).

    Raises
    ------
    RepairsRefused
        A gated repair's share is above ``limit.max_share`` and
        ``limit.accept`` is False (exit 1). The message lists every repair
        above the limit and how to go on; it quotes private counts, for the
        data holder's terminal only.
    """
    over = [r for r in repairs_of(report) if r.gated and r.count and r.share > limit.max_share]
    if over and not limit.accept:
        raise RepairsRefused(
            f"{where}: contribution bounding would change more of the logs than `max_repair_share` "
            f"{limit.max_share:g} allows; stopped before anything was spent, charged or written:\n"
            + "\n".join("  " + r.line() for r in over)
            + "\nA share this large usually means the spec declares the wrong reward_range, horizon H, "
              "privacy_unit.max_episodes k or return_bound for these logs, and the results would estimate "
              "something else. Fix the spec, or pass `accept_repairs` to go on (a decision on private "
              "counts, on this machine: it is recorded in no shareable output).")
    return over


__all__ = ["MAX_REPAIR_SHARE_DEFAULT", "RepairLimit", "Repair", "repairs_of", "repairs_text", "check_repairs"]
