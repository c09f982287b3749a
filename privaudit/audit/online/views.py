"""What the attacker of an online explorer reads: one view of a run, as a flat array.

``billboard`` (gray-box): the released noisy statistics restricted to the
cells / directions only user k fills; ``actions`` (black-box): the actions
recommended after user k at the probe cells. The views are defined in
:mod:`privaudit.audit.online.jdp`; each function here plays one run of an
explorer (with the recorders of :mod:`privaudit.audit.online.recording`
installed) and reads its view.
"""

from __future__ import annotations

import numpy as np

from privaudit.audit.online.recording import RecordingTree, tree_nodes
from privaudit.audit.online.streams import AuditWorld
from privaudit.online.linear.lattice import grid_values
from privaudit.online.linear.luyo import LuyoLSVIUCB
from privaudit.online.linear.ngo import NgoLSVIUCB
from privaudit.online.tabular.pucb import FAMILIES

#: The tabular explorers the auditor knows (no probe state, no feature directions).
TABULAR = ("pucb", "dp-ucbvi-batched")


def actions_view(world: AuditWorld, agent, algo: str) -> np.ndarray:
    H, k = world.horizon, world.canary_user
    x, y, p = world.state("x"), world.state("y"), world.state("p")
    rows, cols = [h for h in range(H) for _ in (0, 1)], [s for _ in range(H) for s in (x, y)]
    if algo not in TABULAR:
        rows, cols = rows + [0], cols + [p]
    out = []

    def read(t, ag):
        if t > k:
            out.append(np.asarray(ag.policy())[rows, cols])
    world.play(agent, on_prepare=read)
    return np.asarray(out, dtype=np.float64)


def pucb_billboard(world: AuditWorld, agent) -> np.ndarray:
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
    acts = pi_k["pi"][:, lanes]                                    # (H, 2): pi_k(h, lane)
    fams = []
    for f in FAMILIES:
        nodes = tree_nodes(agent.counters_[f].releases, world.canary_user + 1, world.n_episodes)  # (L, H, 2, A)
        vals = np.take_along_axis(nodes, np.broadcast_to(acts[None, :, :, None], nodes.shape[:3] + (1,)),
                                  axis=3)[..., 0]
        fams.append(np.ldexp(vals, -bits[f]))
    return np.stack(fams, axis=1)                                  # (L, 3, H, 2)


def pp_billboard(world: AuditWorld, agent) -> np.ndarray:
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
            # the three target releases of this episode (Sahu (2025): fresh phi_1..3 per (k, h)):
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


def tree_billboard(world: AuditWorld, agent, targets_seen: list) -> np.ndarray:
    c, xd, k, H = world.c_dim, world.x_dim, world.canary_user, world.horizon
    x, y = world.state("x"), world.state("y")
    bits = 0 if agent.lattice is None else agent.lattice.gram_bits    # integer lattice releases -> real units
    agent.tree = RecordingTree(agent.tree, lambda r: np.ldexp(np.asarray(r[:, [c, xd], [c, xd]], dtype=np.float64),
                                                              -bits))
    vec, switched = [], []
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
                    targets_seen.append(row[:, j].copy())
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


def batched_billboard(world: AuditWorld, agent) -> np.ndarray:
    """Batched DP-UCBVI's billboard view: every batch release from user k's batch on, projected on her change.

    User k stays in her lane L (x in D, y in D') for H steps, acting pi_k(h, L), with pi_k fixed before
    she arrived (releases of earlier batches and data-independent coins); her pooled, capped counts
    at (L, a, L) are u^L_a = min(c, #{h : pi_k(h, L) = a}), and no other user visits the lanes. The
    view of each release r (the batch's noisy counts, before they are summed) is
    (u^x . r[x, :, x] / ||u^x||, u^y . r[y, :, y] / ||u^y||): user k's count along her known direction
    plus N(0, sigma^2). Shape (releases, 2).
    """
    lanes = [world.state("x"), world.state("y")]
    k = world.canary_user
    seen = {"n": agent.n_released, "sum": agent.released_.copy()}
    rows, u = [], {}

    def keep_policy(t, ag):
        if t == k:
            pi = np.asarray(ag.policy())
            for j, L in enumerate(lanes):
                u[j] = np.minimum(np.bincount(pi[:, L], minlength=ag.A), ag.cap).astype(np.float64)

    def read(t, ag):
        if ag.n_released == seen["n"]:
            return
        release = ag.released_ - seen["sum"]
        seen["n"], seen["sum"] = ag.n_released, ag.released_.copy()
        if t >= k:
            rows.append([u[j] @ release[L, :, L] / np.linalg.norm(u[j]) for j, L in enumerate(lanes)])
    world.play(agent, on_prepare=keep_policy, on_update=read)
    return np.asarray(rows, dtype=np.float64)
