"""The binned likelihood-ratio attack: outputs mapped to discrete cells, each cell's likelihood ratio estimated.

DP-Sniper (Bichsel, Steffen, Bogunovic & Vechev 2021) picks as rejection region the outputs y with the largest
estimated P[D' | y]; here P[D' | y] is estimated by counting, not by a classifier, after mapping each output to
a discrete *cell*:

* a cell with at most :data:`MAX_LEVELS` distinct finite values on the fitting runs keeps its value (an
  argmax index, SVT's answer bits);
* a real-valued cell is replaced by its quantile bin (``bins`` bins at the quantiles of its finite values on
  the fitting runs; a value above the top edge falls in the top bin);
* a non-finite value (NaN: an absent entry of a variable-length output, or +inf / -inf) is its own token.

Only outputs with a discrete cell or an absent (non-finite) entry get the candidate: on a purely
real-valued output the cells would be products of quantile bins, coarser than the threshold scores on a
monotone ratio, and their noisy order cost the GDP opt-in's tightness (mu_lb/mu at mu = 0.2, 10^5 runs per
side, 10 seeds: worst seed 0.883 with the candidate; docs/audit.md, Tightness).

The whole coded row is hashed to one key: for SVT that outputs its answer's noisy value (Lyu, Su & Li 2017,
Algorithm 3) the key is (position of the answer, bin of its value); for report-noisy-max with its value it
is (index, bin of the value). ``bins`` is the largest of :data:`BIN_CHOICES` for which the fitting runs show
at most :data:`MAX_CELLS` distinct keys (no candidate when even 2 bins give more: a wide real-valued output,
which the linear scores and the learned attack cover).

A second, coarse candidate (``binned_lr_coarse``, :func:`binned_candidates`) codes every real-valued cell
with :data:`COARSE_BINS` bins when the fine one used more. Why both: a fine cell holds few runs, and its
estimated ratio's noise (standard deviation about sqrt(2 / runs in the cell)) then exceeds the differences
between cells that a weak leak is made of. On svt3 of the literature suite (the best event has probability
0.007 and log-ratio 0.22; docs/audit.md, "The choice of the event") the 16-bin cells ranked by their exact
ratios allow an expected bound of 0.138 at 5x10^5 evaluation runs, but ranked by their ratios estimated on
2.5x10^5 fitting runs per side only 0.093-0.114 (eight seeds); 4-bin cells allow 0.130, and estimated
0.113-0.131 (benchmarks/results/audit_literature.md, session 15). The cross-fitted choice picks between them.

Each key's log likelihood ratio is estimated from the fitting runs with a pseudo-count
:data:`PSEUDO_COUNT` per side (a cell seen a few times gets a ratio shrunk towards 1), and a key unseen there
scores 0. The candidate's score is this estimate, so the event {score > t} is the set of cells whose estimated
ratio exceeds t; the threshold is chosen by the same cross-fitted choice as every other candidate
(:func:`privaudit.audit.choice.choose_event`, on runs the ratios were not estimated on), and the
Clopper-Pearson test counts the chosen event on the independent evaluation split, so the bound's validity does
not depend on the estimate being any good (docs/audit.md, Background: validity under selection).

Departure from DP-Sniper: a count per cell instead of a classifier (a cell's ratio is estimated without any
assumption on its shape, but only at the resolution of the bins), and the threshold from the choice half's
bound rather than a fixed target probability with random tie-breaking (as for the learned attack,
:mod:`privaudit.audit.learned`).
"""

from __future__ import annotations

import numpy as np

from privaudit.audit.attacks import Candidate, row_hash

#: A cell with at most this many distinct finite values on the fitting runs keeps its value.
MAX_LEVELS = 8
#: Bins per real-valued cell tried, finest first.
BIN_CHOICES = (16, 8, 4, 2)
#: Bins per real-valued cell of the coarse candidate (``binned_lr_coarse``).
COARSE_BINS = 4
#: Most distinct keys (output cells) the fitting runs may show.
MAX_CELLS = 4096
#: Outputs with more cells than this get no binned attack.
MAX_DIM = 64
#: Pseudo-count added to each key's count on each side (shrinks rarely seen keys towards ratio 1).
PSEUDO_COUNT = 2.0
#: Codes of the non-finite values (bins and level indices are >= 0).
_NAN, _POS_INF, _NEG_INF, _UNSEEN = -1.0, -2.0, -3.0, -4.0


class _Coder:
    """Maps flattened outputs (n, d) to a code per output cell (n, d) float64 (see the module docstring)."""

    def __init__(self, X: np.ndarray, bins: int):
        self.levels: dict[int, np.ndarray] = {}
        self.edges: dict[int, np.ndarray] = {}
        ok = np.isfinite(X)
        for j in range(X.shape[1]):  # a loop over output cells (columns), never over runs
            v = X[ok[:, j], j]
            u = np.unique(v)
            if len(u) <= MAX_LEVELS:
                self.levels[j] = u
            else:
                self.edges[j] = np.unique(np.quantile(v, np.linspace(0, 1, bins + 1)[1:-1]))

    def __call__(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        C = np.empty(X.shape)
        ok = np.isfinite(X)
        for j in range(X.shape[1]):  # columns only
            x = np.where(ok[:, j], X[:, j], 0.0)
            if j in self.levels:
                u = self.levels[j]
                pos = np.minimum(np.searchsorted(u, x), max(len(u) - 1, 0))
                code = np.where(u[pos] == x, pos, _UNSEEN) if len(u) else np.full(len(x), _UNSEEN)
            else:
                code = np.searchsorted(self.edges[j], x, side="right").astype(np.float64)
            C[:, j] = np.where(ok[:, j], code, np.where(np.isnan(X[:, j]), _NAN,
                                                       np.where(X[:, j] > 0, _POS_INF, _NEG_INF)))
        return C


def binned_candidate(X0: np.ndarray, X1: np.ndarray, bins: int | None = None) -> Candidate | None:
    """The binned likelihood-ratio attack fitted on the fitting runs.

    Parameters
    ----------
    X0, X1 : ndarray, shape (n0, d), (n1, d)
        Flattened outputs of the fitting runs on D and on D' (NaN / inf allowed: absent entries).
    bins : int, optional
        Bins per real-valued cell. Default: the largest of :data:`BIN_CHOICES` that gives at most
        :data:`MAX_CELLS` cells.

    Returns
    -------
    Candidate or None
        ``binned_lr``: score shape (n,), the estimated log likelihood ratio log P[cell | D'] / P[cell | D]
        of each run's cell (larger = more like D'; 0 for a cell not seen on the fitting runs). None when
        the output has more than :data:`MAX_DIM` cells, when it has no discrete cell (2 to
        :data:`MAX_LEVELS` values) and no absent (non-finite) entry on the fitting runs, when every run falls
        in one cell, or when the bins give more than :data:`MAX_CELLS` cells (by default: even 2 bins).
    """
    X0, X1 = np.asarray(X0, dtype=np.float64), np.asarray(X1, dtype=np.float64)
    if X0.shape[1] > MAX_DIM or not len(X0) or not len(X1):
        return None
    X = np.concatenate([X0, X1])
    if np.isfinite(X).all() and not any(1 < len(u) for u in _Coder(X, 2).levels.values()):
        return None  # all real-valued: no joint pattern to bin (the threshold scores cover a monotone ratio)
    for bins in (BIN_CHOICES if bins is None else (int(bins),)):
        coder = _Coder(X, bins)
        keys = row_hash(coder(X))
        uniq, inv = np.unique(keys, return_inverse=True)
        if len(uniq) <= MAX_CELLS or not coder.edges:
            break
    if len(uniq) > MAX_CELLS or len(uniq) < 2:
        return None
    c0 = np.bincount(inv[: len(X0)], minlength=len(uniq)).astype(float)
    c1 = np.bincount(inv[len(X0):], minlength=len(uniq)).astype(float)
    k = len(uniq)
    lr = (np.log((c1 + PSEUDO_COUNT) / (len(X1) + PSEUDO_COUNT * k))
          - np.log((c0 + PSEUDO_COUNT) / (len(X0) + PSEUDO_COUNT * k)))

    def score(Xn, coder=coder, uniq=uniq, lr=lr):
        kn = row_hash(coder(Xn))
        pos = np.minimum(np.searchsorted(uniq, kn), len(uniq) - 1)
        return np.where(uniq[pos] == kn, lr[pos], 0.0)

    return Candidate("binned_lr", score, {
        "kind": "binned_likelihood_ratio", "cells": int(k), "bins_per_real_cell": int(bins) if coder.edges else 0,
        "real_cells": sorted(int(j) for j in coder.edges), "discrete_cells": sorted(int(j) for j in coder.levels),
        "pseudo_count": PSEUDO_COUNT, "fitting_runs_per_side": [int(len(X0)), int(len(X1))]})


def binned_candidates(X0: np.ndarray, X1: np.ndarray) -> list[Candidate]:
    """The binned attacks of the selection split: :func:`binned_candidate` at its default resolution and,
    when that used more than :data:`COARSE_BINS` bins per real-valued cell, ``binned_lr_coarse`` at
    :data:`COARSE_BINS` (fewer, fuller cells: less noise in each estimated ratio; module docstring).

    Parameters
    ----------
    X0, X1 : ndarray, shape (n0, d), (n1, d)
        Flattened outputs of the fitting runs on D and on D' (NaN / inf allowed).

    Returns
    -------
    list of Candidate
        Zero, one or two candidates.
    """
    fine = binned_candidate(X0, X1)
    if fine is None or fine.info["bins_per_real_cell"] <= COARSE_BINS:
        return [] if fine is None else [fine]
    coarse = binned_candidate(X0, X1, bins=COARSE_BINS)
    if coarse is None:
        return [fine]
    return [fine, Candidate("binned_lr_coarse", coarse.score, coarse.info)]
