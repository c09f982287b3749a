"""The gray-box side of an audit: what a mechanism's hooks say before any noisy run.

:func:`graybox_check` compares the pre-noise change between D and D' with the
declared sensitivity (zero samples); :func:`sampler_hint` gives the float
side-channel scores the noise-free values and noise scales of the output cells.
Both read the optional hooks ``exact_statistics``, ``declared_sensitivity``
and ``noise`` (:mod:`privaudit.audit.protocol`).
"""

from __future__ import annotations

import math

import numpy as np

from privaudit.audit import bounds as B
from privaudit.audit.attacks import finite_median
from privaudit.audit.pairs import NeighbouringPair
from privaudit.core.errors import UsageError


def exact_pair(mech, pair: NeighbouringPair) -> tuple[dict, dict]:
    """The ``exact_statistics`` hook on D and D', checked: two dicts with the same names.

    Raises
    ------
    UsageError
        The hook returns something else than a dict of statistics, or other names on D and D'
        (a user's hook, e.g. from ``FILE.py:NAME``: a located error, not a traceback).
    """
    s0, s1 = mech.exact_statistics(pair.d), mech.exact_statistics(pair.d_prime)
    if not (isinstance(s0, dict) and isinstance(s1, dict)) or set(s0) != set(s1):
        raise UsageError(f"the mechanism's exact_statistics must return a dict {{name: array}} with the same names "
                         f"on D and D'; found {type(s0).__name__} {sorted(s0) if isinstance(s0, dict) else ''} and "
                         f"{type(s1).__name__} {sorted(s1) if isinstance(s1, dict) else ''}.")
    return s0, s1


def graybox_check(mech, pair: NeighbouringPair, delta: float) -> dict:
    """Compare the pre-noise change between D and D' with the declared sensitivity.

    Returns
    -------
    dict
        ``checked`` (bool), ``violation`` (bool), ``families``: per statistic
        the observed L1/L2 change, the declared ones, and when the noise is
        known the privacy the observed change costs at this noise
        (``epsilon_at_change``: Gaussian -> GDP eps at delta with
        mu = L2 / sigma; Laplace -> L1 / b).
    """
    if not (hasattr(mech, "exact_statistics") and hasattr(mech, "declared_sensitivity")):
        return {"checked": False, "violation": False, "families": []}
    s0, s1 = exact_pair(mech, pair)
    declared = mech.declared_sensitivity()
    noise = mech.noise() if hasattr(mech, "noise") else {}
    if not (isinstance(declared, dict) and isinstance(noise, dict)):
        raise UsageError("the mechanism's declared_sensitivity and noise hooks must return dicts {name: {...}}; found "
                         f"{type(declared).__name__} and {type(noise).__name__}.")
    fams, bad = [], False
    for name in s0:
        a, b = np.asarray(s0[name], dtype=np.float64), np.asarray(s1[name], dtype=np.float64)
        if a.shape != b.shape:
            raise UsageError(f"statistic {name!r} has shape {a.shape} on D and {b.shape} on D'.")
        diff = b - a
        nonfinite = bool(~np.all(np.isfinite(a)) or ~np.all(np.isfinite(b)))
        l1 = float(np.abs(diff).sum()) if not nonfinite else None
        l2 = float(np.sqrt((diff ** 2).sum())) if not nonfinite else None
        dec = declared.get(name, {})
        ex = nonfinite or (l1 > dec.get("l1", math.inf) * (1 + 1e-12)) or (l2 > dec.get("l2", math.inf) * (1 + 1e-12))
        row = {"name": name, "l1": l1, "l2": l2, "declared_l1": dec.get("l1"), "declared_l2": dec.get("l2"),
               "cells_changed": int(np.count_nonzero(diff)), "non_finite": nonfinite, "exceeds": bool(ex)}
        nz = noise.get(name)
        if nz and not nonfinite:
            if nz["mechanism"] == "gaussian" and delta > 0:
                row["epsilon_at_change"] = B.gdp_eps(l2 / nz["scale"], delta)
            elif nz["mechanism"] == "laplace":
                row["epsilon_at_change"] = l1 / nz["scale"]
        fams.append(row)
        bad |= ex
    return {"checked": True, "violation": bool(bad), "families": fams}



def sampler_hint(mech, pair: NeighbouringPair, X0: np.ndarray, X1: np.ndarray) -> dict | None:
    """Noise-free value (D, D') and declared noise scale of each output cell, for the float
    side-channel scores (:mod:`privaudit.audit.float_attacks`).

    From the mechanism's ``exact_statistics`` and ``noise`` hooks when their
    cells line up with the output (concatenated in order; a ``FILE.py:NAME``
    mechanism's hooks too, :class:`privaudit.audit.protocol.FileMechanism`); else the values are estimated as the rounded medians of the fitting runs
    (integer counts) and no scale is known (only the sampler-free score).
    """
    d = X0.shape[1]
    if hasattr(mech, "exact_statistics"):
        s0, s1 = exact_pair(mech, pair)
        noise = mech.noise() if hasattr(mech, "noise") else {}
        noise = noise if isinstance(noise, dict) else {}
        c0 = np.concatenate([np.asarray(v, dtype=np.float64).reshape(-1) for v in s0.values()])
        c1 = np.concatenate([np.asarray(s1[k], dtype=np.float64).reshape(-1) for k in s0])
        if c0.size == d:
            scale = np.concatenate([np.full(np.asarray(v).size, float(noise.get(k, {}).get("scale", 0.0)))
                                    for k, v in s0.items()])
            return {"c0": c0, "c1": c1, "scale": scale}
    return {"c0": np.rint(finite_median(X0)), "c1": np.rint(finite_median(X1)), "scale": None}

