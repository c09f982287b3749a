"""The DP-VAPVI adapter of the auditor: the noisy statistics of the last step h = H-1.

What is audited. DP-VAPVI releases 5 statistics per step h (Qiao & Wang (2023), Algorithm 2
lines 4-10), each by the Gaussian mechanism at rho_0 = rho / (5H); the
policy is post-processing of them (``learners.linear.privacy``). At the last
step (0-based h = H-1, the paper's h = H) V_H = 0, so the statistics of that
step are a function of the step's rows only, not of any earlier release, and
Var <= (H - h)^2 = 1 forces sigma^2 = 1: they form a mechanism of their own
whose pre-noise values are exact. The adapter outputs the chosen noisy
statistics of that step (default: Sigma_{H-1} and Lambda_{H-1}, the two Gram
matrices; ``r_plus_v`` can be added; ``v2`` and ``v`` are pure noise at
h = H-1), whitened by the declared noise (upper triangle, diagonal / sqrt(2),
divided by the entry noise; vectors divided by their sigma): a public,
fixed post-processing under which a correct run is, coordinate by
coordinate, a discrete Gaussian with unit variance on a lattice of step
2^-L / sigma (``learners.linear.privacy.LATTICE_BITS``; sigma is 10^4 to 10^13
lattice steps), i.e. N(mean, I) to any precision an audit can resolve.

The claim tested is the accounting's claim for what is output: rho_0 per
statistic, ``audited_claim`` = n_stats * rho / (5H) zCDP. A violation of it
breaks the proof of the total claim rho (the composition of 5H releases at
rho_0 each); "no violation found" says nothing about other steps. The two
Gram matrices at step H-1 attain their Frobenius sensitivity sqrt(2) k for
a canary with orthogonal unit features, so the audit of them is tight; the
(r + V) vector at h = H-1 moves by at most sqrt(2) against its declared 2H
(the noise is calibrated for V up to H - 1), so it adds little power.

Everything that decides privacy runs through the library: contribution
bounding (``data.bounding``), aggregation (``learners.linear.logs.data_from_frame``),
the feature map from the spec, ``DPVAPVI.noise_scales`` / ``step_release``
(``privacy.draw_step_noise`` + ``privacy.LatticeGaussian`` +
``core.step_statistics``, the code ``fit`` runs). Patching any of them
changes what the audit sees.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl

from privaudit.audit.bounds import lattice_gaussian_tv
from privaudit.audit.claim import Claim
from privaudit.core.errors import UsageError
from privaudit.privacy import budget as budget_mod
from privaudit.core.spec import DomainSpec
from privaudit.audit.neighbours import canary_frame, make_pair
from privaudit.audit.pairs import NeighbouringPair, unit_column, visit_counts
from privaudit.audit.synthetic_pairs import synthetic_pair
from privaudit.data.bounding import bound_contributions
from privaudit.learners.linear import privacy as lp
from privaudit.learners.linear.estimators import DPVAPVI
from privaudit.learners.linear.logs import data_from_frame
from privaudit.mdp.spec_features import feature_map_from_spec

#: Statistics of a step, in output order.
STATISTICS = ("gram", "v2", "v", "weighted_gram", "r_plus_v")
#: Output by default (the ones with signal at h = H-1 that attain their sensitivity).
DEFAULT_STATISTICS = ("gram", "weighted_gram")
_MATRICES = ("gram", "weighted_gram")


class DPVAPVIMechanism:
    """DP-VAPVI's noisy statistics of step h = H-1, batched.

    Parameters
    ----------
    spec : DomainSpec
        With a finite ``features`` map (one-hot, synthetic-linear, state-table-x-action).
    rho, epsilon, delta
        The total budget of the DP-VAPVI run (``privacy.budget.resolve_budget``, Gaussian).
    statistics : tuple of str
        Which of ``STATISTICS`` to output.
    learner_params : dict, optional
        ``DPVAPVI`` parameters (lam, shift, delta_fail, ...); ``k`` comes from the spec.

    Notes
    -----
    ``fn(logs, rng, n_runs=N)`` returns (N, M) float64. Call :meth:`prepare`
    first (the auditor does). Hooks: ``make_pair`` (a linear canary),
    ``exact_statistics``, ``declared_sensitivity``, ``noise``, ``audited_claim``.

    Raises
    ------
    UsageError
        Unknown statistic, a non-Gaussian mechanism, ``--stationary``, or a bad budget.
    SpecError
        No usable finite feature map in the spec.
    """

    name = "dp-vapvi"
    #: The learner whose noise plan and statistics are audited (a subclass of ``DPVAPVI`` is audited by a
    #: subclass setting ``name`` and ``learner_class``, built by ``audit.mechanisms.registry.adapter_for``).
    learner_class = DPVAPVI
    #: privaudit's own code: output from the given dataset, spec and own noise only (``audit.report.sharing``).
    SELF_CONTAINED = True

    def __init__(self, spec: DomainSpec, *, rho=None, epsilon=None, delta=None,
                 statistics: tuple = DEFAULT_STATISTICS, learner_params: dict | None = None,
                 mechanism: str = "gaussian", stationary: bool = False, noise: str | None = None):

        if mechanism != "gaussian" or stationary:
            raise UsageError(f"{self.name} is a Gaussian, per-step mechanism: `release_mechanism` laplace and "
                             "`stationary` do not apply.")
        bad = [s for s in statistics if s not in STATISTICS]
        if bad or not statistics:
            raise UsageError(f"statistics must be a non-empty subset of {STATISTICS}. Got {tuple(statistics)}.")
        self.spec, self.statistics = spec, tuple(s for s in STATISTICS if s in statistics)
        self.budget = budget_mod.resolve_budget(rho=rho, epsilon=epsilon,
                                                delta=None if rho is not None else delta, mechanism="gaussian")
        self.fmap = feature_map_from_spec(spec)
        self.learner = self.learner_class(self.budget.rho, k=spec.max_episodes_per_unit, **dict(learner_params or {}))
        self.scales = self.learner.noise_scales(spec.horizon, self.fmap.dim)
        self.data: dict = {}

    # ----------------------------------------------------------------- pair
    def make_pair(self, logs: pl.DataFrame, spec: DomainSpec, strategy: str = "rare", *, rng):
        """A canary pair aimed at step H-1.

        ``random``: the generic one. ``synthetic``: :meth:`synthetic_boundary_pair`
        (attains the declared Frobenius sensitivity). Otherwise
        :func:`linear_canary_pair` (the spec's features as they are).
        """
        if strategy == "random":
            return make_pair(logs, spec, strategy, rng=rng)
        if strategy.startswith("synthetic"):
            return self.synthetic_boundary_pair(logs)
        return linear_canary_pair(logs, spec, self.fmap.table)

    def synthetic_boundary_pair(self, logs: pl.DataFrame | None = None) -> NeighbouringPair:
        """Synthetic units u*, v* whose step-(H-1) features sit at the norm bound.

        The pair is :func:`privaudit.audit.synthetic_pairs.synthetic_pair` (k
        full-length episodes each, disjoint cells, built from the spec), and
        the feature map this adapter runs with is the spec's with the two
        step-(H-1) cells set to orthogonal unit vectors: phi(u*) = e_1,
        psi(v*) = e_2. The guarantee of DP-VAPVI holds for every map with
        ||phi|| <= 1 (its noise depends on d and the bound only), so this is a
        worst case within the claim: the Gram statistics change by
        ||k (phi phi^T - psi psi^T)||_F = k sqrt(2), the declared sensitivity
        (``learners.linear.privacy.sensitivities``). 0 and 1 lie on the
        2^-12 lattice the features are rounded to (toward zero), so rounding
        leaves the change exact. The spec's features reach only part of it
        (synthetic-linear seed 0: 0.786 of sqrt(2)), because they have
        ||phi||^2 <= 7/9 and no orthogonal pair.

        Parameters
        ----------
        logs : polars.DataFrame, optional
            The common part of D and D' (standard schema); None: empty.

        Returns
        -------
        NeighbouringPair
            ``description`` adds ``features`` (the two overridden cells and
            their unit vectors) and ``gram_change`` (achieved and declared
            Frobenius change of the Gram statistic at step H-1).

        Raises
        ------
        UsageError
            d < 2 (no two orthogonal features), or as ``synthetic_pair``.
        """
        d, H, k = self.fmap.dim, self.spec.horizon, self.spec.max_episodes_per_unit
        if d < 2:
            raise UsageError(f"`canary` synthetic for {self.name} needs feature dimension d >= 2 (two orthogonal "
                             f"unit features); this spec's map has d = {d}. Use `canary` rare.")
        pair = synthetic_pair(self.spec, pooled=False, logs=logs)
        units = pair.description["units"]
        cells = [(units[w][H - 1]["state"], units[w][H - 1]["action"]) for w in ("u", "v")]
        table = np.array(self.fmap.table)
        for i, (s_, a_) in enumerate(cells):
            table[s_, a_] = 0.0
            table[s_, a_, i] = 1.0
        self.fmap = dataclasses.replace(self.fmap, table=table, settings={
            **self.fmap.settings, "audit_boundary_cells": [list(c) for c in cells]})
        e = np.eye(d)[:2]
        achieved = float(k * np.linalg.norm(np.outer(e[0], e[0]) - np.outer(e[1], e[1])))
        declared = float(lp.sensitivities(H, k)["gram"])
        pair.description["features"] = {
            "note": "the spec's feature map with these step-(H-1) cells of u*, v* set to e_1, e_2 (||phi|| = 1, "
                    "orthogonal): a map within the claim's ||phi|| <= 1",
            "cells": {"u": list(cells[0]), "v": list(cells[1])}}
        pair.description["gram_change"] = {"statistic": "gram at step H-1 (Frobenius)", "l2": achieved,
                                           "declared_l2": declared}
        return pair

    def prepare(self, d: pl.DataFrame, d_prime: pl.DataFrame) -> "DPVAPVIMechanism":
        """Bound and aggregate D and D' through the library (``data_from_frame``)."""

        cols = ["episode_id", "step", "state", "action", "reward", "next_state"]
        self._frames = (d, d_prime)
        for key, logs in (("d", d), ("d_prime", d_prime)):
            bounded, _ = bound_contributions(logs.lazy(), self.spec)  # bounding report: private, discarded
            self.data[key] = data_from_frame(bounded.select(cols).collect(), self.spec)
        return self

    def _which(self, logs: pl.DataFrame) -> str:
        if not self.data:
            raise UsageError("DPVAPVIMechanism: call prepare(d, d_prime) before running it.")
        for key, frame in zip(("d", "d_prime"), self._frames):
            if logs is frame:
                return key
        for key, frame in zip(("d", "d_prime"), self._frames):
            if logs.equals(frame):
                return key
        raise UsageError("this audit mechanism was prepared for a pair (D, D') and got other logs; "
                         "call prepare(d, d_prime) for them first.")

    # ----------------------------------------------------------------- runs
    def _whiten(self, stats: dict, n: int) -> np.ndarray:
        d = self.fmap.dim
        iu = np.triu_indices(d, 1)
        parts = []
        for name in self.statistics:
            x = np.asarray(stats[name]).reshape(n, *np.shape(stats[name])[-2 if name in _MATRICES else -1:])
            if name in _MATRICES:  # off-diagonal sd sigma_z, diagonal sd sqrt(2) sigma_z
                sz = self.scales.sigma_z
                parts += [x[:, iu[0], iu[1]] / sz, np.diagonal(x, axis1=1, axis2=2) / (np.sqrt(2.0) * sz)]
            else:
                parts.append(x / {"v2": self.scales.sigma_v2, "v": self.scales.sigma_v,
                                  "r_plus_v": self.scales.sigma_r}[name])
        return np.concatenate(parts, axis=1)

    def __call__(self, logs: pl.DataFrame, rng: np.random.Generator, n_runs: int = 1) -> np.ndarray:
        data = self.data[self._which(logs)]
        H = self.spec.horizon
        rel = self.learner.step_release(data, self.fmap, H - 1, np.zeros(self.fmap.n_states), rng=rng,
                                        n_runs=int(n_runs))
        return self._whiten(rel, int(n_runs))

    # ----------------------------------------------------------------- gray-box
    def exact_statistics(self, logs: pl.DataFrame) -> dict:
        """Pre-noise values of the output statistics at step H-1 (exact: sigma^2 = 1 there)."""
        ex = self.learner.exact_step_statistics(self.data[self._which(logs)], self.fmap, self.spec.horizon - 1,
                                                np.zeros(self.fmap.n_states))
        return {name: ex[name] for name in self.statistics}

    def declared_sensitivity(self) -> dict:
        """l2 (Frobenius for the matrices) sensitivities from ``learners.linear.privacy.sensitivities``."""

        sens = lp.sensitivities(self.spec.horizon, self.spec.max_episodes_per_unit)
        return {name: {"l2": float(sens[name])} for name in STATISTICS}

    def noise(self) -> dict:
        """Gaussian scale per statistic such that mu = L2 change / scale (matrices: sqrt(2) sigma_z)."""
        sc = self.scales
        return {"gram": {"mechanism": "gaussian", "scale": np.sqrt(2.0) * sc.sigma_z},
                "weighted_gram": {"mechanism": "gaussian", "scale": np.sqrt(2.0) * sc.sigma_z},
                "v2": {"mechanism": "gaussian", "scale": sc.sigma_v2},
                "v": {"mechanism": "gaussian", "scale": sc.sigma_v},
                "r_plus_v": {"mechanism": "gaussian", "scale": sc.sigma_r}}

    def gaussian_tv_per_run(self) -> float:
        """Total-variation distance from one run's output to a post-processed continuous Gaussian mechanism.

        The output is f_L(D) + Z, f_L the exact lattice statistics and Z
        independent discrete Gaussians on the lattice (``draw_step_noise``),
        then whitened. Replacing each Z_i by a continuous N(0, sigma_i^2)
        rounded to the lattice gives Y = round(f_L(D) + Z_cont), a
        post-processing of the continuous Gaussian mechanism on f_L, which is
        mu-GDP with mu = the whitened L2 change of f_L (at most the claimed mu
        when the declared sensitivity holds on the lattice, as
        ``learners.linear.privacy`` proves and the gray-box check verifies).
        Coupling coordinate by coordinate, TV(X, Y) <= sum_i
        :func:`privaudit.audit.bounds.lattice_gaussian_tv` (1 / sigma_i), sigma_i
        in lattice units (``lattice_variances``). The GDP test of n runs per
        side then errs with probability at most its level plus 2 n times this
        (:func:`privaudit.audit.runner.run_audit` spends that share of alpha).

        Returns
        -------
        float
            The bound for one run of the output (sum over its coordinates).
        """
        var = lp.lattice_variances(self.scales)
        d = self.fmap.dim
        total = 0.0
        for name in self.statistics:
            if name in _MATRICES:
                off, diag = var[name]
                total += d * (d - 1) / 2 * float(lattice_gaussian_tv(float(off) ** -0.5))
                total += d * float(lattice_gaussian_tv(float(diag) ** -0.5))
            else:
                total += d * float(lattice_gaussian_tv(float(var[name]) ** -0.5))
        return total

    def audited_claim(self, delta: float, rho_total: float | None = None, kind: str = "generic"):
        """The accounting's claim for the output: len(statistics) * rho_0 zCDP, rho_0 = rho / (5H).

        Parameters
        ----------
        delta : float
            delta at which the claim is compared.
        rho_total : float, optional
            The total rho claimed for a DP-VAPVI run (default: the budget this
            adapter runs at; give the claim's when auditing a mis-stated claim).
        kind : {"generic", "gaussian"}
            ``gaussian`` opts in to the GDP test. The noise is an exact discrete
            Gaussian on a fine lattice (sigma is 10^4 to 10^13 lattice steps), not
            a continuous Gaussian: the opt-in is valid through
            :meth:`gaussian_tv_per_run`, whose share of alpha the runner spends
            (or refuses the test when it exceeds half of alpha).
        """
        rho = self.budget.rho if rho_total is None else float(rho_total)
        return Claim.from_rho(len(self.statistics) * rho / (5 * self.spec.horizon), delta, kind=kind)

    def describe(self) -> str:
        return (f"{self.name} at rho={self.budget.rho:g}: noisy {', '.join(self.statistics)} of step h=H-1 "
                f"(claim {len(self.statistics)} x rho/(5H) = {len(self.statistics) * self.scales.rho0:.6g})")


def linear_canary_pair(logs: pl.DataFrame, spec: DomainSpec, table: np.ndarray):
    """Substitution pair aimed at the statistics of step H-1 of a linear learner.

    Removed unit: among units with a row at step H-1, the one with the most
    rows (ties: smallest id). Canary episode: H steps; at h < H-1 the
    least-visited non-terminal (s, a) of D at h; at h = H-1 the non-terminal
    (s, a) maximising ||phi phi^T - psi psi^T||_F^2 against the removed
    unit's phi(s, a) at H-1 (then the least visited), i.e. orthogonal features
    of largest norm, with the reward at the other end of the range from the
    removed row's. The auditor is the data holder's tool, so it may read D.

    Parameters
    ----------
    logs : polars.DataFrame
        D, standard schema.
    spec : DomainSpec
    table : ndarray, shape (S, A, d)
        phi(s, a), ||phi|| <= 1.

    Returns
    -------
    NeighbouringPair
        Kind ``canary-linear``; its description records the removed unit's row count.

    Raises
    ------
    UsageError
        Empty logs or no non-terminal state.
    """

    H, S, A = spec.horizon, spec.n_states, spec.n_actions
    lo, hi = spec.reward_range
    if logs.height == 0:
        raise UsageError("the logs are empty: an audit needs at least one privacy unit to replace.")
    nonterm = np.setdiff1d(np.arange(S), np.asarray(spec.terminal_states, dtype=int))
    if nonterm.size == 0:
        raise UsageError("the spec declares every state terminal; no canary episode is possible.")
    unit = unit_column(logs)
    last_units = logs.filter(pl.col("step") == H - 1).select(unit).unique()
    pool = logs.join(last_units, on=unit, how="semi") if last_units.height else logs
    per_unit = pool.group_by(unit).len().sort([pl.col("len"), pl.col(unit)], descending=[True, False])
    removed = per_unit[unit][0]
    rem_last = logs.filter((pl.col(unit) == removed) & (pl.col("step") == H - 1)).sort("episode_id")
    counts = visit_counts(logs, H, S, A)[:, nonterm, :]  # (H, S_nt, A)
    flat = counts.reshape(H, -1).argmin(axis=1)
    states, actions = nonterm[flat // A], flat % A
    T = table[nonterm]  # (S_nt, A, d)
    rewards = np.full(H, lo, dtype=float)
    if rem_last.height:
        s0, a0, r0 = int(rem_last["state"][0]), int(rem_last["action"][0]), float(rem_last["reward"][0])
        psi = table[s0, a0]
        n_phi, n_psi = (T ** 2).sum(-1), float(psi @ psi)
        frob2 = n_phi ** 2 + n_psi ** 2 - 2 * (T @ psi) ** 2  # ||phi phi^T - psi psi^T||_F^2
        key = np.lexsort((counts[H - 1].reshape(-1), -np.round(frob2.reshape(-1), 12)))
        best = int(key[0])
        states[H - 1], actions[H - 1] = nonterm[best // A], best % A
        rewards[H - 1] = lo if r0 >= (lo + hi) / 2 else hi
    else:
        rewards[H - 1] = hi
    next_states = np.append(states[1:], states[-1])
    canary_df = canary_frame(logs, spec, states, actions, rewards, next_states)
    d_prime = pl.concat([logs.filter(pl.col(unit) != removed), canary_df])
    description = {
        "kind": "canary-linear", "relation": "substitution",
        "removed_unit": {"rows": int(logs.filter(pl.col(unit) == removed).height)},
        "canary": {"steps": [{"h": h, "state": int(states[h]), "action": int(actions[h]),
                              "reward": float(rewards[h]), "next_state": int(next_states[h])} for h in range(H)]},
    }
    return NeighbouringPair(logs, d_prime, description)
