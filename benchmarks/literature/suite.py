"""The benchmark suite: each literature mechanism with its claim, its input pairs and its published bounds,
and the audit protocol run on it through privaudit's public Python API.

Input pairs: the StatDP patterns (Ding et al. 2018, section on input generation), D = (1, ..., 1) and D'
one answer below, one above, one above and the rest below, one below and the rest above, half above and
half below, all above, all below, and the "x shape" (1, ..., 1, 0, ..., 0) against (0, ..., 0, 1, ..., 1);
every answer moves by at most 1 (each query has sensitivity 1, neighbouring datasets move all of them).
Histograms (one record added or removed changes one bin) get the first two only, as add/remove pairs.

Protocol (:func:`audit_case`), valid by independence: a search stage audits every pair with ``n_search``
runs per side and picks the pair with the largest bound; a fresh audit of that pair with ``n_audit`` runs
per side, independent of the search, decides the verdict (so its confidence 0.95 holds as stated: nothing
of the search is counted in it). privaudit has no input search of its own yet (issue 30, item 2): this is
what a user does by hand with ``input_pair`` and ``run_audit``.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Callable

from privaudit.audit import AuditSettings, Claim, input_pair, run_audit

from . import floats, noisy_max, svt

EPS = 0.1  # every mechanism claims epsilon 0.1, as in Bichsel et al. 2021's evaluation
CLAIM = Claim.from_epsilon(EPS, 0.0)
GAUSS_CLAIM = Claim.from_rho(1 / (2 * floats.SIGMA ** 2), 1e-6)


def statdp_patterns(m: int, one_differ: bool = False) -> dict[str, tuple[list[float], list[float]]]:
    """The StatDP input patterns for ``m`` queries, name -> (D, D')."""
    ones, h = [1.0] * m, m // 2
    pats = {"one_below": (ones, [0.0] + ones[1:]), "one_above": (ones, [2.0] + ones[1:])}
    if not one_differ:
        pats.update({
            "one_above_rest_below": (ones, [2.0] + [0.0] * (m - 1)),
            "one_below_rest_above": (ones, [0.0] + [2.0] * (m - 1)),
            "half_half": (ones, [2.0] * h + [0.0] * (m - h)),
            "all_above": (ones, [2.0] * m),
            "all_below": (ones, [0.0] * m),
            "x_shape": ([1.0] * h + [0.0] * (m - h), [0.0] * h + [1.0] * (m - h)),
        })
    return pats


def count_pairs(values) -> dict[str, tuple[float, float]]:
    """Pairs (x, x + 1) of a count, named "x vs x+1"."""
    return {f"{x:g} vs {x + 1:g}": (float(x), float(x + 1)) for x in values}


@dataclass(frozen=True)
class Case:
    """One mechanism of the suite.

    ``status`` "broken" or "correct"; ``twin``: the case of the other status it pairs with; ``main_pair``:
    the pair of the false-alarm study (the pattern of DP-Sniper's witness where it has one)."""

    name: str
    family: str
    fn: Callable
    status: str
    twin: str
    pairs: dict
    main_pair: str
    claim: Claim = CLAIM
    relation: str = "substitution"


def _cases() -> list[Case]:
    q5, q10, hist = statdp_patterns(5), statdp_patterns(10), statdp_patterns(5, one_differ=True)
    counts = count_pairs([0, 1, 7])
    rnm, svt_ = "report-noisy-max", "sparse vector"
    return [
        Case("rnm_laplace", rnm, noisy_max.rnm_laplace, "correct", "rnm_laplace_value", q5,
             "one_below_rest_above"),
        Case("rnm_laplace_value", rnm, noisy_max.rnm_laplace_value, "broken", "rnm_laplace_fresh_value", q5,
             "all_above"),
        Case("rnm_laplace_fresh_value", rnm, noisy_max.rnm_laplace_fresh_value, "correct", "rnm_laplace_value",
             q5, "all_above"),
        Case("rnm_exponential", rnm, noisy_max.rnm_exponential, "correct", "rnm_exponential_value", q5,
             "one_below_rest_above"),
        Case("rnm_exponential_value", rnm, noisy_max.rnm_exponential_value, "broken",
             "rnm_exponential_fresh_value", q5, "all_above"),
        Case("rnm_exponential_fresh_value", rnm, noisy_max.rnm_exponential_fresh_value, "correct",
             "rnm_exponential_value", q5, "all_above"),
        Case("hist_laplace", "histogram", noisy_max.hist_laplace, "broken", "hist_discrete_laplace", hist,
             "one_below", relation="add/remove"),
        Case("hist_wrong_scale", "histogram", noisy_max.hist_wrong_scale, "broken", "hist_discrete_laplace",
             hist, "one_below", relation="add/remove"),
        Case("hist_discrete_laplace", "histogram", noisy_max.hist_discrete_laplace, "correct", "hist_wrong_scale",
             hist, "one_below", relation="add/remove"),
        Case("svt1", svt_, svt.svt1, "correct", "svt4", q10, "x_shape"),
        Case("svt2", svt_, svt.svt2, "correct", "svt6", q10, "x_shape"),
        Case("svt3", svt_, svt.svt3, "broken", "svt_fresh_value", q10, "half_half"),
        Case("svt_fresh_value", svt_, svt.svt_fresh_value, "correct", "svt3", q10, "half_half"),
        Case("svt4", svt_, svt.svt4, "broken", "svt1", q10, "half_half"),
        Case("svt5", svt_, svt.svt5, "broken", "svt1", q10, "half_half"),
        Case("svt6", svt_, svt.svt6, "broken", "svt2", q10, "x_shape"),
        Case("numerical_svt", svt_, svt.numerical_svt, "correct", "numerical_svt_small_noise", q10, "all_above"),
        Case("numerical_svt_float", svt_, svt.numerical_svt_float, "broken", "numerical_svt", q10, "all_above"),
        Case("numerical_svt_small_noise", svt_, svt.numerical_svt_small_noise, "broken", "numerical_svt", q10,
             "all_above"),
        Case("float_laplace", "float", floats.float_laplace, "broken", "discrete_laplace", counts, "0 vs 1"),
        Case("discrete_laplace", "float", floats.discrete_laplace, "correct", "float_laplace", counts, "0 vs 1"),
        Case("float_gaussian", "float", floats.float_gaussian, "broken", "discrete_gaussian", counts, "0 vs 1",
             claim=GAUSS_CLAIM),
        Case("discrete_gaussian", "float", floats.discrete_gaussian, "correct", "float_gaussian", counts,
             "0 vs 1", claim=GAUSS_CLAIM),
    ]


CASES = {c.name: c for c in _cases()}


def _named(case: Case) -> Callable:
    fn = functools.partial(case.fn)
    fn.__name__ = case.name  # the report's mechanism name
    return fn


def audit_pair(case: Case, pair_name: str, trials: int, seed: int | None,
               selection_fraction: float | None = None) -> tuple[object, float]:
    """One privaudit audit of ``case`` on one named pair: (AuditReport, CPU seconds of the audit).

    ``selection_fraction``: ``AuditSettings.selection_fraction`` (None: privaudit's default split)."""
    d, dp = case.pairs[pair_name]
    pair = input_pair(d, dp, relation=case.relation)
    t = time.process_time()
    rep = run_audit(_named(case), pair=pair, claim=case.claim, trials=int(trials), seed=seed, progress=False,
                    settings=AuditSettings(n_jobs=1, selection_fraction=selection_fraction))
    return rep, time.process_time() - t


def audit_case(case: Case, n_search: int, n_audit: int, seed: int, selection_fraction: float | None = None) -> dict:
    """Search the pairs at ``n_search`` runs each (skipped when 0: the case's main pair), then audit the best
    pair afresh at ``n_audit`` runs per side (with ``selection_fraction``, see :func:`audit_pair`). Returns
    the row of the results table."""
    search = {}
    if n_search and len(case.pairs) > 1:
        for k, name in enumerate(case.pairs):
            rep, _ = audit_pair(case, name, n_search, seed * 1000 + k)
            search[name] = round(float(rep.epsilon_lower_bound), 4)
        chosen = max(search, key=search.get)
    else:
        chosen = case.main_pair
    rep, cpu = audit_pair(case, chosen, n_audit, seed * 1000 + 999, selection_fraction)
    ev = rep.data.get("chosen_event") or {}
    return {"case": case.name, "family": case.family, "status": case.status, "claim_epsilon": case.claim.epsilon,
            "pair": chosen, "inputs": rep.data["neighbouring_pair"].get("inputs", chosen),
            "verdict": rep.verdict, "epsilon_lower_bound": round(float(rep.epsilon_lower_bound), 4),
            "candidate": ev.get("candidate"), "explanation": ev.get("explanation"),
            "cpu_s": round(cpu, 1), "runs_per_side": n_audit + n_search * len(search), "search": search,
            "selection_fraction": selection_fraction}


def false_alarms(case: Case, seeds: int, trials: int) -> dict:
    """Audits of ``case`` on its main pair over ``seeds`` seeds: alarms and the largest eps_lb / claimed eps."""
    alarms, worst, cpu = 0, 0.0, 0.0
    for s in range(seeds):
        rep, c = audit_pair(case, case.main_pair, trials, s)
        alarms += bool(rep.violation)
        worst = max(worst, float(rep.epsilon_lower_bound) / case.claim.epsilon)
        cpu += c
    return {"case": case.name, "pair": case.main_pair, "alarms": alarms, "seeds": seeds, "trials": trials,
            "max_ratio": round(worst, 3), "cpu_s_per_audit": round(cpu / max(seeds, 1), 2)}


def tiny_check(case: Case, trials: int = 2000, seed: int = 0) -> object:
    """One audit of ``case`` on its main pair at ``trials`` runs (the test's smoke run)."""
    return audit_pair(case, case.main_pair, trials, seed)[0]


__all__ = ["CASES", "Case", "audit_case", "false_alarms", "statdp_patterns", "tiny_check"]
