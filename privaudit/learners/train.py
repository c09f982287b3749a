"""Train a tabular policy from logs or from a release: the Python API behind ``privaudit train``.

* :func:`train_from_release`: DP-APVI on a release (post-processing; spends nothing).
* :func:`train_from_logs`: a non-private learner (ve, apvi, apvi-hoeffding) on
  exact counts, or dp-apvi after releasing the counts first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from privaudit.data.prepare import PreparedLogs, prepare_logs
from privaudit.errors import ArtifactError, UsageError
from privaudit import registry
from privaudit.learners.policy import Policy
from privaudit.learners.tabular_counts import exact_counts
from privaudit.spec import DomainSpec
from privaudit.stats.release import load_release, release_logs


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
        Missing/invalid manifest or tables; a release made under another spec.
    UsageError
        A non-DP algorithm, or ``stationary`` contradicting the release.
    """

    if algo != "dp-apvi":
        raise UsageError(f"`algo` {algo} cannot train on a release: a release holds noisy counts, which only "
                         "dp-apvi is built for (ve/apvi/apvi-hoeffding read exact logs: pass the logs and their spec).")
    release = load_release(release_dir)
    if spec is not None and release.spec_hash != spec.hash():
        raise ArtifactError(
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


def _check_manifest_against_spec(manifest: dict, spec: DomainSpec, where) -> None:
    """Refuse a manifest whose k or domain differs from the spec's, even under the same spec hash
    (an edited manifest: the learner's noise bound E and planning would follow the manifest)."""
    dom, unit = manifest["domain"], manifest["privacy_unit"]
    pairs = {"H": (dom["H"], spec.H), "S": (dom["S"], spec.S), "A": (dom["A"], spec.A),
             "k (privacy_unit.max_episodes)": (unit["max_episodes"], spec.max_episodes_per_unit),
             "terminal_states": (sorted(dom["terminal_states"]), sorted(spec.terminal_states)),
             "reward_range": ([float(x) for x in dom["reward_range"]], [float(x) for x in spec.reward_range])}
    bad = [f"{k}: manifest {m}, spec {s}" for k, (m, s) in pairs.items() if m != s]
    if bad:
        raise ArtifactError(f"release {where}: its manifest disagrees with the spec ({'; '.join(bad)}). The "
                            "manifest was edited or belongs to another spec; use the release as written.")


def train_from_logs(logs: str | Path | PreparedLogs, spec: DomainSpec, *, algo: str, stationary: bool = False,
                    rho: float | None = None, epsilon: float | None = None, delta: float | None = None,
                    mechanism: str = "gaussian", noise: str = "exact", release_out: str | Path | None = None,
                    ledger: str | Path | None = None, seed: int | None = None, params: dict | None = None,
                    echo: Callable[[str], None] | None = None) -> Policy:
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
    rho, epsilon, delta, mechanism, noise, ledger, seed
        dp-apvi only: the release's budget and options
        (``privaudit.stats.release.release_logs``); ``seed`` makes the
        release's noise reproducible (tests only, rng "seeded-insecure").
    release_out : path
        dp-apvi only: where the release is written (kept next to the policy).
    params : dict, optional
        Learner constructor parameters.
    echo : callable, optional
        Messages for the data holder (stderr in the CLI).

    Returns
    -------
    Policy

    Raises
    ------
    UsageError
        A budget given to a non-private algorithm, none to dp-apvi, or a
        missing ``release_out``.
    LogReadError, ValidationFailed, BudgetExceededError
        From reading, validating or releasing the logs.
    """
    tabular = registry.names(family="tabular")
    if algo not in tabular:
        raise UsageError(f"unknown tabular algorithm {algo!r}; choose one of {', '.join(tabular)}.")
    say = echo or (lambda s: None)
    if algo == "dp-apvi":
        if release_out is None:
            raise UsageError("dp-apvi on logs needs a release folder to write (release_out).")
        release_logs(logs, spec, rho=rho, epsilon=epsilon, delta=delta, mechanism=mechanism,
                     stationary=stationary, noise=noise, out=release_out, ledger=ledger, seed=seed,
                     echo=say)
        return train_from_release(release_out, algo=algo, spec=spec, params=params)
    if any(v is not None for v in (rho, epsilon, delta)):
        raise UsageError(f"`algo` {algo} is not private: it takes no budget (`rho`/`epsilon`/`delta`). "
                         "Use `algo` dp-apvi for a differentially private policy.")
    prepared = logs if isinstance(logs, PreparedLogs) else prepare_logs(logs, spec)  # same gate as a release
    prepared.check_spec(spec)
    counts = exact_counts(prepared.bounded, spec, stationary=stationary)
    learner = _learner(algo, params).fit(counts, spec.public_reward_scaled(), terminal_states=spec.terminal_states,
                                         spec_hash=spec.hash(), reward_range=spec.reward_range)
    return learner.policy_


def check_out_free(*paths: Path) -> None:
    """Refuse to start when an output already exists (before any budget is spent)."""
    for p in paths:
        if p is not None and Path(p).exists():
            raise UsageError(f"{p} already exists; choose another `out` or remove it.")
    return None


__all__ = ["train_from_release", "train_from_logs",
           "check_out_free", "ArtifactError"]
