"""``PipelineConfig``: what the user chose for one ``privaudit pipeline`` run, checked in one place.

The CLI (``privaudit pipeline``) and :func:`privaudit.pipeline.run_pipeline`
build one :class:`PipelineConfig`; every stage of the run reads it (see
:mod:`privaudit.pipeline.run` and :mod:`privaudit.pipeline.stages`).
Its public part (:meth:`PipelineConfig.public`, no path, no seed) is written
into ``summary.json`` under ``config``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privaudit.audit.choice import MAX_TRIALS, MIN_TRIALS
from privaudit.audit.synthetic_pairs import check_synthetic_pair_exists
from privaudit.core.errors import UsageError
from privaudit.core.package_data import sample_dir
from privaudit.core.spec import DomainSpec
from privaudit.data.repairs import MAX_REPAIR_SHARE_DEFAULT, RepairLimit
from privaudit.mdp.registry import MDP_REGISTRY
from privaudit.ope.split import HOLD_OUT_DEFAULT, check_fraction
from privaudit.pipeline.guarantee import VALUE_SHARE_DEFAULT

#: Bundled sample: 20,000 ICU-Sepsis episodes under the clinicians' policy, and its spec.
SAMPLE_DIR = sample_dir()
SAMPLE_LOGS = SAMPLE_DIR / "icu_sepsis_clinicians_20k.parquet"
SAMPLE_SPEC = SAMPLE_DIR / "icu_sepsis_spec.json"
#: The MDP of the bundled sample (the default ``mdp`` when no logs are given).
SAMPLE_MDP = "icu-sepsis"
#: Audit runs per side by default (selection + evaluation): seconds on ICU-Sepsis.
AUDIT_TRIALS_DEFAULT = 4000
#: Engines that validate, bound and count the logs for the release.
ENGINES = ("polars", "spark")
#: ``pipeline --certify``: the one setting pre-registered for the held-out certificate (docs/results.md,
#: "The recommended setting, pre-registered"): 30% of the units held out, DP-APVI with C2 = 0 trained on the
#: rest with DP-PBB's share given to its release, and its policy certified on the held-out units. A preset, not
#: the default: it trades DP-PBB's own certificate and its value at small sizes (200,000 stays, or epsilon 1) for
#: a held-out certificate that can beat the clinicians' at 1M stays and epsilon 5.
CERTIFY_PRESET = {"hold_out": True, "hold_out_fraction": 0.3, "dp_apvi_c2": 0.0, "pbb_share": 0.0}


def check_seed(seed) -> None:
    """Refuse a ``seed`` that is not None or a non-negative integer (UsageError)."""
    if seed is None:
        return
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise UsageError(f"`seed` must be a non-negative integer. Found {seed!r}.")


@dataclass(frozen=True, kw_only=True)
class PipelineConfig:
    """The choices of one pipeline run (the arguments of :func:`privaudit.pipeline.run_pipeline`).

    Built once (by the CLI or by ``run_pipeline``); construction checks every
    choice that needs no file (UsageError, exit 2, before anything is read);
    :meth:`check_against` checks the choices that depend on the spec.

    Attributes
    ----------
    logs : path, str or Spark DataFrame, optional
        Parquet file or folder of parts. None: the bundled ICU-Sepsis sample
        (20,000 episodes of the clinicians' policy) with its spec and, unless
        ``mdp`` is given, ``mdp="icu-sepsis"``. With ``engine="spark"``, any
        path Spark reads, or a Spark DataFrame.
    spec : path or DomainSpec, optional
        The public domain spec; required with ``logs``.
    rho : float, optional
        Total zCDP budget of everything the pipeline outputs (with ``delta``:
        reported as (epsilon, delta)-DP at that delta).
    epsilon, delta : float, optional
        Total (epsilon, delta)-DP target instead of ``rho`` (converted exactly
        to rho). ``epsilon`` alone (pure DP) is refused: the pipeline's noise is
        Gaussian. docs/privacy.md, "Budget flags".
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
    audit_trials : int, default 4000
        Runs per side of the release audit (``audit.choice.MIN_TRIALS`` to ``MAX_TRIALS``); 0 skips the audit.
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
        With ``engine="spark"`` Spark computes its statistics (the same
        integers as polars, so the same estimate for the same seed).
    overwrite : bool
        Replace ``out`` if it holds a previous pipeline output (a
        ``summary.json`` of this kind); any other existing path is refused.
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
    progress : bool, optional
        Progress bars on stderr (default: only when stderr is a terminal).
    engine : {"polars", "spark"}
        Who validates, bounds and counts the logs (``privaudit.data.engines.prepare_on``,
        once per run, in the validate stage): polars here, or Apache Spark
        (the ``privaudit[spark]`` extra: its fatal rules and bounding on the
        cluster, the bounded rows cached there; the release's counts,
        DP-PBB's capped counts, the clinicians' value statistics and the
        held-out split and stays aggregated there, only per-cell and
        per-unit aggregates coming back). The outputs are the same either
        way (same counts, so the same release, policies and summary for the
        same seed); Spark reads the logs after the budget, the ledger and
        every part's plan were checked. Tabular only: a spec with a feature
        map (DP-VAPVI reads per-row features with polars) is refused.
    hold_out : bool, default False
        Certify the learned tabular policies on privacy units held out from
        training (``pipeline.certify``, docs/certificates.md): the units are
        split by a public hash of their id, every other stage sees the
        training part only, and each policy gets a DP lower bound on the
        held-out part, next to the clinicians' DP interval. With
        ``engine="spark"`` Spark splits (the same hash) and aggregates the
        held-out stays; it needs the Spark engine's prepared logs.
    hold_out_fraction : float, default 0.5
        With ``hold_out``: the fraction of the privacy units held out
        (``ope.split``; a public function of the unit id), in (0, 1); the
        rest trains.
    pbb_share : float, optional
        DP-PBB's share of the budget, in [0, 1) (None: the rule
        ``pipeline.guarantee.pbb_share_of``, 0.6 by default). 0: DP-PBB is not
        trained and its share goes to the release, so DP-APVI learns from a
        release of (1 - value_share) of the budget, and ``hold_out`` certifies
        DP-APVI alone with the whole held-out budget.
    dp_apvi_c2 : float, optional
        DP-APVI's constant C2 of the privacy term C2 S H E iota / n (None: the
        paper's 16, Qiao & Wang 2023). 0 drops that term: DP-APVI then learns
        far more at 1M stays (docs/results.md) and its own pessimistic value
        is not a certificate (it never is: ``pipeline.values.PROVEN_CERTIFICATES``);
        with ``hold_out`` its policy is certified on held-out units. Privacy
        is unchanged (post-processing of the release). >= 0.
    spark : SparkSession or str, optional
        With ``engine="spark"``: the session (classic or Spark Connect), a
        master URL (``local[4]``, ``spark://host:7077``, ``yarn``), or a
        Spark Connect URL ``sc://HOST:PORT``; None: the active session or
        ``local[*]``.
    max_repair_share : float, default 0.05
        Stop before anything is spent, charged or written
        (``privaudit.core.errors.RepairsRefused``, exit 1) when contribution
        bounding changes a larger share of the logs (rewards clipped, steps
        dropped beyond H, episodes dropped above k, returns clipped:
        ``privaudit.data.repairs``), unless ``accept_repairs``. A decision on
        private counts, by the data holder, before any release: neither it
        nor these two fields is written to ``summary.json``.
    accept_repairs : bool
        Go on whatever bounding changes (the repairs are still printed and
        written to the private log).

    Raises
    ------
    UsageError
        On construction: ``spec`` without ``logs`` or ``logs`` without
        ``spec``, an unknown ``engine``, no ``engine``
        spark with ``spark``, a ``stationary``, ``audit_trials``, ``seed``
        or ``max_repair_share`` of the wrong type or range.
    TypeError
        ``out`` missing, or an unknown field.
    """

    logs: Any = None
    spec: str | Path | DomainSpec | None = None
    rho: float | None = None
    epsilon: float | None = None
    delta: float | None = None
    out: str | Path
    mdp: str | Path | None = None
    instance_seed: int | None = None
    seed: int | None = None
    stationary: bool | None = None
    audit_trials: int = AUDIT_TRIALS_DEFAULT
    linear_share: float | None = None
    value_share: float = VALUE_SHARE_DEFAULT
    overwrite: bool = False
    ledger: str | Path | None = None
    progress: bool | None = None
    engine: str = "polars"
    spark: Any = None
    hold_out: bool = False
    max_repair_share: float = MAX_REPAIR_SHARE_DEFAULT
    accept_repairs: bool = False
    hold_out_fraction: float = HOLD_OUT_DEFAULT
    dp_apvi_c2: float | None = None
    pbb_share: float | None = None

    def __post_init__(self):
        if self.logs is None and self.spec is not None:
            raise UsageError("`spec` needs LOGS; with no LOGS the bundled ICU-Sepsis sample and its spec are used.")
        if self.logs is not None and self.spec is None:
            raise UsageError("LOGS needs `spec` SPEC (the public domain spec of the logs).")
        if self.engine not in ENGINES:
            raise UsageError(f"`engine` must be 'polars' or 'spark'. Found {self.engine!r}.")
        check_fraction(self.hold_out_fraction)
        if not self.hold_out and float(self.hold_out_fraction) != HOLD_OUT_DEFAULT:
            raise UsageError(f"`hold_out_fraction` needs `hold_out`. Found {self.hold_out_fraction!r} without it.")
        ps = self.pbb_share
        if ps is not None and (isinstance(ps, bool) or not isinstance(ps, (int, float, np.integer, np.floating))
                               or not (0 <= float(ps) < 1)):
            raise UsageError(f"`pbb_share` must be a number in [0, 1); leave it unset for the default: 0.6 of the "
                             "budget, or two thirds of what DP-VAPVI and the behaviour value leave (rounded down) "
                             f"when that is less. Found {ps!r}.")
        c2 = self.dp_apvi_c2
        if c2 is not None and (isinstance(c2, bool) or not isinstance(c2, (int, float, np.integer, np.floating))
                               or not math.isfinite(float(c2)) or float(c2) < 0):
            raise UsageError(f"`dp_apvi_c2` must be a finite number >= 0; leave it unset for the paper's 16. "
                             f"Found {c2!r}.")
        if self.engine != "spark" and self.spark is not None:
            raise UsageError("`spark` (a session or master URL) needs `engine` 'spark'.")
        if self.stationary is not None and not isinstance(self.stationary, bool):
            raise UsageError(f"`stationary` must be True, False or None (auto). Found {self.stationary!r}.")
        t = self.audit_trials
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or (t != 0 and not MIN_TRIALS <= t <= MAX_TRIALS):
            raise UsageError(f"`audit_trials` must be 0 (no audit) or an integer in [{MIN_TRIALS}, {MAX_TRIALS:,}]. "
                             f"Found {t!r}.")
        check_seed(self.seed)
        RepairLimit(self.max_repair_share, self.accept_repairs)  # refuses a bad share now, before anything is read

    @property
    def repair_limit(self) -> RepairLimit:
        """The data holder's limit on what bounding may change (``max_repair_share``, ``accept_repairs``)."""
        return RepairLimit(self.max_repair_share, self.accept_repairs)

    @property
    def bundled(self) -> bool:
        """True when no logs were given: the bundled ICU-Sepsis sample is used."""
        return self.logs is None

    def inputs(self) -> tuple[Any, str | Path | DomainSpec, str | Path | None]:
        """(logs, spec, mdp) to run on: the user's, or the bundled sample with its spec and MDP.

        ``logs`` is a local :class:`~pathlib.Path` with the polars engine, or
        with Spark when it is a path without a scheme; Spark may also read URLs
        (hdfs://, s3a://) and DataFrames, passed on as given.
        """
        if self.bundled:
            return SAMPLE_LOGS, SAMPLE_SPEC, SAMPLE_MDP if self.mdp is None else self.mdp
        logs = self.logs
        if self.engine == "polars" or isinstance(logs, (str, Path)) and "://" not in str(logs):
            logs = Path(logs)
        return logs, self.spec, self.mdp

    def check_against(self, spec: DomainSpec) -> None:
        """Refuse the choices this spec cannot serve, before any row is read (UsageError).

        ``engine`` spark with a feature map, an audit without a synthetic
        neighbouring pair for the spec, a ``linear_share`` without a feature map.
        """
        if self.engine == "spark" and spec.features:
            raise UsageError("`engine` spark runs the tabular release only, and this spec declares a feature map "
                             "(DP-VAPVI reads per-row features with polars): run it with the polars engine, or "
                             "without the feature map.")
        if self.audit_trials:  # the audit's synthetic pair comes from the spec: refuse now, not after the budget
            try:
                check_synthetic_pair_exists(spec)
            except UsageError as e:
                raise UsageError(f"{e} The pipeline's audit cannot run on this spec: pass `audit_trials` 0.") from None
        if self.linear_share is not None and not spec.features:  # a share the user chose would be silently ignored
            raise UsageError(f"`linear_share` {self.linear_share!r} is DP-VAPVI's share of the budget, and this spec "
                             "declares no feature map ($.features): there is no DP-VAPVI to give it to. Drop it.")

    def public(self) -> dict:
        """The choices ``summary.json`` may hold (its ``config``): no path, no seed, no Spark target.

        The budget is not repeated (``privacy.requested`` holds it); ``mdp`` is
        a registered name, ``"file"`` for an MDP file, or None; ``ledger`` says
        only whether a ledger was charged. Nothing here depends on the logs,
        so the repair limit (``max_repair_share``, ``accept_repairs``: a decision
        on private counts) is left out.
        """
        mdp = self.mdp if self.mdp is None or str(self.mdp) in MDP_REGISTRY else "file"
        return {"bundled_sample": self.bundled, "mdp": None if mdp is None else str(mdp),
                "stationary": self.stationary, "audit_trials": int(self.audit_trials),
                "linear_share": None if self.linear_share is None else float(self.linear_share),
                "value_share": float(self.value_share), "engine": self.engine,
                "ledger": self.ledger is not None, "overwrite": bool(self.overwrite),
                "hold_out": bool(self.hold_out)}
