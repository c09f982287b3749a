"""The audit report: verdict, bounds, the chosen events, JSON and PNG output.

An audit can show that a claim is false (``violation``); it can never show
that a mechanism is private. A run without a violation says only that none
was found at the audit's resolution (docs/audit.md, Background, rule 7), which the report
states with the perfect-separation cap.

The report is written for the data holder; it names the removed unit only by
its row count (neither its id nor a hash of it: an unsalted hash of an
enumerable id is reversible, a salted one that is not stored names nothing).
Whether it may leave the data holder is its ``shareable`` field
(:func:`sharing`): only a report whose pair reads no logs at all is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path


from privaudit import __version__
from privaudit.audit import bounds as B
from privaudit.audit.claim import Claim
from privaudit.audit.guidance import below_claim_message, flag_meaning
from privaudit.audit.plotting import plot_report
from privaudit.audit.search import pair_words, search_message
from privaudit.core.artifact import ArtifactFormat
from privaudit.core.envelope import claim_envelope
from privaudit.core.errors import ArtifactError
from privaudit.core.formatting import privacy_param
from privaudit.core.jsonio import json_default

REPORT_FORMAT_VERSION = 1
#: The audit report on disk (``schemas/audit_report.schema.json``; no ``kind`` key).
REPORT_FORMAT = ArtifactFormat("audit report", "audit_report", REPORT_FORMAT_VERSION)
VIOLATION = "violation"
NO_VIOLATION = "no violation found"
#: Pair kinds built from the spec alone (``synthetic_pairs.synthetic_pair``), on top of a ``baseline``.
SYNTHETIC_KINDS = ("synthetic", "synthetic-repeat", "synthetic-spread")


def sharing(pair: dict | None, self_contained: bool) -> tuple[bool, str]:
    """Whether an audit report may leave the data holder, and the one-line reason.

    A report is shareable only when nothing in it depends on the private logs:
    its pair reads no logs (synthetic units on the empty baseline, or the
    explorers' simulated user streams) and its mechanism is privaudit's own
    (``SELF_CONTAINED``: its output depends only on the dataset it is given,
    the spec and its own noise). Every other report holds statistics of the
    logs computed outside any DP budget: the pair of a real unit (its row
    count, the least-visited cells of the exact counts, the gray-box change),
    or thresholds and counts from thousands of runs of the mechanism on the
    logs (a mean over n runs shrinks the noise by sqrt(n); e.g. a mean-difference
    threshold is then almost the exact sum of the logs' counts in the canary's
    cells), far beyond the budget of one run. A pair read from files
    (``explicit``) may or may not be private: the auditor cannot tell, so it
    is not marked shareable.

    Parameters
    ----------
    pair : dict or None
        The report's ``neighbouring_pair`` (``NeighbouringPair.description``).
    self_contained : bool
        The mechanism is one of privaudit's built-in adapters (not user code).

    Returns
    -------
    (shareable, reason) : (bool, str)

    Notes
    -----
    docs/audit.md, "Which reports may be shared".
    """
    kind = (pair or {}).get("kind")
    if kind in SYNTHETIC_KINDS and pair.get("baseline") == "logs":
        return False, ("D and D' are the private logs plus synthetic units: its thresholds and counts come from "
                       "thousands of runs of the mechanism on the logs, outside any DP budget")
    if kind is not None and kind.startswith("canary-"):
        return False, (f"the pair replaces a real unit of the logs ({kind}): it holds exact statistics of the "
                       "logs outside any DP mechanism")
    if kind in ("explicit", "identical"):
        return False, "the pair was read from files (an explicit `pair` D D2) that the auditor cannot tell are public"
    if kind == "custom":
        return False, ("the pair's inputs were given by the user (`input_pair`, or an input search): the auditor "
                       "cannot tell whether they are public")
    if kind not in SYNTHETIC_KINDS + ("online-canary",):
        return False, f"unknown pair kind {kind!r}"
    if not self_contained:
        return False, "the mechanism is user code: the auditor cannot tell what data it reads"
    if kind == "online-canary":
        return True, "simulated user streams from the environment model: no logs were read"
    return True, "the pair is built from the spec alone (synthetic units, empty baseline): no logs were read"


@dataclass(frozen=True)
class ReportContext:
    """What every report of an audit states, whether or not trials ran."""

    #: The audited mechanism's name.
    mechanism: str
    #: The claim under test (:class:`privaudit.audit.claim.Claim`).
    claim: Claim
    #: 1 - alpha.
    confidence: float
    #: The neighbouring pair's description.
    pair: dict
    #: The gray-box block (``checked``, ``violation``, ``families``).
    graybox: dict
    #: Runs per side of the selection split.
    selection_trials: int
    #: Runs per side of the evaluation split.
    evaluation_trials: int
    #: ``"secure"`` or ``"seeded-insecure"``.
    rng_mode: str
    #: The perfect-separation cap (``bounds.perfect_separation_cap``).
    resolution: dict
    #: The mechanism is a built-in adapter (see :func:`sharing`).
    self_contained: bool = False


@dataclass(frozen=True)
class RunFacts:
    """How the runs of an audit were drawn and counted (the report's ``method`` block)."""

    #: Runs per side.
    trials: int
    #: Error probability of each one-sided Clopper-Pearson bound.
    alpha_per_bound: float
    #: The scores tried (names, str).
    candidates: list
    batched: bool
    #: A list of int.
    output_shape: list
    #: The float side-channel evidence (``float_attacks.sampler_verdict``).
    float_sampler: dict | None = None
    #: The GDP test's lattice share of alpha (discrete Gaussian noise).
    gdp_lattice: dict | None = None
    #: Why the events were fixed before any run (no selection split), else None.
    fixed_events: str | None = None


@dataclass
class AuditReport:
    """Result of :func:`privaudit.audit.run_audit`."""

    #: ``"violation"`` or ``"no violation found"``.
    verdict: str
    #: The largest eps lower bound valid for the claim (None when only the gray-box check ran).
    epsilon_lower_bound: float | None
    #: The full JSON document (``schemas/audit_report.schema.json``).
    data: dict = field(default_factory=dict)
    #: Wall seconds the audit took: shown to whoever ran it, never written into the report
    #: (a running time grows with the data the mechanism reads: a timing side channel).
    #: Wall seconds of the run, for whoever ran it; not part of ``data``: a report may be shared
    #: (``data["shareable"]``) and a running time is a side channel on the size of the data the mechanism reads.
    runtime_s: float | None = field(default=None, compare=False)

    @property
    def violation(self) -> bool:
        return self.verdict == VIOLATION

    @property
    def exit_code(self) -> int:
        """0 no violation found, 3 violation (CLI convention)."""
        return 3 if self.violation else 0

    def to_dict(self) -> dict:
        """The JSON document: a copy of ``data`` as parsed JSON (numpy numbers as numbers, keys as strings)."""
        return json.loads(json.dumps(self.data, default=json_default))

    def __repr__(self) -> str:
        lb = "n/a" if self.epsilon_lower_bound is None else f"{self.epsilon_lower_bound:.4g}"
        return (f"AuditReport(verdict={self.verdict!r}, epsilon_lower_bound={lb}, "
                f"claimed_epsilon={self.data.get('claimed_epsilon'):.4g})")

    # ------------------------------------------------------------------ builders
    @classmethod
    def _base(cls, context: ReportContext) -> dict:
        c = context
        claim, pair = c.claim, c.pair
        shareable, why = sharing(pair, c.self_contained)
        return {
            "format_version": REPORT_FORMAT_VERSION,
            "software": {"name": "privaudit", "version": __version__},
            "mechanism": c.mechanism,
            "claim": claim_envelope(claim.to_dict(), relation=(pair or {}).get("relation", "substitution"),
                                    rng=c.rng_mode).to_dict(),
            "claimed_epsilon": claim.epsilon,
            "delta": claim.delta,
            "confidence": c.confidence,
            "neighbouring_pair": pair,
            "graybox": c.graybox,
            "selection_trials": c.selection_trials,
            "evaluation_trials": c.evaluation_trials,
            "resolution_limit": c.resolution,
            "rng_mode": c.rng_mode,
            "shareable": shareable,
            "shareable_reason": why,
        }

    @classmethod
    def graybox_only(cls, context: ReportContext, runtime_s: float | None = None) -> "AuditReport":
        """A report whose verdict comes from the gray-box check alone (no trials ran: both
        split sizes are written as 0 whatever ``context`` says)."""
        d = cls._base(replace(context, selection_trials=0, evaluation_trials=0))
        claim, graybox = context.claim, context.graybox
        excess = [f for f in graybox["families"] if f["exceeds"]]
        lb = max((f.get("epsilon_at_change") or 0.0 for f in excess), default=0.0)
        d.update({
            "verdict": VIOLATION, "trials": 0,
            "epsilon_lower_bound": None,
            "method": {"test": "gray-box", "valid_for_claim": ["gray-box"],
                       "description": "pre-noise statistics of D and D' differ by more than the declared "
                                      "sensitivity; no sampling needed"},
            "events": [], "chosen_event": None, "candidates": [],
            "messages": [f"gray-box: {f['name']} changes by L1 {f['l1']} / L2 {f['l2']} (non-finite: "
                         f"{f['non_finite']}), declared L1 {f['declared_l1']} / L2 {f['declared_l2']}"
                         for f in excess]
            + ([f"at the mechanism's noise this pair costs epsilon {lb:.4g} at delta {privacy_param(claim.delta)}"]
               if lb else [])
            + ([f"decided by: the gray-box check, on {pair_words(context.pair)}"] if context.pair.get("inputs") else []),
        })
        return cls(VIOLATION, None, d, runtime_s=runtime_s)

    @classmethod
    def from_events(cls, context: ReportContext, events: list[dict], runs: RunFacts,
                    runtime_s: float | None = None) -> "AuditReport":
        """Build the report from the evaluated event (one, in the direction chosen on the selection split).

        ``epsilon_lower_bound`` is the generic (epsilon, delta) bound, valid for
        every claim. Only when the claim opted in to the GDP test
        (``claim.kind == "gaussian"``) may a GDP-derived epsilon replace it,
        and ``method.epsilon_lower_bound_from`` then says so.

        ``runs.fixed_events``: the events were fixed before any run (the reason, e.g. "the canary's
        known change direction from the public design"), no selection split; each of the
        ``len(events)`` events then has its own share of alpha (Bonferroni) and the best one is reported.
        """
        d = cls._base(context)
        claim, pair, graybox, resolution = context.claim, context.pair, context.graybox, context.resolution
        evaluation_trials, fixed_events = context.evaluation_trials, runs.fixed_events
        alpha_per_bound = runs.alpha_per_bound
        float_sampler, gdp_lattice = runs.float_sampler, runs.gdp_lattice
        eps_generic = max(e["epsilon_lower_bound"] for e in events)
        mu_lb = max(e["mu_lower_bound"] for e in events)
        eps_gdp = B.gdp_eps(mu_lb, claim.delta) if claim.delta > 0 else None
        gaussian_valid = claim.kind == "gaussian"
        if gaussian_valid:  # the GDP test alone decides (a mu-GDP violation covers the (eps, delta) one)
            eps_lb, source = eps_gdp, "gaussian (GDP test, opted in)"
            violated = mu_lb > claim.mu
            test = "gaussian"
        else:
            eps_lb, source = eps_generic, "generic"
            violated = eps_generic > claim.epsilon
            test = "generic"
        violated = violated or graybox["violation"]
        best = max(events, key=lambda e: (e["mu_lower_bound"] if gaussian_valid else e["epsilon_lower_bound"]))
        verdict = VIOLATION if violated else NO_VIOLATION
        msgs = []
        if graybox["violation"]:
            msgs.append("gray-box: a pre-noise statistic changes by more than its declared sensitivity")
        if gaussian_valid and mu_lb > claim.mu:
            msgs.append(f"GDP test (opted in): mu lower bound {mu_lb:.4g} > claimed mu {claim.mu:.4g}: the mechanism "
                        "is not the Gaussian mechanism its claim describes (valid only if the claim is mu-GDP)")
        if eps_lb > claim.epsilon:
            msgs.append(f"epsilon lower bound {eps_lb:.4g} ({source}) > claimed epsilon "
                        f"{privacy_param(claim.epsilon)} at delta {privacy_param(claim.delta)}")
        if float_sampler and float_sampler.get("sampler") in ("numpy_laplace", "numpy_normal"):
            msgs.append(f"float outputs: every checked output of D lies on the lattice of {float_sampler['sampler']} "
                        f"(numpy Generator.{float_sampler['sampler'].split('_')[1]}) plus its count; "
                        f"evidence {float_sampler['evidence']}")
        weak = [f for f in graybox.get("families", []) if f.get("l2") is not None and f.get("declared_l2")
                and f["l2"] < 0.5 * f["declared_l2"]]
        hint = ("" if (pair or {}).get("kind") in ("canary-repeat", "synthetic-repeat")
                else " (e.g. `canary` repeat for statistics pooled over h)")
        statistical = (mu_lb > claim.mu) if gaussian_valid else (eps_generic > claim.epsilon)
        if statistical:  # what a flag means (a gray-box excess alone is exact, not a test)
            msgs.append(flag_meaning(context.confidence, eps_lb, claim.epsilon))
        if best.get("explanation"):
            msgs.append(f"decided by: {best['explanation']}, on {pair_words(pair or {})} "
                        f"({(pair or {}).get('relation', 'substitution')} neighbours)")
        if (pair or {}).get("search"):
            msgs.append(search_message(pair["search"]))
        if (pair or {}).get("warning"):
            msgs.append(f"pair: {pair['warning']}")
        for f in weak:
            msgs.append(f"the pair changes {f['name']} by L2 {f['l2']:.4g}, under half its declared sensitivity "
                        f"{f['declared_l2']:.4g}: this audit cannot reach the claim; try a stronger pair{hint}")
        cap = resolution["epsilon_gaussian"] if gaussian_valid and "epsilon_gaussian" in resolution else resolution["epsilon"]
        limits = [c for c in (resolution.get("epsilon"), resolution.get("epsilon_gaussian")) if c]
        if eps_lb is not None and any(abs(eps_lb - c) <= 1e-9 * max(1.0, c) for c in limits):
            msgs.append(f"the bound {eps_lb:.4g} equals the resolution limit: the evaluation runs of D and D' were "
                        f"perfectly separated, so {evaluation_trials} runs per side cannot prove more; more "
                        "trials would give a larger bound.")
        can_refute = cap > claim.epsilon
        if not violated:
            msgs.append(f"no violation found, which does not show the mechanism is private: {evaluation_trials} "
                        f"evaluation runs per side can prove at most {cap:.3g} ({test} test), and only when the "
                        "outputs of D and D' never overlap; a weaker leak needs more runs (below), and events "
                        f"rarer than about {resolution['min_detectable_probability']:.2g} are invisible.")
        if not violated and eps_lb is not None and can_refute:
            msgs.append(below_claim_message(eps_lb, claim.epsilon, evaluation_trials, claim.delta, context.confidence))
        if not can_refute:
            msgs.append(f"the {test} test's resolution {cap:.3g} is not above the claimed epsilon "
                        f"{privacy_param(claim.epsilon)}: this audit could not have refuted the claim at this run count "
                        "(run more trials)")
        d.update({
            "verdict": verdict, "trials": runs.trials,
            "epsilon_lower_bound": eps_lb,
            "method": {
                "test": test,
                "resolution_epsilon": cap,
                "can_refute": bool(can_refute),
                "valid_for_claim": ["generic", "gaussian"] if gaussian_valid else ["generic"],
                "epsilon_lower_bound_from": source,
                "bounds": "one-sided Clopper-Pearson",
                "selection": ("cross-fitted: scores fitted on one half of the selection split, (score, threshold, "
                              "direction) chosen on the other half, counted on an independent evaluation split"
                              if fixed_events is None else
                              f"none: every event was fixed before any run ({fixed_events}); all runs are "
                              "evaluation runs"),
                "bonferroni": ({"events": 1, "bounds_per_event": 2, "alpha_per_bound": alpha_per_bound,
                                "why": "the claim is symmetric in (D, D'), so one event in the direction chosen "
                                       "on the selection split tests it"} if fixed_events is None else
                               {"events": len(events), "bounds_per_event": 2, "alpha_per_bound": alpha_per_bound,
                                "why": "each event fixed in advance gets alpha / (2 x events) per bound; the best "
                                       "is reported"}),
                "generic": {"epsilon_lower_bound": eps_generic, "valid": True,
                            "formula": "ln((CP_L(TPR) - delta) / CP_U(FPR))"},
                "gaussian": {"mu_lower_bound": mu_lb, "epsilon_lower_bound": eps_gdp, "valid": gaussian_valid,
                             "claimed_mu": claim.mu,
                             "meaning": ("opted in: the claim is read as mu-GDP (a post-processing of continuous "
                                         "Gaussian noise); a mu lower bound above the claimed mu is a violation"
                                         if gaussian_valid else
                                         "not opted in: shown for information only, not a test of this claim "
                                         "(rho-zCDP or (epsilon, delta)-DP does not imply mu-GDP)"),
                             "formula": "mu = Phi^-1(1 - FPR_UB) - Phi^-1(FNR_UB), eps from the GDP privacy profile",
                             **({"lattice_approximation": gdp_lattice} if gdp_lattice else {})},
                "batched": runs.batched, "output_shape": runs.output_shape,
            },
            "float_sampler": float_sampler,
            "events": events,
            "chosen_event": {k: v for k, v in best.items() if k != "roc"},
            "candidates": runs.candidates,
            "messages": msgs,
        })
        return cls(verdict, eps_lb, d, runtime_s=runtime_s)

    # ------------------------------------------------------------------ output
    def validate(self) -> dict:
        """The document (:meth:`to_dict`), checked against its schema.

        Raises
        ------
        ArtifactError
            The document breaks the schema, or lacks ``shareable`` (optional on
            reading older reports, always written).
        """
        if "shareable" not in self.data:  # optional on reading (older reports), always written
            raise ArtifactError("audit report (internal error: nothing was written): $: 'shareable' is a "
                                "required property of a report written now")
        return REPORT_FORMAT.check_write(self.to_dict())

    def write_json(self, path: str | Path) -> Path:
        """Validate and write the report atomically (:meth:`ArtifactFormat.dump`); returns the path.

        Raises
        ------
        ArtifactError
            As :meth:`validate` (nothing is written).
        """
        return REPORT_FORMAT.dump(self.validate(), path)

    def plot(self, path: str | Path) -> Path:
        """PNG of the trade-off (:func:`privaudit.audit.plotting.plot_report`): the region the
        claim forbids, the chosen event's observed and certified points, its empirical curve and
        the curve of the test that gave the headline bound, on linear axes and as a log-log ROC."""
        return plot_report(self.data, self.verdict, self.epsilon_lower_bound, path)


def load_report(path: str | Path) -> dict:
    """Read and check a report written by :meth:`AuditReport.write_json`.

    Raises
    ------
    ArtifactError
        Unreadable, unknown format version, or schema errors.
    """
    return REPORT_FORMAT.read(path)
