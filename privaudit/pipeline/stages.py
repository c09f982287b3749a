"""The pipeline's stages after validation: release -> train -> evaluate -> audit -> report.

Each stage is one function ``stage(config, state)``: it reads the run's
:class:`~privaudit.pipeline.config.PipelineConfig` and the :class:`RunState`
(what planning and the earlier stages produced) and adds its own products to
the state. Everything is written inside the temporary folder ``state.tmp``
(:func:`privaudit.pipeline.run.run_pipeline_config` renames it to ``out``
once every stage succeeded).

Privacy: the release stage holds the accesses to the logs (the count release
and the behaviour-value release); the train stage holds DP-PBB and DP-VAPVI.
Each part's mechanism returns its privacy event, which must equal the planned
one (``PartsPlan.charged``); the ledger (checked once during planning) is
charged once per part from that event; the composed guarantee is the
accountant's composition of the events. The rest (DP-APVI on the release,
evaluation on a public MDP, the certified values, the figures) is
post-processing; the audit reads nothing of the logs (a synthetic pair built
from the spec: :mod:`privaudit.pipeline.audit_release`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from privaudit.core import registry
from privaudit.core.atomic import atomic_write_text
from privaudit.core.spec import DomainSpec
from privaudit.learners.linear import train_from_logs as train_linear
from privaudit.learners.linear.logs import PLACEHOLDER_TABLE
from privaudit.learners.options import RunContext
from privaudit.learners.policy import load_policy, save_policy
from privaudit.pipeline import figures
from privaudit.pipeline import render
from privaudit.pipeline.certify import certify_stage
from privaudit.pipeline import report as rep
from privaudit.pipeline import values as val
from privaudit.pipeline.audit_release import audit_release
from privaudit.pipeline.config import PipelineConfig
from privaudit.pipeline.guarantee import VALUE_PART, composed_guarantee
from privaudit.pipeline.plans import PartsPlan
from privaudit.pipeline.resume import Checkpoint
from privaudit.privacy import ledger as ledger_mod
from privaudit.privacy.budget import Budget
from privaudit.privacy.events import event_from_dict
from privaudit.release.behaviour_value import estimate_behaviour_value, return_range
from privaudit.release.tabular import ReleaseOptions, load_release, release_logs


@dataclass(frozen=True)
class RunPlan:
    """What planning decided from the config and public inputs, before any row is read.

    Attributes
    ----------
    spec : DomainSpec
    logs : Path, str or Spark DataFrame
        The logs to read (the bundled sample's path when the config has none).
    mdp : TabularMDP or None
        The public MDP the policies are evaluated on; ``mdp_name`` is how the user named it.
    stationary : bool
        Counts pooled over h (True) or one table per step (the config's choice, or its default).
    budget : Budget
        The whole budget, resolved once.
    parts : dict[str, Budget]
        Its split (``guarantee.split_budget``); ``shares`` the configured shares.
    parts_plan : PartsPlan
        Every part's planned noise and event (``plans.plan_parts``), checked against its share.
    seeds : list of int or None
        Child seeds: release, DP-VAPVI, audit, behaviour value, DP-PBB (None: OS entropy).
    skipped : dict[str, str]
        Learners the run does not train, and why (public reasons: the spec, the engine).
    fingerprint : dict
        The run's inputs, hashed (``resume.fingerprint``): kept if the run stops after a charge.
    resume_from : resume.Checkpoint or None
        A stopped run of the same inputs in ``out`` whose charged parts this run reuses (not charged again).
    """

    spec: DomainSpec
    logs: Any
    mdp: Any
    mdp_name: str | None
    stationary: bool
    budget: Budget
    parts: dict
    shares: dict
    parts_plan: PartsPlan
    seeds: list
    skipped: dict = field(default_factory=dict)
    fingerprint: dict = field(default_factory=dict)
    resume_from: Checkpoint | None = None


@dataclass
class RunState:
    """What the stages produced so far (each stage fills its own fields).

    ``prepared`` is the validated and bounded logs: ``privaudit.data.prepare.PreparedLogs``, or with
    ``engine="spark"`` ``privaudit.data.spark.prepare.SparkPreparedLogs`` (the bounded rows cached on the
    cluster; the release and DP-PBB aggregate them there).
    ``paid`` holds, per charged tabular learner, its ``V0`` and ``Q`` (what a resumed run needs besides
    the saved policy); ``stages_done`` the stages completed, in order.
    """

    plan: RunPlan
    prepared: Any
    tmp: Path
    out: Path
    run_id: str
    say: Callable[[str], None]
    events: dict = field(default_factory=dict)
    manifest: Any = None
    local: dict = field(default_factory=dict)
    value_stats: Any = None
    policies: dict = field(default_factory=dict)
    start_values: dict = field(default_factory=dict)
    diagnostics: dict = field(default_factory=dict)
    d0: np.ndarray | None = None
    d0_source: str | None = None
    guarantee: dict | None = None
    evaluation: dict | None = None
    audit: dict | None = None
    summary: dict | None = None
    private: dict | None = None
    held_out: Any = None
    certification: dict | None = None
    certified: dict = field(default_factory=dict)  # held-out evaluations finished (charged) so far, by policy
    paid: dict = field(default_factory=dict)
    stages_done: list = field(default_factory=list)
    stage_names: tuple = ()

    def reused(self, part: str) -> bool:
        """True when ``part`` was charged by the stopped run this one resumes: read back, not charged again."""
        cp = self.plan.resume_from
        if cp is None or part not in cp.charged:
            return False
        self.events[part] = self.plan.parts_plan.events[part]  # a charged event equals its plan (PartsPlan.charged)
        return True


def _charge(config: PipelineConfig, state: RunState, name: str, event, note: str = "") -> None:
    """Keep part ``name``'s event (checked against its plan) and charge the ledger with it, if any."""
    plan = state.plan
    event = plan.parts_plan.charged(name, event)
    if config.ledger is not None:
        ledger_mod.charge_event(config.ledger, plan.spec.dataset_id, event,
                                f"pipeline, {name} part: gaussian, rho={plan.parts[name].shown!r}"
                                + (f" ({note})" if note else ""), plan.parts[name], run=state.run_id,
                                output=state.out)
    state.events[name] = event  # charged: what a stopped run keeps (pipeline.resume)


def release(config: PipelineConfig, state: RunState) -> None:
    """The count release into ``tmp/release`` and, unless its share is 0, the behaviour-value release.

    Fills ``manifest``, ``local`` (the release's private bounding facts, folded
    into ``private/local-log.json``), ``value_stats`` and their ``events``.
    """
    plan = state.plan
    if state.reused("release"):
        state.manifest = load_release(state.tmp / "release").manifest
        state.local = plan.resume_from.local
    else:
        info = release_logs(state.prepared, plan.spec, stationary=plan.stationary, out=state.tmp / "release",
                            seed=plan.seeds[0], options=ReleaseOptions(
                                budget=plan.parts["release"], noise="exact", engine=config.engine,
                                spark=config.spark))  # prepared (and the repairs checked) by the validate stage
        state.local = json.loads(info.local_log.read_text())
        info.local_log.unlink()  # folded into private/local-log.json
        state.manifest = info.manifest
        _charge(config, state, "release", info.event)
    value_plan = plan.parts_plan.value
    if value_plan is None:
        return
    if state.reused(VALUE_PART):
        state.value_stats = plan.resume_from.value_stats
    else:  # the behaviour-value part: a second access to the bounded logs
        bounding = getattr(state.prepared, "bounding", None)  # rows kept: the parts of the polars pass (issue 33)
        state.value_stats = value_plan.apply(bounded_logs(config, state), rng=np.random.default_rng(plan.seeds[3]),
                                             rows=getattr(bounding, "rows_kept", None))
        _charge(config, state, VALUE_PART, value_plan.event)


def bounded_logs(config: PipelineConfig, state: RunState):
    """The bounded logs of the run, either engine: the prepared logs' ``bounded`` (a polars LazyFrame, or a Spark
    DataFrame cached on the cluster by ``privaudit.data.spark.prepare``)."""
    return state.prepared.bounded


def _learner_seed(seeds: list, slot: int, index: int) -> int | None:
    """The seed of the ``index``-th learner part of a family: the family's child seed, then seeds derived from it."""
    if seeds[slot] is None or index == 0:
        return seeds[slot]
    return int(np.random.SeedSequence([seeds[slot], index]).generate_state(1, np.uint64)[0] >> np.uint64(1))


def train(config: PipelineConfig, state: RunState) -> None:
    """The registry's pipeline learners: on the logs with their shares, then on the release (post-processing).

    In this order: the tabular learners reading the logs with their own part of the budget (DP-PBB, its own
    access), the learners on the count release (DP-APVI: Qiao & Wang (2023), Algorithm 1 with the paper's
    constants, post-processing), the linear learners with their own part (DP-VAPVI: their Algorithm 2, 5H
    noisy statistics at rho/(5H) each). Which learners run is asked of the registry (``pipeline_share``,
    ``core.registry.pipeline_names``) and of the split (a learner reading the logs runs when it has a part).
    Saves every policy under ``tmp/policies/<name>``; fills ``policies``, ``start_values``, ``diagnostics``,
    the start distribution ``d0`` of the certified values and the composed ``guarantee``.
    """
    plan, say, tmp = state.plan, state.say, state.tmp
    spec, parts, seeds = plan.spec, plan.parts, plan.seeds
    policies, events = state.policies, state.events
    release = load_release(tmp / "release")
    # the start distribution of the certified values: released or public, never read off the logs
    d0, d0_source = val.start_distribution(value_stats=state.value_stats, release=release, mdp=plan.mdp,
                                           terminal_states=spec.terminal_states)
    state.d0, state.d0_source = d0, d0_source
    entries = [registry.get(n) for n in registry.pipeline_names()]
    on_logs = {f: [e for e in entries if e.family == f and e.name in parts] for f in registry.OFFLINE}
    # tabular learners; each pessimistic one exposes its value at step 0 in declared units
    # (declared_values), which the certified values and diagnostics use
    learned = {}  # name -> (policy, V_0 or None, the Q that chose the actions)
    for i, entry in enumerate(on_logs["tabular"]):  # their own access to the logs (DP-PBB: the default DP policy)
        if state.reused(entry.name):  # charged by the stopped run this one resumes
            learned[entry.name] = _reload(state, entry.name)
            continue
        cls = entry.load()
        run = cls.train_on_logs(state.prepared, spec, stationary=plan.stationary, budget=parts[entry.name],
                                seed=_learner_seed(seeds, 4, i), context=RunContext(echo=say))
        learned[entry.name] = _learned(run.learner)
        policies[entry.name] = run.learner.policy_
        state.paid[entry.name] = {"V0": learned[entry.name][1], "Q": learned[entry.name][2]}
        _charge(config, state, entry.name, run.learner.event_, getattr(cls, "ledger_note", ""))
    for entry in entries:  # post-processing of the release (DP-APVI, the paper's reference)
        if entry.family == "tabular" and entry.load().reads == "release":
            c2 = config.dp_apvi_c2 if entry.name == "dp-apvi" else None
            params = {} if c2 is None else {"C2": float(c2)}
            learned[entry.name] = _learned(entry.load()(**params).fit(release, release_path="../../release"))
    start_values, diagnostics = state.start_values, state.diagnostics
    for name, (policy, v0, q_choice) in learned.items():
        policies[name] = policy
        start_values[name] = v0
        if v0 is not None:
            diagnostics[name] = rep.learner_diagnostics(q_choice, v0, policy.table, plan.mdp, spec.terminal_states,
                                                        d0=d0)
    for i, entry in enumerate(on_logs["linear"]):  # their own access to the logs (DP-VAPVI)
        start_values[entry.name] = None  # the linear learners' pessimistic values are not kept
        if state.reused(entry.name):
            policies[entry.name] = load_policy(tmp / "policies" / entry.name)
            continue
        pol = train_linear(state.prepared, spec, entry.name, budget=parts[entry.name], seed=_learner_seed(seeds, 1, i))
        policies[entry.name] = pol
        _charge(config, state, entry.name, event_from_dict(pol.privacy.event),
                getattr(entry.load(), "ledger_note", ""))
    for name, pol in policies.items():
        if not (tmp / "policies" / name).exists():  # a reused policy is already there
            save_policy(pol, tmp / "policies" / name)
    state.guarantee = composed_guarantee(plan.budget, parts, events, spec, shares=plan.shares,
                                         manifest=state.manifest)


def _learned(learner) -> tuple:
    """(policy, V_0 at step 0 in declared units or None, the Q that chose the actions) of a fitted tabular learner."""
    v0 = learner.declared_values()[0] if hasattr(learner, "declared_values") else None
    return learner.policy_, v0, getattr(learner, "Q_select_", learner.Q_)


def _reload(state: RunState, name: str) -> tuple:
    """A charged tabular learner of the stopped run: its saved policy and checkpointed V_0 and Q."""
    arrays = state.plan.resume_from.arrays
    state.paid[name] = {"V0": arrays.get(f"{name}.V0"), "Q": arrays[f"{name}.Q"]}
    return load_policy(state.tmp / "policies" / name), state.paid[name]["V0"], state.paid[name]["Q"]


def evaluate(config: PipelineConfig, state: RunState) -> None:
    """Exact values of the policies on the public MDP, if one is known (fills ``evaluation``).

    A policy whose table is a placeholder (DP-VAPVI on column-x-action without
    a public state_table) is not evaluated; the data holder is told so.
    """
    the_mdp, policies = state.plan.mdp, state.policies
    placeholders = [n for n, p in policies.items()
                    if str(p.parameters.get("table", "")).startswith(PLACEHOLDER_TABLE)]
    state.evaluation = None if the_mdp is None else rep.evaluate_all(
        the_mdp, {n: p.table for n, p in policies.items() if n not in placeholders}, str(state.plan.mdp_name))
    for n in placeholders:
        if the_mdp is not None:
            state.say(f"{n}: not evaluated: its table is a uniform placeholder (column-x-action without a public "
                      "state_table); the policy acts through w_h and phi(features, a) of each patient.")


def audit(config: PipelineConfig, state: RunState) -> None:
    """Audit the release at its claimed budget, unless ``audit_trials`` is 0 (fills ``audit``).

    Runs on a synthetic pair from the spec: reads nothing of the logs (docs/pipeline.md "What may leave").
    Writes ``tmp/audit/audit_report.json`` and ``tmp/figures/audit_tradeoff.png``.
    """
    if not config.audit_trials:
        return
    plan = state.plan
    report = audit_release(plan.spec, state.manifest, delta=plan.budget.delta, trials=int(config.audit_trials),
                           budget=plan.parts["release"], seed=plan.seeds[2], progress=config.progress)
    report.write_json(state.tmp / "audit" / "audit_report.json")
    report.plot(state.tmp / "figures" / "audit_tradeoff.png")
    state.audit = rep.audit_summary(report)


def report(config: PipelineConfig, state: RunState) -> None:
    """Certified values, the values figure, ``summary.json`` and ``report.md``; the private log's content.

    Fills ``summary`` (as written) and ``private`` (the facts for
    ``private/local-log.json``, written by the caller with the timings).
    """
    plan, tmp = state.plan, state.tmp
    spec, evaluation, diagnostics, value_stats = plan.spec, state.evaluation, state.diagnostics, state.value_stats
    certified = val.certified_entries(state.start_values, state.d0, state.d0_source,
                                      None if evaluation is None else evaluation["values"],
                                      return_range=return_range(spec)[:2], value_stats=value_stats,
                                      terminal_states=spec.terminal_states)
    for name, c in certified.items():  # the level of each certified value: 1 - failure_prob (- d0's when released)
        fp = state.policies[name].parameters.get("failure_prob") if name in state.policies else None
        extra = val.START_FAILURE_PROB if state.d0_source == "value-release" else 0.0
        c["certified_confidence"] = None if c["certified_value"] is None or fp is None else 1.0 - float(fp) - extra
    for name, dg in diagnostics.items():  # one certified value per policy (clipped into the return range)
        dg["certified_value"] = certified[name]["certified_value"]
    behaviour = None if value_stats is None else {
        **estimate_behaviour_value(value_stats), "privacy_part": VALUE_PART,
        "mechanism": plan.parts_plan.value.describe(),
        "exact_clinicians": None if evaluation is None else evaluation["references"].get("clinicians")}
    cert_values = {n: c["certified_value"] for n, c in certified.items()}
    draw = evaluation is not None or behaviour is not None or any(v is not None for v in cert_values.values())
    if draw:  # values, certificates and the clinicians' DP estimate side by side (all public)
        figures.plot_values(evaluation, tmp / "figures" / "values.png",
                            fallback={n: d["fallback_share"] for n, d in diagnostics.items()},
                            certified=cert_values, behaviour=behaviour, return_range=return_range(spec)[:2])
    start = None if state.d0_source is None else {"source": state.d0_source,
                                                  "what": val.D0_SOURCES[state.d0_source]}
    summary = rep.build_summary(
        spec=spec, manifest=state.manifest, guarantee=state.guarantee, policies=state.policies,
        evaluation=evaluation, audit=state.audit, stationary=plan.stationary, seeded=config.seed is not None,
        values=rep.ValueFacts(diagnostics=diagnostics, certified=certified, behaviour=behaviour,
                              start_distribution=start, figure_drawn=draw),
        config=config.public(), skipped=plan.skipped)
    if state.certification is not None:  # pipeline.certify (hold_out)
        summary["held_out_certification"] = state.certification
    rep.write_summary(summary, tmp / "summary.json")
    atomic_write_text(tmp / "report.md", render.render_markdown(summary))
    state.summary = summary
    state.private = {
        "WARNING": "PRIVATE: facts about the private logs, for the data holder only. Never share this file.",
        "created": summary["created"],
        "logs": _logs_named(config, state.prepared),
        "spec": str(spec.source) if spec.source else None,
        "engine": config.engine,
        "validation": "passed every rule that contribution bounding cannot repair",
        "bounding": state.local.get("bounding"),
        # the data holder's stop/go on the repairs' shares: private, never in summary.json
        "repair_limit": {"max_share": config.max_repair_share, "accepted": config.accept_repairs},
    }


def _logs_named(config: PipelineConfig, prepared) -> str:
    """How the private log names the logs: an absolute path, a URL as given, or 'a Spark DataFrame'."""
    if config.engine == "polars":
        return str(prepared.path.resolve())
    source = prepared.source  # privaudit.data.spark.prepare.SparkPreparedLogs
    if isinstance(source, (str, Path)):
        return str(source.resolve()) if isinstance(source, Path) else source
    return "a Spark DataFrame"


#: The stages after validation, in order (name, function); the run times each one.
def certify(config: PipelineConfig, state: RunState) -> None:
    """The held-out certification (``pipeline.certify``, with ``hold_out``), or the stopped run's when it finished
    it (its evaluations were charged then: read back, not charged again)."""
    cp = state.plan.resume_from
    if cp is not None and cp.certification is not None:
        state.certification = cp.certification
        return
    if cp is not None:  # a run stopped inside it: the evaluations it finished were charged; they are reused
        state.certified = dict(cp.certified)
    certify_stage(config, state)


STAGES_AFTER_VALIDATION = (("release", release), ("train", train), ("evaluate", evaluate),
                           ("certify", certify), ("audit", audit), ("report", report))
