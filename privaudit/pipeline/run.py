"""``run_pipeline``: validate -> release -> train -> evaluate -> audit -> report, in one call.

This module plans the run (every check before any row is read), validates the logs and runs the
stages of :mod:`privaudit.pipeline.stages` in a temporary folder; the choices are one
:class:`~privaudit.pipeline.config.PipelineConfig`.

What a hospital analyst runs on day one (``privaudit pipeline``). Every
artifact is built in a temporary folder next to ``out`` and renamed to
``out`` when all stages succeeded, so a failure before any charge (invalid
logs, a bad spec, an interrupted run) leaves ``out`` absent or unchanged; a
stop after a charge keeps the charged outputs as ``out``, marked incomplete,
and the same run again finishes them without charging again
(:mod:`privaudit.pipeline.resume`).

Layout of ``out`` (see docs/pipeline.md)::

    summary.json              guarantee, values, audit verdict (schemas/summary.schema.json)
    report.md                 the human report
    figures/values.png        values, certified values, the clinicians' DP estimate (and optimum)
    figures/audit_tradeoff.png
    release/                  the DP release (manifest.json + Parquet tables)
    policies/dp-pbb/          policy.json + policy.parquet (the default DP policy, with a certificate)
    policies/dp-apvi/         policy.json + policy.parquet (DP-APVI, Qiao & Wang 2023: the reference)
    policies/dp-vapvi/        (when the spec declares a feature map)
    audit/audit_report.json   the full audit report (synthetic pair from the spec: no private data)
    private/local-log.json    PRIVATE: bounding facts, stage timings

Privacy: the release and DP-PBB (when the spec declares a public reward: its
noisy counts and private Bellman backups, ``privaudit.learners.tabular.dp_pbb``) are
the accesses to the logs besides the
behaviour-value release (a small share of the budget: the DP estimate of the
clinicians' value and the start distribution of the certified values;
:mod:`privaudit.release.behaviour_value`) and, when the spec declares a feature
map, DP-VAPVI; the budget is split between them (see
:mod:`privaudit.pipeline.guarantee`). DP-APVI, the certified values, the
evaluation on a public MDP and the figures are post-processing. The audit reads nothing of the logs:
it runs the release's code path on a synthetic pair built from the spec (see
:mod:`privaudit.pipeline.audit_release` and docs/pipeline.md).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
from tqdm import tqdm

from privaudit.core.errors import (NOTHING_DONE, PARTS_KEPT, BudgetExceededError, EngineError, SpecError, Terminated,
                                   UsageError, interrupted_import)
from privaudit.core.atomic import atomic_dir, atomic_write_text
from privaudit.core.outputs import OutputKind, check_outputs, folder_output, new_run_id, output_lock
from privaudit.core.spec import DomainSpec, load_spec
from privaudit.data.engines import prepare_on
from privaudit.learners.linear.rows import column_dims
from privaudit.mdp.evaluation import resolve_mdp
from privaudit.mdp.registry import MDP_REGISTRY
from privaudit.mdp.spec_check import check_spec_matches_mdp
from privaudit.mdp.spec_features import feature_map_from_spec, read_state_table
from privaudit.pipeline.certify import CERTIFIED_POLICIES, certification_charge, held_out_note, split_held_out
from privaudit.pipeline.config import PipelineConfig, check_seed
from privaudit.pipeline import resume
from privaudit.pipeline.guarantee import (LINEAR_SHARE_DEFAULT, budget_shares, check_split, learner_shares,
                                          pbb_share_of, split_budget)
from privaudit.pipeline.plans import plan_parts
from privaudit.pipeline.report import SUMMARY_KIND
from privaudit.pipeline.stages import STAGES_AFTER_VALIDATION, RunPlan, RunState
from privaudit.privacy import budget as budget_mod
from privaudit.privacy import ledger as ledger_mod
from privaudit.privacy.noise import GAUSSIAN
from privaudit.release.tabular import default_stationary

#: Stages, in order (progress bar and timings).
STAGES = ("validate",) + tuple(name for name, _ in STAGES_AFTER_VALIDATION)


def _child_seeds(seed: int | None, n: int) -> list[int | None]:
    """n independent integer seeds from one (None -> None: OS entropy everywhere)."""
    if seed is None:
        return [None] * n
    check_seed(seed)
    return [int(s.generate_state(1, np.uint64)[0] >> np.uint64(1)) for s in np.random.SeedSequence(int(seed)).spawn(n)]


#: What ``overwrite`` may replace (``privaudit.core.outputs.check_outputs``): a complete pipeline output, or an
#: incomplete run kept after a charge (``privaudit.pipeline.resume``).
_COMPLETE = folder_output("", "summary.json", "kind", SUMMARY_KIND)
PIPELINE_OUTPUT = OutputKind(f"a previous pipeline output (a folder with a summary.json of kind {SUMMARY_KIND!r}, "
                             f"or an incomplete run's {resume.MARKER})",
                             lambda p: _COMPLETE.recognise(p) or resume.is_incomplete(p))


def _check_out(config: PipelineConfig, resuming: bool = False) -> None:
    """Refuse an ``out`` that exists (unless ``overwrite`` and it holds a previous pipeline output, or this run
    resumes the incomplete run it holds), that is or holds an input (the logs, the spec, the ledger, the MDP
    file), or that cannot be written."""
    logs, spec, mdp = config.inputs()
    ledger = config.ledger
    reads = [("LOGS", logs), ("spec", spec), ("mdp", mdp), ("ledger", ledger),
             ("ledger", None if ledger is None else f"{ledger}.head")]
    check_outputs([("out", config.out, PIPELINE_OUTPUT)], reads, config.overwrite or resuming)


def _resolve_mdp(mdp, spec: DomainSpec, instance_seed: int | None = None):
    """The public MDP named by ``mdp`` (None: none), checked to fit the spec (UsageError, SpecError)."""
    if mdp is None:
        if instance_seed is not None:
            raise UsageError("`instance_seed` names an instance of `mdp` NAME; it needs `mdp`.")
        return None
    m = resolve_mdp(mdp, spec.horizon if str(mdp) in MDP_REGISTRY else None, instance_seed=instance_seed,
                    spec=spec)
    if (m.horizon, m.n_states, m.n_actions) != (spec.H, spec.S, spec.A):
        raise UsageError(f"`mdp` {mdp} has (H, S, A) = ({m.horizon}, {m.n_states}, {m.n_actions}) but the spec "
                         f"declares ({spec.H}, {spec.S}, {spec.A}); pass the MDP the logs come from, or omit `mdp`.")
    check_spec_matches_mdp(spec, m, str(mdp))  # terminal states and public reward: SpecError (exit 2)
    return m


class _Progress:
    """One bar over the stages, on stderr, only when asked (default: stderr is a terminal)."""

    def __init__(self, show: bool):
        self.bar = None
        if show:
            self.bar = tqdm(total=len(STAGES), desc="pipeline", unit="stage", file=sys.stderr,
                            bar_format="{desc}{n_fmt}/{total_fmt} stages |{bar}| {elapsed}")

    def stage(self, name: str) -> None:
        if self.bar is not None:
            self.bar.set_description(f"pipeline [{name}]")

    def done(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_pipeline(logs: str | Path | None = None, spec: str | Path | DomainSpec | None = None, *,
                 echo: Callable[[str], None] | None = None, **options) -> dict:
    """Run validate -> release -> train -> evaluate -> audit -> report into the folder ``out``.

    ``run_pipeline(logs, spec, rho=1, out="run1", mdp="icu-sepsis")``: builds
    the :class:`~privaudit.pipeline.config.PipelineConfig` of ``logs``,
    ``spec`` and the keyword ``options`` (its fields: ``rho`` or ``epsilon``
    and ``delta``, ``out`` (required), ``mdp``, ``instance_seed``, ``seed``,
    ``stationary``, ``audit_trials``, ``linear_share``, ``value_share``,
    ``overwrite``, ``ledger``, ``progress``, ``engine``, ``spark``,
    ``hold_out``, ``hold_out_fraction``, ``dp_apvi_c2``, ``pbb_share``, ``max_repair_share``, ``accept_repairs``; documented
    there) and runs it with :func:`run_pipeline_config`.

    Parameters
    ----------
    logs : path, optional
        Parquet file or folder of parts. None: the bundled ICU-Sepsis sample
        with its spec and, unless ``mdp`` is given, ``mdp="icu-sepsis"``.
    spec : path or DomainSpec, optional
        The public domain spec; required with ``logs``.
    echo : callable, optional
        ``echo(text)`` for messages to the data holder (stderr in the CLI).
    **options
        The other fields of ``PipelineConfig``.

    Returns and raises as :func:`run_pipeline_config`; an unknown option or a
    missing ``out`` is a TypeError.
    """
    return run_pipeline_config(PipelineConfig(logs=logs, spec=spec, **options), echo=echo)


def run_pipeline_config(config: PipelineConfig, *, echo: Callable[[str], None] | None = None) -> dict:
    """Run one configured pipeline into the folder ``config.out``.

    Every artifact is built in a temporary folder next to ``out`` and renamed
    to ``out`` when all stages succeeded (layout: this module's docstring
    and docs/pipeline.md). A stop after a part was charged keeps the charged
    outputs as ``out``, marked incomplete; when ``out`` holds such a run of
    the same inputs, this run resumes it (:mod:`privaudit.pipeline.resume`).

    Parameters
    ----------
    config : PipelineConfig
        What to run (built by the CLI or :func:`run_pipeline`).
    echo : callable, optional
        ``echo(text)`` for messages to the data holder (stderr in the CLI).

    Returns
    -------
    dict
        The summary (as written to ``out/summary.json``), plus the key
        ``private_log`` (absolute path, not in the file).

    Raises
    ------
    UsageError
        Bad or conflicting arguments, ``out`` holds an incomplete run of other
        inputs (configuration, spec, logs or ledger), ``out`` exists or is being written by
        another run (refused at once: ``core.outputs.output_lock``; hidden
        temporary folders a killed run left next to ``out`` are removed and
        reported), an MDP that does not fit
        the spec (all before any row is read or noise drawn).
    SpecError
        Missing or invalid spec; with ``mdp``, terminal states or a public
        reward that are not the MDP's (``mdp.spec_check``, before any row is
        read).
    AccountingError
        A part's planned privacy event costing more than its share, or parts
        composing above the total (internal errors; before any row is read or
        any part charged: ``plans.plan_parts``).
    BudgetExceededError
        With ``ledger``: the planned parts exceed its remaining budget (before any row is read).
    LogReadError, ValidationFailed
        Unreadable logs, or logs breaking rules that bounding cannot repair
        (the message lists the located errors); nothing is written.
    RepairsRefused
        Contribution bounding would change more of the logs than
        ``max_repair_share`` allows and ``accept_repairs`` is False: nothing
        is spent, charged or written (a ValidationFailed, exit 1).
    EngineError
        With ``engine="spark"``: Spark itself failed (no JVM, a failed job,
        out of memory); nothing is written or charged.

    References
    ----------
    Qiao & Wang (2023), Algorithms 1 and 2 (DP-APVI, DP-VAPVI); docs/pipeline.md (the stages, the budget
    split and the release audit).
    """
    with output_lock(Path(config.out), "out") as stale:
        if stale and echo is not None:
            echo(f"removed {len(stale)} stale temporary folder(s) of an interrupted run: "
                 + ", ".join(str(p) for p in stale))
        return _run_locked(config, echo or (lambda s: None))


def plan_run(config: PipelineConfig) -> tuple[RunPlan, str | None]:
    """Everything decided before any row is read: spec, budget split, MDP, stationarity, every part's plan.

    Loads the spec, checks the config against it, resolves and splits the
    budget (every part checked to compose within the total), refuses an
    existing ``out`` (unless ``overwrite``) and a bad feature map, resolves
    the MDP, plans every part's noise and event and checks the ledger's
    remaining budget: a refusal leaves the ledger untouched and nothing written.

    Returns the plan (its ``skipped`` learners are said once the logs pass) and the default-stationarity note
    to tell then too (or None).

    Raises
    ------
    UsageError
        A choice the spec cannot serve (``PipelineConfig.check_against``), a bad
        budget or split, an existing ``out``, an MDP that does not fit the spec.
    SpecError
        An unreadable spec or feature map; with ``mdp``, terminal states or a public reward
        that are not the MDP's.
    AccountingError
        A part's planned event above its share, or parts composing above the total.
    BudgetExceededError
        With ``ledger``: the planned parts exceed its remaining budget.
    """
    logs, spec, mdp = config.inputs()
    spec = spec if isinstance(spec, DomainSpec) else load_spec(spec)
    config.check_against(spec)
    linear = bool(spec.features)
    linear_share = LINEAR_SHARE_DEFAULT if config.linear_share is None else config.linear_share
    value_share = config.value_share
    budget = budget_mod.resolve_budget(rho=config.rho, epsilon=config.epsilon, delta=config.delta,
                                       families=(GAUSSIAN.name,))  # once; zCDP only (the budget is split)
    learners = learner_shares(spec, engine=config.engine)  # other registry learners with a fixed share
    pbb_share = pbb_share_of(spec.public_reward is not None, linear=linear, linear_share=linear_share,
                             value_share=value_share, learners=learners)
    if config.pbb_share is not None and pbb_share > 0:  # the user's share instead of the rule's
        pbb_share = float(config.pbb_share)
    skipped = {}  # learners the run does not train, and why (said once the logs pass, and in the summary)
    if config.pbb_share is not None and float(config.pbb_share) == 0 and spec.public_reward is not None:
        skipped["dp-pbb"] = "pbb_share 0: its share goes to the release, and DP-APVI learns from it"
    elif spec.public_reward is None:
        skipped["dp-pbb"] = ("the spec declares no public reward ($.public_reward): DP-PBB backs up r(s') + V(s') "
                             "with a known r; its share goes to the release, and DP-APVI learns from it")
    shares = budget_shares(linear=linear, linear_share=linear_share, value_share=value_share, pbb_share=pbb_share,
                           learners=learners)
    parts = split_budget(budget, linear=linear, linear_share=linear_share, value_share=value_share,
                         pbb_share=pbb_share, learners=learners)
    # every part, before any row is read or a part is charged: a split that composes above the total
    # leaves the ledger untouched and nothing written (the composition is checked again on the events)
    check_split(budget, parts)
    seeds = _child_seeds(config.seed, 5)
    stopped = resume.read_checkpoint(Path(config.out))  # an incomplete run of this `out`, to resume
    _check_out(config, resuming=stopped is not None)
    if linear:  # a bad feature map costs nothing: checked before any row is read
        _check_feature_map(spec)
    the_mdp = _resolve_mdp(mdp, spec, config.instance_seed)
    stationary, said = config.stationary, None
    if stationary is None:  # the one default rule of every command, said when it applies (once the logs pass)
        stationary, said = default_stationary(the_mdp)
    # every part's noise plan and event from public inputs (plans.py), each checked against its share and
    # their composition against the total; then, once for all the parts' charges, the ledger's remaining
    # budget: all before any row is read, noise drawn or part charged
    parts_plan = plan_parts(spec, budget, parts, stationary=stationary)
    fingerprint = resume.fingerprint(config, spec, logs)
    if stopped is not None and config.overwrite and not _same_run(stopped, fingerprint, config.ledger):
        stopped = None  # `overwrite` discards an incomplete run of other inputs (what it cost stays spent)
    if stopped is not None:  # the same command again: reuse what it charged, or refuse (UsageError)
        resume.check_resumable(stopped, fingerprint, config.ledger)
    to_charge = {n: b for n, b in parts.items() if stopped is None or n not in stopped.charged}
    held = 0  # with hold_out, the held-out evaluations are planned (and refused) here, before anything is read
    if config.hold_out and (stopped is None or stopped.certification is None):
        try:
            held = certification_charge(spec, budget, CERTIFIED_POLICIES,
                                        done=() if stopped is None else tuple(stopped.certified))
        except UsageError as e:
            raise UsageError(f"`hold_out` (the held-out certification): {e}") from None
    if config.ledger is not None and (to_charge or held):  # the held-out evaluations' charges too (unless done)
        _check_ledger(config.ledger, spec.dataset_id, check_split(budget, to_charge) if to_charge else 0, held)
    return RunPlan(spec=spec, logs=logs, mdp=the_mdp, mdp_name=None if mdp is None else str(mdp),
                   stationary=stationary, budget=budget, parts=parts, shares=shares, parts_plan=parts_plan,
                   seeds=seeds, skipped=skipped, fingerprint=fingerprint, resume_from=stopped), said


def _check_ledger(ledger, dataset_id: str, parts_rho, held) -> None:
    """``ledger_mod.check_budget`` for the run's parts plus its held-out evaluations; a refusal says both.

    The held-out part composes in parallel with the rest (the guarantee is the larger part's), but the ledger
    charges both, conservatively (docs/pipeline.md, "Held-out certification"): without this the refusal of
    ``--rho 0.6 --hold-out`` named rho=1.2 and no reason.
    """
    try:
        ledger_mod.check_budget(ledger, dataset_id, parts_rho + held)
    except BudgetExceededError as e:
        if not held:
            raise
        raise BudgetExceededError(f"{e} {held_out_note(parts_rho, held)}") from None


def _same_run(stopped: resume.Checkpoint, fingerprint: dict, ledger) -> bool:
    """True when the incomplete run ``stopped`` can be resumed by this one (``resume.check_resumable`` passes)."""
    try:
        resume.check_resumable(stopped, fingerprint, ledger)
    except UsageError:
        return False
    return True


def _check_feature_map(spec: DomainSpec) -> None:
    """Refuse a spec's feature map that cannot be built (SpecError), before any row is read."""
    if spec.features.get("map") == "column-x-action":  # per-row features: the path of `train`
        m_dim = column_dims(spec)
        if "state_table" in spec.features:
            X = read_state_table(spec.features["state_table"], spec.source.parent if spec.source is not None else None)
            if X.shape != (spec.n_states, m_dim):
                raise SpecError(f"spec $.features.state_table must have shape (S={spec.n_states}, "
                                f"m={m_dim}). Found {X.shape}.")
    else:
        feature_map_from_spec(spec)


def validate(config: PipelineConfig, plan: RunPlan, say: Callable[[str], None]):
    """The validate stage: the logs validated and bounded once, before any folder exists.

    By ``config.engine`` (``data.engines.prepare_on``): polars, or Spark (its
    fatal rules and bounding on the cluster, the bounded rows cached there for
    every later reader: the release, DP-PBB). Says what bounding changed
    (private counts and shares, for the data holder) and stops when it changed
    more than ``config.max_repair_share`` allows (``data.repairs.check_repairs``),
    before anything is spent or written.

    Raises
    ------
    LogReadError, ValidationFailed
        Unreadable logs, or rules that bounding cannot repair.
    RepairsRefused
        Bounding changes too much of the logs (and ``accept_repairs`` is False).
    EngineError
        Spark failed (nothing written or charged).
    """
    prepared = prepare_on(config.engine, plan.logs, plan.spec, spark=config.spark, repairs=config.repair_limit)
    say(prepared.bounding.summary())
    return prepared


def _run_locked(config: PipelineConfig, say: Callable[[str], None]) -> dict:
    """The body of :func:`run_pipeline_config`, under the output lock.

    A stop after a part was charged (any exception, Ctrl-C, SIGTERM) keeps the
    charged outputs as ``out``, marked incomplete (:mod:`privaudit.pipeline.resume`), says so, and re-raises
    (an interruption with that line as its message).
    """
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    plan, said = plan_run(config)
    out = Path(config.out)
    stopped = plan.resume_from
    if stopped is not None:
        say(f"resuming the incomplete run in {out} (run {stopped.run_id}): reusing what it charged "
            f"({', '.join(resume.paid_parts(stopped.charged, stopped.certified))}); nothing is charged again for it.")
        if stopped.stopped_in == "certify":  # its evaluations are charged one by one, each checkpointed when done
            say("it stopped inside its held-out certification: the evaluations it finished are reused "
                f"({', '.join(stopped.certified) or 'none'}); the others run and are charged now.")
    bar = _Progress(sys.stderr.isatty() if config.progress is None else bool(config.progress))
    kept = prepared = None
    try:
        bar.stage("validate")
        t = time.perf_counter()
        prepared = validate(config, plan, say)
        timings["validate"] = time.perf_counter() - t
        bar.done()
        if said is not None:  # after the inputs are validated: not in front of an unrelated error
            say(said)
        for name, why in plan.skipped.items():
            say(f"{name} is not trained: {why}.")
        with atomic_dir(out, overwrite=True) as tmp:
            held_out = None
            if config.hold_out:  # every stage but `certify` sees the training part only
                prepared, held_out = split_held_out(prepared, config.hold_out_fraction)
            state = RunState(plan=plan, prepared=prepared, tmp=tmp, out=out, say=say,
                             run_id=new_run_id() if stopped is None else stopped.run_id, held_out=held_out,
                             stage_names=tuple(name for name, _ in STAGES_AFTER_VALIDATION))
            if stopped is not None:
                resume.adopt(stopped, tmp)
            name = None
            try:
                for name, stage in STAGES_AFTER_VALIDATION:
                    bar.stage(name)
                    t = time.perf_counter()
                    stage(config, state)
                    timings[name] = time.perf_counter() - t
                    state.stages_done.append(name)
                    bar.done()
            except BaseException as e:
                if not state.events:  # nothing charged: the temporary folder goes, as for any failure
                    raise
                kept = (e, resume.save(state, name, e))  # what was paid for becomes `out`, marked incomplete
            else:
                resume.clear(tmp)
                timings["total"] = time.perf_counter() - t0
                private = {**state.private, "timings_s": timings}
                atomic_write_text(tmp / "private" / "local-log.json", json.dumps(private, indent=2) + "\n")
    finally:
        bar.close()
        if prepared is not None:
            prepared.close()  # Spark: the bounded rows cached on the cluster are dropped
    if kept is not None:
        error, line = kept
        if interrupted_import(error):  # Ctrl-C inside a compiled module's import: the interrupt it is
            raise KeyboardInterrupt(line) from error
        if isinstance(error, (KeyboardInterrupt, Terminated)):
            raise type(error)(line) from error
        say(line)
        if isinstance(error, EngineError):  # its "nothing charged" no longer holds: the parts above were
            raise EngineError(str(error).replace(NOTHING_DONE, PARTS_KEPT)) from None
        raise error
    summary = dict(state.summary)
    summary["private_log"] = str((out / "private" / "local-log.json").resolve())
    return summary
