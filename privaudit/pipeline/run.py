"""``run_pipeline``: validate -> release -> train -> evaluate -> audit -> report, in one call.

What a hospital analyst runs on day one (``privaudit pipeline``). Every
artifact is built in a temporary folder next to ``out`` and renamed to
``out`` only when all stages succeeded, so a failure (invalid logs, a bad
spec, an interrupted run) leaves ``out`` absent or unchanged.

Layout of ``out`` (see docs/pipeline.md)::

    summary.json              guarantee, values, audit verdict (schemas/summary.schema.json)
    report.md                 the human report
    figures/values.png        values, certified values, the clinicians' DP estimate (and optimum)
    figures/audit_tradeoff.png
    release/                  the DP release (manifest.json + Parquet tables)
    policies/dp-pbb/          policy.json + policy.parquet (the default DP policy, with a certificate)
    policies/dp-apvi/         policy.json + policy.parquet (seed 000's DP-APVI: the reference)
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

from privaudit.audit.synthetic_pairs import check_synthetic_pair_exists
from privaudit.audit.choice import MIN_TRIALS
from privaudit.core.package_data import sample_dir
from privaudit.core.errors import UsageError
from privaudit.core.files import atomic_dir, atomic_write_text, new_run_id, output_lock
from privaudit.pipeline.guarantee import (LINEAR_SHARE_DEFAULT, VALUE_PART, VALUE_SHARE_DEFAULT, budget_shares,
                                          check_split, composed_guarantee, pbb_share_of, split_budget)
from privaudit.pipeline.plans import PartsPlan, plan_parts
from privaudit.pipeline import values as val
from privaudit.release.behaviour_value import estimate_behaviour_value, return_range
from privaudit.privacy import budget as budget_mod
from privaudit.privacy import ledger as ledger_mod
from privaudit.privacy.events import event_from_dict
from privaudit.pipeline.report import SUMMARY_KIND
from privaudit.core.spec import DomainSpec, load_spec
from privaudit.data.prepare import prepare_logs
from privaudit.core.errors import SpecError
from privaudit.learners.tabular.dp_apvi import DPAPVI
from privaudit.learners.tabular.train import train_dp_pbb
from privaudit.learners.linear import train_from_logs as train_linear
from privaudit.learners.linear.logs import PLACEHOLDER_TABLE
from privaudit.learners.linear.rows import column_dims
from privaudit.learners.policy import save_policy
from privaudit.mdp.evaluation import resolve_mdp
from privaudit.mdp.spec_check import check_spec_matches_mdp
from privaudit.mdp.registry import MDP_REGISTRY
from privaudit.mdp.spec_features import feature_map_from_spec, read_state_table
from privaudit.pipeline import report as rep
from privaudit.pipeline import figures
from privaudit.pipeline.audit_release import audit_release
from privaudit.release.tabular import load_release, release_logs
from privaudit.release.tabular import default_stationary

#: Bundled sample: 20,000 ICU-Sepsis episodes under the clinicians' policy, and its spec.
SAMPLE_DIR = sample_dir()
SAMPLE_LOGS = SAMPLE_DIR / "icu_sepsis_clinicians_20k.parquet"
SAMPLE_SPEC = SAMPLE_DIR / "icu_sepsis_spec.json"
#: Audit runs per side by default (selection + evaluation): seconds on ICU-Sepsis.
AUDIT_TRIALS_DEFAULT = 4000
#: Stages, in order (progress bar and timings).
STAGES = ("validate", "release", "train", "evaluate", "audit", "report")


def _child_seeds(seed: int | None, n: int) -> list[int | None]:
    """n independent integer seeds from one (None -> None: OS entropy everywhere)."""
    if seed is None:
        return [None] * n
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise UsageError(f"`seed` must be a non-negative integer. Found {seed!r}.")
    return [int(s.generate_state(1, np.uint64)[0] >> np.uint64(1)) for s in np.random.SeedSequence(int(seed)).spawn(n)]


def _check_out(out: Path, overwrite: bool) -> None:
    """Refuse an existing ``out`` unless ``overwrite`` and it holds a previous pipeline output."""
    if not out.exists():
        return
    if not overwrite:
        raise UsageError(f"{out} already exists; choose another `out`, remove it, or pass `overwrite`.")
    summary = out / "summary.json"
    try:
        kind = json.loads(summary.read_text()).get("kind") if summary.is_file() else None
    except (OSError, json.JSONDecodeError, AttributeError):
        kind = None
    if not out.is_dir() or kind != SUMMARY_KIND:
        raise UsageError(f"`overwrite` replaces only a previous pipeline output (a folder with a summary.json "
                         f"of kind {SUMMARY_KIND!r}); {out} is not one. Choose another `out`.")


def _resolve_mdp(mdp, spec: DomainSpec, instance_seed: int | None = None):

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
                 rho: float | None = None, epsilon: float | None = None, delta: float | None = None,
                 out: str | Path, mdp: str | Path | None = None, seed: int | None = None,
                 stationary: bool | None = None, audit_trials: int = AUDIT_TRIALS_DEFAULT,
                 linear_share: float | None = None, value_share: float = VALUE_SHARE_DEFAULT,
                 overwrite: bool = False, ledger: str | Path | None = None, instance_seed: int | None = None,
                 progress: bool | None = None, echo: Callable[[str], None] | None = None,
                 engine: str = "polars", spark=None) -> dict:
    """Run validate -> release -> train -> evaluate -> audit -> report into the folder ``out``.

    Parameters
    ----------
    logs : path, optional
        Parquet file or folder of parts. None: the bundled ICU-Sepsis sample
        (20,000 episodes of the clinicians' policy) with its spec and, unless
        ``mdp`` is given, ``mdp="icu-sepsis"``.
    spec : path or DomainSpec, optional
        The public domain spec; required with ``logs``.
    rho : float, optional
        Total zCDP budget of everything the pipeline outputs.
    epsilon, delta : float, optional
        Total (epsilon, delta)-DP target instead of ``rho``.
    out : path
        Output folder; must not exist (see ``overwrite``).
    mdp : str or path, optional
        ``icu-sepsis``, ``synthetic-linear`` or an MDP ``.npz`` (``privaudit
        simulate --mdp-out``): evaluate the learned policies exactly on it.
        Its (H, S, A) must match the spec. None: no evaluation (values are
        absent from the summary). A policy whose table is a placeholder
        (dp-vapvi on column-x-action without a public state_table) is not
        evaluated; the summary says so.
    instance_seed : int, optional
        The instance of a seeded named MDP (synthetic-linear): from here or
        the spec's ``$.mdp.instance_seed`` (written by ``privaudit
        simulate``); they must agree, and one is required
        (``privaudit.mdp.evaluation.resolve_instance_seed``).
    seed : int, optional
        TESTS ONLY: makes the release noise, DP-VAPVI noise and the audit
        reproducible. The release is then marked rng "seeded-insecure"; the
        seed is written nowhere.
    stationary : bool or None, default None
        True: release counts pooled over h (tables (S, A) and (S, A, S));
        False: one table per step h. None (auto): the MDP's own structure when
        ``mdp`` is given (a public fact: ICU-Sepsis is stationary, the
        random-tabular MDPs are not), else True. Why pooling is the default
        (docs/pipeline.md): for a time-homogeneous process, a pooled cell holds
        about H times the count of a per-step cell for sqrt(H) times the noise
        (L2 sensitivity kH sqrt(2) vs k sqrt(2H)), and at S = 716 it is the
        only setting that fits the 2-minute target (per-step DP-APVI needs
        H = 20 projections of 17,900 rows: about 90 s alone).
    ledger : path, optional
        A budget ledger (``privaudit budget init``): the planned split (every
        part, checked to compose within the total budget:
        ``guarantee.check_split``, and every part's planned privacy event,
        checked to cost at most its share and to compose within the total:
        ``plans.plan_parts``, AccountingError) is checked against its
        remaining budget before any row is read or any part charged
        (BudgetExceededError, exit 3); each part (release, behaviour value,
        DP-PBB, DP-VAPVI) charges its share when it succeeds, with its planned
        event (``PartsPlan.charged``). A run that fails
        after a charge keeps the charge (the safe direction: spent budget is
        never handed back).
    audit_trials : int, default 4000
        Runs per side of the release audit (>= ``audit.choice.MIN_TRIALS``); 0 skips the audit.
    linear_share : float or None, default None (0.5)
        Share of the budget given to DP-VAPVI when the spec has a feature map; a share given for a
        spec without one is refused (UsageError) rather than ignored.
    value_share : float, default 0.1
        Share of the budget spent on the behaviour-value release
        (:mod:`privaudit.release.behaviour_value`): the clinicians' value
        estimated with DP from the logged returns, with a 95% interval, and
        the noisy start-state counts the certified values are averaged over
        when no MDP is known. 0: neither (certified values then use a
        per-step release's h = 0 visits or the MDP's d0, else are absent).
        Must be 0 with ``engine="spark"`` (the estimate reads the logs with
        polars; the CLI then defaults it to 0).
    overwrite : bool
        Replace ``out`` if it holds a previous pipeline output (a
        ``summary.json`` of this kind); any other existing path is refused.
    progress : bool, optional
        Progress bars on stderr (default: only when stderr is a terminal).
    echo : callable, optional
        ``echo(text)`` for messages to the data holder (stderr in the CLI).
    engine : {"polars", "spark"}
        Who validates, bounds and counts for the release stage
        (``privaudit.release.tabular.release_logs``): polars here, or Apache
        Spark (the ``privaudit[spark]`` extra; ``logs`` may then be any path
        Spark reads, or a Spark DataFrame). The release is the same either way
        (same counts, so the same tables for the same seed); with Spark the
        fatal rules are checked by Spark inside the release stage, after the
        budget and the ledger were checked. Tabular only: a spec with a
        feature map (DP-VAPVI reads per-row features with polars) is refused,
        and so is ``value_share`` > 0; DP-PBB (which also reads the logs with
        polars) is not trained, so DP-APVI on the release is the DP policy.
    spark : SparkSession or str, optional
        With ``engine="spark"``: the session (classic or Spark Connect), a
        master URL (``local[4]``, ``spark://host:7077``, ``yarn``), or a
        Spark Connect URL ``sc://HOST:PORT``; None: the active session or
        ``local[*]``.

    Returns
    -------
    dict
        The summary (as written to ``out/summary.json``), plus the key
        ``private_log`` (absolute path, not in the file).

    Raises
    ------
    UsageError
        Bad or conflicting arguments, ``out`` exists or is being written by
        another run (refused at once: ``io_utils.output_lock``; hidden
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
    LogReadError, ValidationFailed
        Unreadable logs, or logs breaking rules that bounding cannot repair
        (the message lists the located errors); nothing is written.
    EngineError
        With ``engine="spark"``: Spark itself failed (no JVM, a failed job,
        out of memory); nothing is written or charged.

    References
    ----------
    Qiao & Wang, Offline RL with DP (seed 000), Algorithms 1 and 2;
    ALGORITHMS.md 1-2; AUDITING.md 4.1.
    """
    with output_lock(Path(out), "out") as stale:
        if stale and echo is not None:
            echo(f"removed {len(stale)} stale temporary folder(s) of an interrupted run: "
                 + ", ".join(str(p) for p in stale))
        return _run_pipeline_locked(logs, spec, rho=rho, epsilon=epsilon, delta=delta, out=out, mdp=mdp,
                                    seed=seed, stationary=stationary, audit_trials=audit_trials,
                                    linear_share=linear_share, value_share=value_share, overwrite=overwrite,
                                    ledger=ledger, instance_seed=instance_seed, progress=progress, echo=echo,
                                    engine=engine, spark=spark)


def _run_pipeline_locked(logs, spec, *, rho, epsilon, delta, out, mdp, seed, stationary, audit_trials,
                         linear_share, value_share, overwrite, ledger, instance_seed, progress, echo,
                         engine="polars", spark=None) -> dict:
    """The body of :func:`run_pipeline`, under the output lock."""
    t0 = time.perf_counter()
    say = echo or (lambda s: None)
    timings: dict[str, float] = {}
    # ---------------------------------------------------------------- arguments (nothing read yet)
    if logs is None:
        if spec is not None:
            raise UsageError("`spec` needs LOGS; with no LOGS the bundled ICU-Sepsis sample and its spec are used.")
        logs, spec = SAMPLE_LOGS, SAMPLE_SPEC
        mdp = "icu-sepsis" if mdp is None else mdp
    elif spec is None:
        raise UsageError("LOGS needs `spec` SPEC (the public domain spec of the logs).")
    spec = spec if isinstance(spec, DomainSpec) else load_spec(spec)
    if engine not in ("polars", "spark"):
        raise UsageError(f"`engine` must be 'polars' or 'spark'. Found {engine!r}.")
    if engine == "spark" and spec.features:
        raise UsageError("`engine` spark runs the tabular release only, and this spec declares a feature map "
                         "(DP-VAPVI reads per-row features with polars): run it with the polars engine, or "
                         "without the feature map.")
    if engine == "spark" and value_share:
        raise UsageError("`engine` spark counts the logs for the release only; the DP estimate of the behaviour "
                         f"value reads them with polars: pass `value_share` 0. Found {value_share!r}.")
    if engine != "spark" and spark is not None:
        raise UsageError("`spark` (a session or master URL) needs `engine` 'spark'.")
    out = Path(out)
    if engine == "polars" or isinstance(logs, (str, Path)) and "://" not in str(logs):
        logs = Path(logs)  # a local path; Spark may also read URLs (hdfs://, s3a://) and DataFrames
    if stationary is not None and not isinstance(stationary, bool):
        raise UsageError(f"`stationary` must be True, False or None (auto). Found {stationary!r}.")
    if isinstance(audit_trials, bool) or not isinstance(audit_trials, (int, np.integer)) \
            or (audit_trials != 0 and audit_trials < MIN_TRIALS):
        raise UsageError(f"`audit_trials` must be 0 (no audit) or an integer >= {MIN_TRIALS}. Found {audit_trials!r}.")
    if audit_trials:  # the audit's synthetic pair comes from the spec: refuse now, not after the budget is spent
        try:
            check_synthetic_pair_exists(spec)
        except UsageError as e:
            raise UsageError(f"{e} The pipeline's audit cannot run on this spec: pass `audit_trials` 0.") from None
    linear = bool(spec.features)
    if linear_share is not None and not linear:  # a share the user chose would be silently ignored
        raise UsageError(f"`linear_share` {linear_share!r} is DP-VAPVI's share of the budget, and this spec declares "
                         "no feature map ($.features): there is no DP-VAPVI to give it to. Drop it.")
    linear_share = LINEAR_SHARE_DEFAULT if linear_share is None else linear_share
    budget = budget_mod.resolve_budget(rho=rho, epsilon=epsilon, delta=delta, mechanism="gaussian")  # once
    pbb_share = 0.0 if engine == "spark" else pbb_share_of(spec.public_reward is not None, linear=linear,
                                                           linear_share=linear_share, value_share=value_share)
    if engine == "spark" and spec.public_reward is not None:
        say("engine spark: DP-PBB is not trained (it reads the logs with polars); the budget goes to the "
            "release, and DP-APVI learns from it.")
    shares = budget_shares(linear=linear, linear_share=linear_share, value_share=value_share, pbb_share=pbb_share)
    parts = split_budget(budget, linear=linear, linear_share=linear_share, value_share=value_share,
                         pbb_share=pbb_share)
    # every part, before any row is read or a part is charged: a split that composes above the total
    # leaves the ledger untouched and nothing written (the composition is checked again on the events)
    check_split(budget, parts)
    seeds = _child_seeds(seed, 5)
    _check_out(out, overwrite)
    if linear:  # a bad feature map costs nothing: checked before any row is read
        if spec.features.get("map") == "column-x-action":  # per-row features: the path of `train`
            m_dim = column_dims(spec)
            if "state_table" in spec.features:
                X = read_state_table(spec.features["state_table"],
                                      spec.source.parent if spec.source is not None else None)
                if X.shape != (spec.n_states, m_dim):
                    raise SpecError(f"spec $.features.state_table must have shape (S={spec.n_states}, "
                                    f"m={m_dim}). Found {X.shape}.")
        else:
            feature_map_from_spec(spec)
    the_mdp = _resolve_mdp(mdp, spec, instance_seed)
    said = None
    if stationary is None:  # the one default rule of every command, said when it applies (once the logs pass)
        stationary, said = default_stationary(the_mdp)
    # every part's noise plan and event from public inputs (plans.py), each checked against its share and
    # their composition against the total; then, once for all the parts' charges, the ledger's remaining
    # budget: all before any row is read, noise drawn or part charged
    plan = plan_parts(spec, budget, parts, stationary=stationary)
    if ledger is not None:
        ledger_mod.check_budget(ledger, spec.dataset_id, plan.total)
    bar = _Progress(sys.stderr.isatty() if progress is None else bool(progress))
    try:
        # ------------------------------------------------------------ validate
        bar.stage("validate")

        t = time.perf_counter()
        # polars: validated and bounded once, before any folder exists; Spark validates, bounds and counts
        # in the release stage (inside the temporary folder, removed if it fails)
        source = prepare_logs(logs, spec) if engine == "polars" else logs
        timings["validate"] = time.perf_counter() - t
        bar.done()
        if said is not None:  # after the inputs are validated: not in front of an unrelated error
            say(said)
        with atomic_dir(out, overwrite=True) as tmp:
            summary, private = _stages(tmp, source, spec, (budget, parts, shares), the_mdp, mdp, stationary,
                                       audit_trials, seeds, seed is not None, bar, timings, progress, say, ledger,
                                       run=new_run_id(), final_out=out, plan=plan, engine=engine,
                                       spark=spark)
            timings["total"] = time.perf_counter() - t0
            private["timings_s"] = timings
            atomic_write_text(tmp / "private" / "local-log.json", json.dumps(private, indent=2) + "\n")
    finally:
        bar.close()
    summary = dict(summary)
    summary["private_log"] = str((out / "private" / "local-log.json").resolve())
    return summary


def _stages(tmp: Path, prepared, spec: DomainSpec, budgets, the_mdp, mdp_arg, stationary: bool,
            audit_trials: int, seeds, seeded: bool, bar: _Progress, timings: dict, progress, say,
            ledger=None, run: str | None = None, final_out: Path | None = None, plan: PartsPlan | None = None,
            engine: str = "polars", spark=None):
    """release -> train -> evaluate -> audit -> report inside the temporary folder ``tmp``.

    Ledger charges name ``run`` and ``final_out`` (the folder the run will write).

    ``prepared`` (``privaudit.data.prepare.PreparedLogs``) is passed to every
    stage: the logs are validated and bounded once per run. With
    ``engine="spark"`` it is what Spark reads instead (a path or a Spark
    DataFrame), and the release is the only stage that reads it. ``budgets`` is
    (the whole Budget, its parts by name, the configured shares). ``plan``
    (:func:`privaudit.pipeline.plans.plan_parts`, checked by the caller) holds
    every part's planned event. Each part's mechanism returns its event, which
    must equal the planned one (``PartsPlan.charged``); the ledger (checked
    once by the caller) is charged once per part from that event, inside
    ``tmp`` (the output appears only after every charge succeeded); the
    composed guarantee is the accountant's composition of the events.
    """
    if engine == "polars":
        logs = str(prepared.path.resolve())
    elif isinstance(prepared, (str, Path)):
        logs = str(prepared.resolve()) if isinstance(prepared, Path) else prepared
    else:
        logs = "a Spark DataFrame"

    # ---------------------------------------------------------------- release
    bar.stage("release")
    t = time.perf_counter()
    budget, parts, shares = budgets
    info = release_logs(prepared, spec, budget=parts["release"], stationary=stationary, noise="exact",
                        out=tmp / "release", seed=seeds[0], engine=engine, spark=spark)
    events = {"release": plan.charged("release", info.event)}
    if ledger is not None:
        ledger_mod.charge_event(ledger, spec.dataset_id, events["release"],
                                f"pipeline, release part: gaussian, rho={parts['release'].shown!r}",
                                parts["release"], run=run, output=final_out)
    local = json.loads(info.local_log.read_text())
    info.local_log.unlink()  # folded into private/local-log.json below
    manifest = info.manifest
    value_stats = None
    value_plan = plan.value
    if value_plan is not None:  # the behaviour-value part: a second access to the bounded logs
        value_stats = value_plan.apply(prepared.bounded, rng=np.random.default_rng(seeds[3]))
        events[VALUE_PART] = plan.charged(VALUE_PART, value_plan.event)
        if ledger is not None:
            ledger_mod.charge_event(ledger, spec.dataset_id, events[VALUE_PART],
                                    f"pipeline, {VALUE_PART} part: gaussian, rho={parts[VALUE_PART].shown!r}",
                                    parts[VALUE_PART], run=run, output=final_out)
    timings["release"] = time.perf_counter() - t
    bar.done()

    # ---------------------------------------------------------------- train (post-processing + DP-VAPVI)
    bar.stage("train")
    t = time.perf_counter()
    policies = {}
    release = load_release(tmp / "release")
    # the start distribution of the certified values: released or public, never read off the logs
    d0, d0_source = val.start_distribution(value_stats=value_stats, release=release, mdp=the_mdp,
                                           terminal_states=spec.terminal_states)
    # tabular learners on the release (post-processing); each pessimistic one exposes its value at
    # step 0 in declared units (declared_values), which the certified values and diagnostics use
    tabular = {}
    if "dp-pbb" in parts:  # the default DP policy: learns from outcomes, with a certificate (issue 12)
        pbb = train_dp_pbb(prepared, spec, stationary=stationary, budget=parts["dp-pbb"], seed=seeds[4], echo=say)
        tabular["dp-pbb"] = pbb.learner
        events["dp-pbb"] = plan.charged("dp-pbb", pbb.learner.event_)
        if ledger is not None:
            ledger_mod.charge_event(ledger, spec.dataset_id, events["dp-pbb"],
                                    f"pipeline, dp-pbb part: gaussian, rho={parts['dp-pbb'].shown!r} "
                                    "(private Bellman backups)", parts["dp-pbb"], run=run, output=final_out)
    # seed 000's DP-APVI with the paper's constants on the release: the reference
    tabular["dp-apvi"] = DPAPVI().fit(release, release_path="../../release")
    start_values, diagnostics = {}, {}
    for name, learner in tabular.items():
        policies[name] = learner.policy_
        start_values[name] = learner.declared_values()[0] if hasattr(learner, "declared_values") else None
        if start_values[name] is not None:
            q_choice = getattr(learner, "Q_select_", learner.Q_)  # the values that chose the actions
            diagnostics[name] = rep.learner_diagnostics(q_choice, start_values[name], learner.policy_.table,
                                                        the_mdp, spec.terminal_states, d0=d0)
    if "dp-vapvi" in parts:

        pol = train_linear(prepared, spec, "dp-vapvi", budget=parts["dp-vapvi"], seed=seeds[1])
        policies["dp-vapvi"] = pol
        start_values["dp-vapvi"] = None  # DP-VAPVI's pessimistic values are not kept
        events["dp-vapvi"] = plan.charged("dp-vapvi", event_from_dict(pol.privacy.event))
        if ledger is not None:
            ledger_mod.charge_event(ledger, spec.dataset_id, events["dp-vapvi"],
                                    f"pipeline, dp-vapvi part: gaussian, rho={parts['dp-vapvi'].shown!r} "
                                    "(5H releases)", parts["dp-vapvi"], run=run, output=final_out)
    for name, pol in policies.items():
        save_policy(pol, tmp / "policies" / name)
    guarantee = composed_guarantee(budget, parts, events, spec, shares=shares, manifest=manifest)
    timings["train"] = time.perf_counter() - t
    bar.done()

    # ---------------------------------------------------------------- evaluate
    bar.stage("evaluate")
    t = time.perf_counter()

    placeholders = [n for n, p in policies.items()
                    if str(p.parameters.get("table", "")).startswith(PLACEHOLDER_TABLE)]
    evaluation = None if the_mdp is None else rep.evaluate_all(
        the_mdp, {n: p.table for n, p in policies.items() if n not in placeholders}, str(mdp_arg))
    for n in placeholders:
        if the_mdp is not None:
            say(f"{n}: not evaluated: its table is a uniform placeholder (column-x-action without a public "
                "state_table); the policy acts through w_h and phi(features, a) of each patient.")
    timings["evaluate"] = time.perf_counter() - t
    bar.done()

    # ---------------------------------------------------------------- audit
    bar.stage("audit")
    t = time.perf_counter()
    audit = None
    if audit_trials:

        # synthetic pair from the spec: reads nothing of the logs (docs/pipeline.md "What may leave")
        report = audit_release(spec, manifest, delta=budget.delta, trials=int(audit_trials),
                               budget=parts["release"], seed=seeds[2], progress=progress)
        report.write_json(tmp / "audit" / "audit_report.json")
        report.plot(tmp / "figures" / "audit_tradeoff.png")
        audit = rep.audit_summary(report)
    timings["audit"] = time.perf_counter() - t
    bar.done()

    # ---------------------------------------------------------------- report
    bar.stage("report")
    t = time.perf_counter()
    certified = val.certified_entries(start_values, d0, d0_source,
                                      None if evaluation is None else evaluation["values"],
                                      return_range=return_range(spec)[:2], value_stats=value_stats,
                                      terminal_states=spec.terminal_states)
    for name, dg in diagnostics.items():  # one certified value per policy (clipped into the return range)
        dg["certified_value"] = certified[name]["certified_value"]
    behaviour = None if value_stats is None else {
        **estimate_behaviour_value(value_stats), "privacy_part": VALUE_PART,
        "mechanism": value_plan.describe(),
        "exact_clinicians": None if evaluation is None else evaluation["references"].get("clinicians")}
    cert_values = {n: c["certified_value"] for n, c in certified.items()}
    draw = evaluation is not None or behaviour is not None or any(v is not None for v in cert_values.values())
    if draw:  # values, certificates and the clinicians' DP estimate side by side (all public)
        figures.plot_values(evaluation, tmp / "figures" / "values.png",
                            fallback={n: d["fallback_share"] for n, d in diagnostics.items()},
                            certified=cert_values, behaviour=behaviour, return_range=return_range(spec)[:2])
    summary = rep.build_summary(spec=spec, manifest=manifest, guarantee=guarantee, policies=policies,
                                evaluation=evaluation, audit=audit, stationary=stationary,
                                seeded=seeded, tmp=tmp, diagnostics=diagnostics, certified=certified,
                                behaviour=behaviour,
                                start_distribution=None if d0_source is None else {
                                    "source": d0_source, "what": val.D0_SOURCES[d0_source]},
                                values_figure_drawn=draw)
    rep.write_summary(summary, tmp / "summary.json")
    atomic_write_text(tmp / "report.md", rep.render_markdown(summary))
    timings["report"] = time.perf_counter() - t
    bar.done()
    private = {
        "WARNING": "PRIVATE: facts about the private logs, for the data holder only. Never share this file.",
        "created": summary["created"],
        "logs": logs,
        "spec": str(spec.source) if spec.source else None,
        "engine": engine,
        "validation": "passed every rule that contribution bounding cannot repair",
        "bounding": local.get("bounding"),
    }
    return summary, private
