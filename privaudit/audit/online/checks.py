"""Checks of an online explorer's audit that need no noisy statistics: the target range, the GDP opt-in."""

from __future__ import annotations

import math

import numpy as np

from privaudit.audit.online.jdp import ExplorerMechanism
from privaudit.audit.online.streams import AuditWorld


def target_range_check(mech: ExplorerMechanism, worlds, *, runs: int = 30, seed: int = 0) -> dict:
    """Gray-box range check (zero noise statistics needed): user k's regression targets must lie in [0, H + 1].

    Luyo's and Ngo's target-vector noise is calibrated to Delta_2 = 2 (H + 1),
    which holds only if every target r + V_{h+1}(s') lies in [0, H + 1] (V
    clipped to [0, H]; docs/online.md). This runs ``runs`` seeded
    runs on each world, records the targets user k entered into the vector
    releases (as the agent computed them) and reports those outside the range:
    a deterministic finding, like the offline gray-box sensitivity check
    (docs/audit.md, Background: the gray-box check). The seeded runs are
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
