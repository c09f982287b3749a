"""Input search: the neighbouring pair that exposes a mechanism, chosen on runs the bound never counts.

A mechanism can be within its claim on one neighbouring pair and far outside
it on another (a sparse vector whose queries all move at once, a noisy max
whose every answer rises). StatDP (Ding, Wang, Wang, Zhang & Kifer 2018,
"Detecting Violations of Differential Privacy") tries a fixed
set of input patterns for mechanisms over a vector of query answers of
sensitivity 1; :func:`statdp_pairs` builds them. :func:`candidate_pairs` takes
any user's generator of pairs instead.

How the pair is chosen (``run_audit(search=...)``, :mod:`privaudit.audit.runner`):
every candidate pair gets its own selection split (``selection_size(trials)``
runs per side: scores fitted on one half, one event chosen on the other, the
bound that half proves as its value); the pair with the largest value wins,
with its event, and only then is the evaluation split (``trials -
selection_size(trials)`` fresh runs per side) drawn, on the winning pair alone.
Pair and event are functions of selection runs only, so, conditionally on them,
the evaluation counts are plain binomials and the Clopper-Pearson bounds keep
their level: no correction for the number of pairs is needed (docs/audit.md,
"Input search"). The search costs ``(K - 1) selection_size(trials)`` runs per
side on top of the ``trials`` of an audit of one pair, for K pairs.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from privaudit.audit.inputs import input_pair
from privaudit.audit.pairs import NeighbouringPair
from privaudit.core.errors import UsageError

#: The StatDP patterns, in the order they are tried (ties go to the earlier one).
PATTERNS = ("one above", "one below", "one above rest below", "one below rest above", "half half",
            "all above", "all below", "x shape")
#: Most candidate pairs a search takes (each costs a selection split of runs).
MAX_PAIRS = 64


def _pattern(name: str, n: int, base: float, shift: float) -> tuple[np.ndarray, np.ndarray]:
    """D and D' of one pattern: D = base everywhere (x shape: base on the first half, base - shift on the
    rest), each query of D' moved by at most ``shift``."""
    half = n // 2
    d = np.full(n, base)
    up, down = base + shift, base - shift
    rest = np.arange(n) >= 1
    first_half = np.arange(n) < half
    d_prime = {"one above": np.where(rest, base, up), "one below": np.where(rest, base, down),
               "one above rest below": np.where(rest, down, up), "one below rest above": np.where(rest, up, down),
               "half half": np.where(first_half, up, down), "all above": np.full(n, up),
               "all below": np.full(n, down)}.get(name)
    if name == "x shape":
        d, d_prime = np.where(first_half, base, down), np.where(first_half, down, base)
    return d, d_prime


def statdp_pairs(n_queries: int, base: float = 1.0, shift: float = 1.0,
                 relation: str = "substitution") -> list[NeighbouringPair]:
    """The StatDP input patterns for a mechanism over ``n_queries`` query answers of sensitivity ``shift``.

    D is ``base`` in every query (``x shape``: base on the first half, base -
    shift on the rest); D' moves each query by at most ``shift``: one above
    (the first query up), one below, one above rest below (the first up, the
    others down), one below rest above, half half (the first half up, the
    rest down), all above, all below, x shape (D' swaps which half is
    lower). Ding et al. 2018 ("component-wise" neighbours: every
    query answer differs by at most its sensitivity, as for the queries of a
    sparse vector or a noisy max). Patterns that coincide for small
    ``n_queries`` are kept once. The swapped pairs (D' vs D) are not added: the
    audit's event is chosen in either direction (docs/audit.md, Background, rule 2).

    Parameters
    ----------
    n_queries : int
        Length of the vector of query answers, >= 1.
    base, shift : float
        The answers of D and how far a query moves (its sensitivity, > 0).
    relation : {"substitution", "add/remove"}
        The claim's neighbouring relation, recorded in the report.

    Returns
    -------
    list of NeighbouringPair
        ``description``: as :func:`privaudit.audit.inputs.input_pair`, plus
        ``pattern`` (its name) and ``neighbourhood``.

    Raises
    ------
    UsageError
        ``n_queries`` < 1, non-finite ``base`` or ``shift`` <= 0.
    """
    if not (isinstance(n_queries, (int, np.integer)) and n_queries >= 1):
        raise UsageError(f"`n_queries` must be an integer >= 1. Found {n_queries!r}.")
    if not (np.isfinite(base) and np.isfinite(shift) and shift > 0):
        raise UsageError(f"`base` must be finite and `shift` finite and > 0. Found {base!r}, {shift!r}.")
    out, seen = [], set()
    for name in PATTERNS:
        d, d_prime = _pattern(name, int(n_queries), float(base), float(shift))
        key = (d.tobytes(), d_prime.tobytes())
        if key in seen or np.array_equal(d, d_prime):
            continue
        seen.add(key)
        p = input_pair(d, d_prime, relation=relation)
        p.description.update(pattern=name, neighbourhood=f"each query answer moves by at most {shift:g}")
        out.append(p)
    return out


def candidate_pairs(pairs: Iterable) -> list[NeighbouringPair]:
    """The candidates of an input search, checked: NeighbouringPair objects or (D, D') tuples.

    A tuple becomes :func:`privaudit.audit.inputs.input_pair` (substitution);
    each pair without a ``pattern`` is named ``pair i`` (its place, from 0) in
    the report.

    Raises
    ------
    UsageError
        Not an iterable of pairs, no pair, more than :data:`MAX_PAIRS`, or a
        tuple that is not two inputs (its place named).
    """
    try:
        items = list(pairs)
    except TypeError:
        raise UsageError(f"`search` must be an iterable of neighbouring pairs; found {type(pairs).__name__}.") \
            from None
    if not items:
        raise UsageError("`search` gave no candidate pair.")
    if len(items) > MAX_PAIRS:
        raise UsageError(f"`search` gave {len(items)} candidate pairs; at most {MAX_PAIRS} (each costs a selection "
                         "split of runs).")
    out = []
    for i, p in enumerate(items):
        if not isinstance(p, NeighbouringPair):
            if not (isinstance(p, (tuple, list)) and len(p) == 2):
                raise UsageError(f"candidate pair {i} of `search` must be a NeighbouringPair or a (D, D') tuple; "
                                 f"found {type(p).__name__}.")
            p = input_pair(*p)
        desc = {**p.description}
        desc.setdefault("pattern", f"pair {i}")
        out.append(NeighbouringPair(p.d, p.d_prime, desc))
    return out


def pair_words(desc: dict) -> str:
    """The pair in words for the report: its inputs (numbers, vectors) or kind, and its pattern."""
    inputs = desc.get("inputs") or f"the {desc.get('kind', 'given')} pair"
    pattern = desc.get("pattern")
    return f"{inputs} ({pattern!r} pattern)" if pattern and not pattern.startswith("pair ") else (
        f"{inputs} (candidate {pattern})" if pattern else inputs)


def search_block(descs: list[dict], values: list[float], winner: int, n_sel: int, n_ev: int) -> dict:
    """The report's ``method.search``: every pair tried, its value on its selection split, the winner, the budget."""
    return {
        "pairs": [{"pair": pair_words(d), "selection_bound": float(v)} for d, v in zip(descs, values)],
        "chosen": int(winner),
        "selection_runs_per_pair": int(n_sel), "evaluation_runs": int(n_ev),
        "runs_per_side": int(len(descs) * n_sel + n_ev),
        "why_valid": "each pair's value is the bound its own selection runs prove for their chosen event; the "
                     "pair and event are chosen before the evaluation runs are drawn, so the evaluation "
                     "counts are binomial given the choice and no correction for the number of pairs is needed",
    }


def search_message(block: dict) -> str:
    """The report's message naming the searched pair and the budget split."""
    k = len(block["pairs"])
    best = block["pairs"][block["chosen"]]
    why = (f"bound {best['selection_bound']:.3g} on its selection runs" if best["selection_bound"] > 0 else
           "no pair proved a positive bound on its selection runs: the one with the best milder prediction "
           "was kept")
    return (f"input search: {k} candidate pairs, {block['selection_runs_per_pair']} selection runs per side each; "
            f"{best['pair']} chosen ({why}), counted on "
            f"{block['evaluation_runs']} fresh evaluation runs per side ({block['runs_per_side']} runs per side in all)")
