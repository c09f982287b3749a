"""Correct and deliberately broken online explorers, and the audit that must tell them apart.

Each broken explorer reproduces one bug of the papers' pseudo-code or of the
public code (docs/online.md; docs/audit.md, "The broken explorers") as
a small subclass or noise source *here*, never in the production explorers'
code paths; its correct twin is the production explorer at the same budget.
The auditor must flag every broken one (exit 3) and no correct one at the
stated trial budget (tests/audit/test_online_catalogue.py; measured in
benchmarks/bench_audit_online.py).

==============================  ==================================================  =====================
name                            the bug                                             source
==============================  ==================================================  =====================
dp-lsvi-ucb-pp:noise-once       phi_1..3 and K1 drawn once, reused every episode    Sahu (2025), Alg. 1 l. 1;
                                (consecutive Gram releases differ by the data)      Sahu's code
dp-lsvi-ucb-pp:k1-accumulated   Lambda~_k = G_k + 2 lambda~ I + k K1, K1 drawn      Sahu (2025), Alg. 1 l. 26
                                once (second differences are noise-free)
ngo:exact-switch                the determinant-doubling test on the non-private    Ngo et al. (2022)
                                Gram matrix: the switch time is a deterministic
                                function of the data
luyo:no-lower-clip              value targets r + V without the lower clip of V     Sahu (2025), Alg. 1 l. 11;
                                (flagged by the gray-box range check: targets       docs/online.md
                                leave the [0, H + 1] the noise is calibrated for)
luyo:data-range                 the target noise scaled to the largest reward       domain read off the data
                                observed so far (a constant read off the data)
                                instead of the declared bound 1
pucb:add-remove                 counters calibrated for add/remove neighbours       Vietri et al. (2020);
                                (l1 = H per family) under a replacement claim:      add/remove vs replace
                                half the noise
dp-ucbvi-batched:noise-reused   one noise draw added to every batch release         reusing noise across
                                (consecutive releases differ by the data exactly)   batches (docs/online.md)
==============================  ==================================================  =====================

The world of every entry is small (riverswim, H = 2, S = 2 + 4 scripted
states, A = 2, K = 4 users, canary k = 0): a run costs milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from privaudit.audit.claim import Claim
from privaudit.audit.pairs import NeighbouringPair
from privaudit.audit.bounds import perfect_separation_cap
from privaudit.audit.online.checks import gdp_allowed, target_range_check
from privaudit.audit.online.jdp import EXPLORERS, ExplorerMechanism, ExplorerSetup
from privaudit.audit.online.recording import RecordingNoise
from privaudit.audit.report import AuditReport, ReportContext
from privaudit.audit.online.streams import StreamSetup, make_world_pair
from privaudit.audit.choice import selection_size
from privaudit.audit.runner import AuditSettings, FixedEvents, run_audit
from privaudit.core.errors import UsageError
from privaudit.online.env import make_env
from privaudit.online.linear.constants import Problem, luyo_constants, ngo_constants
from privaudit.online.linear.luyo import LuyoLSVIUCB
from privaudit.online.linear.ngo import NgoLSVIUCB
from privaudit.online.linear.build import make_linear_agent
from privaudit.online.linear.numerics import TIE_DECIMALS, bonus_table, psd_inverse
from privaudit.online.tabular.batched_ucb import BatchedUCBVI
from privaudit.online.tabular.pucb import PUCB
from privaudit.privacy.accounting import DEFAULT_REPORT_DELTA
from privaudit.privacy.budget import resolve_budget


# --------------------------------------------------------------------------- broken pieces

class ReusedNoise(RecordingNoise):
    """Draws each family's noise once and returns the same array at every later call (the bug of
    Sahu (2025), Algorithm 1, line 1, and of Sahu's ``DP_LSVI_UCB_PlusPlus.py``)."""

    def __init__(self, rng):
        super().__init__(rng)
        self._first: dict[str, np.ndarray] = {}

    def vector(self, family, sigma, bits, n, dim):
        if family not in self._first:
            self._first[family] = super().vector(family, sigma, bits, n, dim)
        return self.keep(family, self._first[family], bits)

    def goe(self, family, s, bits, n, dim):
        if family not in self._first:
            self._first[family] = super().goe(family, s, bits, n, dim)
        return self.keep(family, self._first[family], bits)


class AccumulatedGramNoise(RecordingNoise):
    """The Gram noise of the k-th release is k K1 with one K1 (Sahu (2025), Algorithm 1, line 26 read literally:
    K1 added on every update of Lambda~); the vector noises stay fresh."""

    def __init__(self, rng):
        super().__init__(rng)
        self._k1 = None
        self._calls = 0

    def goe(self, family, s, bits, n, dim):
        if family != "gram":
            return super().goe(family, s, bits, n, dim)
        if self._k1 is None:
            self._k1 = super().goe(family, s, bits, n, dim)
        self._calls += 1
        return self.keep(family, self._calls * self._k1, bits)


class RewardRangeNoise(RecordingNoise):
    """Scales the target-vector noise by the largest reward observed so far (declared bound: 1)."""

    def __init__(self, rng, agent):
        super().__init__(rng)
        self.agent = agent

    def vector(self, family, sigma, bits, n, dim):
        scale = getattr(self.agent, "reward_max_seen", 0.0) if family == "target" else 1.0
        return self.keep(family, super().vector(family, sigma, bits, n, dim) * scale, bits)


class NoLowerClipLuyo(LuyoLSVIUCB):
    """Luyo et al.'s explorer whose value targets lack the lower clip: V = min(max_a index, H)
    instead of clip(max_a index, 0, H) (Sahu (2025), Algorithm 1, line 11: the missing lower clip, here in
    the Jin family)."""

    def _backward(self, inv, target):
        H = self.H
        bon = self.c.beta * bonus_table(self.phi_flat, inv)
        v = np.zeros(self.S)
        for h in range(H - 1, -1, -1):  # backward over steps, as the production pass
            index = (self.phi_flat @ (inv[h] @ target(h, v)) + bon[h]).reshape(self.S, self.A)
            self.Q[h] = np.minimum(index, H)
            v = np.minimum(index.max(axis=1), H)  # the bug: no max(., 0)
        self.pi = np.round(self.Q, TIE_DECIMALS).argmax(axis=2)


class ExactSwitchNgo(NgoLSVIUCB):
    """Ngo et al.'s explorer whose determinant-doubling test reads the *exact* Gram matrices
    (lambda I + sum phi phi^T) instead of the released noisy ones; releases unchanged."""

    def _prepare(self):
        inv, _ = self._released_inverse()
        exact = self.exact_gram() - self.c.shift * np.eye(self.d)
        logdet = np.linalg.slogdet(exact)[1]
        if self._logdet_last is None:
            self._logdet_last = logdet
            return self.pi
        if (logdet - self._logdet_last > math.log(self.c.switch_ratio)).any() and self.n_switches < self.c.n_max:
            self._backward(inv, self._target_release())
            self._logdet_last = logdet
            self.n_switches += 1
        return self.pi

    def _released_inverse(self):
        return psd_inverse(self._gram_release(self._released), self.c.floor)


class ReusedNoiseBatched(BatchedUCBVI):
    """Batched DP-UCBVI that draws its noise once and adds the same draw to every batch release (the
    parallel-composition argument needs a fresh draw per batch: two releases then differ by the data alone)."""

    def noise(self, shape):
        if getattr(self, "_first", None) is None:
            self._first = super().noise(shape)
        return self._first


def _batched(world, rng, rho, cls=BatchedUCBVI):
    """Batched DP-UCBVI with one user per batch (the audit world sees k's release and the next one)."""
    return cls(world.reward, world.horizon, world.n_states, world.n_episodes, rho=rho,
               stationary=world.env.mdp.stationary, first_batch=1, growth=1.0, rng=rng)


# --------------------------------------------------------------------------- entries

@dataclass(frozen=True)
class OnlineEntry:
    """One catalogue explorer."""

    name: str
    #: The production explorer (the twin).
    algo: str
    broken: bool
    bug: str
    #: ``{"epsilon": ..}`` (PUCB) or ``{"rho": ..}``: the budget the explorer claims (and, for a correct one, runs
    #: at).
    budget: dict
    #: Pair kind (``privaudit.audit.online.streams.DECOYS``).
    decoy: str = "orthogonal"
    #: The stated trial budget per side at which the verdict is asserted.
    trials: int = 400
    view: str = "billboard"
    world: dict = field(default_factory=lambda: {"horizon": 2, "states": 2, "n_episodes": 4, "canary_user": 0,
                                                 "n_after": 3})


def _pp(world, rng, rho, noise_cls):
    agent = make_linear_agent("dp-lsvi-ucb-pp", world.phi, world.reward, world.horizon, world.n_episodes,
                              rho=rho, rng=rng)
    agent.noise = noise_cls(agent.rng)
    return agent


def _exact_switch(world, rng, rho):
    pb = Problem(world.horizon, world.n_states, world.n_actions, world.phi.shape[2], world.n_episodes)
    return ExactSwitchNgo(world.phi, world.horizon, world.n_episodes, ngo_constants(pb, rho, "practical"), rng=rng)


class _RewardRangeLuyo:
    """Builds Luyo's explorer with :class:`RewardRangeNoise` and a running max of the observed rewards."""

    @staticmethod
    def build(world, rng, rho):
        agent = make_linear_agent("luyo", world.phi, world.reward, world.horizon, world.n_episodes, rho=rho, rng=rng)
        agent.reward_max_seen = 0.0
        update = agent.update

        def tracked(states, actions, rewards):
            agent.reward_max_seen = max(agent.reward_max_seen, float(np.max(rewards)))
            update(states, actions, rewards)
        agent.update = tracked
        agent.noise = RewardRangeNoise(agent.rng, agent)
        return agent


CATALOGUE = {e.name: e for e in [
    OnlineEntry("pucb", "pucb", False, "-", {"epsilon": 1.0}, trials=2000),
    OnlineEntry("luyo", "luyo", False, "-", {"rho": 0.1}),
    OnlineEntry("ngo", "ngo", False, "-", {"rho": 0.1}),
    OnlineEntry("ngo-null", "ngo", False, "-", {"rho": 0.1}, decoy="null"),
    OnlineEntry("luyo-null", "luyo", False, "-", {"rho": 0.1}, decoy="null"),
    OnlineEntry("dp-lsvi-ucb-pp", "dp-lsvi-ucb-pp", False, "-", {"rho": 0.1}),
    OnlineEntry("dp-lsvi-ucb-pp:noise-once", "dp-lsvi-ucb-pp", True, "noise drawn once, reused every episode",
                {"rho": 0.1}),
    OnlineEntry("dp-lsvi-ucb-pp:k1-accumulated", "dp-lsvi-ucb-pp", True, "K1 accumulated over updates",
                {"rho": 0.1}),
    OnlineEntry("ngo:exact-switch", "ngo", True, "switch test on the non-private Gram matrix", {"rho": 0.1},
                decoy="null"),
    OnlineEntry("luyo:no-lower-clip", "luyo", True, "no lower clip on the value targets", {"rho": 0.1}),
    OnlineEntry("luyo:data-range", "luyo", True, "target noise scaled to the observed reward range", {"rho": 0.1},
                decoy="null"),
    OnlineEntry("dp-ucbvi-batched", "dp-ucbvi-batched", False, "-", {"rho": 0.1}),
    OnlineEntry("dp-ucbvi-batched:per-user", "dp-ucbvi-batched", False, "-", {"rho": 0.1}),
    OnlineEntry("dp-ucbvi-batched:noise-reused", "dp-ucbvi-batched", True, "one noise draw reused by every batch release",
                {"rho": 0.1}),
    OnlineEntry("pucb:add-remove", "pucb", True, "replacement calibrated as add/remove", {"epsilon": 1.0},
                trials=20000, world={"horizon": 1, "states": 2, "n_episodes": 1, "canary_user": 0, "n_after": 0}),
]}
#: The correct twin of each broken entry.
TWIN = {"luyo:no-lower-clip": "luyo", "dp-lsvi-ucb-pp:noise-once": "dp-lsvi-ucb-pp", "dp-lsvi-ucb-pp:k1-accumulated": "dp-lsvi-ucb-pp",
        "ngo:exact-switch": "ngo-null", "luyo:data-range": "luyo-null", "pucb:add-remove": "pucb",
        "dp-ucbvi-batched:noise-reused": "dp-ucbvi-batched:per-user"}
BROKEN = tuple(n for n, e in CATALOGUE.items() if e.broken)
CORRECT = tuple(n for n, e in CATALOGUE.items() if not e.broken)


def entry_mechanism(entry: OnlineEntry, view: str | None = None, budget: dict | None = None,
                    constants: str = "practical") -> ExplorerMechanism:
    """The audit mechanism of a catalogue entry (its broken builder, if any), at ``budget`` (default: the entry's)."""
    budget = budget or entry.budget
    rho, eps = budget.get("rho"), budget.get("epsilon")
    build = None
    if entry.name == "dp-lsvi-ucb-pp:noise-once":
        def build(w, r):
            return _pp(w, r, rho, ReusedNoise)
    elif entry.name == "dp-lsvi-ucb-pp:k1-accumulated":
        def build(w, r):
            return _pp(w, r, rho, AccumulatedGramNoise)
    elif entry.name == "ngo:exact-switch":
        def build(w, r):
            return _exact_switch(w, r, rho)
    elif entry.name == "luyo:no-lower-clip":
        def build(w, r):
            pb = Problem(w.horizon, w.n_states, w.n_actions, w.phi.shape[2], w.n_episodes)
            return NoLowerClipLuyo(w.phi, w.horizon, w.n_episodes, luyo_constants(pb, rho, "practical"), rng=r)
    elif entry.name == "luyo:data-range":
        def build(w, r):
            return _RewardRangeLuyo.build(w, r, rho)
    elif entry.name == "dp-ucbvi-batched:per-user":
        def build(w, r):
            return _batched(w, r, rho)
    elif entry.name == "dp-ucbvi-batched:noise-reused":
        def build(w, r):
            return _batched(w, r, rho, ReusedNoiseBatched)
    elif entry.name == "pucb:add-remove":
        def build(w, r):  # the add/remove calibration: Delta_1 = H per family, i.e. the scale of 2 eps
            return PUCB(w.n_states, w.n_actions, w.horizon, w.n_episodes, epsilon=2 * eps, rng=r)
    return ExplorerMechanism(entry.algo, epsilon=eps, rho=rho, view=view or entry.view, build=build,
                             constants=constants, name=f"explore:{entry.name}",
                             **({"delta": budget["delta"]} if "delta" in budget else {}))


def audit_explorer(mech: ExplorerMechanism, d_world, dp_world, description: dict, *, claim: Claim,
                   trials: int, seed: int | None = None, confidence: float = 0.95,
                   selection_fraction: float | None = None, progress: bool | None = None, fixed: bool = False):
    """Audit an explorer's JDP claim on a neighbouring pair of user streams (``run_audit`` on worlds).

    Parameters
    ----------
    mech : ExplorerMechanism
    d_world, dp_world : AuditWorld
        D and D' (:func:`privaudit.audit.online.streams.make_world_pair`).
    description : dict
        The pair's description; the JDP output audited is added to it.
    claim : Claim
        ``kind="gaussian"`` (the GDP opt-in) is refused when :func:`gdp_allowed` says no.
    trials, seed, confidence, selection_fraction, progress
        As :func:`privaudit.audit.runner.run_audit`.
    fixed : bool
        Billboard view: count the events fixed from the public design
        (:meth:`ExplorerMechanism.fixed_events`: the projection on user k's
        known change) on all ``trials`` runs, with no selection split.

    Returns
    -------
    AuditReport
        Its ``graybox`` block is the target-range check; a failed check is the verdict (no trials run).

    Raises
    ------
    UsageError
        A GDP opt-in for an explorer whose noise is not continuous Gaussian.
    """
    if claim.kind == "gaussian":
        ok, why = gdp_allowed(mech, d_world)
        if not ok:
            raise UsageError(f"the GDP opt-in (claim kind gaussian) is not valid here: {why}.")
    desc = dict(description)
    desc["jdp_output"] = (
        "billboard (gray-box): the released noisy statistics after user k, restricted to the cells/directions "
        "only user k fills (node-decoded for tree counters)" if mech.view == "billboard" else
        "actions (black-box): the actions recommended after user k at the probe cells (lanes x, y at every "
        "step; probe state p at step 0 for linear explorers)")
    desc["view"] = mech.view
    pair = NeighbouringPair(d_world, dp_world, desc)
    fixed_events = FixedEvents(mech.fixed_events(pair), mech.FIXED_REASON) if fixed else None
    gb = target_range_check(mech, (d_world, dp_world), seed=0 if seed is None else seed)
    if gb["violation"]:
        n_ev = int(trials) - selection_size(int(trials), selection_fraction)
        cap = perfect_separation_cap(n_ev, n_ev, (1 - confidence) / 2, claim.delta)
        context = ReportContext(mechanism=mech.name, claim=claim, confidence=confidence, pair=desc, graybox=gb,
                                selection_trials=0, evaluation_trials=0,
                                rng_mode="seeded-insecure" if seed is not None else "secure", resolution=cap,
                                self_contained=mech.SELF_CONTAINED)
        rep = AuditReport.graybox_only(context, runtime_s=0.0)
        row = gb["families"][0]
        rep.data["messages"] = [f"gray-box: user k's regression targets span {row['observed_range']} over "
                                f"{row['runs']} seeded runs; the vector noise is calibrated for targets in "
                                f"{row['declared_range']} (Delta_2 = {row['declared_l2']:g}): the explorer does not "
                                "enforce the range its sensitivity assumes"]
        return rep
    settings = AuditSettings(confidence=confidence, selection_fraction=selection_fraction, graybox=False,
                             mechanism_name=mech.name)
    rep = run_audit(mech, claim=claim, pair=pair, trials=int(trials), seed=seed, progress=progress,
                    fixed=fixed_events, settings=settings)
    rep.data["graybox"] = gb
    return rep


def entry_claim(entry: OnlineEntry, kind: str = "generic", delta: float = 1e-5) -> Claim:
    """The claim an entry's documentation makes: pure eps (PUCB) or rho-zCDP at ``delta``."""
    if "epsilon" in entry.budget:
        return Claim.from_epsilon(entry.budget["epsilon"], 0.0)
    return Claim.from_rho(entry.budget["rho"], delta, kind=kind)


def audit_entry(name: str, *, trials: int | None = None, seed: int | None = None, kind: str = "generic",
                view: str | None = None, selection_fraction: float | None = None):
    """Audit one catalogue entry at its stated (or the given) trial budget."""
    if name not in CATALOGUE:
        raise UsageError(f"unknown online catalogue entry {name!r}; known: {sorted(CATALOGUE)}.")
    e = CATALOGUE[name]
    w = dict(e.world)
    env = make_env("riverswim", horizon=w.pop("horizon"), states=w.pop("states"))
    d, dp, desc = make_world_pair(env, decoy=e.decoy, **w)
    mech = entry_mechanism(e, view)
    return audit_explorer(mech, d, dp, desc, claim=entry_claim(e, kind), trials=trials or e.trials, seed=seed,
                          selection_fraction=selection_fraction)


def explore_audit(algo: str, *, claim_epsilon: float | None, claim_rho: float | None, delta: float | None,
                  claim_kind: str = "generic", explorer: ExplorerSetup | None = None,
                  streams: StreamSetup | None = None, trials: int, confidence: float = 0.95,
                  seed: int | None = None, fixed: bool = False) -> AuditReport:
    """``privaudit audit --mechanism explore:ALGO``: audit an explorer's JDP claim on simulated user streams.

    Parameters
    ----------
    algo : str
        A private explorer (:data:`~privaudit.audit.online.jdp.EXPLORERS`) or a broken
        entry of :data:`CATALOGUE` (e.g. ``ngo:exact-switch``).
    claim_epsilon, claim_rho, delta, claim_kind
        The claim: PUCB (Laplace counters) takes ``claim_epsilon`` (delta
        default 0); the linear explorers ``claim_rho`` (compared at ``delta``,
        default :data:`~privaudit.privacy.accounting.DEFAULT_REPORT_DELTA`, as every command) or ``claim_epsilon`` with ``delta`` > 0 (run at the
        largest rho whose CKS conversion gives it). ``claim_kind="gaussian"``
        opts in to the GDP test (refused unless the noise is continuous Gaussian).
    explorer : ExplorerSetup, optional
        View, constants and a budget override (:class:`~privaudit.audit.online.jdp.ExplorerSetup`).
    streams : StreamSetup, optional
        The environment and the pair of user streams (:class:`~privaudit.audit.online.streams.StreamSetup`).
    trials, confidence, seed
        As :func:`~privaudit.audit.runner.run_audit`.
    fixed : bool
        Billboard view: the events fixed from the public design, no selection split (:func:`audit_explorer`).

    Returns
    -------
    AuditReport
        The report of :func:`audit_explorer`; the pair's description records the explorer's budget.

    Raises
    ------
    UsageError
        Unknown or non-private algorithm, a claim the explorer's noise cannot
        state (rho for PUCB, pure epsilon for a Gaussian explorer), both
        mechanism overrides, bad environment options.
    """
    explorer, streams = explorer or ExplorerSetup(), streams or StreamSetup()
    if algo in CATALOGUE and CATALOGUE[algo].broken:
        entry = CATALOGUE[algo]
    elif algo in EXPLORERS:
        entry = OnlineEntry(algo, algo, False, "-", {})
    else:
        raise UsageError(f"unknown explorer {algo!r} for explore:ALGO; choose one of {list(EXPLORERS)} or a broken "
                         f"catalogue explorer {list(BROKEN)} (non-private explorers make no claim to audit).")
    mechanism_rho, mechanism_epsilon = explorer.mechanism_rho, explorer.mechanism_epsilon
    if mechanism_rho is not None and mechanism_epsilon is not None:
        raise UsageError("give at most one of `mechanism_rho` and `mechanism_epsilon`.")
    if entry.algo == "pucb":
        if claim_epsilon is None:
            raise UsageError("pucb's counters are Laplace (pure epsilon-DP): give `claim_epsilon` (and `delta` 0).")
        if mechanism_rho is not None:
            raise UsageError("`mechanism_rho` with pucb: its Laplace counters have no rho budget; use "
                             "`mechanism_epsilon`.")
        claim = Claim.from_epsilon(claim_epsilon, 0.0 if delta is None else delta, kind=claim_kind)
        budget = {"epsilon": mechanism_epsilon if mechanism_epsilon is not None else claim_epsilon}
    else:
        if mechanism_epsilon is not None:
            raise UsageError(f"`mechanism_epsilon` with {algo}: it adds Gaussian noise; use `mechanism_rho`.")
        if claim_rho is not None:
            claim = Claim.from_rho(claim_rho, DEFAULT_REPORT_DELTA if delta is None else delta, kind=claim_kind)
            rho = claim_rho
        else:
            if not delta:
                raise UsageError(f"{algo} adds Gaussian noise: a pure-epsilon claim (`delta` 0) cannot hold; give "
                                 "`claim_epsilon` with `delta` > 0, or `claim_rho`.")
            claim = Claim.from_epsilon(claim_epsilon, delta, kind=claim_kind)
            rho = resolve_budget(epsilon=claim_epsilon, delta=delta).rho
        # run at the claim's delta, as `privaudit explore --rho R --delta D` runs (Luyo's batch count reads it)
        budget = {"rho": mechanism_rho if mechanism_rho is not None else rho, "delta": claim.delta}
    d, dp, desc = streams.world_pair()
    mech = entry_mechanism(entry, explorer.view, budget, explorer.constants)
    desc["explorer_budget"] = budget
    return audit_explorer(mech, d, dp, desc, claim=claim, trials=trials, seed=seed, confidence=confidence,
                          fixed=fixed)
