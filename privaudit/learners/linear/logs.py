"""``train_from_logs``: PEVI / VAPVI / DP-VAPVI on Parquet logs (``privaudit train --algo ...``).

Pipeline: ``privaudit.data.prepare.prepare_logs`` (validate: fatal rules
refuse the logs; bound: keep k episodes per unit, truncate to H, clip and
scale rewards to [0, 1]) -> aggregate per step (``LinearData``) -> learner.
The feature map comes from the spec (``features``), never from the data.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import polars as pl

from privaudit.data.prepare import PreparedLogs, collect_or_raise, prepare_logs
from privaudit.core.errors import SpecError, UsageError
from privaudit.core import registry
from privaudit.learners.linear.data import LinearData
from privaudit.core.atomic import atomic_write_text
from privaudit.core.outputs import check_sidecar_free, new_run_id
from privaudit.learners.linear.privacy import guarantee, privacy_event
from privaudit.learners.linear.providers import FiniteFeatures, RowFeatures, q_rows
from privaudit.learners.linear.rows import clip_features, column_dims, row_steps
from privaudit.learners.tabular.pessimism import reward_frame
from privaudit.learners.options import BudgetRequest, RunContext
from privaudit.learners.policy import Policy, greedy_table
from privaudit.learners.policy_manifest import PolicyPrivacy
from privaudit.mdp.spec_features import feature_map_from_spec, read_state_table
from privaudit.privacy import ledger as ledger_mod
from privaudit.privacy.budget import Budget
from privaudit.privacy.noise import GAUSSIAN
from privaudit.privacy.events import PrivacyUnit
from privaudit.core.spec import DomainSpec

#: ``parameters["table"]`` of a column-x-action policy whose (H, S, A) table is a uniform
#: placeholder (no public state features): it must not be scored as the policy's value.
PLACEHOLDER_TABLE = "placeholder"
#: Parameters handled here rather than by the learner.
_RUN_PARAMS = ("split",)


def _rows(prepared: PreparedLogs, features: bool = False) -> pl.DataFrame:
    """Bounded rows (episode_id, step, state, action, reward in [0, 1], next_state[, features]) of prepared logs."""
    lf = prepared.bounded
    cols = ["episode_id", "step", "state", "action", "reward", "next_state"] + (["features"] if features else [])
    if features and "features" not in lf.collect_schema().names():
        raise UsageError(f"{prepared.path}: spec $.features.map is column-x-action but the logs have no `features` "
                         "column (map it in the spec's \"columns\").")
    lf = lf.select(cols)
    if features:
        f = pl.col("features")
        lf = lf.with_columns(f.arr.to_list() if isinstance(lf.collect_schema()["features"], pl.Array) else f)
    return collect_or_raise(lf, prepared.path)


def local_log_path(out) -> Path:
    """``<POLICY>.local-log.json``: beside the policy folder, never inside it."""
    out = Path(out)
    return out.with_name(out.name + ".local-log.json")


def write_local_log(path, report, logs, spec: DomainSpec, policy_out=None, features_clipped: dict | None = None) -> Path:
    """Write the PRIVATE bounding facts of a training run (same layout as a release's local log).

    ``features_clipped`` (per-row features only): ``{"count", "of", "share"}`` of the rows whose
    feature vector had norm > 1 and was clipped (:func:`features_clipped`).
    """

    path = Path(path)
    atomic_write_text(path, json.dumps({
        "WARNING": "PRIVATE: facts about the private logs. Not part of the policy; do not share.",
        "policy": None if policy_out is None else str(policy_out),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "spec_hash": spec.hash(), "logs": str(logs), "bounding": report.to_dict(),
        **({} if features_clipped is None else {"features_clipped": features_clipped}),
    }, indent=2) + "\n")
    return path


def features_clipped(df: pl.DataFrame) -> dict:
    """Rows of ``df`` whose ``features`` vector has Euclidean norm > 1 (clipped by ``rows.clip_features``). PRIVATE.

    Returns ``{"count", "of", "share"}``: the clipped rows, the rows, their ratio (0 without rows).
    """
    n = int((df["features"].list.eval(pl.element().cast(pl.Float64) ** 2).list.sum() > 1.0).sum())
    return {"count": n, "of": df.height, "share": n / df.height if df.height else 0.0}


def data_from_frame(df: pl.DataFrame, spec: DomainSpec, episode_mask: np.ndarray | None = None) -> LinearData:
    """Aggregate bounded rows into ``LinearData`` over the spec's (H, S, A).

    Parameters
    ----------
    df : polars.DataFrame
        Bounded rows with columns episode_id, step, state, action, reward
        (in [0, 1]), next_state.
    spec : DomainSpec
        Terminal states make V_{h+1}(s') = 0.
    episode_mask : ndarray of bool, shape (n_rows,), optional
        Keep only these rows (a half of the episodes for the D / D' split).
    """
    if episode_mask is not None:
        df = df.filter(pl.Series(episode_mask))
    s_next = df["next_state"].to_numpy()
    end = np.isin(s_next, np.asarray(spec.terminal_states, dtype=np.int64))
    K = df["episode_id"].n_unique()
    frame = reward_frame(spec.reward_range)  # plan for the declared reward (terminal states earn 0 in it)
    return LinearData.from_rows(df["step"].to_numpy(), df["state"].to_numpy(), df["action"].to_numpy(),
                                frame.scale * df["reward"].to_numpy() + frame.shift, s_next, end, H=spec.horizon,
                                S=spec.n_states, A=spec.n_actions, n_episodes=K, terminal_value=frame.terminal)


def plan_dp_vapvi(spec: DomainSpec, budget: Budget, params: dict | None = None):
    """DP-VAPVI's privacy event on logs of ``spec``, from public facts only (before any row is read).

    The event :func:`train_from_logs` records in the policy and charges: the
    5H statistics' noise scales (``DPVAPVI.noise_scales``) at the budget's
    rho, for the spec's H, feature dimension d (the feature map's, or m x A
    for per-row features) and privacy unit (column, k). Nothing of the logs.

    Parameters
    ----------
    spec : DomainSpec
        Must declare a feature map.
    budget : Budget
        DP-VAPVI's Gaussian budget.
    params : dict, optional
        DP-VAPVI parameters (as for :func:`train_from_logs`).

    Returns
    -------
    PrivacyEvent
        ``learners.linear.privacy.privacy_event`` of the noise scales.

    Raises
    ------
    UsageError, SpecError
        Bad parameters or feature map.
    """
    params = dict(params or {})
    if "failure_prob" in params:
        params["delta_fail"] = params.pop("failure_prob")
    params.pop("split", None)
    params["k"] = spec.max_episodes_per_unit
    return _plan("dp-vapvi", spec, budget, params)[1]


def _plan(algo: str, spec: DomainSpec, budget: Budget | None, params: dict):
    """(learner, event or None, m or None, feature map or None): the learner and its event from public facts."""
    row_features = bool(spec.features) and spec.features.get("map") == "column-x-action"
    m = fmap = None
    if row_features:
        m = column_dims(spec)  # before reading any row: a spec error costs nothing
    else:
        fmap = feature_map_from_spec(spec)
    cls = registry.get(algo).load()
    try:
        learner = cls(budget.rho, **params) if budget else cls(**params)
    except TypeError as e:
        raise UsageError(f"bad parameters for {algo}: {e}") from None
    event = None
    if cls.private:  # the run's event, from public facts: before any row is read or noise drawn
        d = m * spec.n_actions if row_features else fmap.dim
        k = int(spec.max_episodes_per_unit)
        event = privacy_event(learner.noise_scales(spec.horizon, d), PrivacyUnit(spec.unit_column or "episode_id", k))
    return learner, event, m, fmap


def train_from_logs(logs, spec: DomainSpec, algo: str, *, budget: BudgetRequest | Budget | None = None,
                    seed: int | None = None, params: dict | None = None, local_log=None,
                    context: RunContext | None = None) -> Policy:
    """Train PEVI, VAPVI or DP-VAPVI on Parquet logs with the spec's feature map.

    Parameters
    ----------
    logs : str, Path or PreparedLogs
        Parquet file or folder of the standard trajectory table (prepared
        here once the budget and ledger have passed:
        ``privaudit.data.prepare.prepare_logs``), or logs already prepared
        under ``spec``.
    spec : DomainSpec
        Must have a ``features`` object (one-hot, synthetic-linear, state-table-x-action).
    algo : {"pevi", "vapvi", "dp-vapvi"}
    budget : BudgetRequest or Budget, optional
        dp-vapvi: its whole budget, as given (``rho``, or an (epsilon,
        delta)-DP target converted by ``accounting.dp_to_zcdp``, CKS, tight;
        always Gaussian) or an already resolved Gaussian budget (the
        pipeline's part). None for pevi and vapvi.
    seed : int, optional
        TESTS ONLY: seeds the noise (recorded as rng "seeded-insecure", the
        seed itself is never written). Also seeds the D/D' split.
    params : dict, optional
        Learner parameters (e.g. ``C``, ``lam``, ``d_scale``, ``kappa``,
        ``beta``); ``failure_prob`` maps to ``delta_fail``; ``split`` (bool,
        default False as in the paper's simulations) splits the episodes
        at random into D (regression) and D' (variance).
    local_log : path, optional
        Where the PRIVATE bounding facts are written (refused before any row
        is read if it exists).
    context : RunContext, optional
        ``ledger`` (dp-vapvi only: ``privaudit budget init``): the run's event
        (``learners.linear.privacy.privacy_event``) is checked with
        ``privacy.ledger.check_event`` before any row is read or noise drawn
        and charged with ``charge_event`` (which re-checks atomically) once
        the policy is fitted, before this function returns it: the caller
        then writes it; a refusal raises before anything is charged or
        returned. ``run`` and ``output`` are named in the ledger entry (the
        run's identifier, default a new random one, and the folder it
        writes); ``echo`` gets the bounding summary.

    Returns
    -------
    Policy
        Greedy table (H, S, A), extras ``w``, ``Lambda_inv``, ``penalty_offset``;
        dp-vapvi carries its guarantee in ``privacy``.

    Raises
    ------
    UsageError
        Unknown algo or parameter, a budget for a non-private learner or none
        for dp-vapvi, an existing ``local_log`` (before any row is read). With k = max_episodes_per_unit > 1, dp-vapvi multiplies
        every sensitivity (and noise scale) by k.
    SpecError
        The spec has no usable ``features``.
    LogReadError, ValidationFailed
        From reading or validating the logs (``RepairsRefused``: bounding
        changes more than ``context.repairs`` allows, before any noise).
    BudgetExceededError
        The ledger's remaining budget is below rho (exit code 3).
    """
    if local_log is not None:  # else the budget is charged and then writing the log fails
        check_sidecar_free(local_log, "the policy's private bounding log", "policy")
    linear = registry.names(family="linear")
    if algo not in linear:
        raise UsageError(f"unknown linear algorithm {algo!r}; choose one of {', '.join(linear)}.")
    params = dict(params or {})
    private = registry.get(algo).load().private
    if "failure_prob" in params:
        if not private:
            raise UsageError(f"`failure_prob` applies to dp-vapvi (its delta_fail) only; {algo} does not take it.")
        params["delta_fail"] = params.pop("failure_prob")
    split = bool(params.pop("split", False))
    ctx = context or RunContext()
    if not private and budget is not None and (isinstance(budget, Budget) or budget.given):
        raise UsageError(f"`algo` {algo} is not private: it takes no budget (`rho`/`epsilon`/`delta`).")
    if isinstance(budget, Budget) and budget.family.pure:
        raise UsageError("`budget` must be a resolved Gaussian Budget (or a BudgetRequest).")
    if private:
        if not isinstance(budget, Budget):  # as given: always Gaussian (zCDP)
            budget = (budget or BudgetRequest()).resolve(families=(GAUSSIAN.name,))  # zCDP only
        params["k"] = spec.max_episodes_per_unit
    elif ctx.ledger is not None:
        raise UsageError(f"`algo` {algo} is not private: it spends no budget, so `ledger` does not apply.")
    else:
        budget = None  # an empty request (the CLI's, without --rho/--epsilon/--delta)
    row_features = bool(spec.features) and spec.features.get("map") == "column-x-action"
    learner, event, m, fmap = _plan(algo, spec, budget, params)
    if ctx.ledger is not None:
        ledger_mod.check_event(Path(ctx.ledger), spec.dataset_id, event, budget)
    prepared = logs if isinstance(logs, PreparedLogs) else prepare_logs(logs, spec, repairs=ctx.repairs)
    prepared.check_spec(spec)
    logs, report = prepared.path, prepared.bounding
    df = _rows(prepared, features=row_features)
    ctx.say(report.summary())
    clipped = features_clipped(df) if row_features else None
    if clipped is not None:  # another clipped field: said with its share, as bounding's repairs
        ctx.say(f"  feature vectors clipped to norm 1 (column-x-action): {clipped['count']} of {clipped['of']} rows "
                f"({clipped['share']:.2%})")
    rng = np.random.default_rng(seed)
    split_rng, noise_rng = rng.spawn(2)
    data_var = None
    if row_features:
        if split:
            raise UsageError("split is not supported with per-row features (column-x-action).")
        if getattr(learner, "d_scale", 0):
            raise UsageError("d_scale > 0 is not supported with per-row features; use d_scale = 0.")
        data = RowFeatures(row_steps(df, spec, m), spec.n_actions)
    elif split:
        eps_ids = df["episode_id"].unique().sort()
        in_d = pl.Series(split_rng.random(len(eps_ids)) < 0.5)
        chosen = eps_ids.filter(in_d)
        mask = df["episode_id"].is_in(chosen.implode()).to_numpy()
        data, data_var = (FiniteFeatures(data_from_frame(df, spec, x), fmap, learner.chunk_bytes) for x in (mask, ~mask))
    else:
        data = FiniteFeatures(data_from_frame(df, spec), fmap, learner.chunk_bytes)
    learner.fit(data, rng=noise_rng, data_var=data_var)
    if private:
        privacy = PolicyPrivacy(
            seed is None, guarantee(event, budget, spec, "seeded-insecure" if seed is not None else "secure"),
            note=None if seed is None else
            "seeded noise (rng seeded-insecure): not private against anyone who knows the seed")
    else:
        privacy = PolicyPrivacy.none(f"{algo} reads the exact logs: not differentially private")
    if row_features:
        policy = _row_policy(learner, spec, m, algo, privacy)
    else:
        policy = learner.to_policy(privacy=privacy, spec_hash=spec.hash())
        policy.parameters["split"] = split
    if ctx.ledger is not None:  # atomic re-check + append; refusal raises before the policy is returned
        ledger_mod.charge_event(Path(ctx.ledger), spec.dataset_id, event,
                                f"train {algo}: gaussian, rho={budget.rho!r} (5H releases)", budget,
                                run=ctx.run or new_run_id(), output=ctx.output)
    if local_log is not None:
        write_local_log(local_log, report, logs, spec, features_clipped=clipped)
    return policy


def _row_policy(learner, spec: DomainSpec, m: int, algo: str, privacy: PolicyPrivacy) -> Policy:
    """The policy artifact of a learner fitted on per-row features (column-x-action).

    The greedy table over the spec's S states needs public features of every
    state: with ``features.state_table`` (public (S, m)) it is computed from
    them; without, the table is uniform and marked as a placeholder (features
    seen in the logs are private, so they cannot fill it): act with the
    extras ``w`` and ``Lambda_inv`` on each patient's features.
    """
    H, S, A = spec.horizon, spec.n_states, spec.n_actions
    f = spec.features
    if "state_table" in f:
        base = spec.source.parent if spec.source is not None else None
        Xs = read_state_table(f["state_table"], base)
        if Xs.shape != (S, m):
            raise SpecError(f"spec $.features.state_table must have shape (S={S}, m={m}). Found {Xs.shape}.")
        Xs = clip_features(Xs)
        Q = np.stack([q_rows(Xs, learner.w_[h], learner.Lambda_inv_[h], A, learner.penalty_scale_,
                             learner.offset_[h], float(H - h)) for h in range(H)])
        table, table_kind = greedy_table(Q), "state_table"
        table_note = "greedy over the public state_table"
    else:
        table = np.full((H, S, A), 1.0 / A)
        # a machine-readable marker: `privaudit evaluate` and the pipeline refuse to score this table
        table_kind = PLACEHOLDER_TABLE
        table_note = ("uniform placeholder: no public state features; the policy acts through w_h and "
                      "phi(features, a) of each patient (extras w, Lambda_inv)")
    features = {"map": "column-x-action", "dim": m * A, "norm": "clip", "scale": 1.0, "state_dim": m,
                "next_state_features": "next row of the episode at h+1; V = 0 when absent (pessimistic)"}
    params = {**learner.get_params(), "features": features, "table": table_kind, "table_note": table_note,
              "split": False}
    return Policy(table=table, algorithm=algo, parameters=params, privacy=privacy, spec_hash=spec.hash(),
                  extras={"w": learner.w_, "Lambda_inv": learner.Lambda_inv_, "penalty_offset": learner.offset_})
