"""DP-PBB's noise plan: sensitivities, quanta and noise scales from public facts only (nothing read, nothing drawn).

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
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from privaudit.core.errors import NoiseScaleTooLarge, UsageError
from privaudit.privacy import accounting, fixed_point, samplers
from privaudit.privacy.events import ComposedEvent, GaussianEvent, Neighbouring, PrivacyUnit
from privaudit.privacy.sensitivity import check_max_per_cell

__all__ = ["SPLIT_DEFAULT", "SIGMA_TARGET", "Q_MAX", "BackupNoise", "PBBPlan", "pbb_sensitivities", "plan_noise",
           "add_noise"]

#: Default budget split (shares of rho): visit counts, first-moment backups,
#: second-moment backups, start states. Chosen on ICU-Sepsis clinicians' logs
#: (docs/learners.md, "DP-PBB"); a public constant.
SPLIT_DEFAULT = {"visits": 0.1, "backups": 0.18, "second_moments": 0.07, "selection": 0.6, "starts": 0.05}
#: Target noise standard deviation in stored integer units of a backup: the
#: quantum q of W is the largest integer <= Q_MAX with sigma <= this (exact
#: discrete Gaussian tables stay small: ``samplers.GAUSSIAN_SIGMA_MAX`` = 2^15).
SIGMA_TARGET = 2.0 ** 13
#: Finest quantum of W (stored units of 1/Q_MAX).
Q_MAX = 1000
#: Most one-ulp increases of the noise scales while fitting the budget.
_FIT_STEPS = 16


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
            raise NoiseScaleTooLarge(f"the budget rho={rho!r} is too small for DP-PBB on this domain: a noise scale "
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


def add_noise(values: np.ndarray, sigma: float, rng, paths: set | None = None) -> np.ndarray:
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
