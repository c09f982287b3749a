"""The learned attack: a logistic-regression classifier of the outputs, fitted on the selection split.

DP-Sniper (Bichsel, Steffen, Bogunovic & Vechev 2021) learns the rejection
region of a test of D against D' instead of drawing it from a fixed menu: a
classifier trained on runs of the mechanism estimates p(y) = P[D' | y], and
the event {p(y) > t} is the region. Thresholding the classifier's log-odds is
the same as thresholding p, so the candidate's score is the log-odds.

Features of a flattened output ``y`` (any length d, discrete or real, NaN for
the padding of a variable-length sequence, :class:`privaudit.audit.inputs.SequenceOutput`):

* every cell, standardised over its finite values (an absent, non-finite
  value as 0: not a number, so it moves no real-valued feature), and an
  indicator of its non-finite values (absent entries of a sequence);
* the square of every real-valued cell and its hinges max(0, z - knot) at
  the :data:`KNOTS` quantiles of its finite values (a variance, tail or
  threshold difference), 0 where the cell is absent;
* a one-hot code of every cell with at most :data:`MAX_LEVELS` distinct
  values on the fitting runs (an argmax index, SVT's answer bits);
* the products of each one-hot level with each real-valued cell (report-noisy-
  max that also returns its noisy value: the value's meaning depends on
  the index) and the pairwise products of the cells that vary (SVT: the
  joint pattern of the answers, which the shared noisy threshold couples; a
  correlation between cells whose marginal laws do not move).

At most :data:`MAX_FEATURES` features (the interactions are dropped first);
outputs wider than :data:`MAX_DIM` cells get the linear features only, and
outputs wider than :data:`MAX_LEARNED_DIM` no learned attack (memory and time:
the fixed scores cover them). The feature map (levels, scales, knots) is fitted
on at most :data:`MAP_RUNS` runs per side; the classifier on as many fitting
runs as fit in :data:`FEATURE_CELLS` float32 feature cells (up to
:data:`MAX_FIT_RUNS` per side: about 23,000 per side for the 530 features of a
10-query sparse vector that releases values, against 2,000 before); scores are
computed in blocks of rows of at most :data:`FEATURE_CELLS` cells.

Departure from DP-Sniper: DP-Sniper puts its threshold at t_c, the value of
p whose probability under D is a fixed target c, and breaks ties at t_c at
random so that the event's probability is exactly c. Here the candidate is
handed to the same cross-fitted choice as every other score
(:func:`privaudit.audit.choice.choose_event`), which tries the thresholds t_c
for every c on a grid of the choice half's quantiles and keeps the one whose
bound, proved on the choice half, is largest; ties are not broken at random
(docs/audit.md, Background, rule 5), so a discrete output can only reach
the probabilities its atoms allow. The evaluation split, independent of the
fit and of the choice, gives the bound, so its validity does not depend on
the classifier being any good.

The fit and the scores run their matrix products on one BLAS thread
(:data:`BLAS_THREADS`, through threadpoolctl, whatever ``OPENBLAS_NUM_THREADS``
says): the products are matrix-vector ones, which a second thread barely
speeds up, and on a loaded machine OpenBLAS's default thread per core spins
waiting for a core (``svt_fresh_value`` and ``numerical_svt`` at 2x10^5 runs
per side, load 8, 2 cores: 10.5-11.1 CPU s per audit with the default 2
threads, 3.9-4.4 with one; benchmarks/results/audit_literature.md). One
thread also makes a seeded audit's learned bound the same at any thread
setting (the count changes the products' rounding).
"""

from __future__ import annotations

import numpy as np
from scipy import optimize
from threadpoolctl import threadpool_limits

from privaudit.audit.attacks import Candidate, finite

#: Cells with at most this many distinct values on the fitting runs get a one-hot code.
MAX_LEVELS = 8
#: Largest number of features (one-hot interactions are dropped first, then the pairwise products).
MAX_FEATURES = 1000
#: Outputs with more cells than this get the linear features only (standardised cells, non-finite flags).
MAX_DIM = 200
#: Fitting runs per side used at most (the first ones); more only slows the fit.
MAX_FIT_RUNS = 50_000
#: Fitting runs per side on which the feature map (levels, scales, knots) is fitted.
MAP_RUNS = 5_000
#: Outputs with more cells than this get no learned attack (the fixed scores only).
MAX_LEARNED_DIM = 2000
#: Feature cells held in memory at once (fitting rows as float32, 96 MB; scoring blocks of rows).
FEATURE_CELLS = 24_000_000
#: Quantiles of each real-valued cell (fitting runs) where its hinge features max(0, z - knot) bend.
KNOTS = (0.02, 0.1, 0.25, 0.5, 0.75, 0.9, 0.98)
#: L2 penalty on the weights of the standardised features (per fitting run: the log-loss is a mean).
RIDGE = 1e-3
#: BLAS threads of the fit's and the scores' matrix products (module docstring).
BLAS_THREADS = 1


def blas_threads_limited():
    """A context in which the BLAS libraries numpy and scipy loaded use :data:`BLAS_THREADS` threads
    (``threadpoolctl.threadpool_limits``; restored on exit; a BLAS threadpoolctl does not know is left
    as it is)."""
    return threadpool_limits(limits=BLAS_THREADS, user_api="blas")


class _Features:
    """The feature map, its levels and scales fitted on the fitting runs (see the module docstring)."""

    def __init__(self, X: np.ndarray, interactions: bool = True):
        F = finite(X)
        d = F.shape[1]
        ok = np.isfinite(X)
        cnt = np.maximum(ok.sum(axis=0), 1)
        self.mean = F.sum(axis=0) / cnt  # over the finite values: an absent cell is not a 0
        sd = np.sqrt((np.where(ok, F - self.mean, 0.0) ** 2).sum(axis=0) / cnt)
        self.sd = np.where(sd > 0, sd, 1.0)
        self.nonfinite = np.flatnonzero((~ok).any(axis=0))
        self.levels, self.real = [], []
        if d <= MAX_DIM:
            for j in range(d):  # a loop over cells (columns), never over runs
                u = np.unique(F[:, j])
                if 1 < len(u) <= MAX_LEVELS:
                    self.levels.append((j, u))
                elif len(u) > MAX_LEVELS:
                    self.real.append(j)
        self.disc = [j for j, _ in self.levels]
        self.knots = np.zeros((0, 0))
        if self.real:
            R = np.where(ok[:, self.real], (X[:, self.real] - self.mean[self.real]) / self.sd[self.real], np.nan)
            with np.errstate(invalid="ignore"):
                self.knots = np.nan_to_num(np.nanquantile(R, KNOTS, axis=0))
        budget = (MAX_FEATURES - d - len(self.nonfinite) - (1 + len(KNOTS)) * len(self.real)
                  - sum(len(u) for _, u in self.levels))
        self.paired = np.array(self.disc + self.real, dtype=int)  # cells whose pairwise products are features
        n_pairs = len(self.paired) * (len(self.paired) - 1) // 2
        self.pairs = interactions and n_pairs <= max(budget, 0)
        budget -= n_pairs if self.pairs else 0
        self.cross = interactions and sum(len(u) for _, u in self.levels) * len(self.real) <= max(budget, 0)
        Z = self._raw(X)
        self.zmean, zsd = Z.mean(axis=0), Z.std(axis=0)
        self.zsd = np.where(zsd > 0, zsd, 1.0)

    def _raw(self, X: np.ndarray) -> np.ndarray:
        F = finite(X)
        ok = np.isfinite(X)
        Zc = np.where(ok, (F - self.mean) / self.sd, 0.0)
        parts = [Zc, (~ok[:, self.nonfinite]).astype(float)]
        if self.real:
            R, live = Zc[:, self.real], ok[:, self.real]
            parts.append(R ** 2)
            parts += [np.where(live, np.maximum(R - k, 0.0), 0.0) for k in self.knots]
        onehots = [(F[:, [j]] == u[None, :]).astype(float) for j, u in self.levels]
        parts += onehots
        if self.pairs and len(self.paired) > 1:
            i, k = np.triu_indices(len(self.paired), 1)
            D = Zc[:, self.paired]
            parts.append(D[:, i] * D[:, k])
        if self.cross and onehots and self.real:
            R = Zc[:, self.real]
            parts += [(oh[:, :, None] * R[:, None, :]).reshape(len(X), -1) for oh in onehots]
        return np.concatenate(parts, axis=1)

    def __call__(self, X: np.ndarray) -> np.ndarray:
        return ((self._raw(np.asarray(X, dtype=np.float64)) - self.zmean) / self.zsd).astype(np.float32)

    def matrix(self, X: np.ndarray) -> np.ndarray:
        """The standardised features of ``X`` (n, d), shape (n, p) float32, built in blocks of rows."""
        p = len(self.zmean)
        out = np.empty((len(X), p), dtype=np.float32)
        block = max(256, FEATURE_CELLS // (4 * p))
        for i in range(0, len(X), block):  # blocks of rows: the float64 temporaries stay small
            out[i:i + block] = self(X[i:i + block])
        return out


def _fit_logistic(Z: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """Ridge-penalised logistic regression (mean log-loss + RIDGE |w|^2 / 2) by L-BFGS.

    ``Z``: (n, p) float32 (the products run in float32, the optimiser in float64). Returns (weights (p,),
    intercept)."""
    n, p = Z.shape

    def loss(theta):
        w, b = theta[:p], theta[p]
        m = (Z @ w.astype(np.float32)).astype(np.float64) + b
        # log(1 + e^m) - y m, computed stably; gradient (sigmoid(m) - y)
        ll = np.logaddexp(0.0, m) - y * m
        g = (0.5 * (1.0 + np.tanh(0.5 * m)) - y) / n
        grad = (g.astype(np.float32) @ Z).astype(np.float64)
        return ll.mean() + 0.5 * RIDGE * w @ w, np.concatenate([grad + RIDGE * w, [g.sum()]])

    res = optimize.minimize(loss, np.zeros(p + 1), jac=True, method="L-BFGS-B", options={"maxiter": 100})
    return res.x[:p], float(res.x[p])


def learned_candidate(X0: np.ndarray, X1: np.ndarray, interactions: bool = True) -> Candidate | None:
    """The learned attack fitted on the fitting runs: log-odds of "D'" given the output.

    Parameters
    ----------
    X0, X1 : ndarray, shape (n0, d), (n1, d)
        Flattened outputs of the fitting runs on D and on D' (NaN allowed).
    interactions : bool
        Include the pairwise products and the level-by-value products (module docstring). Without
        them (``learned_main_effects``) the model has a few times fewer features and is fitted on
        correspondingly more runs (the same :data:`FEATURE_CELLS` budget, up to :data:`MAX_FIT_RUNS`).

    Returns
    -------
    Candidate or None
        ``learned_logistic`` (``learned_main_effects`` without interactions), score shape (n,), larger =
        more like D'; None when every output cell is constant on the fitting runs (nothing to learn).
    """
    d = np.asarray(X0).shape[1]
    if d > MAX_LEARNED_DIM:
        return None
    X0, X1 = np.asarray(X0, dtype=np.float64), np.asarray(X1, dtype=np.float64)
    head = np.concatenate([X0[:MAP_RUNS], X1[:MAP_RUNS]])
    if np.all(finite(head) == finite(head[:1])) and np.all(np.isnan(head) == np.isnan(head[:1])):
        return None
    feats = _Features(head, interactions)
    rows = min(MAX_FIT_RUNS, max(MAP_RUNS, FEATURE_CELLS // (2 * len(feats.zmean))))
    X0, X1 = X0[:rows], X1[:rows]
    y = np.concatenate([np.zeros(len(X0)), np.ones(len(X1))])
    with blas_threads_limited():
        w, b = _fit_logistic(feats.matrix(np.concatenate([X0, X1])), y)
    block = max(256, FEATURE_CELLS // (4 * len(w)))

    def score(Xn, f=feats, w=w.astype(np.float32), b=b):  # blocks of rows: up to MAX_FEATURES features wide
        if not len(Xn):
            return np.zeros(0)
        with blas_threads_limited():
            return np.concatenate([(f(Xn[i:i + block]) @ w).astype(np.float64) + b
                                   for i in range(0, len(Xn), block)])

    return Candidate("learned_logistic" if interactions else "learned_main_effects", score, {
        "kind": "learned", "model": "logistic regression (L2 ridge), DP-Sniper-style rejection region",
        "features": int(len(w)), "fitting_runs_per_side": int(len(X0)), "one_hot_cells": [int(j) for j in feats.disc],
        "real_cells": [int(j) for j in feats.real], "pairwise_products": bool(feats.pairs and len(feats.paired) > 1),
        "index_value_products": bool(feats.cross and feats.levels and feats.real)})


def learned_candidates(X0: np.ndarray, X1: np.ndarray) -> list[Candidate]:
    """The learned attacks of the selection split: :func:`learned_candidate` with the interactions and,
    when that model has any, without them (fitted on more runs).

    Why both: with a few hundred features the full model fitted on ~23,000 runs per side has
    coefficient noise of the size of a weak leak's log-ratio (0.1-0.3), and its score then ranks the
    leak's runs poorly (svt3 of the literature suite: the full model's best threshold on the
    evaluation split reaches eps 0.05-0.10, the main-effects model's 0.13; benchmarks/results/
    audit_literature.md, session 14); where the leak is in a joint pattern (svt6) the interactions
    are needed. Each is one more candidate of the cross-fitted choice.

    Parameters
    ----------
    X0, X1 : ndarray, shape (n0, d), (n1, d)
        Flattened outputs of the fitting runs on D and on D' (NaN allowed).

    Returns
    -------
    list of Candidate
        Zero, one or two candidates.
    """
    full = learned_candidate(X0, X1)
    if full is None:
        return []
    if not (full.info["pairwise_products"] or full.info["index_value_products"]):
        return [full]
    main = learned_candidate(X0, X1, interactions=False)
    return [full] + ([main] if main is not None else [])
