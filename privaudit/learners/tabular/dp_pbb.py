"""DP-PBB: pessimistic value iteration with private Bellman backups (tabular, offline, rho-zCDP).

The learner that learns from outcomes under DP at hospital scale (issue 12).
Where DP-APVI (seed 000) releases every transition count n(s, a, s') once
and pays for the worst case of S noisy cells in every backup (its
C2 S H E iota / n term), DP-PBB releases, for each of the H backups, only
what that backup needs: the noisy (s, a)-sums of W_{h+1}(s') = r(s') +
V_{h+1}(s') over the logged transitions (a "private Bellman backup"), with
fresh Gaussian noise that is independent of W_{h+1}. The error of a backup
is then one Gaussian draw of standard deviation sigma per (s, a), divided by
the visit count, instead of S noisy cells. Pessimism comes from lower
confidence bounds that hold simultaneously for every (h, s, a) with
probability >= 1 - failure_prob, so the learner's value at the start
distribution (``certified_value``) is a lower bound on the true value of the
policy it outputs (docs/learners.md, "DP-PBB": privacy proof and validity
argument).

Statistics (all exact integers, all noised over the whole declared domain):

======================  ===============================  ==========================================
family                  cells                            L2 sensitivity (substitution of one unit)
======================  ===============================  ==========================================
``pbb-visits``          n(s, a) (or n_h(s, a)), once     sqrt(2 c' k H)
``pbb-backup``          sum u(s') per (s, a), per h      2 sqrt(c' M) b_u
``pbb-second-moment``   sum ceil(u(s')^2 q2/q^2), per h  sqrt(2 c' M) s_max
``pbb-starts``          starts per state, once           sqrt(2) k
======================  ===============================  ==========================================

with k the most episodes per unit, c the per-unit per-cell cap (c' = min(c,
M)), M = k H (pooled over h, stationary) or k (per step) the most
transitions one unit puts in one backup, u = floor(W q) - m the centred
quantised value (|u| <= b_u), s_max the largest second-moment value. The
backups are chosen adaptively (W_{h+1} depends on earlier outputs); zCDP
composes adaptively by adding rho (Bun & Steinke 2016, Lemma 2.3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Sequence

import numpy as np
import polars as pl
from scipy import sparse

from privaudit.core.errors import UsageError
from privaudit.learners.tabular.base import TabularLearnerBase, greedy_with_ties, known_reward
from privaudit.learners.confidence import gaussian_tail, mean_radius, start_mean_lower_bound, stitched_log
from privaudit.learners.tabular.pessimism import FAILURE_PROB_DEFAULT, RewardFrame, reward_frame
from privaudit.learners.policy import Policy
from privaudit.learners.policy_manifest import PolicyPrivacy
from privaudit.privacy import accounting, fixed_point, samplers
from privaudit.privacy.sensitivity import check_max_per_cell
from privaudit.privacy.budget import Budget, resolve_budget
from privaudit.privacy.events import ComposedEvent, GaussianEvent, Neighbouring, PrivacyUnit
from privaudit.data.counts import sparse_counts
from privaudit.data.counts_protocol import step_index

__all__ = ["DPPBB", "CappedCounts", "capped_counts_from_logs", "capped_counts_from_frames", "PBBPlan", "SPLIT_DEFAULT", "plan_noise", "pbb_sensitivities"]

#: Default budget split (shares of rho): visit counts, first-moment backups,
#: second-moment backups, start states. Chosen on ICU-Sepsis clinicians' logs
#: (docs/learners.md, "DP-PBB"); a public constant.
SPLIT_DEFAULT = {"visits": 0.1, "backups": 0.18, "second_moments": 0.07, "selection": 0.6, "starts": 0.05}
#: Per-unit per-cell cap c used from logs unless given (13.5% of the steps of ICU-Sepsis clinicians'
#: logs revisit a cell of their stay and are dropped at c = 1).
MAX_PER_CELL_DEFAULT = 1
#: Pessimism of the action *selection*: the policy maximises est - selection * (est - lcb);
#: the certificate always uses the lower bound lcb of the selected action.
SELECTION_DEFAULT = 0.4
#: Private backups (the last K = min(n_backups, H) steps h = H-1 .. H-K); earlier steps reuse step H-K
#: (monotone values). None: all H.
N_BACKUPS_DEFAULT = 6
#: Target noise standard deviation in stored integer units of a backup: the
#: quantum q of W is the largest integer <= Q_MAX with sigma <= this (exact
#: discrete Gaussian tables stay small: ``samplers.GAUSSIAN_SIGMA_MAX`` = 2^15).
SIGMA_TARGET = 2.0 ** 13
#: Finest quantum of W (stored units of 1/Q_MAX).
Q_MAX = 1000
#: Most one-ulp increases of the noise scales while fitting the budget.
_FIT_STEPS = 16


# ----------------------------------------------------------------------------
# exact statistics (PRIVATE)


@dataclass(frozen=True, repr=False)
class CappedCounts:
    """Exact transition counts after the per-unit per-cell cap. PRIVATE: never release them.

    Answers the counts protocol (:class:`privaudit.data.counts_protocol.Counts`)
    in its words: ``visits_at(h)``, ``transitions_at(h)``, ``reward_sums_at(h)``
    (None: DP-PBB's reward is public), the whole table ``visits`` ((S, A)
    pooled, (H, S, A) per step) and ``iter_transitions()``; ``noisy`` is
    False. DP-PBB itself reads the sparse ``transitions`` matrices (one
    backup is a sparse product) and the start counts, which the protocol
    does not hold.

    Attributes
    ----------
    transitions : tuple of scipy.sparse.csr_matrix, each shape (S * A, S), int64
        N(s, a, s'): one matrix pooled over h (``stationary``) or one per step h.
        Row s * A + a. Only transitions kept by the cap are counted.
    starts : ndarray (S,) of int64, or None
        Episodes starting in each state (for the certificate without a public d0).
    horizon : int
        H.
    max_episodes : int
        k, the most episodes one privacy unit contributes (after bounding).
    max_per_cell : int or None
        c: the most transitions one unit contributes to one (s, a) row (pooled)
        or one (h, s, a) row (per step); None: no cap beyond k and H.
    unit_column : str
        The privacy unit's column (recorded in the privacy events).
    stationary : bool
        Pooled over h.
    """

    transitions: tuple = field(repr=False)
    starts: np.ndarray | None
    horizon: int
    max_episodes: int
    max_per_cell: int | None
    unit_column: str = "episode_id"
    stationary: bool = True

    def __post_init__(self):
        tr = tuple(sparse.csr_matrix(t, dtype=np.int64) for t in self.transitions)
        want = 1 if self.stationary else self.horizon
        if len(tr) != want:
            raise UsageError(f"`transitions` must hold {want} matrices ({'pooled' if self.stationary else 'one per h'}). "
                             f"Got {len(tr)}.")
        shapes = {t.shape for t in tr}
        if len(shapes) != 1:
            raise UsageError(f"`transitions` matrices must share one shape (S * A, S). Got {sorted(shapes)}.")
        SA, S = shapes.pop()
        if S < 1 or SA % S:
            raise UsageError(f"`transitions` must have shape (S * A, S). Got ({SA}, {S}).")
        if any(t.nnz and t.data.min() < 0 for t in tr):
            raise UsageError("`transitions` must hold counts >= 0 (exact, not noisy).")
        if isinstance(self.max_episodes, bool) or int(self.max_episodes) < 1:
            raise UsageError(f"`max_episodes` (k) must be an integer >= 1. Got {self.max_episodes!r}.")
        if self.max_per_cell is not None and (isinstance(self.max_per_cell, bool) or int(self.max_per_cell) < 1):
            raise UsageError(f"`max_per_cell` (c) must be an integer >= 1 or None. Got {self.max_per_cell!r}.")
        if self.starts is not None:
            st = np.asarray(self.starts, dtype=np.int64)
            if st.shape != (S,) or (st < 0).any():
                raise UsageError(f"`starts` must be counts >= 0 of shape ({S},). Got shape {st.shape}.")
            object.__setattr__(self, "starts", st)
        object.__setattr__(self, "transitions", tr)

    @property
    def n_states(self) -> int:
        """S."""
        return self.transitions[0].shape[1]

    @property
    def n_actions(self) -> int:
        """A."""
        return self.transitions[0].shape[0] // self.n_states

    #: Exact counts (the protocol's ``noisy``): DP-PBB adds its own noise.
    noisy = False
    #: No reward sums: DP-PBB backs up a public reward.
    has_reward_sums = False

    @cached_property
    def visits(self) -> np.ndarray:
        """n(s, a) = sum_s' N(s, a, s'), int64: shape (S, A) pooled, (H, S, A) per step (the protocol's table)."""
        S, A = self.n_states, self.n_actions
        n = np.stack([np.asarray(t.sum(axis=1)).ravel() for t in self.transitions]).astype(np.int64)
        n = n.reshape(len(self.transitions), S, A)
        n.setflags(write=False)
        return n[0] if self.stationary else n

    def visits_at(self, h: int) -> np.ndarray:
        """n_h(s, a), shape (S, A) (the pooled table for every h when stationary)."""
        i = step_index(h, self.horizon, self.stationary)
        return self.visits if self.stationary else self.visits[i]

    def transitions_at(self, h: int) -> np.ndarray:
        """n_h(s, a, s'), shape (S, A, S), a fresh dense array (DP-PBB reads the sparse ``transitions``)."""
        i = step_index(h, self.horizon, self.stationary)
        S, A = self.n_states, self.n_actions
        return self.transitions[i].toarray().reshape(S, A, S)

    def reward_sums_at(self, h: int) -> None:
        """None: no reward sums (DP-PBB's reward is public). Checks ``h`` as every container does."""
        step_index(h, self.horizon, self.stationary)
        return None

    def iter_transitions(self):
        """Yield (h, n_h(s, a, s') of shape (S, A, S)) for h = 0..H-1, once (h = 0) when stationary."""
        for h in range(1 if self.stationary else self.horizon):
            yield h, self.transitions_at(h)

    @classmethod
    def from_arrays(cls, transitions: np.ndarray, *, horizon: int, max_episodes: int = 1,
                    max_per_cell: int | None = None, starts: np.ndarray | None = None,
                    unit_column: str = "episode_id") -> "CappedCounts":
        """From dense counts (S, A, S) (pooled) or (H, S, A, S) (per step).

        The caller guarantees that the counts come from logs bounded to k
        episodes per unit, H steps per episode and (if ``max_per_cell``) c
        transitions per unit and (s, a) row: the privacy proof rests on it.
        """
        t = np.asarray(transitions)
        if t.ndim not in (3, 4) or t.shape[-1] != t.shape[-3]:
            raise UsageError(f"`transitions` must have shape (S, A, S) or (H, S, A, S). Got {t.shape}.")
        S, A = t.shape[-3], t.shape[-2]
        mats = [t.reshape(S * A, S)] if t.ndim == 3 else [t[h].reshape(S * A, S) for h in range(t.shape[0])]
        return cls(tuple(mats), starts, int(horizon), int(max_episodes),
                   None if max_per_cell is None else int(max_per_cell), unit_column, t.ndim == 3)

    @classmethod
    def from_sparse(cls, counts, *, starts: np.ndarray | None, max_episodes: int, max_per_cell: int | None,
                    unit_column: str = "episode_id") -> "CappedCounts":
        """From :class:`privaudit.data.counts.SparseCounts` of capped logs (one sparse matrix per slice)."""
        S, A, H = counts.n_states, counts.n_actions, counts.horizon
        per = S * A * S
        i = counts.cells["i"].to_numpy()
        v = counts.cells["n"].to_numpy()
        G = 1 if counts.stationary else H
        g = i // per
        mats = []
        for k in range(G):
            sel = g == k
            j = i[sel] - k * per
            mats.append(sparse.csr_matrix((v[sel], (j // S, j % S)), shape=(S * A, S)))
        return cls(tuple(mats), starts, H, int(max_episodes), max_per_cell, unit_column, bool(counts.stationary))

    def __repr__(self) -> str:  # shapes only
        return (f"CappedCounts(H={self.horizon}, S={self.n_states}, A={self.n_actions}, "
                f"stationary={self.stationary}, k={self.max_episodes}, c={self.max_per_cell})")


def capped_counts_from_logs(prepared, spec, *, stationary: bool, max_per_cell: int | None) -> CappedCounts:
    """Exact capped counts of prepared logs (PRIVATE): what :class:`DPPBB` noises.

    Parameters
    ----------
    prepared : privaudit.data.prepare.PreparedLogs
        Validated and bounded logs (k episodes per unit, h < H, rewards
        clipped and scaled, returns clipped at the spec's return bound).
    spec : DomainSpec
    stationary : bool
        Pool over h (the cap's cells are then (s, a); per step (h, s, a)).
    max_per_cell : int or None
        c: at most c steps per unit and cell (``PreparedLogs.with_cell_cap``,
        the keep rule of ``privaudit release --max-per-cell``).

    Returns
    -------
    CappedCounts
        See :func:`capped_counts_from_frames`.
    """
    capped = prepared.with_cell_cap(max_per_cell, stationary=stationary)
    return capped_counts_from_frames(capped.bounded, prepared.bounded, spec, stationary=stationary,
                                     max_per_cell=max_per_cell)


def capped_counts_from_frames(capped, bounded, spec, *, stationary: bool, max_per_cell: int | None) -> CappedCounts:
    """:class:`CappedCounts` from capped bounded rows (transitions) and bounded rows (start states).

    Starts come from the uncapped bounded rows (step 0 of each kept episode):
    each unit starts at most k episodes, whatever the cap.
    """
    sc = sparse_counts(capped, spec, stationary=stationary, rewards=False)
    st = (bounded.lazy().filter(pl.col("step") == 0).group_by("state").agg(pl.len().alias("n"))
          .collect(engine="streaming"))
    starts = np.zeros(spec.S, dtype=np.int64)
    starts[st["state"].to_numpy().astype(np.int64)] = st["n"].to_numpy()
    return CappedCounts.from_sparse(sc, starts=starts, max_episodes=spec.max_episodes_per_unit,
                                    max_per_cell=max_per_cell, unit_column=spec.unit_column or "episode_id")


# ----------------------------------------------------------------------------
# sensitivities and the noise plan (public facts only)


def pbb_sensitivities(horizon: int, max_episodes: int, max_per_cell: int | None, stationary: bool) -> dict:
    """The per-unit bounds every DP-PBB sensitivity is built from.

    Returns
    -------
    dict
        ``M``: most transitions of one unit inside one backup's data (k H
        pooled, k per step); ``M_total``: most transitions of one unit in all
        (k H); ``c``: effective per-cell cap c' = min(c, M);
        ``visits_l2`` = sqrt(2 c' k H) (the count vector over all cells);
        ``starts_l2`` = sqrt(2) k.

    Notes
    -----
    One unit's contribution y to a statistic with cells bounded by c' x a
    and total sum bounded by M x a (a: the largest value of one transition's
    term) has ||y||_2^2 <= max{sum y_i^2 : 0 <= y_i <= c' a, sum y_i <= M a}
    <= c' M a^2. Under substitution the change is y - y'. For non-negative
    terms <y, y'> >= 0, so ||y - y'||^2 <= ||y||^2 + ||y'||^2 <= 2 c' M a^2;
    for centred terms (|term| <= a, any sign) ||y - y'|| <= ||y|| + ||y'||
    <= 2 sqrt(c' M) a. Visits: a = 1 over all (s, a) (or (h, s, a)) cells,
    total k H. Starts: k episodes, all possibly in one state: sqrt(2) k.
    """
    H, k = int(horizon), int(max_episodes)
    M = k * H if stationary else k
    c = M if max_per_cell is None else min(check_max_per_cell(max_per_cell, H, k, stationary), M)
    return {"M": M, "M_total": k * H, "c": c, "c_declared": None if max_per_cell is None else int(max_per_cell),
            "visits_l2": math.sqrt(2.0 * c * k * H),
            "starts_l2": math.sqrt(2.0) * k}


@dataclass(frozen=True)
class BackupNoise:
    """Noise plan of one backup h (stored integer units).

    Attributes
    ----------
    q : int
        W is stored as x = floor(W q) in [0, X], X = floor(B_h q).
    m : int
        Centre: u = x - m, |u| <= b_u = X - m.
    b_u : int
    l2, sigma : float
        Sensitivity and noise scale of the first-moment sums of u.
    q2 : int
        Second-moment values ceil(u^2 q2 / q^2) in [0, s_max] (units 1/q2 of W^2).
    s_max : int
    l2_2, sigma_2 : float
        Sensitivity and noise scale of the second-moment sums (0 when unused).
    """

    q: int
    m: int
    b_u: int
    l2: float
    sigma: float
    q2: int = 1
    s_max: int = 0
    l2_2: float = 0.0
    sigma_2: float = 0.0

    @property
    def range(self) -> float:
        """Range of the quantised W = x / q: [0, X / q]."""
        return (self.m + self.b_u) / self.q


@dataclass(frozen=True)
class PBBPlan:
    """All noise scales of one DP-PBB run, planned from public facts (nothing read, nothing drawn).

    Attributes
    ----------
    rho : float
        The budget (math.inf: no noise, not private).
    split : dict
        Shares of rho (see :data:`SPLIT_DEFAULT`).
    sens : dict
        :func:`pbb_sensitivities`.
    sigma_visits, sigma_starts : float
        Noise scales of the counts (0: family not released / no noise).
    backups : tuple of BackupNoise
        The certificate's backups, one per h = H-1, ..., H-K.
    unit : PrivacyUnit
    select_backups : tuple of BackupNoise
        The selection's backups (chain A), same steps; empty when the split gives ``selection`` no share.
    """

    rho: float
    split: dict
    sens: dict
    sigma_visits: float
    sigma_starts: float
    backups: tuple
    unit: PrivacyUnit
    select_backups: tuple = ()

    @property
    def private(self) -> bool:
        """False for the zero-noise plan (rho = inf)."""
        return math.isfinite(self.rho)

    @property
    def second_moments(self) -> bool:
        """Whether second-moment backups are released."""
        return self.split.get("second_moments", 0.0) > 0

    @property
    def event(self) -> ComposedEvent:
        """The privacy event: visits, H backups (and second moments), starts."""
        if not self.private:
            raise UsageError("the zero-noise plan (rho = inf) has no privacy event: it is not private.")
        c = self.sens["c_declared"]
        common = dict(unit=self.unit, neighbouring=Neighbouring.SUBSTITUTION, noise="exact", max_per_cell=c)
        evs = [GaussianEvent(family="pbb-visits", l2=self.sens["visits_l2"], sigma=self.sigma_visits, **common)]
        for chain, bs in (("pbb", self.backups), ("pbb-select", self.select_backups)):
            for b in bs:
                evs.append(GaussianEvent(family=f"{chain}-backup", l2=b.l2, sigma=b.sigma, **common))
                if self.second_moments:
                    evs.append(GaussianEvent(family=f"{chain}-second-moment", l2=b.l2_2, sigma=b.sigma_2, **common))
        if self.sigma_starts > 0:
            evs.append(GaussianEvent(family="pbb-starts", l2=self.sens["starts_l2"], sigma=self.sigma_starts,
                                     **{**common, "max_per_cell": None}))  # starts: one per episode, no cap
        return ComposedEvent(tuple(evs), label="dp-pbb")


def _check_split(split: dict) -> dict:
    keys = set(SPLIT_DEFAULT)
    if not isinstance(split, dict) or set(split) - keys or not {"visits", "backups"} <= set(split):
        raise UsageError(f"`split` must map 'visits', 'backups' (and optionally 'second_moments', 'selection', "
                         f"'starts') "
                         f"to shares. Got {split!r}.")
    s = {k: float(split.get(k, 0.0)) for k in SPLIT_DEFAULT}
    if any(not (math.isfinite(v) and v >= 0) for v in s.values()) or s["visits"] <= 0 or s["backups"] <= 0:
        raise UsageError(f"`split` shares must be finite, >= 0, with visits and backups > 0. Got {split!r}.")
    tot = sum(s.values())
    return {k: v / tot for k, v in s.items()}


def plan_noise(rho: float, *, horizon: int, n_states: int, max_episodes: int, max_per_cell: int | None,
               stationary: bool, backup_ranges: Sequence[float], split: dict | None = None,
               starts: bool = True, unit_column: str = "episode_id") -> PBBPlan:
    """Sensitivities, quanta and noise scales of DP-PBB for the zCDP budget ``rho``.

    Parameters
    ----------
    rho : float
        zCDP budget of the whole learner (> 0; math.inf plans no noise).
    horizon, n_states, max_episodes, max_per_cell, stationary
        Public facts: H, S, k, c, pooled over h.
    backup_ranges : sequence of H floats
        B_h > 0: the public bound on W_{h+1} = r + V_{h+1} at backup h
        (min(H - h, return bound) in planning units).
    split : dict, optional
        Shares of rho; default :data:`SPLIT_DEFAULT`. The ``starts`` share is
        dropped when ``starts`` is False; shares are renormalised.
    starts : bool
        Release the start-state counts (needed for a certificate without a public d0).

    Returns
    -------
    PBBPlan
        Each backup gets rho_backups / H (and rho_second / H); its quantum q
        is the largest integer <= Q_MAX with stored sigma <= SIGMA_TARGET.
        The scales are raised by ulps until the exact rational cost of the
        event is at most ``rho`` (:func:`privaudit.privacy.accounting.event_rho`).

    Raises
    ------
    UsageError
        Bad arguments, or a budget so small that a scale exceeds
        ``samplers.GAUSSIAN_SIGMA_MAX``.
    """
    H = int(horizon)
    K = len(backup_ranges)
    if H < 1 or not 1 <= K <= H or not all(b > 0 and math.isfinite(b) for b in backup_ranges):
        raise UsageError(f"`backup_ranges` must hold 1..H={H} finite positive bounds. Got {list(backup_ranges)!r}.")
    rho = float(rho)
    if not (rho > 0):
        raise UsageError(f"`rho` must be > 0 (math.inf for the zero-noise reference). Got {rho!r}.")
    sp = dict(SPLIT_DEFAULT if split is None else split)
    if not starts:
        sp.pop("starts", None)
    if starts and not sp.get("starts", 0.0) > 0:
        raise UsageError("start counts are released but `split` gives them no share: add a 'starts' share.")
    sp = _check_split(sp)
    sens = pbb_sensitivities(H, max_episodes, max_per_cell, stationary)
    unit = PrivacyUnit(unit_column, int(max_episodes))
    c, M = sens["c"], sens["M"]
    second = sp["second_moments"] > 0
    finite = math.isfinite(rho)
    bks = _backup_plans(backup_ranges, rho * sp["backups"] / K, rho * sp["second_moments"] / K, c, M, finite,
                        second)
    sel = ()
    if sp["selection"] > 0:  # chain A: the selection's own backups, same first/second-moment proportion
        first = sp["backups"] / (sp["backups"] + sp["second_moments"])
        sel = _backup_plans(backup_ranges, rho * sp["selection"] * first / K,
                            rho * sp["selection"] * (1 - first) / K, c, M, finite, second)
    if not finite:
        return PBBPlan(rho, sp, sens, 0.0, 0.0, bks, unit, sel)
    sv = sens["visits_l2"] / math.sqrt(2 * rho * sp["visits"])
    ss = sens["starts_l2"] / math.sqrt(2 * rho * sp["starts"]) if sp.get("starts", 0) > 0 else 0.0
    plan = PBBPlan(rho, sp, sens, sv, ss, bks, unit, sel)
    up = lambda x: float(np.nextafter(x, math.inf)) if x > 0 else x  # noqa: E731
    bump = lambda bs: tuple(BackupNoise(b.q, b.m, b.b_u, b.l2, up(b.sigma), b.q2, b.s_max, b.l2_2,  # noqa: E731
                                        up(b.sigma_2)) for b in bs)
    for _ in range(_FIT_STEPS):  # make the exact rational cost fit the budget (never above it)
        if accounting.event_rho(plan.event) <= rho:
            break
        plan = PBBPlan(rho, sp, sens, up(plan.sigma_visits), up(plan.sigma_starts), bump(plan.backups), unit,
                       bump(plan.select_backups))
    else:
        raise UsageError(f"no noise scales fit the budget rho={rho!r} exactly (numerical failure).")
    for s in [plan.sigma_visits, plan.sigma_starts] + [x for b in plan.backups + plan.select_backups
                                                       for x in (b.sigma, b.sigma_2)]:
        if s > samplers.GAUSSIAN_SIGMA_MAX:
            raise UsageError(f"the budget rho={rho!r} is too small for DP-PBB on this domain: a noise scale "
                             f"{s:.4g} exceeds the exact sampler's limit {samplers.GAUSSIAN_SIGMA_MAX:g}. "
                             "Use a larger budget.")
    return plan


def _backup_plans(ranges, rb: float, r2: float, c: int, M: int, finite: bool, second: bool) -> tuple:
    """One :class:`BackupNoise` per backup range: quantum, centre, sensitivities, scales at rho rb (+ r2)."""
    out = []
    for B in ranges:
        q = Q_MAX if not finite else int(max(1, min(Q_MAX, math.floor(
            SIGMA_TARGET * math.sqrt(2 * rb) / (math.sqrt(c * M) * B)))))
        X = max(int(math.floor(B * q)), 1)
        m = X // 2
        b_u = X - m
        l2 = 2.0 * math.sqrt(c * M) * b_u
        kw = {}
        if second:
            R2 = (b_u / q) ** 2
            q2 = Q_MAX * Q_MAX if not finite else int(max(1, min(10 ** 6, math.floor(
                SIGMA_TARGET * math.sqrt(2 * r2) / (math.sqrt(2 * c * M) * R2)))))
            s_max = int(math.ceil(b_u * b_u * q2 / (q * q)))
            l2_2 = math.sqrt(2.0 * c * M) * s_max
            kw = dict(q2=q2, s_max=s_max, l2_2=l2_2, sigma_2=l2_2 / math.sqrt(2 * r2) if finite else 0.0)
        out.append(BackupNoise(q, m, b_u, l2, l2 / math.sqrt(2 * rb) if finite else 0.0, **kw))
    return tuple(out)


def _noise(values: np.ndarray, sigma: float, rng, paths: set | None = None) -> np.ndarray:
    """values + one exact discrete Gaussian draw per cell (values unchanged when sigma = 0).

    ``fixed_point.exact_gaussian``: the table sampler, or exact rejection for a
    scale drawn few times (the backups: 0.35 s per table at sigma ~ 8,000
    against 13 ms for their S A draws); the path used is added to ``paths``
    (for the policy's sampler statement).
    """
    values = np.asarray(values, dtype=np.int64)
    if sigma == 0:
        return values.astype(np.float64)
    if paths is not None:
        paths.add(fixed_point.gaussian_path(sigma, values.size))
    z = fixed_point.exact_gaussian(sigma, values.size, rng=rng).reshape(values.shape)
    return (values + z).astype(np.float64)


# ----------------------------------------------------------------------------
# the learner


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
    docs/learners.md "DP-PBB" (privacy proof, validity argument). Pessimism:
    Jin, Yang & Wang 2021 (PEVI), Yin & Wang 2021 (APVI); Bellman backups
    released with fresh noise: the "private Q-value" idea of Vietri et al.
    2020 applied offline; time-uniform bounds: Howard et al. 2021.
    """

    algorithm = "dp-pbb"
    _param_names = ("rho", "split", "failure_prob", "selection", "n_backups", "tie_break")

    def __init__(self, *, rho: float = 1.0, split: dict | None = None, failure_prob: float = FAILURE_PROB_DEFAULT,
                 selection: float = SELECTION_DEFAULT, n_backups: int | None = N_BACKUPS_DEFAULT, tie_break: str = "visits", random_state: int | None = None,
                 delta_report: float | None = None):
        self.selection = selection
        self.n_backups = n_backups
        self.rho = rho
        self.split = split
        self.failure_prob = failure_prob
        self.tie_break = tie_break
        self.random_state = random_state
        self.delta_report = delta_report

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
        self

        Raises
        ------
        UsageError
            Bad counts, reward, budget or constants.
        """
        if not isinstance(counts, CappedCounts):
            raise UsageError(f"DPPBB.fit needs CappedCounts (exact capped counts). Got {type(counts).__name__}.")
        if budget is not None:
            if budget.family.pure:
                raise UsageError("dp-pbb is Gaussian (zCDP) only; `mechanism` laplace is not supported.")
            rho = budget.rho  # calibration (a split part's double just below its decimal share)
        else:
            rho = float(self.rho)
        shown_rho = budget.shown if budget is not None else rho
        if not 0 < self.failure_prob < 1:
            raise UsageError(f"`failure_prob` must lie in (0, 1). Got {self.failure_prob}.")
        H, S, A = counts.horizon, counts.n_states, counts.n_actions
        if reward is None:
            raise UsageError("dp-pbb needs a public reward: the spec's public_reward (r(s')) or a known r(s, a).")
        reward, kind = known_reward(reward, S, A, H)
        next_state = kind == "next_state"
        frame = reward_frame(reward_range)
        reward = frame.scale * reward + frame.shift
        share = (SPLIT_DEFAULT if self.split is None else self.split).get("starts", 0.0)
        use_starts = (counts.starts is not None and share > 0) if starts is None else bool(starts)
        if use_starts and counts.starts is None:
            raise UsageError("`starts` asked for but `counts.starts` is None.")
        plan, ranges = self.plan(rho, horizon=H, n_states=S, max_episodes=counts.max_episodes,
                                 max_per_cell=counts.max_per_cell, stationary=counts.stationary,
                                 next_state_reward=next_state, reward_range=reward_range, return_bound=return_bound,
                                 starts=use_starts, unit_column=counts.unit_column)
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
        n_events = self._n_events(K, G, S * A, plan.second_moments, use_starts)
        alpha = self.failure_prob / n_events
        self.alpha_event_ = alpha
        t_gauss, L = gaussian_tail(alpha), stitched_log(alpha)

        paths: set = set()                                    # the exact samplers used (the policy states them)
        visits = _noise(counts.visits.reshape(G, S * A), plan.sigma_visits, rv, paths)  # (G, S*A)
        self.visits_noisy_ = visits.reshape(G, S, A)
        n_lo = visits - t_gauss * plan.sigma_visits
        n_up = visits + t_gauss * plan.sigma_visits
        self.starts_noisy_ = _noise(counts.starts, plan.sigma_starts, rs, paths) if use_starts else None
        self._t_gauss, self._L = t_gauss, L

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
            lcb, est, ok = self._backup(N, V[h + 1], reward if next_state else None, r_h, ranges[h][0],
                                        plan.backups[i], n_lo[g], n_up[g], t_gauss, L, plan.second_moments, rb,
                                        paths)
            q_h = np.where(ok, np.clip(lcb, 0.0, ranges[h][1]), 0.0).reshape(S, A)
            if chain_a:  # the selection's own backups of its own values (no validity needed: only the choice)
                lcb_a, est_a, ok_a = self._backup(N, V_sel[h + 1], reward if next_state else None, r_h,
                                                  ranges[h][0], plan.select_backups[i], n_lo[g], n_up[g], t_gauss,
                                                  L, plan.second_moments, rb_a, paths)
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
            if h < H - 1:                                     # monotone: keep step h+1's action and value
                keep = V[h + 1] > V[h]
                V[h, keep], pi[h, keep] = V[h + 1, keep], pi[h + 1, keep]
        h0 = H - K
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
            g = {**self.guarantee_, "mechanism": "gaussian", "noise": "exact",
                 "neighbouring": Neighbouring.SUBSTITUTION.description,
                 "privacy_unit": {"column": plan.unit.column, "max_episodes": plan.unit.k},
                 "rng": "seeded-insecure" if seeded else "secure", "event": self.event_.to_dict(),
                 "sampler": samplers.noise_statement("exact", paths=paths)}
            privacy = PolicyPrivacy(not seeded, g, note=(
                "seeded noise: not private against anyone who knows the seed" if seeded else None))
        else:
            privacy = PolicyPrivacy.none("dp-pbb without noise (rho = inf)")
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
             unit_column: str = "episode_id") -> tuple[PBBPlan, list]:
        """The noise plan of a fit with these public facts (before any row is read): ``(plan, ranges)``.

        ``plan.event`` is what a fit will spend (for a ledger check up front); ``ranges`` the per-step
        (bound on W, bound on Q) in planning units.

        Raises
        ------
        UsageError
            Bad ``n_backups``, ``return_bound`` or budget (:func:`plan_noise`).
        """
        H = int(horizon)
        K = H if self.n_backups is None else self.n_backups
        if isinstance(K, bool) or not isinstance(K, (int, np.integer)) or K < 1:
            raise UsageError(f"`n_backups` must be an integer >= 1 or None (H). Got {self.n_backups!r}.")
        K = min(int(K), H)
        ranges = self._ranges(H, reward_frame(reward_range), return_bound, next_state_reward)
        plan = plan_noise(rho, horizon=H, n_states=n_states, max_episodes=max_episodes, max_per_cell=max_per_cell,
                          stationary=stationary, backup_ranges=[ranges[H - 1 - i][0] for i in range(int(K))],
                          split=self.split, starts=starts, unit_column=unit_column)
        return plan, ranges

    # ---------------------------------------------------------------- pieces
    @staticmethod
    def _ranges(H: int, frame: RewardFrame, return_bound, next_state: bool) -> list[tuple[float, float]]:
        """Per backup h: (B_h bound on the backed-up W, bound on Q_h), planning units."""
        out = []
        for h in range(H):
            left = H - h
            cap = float(left)
            if return_bound is not None:
                G = (float(return_bound) - left * frame.low) / frame.width
                if not (G > 0 and math.isfinite(G)):
                    raise UsageError(f"`return_bound` must give a positive bound in planning units. Got {return_bound!r}.")
                cap = min(cap, G)
            # next-state reward: W = r(s') + V_{h+1}(s') is the whole return from h; mean reward: W = V_{h+1}
            w = cap if next_state else max(min(cap, float(left - 1)), 1.0)  # V_H = 0: any positive bound
            out.append((w, cap))
        return out

    @staticmethod
    def _n_events(K: int, G: int, SA: int, second: bool, starts: bool) -> int:
        """Number of one-sided events in the union bound (docs/learners.md, "Validity"); K backups."""
        per_cell = 7 if second else 2
        return per_cell * K * SA + 2 * G * SA + (4 if starts else 0)

    @staticmethod
    def _backup(N, V_next, r_next, r_sa, B: float, bq: BackupNoise, n_lo, n_up, t: float, L: float, second: bool,
                rng, paths: set | None = None):
        """One private backup of W = r(s') + V_next(s') (or V_next with a mean reward r_sa): release the noisy
        sums (and second moments) over the transitions N (S*A, S), return (lcb, plug-in, ok) per cell."""
        W = V_next + r_next if r_next is not None else V_next
        x = np.floor(np.clip(W, 0.0, B) * bq.q).astype(np.int64)                 # quantised, <= W (pessimistic)
        u = np.minimum(x, bq.m + bq.b_u) - bq.m
        T = _noise(N @ u, bq.sigma, rng, paths) / bq.q                            # noisy sum of W - m/q
        s2 = None
        if second:
            sq = np.ceil(u.astype(np.float64) ** 2 * bq.q2 / (bq.q * bq.q)).astype(np.int64)
            s2 = _noise(N @ sq, bq.sigma_2, rng, paths) / bq.q2
        lcb, est, ok = DPPBB._lower_bound(T, s2, n_lo, n_up, bq, t, L, second)
        lcb, est = lcb + bq.m / bq.q, est + bq.m / bq.q
        if r_sa is not None:
            lcb, est = lcb + r_sa, est + r_sa
        return lcb, est, ok

    @staticmethod
    def _lower_bound(T, s2, n_lo, n_up, bq: BackupNoise, t: float, L: float, second: bool):
        """Lower confidence bound on E[W - m/q] per cell from noisy sums (docs/learners.md, "Validity").

        Returns (lcb, plug-in estimate, ok) with ok where n_lo >= 1.
        """
        R = bq.range
        ok = n_lo >= 1.0
        nl = np.where(ok, n_lo, 1.0)
        nu = np.where(ok, n_up, 1.0)
        half = bq.b_u / bq.q                          # centred values lie in [-m/q, b_u/q]
        lo_c, hi_c = -bq.m / bq.q, half
        T_lo = T - t * bq.sigma / bq.q
        xc_lo = np.minimum(T_lo / nl, T_lo / nu)
        r_h = mean_radius(nl, R * R / 4.0, 0.0, L)
        lcb = xc_lo - r_h                             # Hoeffding
        if second:
            T_up = T + t * bq.sigma / bq.q
            xc_up = np.maximum(T_up / nl, T_up / nu)
            lo = np.maximum(xc_lo - r_h, lo_c)
            hi = np.minimum(xc_up + r_h, hi_c)
            min_sq = np.where((lo <= 0) & (hi >= 0), 0.0, np.minimum(lo * lo, hi * hi))
            S2_up = np.maximum(s2 + t * bq.sigma_2 / bq.q2, 0.0)
            R2 = bq.s_max / bq.q2
            m2_up = S2_up / nl + mean_radius(nl, R2 * R2 / 4.0, 0.0, L)
            v = np.clip(m2_up - min_sq, 0.0, R * R / 4.0)
            lcb = np.maximum(lcb, xc_lo - mean_radius(nl, v, R, L))  # Bernstein with the private variance bound
        est = T / np.where(ok, np.maximum((n_lo + n_up) / 2.0, 1.0), 1.0)
        lcb = np.maximum(lcb, lo_c)
        return lcb, est, ok

    # ---------------------------------------------------------------- certificate
    def certified_value(self, d0: np.ndarray | None = None) -> float:
        """The certificate: a lower bound on the learned policy's value, declared units.

        Parameters
        ----------
        d0 : ndarray (S,), optional
            A public start distribution (a known MDP): d0 . V_0. None: a
            lower confidence bound on E_{s ~ d0}[V_0(s)] from the released
            start counts (docs/learners.md, "Validity", event family 4).

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
        # 4 of the union bound's events, alpha each: the numerator, both sides of N, the sampling bound
        lb = start_mean_lower_bound(self.V_[0], self.starts_noisy_, self.plan_.sigma_starts,
                                    self.ranges_[0][1],  # the public bound on V_0
                                    t=self._t_gauss, t_total=self._t_gauss, L=self._L)
        return float(self.reward_frame_.declared(np.array(lb), H))
