"""Built-in mechanisms for the auditor: the tabular release, DP-APVI and DP-PBB.

Both adapters run the library's own code path for everything that decides
privacy: contribution bounding (``privaudit.data.bounding``), exact counts
(``privaudit.data.counts``), and the release mechanism object
(``privaudit.release.mechanism.TabularRelease``: sensitivities, noise scales,
noise, E, and the event the claim is built from). A bug there changes what
the audit sees; nothing is re-implemented here.

Release view. A full release at the ICU-Sepsis shape has 256 M cells, too
many to repeat 1e5 times. :class:`ReleaseMechanism` outputs the released
values on a public *view*: every cell whose exact statistic differs between D
and D' plus ``view_extra`` other cells per family drawn with a fixed public
seed. The view is fixed before any trial, from the pair alone (the auditor's
choice, not the noise). Projecting the output onto a view is
post-processing, so a lower bound for the view's output is a lower bound
for the full release. The noise of the cells outside the view is independent
of the view (``add_noise`` draws every cell independently), so this loses no
power for a correct release; a release bug that couples cells (noise reused
across steps h) is visible only if coupled cells fall in the view, which the
extra cells make possible but not certain.

DP-APVI. Each run draws a whole release over the declared domain (every
visit and transition cell, exactly as ``release_logs`` would), fits
:class:`privaudit.learners.tabular.dp_apvi.DPAPVI` on it and outputs the greedy
policy's action table pi_h(s), shape (H, S). This costs one full release per
run: practical for small domains, minutes per hundred runs at the ICU-Sepsis
shape.

DP-PBB (:class:`DPPBBMechanism`). Counts through the library (bounded by
``data.bounding.bound_contributions``, capped by ``data.bounding.cap_per_cell``,
counted by ``stats.counts``: the code ``privaudit train --algo dp-pbb``
runs). Default view ``statistics`` (gray-box): a run outputs DP-PBB's noisy
capped visit counts and start counts on a public view of cells, drawn by the
learner's noise function at its plan's scales, and the claim is their share
of the budget (``audited_claim``). View ``policy`` (black-box): each run fits
:class:`privaudit.learners.tabular.dp_pbb.DPPBB` (visit counts, the K private
backups and their second moments, start counts) and outputs the policy's
action table pi_h(s), shape (H, S); the claim is the learner's whole event.
The noise is exact discrete Gaussian, so only the generic test applies.

DP-VAPVI: :class:`privaudit.audit.mechanisms.dp_vapvi.DPVAPVIMechanism` (the
noisy statistics of step h = H-1 through ``DPVAPVI.step_release``; see that
module), re-exported here.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from privaudit.audit.model import Claim
from privaudit.core.errors import UsageError
from privaudit.privacy import budget as budget_mod
from privaudit.core.spec import DomainSpec
from privaudit.release.mechanism import TabularRelease
from privaudit.data.bounding import bound_contributions, cap_per_cell
from privaudit.learners.tabular.dp_apvi import DPAPVI
from privaudit.learners.tabular.dp_pbb import DPPBB, MAX_PER_CELL_DEFAULT, capped_counts_from_frames
from privaudit.learners.tabular import dp_pbb as pbb_lib
from privaudit.audit.neighbours import make_pair, synthetic_pair
from privaudit.privacy import accounting
from privaudit.privacy.events import ComposedEvent
from privaudit.learners.tabular.counts import TabularCounts
from privaudit.data import counts

#: Extra public cells per family added to the release view.
VIEW_EXTRA = 64
#: Public seed that picks the extra view cells (not a noise seed).
VIEW_SEED = 20240601


def _fingerprint(logs: pl.DataFrame) -> tuple:
    h = logs.hash_rows(seed=3)
    return (logs.height, int((h % 1_000_003).sum()), int((h // 1_000_003 % 1_000_033).sum()))


class _LibraryStatistics:
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
        key = self._fp.get(_fingerprint(logs))
        if key is None:
            raise UsageError("this audit mechanism was prepared for a pair (D, D') and got other logs; "
                             "call prepare(d, d_prime) for them first.")
        return key

    def bind(self, d: pl.DataFrame, d_prime: pl.DataFrame) -> None:
        self._d, self._d_prime = d, d_prime
        self._fp = {_fingerprint(d): "d", _fingerprint(d_prime): "d_prime"}

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
        return Claim.from_event(self.release.event, self.delta or 1e-5, kind=kind, bound=self.budget.amount,
                                stated=self.budget.stated)

    def declared_sensitivity(self) -> dict:
        return {f: {"l1": p.l1, "l2": p.l2} for f, p in self.release.families.items()}

    def noise(self) -> dict:
        return {f: {"mechanism": self.budget.mechanism, "scale": p.scale} for f, p in self.release.families.items()}


class ReleaseMechanism(_LibraryStatistics):
    """The tabular release (``privaudit release``) seen on a public view.

    Parameters
    ----------
    spec : DomainSpec
    rho, epsilon, delta, mechanism, stationary
        As for :func:`privaudit.release.tabular.release_logs`.
    noise : {"exact", "rounded"}
        ``exact`` (default, what ``privaudit release`` releases: exact
        discrete Gaussian / Laplace samplers, so the audit tests what is
        released). ``rounded`` (numpy's continuous samplers, then rounded) is
        kept for the GDP opt-in only (``claim(kind="gaussian")``): the
        rounded Gaussian is a post-processing of the continuous Gaussian
        mechanism, hence sqrt(2 rho)-GDP; releases refuse it.
    view_extra : int
        Cells per family added to the view besides the changed ones.

    Notes
    -----
    Batched: ``fn(logs, rng, n_runs=N)`` returns (N, M) int64, the noisy
    values of the M view cells (visits, then transitions, then rewards, each
    in the release's stored units). Call :meth:`prepare` first (the auditor
    does).
    """

    name = "release"

    def __init__(self, spec, *, view_extra: int = VIEW_EXTRA, **kw):
        super().__init__(spec, **kw)
        self.view_extra = int(view_extra)
        self.view: dict[str, np.ndarray] = {}
        self.values: dict[str, dict[str, np.ndarray]] = {}

    def prepare(self, d: pl.DataFrame, d_prime: pl.DataFrame) -> "ReleaseMechanism":
        """Compute the exact statistics of D and D' (library path) and fix the view."""
        f0, f1 = self.bounded_frame(d), self.bounded_frame(d_prime)
        pick = np.random.default_rng(VIEW_SEED)
        full0, full1 = self.sa_families(f0), self.sa_families(f1)
        changed, vals0, vals1, sizes = {}, {}, {}, {}
        for fam in full0:
            a, b = full0[fam].reshape(-1), full1[fam].reshape(-1)
            changed[fam] = np.flatnonzero(a != b)
            sizes[fam] = a.size
            vals0[fam], vals1[fam] = a, b
        # transitions: one h-slice at a time (102 MB each at the ICU-Sepsis shape)
        tc, t0, t1 = [], [], []
        per_h = None
        for (h, s0), (_, s1) in zip(self.transition_slices(f0), self.transition_slices(f1)):
            per_h = s0.size
            idx = np.flatnonzero(s0.reshape(-1) != s1.reshape(-1))
            tc.append(idx + h * per_h)
        n_slices = 1 if self.stationary else self.spec.H
        sizes["transitions"] = per_h * n_slices
        changed["transitions"] = np.concatenate(tc)
        views = {}
        for fam in ("visits", "transitions", "rewards"):
            if fam not in sizes:
                continue
            extra = pick.choice(sizes[fam], size=min(self.view_extra, sizes[fam]), replace=False)
            views[fam] = np.union1d(changed[fam], extra)
        tv = views["transitions"]
        for (h, s0), (_, s1) in zip(self.transition_slices(f0), self.transition_slices(f1)):
            sel = tv[(tv >= h * per_h) & (tv < (h + 1) * per_h)] - h * per_h
            t0.append(s0.reshape(-1)[sel])
            t1.append(s1.reshape(-1)[sel])
        self.view = views
        self.values = {"d": {}, "d_prime": {}}
        for fam in views:
            if fam == "transitions":
                self.values["d"][fam], self.values["d_prime"][fam] = np.concatenate(t0), np.concatenate(t1)
            else:
                self.values["d"][fam] = vals0[fam][views[fam]]
                self.values["d_prime"][fam] = vals1[fam][views[fam]]
        self.changed_cells = {f: int(c.size) for f, c in changed.items()}
        self.bind(d, d_prime)
        return self

    def exact_statistics(self, logs: pl.DataFrame) -> dict:
        """Exact statistics on the view (it holds every changed cell, so the
        L1/L2 change equals that of the full statistics)."""
        return {f: v.copy() for f, v in self.values[self.which(logs)].items()}

    def __call__(self, logs: pl.DataFrame, rng: np.random.Generator, n_runs: int = 1) -> np.ndarray:
        if not self.values:
            raise UsageError("ReleaseMechanism: call prepare(d, d_prime) before running it.")
        vals = self.values[self.which(logs)]
        rngs = rng.spawn(len(vals))
        parts = [self.release.noise_family(f, np.broadcast_to(v, (n_runs, v.size)).copy(), rng=r)
                 for (f, v), r in zip(vals.items(), rngs)]
        return np.concatenate(parts, axis=1)


class DPAPVIMechanism(_LibraryStatistics):
    """DP-APVI end to end: a full release per run, then the learner; output pi_h(s).

    Parameters
    ----------
    spec : DomainSpec
    rho, epsilon, delta, mechanism, stationary
        The release's budget (as ``privaudit release``).
    noise : {"exact", "rounded"}
        As for :class:`ReleaseMechanism` (default ``exact``; ``rounded`` only
        for the GDP opt-in).
    learner_params : dict, optional
        Passed to :class:`privaudit.learners.tabular.dp_apvi.DPAPVI`.

    Notes
    -----
    Output: int64 array (H, S), the greedy action at each (h, s). Not batched
    (runs are spread over processes by the auditor).
    """

    name = "dp-apvi"

    def __init__(self, spec, *, learner_params: dict | None = None, **kw):
        super().__init__(spec, **kw)
        self.learner_params = dict(learner_params or {})
        self.exact: dict[str, dict] = {}

    def prepare(self, d: pl.DataFrame, d_prime: pl.DataFrame) -> "DPAPVIMechanism":
        for key, logs in (("d", d), ("d_prime", d_prime)):
            frame = self.bounded_frame(logs)
            fams = self.sa_families(frame)
            fams["transitions"] = np.stack([s for _, s in self.transition_slices(frame)])
            self.exact[key] = fams
        self.E = self.release.noise_bound(self.learner_params.get("failure_prob", 0.05))
        self.bind(d, d_prime)
        return self

    def exact_statistics(self, logs: pl.DataFrame) -> dict:
        return {f: v for f, v in self.exact[self.which(logs)].items()}

    def __call__(self, logs: pl.DataFrame, rng: np.random.Generator) -> np.ndarray:
        if not self.exact:
            raise UsageError("DPAPVIMechanism: call prepare(d, d_prime) before running it.")
        ex = self.exact[self.which(logs)]
        rel = self.release
        st = rel.streams(rng)  # the same child streams as TabularRelease.apply
        visits = rel.noise_family("visits", ex["visits"], rng=st["visits"])
        trans = rel.noise_family("transitions", ex["transitions"], rng=st["transitions"])
        rsum = None
        if "rewards" in ex:
            rsum = rel.noise_family("rewards", ex["rewards"], rng=st["rewards"]) / rel.families["rewards"].quantum
        counts = TabularCounts.from_arrays(visits if not self.stationary else visits, trans if not self.stationary
                                           else trans[0], horizon=self.spec.H, reward_sums=rsum, noisy=True)
        learner = DPAPVI(noise_bound=self.E, **self.learner_params)
        learner.fit(counts, self.spec.public_reward_scaled(), terminal_states=self.spec.terminal_states,
                    reward_range=self.spec.reward_range)
        return np.argmax(learner.policy_.table, axis=-1).astype(np.int64)

    def attack_scores(self, pair) -> list:
        """"The policy acts as the canary did": number of canary steps (h, s_h)
        where pi_h(s_h) equals the canary's action a_h."""
        steps = (pair.description.get("canary") or {}).get("steps")
        if not steps:
            return []
        h = np.array([s["h"] for s in steps])
        s_ = np.array([s["state"] for s in steps])
        a = np.array([s["action"] for s in steps])

        def canary_actions(out, h=h, s_=s_, a=a):
            return (out[:, h, s_] == a).sum(axis=1).astype(np.float64)
        return [("policy_follows_canary", canary_actions)]


# ----------------------------------------------------------------------------
# DP-PBB

class DPPBBMechanism(_LibraryStatistics):
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
        learner's own noise function (``dp_pbb._noise``) at the scales of its
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
    their cells (``neighbours.synthetic_units(spread=c')``), so the capped
    visits change by the declared L2 sqrt(2 c' k H) (when c' divides k H)
    and the starts by sqrt(2) k; ``synthetic-repeat`` puts each unit's k H
    transitions in one cell, where the cap must bite (its audit catches a
    cap that is not applied).
    """

    name = "dp-pbb"

    def __init__(self, spec, *, learner_params: dict | None = None, max_per_cell: int | None = None,
                 view: str = "statistics", **kw):
        super().__init__(spec, **{**kw, "noise": "exact"})
        if self.budget.family.pure:
            raise UsageError("dp-pbb is Gaussian / zCDP only: audit it with a rho claim, or an epsilon claim with "
                             "`delta` > 0 (Gaussian noise, not Laplace).")
        if view not in ("statistics", "policy"):
            raise UsageError(f"`view` must be 'statistics' or 'policy'. Found {view!r}.")
        self.view = view
        self.reward = spec.public_reward_scaled()
        if self.reward is None:
            raise UsageError("dp-pbb needs a spec with a public reward ($.public_reward).")
        self.learner_params = dict(learner_params or {})
        self.c = MAX_PER_CELL_DEFAULT if max_per_cell is None else int(max_per_cell)
        rb = spec.return_bound[1] if getattr(spec, "return_bound", None) is not None else None
        self.return_bound = rb
        self.plan = self._plan(self.budget.rho)
        self.exact: dict = {}
        self.values: dict = {}

    def _plan(self, rho: float):
        plan, _ = DPPBB(**self.learner_params).plan(
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
        out = [pbb_lib._noise(np.broadcast_to(vals["visits"], (n, vals["visits"].size)), self.plan.sigma_visits, rv),
               pbb_lib._noise(np.broadcast_to(vals["starts"], (n, vals["starts"].size)), self.plan.sigma_starts, rs)]
        return np.concatenate(out, axis=1)

    def _policy(self, key: str, rng: np.random.Generator) -> np.ndarray:
        learner = DPPBB(**self.learner_params).fit(
            self.exact[key], self.reward, terminal_states=self.spec.terminal_states,
            reward_range=self.spec.reward_range, return_bound=self.return_bound, budget=self.budget, rng=rng)
        return np.argmax(learner.policy_.table, axis=-1).astype(np.int64)

    def claim(self, kind: str = "generic"):
        """The accountant's claim for the learner's whole event (generic test only: exact discrete noise)."""
        if kind == "gaussian":
            raise UsageError("the GDP test is valid only for continuous Gaussian noise; dp-pbb draws exact "
                             "discrete Gaussian noise: use the generic test.")
        return Claim.from_event(self.plan.event, self.delta or 1e-5, kind=kind)

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
            raise UsageError("the GDP test is valid only for continuous Gaussian noise; dp-pbb draws exact "
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
            return f"dp-pbb at rho={self.budget.rho:g}: greedy policy (black-box)"
        return (f"dp-pbb at rho={self.budget.rho:g}: noisy capped visit counts and start counts (gray-box; claim "
                f"their share rho={accounting.event_rho(self.view_event()):.6g})")


from privaudit.audit.mechanisms.dp_vapvi import DPVAPVIMechanism  # noqa: E402 - after the tabular adapters

#: --mechanism names of the CLI -> adapter class
MECHANISMS = {"release": ReleaseMechanism, "dp-apvi": DPAPVIMechanism, "dp-pbb": DPPBBMechanism,
              "dp-vapvi": DPVAPVIMechanism}
