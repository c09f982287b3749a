"""DP-PBB: pessimistic value iteration with private Bellman backups (tabular, offline, rho-zCDP).

The learner that learns from outcomes under DP at hospital scale (issue 12).
Where DP-APVI (Qiao & Wang 2023) releases every transition count n(s, a, s') once
and pays for the worst case of S noisy cells in every backup (its
C2 S H E iota / n term), DP-PBB releases, for each of the H backups, only
what that backup needs: the noisy (s, a)-sums of W_{h+1}(s') = r(s') +
V_{h+1}(s') over the logged transitions (a "private Bellman backup"), with
fresh Gaussian noise that is independent of W_{h+1}. The error of a backup
is then one Gaussian draw of standard deviation sigma per (s, a), divided by
the visit count, instead of S noisy cells. Pessimism comes from lower
confidence bounds that hold simultaneously for every (h, s, a) and every
value function (the backed-up W is learned from the same logs) with
probability >= 1 - failure_prob, so the learner's value at the start
distribution (``certified_value``) is a lower bound on the true value of the
policy it outputs (docs/learners.md, "DP-PBB": the privacy proof;
docs/certificates.md, "DP-PBB": the theorem and its proof). Values are reused
across steps only for pooled counts (time-homogeneous dynamics, the caller's
declaration) with a reward the same at every step; otherwise every step is
backed up.

The modules: :mod:`privaudit.learners.tabular.pbb_counts` (the exact capped counts, PRIVATE),
:mod:`privaudit.learners.tabular.pbb_noise` (sensitivities and the noise plan, public facts only),
:mod:`privaudit.learners.tabular.pbb_backup` (one private backup and its lower confidence bound),
:mod:`privaudit.learners.tabular.pbb_logs` (the run on logs: plan, ledger check, count, fit, charge),
this module (the learner: fit, plan, certificate).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from privaudit.core.envelope import envelope
from privaudit.core.errors import UsageError
from privaudit.core.formatting import num
from privaudit.learners.tabular.base import TabularLearnerBase, greedy_with_ties, known_reward
from privaudit.learners.confidence import gaussian_tail, start_mean_lower_bound, stitched_log, uniform_log_term
from privaudit.learners.tabular import pbb_logs, pbb_noise
from privaudit.learners.tabular.pbb_backup import Widths, backup, backup_ranges, n_events
from privaudit.learners.tabular.pbb_counts import CappedCounts
from privaudit.learners.tabular.pbb_logs import PBBRun
from privaudit.learners.tabular.pbb_noise import SPLIT_DEFAULT, PBBPlan, plan_noise
from privaudit.privacy.k_bound import k_bound
from privaudit.learners.tabular.pessimism import FAILURE_PROB_DEFAULT, reward_frame
from privaudit.learners.policy import Policy
from privaudit.learners.policy_manifest import PolicyPrivacy
from privaudit.privacy import samplers
from privaudit.privacy.budget import Budget, resolve_budget
from privaudit.privacy.events import ComposedEvent, Neighbouring

__all__ = ["DPPBB", "PBBRun", "MAX_PER_CELL_DEFAULT", "SELECTION_DEFAULT", "N_BACKUPS_DEFAULT"]

#: Per-unit per-cell cap c used from logs unless given (13.5% of the steps of ICU-Sepsis clinicians'
#: logs revisit a cell of their stay and are dropped at c = 1).
MAX_PER_CELL_DEFAULT = 1
#: Pessimism of the action *selection*: the policy maximises est - selection * (est - lcb);
#: the certificate always uses the lower bound lcb of the selected action.
SELECTION_DEFAULT = 0.4
#: Private backups (the last K = min(n_backups, H) steps h = H-1 .. H-K); earlier steps reuse step H-K
#: (monotone values). None: all H.
N_BACKUPS_DEFAULT = 6


class DPPBB(TabularLearnerBase):
    """DP-PBB: pessimistic value iteration with private Bellman backups (rho-zCDP).

    Parameters
    ----------
    rho : float
        zCDP budget of the learner (all its releases). ``math.inf``: no noise
        (the non-private reference; the policy is then NOT private).
    split : dict, optional
        Shares of rho: ``visits``, ``backups``, ``second_moments`` (0 turns
        the Bernstein widths off: Hoeffding only), ``starts``.
        Default :data:`SPLIT_DEFAULT`.
    failure_prob : float, default 0.05
        The certificate fails (some lower bound is violated) w.p. at most this.
    tie_break : {"visits", "first"}
        Among equal Q values: the action with the largest noisy count, or the lowest index.
    random_state : int or None
        Seed for the noise (tests and experiments only; None: OS entropy).

    Attributes
    ----------
    plan_ : PBBPlan
        Sensitivities and noise scales.
    event_ : ComposedEvent or None
        The privacy event (None without noise).
    guarantee_ : dict or None
        ``Budget.guarantee(event_)`` (rho, (epsilon, delta) at ``delta_report``).
    visits_noisy_ : ndarray (G, S, A)
        The released counts (G = 1 pooled, H per step).
    starts_noisy_ : ndarray (S,) or None
    Q_, V_, trusted_, penalty_, policy_, ...
        As :class:`privaudit.learners.tabular.base.TabularLearnerBase`
        (``penalty_`` = the plug-in estimate minus the lower bound).

    References
    ----------
    docs/learners.md "DP-PBB" (privacy proof), docs/certificates.md "DP-PBB" (validity). Pessimism:
    Jin, Yang & Wang 2021 (PEVI), Yin & Wang 2021 (APVI); Bellman backups
    released with fresh noise: the "private Q-value" idea of Vietri et al.
    2020 applied offline; time-uniform bounds: Howard et al. 2021.
    """

    algorithm = "dp-pbb"
    private = True
    reads = "logs"
    options = frozenset({"max_per_cell"})
    pipeline_output = "the DP-PBB policy (its noisy counts and private Bellman backups are not output)"
    #: Its share of the pipeline's budget: the rule ``pbb_share`` (``core.registry.SHARE_RULES``).
    pipeline_share = "pbb_share"
    #: What the ledger entry of its pipeline part adds.
    ledger_note = "private Bellman backups"
    _param_names = ("rho", "split", "failure_prob", "selection", "n_backups", "tie_break")

    def __init__(self, *, rho: float = 1.0, split: dict | None = None, failure_prob: float = FAILURE_PROB_DEFAULT,
                 selection: float = SELECTION_DEFAULT, n_backups: int | None = N_BACKUPS_DEFAULT,
                 tie_break: str = "visits", random_state: int | None = None, delta_report: float | None = None):
        self._store_params(locals())

    # ---------------------------------------------------------------- fit
    def fit(self, counts: CappedCounts, reward, *, terminal_states: Sequence[int] = (),
            reward_range: Sequence[float] | None = None, return_bound: float | None = None,
            budget: Budget | None = None, spec_hash: str | None = None, rng: np.random.Generator | None = None,
            starts: bool | None = None, seeded: bool = False) -> "DPPBB":
        """Release the statistics with noise and run pessimistic value iteration on them.

        Parameters
        ----------
        counts : CappedCounts
            Exact capped counts (PRIVATE); only noisy versions leave ``fit``.
        reward : ndarray (S,) or (S, A) or (H, S, A)
            Public reward in [0, 1] (scaled by the declared range): r(s') on
            entering s' (ICU-Sepsis: 1 on 714), or a known mean reward r_h(s, a).
        terminal_states : sequence of int
            Public absorbing states.
        reward_range : (r_min, r_max), optional
            Declared range (:class:`privaudit.learners.tabular.pessimism.RewardFrame`).
        return_bound : float, optional
            Declared bound on the return of an episode (spec), in declared
            units; W_{h+1} is clipped to min(H - h, bound) in planning units.
        budget : Budget, optional
            The Gaussian budget; overrides ``rho`` and states the guarantee.
        spec_hash : str, optional
            Recorded in the policy.
        rng : numpy.random.Generator, optional
            Noise source (default: from ``random_state``, else OS entropy).
        starts : bool, optional
            Release start-state counts (default: when ``counts.starts`` is given).
        seeded : bool
            ``rng`` was seeded (tests): the policy's rng mode is "seeded-insecure".

        Returns
        -------
        DPPBB
            ``self``, fitted (``policy_`` and the attributes above).

        Raises
        ------
        UsageError
            Bad counts, reward, budget or constants.
        """
        if not isinstance(counts, CappedCounts):
            raise UsageError(f"DPPBB.fit needs CappedCounts (exact capped counts). Got {type(counts).__name__}.")
        if budget is not None:
            if budget.family.pure:
                raise UsageError(f"{self.algorithm} is Gaussian (zCDP) only; `mechanism` laplace is not supported.")
            rho = budget.rho  # calibration (a split part's double just below its decimal share)
        else:
            rho = float(self.rho)
        shown_rho = budget.shown if budget is not None else rho
        if not 0 < self.failure_prob < 1:
            raise UsageError(f"`failure_prob` must lie in (0, 1). Got {self.failure_prob}.")
        H, S, A = counts.horizon, counts.n_states, counts.n_actions
        if reward is None:
            raise UsageError(f"{self.algorithm} needs a public reward: the spec's public_reward (r(s')) or a known r(s, a).")
        reward, kind = known_reward(reward, S, A, H)
        next_state = kind == "next_state"
        invariant = reward.ndim < 3 or bool((reward == reward[:1]).all())   # r the same at every step h
        reuse = bool(counts.stationary) and invariant      # reusing values across steps is valid only then
        frame = reward_frame(reward_range)
        reward = frame.scale * reward + frame.shift
        share = (SPLIT_DEFAULT if self.split is None else self.split).get("starts", 0.0)
        use_starts = (counts.starts is not None and share > 0) if starts is None else bool(starts)
        if use_starts and counts.starts is None:
            raise UsageError("`starts` asked for but `counts.starts` is None.")
        plan, ranges = self.plan(rho, horizon=H, n_states=S, max_episodes=counts.max_episodes,
                                 max_per_cell=counts.max_per_cell, stationary=counts.stationary,
                                 next_state_reward=next_state, reward_range=reward_range, return_bound=return_bound,
                                 starts=use_starts, unit_column=counts.unit_column, time_invariant_reward=invariant)
        K = len(plan.backups)
        self.ranges_ = ranges
        seeded = bool(seeded) or self.random_state is not None
        if rng is None:
            rng = np.random.default_rng(self.random_state)
        rv, rb, rs = rng.spawn(3)
        self.plan_ = plan
        self.event_ = plan.event if plan.private else None
        if budget is None and plan.private:
            budget = resolve_budget(rho=rho)
            if self.delta_report is not None:
                budget = budget.reported_at(self.delta_report)
        self.guarantee_ = budget.guarantee(self.event_) if plan.private else None

        G = 1 if counts.stationary else H
        alpha = self.failure_prob / n_events(K, G, S * A, use_starts)
        self.alpha_event_ = alpha
        t_gauss, L = gaussian_tail(alpha), stitched_log(alpha)

        paths: set = set()                                    # the exact samplers used (the policy states them)
        visits = pbb_noise.add_noise(counts.visits.reshape(G, S * A), plan.sigma_visits, rv, paths)  # (G, S*A)
        self.visits_noisy_ = visits.reshape(G, S, A)
        n_lo = visits - t_gauss * plan.sigma_visits
        n_up = visits + t_gauss * plan.sigma_visits
        self.starts_noisy_ = pbb_noise.add_noise(counts.starts, plan.sigma_starts, rs, paths) if use_starts else None
        self._t_gauss, self._L = t_gauss, L
        widths_sel = Widths(t_gauss, L, plan.second_moments)                      # the selection's bounds
        widths = Widths(t_gauss, L, plan.second_moments, uniform=uniform_log_term(alpha, S))  # the certificate's

        terminals = np.asarray(list(terminal_states), dtype=np.int64)
        used = np.broadcast_to(self.visits_noisy_, (H, S, A)) if counts.stationary else self.visits_noisy_
        self.visits_used_ = np.array(used, dtype=np.float64)
        Q, Qsel, pi = np.zeros((H, S, A)), np.zeros((H, S, A)), np.zeros((H, S, A))
        V = np.zeros((H + 1, S))
        gap = np.zeros((H, S, A))
        trusted = np.zeros((H, S, A), dtype=bool)
        K = len(plan.backups)
        chain_a = len(plan.select_backups) > 0
        rb_a = rb.spawn(1)[0] if chain_a else None
        V_sel = np.zeros((H + 1, S))
        for i in range(K):                                    # backups h = H-1, ..., H-K
            h = H - 1 - i
            g = 0 if counts.stationary else h
            N = counts.transitions[g]
            r_h = None if next_state else (reward if reward.ndim == 2 else reward[h]).ravel()
            lcb, est, ok = backup(N, V[h + 1] + reward if next_state else V[h + 1], r_h, ranges[h][0],
                                  plan.backups[i], n_lo[g], n_up[g], widths, rb, paths)
            q_h = np.where(ok, np.clip(lcb, 0.0, ranges[h][1]), 0.0).reshape(S, A)
            if chain_a:  # the selection's own backups of its own values (no validity needed: only the choice)
                lcb_a, est_a, ok_a = backup(N, V_sel[h + 1] + reward if next_state else V_sel[h + 1], r_h,
                                            ranges[h][0], plan.select_backups[i], n_lo[g], n_up[g], widths_sel,
                                            rb_a, paths)
            else:
                lcb_a, est_a, ok_a = lcb, est, ok
            sel = np.where(ok_a, np.clip(est_a - self.selection * (est_a - lcb_a), 0.0, ranges[h][1]),
                           0.0).reshape(S, A)
            if terminals.size:
                q_h[terminals] = sel[terminals] = frame.terminal * (H - h)
            Q[h], Qsel[h] = q_h, sel
            pi[h] = greedy_with_ties(sel[None], self.visits_used_[h][None], self.tie_break)[0]
            V_sel[h] = (pi[h] * sel).sum(axis=1)
            gap[h] = np.where(ok, np.maximum(est - lcb, 0.0), np.inf).reshape(S, A)
            trusted[h] = ok.reshape(S, A)
            V[h] = (pi[h] * q_h).sum(axis=1)                  # certificate: the lower bound of the chosen action
            if reuse and h < H - 1:                           # monotone: keep step h+1's action and value
                keep = V[h + 1] > V[h]
                V[h, keep], pi[h, keep] = V[h + 1, keep], pi[h + 1, keep]
        h0 = H - K                                            # 0 unless reuse (plan: K = H otherwise)
        for h in range(h0 - 1, -1, -1):                       # no more backups: reuse step h0 (monotone)
            Q[h], Qsel[h], pi[h], gap[h], trusted[h], V[h] = Q[h0], Qsel[h0], pi[h0], gap[h0], trusted[h0], V[h0]
            if terminals.size:
                V[h, terminals] = frame.terminal * (H - h)
                Q[h, terminals] = Qsel[h, terminals] = frame.terminal * (H - h)
        self.reward_frame_ = frame
        self.Q_, self.V_, self.penalty_, self.trusted_ = Q, V, gap, trusted
        self.Q_select_ = Qsel
        self.V_select_ = V_sel
        self.E_, self.iota_ = 0.0, L
        if plan.private:
            g = envelope(self.guarantee_, mechanism="gaussian", noise="exact",
                         neighbouring=Neighbouring.SUBSTITUTION.description,
                         unit={"column": plan.unit.column, "max_episodes": plan.unit.k},
                         rng="seeded-insecure" if seeded else "secure", event=self.event_.to_dict(),
                         sampler=samplers.noise_statement("exact", paths=paths))
            privacy = PolicyPrivacy(not seeded, g, note=(
                "seeded noise: not private against anyone who knows the seed" if seeded else None))
        else:
            privacy = PolicyPrivacy.none(f"{self.algorithm} without noise (rho = inf)")
        params = dict(self.get_params(), rho=shown_rho if math.isfinite(rho) else None, split=plan.split,
                      max_per_cell=counts.max_per_cell, n_backups=K, return_bound=return_bound,
                      stationary=bool(counts.stationary))
        self.policy_ = Policy(table=pi, algorithm=self.algorithm,
                              parameters=params, privacy=privacy, spec_hash=spec_hash,
                              stationary=bool(counts.stationary))
        return self

    def plan(self, rho: float, *, horizon: int, n_states: int, max_episodes: int, max_per_cell: int | None,
             stationary: bool, next_state_reward: bool = True, reward_range: Sequence[float] | None = None,
             return_bound: float | None = None, starts: bool = True,
             unit_column: str = "episode_id", time_invariant_reward: bool = True) -> tuple[PBBPlan, list]:
        """The noise plan of a fit with these public facts (before any row is read): ``(plan, ranges)``.

        ``plan.event`` is what a fit will spend (for a ledger check up front); ``ranges`` the per-step
        (bound on W, bound on Q) in planning units. K = min(``n_backups``, H) backups only with pooled
        counts (``stationary``: time-homogeneous dynamics, the caller's declaration) and a reward that is
        the same at every step (checked by ``fit`` on the reward it is given); otherwise K = H, a backup
        at every step (reusing a later step's values is valid only for a time-homogeneous MDP:
        docs/certificates.md, "DP-PBB").

        Raises
        ------
        UsageError
            Bad ``n_backups``, ``return_bound`` or budget (:func:`plan_noise`); "k is too large", with the
            largest k that fits, when a smaller ``max_episodes`` would (``privaudit.privacy.k_bound``).
        """
        H = int(horizon)
        K = H if self.n_backups is None else self.n_backups
        if isinstance(K, bool) or not isinstance(K, (int, np.integer)) or K < 1:
            raise UsageError(f"`n_backups` must be an integer >= 1 or None (H). Got {self.n_backups!r}.")
        K = min(int(K), H) if (stationary and time_invariant_reward) else H
        ranges = backup_ranges(H, reward_frame(reward_range), return_bound, next_state_reward)
        kw = dict(horizon=H, n_states=n_states, max_per_cell=max_per_cell, stationary=stationary,
                  backup_ranges=[ranges[H - 1 - i][0] for i in range(int(K))], split=self.split, starts=starts,
                  unit_column=unit_column)
        with k_bound(max_episodes, f"rho={num(rho)}", "DP-PBB", lambda k, _: plan_noise(rho, max_episodes=k, **kw)):
            plan = plan_noise(rho, max_episodes=max_episodes, **kw)
        return plan, ranges

    @classmethod
    def plan_for(cls, spec, budget: Budget, *, stationary: bool = True, params: dict | None = None,
                 max_per_cell: int | None = None) -> tuple["DPPBB", PBBPlan, int]:
        """DP-PBB's noise plan on logs of ``spec``, from public facts only (before any row is read).

        The inputs are the spec (H, S, k, reward range and public r(s'), return
        bound, privacy unit), the budget, ``stationary``, the parameters and c:
        nothing of the logs (the fit's counts carry the same k, c, pooling and
        start-state counts, so it re-plans the same event).

        Parameters
        ----------
        spec : DomainSpec
            Must declare a public reward.
        budget : Budget
            The learner's Gaussian budget (noise calibrated to ``budget.rho``).
        stationary : bool
            Pool over h.
        params : dict, optional
            Constructor parameters.
        max_per_cell : int, optional
            c (default :data:`MAX_PER_CELL_DEFAULT`).

        Returns
        -------
        (DPPBB, PBBPlan, int)
            The unfitted learner, its noise plan (``plan.event``: what the fit records and the
            ledger is charged) and c.

        Raises
        ------
        UsageError
            No public reward, bad parameters, ``n_backups`` or budget.
        """
        c = MAX_PER_CELL_DEFAULT if max_per_cell is None else max_per_cell
        try:
            learner = cls(**(params or {}))
        except TypeError as e:
            raise UsageError(f"bad parameters for {cls.algorithm}: {e}") from None
        if spec.public_reward_scaled() is None:
            raise UsageError(f"{cls.algorithm} needs a public reward (spec $.public_reward): it backs up r(s') + V(s'). "
                             "Use dp-apvi for logs whose rewards are private.")
        rb = spec.return_bound[1] if getattr(spec, "return_bound", None) is not None else None
        plan, _ = learner.plan(budget.rho, horizon=spec.H, n_states=spec.S, max_episodes=spec.max_episodes_per_unit,
                               max_per_cell=c, stationary=stationary, reward_range=spec.reward_range,
                               return_bound=rb, starts=True, unit_column=spec.unit_column or "episode_id")
        return learner, plan, c

    #: DP-PBB on logs, the whole run (:func:`privaudit.learners.tabular.pbb_logs.train_on_logs`).
    train_on_logs = classmethod(pbb_logs.train_on_logs)

    @classmethod
    def plan_event(cls, spec, budget: Budget, *, stationary: bool = True) -> ComposedEvent:
        """The privacy event of a fit on logs of ``spec`` with default parameters (:meth:`plan_for`)."""
        return cls.plan_for(spec, budget, stationary=stationary)[1].event

    @staticmethod
    def mechanism_text(spec) -> str:
        """How DP-PBB adds its noise (one sentence for the pipeline's summary)."""
        return ("exact discrete Gaussian: noisy capped visit and start counts and K private Bellman backups "
                "(and their second moments) with fresh noise, for the certificate and the selection "
                "(event in the policy manifest)")

    # ---------------------------------------------------------------- certificate
    def certified_value(self, d0: np.ndarray | None = None) -> float:
        """The certificate: a lower bound on the learned policy's value, declared units.

        Parameters
        ----------
        d0 : ndarray (S,), optional
            A public start distribution (a known MDP): d0 . V_0. None: a
            lower confidence bound on E_{s ~ d0}[V_0(s)] from the released
            start counts (docs/certificates.md, "Start distribution": over privacy units, uniform over V_0).

        Raises
        ------
        UsageError
            No d0 and no start counts were released.
        """
        H = self.V_.shape[0] - 1
        if d0 is not None:
            return self.value_estimate(d0)
        if self.starts_noisy_ is None:
            raise UsageError("certified_value needs a public `d0` or start counts (fit with counts.starts).")
        # 4 of the union bound's events, alpha each: the numerator, both sides of N, the sampling event
        # (uniform over V_0, concentrated over privacy units)
        lb = start_mean_lower_bound(self.V_[0], self.starts_noisy_, self.plan_.sigma_starts,
                                    self.ranges_[0][1],  # the public bound on V_0
                                    max_episodes=self.plan_.unit.k, t=self._t_gauss, t_total=self._t_gauss,
                                    log_term=math.log(1.0 / self.alpha_event_))
        return float(self.reward_frame_.declared(np.array(lb), H))
