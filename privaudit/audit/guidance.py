"""How many runs an audit needs, and what a bound below the claim shows.

An audit proves eps_lb = ln((CP_L(TPR) - delta) / CP_U(FPR)) on its evaluation
split (docs/audit.md, Background). For a mechanism whose true epsilon exceeds
the claim by ``excess`` through an event of probability ``fpr`` under D (and
e^(claim + excess) fpr + delta under D'), the runs it takes to prove a bound
above the claim follow from the two Clopper-Pearson bounds at the expected
counts: at that run count the audit flags the mechanism about half the time
(the counts fall on either side of their expectation), given that the
attack finds that event. The default event is the best one of a Laplace
mechanism at epsilon claim + excess: probability e^-(claim + excess) / 2
under D and 1/2 under D' (a tail beyond the shift). Rarer events need
proportionally more runs.
"""

from __future__ import annotations

import math

import numpy as np

from privaudit.audit import bounds as B
from privaudit.audit.choice import selection_size
from privaudit.core.errors import UsageError
from privaudit.core.formatting import privacy_param

#: Largest evaluation-run count the search considers.
MAX_RUNS = 10 ** 12


def _event(claim_epsilon: float, excess: float, delta: float, fpr: float | None) -> tuple[float, float]:
    eps = claim_epsilon + excess
    p = 0.5 * math.exp(-eps) if fpr is None else float(fpr)
    return p, min(1.0, math.exp(eps) * p + delta)


def _proves(n: int, p: float, q: float, alpha_b: float, delta: float, claim_epsilon: float) -> bool:
    fp, tp = math.ceil(p * n), math.floor(q * n)
    return float(B.eps_from_rates(B.cp_lower(tp, n, alpha_b), B.cp_upper(fp, n, alpha_b), delta)) > claim_epsilon


def evaluation_runs_needed(claim_epsilon: float, excess: float, delta: float = 0.0, confidence: float = 0.95,
                           fpr: float | None = None) -> int:
    """Evaluation runs per side at which the expected counts of the event prove a bound above the claim.

    Parameters
    ----------
    claim_epsilon : float
        The claimed epsilon (> 0).
    excess : float
        How far the mechanism's true epsilon exceeds the claim on the event (> 0).
    delta : float
        The claim's delta.
    confidence : float
        The audit's confidence (each of the two bounds gets (1 - confidence) / 2).
    fpr : float, optional
        The event's probability under D; default e^-(claim + excess) / 2 (a Laplace mechanism's best event).

    Returns
    -------
    int
        Runs per side of the evaluation split.

    Raises
    ------
    UsageError
        Non-positive claim or excess, fpr outside (0, 1), or more than 10^12 runs needed.
    """
    if not (claim_epsilon > 0 and excess > 0 and 0 <= delta < 1 and 0.5 <= confidence < 1):
        raise UsageError(f"need claim_epsilon > 0, excess > 0, delta in [0, 1), confidence in [0.5, 1); found "
                         f"{claim_epsilon}, {excess}, {delta}, {confidence}.")
    p, q = _event(claim_epsilon, excess, delta, fpr)
    if not 0 < p < 1:
        raise UsageError(f"`fpr` must lie in (0, 1). Found {fpr}.")
    alpha_b = (1 - confidence) / 2
    lo, hi = 10, 10
    while not _proves(hi, p, q, alpha_b, delta, claim_epsilon):
        lo, hi = hi, hi * 2
        if hi > MAX_RUNS:
            raise UsageError(f"more than {MAX_RUNS:.0e} runs per side would be needed to see an excess of "
                             f"{excess:g} over epsilon {claim_epsilon:g} on an event of probability {p:.3g}.")
    while hi - lo > max(1, lo // 1000):  # 0.1% precision
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if _proves(mid, p, q, alpha_b, delta, claim_epsilon) else (mid, hi)
    return int(hi)


def trials_needed(claim_epsilon: float, excess: float, delta: float = 0.0, confidence: float = 0.95,
                  fpr: float | None = None) -> int:
    """The ``trials`` (runs per side, selection split included) of :func:`evaluation_runs_needed`.

    A floor, not a promise: it assumes the attack finds the event (the selection split must also
    discover it). Example: a claim of epsilon 0.1 against a true epsilon 0.2 on a Laplace mechanism's
    best event needs about 2.7e3 trials per side (confidence 0.95, delta 0), an excess of 0.05 about
    9.2e3; an event of probability 1e-3 under D about 1.6e6 for the excess 0.1.
    """
    n_ev = evaluation_runs_needed(claim_epsilon, excess, delta, confidence, fpr)
    t = n_ev
    while t - selection_size(t, None) < n_ev:
        t = n_ev + selection_size(t, None)
    return int(t)


def visible_excess(n_ev: int, claim_epsilon: float, delta: float = 0.0, confidence: float = 0.95) -> float | None:
    """The smallest excess over the claim that ``n_ev`` evaluation runs per side would prove about half the
    time on a Laplace mechanism's best event (see the module docstring); None above an excess of 50."""
    alpha_b = (1 - confidence) / 2

    def ok(x):
        p, q = _event(claim_epsilon, x, delta, None)
        return _proves(n_ev, p, q, alpha_b, delta, claim_epsilon)

    lo, hi = 0.0, 50.0
    if not ok(hi):
        return None
    for _ in range(40):  # bisection on the excess
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return float(np.round(hi, 4))


def below_claim_message(eps_lb: float, claim_epsilon: float, n_ev: int, delta: float, confidence: float) -> str:
    """What a bound below the claim does and does not show (the report's message)."""
    x = visible_excess(n_ev, claim_epsilon, delta, confidence)
    seen = (f" At {n_ev} evaluation runs per side an audit sees an excess of about {x:.3g} over the claim (true "
            f"epsilon {claim_epsilon + x:.3g}) at best about half the time: only if its attack finds an event as "
            f"likely as a Laplace mechanism's best one; smaller excesses or rarer events need more runs "
            f"(privaudit.audit.guidance.trials_needed)." if x is not None else "")
    return (f"what the bound shows: with confidence {confidence:g} the mechanism's epsilon on this pair is at least "
            f"{eps_lb:.3g}. It does not show that it is at most the claimed {privacy_param(claim_epsilon)}: a leak this audit "
            f"did not see (a weaker one, a rarer event, another pair, a better attack) is not excluded.{seen}")


def flag_meaning(confidence: float, eps_lb: float | None, claim_epsilon: float) -> str:
    """What a violation found by the statistical test means (the report's message).

    The reported lower bound holds with probability at least ``confidence`` whatever the mechanism (the
    evaluation split's Clopper-Pearson bounds, docs/audit.md, Background), so a mechanism that meets its
    claim on this pair is flagged by one audit with probability at most ``1 - confidence``. Over many
    audits of correct mechanisms about that share may be flagged (a mechanism exactly at its claim, e.g.
    a discrete Laplace histogram, comes closest); a bound far above the claim is not one of them.
    """
    a = 1 - confidence
    bound = "the bound" if eps_lb is None else f"the bound {eps_lb:.4g}"
    return (f"what the flag means: {bound} holds with confidence {confidence:g}, so a mechanism that meets its claim "
            f"of {privacy_param(claim_epsilon)} on this pair is flagged by one audit with probability at most {a:.2g} "
            f"(at most about 1 in {1 / a:.0f} audits of correct mechanisms). A bound just above the claim is worth "
            "confirming by one independent audit (a fresh seed); repeating audits until one flags is not a test.")
