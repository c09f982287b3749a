"""The base of the built-in audit adapters: exact statistics through the library's own code path.

The adapters (:mod:`~privaudit.audit.mechanisms.release`,
:mod:`~privaudit.audit.mechanisms.dp_apvi`, :mod:`~privaudit.audit.mechanisms.dp_pbb`)
run the library's own code for everything that decides privacy: contribution
bounding (``privaudit.data.bounding``), exact counts (``privaudit.data.counts``),
and the release mechanism object (``privaudit.release.mechanism.TabularRelease``:
sensitivities, noise scales, noise, and the event the claim is built from). A
bug there changes what the audit sees; nothing is re-implemented here.
"""

from __future__ import annotations

import polars as pl

from privaudit.audit.claim import Claim
from privaudit.core.errors import UsageError
from privaudit.core.spec import DomainSpec
from privaudit.data import counts
from privaudit.data.bounding import bound_contributions
from privaudit.privacy import budget as budget_mod
from privaudit.privacy.accounting import DEFAULT_REPORT_DELTA
from privaudit.release.mechanism import TabularRelease

#: Extra public cells per family added to the release view.
VIEW_EXTRA = 64
#: Public seed that picks the extra view cells (not a noise seed).
VIEW_SEED = 20240601


def fingerprint(logs: pl.DataFrame) -> tuple:
    h = logs.hash_rows(seed=3)
    return (logs.height, int((h % 1_000_003).sum()), int((h // 1_000_003 % 1_000_033).sum()))


class LibraryStatistics:
    """Exact statistics of logs through the library's bounding and counting."""

    #: privaudit's own code: its output depends only on the dataset it is given, the spec and its own
    #: noise (an audit report on a pair that reads no logs may then be shared: ``audit.report.sharing``).
    SELF_CONTAINED = True

    def __init__(self, spec: DomainSpec, *, rho=None, epsilon=None, delta=None, mechanism="gaussian",
                 stationary=False, noise="exact", budget=None):
        self.spec, self.stationary, self.noise_mode = spec, bool(stationary), noise
        if budget is None:  # an entry point of its own: resolve the budget here, once
            budget = budget_mod.resolve_budget(rho=rho, epsilon=epsilon, delta=None if rho is not None else delta,
                                               mechanism=mechanism)
        elif any(v is not None for v in (rho, epsilon)):
            raise UsageError("give either `budget` (a resolved Budget) or `rho`/`epsilon`, not both.")
        self.budget = budget
        self.delta = delta
        self.release = TabularRelease.plan(spec, self.budget, stationary=self.stationary, noise=noise)
        self._fp: dict[tuple, str] = {}

    def bounded_frame(self, logs: pl.DataFrame) -> pl.DataFrame:

        bounded, _ = bound_contributions(logs.lazy(), self.spec)  # bounding report: private, discarded
        cols = ["step", "state", "action", "next_state"]
        return bounded.select([pl.col(c).cast(pl.Int32) for c in cols] + [pl.col("reward")]).collect()

    def sa_families(self, frame: pl.DataFrame) -> dict:

        out = {"visits": counts.visit_counts(frame, self.spec, stationary=self.stationary)}
        if "rewards" in self.release.families:
            out["rewards"] = counts.reward_sums(frame, self.spec, stationary=self.stationary,
                                                quantum=self.release.families["rewards"].quantum)
        return out

    def transition_slices(self, frame: pl.DataFrame):

        return counts.iter_transition_counts(frame, self.spec, stationary=self.stationary)

    def which(self, logs: pl.DataFrame) -> str:
        """'d' or 'd_prime' for a dataset bound by ``prepare``."""
        for key in ("d", "d_prime"):
            if logs is getattr(self, "_" + key, None):
                return key
        key = self._fp.get(fingerprint(logs))
        if key is None:
            raise UsageError("this audit mechanism was prepared for a pair (D, D') and got other logs; "
                             "call prepare(d, d_prime) for them first.")
        return key

    def bind(self, d: pl.DataFrame, d_prime: pl.DataFrame) -> None:
        self._d, self._d_prime = d, d_prime
        self._fp = {fingerprint(d): "d", fingerprint(d_prime): "d_prime"}

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_d", None)
        state.pop("_d_prime", None)
        return state

    def claim(self, kind: str = "generic"):
        """The claim of the release's event (``Claim.from_event``; CKS conversion for rho).

        Parameters
        ----------
        kind : {"generic", "gaussian"}
            ``gaussian`` opts in to the GDP test; allowed only for Gaussian
            noise in ``rounded`` mode (continuous Gaussian noise, then
            rounded: a post-processing of a sqrt(2 rho)-GDP mechanism).

        Raises
        ------
        UsageError
            ``gaussian`` with Laplace or exact (discrete Gaussian) noise.
        """
        gdp_ok = not self.budget.family.pure and self.noise_mode == "rounded"
        if kind == "gaussian" and not gdp_ok:
            raise UsageError(f"the GDP test is valid only for continuous Gaussian noise (rounded); this release "
                             f"uses {self.budget.mechanism} noise in {self.noise_mode!r} mode: use the generic test.")
        return Claim.from_event(self.release.event, self.delta or DEFAULT_REPORT_DELTA, kind=kind, bound=self.budget.amount,
                                stated=self.budget.stated)

    def declared_sensitivity(self) -> dict:
        return {f: {"l1": p.l1, "l2": p.l2} for f, p in self.release.families.items()}

    def noise(self) -> dict:
        return {f: {"mechanism": self.budget.mechanism, "scale": p.scale} for f, p in self.release.families.items()}
