"""The tabular count release as one mechanism object: noise plan, event, manifest, apply, E.

:class:`TabularRelease` is what ``privaudit release`` does to exact counts,
without any file I/O. ``release_logs`` (read -> prepare -> apply -> write),
the auditor's release and DP-APVI adapters and ``experiments/utility_icu.py``
all call the same object, so the noise they draw, the event they account and
the noise bound E they use cannot drift apart.

Budget split between families (docs/release.md, "The noise and the budget split"): the released object
is the concatenation of the families, whose sensitivity is L1 = sum of l1,
L2 = sqrt(sum of l2^2) (``privaudit.privacy.sensitivity.combine``). One noise
scale from the combined sensitivity (sigma = L2 / sqrt(2 rho), or
b = L1 / eps) spends the budget; family f costs l2_f^2 / (2 sigma^2) (zCDP)
or l1_f / b (pure DP). With equal per-family sensitivities the budget is
split equally (visits + transitions: rho/2 each; Qiao & Wang (2023), eq. (1)).

Rewards are summed in units of 1/q of the [0, 1]-scaled reward (q =
:func:`reward_quantum`, a function of the public noise scale), so their
sensitivity and scale are stored multiplied by q; the ratio, hence the cost,
is unchanged.

The event (``privaudit.privacy.events``) is one Gaussian (or Laplace) leaf
per family with that family's stored-unit sensitivity and scale; the
guarantee, the ledger charge, the manifest's family shares and the audit
claim are all derived from it by ``privaudit.privacy.accounting``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Iterator

import numpy as np

from privaudit import __version__
from privaudit.data.bounding import CELL_KEEP_RULE, PRIORITY_KEY
from privaudit.core.errors import UsageError
from privaudit.core.formatting import num
from privaudit.privacy import mechanisms, samplers
from privaudit.privacy.budget import Budget
from privaudit.privacy.events import ComposedEvent, Neighbouring, PrivacyUnit
from privaudit.privacy.k_bound import k_bound
from privaudit.privacy.noise import noise_family
from privaudit.privacy import sensitivity
from privaudit.core.spec import DomainSpec
from privaudit.release.layout import FILES, action_columns
from privaudit.release.manifest import WIDE_ORDER, DenseLayout, Domain, FamilyRecord, ReleaseManifest, UnitRecord

__all__ = ["TabularRelease", "FamilyNoise", "NoisyCounts", "reward_quantum", "count_noise_bound",
           "NEGLIGIBLE_NOISE_SD",
           "REWARD_QUANTUM", "release_families"]

#: Rewards are summed in units of 1/REWARD_QUANTUM of the scaled reward, so
#: that reward sums are integers like counts (no float side channel, and the
#: exact discrete samplers apply). A public constant, not read off the data.
#: With ``noise="exact"`` and a Gaussian sigma too large for the exact sampler
#: in these units, the quantum is coarsened by powers of 10 (a function of the
#: public sigma only; see :func:`reward_quantum`).
REWARD_QUANTUM = 1000
#: Largest noise scale (stored units) for which exact Gaussian rewards keep the full quantum.
_EXACT_SIGMA_LIMIT = 1.0e4
#: Below this noise standard deviation (in counts) the release is essentially the exact counts: a
#: discrete Gaussian of sigma 0.5 is 0 in 69% of the cells (a discrete Laplace of the same sd in
#: 76%), so most released cells equal the exact ones. Such a budget is valid but protects almost
#: nothing: ``release`` warns (it does not refuse: the guarantee stated is still true).
NEGLIGIBLE_NOISE_SD = 0.5
#: Most one-ulp increases of the scale while making the event fit the budget exactly.
_FIT_STEPS = 16


def reward_quantum(scale: float, mechanism: str, noise: str) -> int:
    """Reward sums are stored in units of 1/q of the scaled reward; q from public facts only.

    q = REWARD_QUANTUM, except for exact discrete Gaussian noise, whose sampler
    is limited in sigma: then the largest power of 10 <= REWARD_QUANTUM with
    q * sigma <= 1e4 (at least 1). Rounding each row's reward to 1/q biases a
    sum of n rewards by at most n / (2q).
    """
    q = REWARD_QUANTUM
    if noise == "exact" and not noise_family(mechanism).pure:
        while q > 1 and q * scale > _EXACT_SIGMA_LIMIT:
            q //= 10
    return q


def release_families(public_reward) -> list[str]:
    """Released families: visits, transitions, and rewards unless the spec declares a public reward."""
    return ["visits", "transitions"] + ([] if public_reward is not None else ["rewards"])


def count_noise_bound(mechanism: str, scale: float, H: int, S: int, A: int, stationary: bool,
                      noise: str, failure_prob: float) -> float:
    """E such that every visit and transition noise draw lies within ±E/2 w.p. >= 1 - failure_prob.

    Returns
    -------
    float
        ``noise_bound(mechanism, scale, 2 H S^2 A (2 S^2 A if stationary),
        failure_prob, noise=noise)``: Qiao & Wang's (2023) E_rho (Section 3, with eq. (2)) and
        a concrete E_eps for their pure-DP remark (docs/release.md, "The noise bound E").
    """
    n_cells = 2 * S * S * A * (1 if stationary else H)
    return mechanisms.noise_bound(mechanism, scale, n_cells, failure_prob, noise=noise)


@dataclass(frozen=True)
class FamilyNoise:
    """Noise plan of one released family, in stored value units."""

    #: ``"visits"``, ``"transitions"`` or ``"rewards"``.
    family: str
    #: L1 sensitivity (``count_sensitivity`` x quantum).
    l1: float
    #: L2 sensitivity (``count_sensitivity`` x quantum).
    l2: float
    #: sigma (Gaussian) or b (Laplace), x quantum.
    scale: float
    #: Stored values are multiples of 1/quantum (1 for counts).
    quantum: int


@dataclass(frozen=True)
class NoisyCounts:
    """The released values (public): noisy integers in stored units."""

    #: Noisy visit counts, int64, shape (H, S, A) or (S, A).
    visits: np.ndarray = field(repr=False)
    #: Noisy reward sums, int64 (units of 1/quantum), the same shape; None when rewards are not released.
    rewards: np.ndarray | None = field(repr=False)
    #: Iterator of (h, ndarray of int64, shape (S, A, S)), noised lazily, one h-slice at a time (the whole
    #: (H, S, A, S) array of a large domain never exists in memory).
    transitions: Iterator = field(repr=False)


@dataclass(frozen=True)
class TabularRelease:
    """The tabular count release mechanism, planned from public facts only.

    Build it with :meth:`plan` (before any row is read). ``families`` holds
    the noise plan; :attr:`event` what it costs; :meth:`manifest` the public
    description; :meth:`apply` draws the noise; :meth:`noise_bound` gives E.
    """

    spec: DomainSpec = field(repr=False)
    budget: Budget
    stationary: bool
    #: ``"rounded"`` or ``"exact"``.
    noise: str
    #: Family name (str) -> its ``FamilyNoise``.
    families: dict
    #: c, the per-cell contribution bound the counts are taken under (``privaudit.data.bounding.cap_per_cell`` with
    #: this ``stationary``); None: no cap. The sensitivities, event and manifest follow it.
    max_per_cell: int | None = None

    @classmethod
    def plan(cls, spec: DomainSpec, budget: Budget, *, stationary: bool = False,
             noise: str = "exact", max_per_cell: int | None = None) -> "TabularRelease":
        """Per-family sensitivity, noise scale and quantum for ``budget`` (nothing read, nothing drawn).

        ``max_per_cell`` = c plans for counts capped at c steps per unit and
        cell (the caller caps the logs with the same c and ``stationary``:
        ``PreparedLogs.with_cell_cap``); the L2 sensitivities shrink to
        sqrt(2 f(kH, c)) pooled, sqrt(2 H f(k, c)) per step
        (``privaudit.privacy.sensitivity.count_sensitivity``).

        The scale from the combined sensitivity is rounded up by one ulp
        (``gaussian_sigma`` / ``laplace_scale``) and, if the exact rational
        cost of the stored-unit event still exceeds the budget, raised ulp by
        ulp until it does not: the recorded guarantee never exceeds the
        budget asked for, and never understates the noise drawn.

        Raises
        ------
        UsageError
            Bad noise mode, H, k or c (``count_sensitivity``), a budget that no
            scale fits (``NoiseScaleTooLarge``: "k is too large", with the largest
            k that fits, when a smaller k would; else "H is too large", with k and
            the largest H that fits, when a smaller H would: ``privaudit.privacy.k_bound``).
        """
        args = dict(stationary=stationary, noise=noise, max_per_cell=max_per_cell)
        with k_bound(spec.max_episodes_per_unit, budget.text, "the count release",
                     lambda k, H: cls._plan(dataclasses.replace(spec, max_episodes_per_unit=k, horizon=H), budget,
                                            **args, probe=True), H=spec.horizon):
            return cls._plan(spec, budget, **args)

    @classmethod
    def _plan(cls, spec: DomainSpec, budget: Budget, *, stationary: bool, noise: str,
              max_per_cell: int | None, probe: bool = False) -> "TabularRelease":
        """:meth:`plan` at the spec's k (a too-large scale raises ``NoiseScaleTooLarge``); ``probe`` checks the
        scales against the exact sampler's range without building its tables (a search over k)."""
        if noise not in mechanisms.NOISE_MODES:
            raise UsageError(f"`noise` must be one of {mechanisms.NOISE_MODES}. Found {noise!r}.")
        fam = budget.family
        sens = [sensitivity.count_sensitivity(spec.H, spec.max_episodes_per_unit, stationary, f,
                                              max_per_cell=max_per_cell)
                for f in release_families(spec.public_reward)]
        comb = sensitivity.combine(sens)
        scale = fam.calibrate(getattr(comb, fam.norm), budget.amount)
        for _ in range(_FIT_STEPS):
            q = reward_quantum(scale, fam.name, noise)
            fams = {}
            for s in sens:
                unit = q if s.family == "rewards" else 1
                fams[s.family] = FamilyNoise(s.family, s.l1 * unit, s.l2 * unit, scale * unit, unit)
            rel = cls(spec, budget, bool(stationary), noise, fams, max_per_cell)
            cost = fam.cost(rel.event)
            if cost <= budget.amount:
                if noise == "exact":  # refuse a scale the exact sampler cannot draw at, before any row is read
                    for f in fams.values():
                        samplers.law_parameter(fam.name, f.scale) if probe else fam.exact_sampler(f.scale)
                return rel
            scale = float(np.nextafter(scale, math.inf))
        raise UsageError(f"no noise scale fits the budget {budget.amount!r} exactly (numerical failure).")

    @property
    def mechanism(self) -> str:
        """``"gaussian"`` or ``"laplace"``."""
        return self.budget.mechanism

    @property
    def unit(self) -> PrivacyUnit:
        """The privacy unit of the spec and its k."""
        return PrivacyUnit(self.spec.unit_column or "episode_id", int(self.spec.max_episodes_per_unit))

    def family_event(self, family: str):
        """The event of one family: its stored-unit sensitivity and scale."""
        p = self.families[family]
        common = dict(family=family, unit=self.unit, neighbouring=Neighbouring.SUBSTITUTION, noise=self.noise,
                      max_per_cell=self.max_per_cell)
        fam = self.budget.family
        return fam.event(getattr(p, fam.norm), p.scale, **common)

    @property
    def event(self) -> ComposedEvent:
        """The release's privacy event: one leaf per family (composition of the families)."""
        return ComposedEvent(tuple(self.family_event(f) for f in self.families), label="tabular-release")

    def guarantee(self) -> dict:
        """The guarantee derived from :attr:`event` (``Budget.guarantee`` -> ``accounting.guarantee``).

        Plus ``sampler``: what the noise sampler adds (``samplers.noise_statement``:
        total variation 0 and no extra delta for the exact samplers).
        """
        return {**self.budget.guarantee(self.event), "sampler": samplers.noise_statement(self.noise)}

    def family_share(self, family: str) -> dict:
        """The family's part of the cost: ``{"rho": ...}`` or ``{"epsilon": ...}``."""
        fam = self.budget.family
        return {fam.budget_unit: fam.cost(self.family_event(family))}

    @property
    def n_sa_families(self) -> int:
        """(H, S, A)-shaped families noised at once: visits, and rewards when private."""
        return len(self.families) - 1

    def noise_bound(self, failure_prob: float) -> float:
        """E: every visit and transition noise draw within ±E/2 w.p. >= 1 - failure_prob.

        The largest of the visit and transition scales (equal: both in count
        units) in :func:`count_noise_bound`; what DP-APVI uses (Qiao & Wang (2023), E_rho).
        """
        scale = max(self.families["visits"].scale, self.families["transitions"].scale)
        return count_noise_bound(self.mechanism, scale, self.spec.H, self.spec.S, self.spec.A,
                                 self.stationary, self.noise, failure_prob)

    def count_noise_sd(self) -> float:
        """Standard deviation of the noise on one visit or transition count (counts): sigma, or sqrt(2) b.

        (The continuous law's; the discrete law's sd is within a few percent of it at these scales.)
        """
        scale = self.families["visits"].scale
        return self.budget.family.std(scale)

    def negligible_noise_warning(self) -> str | None:
        """A warning when the count noise sd is below :data:`NEGLIGIBLE_NOISE_SD` (a huge budget), else None."""
        sd = self.count_noise_sd()
        if sd >= NEGLIGIBLE_NOISE_SD:
            return None
        amount = f"{self.budget.family.budget_unit} = {num(self.budget.amount)}"
        return (f"WARNING: at {amount} the noise is negligible: its standard deviation on each count is "
                f"{sd:.3g}, below {NEGLIGIBLE_NOISE_SD} count, so the released counts are essentially the exact "
                "counts. The stated guarantee is true but protects almost nothing; use a smaller budget "
                "unless that is what you want.")

    def noise_family(self, family: str, values: np.ndarray, *, rng: np.random.Generator,
                     inplace: bool = False) -> np.ndarray:
        """``values`` (exact stored-unit integers of ``family``) plus one fresh noise draw per cell.

        ``inplace=True`` adds the noise into ``values`` itself when it is an
        int64 C-contiguous array (``mechanisms.add_noise``): for arrays the
        caller owns and no longer needs exact.
        """
        return mechanisms.add_noise(values, mechanism=self.mechanism, scale=self.families[family].scale,
                                    rng=rng, noise=self.noise, inplace=inplace)

    def streams(self, rng: np.random.Generator) -> dict:
        """Independent child generators per family (visits, transitions, rewards), from ``rng.spawn(3)``."""
        rv, rt, rr = rng.spawn(3)
        return {"visits": rv, "transitions": rt, "rewards": rr}

    def apply(self, exact, *, rng: np.random.Generator) -> NoisyCounts:
        """Add the planned noise to every cell of the exact counts.

        Parameters
        ----------
        exact : privaudit.data.counts.SparseCounts
            Exact counts of bounded logs over the declared domain, counted
            with this plan's stationarity and reward quantum.
        rng : numpy.random.Generator
            Split into one child stream per family (:meth:`streams`).

        Returns
        -------
        NoisyCounts
            Visits and rewards noised now; transitions noised lazily per h.

        Raises
        ------
        UsageError
            ``exact`` counted with another stationarity, or without the
            rewards this plan releases.
        """
        if bool(exact.stationary) != self.stationary:
            raise UsageError(f"`exact` must be counted with stationary={self.stationary}. "
                             f"Found stationary={exact.stationary}.")
        st = self.streams(rng)
        visits = self.noise_family("visits", exact.visits, rng=st["visits"])
        rewards = (self.noise_family("rewards", exact.rewards, rng=st["rewards"])
                   if "rewards" in self.families else None)
        fresh = bool(getattr(exact, "fresh_transitions", False))
        return NoisyCounts(visits, rewards, self._noisy_transitions(exact.iter_transitions(), st["transitions"],
                                                                    fresh))

    def _noisy_transitions(self, slices, rng, fresh: bool) -> Iterator:
        """Noise each slice; into the slice itself when the counts hand out fresh arrays (``fresh_transitions``)."""
        for h, values in slices:
            yield h, self.noise_family("transitions", values, rng=rng, inplace=fresh)

    def manifest(self, *, seeded: bool) -> ReleaseManifest:
        """The release's manifest (``manifest.json``, schema ``release_manifest``).

        Built from public facts only: the spec, the plan, the event and the
        modes. ``seeded`` records the rng mode ``seeded-insecure`` (and
        ``private: false``), never the seed itself.

        Raises
        ------
        PrivauditError
            The document breaks its schema (an internal error; checked here,
            before any row is read, and again when it is written).
        """
        spec, stationary = self.spec, self.stationary
        H, S, A = spec.H, spec.S, spec.A
        lead = [] if stationary else ["h"]
        shape_sa = [S, A] if stationary else [H, S, A]
        # format version 3: transition rows (h,) state, next_state with a count column per action, a row group per h
        layout = {"visits": (lead + ["state", "action", "value"], shape_sa, None),
                  "transitions": (lead + ["state", "next_state"] + action_columns(A), shape_sa + [S],
                                  DenseLayout(1 if stationary else H, (S, A, S), WIDE_ORDER)),
                  "rewards": (lead + ["state", "action", "value"], shape_sa, None)}
        families = {}
        for f, p in self.families.items():
            cols, shape, dense = layout[f]
            families[f] = FamilyRecord(FILES[f], tuple(cols), tuple(shape), 1.0 / p.quantum, p.l1, p.l2, p.scale,
                                       self.budget.family.scale_key,
                                       self.family_share(f), dense)
        gaussian = self.mechanism == "gaussian"
        rewards = "rewards" in self.families
        m = ReleaseManifest(
            software_version=__version__,
            created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            spec_hash=spec.hash(),
            dataset_id=spec.dataset_id,
            domain=Domain(H, S, A, stationary, tuple(spec.terminal_states), tuple(spec.reward_range)),
            privacy_unit=UnitRecord(self.unit.column, self.unit.k, spec.unit_file_column, self.max_per_cell),
            neighbouring=Neighbouring.SUBSTITUTION.description,
            bounding={
                "episodes_per_unit": f"at most k={spec.max_episodes_per_unit} episodes per unit: the k with "
                                     "the smallest priority key inside the unit",
                "episode_key": PRIORITY_KEY,
                "steps": f"rows with step h >= H={H} dropped (h is 0-based)",
                "rewards": f"clipped into {list(spec.reward_range)} and scaled to [0, 1]"
                           + ("" if not rewards else
                              f"; rounded to a multiple of 1/{self.families['rewards'].quantum} per row "
                              "before summation"),
                "terminal": "rows whose state is terminal are not counted; transitions into a terminal state are",
                **({} if self.max_per_cell is None else {"per_cell": (
                    f"at most c={self.max_per_cell} steps per unit and "
                    f"{'(s, a) cell pooled over h' if stationary else '(h, s, a) cell'}, after the rules above "
                    f"(transitions and rewards follow the same kept steps): {CELL_KEEP_RULE}")}),
            },
            mechanism=self.mechanism,
            noise=self.noise,
            rng="seeded-insecure" if seeded else "secure",
            families=families,
            guarantee=self.guarantee(),
            event=self.event.to_dict(),
            budget_split=("one noise scale for all families from their combined sensitivity "
                          + ("(L2 in quadrature); family rho_f = l2_f^2 / (2 sigma^2)"
                             if gaussian else "(L1 summed); family eps_f = l1_f / b")
                          + "; reward sensitivities and scales are in stored units (x reward_quantum)"),
            values="noisy integer counts (stored value * value_unit; a transition count is in column action_<a> "
                   "of row (h, state, next_state)), every cell of the declared domain, "
                   "before any clipping at 0 (clipping and projection are the learner's post-processing)",
            public_reward=spec.public_reward,
            reward_quantum=self.families["rewards"].quantum if rewards else None,
        )
        m = m.enveloped()  # the guarantee in the one envelope shape (privaudit.core.envelope)
        m.to_dict()  # the schema check, before any row is read
        return m
