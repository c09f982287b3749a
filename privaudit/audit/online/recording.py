"""Recorders the online auditor installs in an explorer: its noise as drawn, its tree releases.

They change nothing the explorer computes, only what the audit can read
(:mod:`privaudit.audit.online.views`), and :class:`NoisePool` draws the noise
of a batch of runs at once.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from privaudit.audit.online.streams import AuditWorld
from privaudit.online.linear.lattice import NoiseSource


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
