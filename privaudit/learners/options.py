"""What a training run on logs is given besides the logs, the spec and the learner's parameters.

Two small frozen objects shared by the tabular and linear ``train_from_logs`` and
``train_dp_pbb`` instead of a dozen keyword parameters threaded through each:

* :class:`BudgetRequest`: the budget as the user gave it (``rho``, or ``epsilon``
  with ``delta``, and the noise family), resolved by the learner that spends it;
* :class:`RunContext`: where the run reports (the budget ledger, the run id and
  output folder named in the ledger entry, the messages to the data holder)
  and the data holder's limit on what contribution bounding may change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from privaudit.data.repairs import RepairLimit
from privaudit.privacy import budget as budget_mod
from privaudit.privacy.budget import Budget

__all__ = ["BudgetRequest", "RunContext"]


@dataclass(frozen=True)
class BudgetRequest:
    """A training run's privacy budget as given (nothing resolved yet).

    Attributes
    ----------
    rho : float, optional
        zCDP budget (with ``delta``: reported as (epsilon, delta)-DP at that delta).
    epsilon, delta : float, optional
        An (epsilon, delta)-DP target instead of ``rho`` (Gaussian: converted
        with the tight Canonne-Kamath-Steinke bound), or ``epsilon`` alone
        (Laplace, pure epsilon-DP; a count release only). The same meaning as
        the CLI's ``--rho/--epsilon/--delta`` (docs/privacy.md, "Budget flags").
    mechanism : {"gaussian", "laplace"}, optional
        The noise family asked for; None (default): the one the budget names
        (Laplace for ``epsilon`` alone, else Gaussian).
    """

    rho: float | None = None
    epsilon: float | None = None
    delta: float | None = None
    mechanism: str | None = None

    @property
    def given(self) -> bool:
        """True when any of ``rho``, ``epsilon``, ``delta`` was given."""
        return any(v is not None for v in (self.rho, self.epsilon, self.delta))

    def resolve(self, families=budget_mod.NOISE_FAMILY_NAMES) -> Budget:
        """The resolved budget (``privacy.budget.resolve_budget``; its errors: none or both forms given, ...).

        ``families``: the noise families of the learner that spends it (``("gaussian",)``
        for a zCDP-only learner: ``epsilon`` alone is then refused, naming the accepted forms).
        """
        return budget_mod.resolve_budget(rho=self.rho, epsilon=self.epsilon, delta=self.delta,
                                         mechanism=self.mechanism, families=families)


@dataclass(frozen=True)
class RunContext:
    """Where a training run reports.

    Attributes
    ----------
    ledger : path, optional
        Budget ledger (``privaudit budget init``): checked before any row is
        read, charged with the run's privacy event once the learner is fitted.
    run : str, optional
        The run's identifier in the ledger entry (default: a new random one).
    output : optional
        The folder the run writes, named in the ledger entry.
    echo : callable, optional
        Messages for the data holder (stderr in the CLI).
    repairs : RepairLimit
        The data holder's limit on what contribution bounding may change
        before anything is spent (``privaudit.data.repairs``; default: stop
        above 5% unless accepted), checked on logs the run prepares itself.
    engine : {"polars", "spark"}
        Who reads, checks, bounds and counts logs the run prepares itself
        (``privaudit.data.engines.prepare_on``): polars here, or Apache Spark.
    spark : SparkSession or str, optional
        With ``engine="spark"``: the session, a master URL or a Spark Connect URL.
    """

    ledger: str | Path | None = None
    run: str | None = None
    output: object = None
    echo: Callable[[str], None] | None = None
    repairs: RepairLimit = field(default_factory=RepairLimit)
    engine: str = "polars"
    spark: Any = None

    def say(self, message: str) -> None:
        """Pass ``message`` to ``echo`` (nothing without one)."""
        if self.echo is not None:
            self.echo(message)
