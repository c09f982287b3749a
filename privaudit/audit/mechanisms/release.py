"""The tabular release (``privaudit release``) as an audit mechanism, seen on a public view.

Release view. A full release at the ICU-Sepsis shape has 256 M cells, too
many to repeat 1e5 times. :class:`ReleaseMechanism` outputs the released
values on a public *view*: every cell whose exact statistic differs between D
and D' plus ``view_extra`` other cells per family drawn with a fixed public
seed. The view is fixed before any trial, from the pair alone (the auditor's
choice, not the noise). Projecting the output onto a view is
post-processing, so a lower bound for the view's output is a lower bound
for the full release. The noise of the cells outside the view is independent
of the view (``add_noise`` draws every cell independently), so this loses no
power for a correct release; a release bug that couples cells (noise reused
across steps h) is visible only if coupled cells fall in the view, which the
extra cells make possible but not certain.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from privaudit.audit.mechanisms.library import VIEW_EXTRA, VIEW_SEED, LibraryStatistics
from privaudit.core.errors import UsageError


class ReleaseMechanism(LibraryStatistics):
    """The tabular release (``privaudit release``) seen on a public view.

    Parameters
    ----------
    spec : DomainSpec
    rho, epsilon, delta, mechanism, stationary
        As for :func:`privaudit.release.tabular.release_logs`.
    noise : {"exact", "rounded"}
        ``exact`` (default, what ``privaudit release`` releases: exact
        discrete Gaussian / Laplace samplers, so the audit tests what is
        released). ``rounded`` (numpy's continuous samplers, then rounded) is
        kept for the GDP opt-in only (``claim(kind="gaussian")``): the
        rounded Gaussian is a post-processing of the continuous Gaussian
        mechanism, hence sqrt(2 rho)-GDP; releases refuse it.
    view_extra : int
        Cells per family added to the view besides the changed ones.

    Notes
    -----
    Batched: ``fn(logs, rng, n_runs=N)`` returns (N, M) int64, the noisy
    values of the M view cells (visits, then transitions, then rewards, each
    in the release's stored units). Call :meth:`prepare` first (the auditor
    does).
    """

    name = "release"

    def __init__(self, spec, *, view_extra: int = VIEW_EXTRA, **kw):
        super().__init__(spec, **kw)
        self.view_extra = int(view_extra)
        self.view: dict[str, np.ndarray] = {}
        self.values: dict[str, dict[str, np.ndarray]] = {}

    def prepare(self, d: pl.DataFrame, d_prime: pl.DataFrame) -> "ReleaseMechanism":
        """Compute the exact statistics of D and D' (library path) and fix the view."""
        f0, f1 = self.bounded_frame(d), self.bounded_frame(d_prime)
        pick = np.random.default_rng(VIEW_SEED)
        full0, full1 = self.sa_families(f0), self.sa_families(f1)
        changed, vals0, vals1, sizes = {}, {}, {}, {}
        for fam in full0:
            a, b = full0[fam].reshape(-1), full1[fam].reshape(-1)
            changed[fam] = np.flatnonzero(a != b)
            sizes[fam] = a.size
            vals0[fam], vals1[fam] = a, b
        # transitions: one h-slice at a time (102 MB each at the ICU-Sepsis shape)
        tc, t0, t1 = [], [], []
        per_h = None
        for (h, s0), (_, s1) in zip(self.transition_slices(f0), self.transition_slices(f1)):
            per_h = s0.size
            idx = np.flatnonzero(s0.reshape(-1) != s1.reshape(-1))
            tc.append(idx + h * per_h)
        n_slices = 1 if self.stationary else self.spec.H
        sizes["transitions"] = per_h * n_slices
        changed["transitions"] = np.concatenate(tc)
        views = {}
        for fam in ("visits", "transitions", "rewards"):
            if fam not in sizes:
                continue
            extra = pick.choice(sizes[fam], size=min(self.view_extra, sizes[fam]), replace=False)
            views[fam] = np.union1d(changed[fam], extra)
        tv = views["transitions"]
        for (h, s0), (_, s1) in zip(self.transition_slices(f0), self.transition_slices(f1)):
            sel = tv[(tv >= h * per_h) & (tv < (h + 1) * per_h)] - h * per_h
            t0.append(s0.reshape(-1)[sel])
            t1.append(s1.reshape(-1)[sel])
        self.view = views
        self.values = {"d": {}, "d_prime": {}}
        for fam in views:
            if fam == "transitions":
                self.values["d"][fam], self.values["d_prime"][fam] = np.concatenate(t0), np.concatenate(t1)
            else:
                self.values["d"][fam] = vals0[fam][views[fam]]
                self.values["d_prime"][fam] = vals1[fam][views[fam]]
        self.changed_cells = {f: int(c.size) for f, c in changed.items()}
        self.bind(d, d_prime)
        return self

    def exact_statistics(self, logs: pl.DataFrame) -> dict:
        """Exact statistics on the view (it holds every changed cell, so the
        L1/L2 change equals that of the full statistics)."""
        return {f: v.copy() for f, v in self.values[self.which(logs)].items()}

    def __call__(self, logs: pl.DataFrame, rng: np.random.Generator, n_runs: int = 1) -> np.ndarray:
        if not self.values:
            raise UsageError("ReleaseMechanism: call prepare(d, d_prime) before running it.")
        vals = self.values[self.which(logs)]
        rngs = rng.spawn(len(vals))
        parts = [self.release.noise_family(f, np.broadcast_to(v, (n_runs, v.size)).copy(), rng=r)
                 for (f, v), r in zip(vals.items(), rngs)]
        return np.concatenate(parts, axis=1)
