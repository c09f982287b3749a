"""DP-PBB as an audit mechanism: its released statistics (gray-box) or its policy (black-box).


DP-PBB (:class:`DPPBBMechanism`). Counts through the library (bounded by
``data.bounding.bound_contributions``, capped by ``data.bounding.cap_per_cell``,
counted by ``data.counts``: the code ``privaudit train --algo dp-pbb``
runs). Default view ``statistics`` (gray-box): a run outputs DP-PBB's noisy
capped visit counts and start counts on a public view of cells, drawn by the
learner's noise function at its plan's scales, and the claim is their share
of the budget (``audited_claim``). View ``policy`` (black-box): each run fits
:class:`privaudit.learners.tabular.dp_pbb.DPPBB` (visit counts, the K private
backups and their second moments, start counts) and outputs the policy's
action table pi_h(s), shape (H, S); the claim is the learner's whole event.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from privaudit.audit.claim import Claim
from privaudit.audit.mechanisms.dp_apvi import DPAPVIMechanism
from privaudit.audit.mechanisms.library import VIEW_EXTRA, VIEW_SEED, LibraryStatistics
from privaudit.audit.neighbours import make_pair
from privaudit.audit.synthetic_pairs import synthetic_pair
from privaudit.core.errors import UsageError
from privaudit.core.spec import DomainSpec
from privaudit.data.bounding import bound_contributions, cap_per_cell
from privaudit.learners.tabular import pbb_noise as pbb_lib
from privaudit.learners.tabular.dp_pbb import DPPBB, MAX_PER_CELL_DEFAULT
from privaudit.learners.tabular.pbb_counts import capped_counts_from_frames
from privaudit.privacy import accounting
from privaudit.privacy.accounting import DEFAULT_REPORT_DELTA
from privaudit.privacy.events import ComposedEvent


class DPPBBMechanism(LibraryStatistics):
    """DP-PBB on a neighbouring pair, seen through its released statistics (default) or its policy.

    Parameters
    ----------
    spec : DomainSpec
        Must declare a public reward (DP-PBB backs up r(s') + V(s')).
    rho, epsilon, delta, mechanism, stationary, noise
        As for the other adapters (Gaussian only; ``noise`` is ignored: DP-PBB draws exact noise).
    learner_params : dict, optional
        :class:`DPPBB` parameters.
    max_per_cell : int, optional
        c (default :data:`privaudit.learners.tabular.dp_pbb.MAX_PER_CELL_DEFAULT`).
    view : {"statistics", "policy"}
        ``statistics`` (default, gray-box): the output of a run is DP-PBB's
        first releases, which no earlier output influences: the noisy capped
        visit counts n(s, a) (``pbb-visits``) on a public view of cells (every
        cell the pair changes plus :data:`VIEW_EXTRA` cells drawn with
        :data:`VIEW_SEED`) and the noisy start counts (``pbb-starts``) on the
        states the pair changes plus as many others. Both are drawn by the
        learner's own noise function (``pbb_noise.add_noise``) at the scales of its
        plan (``DPPBB.plan``), on the exact capped counts of the library path
        (``bound_contributions`` -> ``cap_per_cell`` ->
        ``capped_counts_from_frames``). Batched (``n_runs``). ``policy``
        (black-box): one full fit per run, output the greedy action table
        pi_h(s), shape (H, S) (batched by a loop over fits; a pair that
        does not change the policy cannot be told apart, whatever the claim).

    Notes
    -----
    Claim of the statistics view (:meth:`audited_claim`): the accountant's rho
    of the two released leaves, (split visits + split starts) x rho by
    default (0.15 rho): the share of the total claim that pays for what is
    output. A violation of it breaks the proof of the total claim (whose
    composition adds that share); "no violation found" says nothing about
    the backups. Canary (:meth:`make_pair`): ``synthetic`` builds units u*,
    v* from the spec that put exactly c' = min(c, M) transitions in each of
    their cells (``synthetic_pairs.synthetic_units(spread=c')``), so the capped
    visits change by the declared L2 sqrt(2 c' k H) (when c' divides k H)
    and the starts by sqrt(2) k; ``synthetic-repeat`` puts each unit's k H
    transitions in one cell, where the cap must bite (its audit catches a
    cap that is not applied).
    """

    name = "dp-pbb"
    #: The learner planned and fitted: a learner that reads the logs with DP-PBB's noise plan (a subclass of
    #: ``DPPBB``) is audited by a subclass setting ``name`` and ``learner_class`` (built by
    #: ``audit.mechanisms.registry.adapter_for``).
    learner_class = DPPBB

    def __init__(self, spec, *, learner_params: dict | None = None, max_per_cell: int | None = None,
                 view: str = "statistics", **kw):
        super().__init__(spec, **{**kw, "noise": "exact"})
        if self.budget.family.pure:
            raise UsageError(f"{self.name} is Gaussian / zCDP only: audit it with a rho claim, or an epsilon claim with "
                             "`delta` > 0 (Gaussian noise, not Laplace).")
        if view not in ("statistics", "policy"):
            raise UsageError(f"`view` must be 'statistics' or 'policy'. Found {view!r}.")
        self.view = view
        self.reward = spec.public_reward_scaled()
        if self.reward is None:
            raise UsageError(f"{self.name} needs a spec with a public reward ($.public_reward).")
        self.learner_params = dict(learner_params or {})
        self.c = MAX_PER_CELL_DEFAULT if max_per_cell is None else int(max_per_cell)
        rb = spec.return_bound[1] if getattr(spec, "return_bound", None) is not None else None
        self.return_bound = rb
        self.plan = self._plan(self.budget.rho)
        self.exact: dict = {}
        self.values: dict = {}

    def _plan(self, rho: float):
        plan, _ = self.learner_class(**self.learner_params).plan(
            rho, horizon=self.spec.H, n_states=self.spec.S, max_episodes=self.spec.max_episodes_per_unit,
            max_per_cell=self.c, stationary=self.stationary, reward_range=self.spec.reward_range,
            return_bound=self.return_bound, starts=True, unit_column=self.spec.unit_column or "episode_id")
        return plan

    # ----------------------------------------------------------------- pair
    def make_pair(self, logs: pl.DataFrame, spec: DomainSpec, strategy: str = "rare", *, rng):
        """The canary pair: ``synthetic`` spreads each unit over cells at the cap (attains the declared
        visit and start sensitivities), ``synthetic-repeat`` one repeated cell per unit, others as
        :func:`privaudit.audit.neighbours.make_pair`."""
        if strategy == "synthetic":
            pair = synthetic_pair(spec, pooled=self.stationary, logs=logs, spread=self.plan.sens["c"])
            pair.description["visits_change"] = {"statistic": "capped visits " + (
                "pooled over h" if self.stationary else "per step h"), "declared_l2": self.plan.sens["visits_l2"]}
            return pair
        return make_pair(logs, spec, strategy, rng=rng)

    def prepare(self, d: pl.DataFrame, d_prime: pl.DataFrame) -> "DPPBBMechanism":
        """Exact capped counts of D and D' (library path) and, for the statistics view, the view cells."""
        for key, logs in (("d", d), ("d_prime", d_prime)):
            bounded, report = bound_contributions(logs.lazy(), self.spec)  # report: private, discarded
            capped, _ = cap_per_cell(bounded, report, self.c, stationary=self.stationary)
            self.exact[key] = capped_counts_from_frames(capped, bounded, self.spec, stationary=self.stationary,
                                                        max_per_cell=self.c)
        if self.view == "statistics":
            pick = np.random.default_rng(VIEW_SEED)
            ex = {key: self.exact_statistics_of(key) for key in ("d", "d_prime")}
            self.values = {"d": {}, "d_prime": {}}
            for fam in ("visits", "starts"):
                a, b = ex["d"][fam].reshape(-1), ex["d_prime"][fam].reshape(-1)
                changed = np.flatnonzero(a != b)
                extra = pick.choice(a.size, size=min(VIEW_EXTRA if fam == "visits" else max(changed.size, 1),
                                                     a.size), replace=False)
                cells = np.union1d(changed, extra)
                self.values["d"][fam], self.values["d_prime"][fam] = a[cells], b[cells]
        self.bind(d, d_prime)
        return self

    def exact_statistics_of(self, key: str) -> dict:
        ex = self.exact[key]
        return {"visits": ex.visits.reshape(-1, ex.n_states * ex.n_actions), "starts": ex.starts}  # (G, S A)

    def exact_statistics(self, logs: pl.DataFrame) -> dict:
        """The pre-noise capped visits (G, S A) and start counts (S,) of D or D' (gray-box check)."""
        return self.exact_statistics_of(self.which(logs))

    def __call__(self, logs: pl.DataFrame, rng: np.random.Generator, n_runs: int | None = None) -> np.ndarray:
        if not self.exact:
            raise UsageError("DPPBBMechanism: call prepare(d, d_prime) before running it.")
        key = self.which(logs)
        if self.view == "policy":  # one full fit per run (runs are sequential: each is a whole learner)
            if n_runs is None:
                return self._policy(key, rng)
            return np.stack([self._policy(key, r) for r in rng.spawn(int(n_runs))])
        n = 1 if n_runs is None else int(n_runs)
        rv, _, rs = rng.spawn(3)  # the learner's streams: visits, backups, starts
        vals = self.values[key]
        out = [pbb_lib.add_noise(np.broadcast_to(vals["visits"], (n, vals["visits"].size)), self.plan.sigma_visits, rv),
               pbb_lib.add_noise(np.broadcast_to(vals["starts"], (n, vals["starts"].size)), self.plan.sigma_starts, rs)]
        return np.concatenate(out, axis=1)

    def _policy(self, key: str, rng: np.random.Generator) -> np.ndarray:
        learner = self.learner_class(**self.learner_params).fit(
            self.exact[key], self.reward, terminal_states=self.spec.terminal_states,
            reward_range=self.spec.reward_range, return_bound=self.return_bound, budget=self.budget, rng=rng)
        return np.argmax(learner.policy_.table, axis=-1).astype(np.int64)

    def claim(self, kind: str = "generic"):
        """The accountant's claim for the learner's whole event (generic test only: exact discrete noise)."""
        if kind == "gaussian":
            raise UsageError(f"the GDP test is valid only for continuous Gaussian noise; {self.name} draws exact "
                             "discrete Gaussian noise: use the generic test.")
        return Claim.from_event(self.plan.event, self.delta or DEFAULT_REPORT_DELTA, kind=kind)

    def view_event(self, plan=None) -> ComposedEvent:
        """The privacy event of what the statistics view outputs: the visits and starts leaves of the plan."""
        plan = self.plan if plan is None else plan
        leaves = tuple(e for e in plan.event.events if e.family in ("pbb-visits", "pbb-starts"))
        return ComposedEvent(leaves, label="dp-pbb visits and starts")

    def audited_claim(self, delta: float, rho_total: float | None = None, kind: str = "generic"):
        """The claim the audit tests: the whole event (policy view) or the share of ``rho_total`` that pays
        for the visits and starts (statistics view; rho_total: the total rho claimed for the DP-PBB run,
        default the budget it runs at).

        Raises
        ------
        UsageError
            ``kind`` gaussian (exact discrete noise: the generic test only).
        """
        if kind == "gaussian":
            raise UsageError(f"the GDP test is valid only for continuous Gaussian noise; {self.name} draws exact "
                             "discrete Gaussian noise: use the generic test.")
        plan = self.plan if rho_total is None else self._plan(float(rho_total))
        event = plan.event if self.view == "policy" else self.view_event(plan)
        return Claim.from_event(event, delta, kind=kind)

    def declared_sensitivity(self) -> dict:
        """Declared L2 of the statistics the gray-box check compares (``pbb_sensitivities`` via the plan)."""
        return {"visits": {"l2": self.plan.sens["visits_l2"]}, "starts": {"l2": self.plan.sens["starts_l2"]}}

    def noise(self) -> dict:
        return {"visits": {"mechanism": "gaussian", "scale": self.plan.sigma_visits},
                "starts": {"mechanism": "gaussian", "scale": self.plan.sigma_starts}}

    def attack_scores(self, pair) -> list:
        """Statistics view: the projection of the output on the exact change (D' - D) / sigma^2 (the
        Neyman-Pearson direction for independent Gaussian noise; public to the auditor, fixed before any
        run). Policy view: "the policy acts as the canary did" (as DP-APVI)."""
        if self.view == "policy":
            return DPAPVIMechanism.attack_scores(self, pair)
        if not self.values:
            return []
        w = np.concatenate([(self.values["d_prime"][f] - self.values["d"][f]) / s ** 2
                            for f, s in (("visits", self.plan.sigma_visits), ("starts", self.plan.sigma_starts))])

        def projection(out, w=w):
            return out.reshape(out.shape[0], -1) @ w
        return [("projection_on_exact_change", projection)]

    #: Tail thresholds of :meth:`design_events`, in sd above D' 's declared mean.
    DESIGN_Z = (2.0, 3.0)

    def design_events(self, pair) -> tuple:
        """Events fixed from the prepared pair before any run (statistics view): ``(events, reason)``.

        Score: the projection S = y . w, w = (x' - x) / sigma^2 per cell
        (:meth:`attack_scores`), x, x' the exact view values of D, D'. With
        noise of sd sigma, S has mean m0 = x . w on D and m0 + tau^2 on D',
        and sd tau = ||(x' - x) / sigma|| on both (tau = the claimed mu of
        the view when the pair attains the declared sensitivity). Events
        {S > m0 + tau (tau + z)} for z in :data:`DESIGN_Z`: the tail where
        a Gaussian's (epsilon, delta) trade-off is steepest, and where a
        mechanism with more change than declared shows it; and the midpoint
        {S > m0 + tau^2 / 2}, where a mechanism with less noise than declared
        (or none) separates D from D'. Nothing here
        depends on a run, so ``run_audit`` counts them on all runs (no
        selection split), each with alpha / (2 J). ``(None, None)`` (policy
        view, or a pair that changes nothing): the selection split.
        """
        if self.view == "policy" or not self.values:
            return None, None
        sig = {"visits": self.plan.sigma_visits, "starts": self.plan.sigma_starts}
        x0 = np.concatenate([self.values["d"][f].astype(np.float64) for f in sig])
        x1 = np.concatenate([self.values["d_prime"][f].astype(np.float64) for f in sig])
        s2 = np.concatenate([np.full(self.values["d"][f].size, sig[f] ** 2) for f in sig])
        w = (x1 - x0) / s2
        tau = float(np.sqrt(((x1 - x0) ** 2 / s2).sum()))
        if tau == 0:
            return None, None
        m0 = float(x0 @ w)
        (_, fn), = self.attack_scores(pair)
        events = [(f"projection_on_exact_change>z{z:g}", fn, m0 + tau * (tau + z), "+") for z in self.DESIGN_Z]
        events.append(("projection_on_exact_change>midpoint", fn, m0 + tau * tau / 2, "+"))
        return events, ("DP-PBB statistics view: the projection on the pair's exact change and its thresholds are "
                        "fixed from the exact pre-noise values and the plan's noise scales before any run")

    def describe(self) -> str:
        if self.view == "policy":
            return f"{self.name} at rho={self.budget.rho:g}: greedy policy (black-box)"
        return (f"{self.name} at rho={self.budget.rho:g}: noisy capped visit counts and start counts (gray-box; claim "
                f"their share rho={accounting.event_rho(self.view_event()):.6g})")
