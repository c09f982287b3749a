"""Train a tabular policy from logs or from a release: the Python API behind ``privaudit train``.

* :func:`train_from_release`: DP-APVI on a release (post-processing; spends nothing).
* :func:`train_from_logs`: a non-private learner (ve, apvi, apvi-hoeffding) on
  exact counts, dp-apvi after releasing the counts first, or a private learner
  that reads the logs itself through its ``train_on_logs`` (dp-pbb); which one is
  asked of the learner class (``core.registry.OfflineLearner.reads``).
"""

from __future__ import annotations

from pathlib import Path

from privaudit.data.prepare import PreparedLogs, prepare_logs
from privaudit.core.errors import ArtifactError, SpecError, UsageError
from privaudit.core import registry
from privaudit.learners.tabular import dp_pbb
from privaudit.learners.tabular.dp_pbb import PBBRun
from privaudit.learners.tabular.pbb_noise import PBBPlan
from privaudit.learners.options import BudgetRequest, RunContext
from privaudit.learners.policy import Policy
from privaudit.privacy.budget import Budget
from privaudit.learners.tabular.counts import exact_counts
from privaudit.core.spec import DomainSpec
from privaudit.release.manifest import ReleaseManifest
from privaudit.release.tabular import ReleaseOptions, load_release, release_logs


def _learner(algo: str, params: dict | None):
    cls = registry.get(algo).load()
    try:
        return cls(**(params or {}))
    except TypeError as e:
        raise UsageError(f"bad parameters for {algo}: {e}") from None


def train_from_release(release_dir: str | Path, *, algo: str = "dp-apvi", spec: DomainSpec | None = None,
                       stationary: bool | None = None, params: dict | None = None) -> Policy:
    """DP-APVI on a release folder: post-processing, no further privacy cost.

    Parameters
    ----------
    release_dir : path
        A folder written by ``privaudit release`` (``manifest.json`` + tables).
    algo : str
        Must be ``dp-apvi`` (the non-private learners read exact counts).
    spec : DomainSpec, optional
        If given, the release's spec hash must equal ``spec.hash()``.
    stationary : bool, optional
        If given, must match the release (``--stationary``).
    params : dict, optional
        DPAPVI constructor parameters (failure_prob, C1, C2, C, penalty).

    Returns
    -------
    Policy
        Its privacy record is the release's guarantee.

    Raises
    ------
    ArtifactError
        Missing/invalid manifest or tables; a manifest whose domain or k
        differs from ``spec`` under the same spec hash (an edited manifest).
    SpecError
        ``spec`` is not the spec the release was made under (its hash differs).
    UsageError
        An unknown algorithm name, a non-DP algorithm, or ``stationary`` contradicting the release.
    """

    registry.get(algo)  # a name that is no algorithm at all: 'unknown algorithm', with the registered names
    on_release = registry.names_with(lambda cls: cls.reads == "release")
    if algo not in on_release:
        exact = "/".join(registry.names_with(lambda cls: cls.reads == "counts", family="tabular"))
        own = "/".join(registry.names_with(lambda cls: cls.reads == "logs", family="tabular"))
        raise UsageError(f"`algo` {algo} cannot train on a release: a release holds noisy counts, which only "
                         f"{'/'.join(on_release)} {'is' if len(on_release) == 1 else 'are'} built for ({exact} read "
                         f"exact logs; {own} read{'s' if '/' not in own else ''} the logs and spend"
                         f"{'s' if '/' not in own else ''} its own budget: pass the logs and their spec).")
    release = load_release(release_dir)
    if spec is not None and release.spec_hash != spec.hash():  # the wrong --spec: a spec error (exit 2)
        raise SpecError(
            f"release {release_dir} was made under another spec: its spec_hash is {release.spec_hash}, "
            f"the `spec` hashes to {spec.hash()}. Pass the spec the release was made with (or none).")
    if spec is not None:
        _check_manifest_against_spec(release.manifest, spec, release_dir)
    if stationary is not None and bool(stationary) != release.stationary:
        raise UsageError(f"release {release_dir} is {'stationary' if release.stationary else 'per-step'} "
                         f"but `stationary` was {'given' if stationary else 'not given'}; drop it "
                         "(the release decides) or use a release made with the same setting.")
    learner = _learner(algo, params).fit(release, release_path=str(release_dir))
    return learner.policy_


def _check_manifest_against_spec(manifest: ReleaseManifest, spec: DomainSpec, where) -> None:
    """Refuse a manifest whose dataset_id, k or domain differs from the spec's, even under the same spec hash
    (an edited manifest: the learner's noise bound E and planning would follow the manifest, and the
    policy would name the manifest's dataset)."""
    dom = manifest.domain
    pairs = {"dataset_id": (manifest.dataset_id, spec.dataset_id), "H": (dom.H, spec.H), "S": (dom.S, spec.S), "A": (dom.A, spec.A),
             "k (privacy_unit.max_episodes)": (manifest.privacy_unit.max_episodes, spec.max_episodes_per_unit),
             "terminal_states": (sorted(dom.terminal_states), sorted(spec.terminal_states)),
             "reward_range": ([float(x) for x in dom.reward_range], [float(x) for x in spec.reward_range])}
    bad = [f"{k}: manifest {m}, spec {s}" for k, (m, s) in pairs.items() if m != s]
    if bad:
        raise ArtifactError(f"release {where}: its manifest disagrees with the spec ({'; '.join(bad)}). The "
                            "manifest was edited or belongs to another spec; use the release as written.")


def train_from_logs(logs: str | Path | PreparedLogs, spec: DomainSpec, *, algo: str, stationary: bool = False,
                    budget: BudgetRequest | Budget | None = None, noise: str = "exact",
                    release_out: str | Path | None = None, seed: int | None = None, params: dict | None = None,
                    max_per_cell: int | None = None, context: RunContext | None = None) -> Policy:
    """Train a tabular policy from Parquet logs.

    Parameters
    ----------
    logs : path or PreparedLogs
        Parquet file or folder of the standard trajectory table (prepared
        here: ``privaudit.data.prepare.prepare_logs``), or logs already
        prepared under ``spec``.
    spec : DomainSpec
    algo : {"ve", "apvi", "apvi-hoeffding", "dp-apvi"}
    stationary : bool
        Pool counts over h.
    budget : BudgetRequest or Budget, optional
        dp-apvi: the release's budget (``BudgetRequest``: rho, or epsilon
        with delta, and the mechanism; ``privaudit.release.tabular.release_logs``).
        dp-pbb: its whole Gaussian budget, as a request or already resolved
        (the pipeline's part). None for the non-private learners.
    noise : {"exact", "rounded"}
        dp-apvi only: the release's noise sampler.
    release_out : path
        dp-apvi only: where the release is written (kept next to the policy).
    seed : int, optional
        TESTS ONLY: makes the private learners' noise reproducible (rng "seeded-insecure").
    params : dict, optional
        Learner constructor parameters.
    max_per_cell : int, optional
        dp-pbb only: c, the most steps one unit contributes to one cell
        (default :data:`privaudit.learners.tabular.dp_pbb.MAX_PER_CELL_DEFAULT`).
    context : RunContext, optional
        The ledger checked and charged (dp-apvi: by the release; dp-pbb: its
        event), the run and output named in its entry (dp-pbb), the messages,
        and the engine that reads the logs (``engine="spark"``: dp-pbb and
        dp-apvi's release only).

    Returns
    -------
    Policy

    Raises
    ------
    UsageError
        A budget given to a non-private algorithm, none to dp-apvi, or a
        missing ``release_out``.
    LogReadError, ValidationFailed, BudgetExceededError
        From reading, validating or releasing the logs (``RepairsRefused``, a
        ValidationFailed: bounding changes more than ``context.repairs`` allows).
    """
    tabular = registry.names(family="tabular")
    if algo not in tabular:
        raise UsageError(f"unknown tabular algorithm {algo!r}; choose one of {', '.join(tabular)}.")
    ctx = context or RunContext()
    request = budget if isinstance(budget, BudgetRequest) else BudgetRequest()
    cls = registry.get(algo).load()
    reads = cls.reads
    if reads == "logs":  # a private learner with its own noise (DP-PBB): it trains itself
        return cls.train_on_logs(logs, spec, stationary=stationary, budget=budget, seed=seed, params=params,
                                 max_per_cell=max_per_cell, context=ctx).learner.policy_
    if max_per_cell is not None or isinstance(budget, Budget):
        own = " / ".join(registry.names_with(lambda cls: cls.reads == "logs", family="tabular"))
        raise UsageError(f"`max_per_cell` and `budget` apply to {own}, not to {algo} "
                         f"({'/'.join(registry.names_with(lambda cls: cls.reads == 'release'))}: cap the release "
                         "itself, `release_logs(max_per_cell=...)`, i.e. "
                         "`privaudit release --max-per-cell`).")
    if reads == "release":  # DP-APVI: release the counts first (spends the budget), then post-process
        if release_out is None:
            raise UsageError(f"{algo} on logs needs a release folder to write (release_out).")
        release_logs(logs, spec, rho=request.rho, epsilon=request.epsilon, delta=request.delta,
                     mechanism=request.mechanism, stationary=stationary, out=release_out, ledger=ctx.ledger,
                     seed=seed, options=ReleaseOptions(noise=noise, echo=ctx.say, repairs=ctx.repairs,
                                                       engine=ctx.engine, spark=ctx.spark))
        return train_from_release(release_out, algo=algo, spec=spec, params=params)
    if ctx.engine != "polars" or getattr(logs, "engine", "polars") != "polars":
        spark_ok = registry.names_with(lambda cls: cls.reads in ("logs", "release"), family="tabular")
        raise UsageError(f"`algo` {algo} counts the exact logs with polars; `engine` spark applies to "
                         f"{' / '.join(spark_ok)}.")
    if request.given:
        raise UsageError(f"`algo` {algo} is not private: it takes no budget (`rho`/`epsilon`/`delta`). "
                         f"Use `algo` {' or '.join(registry.names(family='tabular', private=True))} for a "
                         "differentially private policy.")
    if isinstance(logs, PreparedLogs):
        prepared = logs
    else:  # the same gates as a release
        prepared = prepare_logs(logs, spec, repairs=ctx.repairs)
        ctx.say(prepared.bounding.summary())
    prepared.check_spec(spec)
    counts = exact_counts(prepared.bounded, spec, stationary=stationary)
    learner = _learner(algo, params).fit(counts, spec.public_reward_scaled(), terminal_states=spec.terminal_states,
                                         spec_hash=spec.hash(), reward_range=spec.reward_range)
    return learner.policy_


def plan_dp_pbb(spec: DomainSpec, budget: Budget, *, stationary: bool = True, params: dict | None = None,
                max_per_cell: int | None = None) -> tuple[dp_pbb.DPPBB, PBBPlan, int]:
    """DP-PBB's noise plan on logs of ``spec`` from public facts only: ``(learner, plan, c)``.

    What :func:`train_dp_pbb` fits with; see
    :meth:`privaudit.learners.tabular.dp_pbb.DPPBB.plan_for` (parameters, errors).
    """
    return dp_pbb.DPPBB.plan_for(spec, budget, stationary=stationary, params=params, max_per_cell=max_per_cell)


def train_dp_pbb(logs, spec: DomainSpec, *, stationary: bool = True, budget: BudgetRequest | Budget | None = None,
                 seed: int | None = None, params: dict | None = None, max_per_cell: int | None = None,
                 context: RunContext | None = None) -> PBBRun:
    """DP-PBB on logs: :func:`privaudit.learners.tabular.pbb_logs.train_on_logs` (parameters, errors)."""
    return dp_pbb.DPPBB.train_on_logs(logs, spec, stationary=stationary, budget=budget, seed=seed, params=params,
                                      max_per_cell=max_per_cell, context=context)


def check_out_free(*paths: Path) -> None:
    """Refuse to start when an output already exists (before any budget is spent)."""
    for p in paths:
        if p is not None and Path(p).exists():
            raise UsageError(f"{p} already exists; choose another `out` or remove it.")
    return None


__all__ = ["train_from_release", "train_from_logs", "train_dp_pbb", "plan_dp_pbb", "PBBRun",
           "check_out_free", "ArtifactError"]
