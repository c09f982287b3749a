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
Seed 004 l.23-27 (JDP; the released output is every episode's actions and the
final policy); seed 002 l.29-33, seed 003 Def. 2.2; ALGORITHMS.md section 10
"Auditing JDP"; AUDITING.md 4.1-4.3 (GDP fit for Gaussian mechanisms, the
Laplace likelihood-ratio event, discrete outputs).
"""

from __future__ import annotations

import copy
import math
from typing import Callable

import numpy as np

from privaudit.audit import bounds as B
from privaudit.audit.online.streams import AuditWorld
from privaudit.core.errors import UsageError
from privaudit.online.linear.luyo import LuyoLSVIUCB
from privaudit.online.linear.ngo import NgoLSVIUCB
from privaudit.online.linear.lsvi_ucb_pp import LSVIUCBPlusPlus
from privaudit.online.linear.build import LINEAR_ALGOS, make_linear_agent
from privaudit.online.linear.lattice import NoiseSource, grid_values
from privaudit.online.tabular.pucb import FAMILIES, PUCB
from privaudit.privacy.accounting import Accountant
from privaudit.privacy.events import leaves

#: Explorers the online auditor knows (private ones: their claims are tested).
EXPLORERS = ("pucb", "luyo", "ngo", "dp-lsvi-ucb-pp")
#: Views of an explorer's output (module docstring).
VIEWS = ("billboard", "actions")


# --------------------------------------------------------------------------- recording

class RecordingNoise(NoiseSource):
    """A :class:`~privaudit.online.linear.lattice.NoiseSource` that keeps the last draw of each family.

    Draws exactly what the production source draws (same generator calls),
    so installing it changes nothing but what the audit can read. ``last``
    holds the draws in real units (the integer lattice noise times 2^-bits).
    """

    def __init__(self, rng: np.random.Generator, block: int | None = None):
        super().__init__(rng) if block is None else super().__init__(rng, block=block)
        self.last: dict[str, np.ndarray] = {}

    def keep(self, family: str, z: np.ndarray, bits: int) -> np.ndarray:
        """Record ``z`` (lattice units) in real units and return it unchanged."""
        self.last[family] = np.ldexp(np.asarray(z, dtype=np.float64), -bits)
        return z

    def vector(self, family: str, sigma: float, bits: int, n: int, dim: int) -> np.ndarray:
        return self.keep(family, super().vector(family, sigma, bits, n, dim), bits)

    def goe(self, family: str, s: float, bits: int, n: int, dim: int) -> np.ndarray:
        return self.keep(family, super().goe(family, s, bits, n, dim), bits)


class RecordingTree:
    """Proxy of a :class:`~privaudit.online.counters.TreeCounter` that keeps selected cells of every release.

    Parameters
    ----------
    tree : TreeCounter
    select : callable
        ``select(release) -> ndarray`` (the cells kept, any fixed shape).
    """

    def __init__(self, tree, select: Callable[[np.ndarray], np.ndarray]):
        self.tree, self.select = tree, select
        self.releases: list[np.ndarray] = []

    def update(self, z):
        out = self.tree.update(z)
        self.releases.append(np.asarray(self.select(out), dtype=np.float64))
        return out

    def __getattr__(self, name):  # everything else (t, n_levels, ...) from the real tree
        return getattr(self.tree, name)


def tree_nodes(releases: list[np.ndarray], leaf: int, n_leaves: int) -> np.ndarray:
    """Values of the binary-tree nodes that hold ``leaf``, decoded from the prefix releases.

    Parameters
    ----------
    releases : list of ndarray
        S~_1, S~_2, ... (release t after the t-th update), same shape each.
    leaf : int
        1-based index t0 of the leaf (time step) of interest.
    n_leaves : int
        T of the tree (fixes how many nodes exist: floor(log2 T) + 1 levels).

    Returns
    -------
    ndarray, shape (levels, *cell_shape)
        Node (t - lowbit(t), t] = S~_t - S~_{t - lowbit(t)} for every t with
        t - lowbit(t) < t0 <= t (one per level), in increasing t; rows for
        nodes that close after the last recorded release are NaN-free zeros
        and flagged by their absence from ``len(releases)`` (the caller keeps
        enough releases). Post-processing of the releases: each row is the
        exact sum of the node's leaves plus that node's noise alone
        (Chan-Shi-Song 2011, Alg. 2).
    """
    levels = int(n_leaves).bit_length()
    shape = releases[0].shape if releases else ()
    out = np.zeros((levels,) + shape)
    zero = np.zeros(shape)
    i = 0
    for t in range(int(leaf), min(len(releases), int(n_leaves)) + 1):
        low = t & -t
        if t - low < leaf:
            prev = releases[t - low - 1] if t - low > 0 else zero
            out[i] = releases[t - 1] - prev
            i += 1
    return out


#: Most rows per family a :class:`NoisePool` draws at once (memory: rows x H x d^2 int64 for the Gram nodes).
POOL_MAX_DRAWS = 4096


class NoisePool:
    """The privacy noise of a batch of audit runs, drawn in few vectorised calls.

    A short audit run (k + m + 1 users) needs a handful of noise rows per
    family, but the explorers pre-draw :data:`~privaudit.online.linear.lattice.NOISE_BLOCK`
    releases (and a tree up to its remaining releases) per sampler call, and
    each exact sampler call has a fixed cost of about a millisecond. The runs
    of a batch are sequential, so one recording source (``source``) with a
    block of ``n_draws`` rows serves all of them, and the Gram trees' node
    noises are drawn for ``n_draws`` nodes at once (``supply_tree``). Every
    row is used once; the draws are i.i.d. and independent of the data (the
    same argument as the explorers' own pre-drawing), so each run's noise has
    the law of the production explorer's.

    Parameters
    ----------
    rng : numpy.random.Generator
        The batch's noise stream.
    n_draws : int
        Rows per family pre-drawn at once (runs x users per run covers one
        release per user and step block), capped at :data:`POOL_MAX_DRAWS`
        (a used-up pool draws the next block).
    """

    def __init__(self, rng: np.random.Generator, n_draws: int):
        self.rng, self.n = rng, max(1, min(int(n_draws), POOL_MAX_DRAWS))  # refilled when used up
        self.source = RecordingNoise(rng, block=self.n)
        self._nodes: dict[tuple, list] = {}

    def supply_tree(self, tree, world: AuditWorld) -> None:
        """Hand ``tree`` (a fresh exact goe :class:`~privaudit.online.counters.TreeCounter`) its node noises."""
        if getattr(tree, "noise", None) != "exact" or not getattr(tree, "_wide", False):
            return
        need = min(tree.n_releases, world.n_users)   # one node closes per update; a run updates <= n_users times
        key = (tree.mechanism, tree.scale, tree.shape)
        buf = self._nodes.setdefault(key, [])
        if len(buf) < need:
            buf.extend(tree.node_noises(max(self.n, need), self.rng))
        tree.supply(np.stack([buf.pop() for _ in range(need)]))


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
        if self.algo != "pucb":
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

        The change is known from the pair alone (AUDITING.md 4.1: project on mean(D') - mean(D)): user k adds
        her unit at the canary lane y / direction e_c in D' and at the decoy lane x / e_x in D. PUCB: the
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
        pool = NoisePool(r_pool, n * world.n_users) if self.algo != "pucb" else None
        return np.stack([self.run_once(world, r, pool=pool) for r in runs])

    def run_once(self, world: AuditWorld, rng: np.random.Generator, pool: "NoisePool | None" = None) -> np.ndarray:
        """One run: play users 0..k+m, return the view."""
        agent = self.build(world, rng, pool)
        if self.view == "actions":
            return self._actions(world, agent)
        if self.algo == "pucb":
            return self._pucb_billboard(world, agent)
        if isinstance(agent, LSVIUCBPlusPlus):
            return self._pp_billboard(world, agent)
        return self._tree_billboard(world, agent)

    def _actions(self, world: AuditWorld, agent) -> np.ndarray:
        H, k = world.horizon, world.canary_user
        x, y, p = world.state("x"), world.state("y"), world.state("p")
        rows, cols = [h for h in range(H) for _ in (0, 1)], [s for _ in range(H) for s in (x, y)]
        if self.algo != "pucb":
            rows, cols = rows + [0], cols + [p]
        out = []

        def read(t, ag):
            if t > k:
                out.append(np.asarray(ag.policy())[rows, cols])
        world.play(agent, on_prepare=read)
        return np.asarray(out, dtype=np.float64)

    def _pucb_billboard(self, world: AuditWorld, agent) -> np.ndarray:
        lanes = [world.state("x"), world.state("y")]
        bits = agent.lattice_bits_
        for f in FAMILIES:
            if f == "transitions":
                sel = (lambda r, L=lanes: r[:, L][:, :, :, L].diagonal(axis1=1, axis2=3).transpose(0, 2, 1))
            else:
                sel = (lambda r, L=lanes: r[:, L, :])
            agent.counters_[f] = RecordingTree(agent.counters_[f], sel)
        pi_k = {}

        def keep_policy(t, ag):
            if t == world.canary_user:
                pi_k["pi"] = np.asarray(ag.policy()).copy()
        world.play(agent, on_prepare=keep_policy)
        H = world.horizon
        acts = pi_k["pi"][:, lanes]                                    # (H, 2): pi_k(h, lane)
        fams = []
        for f in FAMILIES:
            nodes = tree_nodes(agent.counters_[f].releases, world.canary_user + 1, world.n_episodes)  # (L, H, 2, A)
            vals = np.take_along_axis(nodes, np.broadcast_to(acts[None, :, :, None], nodes.shape[:3] + (1,)),
                                      axis=3)[..., 0]
            fams.append(np.ldexp(vals, -bits[f]))
        return np.stack(fams, axis=1)                                  # (L, 3, H, 2)

    def _pp_billboard(self, world: AuditWorld, agent) -> np.ndarray:
        c, xd, k, H = world.c_dim, world.x_dim, world.canary_user, world.horizon
        gram, vec = [], []
        noisy = agent.private and agent.c.noise_gram > 0

        def read(t, ag):
            if t < k:
                return
            g = ag.exact_gram()[:, [c, xd], [c, xd]]
            z = ag.noise.last.get("gram") if noisy else None
            gram.append(g if z is None else g + z[:, [c, xd], [c, xd]])
            if t > k:
                # the three target releases of this episode (seed 003 l.169: fresh phi_1..3 per (k, h)):
                # sum w phi (V-hat, V-check, V-hat^2)(s') + noise, at coordinates c and x; user k's term is
                # w_k (V, V-check, V^2)_{h+1}(lane), the V the agent used for this release
                vh = ag.V[1:, 0]
                vals = np.stack([vh, ag.V[1:, 1], vh * vh], axis=1)                  # (H, 3, S)
                if ag.lat is None:
                    y = ag._targets(slice(None), vals, None)
                else:
                    y = ag._targets(slice(None), vals, np.zeros((H, 3, ag.d), dtype=np.int64))
                if noisy:
                    y = y + np.stack([ag.noise.last[f] for f in ("v-hat", "v-check", "v-squared")], axis=1)
                vec.append(y[..., [c, xd]])
        world.play(agent, on_prepare=read)
        # (m + 1, H, 2) Gram releases from k, then (m, H, 3, 2) target releases after k; flattened
        return np.concatenate([np.asarray(gram).reshape(-1), np.asarray(vec).reshape(-1)])

    def _tree_billboard(self, world: AuditWorld, agent) -> np.ndarray:
        c, xd, k, H = world.c_dim, world.x_dim, world.canary_user, world.horizon
        x, y = world.state("x"), world.state("y")
        bits = 0 if agent.lattice is None else agent.lattice.gram_bits    # integer lattice releases -> real units
        agent.tree = RecordingTree(agent.tree, lambda r: np.ldexp(np.asarray(r[:, [c, xd], [c, xd]], dtype=np.float64),
                                                                  -bits))
        vec, switched = [], []
        self.targets_seen = []
        lane_of_k = world.start
        seen = [0]

        def read(t, ag):
            did = ag.n_switches > seen[0]
            seen[0] = ag.n_switches
            if t <= k:
                return
            switched.append(float(did))
            row = np.zeros((H, 2))
            if did:
                # release at coordinate (c, x): user k's target r + V_{h+1}(lane) (V as the agent used it,
                # i.e. max_a of its Q) plus the noise it drew; no other user has a c or x coordinate
                V = np.vstack([ag.Q.max(axis=2), np.zeros((1, ag.S))])
                r = world.reward[:, :, 0]
                if ag.lattice is not None:  # the agent rounds rewards and V to its 2^-VB grid before the sums
                    V, r = grid_values(V, ag.lattice.value_bits), grid_values(r, ag.lattice.value_bits)
                for j, lane in enumerate((y, x)):
                    if lane_of_k == lane:
                        row[:, j] = r[:, lane] + V[1:, lane]
                        self.targets_seen.append(row[:, j].copy())
                eta = ag.noise.last.get("target")
                if eta is not None:
                    row += eta[:, [c, xd]]
            vec.append(row)
        world.play(agent, on_prepare=read)
        if isinstance(agent, LuyoLSVIUCB):
            leaf, n_leaves = k // agent.batch_len + 1, agent.c.n_batches
        else:
            leaf, n_leaves = k + 1, world.n_episodes
        nodes = tree_nodes(agent.tree.releases, leaf, n_leaves)          # (L, H, 2)
        parts = [nodes.reshape(-1), np.asarray(vec).reshape(-1)]
        if isinstance(agent, NgoLSVIUCB):
            parts.append(np.asarray(switched))
        return np.concatenate(parts)


def target_range_check(mech: ExplorerMechanism, worlds, *, runs: int = 30, seed: int = 0) -> dict:
    """Gray-box range check (zero noise statistics needed): user k's regression targets must lie in [0, H + 1].

    Luyo's and Ngo's target-vector noise is calibrated to Delta_2 = 2 (H + 1),
    which holds only if every target r + V_{h+1}(s') lies in [0, H + 1] (V
    clipped to [0, H]; ALGORITHMS.md section 10). This runs ``runs`` seeded
    runs on each world, records the targets user k entered into the vector
    releases (as the agent computed them) and reports those outside the range:
    a deterministic finding, like the offline gray-box sensitivity check
    (AUDITING.md 4.1 "gray-box first", 4.5 rule 3). The seeded runs are
    compared with the declared range and discarded.

    Returns
    -------
    dict
        The report's ``graybox`` block: ``checked``, ``violation``, ``families``.
    """
    if mech.algo not in ("luyo", "ngo") or mech.view != "billboard":
        return {"checked": False, "violation": False, "families": []}
    lo, hi, n = math.inf, -math.inf, 0
    for i, w in enumerate(worlds):
        for r in np.random.default_rng([seed, i]).spawn(int(runs)):
            mech.run_once(w, r)
            for t in mech.targets_seen:
                lo, hi, n = min(lo, float(t.min())), max(hi, float(t.max())), n + t.size
    t_max = worlds[0].horizon + 1.0
    bad = n > 0 and (lo < -1e-9 or hi > t_max + 1e-9)
    row = {"name": f"{mech.algo}:target (user k's r + V_{{h+1}})", "l1": None, "l2": None, "declared_l1": None,
           "declared_l2": 2 * t_max, "exceeds": bool(bad), "non_finite": False, "cells_changed": 0,
           "observed_range": [lo if n else None, hi if n else None], "declared_range": [0.0, t_max],
           "targets_checked": n, "runs": int(runs) * len(worlds)}
    return {"checked": True, "violation": bool(bad), "families": [row]}


def linear_algo(algo: str) -> bool:
    """True for the linear explorers (they need a feature map)."""
    return algo in LINEAR_ALGOS


def gdp_allowed(mech: ExplorerMechanism, world: AuditWorld) -> tuple[bool, str]:
    """Whether the GDP opt-in is valid for this explorer, and why.

    Continuous Gaussian noise: an adaptive composition of Gaussian mechanisms
    is sqrt(2 rho)-GDP. Exact discrete Gaussian noise on the explorers'
    lattices (``privaudit.online.linear.lattice``): not GDP itself, but within
    a tiny total variation of a post-processed continuous Gaussian mechanism
    (:meth:`ExplorerMechanism.gaussian_tv_per_run`, DP-VAPVI's route,
    ``bounds.lattice_gaussian_tv``), whose share of alpha the runner spends
    (and refuses the test when it exceeds half of alpha). Refused for PUCB
    (Laplace: pure eps) and for any other noise kind.
    """
    if mech.algo == "pucb":
        return False, "PUCB's counters are Laplace (pure epsilon-DP); the GDP test does not describe them"
    kinds = mech.noise_kinds(world)
    if kinds == {"continuous"}:
        return True, "continuous Gaussian noise, adaptively composed: sqrt(2 rho)-GDP"
    if kinds == {"exact"}:
        return True, ("exact discrete Gaussian noise on fine lattices: within total variation gaussian_tv_per_run "
                      "of a post-processed continuous Gaussian mechanism (sqrt(2 rho)-GDP); the runner spends "
                      "2 n x that share of alpha")
    return False, f"{mech.algo} draws {sorted(kinds)} noise; the GDP test describes Gaussian noise only"


__all__ = ["EXPLORERS", "VIEWS", "ExplorerMechanism", "NoisePool", "RecordingNoise", "RecordingTree", "gdp_allowed",
           "linear_algo", "target_range_check", "tree_nodes"]
