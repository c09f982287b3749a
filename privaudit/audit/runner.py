"""Run an audit: sample a mechanism on D and D', attack, bound epsilon.

Protocol (docs/audit.md, Background; the rules it numbers are followed as noted):

1. Gray-box check (zero samples): when the mechanism exposes its pre-noise
   statistics, their L1/L2 change between D and D' is compared with the
   declared sensitivity; an excess is a violation finding.
2. Selection split: ``n_sel`` runs per side (10% of the trials up to 10^5,
   rising to 50% at 10^6, ``choice.default_fraction``; at least
   min(30%, 2000)), cross-fitted: the candidate scores of
   :mod:`privaudit.audit.attacks` are *fitted* on its first half and one
   (candidate, threshold, direction) is *chosen* on its second half, by the
   bound that half itself proves simultaneously over everything tried
   ("+": event {score > t} supports D'; "-": {score <= t} supports D). A
   lookup table (``output_identity``) fitted and chosen on the same runs
   would win the choice by memorising them and then score nothing.
3. Evaluation split: ``trials - n_sel`` fresh runs per side, independent of
   the selection split. Only the chosen event is counted. The claim is
   symmetric (substitution neighbours in either order; the mu-GDP trade-off
   curve is symmetric), so one event in either direction tests it: the two
   mirror-image directions share one choice, and each of the two one-sided
   Clopper-Pearson bounds gets alpha / 2 (rules 1, 2). Counts are integers,
   no randomized tie-breaking (rules 4, 5).
4. eps_lb = ln((CP_L(TPR) - delta) / CP_U(FPR)): the generic test, valid for
   every (eps, delta) claim and the default. With the Gaussian opt-in
   (``Claim.kind == "gaussian"``) also mu_lb = Phi^-1(1 - FPR_UB) -
   Phi^-1(FNR_UB) and its eps at delta, valid only if the mechanism is
   mu-GDP (a post-processing of a continuous Gaussian mechanism; rho-zCDP
   alone does not imply sqrt(2 rho)-GDP). Verdict ``violation`` when a valid
   bound exceeds the claim, else ``no violation found`` with the resolution
   limit (rule 7).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np
import polars as pl
from tqdm import tqdm

from privaudit.audit import bounds as B
from privaudit.audit.attacks import Candidate, fit_candidates, fixed_candidate
from privaudit.audit.binned import binned_candidates
from privaudit.audit.choice import MAX_TRIALS, choose_event, min_trials, selection_size
from privaudit.audit.claim import Claim
from privaudit.audit.float_attacks import sampler_verdict
from privaudit.audit.explain import cell_namer, describe_event
from privaudit.audit.graybox import graybox_check, sampler_hint
from privaudit.audit.learned import learned_candidates
from privaudit.audit.mechanisms.dp_apvi import DPAPVIMechanism
from privaudit.audit.mechanisms.dp_pbb import DPPBBMechanism
from privaudit.audit.mechanisms.dp_vapvi import DPVAPVIMechanism
from privaudit.audit.mechanisms.release import ReleaseMechanism
from privaudit.audit.neighbours import make_pair
from privaudit.audit.pairs import NeighbouringPair
from privaudit.audit.protocol import FileFunction, is_batched
from privaudit.audit.report import AuditReport, ReportContext, RunFacts
from privaudit.audit.sampling import CHUNK_CELLS, Sampler, pair_unchanged_warning
from privaudit.audit.search import candidate_pairs, search_block
from privaudit.core.errors import UsageError


def default_canary(mechanism) -> str:
    """The canary strategy an audit of ``mechanism`` uses when none is given.

    ``synthetic`` for the built-in tabular release and DP-APVI adapters
    (``synthetic-repeat`` when run with pooled, stationary, counts): D =
    logs + u*, D' = logs + v* with u*, v* built from the spec alone
    (:func:`privaudit.audit.synthetic_pairs.synthetic_pair`), a pair that reaches
    the declared sensitivity whatever the logs hold (a real unit removed by
    ``rare`` may have fewer than k episodes or short ones, and ``rare``
    spreads over H cells, reaching only a 1/sqrt(H) share of the pooled
    sensitivity). ``rare`` otherwise (user mechanisms, whose statistics the
    spec does not describe). DP-VAPVI: ``synthetic`` too, with the two
    step-(H-1) features set to orthogonal unit vectors
    (``DPVAPVIMechanism.synthetic_boundary_pair``), which attains the
    declared Frobenius sensitivity the spec's own features may not reach.
    DP-PBB: ``synthetic``, with each unit's transitions spread over cells at
    the per-cell cap (``DPPBBMechanism.make_pair``), which attains the
    declared sensitivity of its capped visits and start counts.
    See ``privaudit.audit.neighbours`` and docs/audit.md.
    """

    if isinstance(mechanism, (ReleaseMechanism, DPAPVIMechanism)):
        return "synthetic-repeat" if mechanism.stationary else "synthetic"
    if isinstance(mechanism, DPVAPVIMechanism):  # features at their norm bound: attains sqrt(2) k
        return "synthetic"
    if isinstance(mechanism, DPPBBMechanism):  # units spread over cells at the cap: attains the capped L2
        return "synthetic"
    return "rare"


@dataclass(frozen=True)
class AuditSettings:
    """The less common settings of :func:`run_audit` (the defaults are the CLI's).

    Attributes
    ----------
    confidence : float
        1 - alpha, the probability that a reported lower bound is valid, in [0.5, 1).
    selection_fraction : float or None
        Share of the trials that fit and choose the event, in (0, 1); None:
        :func:`~privaudit.audit.choice.selection_size` (10% up to 10^5 runs per side, rising to 50% at
        10^6: :func:`~privaudit.audit.choice.default_fraction`; at least min(30%, 2000) runs).
    n_jobs : int or None
        Worker processes for unbatched mechanisms (default: CPU count).
    graybox : bool
        Run the gray-box sensitivity check when the mechanism supports it.
    stop_on_graybox : bool
        Skip the trials when the gray-box check already found a violation.
    mechanism_name : str, optional
        Shown in the report (default: the mechanism's ``name`` or ``__name__``).
    canary : {"rare", "repeat", "random", "synthetic", "synthetic-repeat"} or None
        Canary strategy when :func:`run_audit` is given no pair; None: :func:`default_canary`
        (``synthetic`` / ``synthetic-repeat`` for a built-in release or DP-APVI, per step /
        pooled; else ``rare``).
    """

    confidence: float = 0.95
    selection_fraction: float | None = None
    n_jobs: int | None = None
    graybox: bool = True
    stop_on_graybox: bool = True
    mechanism_name: str | None = None
    canary: str | None = None


@dataclass(frozen=True)
class FixedEvents:
    """Events fixed before any run, from public facts only, and why (recorded in the report).

    Attributes
    ----------
    events : sequence of (name, fn, threshold, direction)
        ``fn(outputs: (n, *shape)) -> (n,)``; direction ``"+"`` (event
        {score > t} supports D') or ``"-"`` ({score <= t} supports D).
    reason : str
        Why the events are fixed (e.g. the projection on a canary's known
        change, threshold at the design's midpoint).
    """

    events: Sequence[tuple]
    reason: str


def run_audit(mechanism: Callable, logs: pl.DataFrame | None = None, spec=None, *, claim: Claim,
              pair: NeighbouringPair | None = None, trials: int = 100_000, seed: int | None = None,
              progress: bool | None = None, scores: Sequence[tuple[str, Callable]] = (),
              fixed: FixedEvents | str | None = None, settings: AuditSettings | None = None,
              search=None) -> AuditReport:
    """Audit ``mechanism`` against ``claim`` on a neighbouring pair.

    Parameters
    ----------
    mechanism : callable
        ``fn(logs, rng) -> ndarray`` (fixed shape), optionally batched with
        keyword ``n_runs`` and the hooks of :mod:`privaudit.audit.protocol`.
    logs : polars.DataFrame, optional
        D (standard schema); needed unless ``pair`` is given.
    spec : DomainSpec, optional
        Needed to build a canary.
    claim : Claim
        The DP claim under test.
    pair : NeighbouringPair, optional
        An explicit pair (else a canary pair of strategy ``settings.canary``).
    trials : int
        Runs per side (selection + evaluation), >= 20.
    seed : int or None
        Seeds the audit's generator (OS entropy when None).
    progress : bool or None
        Progress bar on stderr (default: only when stderr is a terminal).
    scores : sequence of (name, fn)
        User scores ``fn(outputs: (n, *shape)) -> (n,)``, larger = more like D'.
    fixed : FixedEvents, "design" or None
        Events fixed before any run (:class:`FixedEvents`). No selection
        split then: all ``trials`` runs per side are evaluation runs, and each
        of the J events gets alpha / (2 J) per bound (Bonferroni); the best is
        reported. Valid because nothing about the events depends on the runs
        they are counted on (the split exists only to make a data-chosen event
        independent of its evaluation). ``"design"``: the mechanism's
        ``design_events(pair)`` after ``prepare`` (``(events, reason)``;
        ``(None, None)`` falls back to the selection split), e.g. DP-PBB's
        projection on its exact change.
    settings : AuditSettings, optional
        Confidence, selection share, workers, gray-box switches, report name, canary strategy.
    search : iterable of NeighbouringPair or (D, D') tuples, optional
        Input search (:mod:`privaudit.audit.search`; e.g. ``statdp_pairs(n)``),
        instead of ``pair``: each candidate gets its own selection split, the
        pair whose choice half proves the largest bound wins, and only then is
        the evaluation split drawn, on it alone (so the bound needs no
        correction for the number of pairs). Costs ``(K - 1) x`` the selection
        runs on top of ``trials`` per side; recorded in
        ``neighbouring_pair.search``. A gray-box finding on a candidate (the
        first, in order) fixes the pair. Not with ``pair`` or ``fixed``.

    Returns
    -------
    AuditReport

    Raises
    ------
    UsageError
        Bad trials / confidence / fractions, no logs and no pair, a mechanism
        whose output shape changes, ``search`` with ``pair`` or ``fixed`` or
        not a list of pairs (:func:`privaudit.audit.search.candidate_pairs`).
    """
    t_start = time.perf_counter()
    cfg = settings or AuditSettings()
    confidence, selection_fraction = cfg.confidence, cfg.selection_fraction
    if not isinstance(trials, (int, np.integer)) or not 20 <= trials <= MAX_TRIALS:
        raise UsageError(f"`trials` must be an integer in [20, {MAX_TRIALS:,}] (every output is kept in memory). "
                         f"Found {trials!r}.")
    if not 0.5 <= confidence < 1:
        raise UsageError(f"`confidence` must lie in [0.5, 1). Found {confidence}.")
    if selection_fraction is not None and not 0 < selection_fraction < 1:
        raise UsageError(f"`selection_fraction` must lie in (0, 1). Found {selection_fraction}.")
    rng = np.random.default_rng(seed)
    r_pair, r_sel, r_ev = rng.spawn(3)
    if search is not None:
        if pair is not None or fixed is not None:
            raise UsageError("`search` chooses the pair (and its event) on selection runs: give it without "
                             "`pair` and `fixed`.")
        pairs = candidate_pairs(search)
    else:
        if pair is None:
            canary = cfg.canary or default_canary(mechanism)
            if logs is None or spec is None:
                raise UsageError("an audit needs the logs and the spec (to build a canary) or an explicit pair.")
            maker = getattr(mechanism, "make_pair", None)  # an adapter may aim its canary (e.g. dp-vapvi)
            pair = maker(logs, spec, canary, rng=r_pair) if maker else make_pair(logs, spec, canary, rng=r_pair)
        pairs = [pair]
    mechs = [mechanism.prepare(p.d, p.d_prime) if hasattr(mechanism, "prepare") else mechanism for p in pairs]
    mech, pair = mechs[0], pairs[0]
    name = cfg.mechanism_name or getattr(mechanism, "name", None) or getattr(mechanism, "__name__", repr(mechanism))
    alpha = 1 - confidence
    alpha_b = alpha / 2  # one chosen event (either direction) x (TPR lower, FPR upper)
    fixed = _fixed_events(fixed, mech, pair)
    if fixed is not None:
        alpha_b = alpha / (2 * len(fixed.events))
    n_sel = 0 if fixed is not None else selection_size(int(trials), selection_fraction)
    n_ev = int(trials) - n_sel
    if n_ev < 10 or (fixed is None and n_sel < 20):
        raise UsageError(f"`trials` = {trials} leaves {n_sel} selection and {n_ev} evaluation runs; they need "
                         f">= 20 and >= 10: use at least {min_trials(selection_fraction)} trials.")
    gdp_alpha, lattice = 2 * alpha_b, None  # the GDP joint test's level
    if claim.kind == "gaussian" and hasattr(mech, "gaussian_tv_per_run"):
        # a lattice (discrete) Gaussian mechanism is within this TV of a post-processed continuous one
        # per run; over the 2 n_ev evaluation runs the GDP test's error grows by at most 2 n_ev x it
        tv = float(mech.gaussian_tv_per_run())
        slack = 2 * n_ev * tv
        if not slack < alpha / 2:
            raise UsageError(f"the GDP test (claim kind gaussian) is not valid for {name}: its noise is a discrete "
                             f"Gaussian whose distance to a continuous Gaussian, {tv:.3g} per run, adds up to "
                             f"{slack:.3g} over {n_ev} evaluation runs per side, more than half of alpha = {alpha:g}. "
                             "Use the generic test (claim kind generic).")
        gdp_alpha -= slack
        lattice = {"tv_per_run": tv, "alpha_spent": slack, "joint_test_level": gdp_alpha,
                   "why": "discrete Gaussian noise on a fine lattice: within total variation tv_per_run of a "
                          "post-processed continuous Gaussian mechanism per run (bounds.lattice_gaussian_tv), "
                          "so the GDP test runs at alpha minus 2 n tv"}
    gbs = [graybox_check(m, p, claim.delta) if cfg.graybox else {"checked": False, "violation": False,
                                                                  "families": []} for m, p in zip(mechs, pairs)]
    hit = next((i for i, g in enumerate(gbs) if g["violation"]), 0)  # a gray-box finding on any candidate
    if gbs[hit]["violation"]:  # fixes the pair (without stop_on_graybox, the noisy runs are drawn on it alone)
        pairs, mechs, gbs, hit = [pairs[hit]], [mechs[hit]], [gbs[hit]], 0
    mech, pair, gb = mechs[hit], pairs[hit], gbs[hit]
    cap = B.perfect_separation_cap(n_ev, n_ev, alpha_b, claim.delta)
    if claim.delta > 0:
        cap["epsilon_gaussian"] = B.gdp_eps(cap["mu"], claim.delta)
    context = ReportContext(mechanism=str(name), claim=claim, confidence=confidence, pair=pair.description,
                            graybox=gb, selection_trials=n_sel, evaluation_trials=n_ev,
                            rng_mode="seeded-insecure" if seed is not None else "secure", resolution=cap,
                            self_contained=bool(getattr(mechanism, "SELF_CONTAINED", False)))  # report.sharing
    if gb["violation"] and cfg.stop_on_graybox:
        return AuditReport.graybox_only(context, runtime_s=time.perf_counter() - t_start)
    plan = _Evaluation(claim, n_ev, alpha_b, gdp_alpha, lattice, int(trials), t_start)

    show = sys.stderr.isatty() if progress is None else progress
    bar = None
    if show:
        bar = tqdm(total=2 * (int(trials) + (len(pairs) - 1) * n_sel), desc="audit runs", unit="run",
                   file=sys.stderr)
    samplers = [_sampler(m, name, cfg, bar) for m in mechs]
    sampler = samplers[hit]
    try:
        if fixed is not None:
            return _run_fixed(sampler, pair, fixed, context, r_ev, plan)
        streams = [r_sel.spawn(2)] if len(pairs) == 1 else [r.spawn(2) for r in r_sel.spawn(len(pairs))]
        picks = [_select(sm, m, p, n_sel, n_ev, st, scores, alpha_b, claim)
                 for sm, m, p, st in zip(samplers, mechs, pairs, streams)]
        k = max(range(len(picks)), key=lambda i: picks[i][5])  # the first of equal ranks
        _, cand, t, d, cands, _ = picks[k]
        sampler, mech, pair = samplers[k], mechs[k], pairs[k]
        for other in samplers[:k] + samplers[k + 1:]:
            other.close()
        context = replace(context, pair=pair.description, graybox=gbs[k])
        if search is not None:
            block = search_block([p.description for p in pairs], [v for v, *_ in picks], k, n_sel, n_ev)
            context = replace(context, pair={**context.pair, "search": block})
        warning = pair_unchanged_warning(sampler, pair)  # after the first draws: their errors come first
        if warning:
            context = replace(context, pair={**context.pair, "warning": warning})
        ev_scores = ([], [])
        per = max(1, CHUNK_CELLS // max(1, int(np.prod(sampler.shape))))
        sizes = [min(per, n_ev - s) for s in range(0, n_ev, per)]
        for size, child in zip(sizes, r_ev.spawn(len(sizes))):
            c0, c1 = child.spawn(2)
            for side, data, r in ((0, pair.d, c0), (1, pair.d_prime, c1)):
                X = sampler.draw(data, size, r)
                ev_scores[side].append(cand.score(X))
    except BaseException:  # Ctrl-C, SIGTERM (privaudit.core.errors.Terminated), an error: cancel the queued chunks
        for s in samplers:
            s.close(abort=True)
        raise
    finally:
        for s in samplers:
            s.close()
        if bar:
            bar.close()
    e0, e1 = np.concatenate(ev_scores[0]), np.concatenate(ev_scores[1])
    events = [_evaluate_event(cand, t, d, e0, e1, alpha_b, claim.delta, gdp_joint=claim.kind == "gaussian",
                              gdp_alpha=gdp_alpha)]
    events[0]["explanation"] = describe_event(cand, t, d, cell_namer(sampler.shape, mech))
    evidence = sampler_verdict([c.info for c in cands if c.info.get("kind") == "known_sampler"])
    runs = RunFacts(trials=int(trials), alpha_per_bound=alpha_b, candidates=[c.name for c in cands],
                    batched=sampler.batched, output_shape=list(sampler.shape or ()), float_sampler=evidence,
                    gdp_lattice=lattice)
    return AuditReport.from_events(context, events, runs, runtime_s=time.perf_counter() - t_start)


def _sampler(mech, name: str, cfg: AuditSettings, bar) -> Sampler:
    """The sampler of one (prepared) mechanism: batched if it takes ``n_runs``; a FileFunction stays
    wrapped (its calls are the user-code boundary: errors named, no traceback)."""
    batched = is_batched(mech.callee() if isinstance(mech, FileFunction) else mech)
    who = mech.ref if isinstance(mech, FileFunction) else f"mechanism {name}"
    return Sampler(mech, batched, cfg.n_jobs or os.cpu_count() or 1, bar.update if bar else (lambda k: None), who)


def _select(sampler: Sampler, mech, pair: NeighbouringPair, n_sel: int, n_ev: int, streams, scores,
            alpha_b: float, claim: Claim) -> tuple:
    """The selection split of one pair (protocol step 2): ``n_sel`` runs per side, the scores fitted on
    the first half, the event chosen on the second (its bound predicted at ``n_ev`` evaluation runs).

    Returns
    -------
    (value, candidate, threshold, direction, candidates, rank)
        ``value``: the bound the choice half proves for the chosen event; ``rank``: the key by which an
        input search compares pairs (both from ``choice.choose_event``).
    """
    X0 = sampler.draw(pair.d, n_sel, streams[0])
    X1 = sampler.draw(pair.d_prime, n_sel, streams[1])
    extra = [fixed_candidate(n, f, sampler.shape) for n, f in scores]
    if hasattr(mech, "attack_scores"):
        extra += [fixed_candidate(n, f, sampler.shape) for n, f in mech.attack_scores(pair)]
    nf = n_sel // 2  # cross-fitting: fit on the first half, choose on the second
    cands = fit_candidates(X0[:nf], X1[:nf], extra, hint=sampler_hint(mech, pair, X0[:nf], X1[:nf]))
    learned = learned_candidates(X0[:nf], X1[:nf]) + binned_candidates(X0[:nf], X1[:nf])  # DP-Sniper-style
    cands += [c for c in learned if c is not None]
    objective = "gaussian" if claim.kind == "gaussian" else "generic"
    value, cand, t, d, rank = choose_event(cands, X0[nf:], X1[nf:], alpha_b, claim.delta, objective, n_ev)
    return value, cand, t, d, cands, rank


def _fixed_events(fixed: FixedEvents | str | None, mech, pair: NeighbouringPair) -> FixedEvents | None:
    """``fixed`` checked, with ``"design"`` resolved to the prepared mechanism's ``design_events(pair)``.

    Raises
    ------
    UsageError
        An unknown string, no events, no reason, or an event that is not (name, fn, threshold, "+" | "-").
    """
    if isinstance(fixed, str):  # "design": the mechanism's own events, fixed from the prepared pair
        if fixed != "design" or not hasattr(mech, "design_events"):
            raise UsageError(f"`fixed` must be FixedEvents, or 'design' for a mechanism with "
                             f"design_events. Found {fixed!r} for {type(mech).__name__}.")
        events, reason = mech.design_events(pair)
        fixed = None if events is None else FixedEvents(events, reason)
    if fixed is None:
        return None
    events = list(fixed.events)
    if not events or not fixed.reason:
        raise UsageError("`fixed` needs at least one (name, fn, threshold, direction) and a reason.")
    if any(len(e) != 4 or e[3] not in ("+", "-") for e in events):
        raise UsageError("each fixed event is (name, fn, threshold, direction) with direction '+' or '-'.")
    return FixedEvents(events, fixed.reason)


@dataclass(frozen=True)
class _Evaluation:
    """What counting events on the evaluation split needs (the chosen-event and fixed-events paths)."""

    claim: Claim
    n_ev: int
    alpha_b: float
    gdp_alpha: float
    lattice: dict | None
    trials: int
    t_start: float


def _run_fixed(sampler: Sampler, pair: NeighbouringPair, fixed: FixedEvents, context: ReportContext,
               r_ev: np.random.Generator, plan: _Evaluation) -> AuditReport:
    """The evaluation-only audit of :func:`run_audit` with ``fixed`` events: every run counts every event."""
    claim, n_ev = plan.claim, plan.n_ev
    gdp_joint = claim.kind == "gaussian"  # gdp_alpha is already 2 alpha_b = alpha / J per event (Bonferroni)
    ev = ([], [])
    cands = None
    per = None
    done = 0
    while done < n_ev:
        size = n_ev - done if per is None else min(per, n_ev - done)
        size = min(size, 256) if per is None else size
        c0, c1 = r_ev.spawn(1)[0].spawn(2)
        X0, X1 = sampler.draw(pair.d, size, c0), sampler.draw(pair.d_prime, size, c1)
        if cands is None:
            cands = [fixed_candidate(n, f, sampler.shape) for n, f, _, _ in fixed.events]
            per = max(1, CHUNK_CELLS // max(1, int(np.prod(sampler.shape))))
        ev[0].append(np.stack([c.score(X0) for c in cands]))
        ev[1].append(np.stack([c.score(X1) for c in cands]))
        done += size
    e0, e1 = np.concatenate(ev[0], axis=1), np.concatenate(ev[1], axis=1)
    events = [_evaluate_event(c, float(t), d, e0[j], e1[j], plan.alpha_b, claim.delta, gdp_joint=gdp_joint,
                              gdp_alpha=plan.gdp_alpha)
              for j, (c, (_, _, t, d)) in enumerate(zip(cands, fixed.events))]
    for ev, c, (_, _, t, d) in zip(events, cands, fixed.events):  # a handful of fixed events
        ev["explanation"] = describe_event(c, float(t), d, cell_namer(sampler.shape))
    runs = RunFacts(trials=plan.trials, alpha_per_bound=plan.alpha_b, candidates=[c.name for c in cands],
                    batched=sampler.batched, output_shape=list(sampler.shape or ()), gdp_lattice=plan.lattice,
                    fixed_events=fixed.reason)
    return AuditReport.from_events(context, events, runs, runtime_s=time.perf_counter() - plan.t_start)


def _evaluate_event(cand: Candidate, t: float, d: str, e0: np.ndarray, e1: np.ndarray, alpha_b: float,
                    delta: float, gdp_joint: bool = False, gdp_alpha: float | None = None) -> dict:
    """Counts and one-sided Clopper-Pearson bounds (each at ``alpha_b``) of the chosen
    event on the evaluation scores ``e0`` (D runs) and ``e1`` (D' runs).

    ``gdp_joint`` (a GDP opt-in): ``mu_lower_bound`` comes from the exact joint
    test :func:`privaudit.audit.bounds.gdp_mu_lower_joint` at level
    ``gdp_alpha`` (default 2 alpha_b; less the lattice share for a discrete
    Gaussian mechanism, see ``run_audit``; the GDP test is then the claim's
    only test); else from the two Clopper-Pearson bounds (for information).
    """
    n0, n1 = len(e0), len(e1)
    gt0, gt1 = int((e0 > t).sum()), int((e1 > t).sum())
    if d == "+":  # event {s > t}: positives are D' runs
        fp, tp, n_fp, n_tp = gt0, gt1, n0, n1
    else:         # event {s <= t}: positives are D runs
        fp, tp, n_fp, n_tp = n1 - gt1, n0 - gt0, n1, n0
    fpr_ub = float(B.cp_upper(fp, n_fp, alpha_b))
    tpr_lb = float(B.cp_lower(tp, n_tp, alpha_b))
    return {
        "direction": "D' vs D" if d == "+" else "D vs D'",
        "candidate": cand.name, "candidate_info": cand.info,
        "event": f"score > {t:.6g}" if d == "+" else f"score <= {t:.6g}", "threshold": t,
        "counts": {"false_positives": fp, "negatives_evaluated": n_fp,
                   "true_positives": tp, "positives_evaluated": n_tp},
        "fpr": fp / n_fp, "fnr": 1 - tp / n_tp,
        "fpr_upper": fpr_ub, "tpr_lower": tpr_lb, "fnr_upper": 1 - tpr_lb,
        "epsilon_lower_bound": float(B.eps_from_rates(tpr_lb, fpr_ub, delta)),
        "mu_lower_bound": float(B.gdp_mu_lower_joint(fp, n_fp, n_tp - tp, n_tp,
                                                     2 * alpha_b if gdp_alpha is None else gdp_alpha) if gdp_joint
                                else B.gdp_mu_from_rates(fpr_ub, 1 - tpr_lb)),
        "mu_bound": "joint exact test" if gdp_joint else "two Clopper-Pearson bounds",
        "roc": _roc(e0, e1, d),
    }


def _roc(e0: np.ndarray, e1: np.ndarray, d: str, points: int = 60) -> list[list[float]]:
    """Empirical (FPR, FNR) curve of a chosen score on the evaluation split
    (descriptive, for the plot; not a bound)."""
    t = np.unique(np.quantile(np.concatenate([e0, e1]), np.linspace(0, 1, points)))
    s0, s1 = np.sort(e0), np.sort(e1)
    gt0 = 1 - np.searchsorted(s0, t, side="right") / len(s0)
    gt1 = 1 - np.searchsorted(s1, t, side="right") / len(s1)
    if d == "+":
        fpr, fnr = gt0, 1 - gt1
    else:
        fpr, fnr = 1 - gt1, gt0
    return [[float(a), float(b)] for a, b in zip(fpr, fnr)]
