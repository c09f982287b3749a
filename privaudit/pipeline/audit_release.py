"""The pipeline's audit stage: the tabular count release, audited at its claimed budget.

The mechanism under audit is the release of ``privaudit.stats.release`` as the
pipeline ran it: contribution bounding (``privaudit.data.bounding``), exact
sparse counts (``privaudit.stats.counts.sparse_counts``), then the library's
own noise sampler (``privaudit.privacy.mechanisms.add_noise``) at the noise
scales, mechanism and noise mode written in the release manifest.

Restriction to the cells the pair changes
-----------------------------------------
A full ICU-Sepsis release has 12.8 million cells (stationary; 256 million per
step), too many to draw a few thousand times in seconds. The adapter outputs
only the cells where the exact statistics of D and D' differ. This loses
nothing for a release whose noise is independent across cells (as the
manifest states): every other cell has the same distribution under D and D'
and is independent of the changed cells, so it carries no information about
which of D, D' was used, and the likelihood ratio of the full output equals
that of the restricted output. What the restriction cannot catch is a release
whose noise is *not* independent across cells (e.g. noise reused between
cells); ``privaudit.audit.catalogue`` holds such broken mechanisms for the
full-output auditor.

The gray-box hooks compare the exact change of each family between D and D'
with the manifest's declared L1 / L2 sensitivities (zero samples), which checks
contribution bounding and the sensitivity formulas on this very pair.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from privaudit.data.bounding import bound_contributions
from privaudit.errors import UsageError
from privaudit.privacy import mechanisms
from privaudit.spec import DomainSpec
from privaudit.stats.counts import sparse_counts

#: Families of a tabular release, in output order.
FAMILIES = ("visits", "transitions", "rewards")


def _cells(logs: pl.DataFrame, spec: DomainSpec, stationary: bool, quantum: int | None) -> dict:
    """Exact sparse statistics of ``logs`` after bounding: family -> (flat index, value) frame.

    Flat indices are those of the release's dense tables: transitions
    ``[(h*S +) s]*A + a)*S + s'``, visits and rewards that index // S.
    """
    bounded, _private = bound_contributions(logs.lazy(), spec)  # bounding facts stay here: private
    sc = sparse_counts(bounded, spec, stationary=stationary, rewards=quantum is not None, quantum=quantum)
    cells = sc.cells
    S = spec.S
    out = {"transitions": cells.select(pl.col("i"), pl.col("n").alias("v"))}
    by_sa = cells.group_by((pl.col("i") // S).alias("i")).agg(
        [pl.col("n").sum().alias("v")] + ([pl.col("r").sum().alias("r")] if quantum is not None else []))
    out["visits"] = by_sa.select("i", "v")
    if quantum is not None:
        out["rewards"] = by_sa.select("i", pl.col("r").alias("v"))
    return out


class ReleaseAudit:
    """The pipeline's release as an audit mechanism (batched; gray-box hooks).

    Parameters
    ----------
    spec : DomainSpec
        The spec the release was made under.
    manifest : dict
        The release manifest (``schemas/release_manifest.schema.json``): its
        ``domain.stationary``, ``mechanism``, ``noise`` and, per family,
        ``noise_scale``, ``l1_sensitivity``, ``l2_sensitivity`` and the reward
        quantum define the mechanism.

    Notes
    -----
    Call :meth:`prepare` with the pair (``run_audit`` does): the returned
    object outputs, for one dataset of the pair, ``n_runs`` noisy draws of the
    changed cells, shape (n_runs, m) with m the number of changed cells of
    all families together. See the module docstring for why this is exact.
    """

    name = "tabular release (changed cells)"

    def __init__(self, spec: DomainSpec, manifest: dict):
        self.spec = spec
        self.manifest = manifest
        self.stationary = bool(manifest["domain"]["stationary"])
        self.mechanism = manifest["mechanism"]
        self.noise_mode = manifest.get("noise", "rounded")
        self.families = [f for f in FAMILIES if f in manifest["families"]]
        self.quantum = manifest.get("reward_quantum") if "rewards" in self.families else None
        self._d = self._d_prime = None

    def __repr__(self) -> str:
        return f"ReleaseAudit(families={self.families}, stationary={self.stationary})"

    # ------------------------------------------------------------------ binding
    def prepare(self, d: pl.DataFrame, d_prime: pl.DataFrame) -> "ReleaseAudit":
        """Compute the exact statistics of D and D' on the cells where they differ."""
        c0 = _cells(d, self.spec, self.stationary, self.quantum)
        c1 = _cells(d_prime, self.spec, self.stationary, self.quantum)
        bound = ReleaseAudit(self.spec, self.manifest)
        bound._d, bound._d_prime = d, d_prime
        bound._stats = {0: {}, 1: {}}
        for f in self.families:
            j = (c0[f].join(c1[f], on="i", how="full", coalesce=True, suffix="_1")
                 .with_columns(pl.col("v").fill_null(0), pl.col("v_1").fill_null(0))
                 .filter(pl.col("v") != pl.col("v_1")).sort("i"))
            bound._stats[0][f] = j["v"].to_numpy().astype(np.int64)
            bound._stats[1][f] = j["v_1"].to_numpy().astype(np.int64)
        bound._x = {side: np.concatenate([bound._stats[side][f] for f in self.families])
                    for side in (0, 1)}
        bound._scale = np.concatenate([np.full(len(bound._stats[0][f]),
                                               float(self.manifest["families"][f]["noise_scale"]))
                                       for f in self.families])
        if bound._x[0].size == 0:
            raise UsageError("the neighbouring pair changes no statistic of the release; nothing to audit.")
        return bound

    def _side(self, logs) -> int:
        if logs is self._d:
            return 0
        if logs is self._d_prime:
            return 1
        raise UsageError("ReleaseAudit: call prepare(d, d_prime) and run it on one of those two frames.")

    # ------------------------------------------------------------------ mechanism
    def __call__(self, logs: pl.DataFrame, rng: np.random.Generator, n_runs: int = 1) -> np.ndarray:
        """``n_runs`` independent noisy draws of the changed cells, shape (n_runs, m), int64."""
        x = np.broadcast_to(self._x[self._side(logs)], (int(n_runs), self._x[0].size))
        out = np.empty(x.shape, dtype=np.int64)
        # one add_noise call per distinct scale (families may differ: rewards are in 1/quantum units)
        for scale in np.unique(self._scale):
            cols = self._scale == scale
            out[:, cols] = mechanisms.add_noise(np.ascontiguousarray(x[:, cols]), mechanism=self.mechanism,
                                                scale=float(scale), rng=rng, noise=self.noise_mode)
        return out

    # ------------------------------------------------------------------ gray-box hooks
    def exact_statistics(self, logs: pl.DataFrame) -> dict:
        """Family -> exact values on the changed cells (pre-noise)."""
        return dict(self._stats[self._side(logs)])

    def declared_sensitivity(self) -> dict:
        """Family -> the manifest's declared L1 / L2 sensitivity (stored units)."""
        fam = self.manifest["families"]
        return {f: {"l1": float(fam[f]["l1_sensitivity"]), "l2": float(fam[f]["l2_sensitivity"])}
                for f in self.families}

    def noise(self) -> dict:
        """Family -> the mechanism and noise scale the release used."""
        fam = self.manifest["families"]
        return {f: {"mechanism": self.mechanism, "scale": float(fam[f]["noise_scale"])} for f in self.families}


def stationary_pair(logs: pl.DataFrame, spec: DomainSpec):
    """The worst-case substitution pair for a stationary (pooled) release.

    D' is D with its longest unit (ties: the smallest id) replaced by one
    H-step canary episode that stays in one cell: the least-visited pooled
    (s, a) over non-terminal states of D (ties: the smallest), with
    next_state = s at every step (a self-loop), truncated at step H-1, and the
    largest reward the spec allows at every step (r_max, or the public
    reward r(s) that the self-loop earns). Pooled counts then change by H in
    one cell, the largest change one episode can make (the stationary
    sensitivity L2 = kH sqrt(2) is attained when the removed unit also sat in
    one cell), whereas the ``rare`` canary of ``privaudit.audit.neighbours``
    spreads its H steps over H cells, which a pooled release sees as a change
    of only sqrt(H).

    Built from ``make_pair(..., "rare")``, whose removed unit and canary ids
    it keeps; only the canary's rows are rewritten. Checked with
    ``check_neighbours`` (exactly one unit substituted).

    Returns
    -------
    privaudit.audit.NeighbouringPair
        ``description.kind`` is ``explicit`` and ``description.construction``
        ``canary-stationary-worst-case``.
    """
    from privaudit.audit.neighbours import NeighbouringPair, check_neighbours, make_pair

    H, S, A = spec.H, spec.S, spec.A
    base = make_pair(logs, spec, "rare", rng=np.random.default_rng(0))  # rng unused by "rare"
    n_canary = H
    d_prime = base.d_prime
    keep = d_prime.head(d_prime.height - n_canary)
    nonterm = np.setdiff1d(np.arange(S), np.asarray(spec.terminal_states, dtype=int))
    pooled = (logs.filter(~pl.col("state").is_in(list(spec.terminal_states)) & (pl.col("step") < H))
              .group_by("state", "action").len())
    n = np.zeros((S, A), dtype=np.int64)
    n[pooled["state"].to_numpy(), pooled["action"].to_numpy()] = pooled["len"].to_numpy()
    flat = int(np.argmin(n[nonterm].reshape(-1)))
    s, a = int(nonterm[flat // A]), int(flat % A)
    pub = spec.public_reward_vector()
    r = float(pub[s]) if pub is not None else float(spec.reward_range[1])
    canary = d_prime.tail(n_canary).with_columns(
        pl.lit(s).cast(d_prime.schema["state"]).alias("state"),
        pl.lit(a).cast(d_prime.schema["action"]).alias("action"),
        pl.lit(s).cast(d_prime.schema["next_state"]).alias("next_state"),
        pl.lit(r).cast(d_prime.schema["reward"]).alias("reward"))
    if "terminated" in canary.columns:
        canary = canary.with_columns(pl.lit(False).alias("terminated"))
    if "truncated" in canary.columns:
        canary = canary.with_columns((pl.col("step") == H - 1).alias("truncated"))
    d_prime = pl.concat([keep, canary.cast(d_prime.schema)])
    check_neighbours(logs, d_prime)
    desc = dict(base.description)
    desc["kind"] = "explicit"  # schemas/audit_report.schema.json knows the built-in strategies only
    desc["construction"] = "canary-stationary-worst-case"
    desc["canary"] = {"steps": [{"h": h, "state": s, "action": a, "reward": r, "next_state": s} for h in range(H)]}
    return NeighbouringPair(logs, d_prime, desc)


def audit_release(logs: pl.DataFrame, spec: DomainSpec, manifest: dict, *, rho: float, delta: float,
                  trials: int, seed: int | None = None, progress: bool | None = None):
    """Audit the release ``manifest`` describes against its claim rho-zCDP at ``delta``.

    Parameters
    ----------
    logs : polars.DataFrame
        D, the logs in the standard schema (``privaudit.data.io.scan_logs``).
    spec : DomainSpec
    manifest : dict
        The release manifest.
    rho : float
        The release's claimed zCDP budget (tested as a Gaussian / GDP claim:
        the release is a composition of Gaussian mechanisms, so rho-zCDP is
        sqrt(2 rho)-GDP; AUDITING.md 4.1).
    delta : float
        delta at which epsilon is compared.
    trials : int
        Runs per side (selection + evaluation), >= 20.
    seed : int or None
        Seeds the audit (the canary choice is deterministic; the noise and
        split use it). None: OS entropy.
    progress : bool or None
        Progress bar on stderr (default: only on a terminal).

    Returns
    -------
    privaudit.audit.AuditReport
        On the worst-case pair the release allows: for a per-step release the
        ``rare`` canary (``privaudit.audit.neighbours``: the longest unit
        replaced by an H-step episode through the least-visited cells), for a
        stationary one :func:`stationary_pair`.

    Raises
    ------
    UsageError
        Bad trials, or a pair that changes nothing.
    """
    from privaudit.audit import Claim, run_audit

    if manifest["mechanism"] != "gaussian":
        raise UsageError("the pipeline audits Gaussian releases only (a rho-zCDP claim).")
    claim = Claim.from_rho(float(rho), float(delta), kind="gaussian")
    mech = ReleaseAudit(spec, manifest)
    pair = stationary_pair(logs, spec) if mech.stationary else None
    return run_audit(mech, logs, spec, claim=claim, pair=pair, canary="rare", trials=int(trials), seed=seed,
                     n_jobs=1, mechanism_name=mech.name, progress=progress)
