"""Auditing the joint-DP claims of online explorers: the explorer as an audit mechanism.

An :class:`ExplorerMechanism` is a batched mechanism for
:func:`privaudit.audit.runner.run_audit` whose "dataset" is an
:class:`~privaudit.audit.online_world.AuditWorld` (a user stream) instead of
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

import math
from typing import Callable

import numpy as np

from privaudit.audit.online_world import AuditWorld
from privaudit.errors import UsageError
from privaudit.online.linear.jin import LuyoLSVIUCB, NgoLSVIUCB
from privaudit.online.linear.plusplus import LSVIUCBPlusPlus
from privaudit.online.linear.registry import LINEAR_ALGOS, make_linear_agent
from privaudit.online.linear.lattice import NoiseSource, grid_values
from privaudit.online.pucb import FAMILIES, PUCB
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

    def __init__(self, rng: np.random.Generator):
        super().__init__(rng)
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
    def build(self, world: AuditWorld, rng: np.random.Generator):
        """A fresh explorer for ``world`` (noise from ``rng``), with the recorders installed."""
        agent = self._build(world, rng) if self._build is not None else self.default_build(world, rng)
        if self.algo != "pucb" and not isinstance(agent.noise, RecordingNoise):
            agent.noise = RecordingNoise(agent.rng)
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
        if self.algo == "dp-lsvi-ucb-pp":
            def proj_pp(X):
                v = X[:, 1:]  # releases after k: (n, m, H, 2), lane 0 = c, 1 = x
                return (v[..., 0] - v[..., 1]).reshape(len(X), -1).sum(1)
            return [("canary_projection", proj_pp)]
        H = world.horizon
        n_leaves = c.n_batches if self.algo == "luyo" else world.n_episodes
        n_nodes = int(n_leaves).bit_length() * H * 2
        n_vec = world.n_after * H * 2
        w_vec = 1.0 / max(c.noise_vec ** 2, 1e-300)

        def proj(X, a=n_nodes, b=n_vec):
            nodes, vec = X[:, :a].reshape(len(X), -1, 2), X[:, a:a + b].reshape(len(X), -1, 2)
            return (w_gram * (nodes[..., 0] - nodes[..., 1]).sum(1)
                    + w_vec * (vec[..., 0] - vec[..., 1]).sum(1))
        return [("canary_projection", proj)]

    # -- runs ------------------------------------------------------------------
    def __call__(self, world: AuditWorld, rng: np.random.Generator, n_runs: int = 1) -> np.ndarray:
        """``n_runs`` independent runs of the explorer on ``world``; the chosen view of each, stacked."""
        if not isinstance(world, AuditWorld):
            raise UsageError(f"an explorer is audited on an AuditWorld (a user stream). Got {type(world).__name__}.")
        return np.stack([self.run_once(world, r) for r in rng.spawn(int(n_runs))])

    def run_once(self, world: AuditWorld, rng: np.random.Generator) -> np.ndarray:
        """One run: play users 0..k+m, return the view."""
        agent = self.build(world, rng)
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
        c, xd, k = world.c_dim, world.x_dim, world.canary_user
        out = []

        def read(t, ag):
            if t >= k:
                g = ag.exact_gram()[:, [c, xd], [c, xd]]
                z = ag.noise.last.get("gram") if ag.private and ag.c.noise_gram > 0 else None
                out.append(g if z is None else g + z[:, [c, xd], [c, xd]])
        world.play(agent, on_prepare=read)
        return np.asarray(out)                                         # (m + 1, H, 2)

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

    Valid only for continuous Gaussian noise (an adaptive composition of
    Gaussian mechanisms is sqrt(2 rho)-GDP). Refused for PUCB (Laplace: pure
    eps) and for exact discrete noise (the discrete Gaussian is rho-zCDP but
    not sqrt(2 rho)-GDP: the rule of the offline auditor, ``privaudit audit
    --noise exact``). Since the linear explorers draw exact discrete Gaussian
    noise on lattices (``privaudit.online.linear.lattice``) every built-in
    explorer is refused; DP-VAPVI's total-variation route
    (``bounds.lattice_gaussian_tv``) could be extended to them.
    """
    if mech.algo == "pucb":
        return False, "PUCB's counters are Laplace (pure epsilon-DP); the GDP test does not describe them"
    kinds = mech.noise_kinds(world)
    if kinds != {"continuous"}:
        return False, (f"{mech.algo} draws {sorted(kinds)} noise; exact discrete Gaussian noise is rho-zCDP but not "
                       "sqrt(2 rho)-GDP, so the GDP test could report a false violation (use the generic test)")
    return True, "continuous Gaussian noise, adaptively composed: sqrt(2 rho)-GDP"


__all__ = ["EXPLORERS", "VIEWS", "ExplorerMechanism", "RecordingNoise", "RecordingTree", "gdp_allowed",
           "linear_algo", "target_range_check", "tree_nodes"]
