"""Attacks: scalar scores on mechanism outputs, fitted on the selection split.

Each candidate maps a batch of flattened outputs ``X`` of shape (n, d) to a
score of shape (n,); larger means "looks like D'". An event is
``{score > t}`` (direction "+") or ``{score <= t}`` (direction "-"). The
candidates are fitted on the selection split only; the runner then chooses
one (candidate, threshold, direction) on the other half of that split
(cross-fitting) and counts it on the independent evaluation split
(docs/audit.md, Background).

The battery covers the known classes of DP bugs that reach a count
release:

* ``mean_difference``: projection on mean(D') - mean(D), the Neyman-Pearson
  direction for isotropic Gaussian noise (Nasr et al. 2021);
* ``fisher``: Fisher's discriminant Sigma^-1 (mean(D') - mean(D)) with the
  pooled covariance; catches noise shared between cells (e.g. one draw reused
  across steps h), where differences are noise-free;
* ``exact_zero``, ``non_finite``, ``integer_valued``: indicator features
  weighted by their frequency difference; catch cells released only when
  observed (support leak), domains read off the data and outputs
  without noise;
* ``output_identity``: likelihood ratio of the whole output (hashed), with
  counts from the selection split; catches deterministic or discrete outputs
  (a policy, an un-noised release);
* ``granularity_2^-m``: mean difference of frac(y 2^m) on the most shifted
  cells (m = 8, 16, 24); catches noise on a coarse grid added to real-valued
  data, whose low-order digits then carry the data ("granularity");
* ``laplace_lr``: sum over cells of |y - median_D| - |y - median_D'|, the
  Neyman-Pearson statistic for Laplace noise (Neyman-Pearson lemma);
* ``numpy_laplace_lattice``, ``numpy_normal_lattice``,
  ``any_float_noise_lattice`` (float outputs, when the noise-free values are
  known): is y reachable as fl(c + z) from D's value c and from D''s, for a
  z numpy's Laplace / normal sampler can produce, or for any float z
  (:mod:`privaudit.audit.float_attacks`; Mironov 2012, Jin et al. 2022);
* user or adapter scores (e.g. "the policy acts as the canary did").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from privaudit.audit.protocol import numeric_output
from privaudit.audit.float_attacks import sampler_scores
from privaudit.core.errors import UsageError, UserCodeError

#: Dimension above which the Fisher discriminant is skipped (d x d covariance).
FISHER_MAX_DIM = 400
#: Cells used by the granularity candidates.
GRANULARITY_CELLS = 8
#: Grids 2^-m probed by the granularity candidates: frac(y 2^m) is constant
#: per dataset when noise on a grid coarser than 2^-m is added to real data.
GRANULARITY_BITS = (8, 16, 24)
_HASH_MULT = np.uint64(0x9E3779B97F4A7C15)
#: Outputs on a 2^-30 grid (integers, snapped values) carry no float-sampler lattice: the
#: known-sampler scores are fitted only for finer outputs.
COARSE_GRID_BITS = 30


def finite(X: np.ndarray) -> np.ndarray:
    """X with NaN/inf replaced by 0 (float64)."""
    X = np.asarray(X, dtype=np.float64)
    return np.where(np.isfinite(X), X, 0.0)


def finite_median(X: np.ndarray) -> np.ndarray:
    """Median of each column over its finite cells, shape (d,); NaN for a column with none.

    The absent cells of a variable-length output (NaN padding) are not values: counting them as 0 puts
    the median of a cell released in fewer than half of the runs at 0, whatever its values."""
    X = np.asarray(X, dtype=np.float64)
    out = np.full(X.shape[1], np.nan)
    ok = np.isfinite(X)
    some = ok.any(axis=0)
    if some.any():
        with np.errstate(invalid="ignore"):
            out[some] = np.nanmedian(np.where(ok, X, np.nan)[:, some], axis=0)
    return out


def row_hash(X: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each row's exact bit pattern, shape (n,) uint64."""
    B = np.ascontiguousarray(np.asarray(X, dtype=np.float64)).view(np.uint64)
    h = np.zeros(B.shape[0], dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(B.shape[1]):  # loop over columns only; rows stay vectorized
            h = (h ^ B[:, j]) * _HASH_MULT
            h ^= h >> np.uint64(29)
    return h


@dataclass
class Candidate:
    """A fitted scalar score.

    Attributes
    ----------
    name : str
    score : callable
        ``score(X: (n, d) float64) -> (n,) float64``.
    info : dict
        JSON-able description of what was fitted (no private data).
    weights : ndarray, shape (d,), or None
        Per-cell weights of a linear or indicator score (the report's explanation names the cells).
    words : callable or None
        ``words(t, direction, name) -> str``: the event {score > t} ("+") or {score <= t} ("-") as a
        condition on the output cells, for scores whose event is one (``name(j)``: words for cell j).
    """

    name: str
    score: Callable[[np.ndarray], np.ndarray]
    info: dict = field(default_factory=dict)
    #: Per-cell weights of a linear or indicator score (for the report's explanation), else None.
    weights: np.ndarray | None = field(default=None, repr=False)
    #: The event as a condition on the cells (see ``words`` above), else None.
    words: Callable | None = field(default=None, repr=False)


def _linear(name: str, w: np.ndarray, transform: Callable, info: dict) -> Candidate:
    def score(X, w=w):
        return transform(X) @ w
    whole = info.get("kind") in ("linear", "indicator")  # one weight per output cell (not a cell subset)
    return Candidate(name, score, {**info, "nonzero_weights": int(np.count_nonzero(w))}, w if whole else None)


def _lr_table(k0: np.ndarray, k1: np.ndarray):
    """Log likelihood-ratio per key with add-1/2 smoothing, from selection keys."""
    keys = np.concatenate([k0, k1])
    uniq, inv = np.unique(keys, return_inverse=True)
    c0 = np.bincount(inv[: len(k0)], minlength=len(uniq)).astype(float)
    c1 = np.bincount(inv[len(k0):], minlength=len(uniq)).astype(float)
    lr = np.log((c1 + 0.5) / (len(k1) + 0.5)) - np.log((c0 + 0.5) / (len(k0) + 0.5))

    def lookup(keys_new):
        pos = np.searchsorted(uniq, keys_new)
        pos = np.minimum(pos, len(uniq) - 1)
        hit = uniq[pos] == keys_new
        return np.where(hit, lr[pos], 0.0)
    return lookup, len(uniq)


def fit_candidates(X0: np.ndarray, X1: np.ndarray, extra: list[Candidate] | None = None,
                   hint: dict | None = None) -> list[Candidate]:
    """Fit the battery of candidate scores on the fitting half of the selection split.

    Parameters
    ----------
    X0, X1 : ndarray, shape (n0, d), (n1, d)
        Flattened outputs on D and on D' (fitting runs only; the event is
        chosen on other runs).
    extra : list of Candidate, optional
        Fixed scores (user ``--score``, adapter scores) appended unchanged.
    hint : dict, optional
        ``c0``, ``c1`` (noise-free value of each output cell on D and D',
        shape (d,)) and ``scale`` (declared noise scale per cell, or None):
        enables the float side-channel scores of
        :mod:`privaudit.audit.float_attacks` (known-sampler lattices of numpy's
        Laplace and normal samplers, and the sampler-free round trip).

    Returns
    -------
    list of Candidate
    """
    X0 = np.asarray(X0, dtype=np.float64)
    X1 = np.asarray(X1, dtype=np.float64)
    d = X0.shape[1]
    F0, F1 = finite(X0), finite(X1)
    m0, m1 = F0.mean(axis=0), F1.mean(axis=0)
    diff = m1 - m0
    out: list[Candidate] = [_linear("mean_difference", diff, finite, {"kind": "linear"})]

    if 1 < d <= FISHER_MAX_DIM:
        C = (within_scatter(F0, m0) + within_scatter(F1, m1)) / max(len(F0) + len(F1) - 2, 1)
        ridge = 1e-9 * max(np.trace(C) / d, 1e-300) + 1e-300
        try:
            w = np.linalg.solve(C + ridge * np.eye(d), diff)
            if np.all(np.isfinite(w)):
                out.append(_linear("fisher", w, finite, {"kind": "linear", "ridge": float(ridge)}))
        except np.linalg.LinAlgError:
            pass

    indicators = {
        "exact_zero": lambda X: (np.asarray(X) == 0).astype(np.float64),
        "non_finite": lambda X: (~np.isfinite(np.asarray(X, dtype=np.float64))).astype(np.float64),
        "integer_valued": lambda X: _is_integer(X).astype(np.float64),
    }
    for name, tf in indicators.items():
        w = tf(X1).mean(axis=0) - tf(X0).mean(axis=0)
        if np.any(w != 0):
            out.append(_linear(name, w, tf, {"kind": "indicator"}))

    look, n_keys = _lr_table(row_hash(X0), row_hash(X1))
    if n_keys < len(X0) + len(X1):  # some output repeats: the identity carries information
        out.append(Candidate("output_identity", lambda X, f=look: f(row_hash(X)),
                             {"kind": "likelihood_ratio", "distinct_outputs": int(n_keys)}))

    cells = np.argsort(-np.abs(diff), kind="stable")[: min(GRANULARITY_CELLS, d)]
    for m in GRANULARITY_BITS:
        tf = lambda X, c=cells, m=m: _frac(finite(np.asarray(X, dtype=np.float64)[:, c]) * 2.0 ** m)  # noqa: E731
        w = tf(X1).mean(axis=0) - tf(X0).mean(axis=0)
        if np.any(w != 0):
            out.append(_linear(f"granularity_2^-{m}", w, tf, {"kind": "granularity", "cells": cells.tolist()}))

    med0, med1 = finite_median(X0), finite_median(X1)
    moved = np.flatnonzero((med0 != med1) & np.isfinite(med0) & np.isfinite(med1))
    if moved.size:
        def laplace_lr(X, j=moved, a=med0[moved], b=med1[moved]):
            Y = np.asarray(X, dtype=np.float64)[:, j]
            with np.errstate(invalid="ignore"):  # an absent (non-finite) cell adds nothing
                return np.where(np.isfinite(Y), np.abs(Y - a) - np.abs(Y - b), 0.0).sum(axis=1)
        words = _median_words(int(moved[0]), float(med0[moved[0]]), float(med1[moved[0]])) if moved.size == 1 else None
        out.append(Candidate("laplace_lr", laplace_lr, {"kind": "likelihood_ratio", "cells": int(moved.size)},
                             words=words))
    coarse = _is_integer(X0 * 2.0 ** COARSE_GRID_BITS).all() and _is_integer(X1 * 2.0 ** COARSE_GRID_BITS).all()
    if hint is not None and not coarse:  # float outputs finer than a 2^-30 grid only
        out += [Candidate(name, fn, info) for name, fn, info in sampler_scores(X0, X1, hint)]
    return out + list(extra or [])


def _median_words(j: int, a: float, b: float) -> Callable:
    """The laplace_lr event on one cell j as a threshold on it: the score |y - a| - |y - b| (a, b the
    medians on D and D') is monotone in y between a and b and constant outside."""
    def words(t, direction, name):
        if not -abs(b - a) <= t < abs(b - a):  # the event holds for every output or for none
            return None
        c = (t + a + b) / 2 if b > a else (a + b - t) / 2
        word = {("+", True): "above", ("+", False): "below", ("-", True): "at most", ("-", False): "at least"}
        return f"outputs whose {name(j)} is {word[(direction, b > a)]} {c:.4g}"
    return words


#: Rows centred at a time by :func:`within_scatter` (bounds its temporary to SCATTER_BLOCK x d).
SCATTER_BLOCK = 4096


def within_scatter(F: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """Scatter matrix sum_i (F_i - mean)(F_i - mean)^T, accumulated over row blocks.

    The pooled within-class covariance of the Fisher score without ``np.cov``
    on the whole sample matrix: ``np.cov`` makes a centred copy of all n rows
    (plus a conjugate copy) and a general product; here each block of
    :data:`SCATTER_BLOCK` rows is centred into one reused buffer and
    multiplied by its own transpose (BLAS syrk), so the temporary memory is
    ``SCATTER_BLOCK x d`` whatever n is.

    Parameters
    ----------
    F : ndarray, shape (n, d), float64
        Finite outputs (one row per run).
    mean : ndarray, shape (d,)
        Their column means.

    Returns
    -------
    ndarray, shape (d, d)
        The scatter matrix (``(n - 1) * np.cov(F, rowvar=False)`` up to rounding).
    """
    n, d = F.shape
    out = np.zeros((d, d))
    buf = np.empty((min(SCATTER_BLOCK, n), d))
    for i in range(0, n, SCATTER_BLOCK):  # blocks of rows (memory), not a loop over rows
        Z = np.subtract(F[i:i + SCATTER_BLOCK], mean, out=buf[: min(SCATTER_BLOCK, n - i)])
        out += Z.T @ Z
    return out


def _is_integer(X):
    X = np.asarray(X, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return np.isfinite(X) & (X == np.round(X))


def _frac(X):
    X = finite(X)
    return X - np.floor(X)


def fixed_candidate(name: str, fn: Callable[[np.ndarray], np.ndarray], shape: tuple) -> Candidate:
    """Wrap a user or adapter score ``fn(outputs: (n, *shape)) -> (n,)`` (larger =
    more like D') as a candidate on flattened outputs. It is not fitted, so it
    costs nothing extra in the confidence budget beyond being one more choice
    made on the selection split."""
    who = getattr(fn, "ref", None) or f"score `{name}`"  # FILE.py:NAME for user scores

    def score(X, fn=fn, shape=shape):
        s = numeric_output(fn(np.asarray(X).reshape((len(X),) + tuple(shape))), who).astype(np.float64)
        if s.shape != (len(X),):
            err = UserCodeError if hasattr(fn, "ref") else UsageError
            raise err(f"{who} must return shape ({len(X)},). Found {s.shape}.")
        return np.where(np.isfinite(s), s, 0.0)
    return Candidate(name, score, {"kind": "fixed"})
