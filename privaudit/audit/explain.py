"""The event that decided an audit, in words a user can act on (the report's ``explanation``).

A chosen event is {score > t} (direction "+", supports D') or {score <= t}
("-", supports D) of one candidate (:mod:`privaudit.audit.attacks`,
:mod:`privaudit.audit.learned`). A linear score on one cell is a threshold on
that cell ("outputs whose coordinate 3 is above 7.2", coordinates counted from 0); a linear score on several
cells is named by its largest weights; the other scores by what they compute.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from privaudit.audit.attacks import Candidate

#: Terms of a weighted sum named in an explanation.
SHOWN_TERMS = 3
#: The float-lattice scores' samplers in words (:mod:`privaudit.audit.float_attacks`).
SAMPLER_WORDS = {"numpy_laplace": "numpy's Laplace sampler", "numpy_normal": "numpy's normal sampler",
                 "any_float_noise": "adding any float noise"}


def cell_namer(shape: tuple, mechanism=None) -> Callable[[int], str]:
    """Words for cell j of a flattened output of ``shape`` (the mechanism's ``cell_name`` when it has one,
    e.g. :class:`privaudit.audit.inputs.SequenceOutput`)."""
    own = getattr(mechanism, "cell_name", None)
    if callable(own):
        return own
    shape = tuple(shape or ())
    if not shape or int(np.prod(shape)) == 1:
        return lambda j: "value"
    if len(shape) == 1:
        return lambda j: f"coordinate {j}"
    return lambda j: "coordinate (" + ", ".join(str(int(i)) for i in np.unravel_index(j, shape)) + ")"


def describe_event(cand: Candidate, t: float, direction: str, name: Callable[[int], str]) -> str:
    """One sentence naming the event {score > t} ("+") or {score <= t} ("-") of ``cand``.

    Parameters
    ----------
    cand : Candidate
        The chosen candidate (``weights`` set for the linear scores).
    t : float
        Its threshold.
    direction : {"+", "-"}
    name : callable
        ``name(j)`` -> words for cell j (:func:`cell_namer`).

    Returns
    -------
    str
        E.g. "outputs whose coordinate 3 is above 7.2 (more likely under D')".
    """
    above = direction == "+"
    side = "more likely under D'" if above else "more likely under D"
    cmp = "above" if above else "at most"
    kind = cand.info.get("kind")
    w = getattr(cand, "weights", None)
    own = cand.words(t, direction, name) if getattr(cand, "words", None) else None
    if own:
        return f"{own} ({side})"
    if kind == "linear" and w is not None:
        nz = np.flatnonzero(w)
        if len(nz) == 0:  # "weighted sum  is above 0" before: the fitting runs of D and D' did not differ
            return (f"outputs whose {cand.name} score is {cmp} {t:.4g}: every weight is 0 (the fitting runs of D "
                    f"and D' did not differ), so the event holds for all outputs or none ({side})")
        if len(nz) == 1:
            j, wj = int(nz[0]), float(w[nz[0]])
            word = {(True, True): "above", (True, False): "below", (False, True): "at most",
                    (False, False): "at least"}[(above, wj > 0)]
            return f"outputs whose {name(j)} is {word} {t / wj:.4g} ({side})"
        top = nz[np.argsort(-np.abs(w[nz]), kind="stable")][:SHOWN_TERMS]
        terms = " ".join(f"{w[j]:+.3g} x {name(int(j))}" for j in top)
        more = f" + {len(nz) - len(top)} smaller terms" if len(nz) > len(top) else ""
        return f"outputs whose weighted sum {terms}{more} is {cmp} {t:.4g} ({cand.name} score; {side})"
    if kind == "indicator" and w is not None:
        what = {"exact_zero": "exactly 0", "non_finite": "not finite (NaN or inf)",
                "integer_valued": "a whole number"}.get(cand.name, cand.name)
        nz = np.flatnonzero(w)
        if len(nz) == 1 and min(0.0, w[nz[0]]) <= t < max(0.0, w[nz[0]]):
            j = int(nz[0])
            yes = (w[j] > 0) == above
            return f"outputs whose {name(j)} is {'' if yes else 'not '}{what} ({side})"
        cells = ", ".join(name(int(j)) for j in nz[:SHOWN_TERMS]) + (", ..." if len(nz) > SHOWN_TERMS else "")
        return f"outputs with a weighted count of cells that are {what} ({cells}) {cmp} {t:.4g} ({side})"
    if kind == "learned":
        return (f"outputs to which the learned classifier (logistic regression on the output's features, fitted "
                f"on the selection runs) gives log-odds of D' {cmp} {t:.4g} ({side})")
    if kind == "binned_likelihood_ratio":
        b = cand.info.get("bins_per_real_cell", 0)
        how = f", real values in {b} quantile bins" if b else ""
        return (f"outputs in the cells (exact pattern of the discrete and absent entries{how}) whose estimated "
                f"log likelihood ratio of D' to D on the fitting runs is {cmp} {t:.4g} "
                f"({cand.info.get('cells')} cells; {side})")
    if kind == "known_sampler":
        who = SAMPLER_WORDS.get(cand.info.get("sampler"), str(cand.info.get("sampler")))
        cells = ", ".join(name(int(j)) for j in cand.info.get("cells", [])[:SHOWN_TERMS])
        more, less = ("D'", "D") if above else ("D", "D'")
        return (f"outputs more of whose cells ({cells}) {who} can produce from {more}'s noise-free value than "
                f"from {less}'s (the float side channel: reachable from D' minus from D {cmp} {t:.4g}; {side})")
    if cand.name == "output_identity":
        return (f"outputs whose exact value was seen more often under {'D' + chr(39) if above else 'D'} on the "
                f"fitting runs (log frequency ratio {cmp} {t:.4g}; {side})")
    if cand.name == "laplace_lr":
        return (f"outputs {'closer to' if above else 'not closer to'} D''s per-cell medians than to D's (summed "
                f"absolute distance gap {cmp} {t:.4g}; {side})")
    return f"outputs whose score `{cand.name}` is {cmp} {t:.4g} ({side})"
