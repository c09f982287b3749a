"""The pipeline's ``summary.json``: evaluation, diagnostics, the audit's outcome, what may leave.

``report.md`` and the stdout table are rendered from the summary by
:mod:`privaudit.pipeline.render`.

Nothing here reads the private logs: every input is already public
(the release manifest, DP policies, values on a public MDP) or, for the
audit, which runs on a synthetic pair built from the spec (see
docs/pipeline.md, "What may leave the building").
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from privaudit import FORMAT_VERSION, __version__
from privaudit.core import registry
from privaudit.core.artifact import ArtifactFormat, Guarantee
from privaudit.core.envelope import as_envelope, report_claim
from privaudit.mdp.registry import MDP_REGISTRY
from privaudit.mdp.tabular import evaluate_policy, value_iteration
from privaudit.pipeline.figures import plot_values, values_figure  # noqa: F401 - the values figure lives there
from privaudit.pipeline.values import upgrade_policy_entry
from privaudit.release.manifest import ReleaseManifest

SUMMARY_KIND = "privaudit-pipeline-summary"
#: summary.json on disk: its schema, format version and kind (the common artifact base).
SUMMARY_FORMAT = ArtifactFormat("pipeline summary", "summary", FORMAT_VERSION, kind=SUMMARY_KIND)
#: Files and folders of the output that may be shared outside the hospital.
MAY_LEAVE = ("release/", "policies/", "summary.json", "report.md", "figures/values.png")
#: Files and folders that must stay with the data holder.
MUST_NOT_LEAVE = ("private/",)


def learner_diagnostics(Q: np.ndarray, V0: np.ndarray, table: np.ndarray, mdp=None,
                        terminal_states=(), d0: np.ndarray | None = None) -> dict:
    """How much of a pessimistic learner's policy rests on learned values.

    A pessimistic learner (DP-APVI) clips Q_h(s, a) to 0 wherever its penalty
    exceeds the estimate; where *every* action is 0 its greedy policy is only
    the tie-break (for DP-APVI: the action with the largest noisy visit
    count, i.e. an imitation of the behaviour). This reports how often that
    happens, so a value above the behaviour's is not mistaken for learning.

    Parameters
    ----------
    Q : ndarray, shape (H, S, A)
        The learner's pessimistic Q-values (a DP output: post-processing of the release).
    V0 : ndarray, shape (S,)
        The learner's pessimistic value at step 0.
    table : ndarray, shape (H, S, A)
        The learned policy.
    mdp : TabularMDP, optional
        A public MDP: then the share is weighted by the learned policy's own
        state occupancy on it.
    terminal_states : sequence of int
        Excluded from the share (nothing is decided there).
    d0 : ndarray, shape (S,), optional
        The start distribution of the certified value, released or public
        (``privaudit.pipeline.values.start_distribution``); None: the MDP's
        d0 when ``mdp`` is given.

    Returns
    -------
    dict
        ``certified_value`` (d0 . V0, or None without a start distribution),
        ``fallback_share`` (in [0, 1]) and ``fallback_weighting`` (how the
        share was weighted).
    """
    H, S, _ = Q.shape
    fallback = Q.max(-1) <= 0.0                       # (H, S): every action clipped to 0
    live = np.ones(S, dtype=bool)
    live[list(terminal_states)] = False
    if d0 is None and mdp is not None:
        d0 = mdp.d0
    cert = None if d0 is None else float(np.asarray(d0, dtype=np.float64) @ V0)
    if mdp is None:
        share = float(fallback[:, live].mean()) if live.any() else 0.0
        return {"certified_value": cert, "fallback_share": share,
                "fallback_weighting": "uniform over non-terminal (h, s)"}
    d = mdp.d0 * live
    num = den = 0.0
    for h in range(H):                                 # forward occupancy of the learned policy
        num += float(d[fallback[h]].sum())
        den += float(d.sum())
        flow = d[:, None] * table[h]                   # (S, A)
        d = (mdp.transition_operator(h).T @ flow.ravel()) * live  # sum_{s,a} flow P_h(. | s, a)
    return {"certified_value": cert, "fallback_share": num / den if den > 0 else 0.0,
            "fallback_weighting": "the learned policy's own state occupancy on the MDP"}


def evaluate_all(mdp, tables: dict, name: str | None = None) -> dict:
    """Exact values of the learned policies on a known MDP, with v* and reference policies.

    Parameters
    ----------
    mdp : TabularMDP
    tables : dict[str, ndarray of shape (H, S, A)]
        Policy name -> pi_h(a | s).
    name : str, optional
        How the MDP was named by the user (``icu-sepsis`` or a file path).

    Returns
    -------
    dict
        ``mdp``, ``source``, ``horizon``, ``optimal_value`` (v*, value
        iteration), ``references`` (e.g. ICU-Sepsis ``clinicians``,
        ``uniform``; empty when the MDP has none), ``values`` (name -> v^pi).
        Values are expected undiscounted returns over H steps (for
        ICU-Sepsis: the probability of survival within H = 20 steps).
    """

    _, _, optimal = value_iteration(mdp)
    entry = MDP_REGISTRY.get(mdp.name)
    refs = entry.references(mdp) if entry is not None and entry.references is not None else None
    return {"mdp": mdp.name, "source": name, "horizon": mdp.horizon, "optimal_value": float(optimal),
            "references": {k: float(v) for k, v in (refs or {}).items()},
            "values": {n: float(evaluate_policy(mdp, t)) for n, t in tables.items()}}


def audit_summary(report) -> dict:
    """The audit's public outcome for ``summary.json`` (no canary cells, no unit facts)."""
    d = report.to_dict()
    res = d.get("resolution_limit", {})
    claim = report_claim(d)
    return {
        "mechanism": d["mechanism"],
        "claim": {"rho": claim.get("rho"), "epsilon": claim["epsilon"], "delta": claim["delta"],
                  "kind": claim["kind"]},
        "verdict": d["verdict"],
        "epsilon_lower_bound": d.get("epsilon_lower_bound"),
        "confidence": d["confidence"],
        "trials_per_side": d.get("trials", 0),
        "evaluation_trials_per_side": d.get("evaluation_trials", 0),
        "test": d["method"]["test"],
        "epsilon_lower_bound_from": d["method"].get("epsilon_lower_bound_from", "generic"),
        "pair": d["neighbouring_pair"].get("construction", d["neighbouring_pair"].get("kind")),
        "graybox": {"checked": bool(d["graybox"]["checked"]), "violation": bool(d["graybox"]["violation"])},
        "resolution_epsilon": d["method"].get("resolution_epsilon", res.get("epsilon")),
        "can_refute": d["method"].get("can_refute", True),
        "report": "audit/audit_report.json",
        "figure": "figures/audit_tradeoff.png",
    }


@dataclass(frozen=True)
class ValueFacts:
    """The value facts of ``summary.json`` besides the exact values (all post-processing of DP outputs).

    Attributes
    ----------
    diagnostics : dict, optional
        Per policy, :func:`learner_diagnostics`.
    certified : dict, optional
        Per policy, ``privaudit.pipeline.values.certified_entries``: its certified value.
    behaviour : dict, optional
        The DP estimate of the clinicians' value (``behaviour_value``; None when its share is 0).
    start_distribution : dict, optional
        The d0 of the certified values: ``source`` and ``what``.
    figure_drawn : bool, optional
        Whether ``figures/values.png`` was drawn (default: an MDP is known).
    """

    diagnostics: dict | None = None
    certified: dict | None = None
    behaviour: dict | None = None
    start_distribution: dict | None = None
    figure_drawn: bool | None = None


def build_summary(*, spec, manifest: ReleaseManifest, guarantee: dict, policies: dict, evaluation: dict | None,
                  audit: dict | None, stationary: bool, seeded: bool, values: ValueFacts | None = None,
                  config: dict | None = None, skipped: dict | None = None) -> dict:
    """The ``summary.json`` document (schema ``schemas/summary.schema.json``).

    Holds no seed, no count of rows, episodes or units, no timing (a
    runtime grows with the private data's size), no path outside the output
    folder. ``values`` (:class:`ValueFacts`) adds each policy's certified
    value and diagnostics, the DP estimate of the clinicians' value and the
    start distribution of the certified values. ``config`` is the run's
    public choices (``PipelineConfig.public``: no path, no seed), written
    under ``config`` when given. ``skipped`` (name -> reason, public: the
    spec or the engine decides it) lists the learners the run did not train,
    written under ``not_trained``.
    """
    values = values or ValueFacts()
    diagnostics, certified, values_figure_drawn = values.diagnostics, values.certified, values.figure_drawn
    pol_entries = []
    for name, pol in policies.items():
        e = {"name": name, "algorithm": pol.algorithm, "path": f"policies/{name}",
             "privacy_part": "release" if registry.get(name).load().reads == "release" else name,
             "value": None, "optimal_value": None, "clinicians_value": None, "gap": None,
             **(certified or {}).get(name, {"certified_value": None, "certified_start": None,
                                           "certificate_held": None, "pessimistic_estimate": None})}
        if evaluation is not None and name in evaluation["values"]:  # absent: placeholder table, not scored
            v = evaluation["values"][name]
            e.update(value=v, optimal_value=evaluation["optimal_value"],
                     clinicians_value=evaluation["references"].get("clinicians"),
                     gap=evaluation["optimal_value"] - v)
        if diagnostics and name in diagnostics:
            e["diagnostics"] = diagnostics[name]
        pol_entries.append(e)
    figures = {}
    if (evaluation is not None) if values_figure_drawn is None else values_figure_drawn:
        figures["values"] = "figures/values.png"
    if audit is not None:
        figures["audit_tradeoff"] = "figures/audit_tradeoff.png"
    fams = manifest.families
    return {
        "format_version": FORMAT_VERSION,
        "kind": SUMMARY_KIND,
        "software": {"name": "privaudit", "version": __version__},
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "dataset_id": spec.dataset_id,
        "spec_hash": spec.hash(),
        "domain": {"H": spec.H, "S": spec.S, "A": spec.A, "stationary": stationary},
        "rng": "seeded-insecure" if seeded else "secure",
        "privacy": guarantee,
        "release": {"path": "release", "manifest": "release/manifest.json", "families": list(fams),
                    "stationary": stationary,
                    "noise_scale": {f: float(p.noise_scale) for f, p in fams.items()}},
        "policies": pol_entries,
        "not_trained": [{"name": n, "reason": why} for n, why in (skipped or {}).items()],
        "evaluation": evaluation,
        "behaviour_value": values.behaviour,
        "start_distribution": values.start_distribution,
        "audit": audit,
        "artifacts": {
            "summary": "summary.json", "report": "report.md", "release": "release",
            "policies": {p["name"]: p["path"] for p in pol_entries}, "figures": figures,
            "audit_report": None if audit is None else "audit/audit_report.json",
            "private_log": "private/local-log.json",
        },
        "sharing": _sharing(audit, seeded),
        **({} if config is None else {"config": config}),
    }


def _sharing(audit: dict | None, seeded: bool = False) -> dict:
    """Which outputs may leave the building: none at all when the audit found a
    violation, or when the noise came from a user seed (anyone who knows the
    seed can subtract the noise: such outputs are for tests only)."""
    # the audit runs on a synthetic pair built from the spec: nothing of it depends on the logs
    may = list(MAY_LEAVE) + (["figures/audit_tradeoff.png", "audit/"] if audit else [])
    if seeded or (audit is not None and audit["verdict"] == "violation"):
        return {"may_leave": [], "must_not_leave": may + list(MUST_NOT_LEAVE)}
    return {"may_leave": may, "must_not_leave": list(MUST_NOT_LEAVE)}


def write_summary(summary: dict, path: Path) -> Path:
    """Validate against ``schemas/summary.schema.json`` and write atomically (:data:`SUMMARY_FORMAT`).

    Raises
    ------
    ArtifactError
        If the document breaks the schema (a bug: nothing half-valid is written).
    """
    return SUMMARY_FORMAT.write(summary, path)


def summary_guarantee(summary: dict) -> Guarantee:
    """The composed guarantee of a ``summary.json`` document in the envelope's shape, whichever shape it was
    written in (``privaudit.core.envelope.as_envelope``; before the envelope, ``composition``, ``split`` and
    ``parts`` stood at the top of ``privacy`` and ``rng`` only beside it). The file is not rewritten."""
    return as_envelope(summary["privacy"], rng=summary["rng"])


def load_summary(path: str | Path) -> dict:
    """Read a ``summary.json`` and check its format version and schema (:data:`SUMMARY_FORMAT`).

    Summaries written before the ``config`` field existed load as they are (it is optional). Summaries
    written before ``pessimistic_estimate`` existed are read as today's
    (``pipeline.values.upgrade_policy_entry``: a DP-APVI number they called certified is a pessimistic estimate).

    Raises
    ------
    ArtifactError
        Unreadable, another format version, or schema errors.
    """
    doc = SUMMARY_FORMAT.read(path)
    doc["policies"] = [upgrade_policy_entry(p) for p in doc["policies"]]
    return doc
