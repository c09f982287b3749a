"""Auditing the joint-DP claims of online explorers: the explorer as an audit mechanism.

An :class:`ExplorerMechanism` is a batched mechanism for
:func:`privaudit.audit.runner.run_audit` whose "dataset" is an
:class:`~privaudit.audit.online.streams.AuditWorld` (a user stream) instead of
logs: each run builds a fresh explorer (fresh noise from the audit's
generator), plays users 0..k+m of the world and returns one *view* of what the
explorer published. The offline auditor then does everything else unchanged:
scores fitted and the event chosen on a selection split, one-sided
Clopper-Pearson bounds on an independent evaluation split, the generic
(eps, delta) test, the GDP opt-in, the report and its exit codes.

Views (what the attacker reads; each is a post-processing of what the claim
covers, so a lower bound on it is a lower bound for the claim):

``billboard`` (gray-box)
    The released noisy statistics, projected on user k's change: the releases
    restricted to the cells / directions only user k fills.

    * PUCB: for each tree node that holds user k's leaf (the nodes
      (t - lowbit(t), t] with t - lowbit(t) < k + 1 <= t, decoded from the
      releases as S~_t - S~_{t - lowbit(t)}), the three families' values at
      (h, lane, pi_k(h, lane)) for both lanes x and y: shape (nodes, 3, H, 2).
      pi_k is the policy fixed before user k arrived (her actions at either
      lane); it depends on the releases before k and on the agent's
      tie-breaking coins, which are independent of the data, so conditioning
      on them keeps the claim (the counters are eps-DP for every coin
      sequence). Each value is the lane's count (0 or 1; reward 1) plus one
      exact discrete-Laplace node noise: the Laplace likelihood-ratio score
      (``laplace_lr``) is the Neyman-Pearson test.
    * Batched DP-UCBVI: every batch release from user k's batch on (the batch's own noisy counts, before
      they are summed), at user k's lane cells (L, a, L) projected on her known contribution
      u^L_a = min(c, #{h : pi_k(h, L) = a}) and divided by ||u^L||, for both lanes: shape (releases, 2)
      (``views.batched_billboard``). Fixed scores: the projection of her batch's release, and its
      difference with the next release (where a noise reused across batches cancels).
    * Ngo, Luyo: the Gram trees' node values at the (c, c) and (x, x) entries
      for every h (decoded as above: one GOE node noise each), the target
      vector releases after k at coordinates c and x (released value = user
      k's target r + V_{h+1}(lane), V as the agent used it, plus the noise the
      agent drew), and (Ngo) whether each episode after k switched.
    * DP-LSVI-UCB++: every Gram release from k to k + m at the (c, c) and
      (x, x) entries for every h (exact weighted Gram plus the GOE noise the
      agent drew), shape (m + 1, H, 2); the release at k (before user k) lets
      a score difference out noise that is reused across releases.

    The noise is recorded as the agent draws it (a recording
    ``NoiseSource`` / tree proxy installed before the first draw), and the
    exact part read from the agent's statistics: the view equals the release.

``actions`` (black-box)
    The actions recommended after user k at the probe cells: pi_t(h, x) and
    pi_t(h, y) for every h and, in a linear world, pi_t(0, p) (the probe state
    whose two actions point at e_x and e_c: user k's data makes one of them
    look better), for t = k + 1 .. k + m. Shape (m, cells), integers.

References
----------
Vietri et al. (2020) (JDP; the released output is every episode's actions and the
final policy); Ngo et al. (2022), Sahu (2025), Definition 2.2; docs/audit.md, "Online explorers" and
"Background" (GDP fit for Gaussian mechanisms, the
Laplace likelihood-ratio event, discrete outputs).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np

from privaudit.audit import bounds as B
from privaudit.audit.online.recording import NoisePool, RecordingNoise
from privaudit.audit.online.streams import AuditWorld
from privaudit.audit.online.views import (TABULAR, actions_view, batched_billboard, pp_billboard, pucb_billboard,
                                          tree_billboard)
from privaudit.core.errors import UsageError
from privaudit.online.linear.lattice import NoiseSource
from privaudit.online.linear.lsvi_ucb_pp import LSVIUCBPlusPlus
from privaudit.online.linear.build import make_linear_agent
from privaudit.online.tabular.batched_ucb import BatchedUCBVI
from privaudit.online.tabular.pucb import PUCB
from privaudit.privacy.accounting import Accountant
from privaudit.privacy.events import leaves

#: Explorers the online auditor knows (private ones: their claims are tested).
EXPLORERS = ("pucb", "luyo", "ngo", "dp-lsvi-ucb-pp", "dp-ucbvi-batched")
#: Views of an explorer's output (module docstring).
VIEWS = ("billboard", "actions")


@dataclass(frozen=True)
class ExplorerSetup:
    """How an audited explorer runs and what its attacker reads.

    Attributes
    ----------
    view : {"billboard", "actions"}
        See the module docstring.
    constants : {"practical", "theory"}
        The explorer's constants.
    mechanism_rho, mechanism_epsilon : float, optional
        Run the explorer at this budget instead of the claim's (a mis-stated claim); at most one.
    """

    view: str = "billboard"
    constants: str = "practical"
    mechanism_rho: float | None = None
    mechanism_epsilon: float | None = None


# --------------------------------------------------------------------------- the mechanism

class ExplorerMechanism:
    """An online explorer as a batched audit mechanism over :class:`AuditWorld` streams.

    Parameters
    ----------
    algo : str
        One of :data:`EXPLORERS`.
    epsilon : float, optional
        PUCB's pure-DP budget (Laplace counters).
    rho : float, optional
        The linear explorers' zCDP budget.
    delta : float
        Reported delta (Luyo's batch count uses it).
    view : {"billboard", "actions"}
    constants : {"practical", "theory"}
    build : callable, optional
        ``build(world, rng) -> agent`` replacing the default builder (the
        catalogue's broken variants).
    name : str, optional

    Notes
    -----
    Every run draws a fresh agent from a child of the audit's generator; the
    world (all users' trees) is the same in every run. Python loops over runs
    and users: the explorers are sequential by nature; keep K small.
    """

    #: privaudit's own code: output from the given dataset, spec and own noise only (``audit.report.sharing``).
    SELF_CONTAINED = True

    def __init__(self, algo: str, *, epsilon: float | None = None, rho: float | None = None, delta: float = 1e-5,
                 view: str = "billboard", constants: str = "practical", build=None, name: str | None = None):
        if algo not in EXPLORERS:
            raise UsageError(f"unknown explorer {algo!r}; the online auditor knows {list(EXPLORERS)}.")
        if view not in VIEWS:
            raise UsageError(f"`view` must be one of {VIEWS}. Got {view!r}.")
        if algo == "pucb":
            if epsilon is None or rho is not None:
                raise UsageError("pucb is audited at a pure-epsilon budget (Laplace counters): give `epsilon`.")
        elif rho is None or epsilon is not None:
            raise UsageError(f"{algo} adds Gaussian noise (rho-zCDP): give `rho`.")
        self.algo, self.epsilon, self.rho, self.delta = algo, epsilon, rho, float(delta)
        self.view, self.constants, self._build = view, constants, build
        self.name = name or f"explore:{algo}"
        self.targets_seen: list[np.ndarray] = []  # user k's targets in the last run's vector releases

    @property
    def __name__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"ExplorerMechanism({self.name!r}, view={self.view!r})"

    # -- agents ----------------------------------------------------------------
    def build(self, world: AuditWorld, rng: np.random.Generator, pool: "NoisePool | None" = None):
        """A fresh explorer for ``world`` (noise from ``rng``), with the recorders installed.

        ``pool``: the noise of a batch of runs drawn at once (:class:`NoisePool`); the explorer's own
        :class:`~privaudit.online.linear.lattice.NoiseSource` is replaced by the pool's shared recording
        source and its Gram tree is handed its node noises from the pool. Broken variants that install
        their own noise source (the catalogue) keep it.
        """
        agent = self._build(world, rng) if self._build is not None else self.default_build(world, rng)
        if self.algo not in TABULAR:
            if type(agent.noise) is NoiseSource:
                agent.noise = pool.source if pool is not None else RecordingNoise(agent.rng)
            elif not isinstance(agent.noise, RecordingNoise):
                agent.noise = RecordingNoise(agent.rng)
            if pool is not None and getattr(agent, "tree", None) is not None:
                pool.supply_tree(agent.tree, world)
        return agent

    def default_build(self, world: AuditWorld, rng: np.random.Generator):
        """The production explorer at this budget (``privaudit explore``'s constructors)."""
        if self.algo == "pucb":
            return PUCB(world.n_states, world.n_actions, world.horizon, world.n_episodes, epsilon=self.epsilon,
                        constants=self.constants, rng=rng)
        if self.algo == "dp-ucbvi-batched":   # the audit world's scripted lanes are absorbing: stationary
            return BatchedUCBVI(world.reward, world.horizon, world.n_states, world.n_episodes, rho=self.rho,
                                stationary=world.env.mdp.stationary, rng=rng)
        return make_linear_agent(self.algo, world.phi, world.reward, world.horizon, world.n_episodes,
                                 rho=self.rho, delta=self.delta, constants=self.constants, rng=rng)

    def events(self, world: AuditWorld) -> list:
        """The privacy events the explorer states for a run of the public K (no data needed)."""
        agent = self.default_build(world, np.random.default_rng(0))
        return list(getattr(agent, "events_", []))

    def noise_kinds(self, world: AuditWorld) -> set:
        """How the explorer draws its noise: ``{"exact"}``, ``{"continuous"}``, ... (from its events)."""
        return {leaf.noise for e in self.events(world) for leaf, _ in leaves(e)}

    def stated_claim(self, world: AuditWorld) -> dict:
        """The budget the explorer's events compose to: ``{"epsilon": ..}`` (pure) or ``{"rho": ..}``."""
        acc = Accountant()
        for e in self.events(world):
            acc.compose(e)
        if acc.is_pure():
            return {"epsilon": float(acc.total_epsilon())}
        return {"rho": float(acc.total_rho())}

    # -- the known projection ----------------------------------------------------
    def attack_scores(self, pair) -> list:
        """The fixed score "projection on user k's change" of the billboard view (larger = more like D').

        The change is known from the pair alone (the Neyman-Pearson direction: project on mean(D') - mean(D)):
        user k adds her unit at the canary lane y / direction e_c in D' and at the decoy lane x / e_x in D. PUCB: the
        Laplace likelihood ratio sum |v - m_D| - |v - m_D'| with the lane values 0/1 (Neyman-Pearson for the
        node noise); the linear explorers: sum of (c - x) entries, each family weighted by 1/variance of its
        noise (Gram nodes / releases: the GOE diagonal 2 s^2; target releases: sigma^2 of the vector noise).
        A fixed score costs no fitting, so it is not diluted by estimating a direction from few runs.
        """
        if self.view != "billboard":
            return []
        world = pair.d_prime
        if self.algo == "pucb":
            def lr(X):
                v = X.reshape(len(X), -1, 2)  # (..., lane): lane 0 = x (D's unit), 1 = y (D''s)
                return (np.abs(v[..., 1]) - np.abs(v[..., 1] - 1) + np.abs(v[..., 0] - 1) - np.abs(v[..., 0])).sum(1)
            return [("canary_laplace_lr", lr)]
        if self.algo == "dp-ucbvi-batched":
            # X: (releases, 2) per run, lane 0 = x (D's unit), 1 = y (D''s); the release of user k's batch, and
            # its difference with the next release (a noise reused across releases cancels there)
            def proj_b(X):
                v = X.reshape(len(X), -1, 2)
                return v[:, 0, 1] - v[:, 0, 0]

            def diff_b(X):
                v = X.reshape(len(X), -1, 2)
                return (v[:, 0, 1] - v[:, 0, 0]) - (v[:, 1, 1] - v[:, 1, 0]) if v.shape[1] > 1 else proj_b(X)
            return [("canary_projection", proj_b), ("canary_release_difference", diff_b)]
        c = self.default_build(world, np.random.default_rng(0)).c
        w_gram = 1.0 / max(2.0 * c.noise_gram ** 2, 1e-300)
        H, m = world.horizon, world.n_after
        if self.algo == "dp-lsvi-ucb-pp":
            # Gram releases after k: user k's weight w at (c, c) or (x, x), noise variance 2 s^2 (GOE diagonal);
            # target releases: w V_{h+1}(lane) (V-hat, V-check) and w V^2 (squared), V nominally H - h - 1 (the
            # lane's value: reward 1 per remaining step), noise variances sigma_v^2, sigma_v2^2. Weights
            # signal / variance (Neyman-Pearson for independent Gaussians), fixed from the public design.
            v_nom = np.maximum(H - 1 - np.arange(H), 0).astype(float)          # (H,)
            w_vec = np.stack([v_nom / max(c.noise_v ** 2, 1e-300), v_nom / max(c.noise_v ** 2, 1e-300),
                              v_nom ** 2 / max(c.noise_v2 ** 2, 1e-300)], axis=1)  # (H, 3)
            n_gram = (m + 1) * H * 2

            def proj_pp(X, a=n_gram):
                X = X.reshape(len(X), -1)
                g = X[:, a // (m + 1):a].reshape(len(X), m, H, 2)      # releases after k; lane 0 = c, 1 = x
                v = X[:, a:].reshape(len(X), m, H, 3, 2)
                return (w_gram * (g[..., 0] - g[..., 1]).reshape(len(X), -1).sum(1)
                        + ((v[..., 0] - v[..., 1]) * w_vec).reshape(len(X), -1).sum(1))
            return [("canary_projection", proj_pp)]
        n_leaves = c.n_batches if self.algo == "luyo" else world.n_episodes
        n_nodes = int(n_leaves).bit_length() * H * 2
        n_vec = world.n_after * H * 2
        w_vec = 1.0 / max(c.noise_vec ** 2, 1e-300)

        def proj(X, a=n_nodes, b=n_vec):
            nodes, vec = X[:, :a].reshape(len(X), -1, 2), X[:, a:a + b].reshape(len(X), -1, 2)
            return (w_gram * (nodes[..., 0] - nodes[..., 1]).sum(1)
                    + w_vec * (vec[..., 0] - vec[..., 1]).sum(1))
        return [("canary_projection", proj)]

    def fixed_events(self, pair) -> list:
        """Events fixed from the public design before any run: ``[(name, fn, threshold, direction)]``.

        The billboard view's known projection on user k's change (:meth:`attack_scores`) with the
        threshold at the design's midpoint 0: with the orthogonal decoy the pair is symmetric under
        swapping the coordinates / lanes c and x (both absorbing, reward 1, filled by user k alone;
        the noise is exchangeable), so the projection's law under D is the mirror of its law under
        D' and 0 is the median of the pooled scores, where the Gaussian trade-off curve is estimated
        best. PUCB (pure eps): the Laplace likelihood-ratio score (range [-6, 6] on the tight world H = 1,
        K = 1: three families x two lanes, each term in [-1, 1]) at the thresholds 2, 4 and 5, in its
        upper tail where the Laplace likelihood ratio approaches e^eps (all terms saturated); each gets a
        Bonferroni share. Nothing
        here looks at a run, so no selection split is needed (``run_audit(fixed_events=...)``).
        The null decoy breaks the symmetry: the events stay valid (fixed in advance) but 0 is no
        longer the midpoint.

        Raises
        ------
        UsageError
            The actions view (discrete outputs have no design-known projection).
        """
        if self.view != "billboard":
            raise UsageError("fixed events exist for the billboard view only (the projection on user k's known "
                             "change); the actions view chooses its event on a selection split.")
        if self.algo == "dp-ucbvi-batched":
            return [(name, fn, 0.0, "+") for name, fn in self.attack_scores(pair)]
        (name, fn), = self.attack_scores(pair)
        if self.algo == "pucb":
            return [(name, fn, float(t), "+") for t in (2.0, 4.0, 5.0)]
        return [(name, fn, 0.0, "+")]

    FIXED_REASON = ("the projection on the canary's known change direction (coordinates / lanes c and x, fixed by "
                    "the public design of the audit world) with thresholds fixed in advance")

    # -- the GDP test on lattice noise ----------------------------------------------
    def prepare(self, d_world: AuditWorld, dp_world: AuditWorld) -> "ExplorerMechanism":
        """The runner's hook: this mechanism bound to the pair's worlds (for :meth:`gaussian_tv_per_run`)."""
        bound = copy.copy(self)
        bound._world = d_world
        return bound

    def gaussian_tv_per_run(self) -> float:
        """Total-variation distance from one run's output to a post-processed continuous Gaussian mechanism.

        Each exact discrete Gaussian coordinate the run draws on the lattice 2^-bits is within
        :func:`privaudit.audit.bounds.lattice_gaussian_tv` (g / sigma) of the continuous
        N(0, sigma^2) rounded to the lattice; coupling the draws one by one (each conditionally on the
        past: the composition is adaptive) the whole run differs from its continuous twin with
        probability at most the sum over the coordinates drawn. The twin is an adaptive composition of
        continuous Gaussian mechanisms of the lattice statistics with the declared sensitivities
        (GOE: ||Delta||_F^2 / (4 s^2) per matrix, the same cost), then rounding and everything after
        (post-processing): sqrt(2 rho)-GDP for the rho the explorer states. So the GDP test of n runs
        per side errs with probability at most its level plus 2 n times this bound (the runner spends
        that share of alpha). Coordinates counted per run, an upper bound whatever the data: every
        user closes at most one tree node per step (H d (d + 1) / 2 entries), Luyo and Ngo release at
        most H target vectors per user, DP-LSVI-UCB++ one GOE and three vectors per (user, h).

        Returns
        -------
        float
            The bound for one run.

        Raises
        ------
        UsageError
            PUCB (Laplace noise), or called before :meth:`prepare`.
        """
        world = getattr(self, "_world", None)
        if self.algo == "pucb" or world is None:
            raise UsageError("gaussian_tv_per_run needs a Gaussian explorer bound to its world (prepare).")
        agent = (self._build or (lambda w, r: self.default_build(w, r)))(world, np.random.default_rng(0))
        if self.algo == "dp-ucbvi-batched":   # integer counts (lattice unit 1): every cell of every release
            return float(agent.released_.size * len(agent.ends_) * B.lattice_gaussian_tv(1.0 / agent.sigma_))
        c, lat, H, U, d = agent.c, agent.lattice, world.horizon, world.n_users, agent.d
        if lat is None:
            return 0.0
        entries = d * (d + 1) // 2
        if self.algo == "dp-lsvi-ucb-pp":
            sds = [(math.ldexp(c.noise_gram, lat.gram_bits), U * H * entries),
                   (math.ldexp(c.noise_v, lat.target_bits), 2 * U * H * d),
                   (math.ldexp(c.noise_v2, lat.square_target_bits), U * H * d)]
        else:
            sds = [(math.ldexp(c.noise_gram, lat.gram_bits), U * H * entries),
                   (math.ldexp(c.noise_vec, lat.target_bits), U * H * d)]
        # a GOE diagonal has sd sqrt(2) s, larger than the off-diagonal s: s bounds both (tv grows with g / sigma)
        return float(sum(n * B.lattice_gaussian_tv(1.0 / sd) for sd, n in sds))

    # -- runs ------------------------------------------------------------------
    def __call__(self, world: AuditWorld, rng: np.random.Generator, n_runs: int = 1) -> np.ndarray:
        """``n_runs`` independent runs of the explorer on ``world``; the chosen view of each, stacked.

        The runs share one :class:`NoisePool`: the privacy noise of all of them is drawn in a few
        vectorised calls (the draws are i.i.d. and independent of the data, so this is the same mechanism
        as each run drawing its own), which removes most of a short run's cost.
        """
        if not isinstance(world, AuditWorld):
            raise UsageError(f"an explorer is audited on an AuditWorld (a user stream). Got {type(world).__name__}.")
        n = int(n_runs)
        *runs, r_pool = rng.spawn(n + 1)
        pool = NoisePool(r_pool, n * world.n_users) if self.algo not in TABULAR else None
        return np.stack([self.run_once(world, r, pool=pool) for r in runs])

    def run_once(self, world: AuditWorld, rng: np.random.Generator, pool: "NoisePool | None" = None) -> np.ndarray:
        """One run: play users 0..k+m, return the view."""
        agent = self.build(world, rng, pool)
        if self.view == "actions":
            return actions_view(world, agent, self.algo)
        if self.algo == "pucb":
            return pucb_billboard(world, agent)
        if self.algo == "dp-ucbvi-batched":
            return batched_billboard(world, agent)
        if isinstance(agent, LSVIUCBPlusPlus):
            return pp_billboard(world, agent)
        self.targets_seen = []
        return tree_billboard(world, agent, self.targets_seen)


__all__ = ["EXPLORERS", "VIEWS", "ExplorerMechanism", "ExplorerSetup"]
