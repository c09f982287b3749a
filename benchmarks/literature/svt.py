"""The six sparse-vector variants of Lyu, Su & Li 2017 and NumericalSVT, written from the papers.

Lyu, Su & Li 2017 ("Understanding the Sparse Vector Technique for Differential Privacy") compare six
published SVT variants (their Algorithms 1-6) for queries of sensitivity Delta = 1, a
threshold T, a cutoff c (the number of "above" answers after which the algorithm stops) and a budget split
eps = eps1 + eps2:

====  ======================  =====================  ==========================  ==============  ==========
Alg.  threshold noise rho     query noise nu_i       output for "above"          stops after c   privacy
====  ======================  =====================  ==========================  ==============  ==========
1     Lap(Delta / eps1)       Lap(2 c Delta / eps2)  TRUE                        yes             eps-DP
2     Lap(c Delta / eps1),    Lap(2 c Delta / eps2)  TRUE                        yes             eps-DP
      redrawn after each TRUE
3     Lap(Delta / eps1)       Lap(c Delta / eps2)    the noisy answer q_i + nu_i yes             not eps-DP
4     Lap(Delta / eps1),      Lap(Delta / eps2)      TRUE                        yes             ((1 + 6c)/4) eps-DP
      eps1 = eps / 4
5     Lap(Delta / eps1)       none                   TRUE                        no              not eps-DP
6     Lap(Delta / eps1)       Lap(Delta / eps2)      TRUE                        no              not eps-DP
====  ======================  =====================  ==========================  ==============  ==========

eps1 = eps2 = eps / 2 unless stated. "above" means q_i + nu_i >= T + rho. A run's output is one cell per
query: 1 (above), 0 (below), NaN after the algorithm stopped (an absent answer, not a number: the learned
attack and the non-finite indicator of ``privaudit.audit`` see it as absent); Algorithm 3 and NumericalSVT
add a second cell per query, the released value (NaN when none is released). This is the encoding of
``privaudit.audit.inputs.sequence_output`` (the answered prefix, NaN after its end) without its length cell,
built with array operations: ``sequence_output`` encodes run by run in Python, too slow at 10^6 runs.

NumericalSVT (Wang, Ding, Wang, Kifer & Zhang 2019, "Proving Differential Privacy with Shadow Execution"):
rho = Lap(3/eps), nu_i = Lap(6c/eps), and for an "above" answer a fresh q_i + Lap(3c/eps) is released:
eps-DP on paper. Released as a float64 sum it leaks q_i through its low-order bits (Mironov 2012), so the
suite's correct version adds discrete Laplace noise of the same scale to the integer answer
(:func:`numerical_svt`) and the float one as published is a broken case (:func:`numerical_svt_float`). Its
broken twin by noise size draws the released answer with scale c/eps, a third of the noise (the author
forgot the comparisons' share of the budget): the release alone spends eps, the whole claim.

The correct twin of Algorithm 3 (release a value for "above" answers) is Algorithm 1 at eps/2 with the
answered query re-noised with discrete Laplace of scale 2c/eps (c answers at eps/(2c) each): eps-DP by
sequential composition.
Settings as Bichsel et al. 2021 evaluated them: 10 queries, c = 1 (NumericalSVT: c = 2), T = 0.5 for
Algorithm 1 and T = 1 otherwise. The loops below run over the 10 queries (columns), never over runs.
"""

from __future__ import annotations

import numpy as np

from .floats import dlap

#: Bichsel et al. 2021's settings.
THRESHOLD = 1.0
CUTOFF = 1


def _svt(q, rng, n_runs, rho_scale, nu_scale, t, cutoff, redraw=False):
    """One pass of the sparse vector loop over the queries, vectorised over runs.

    Returns (flags (n_runs, m): 1 / 0 / NaN after the stop, noisy answers q + nu (n_runs, m), answered
    above (n_runs, m) bool)."""
    q = np.asarray(q, dtype=np.float64)
    n, m = n_runs, q.size
    rho = rng.laplace(0.0, rho_scale, n)
    noisy = q + (rng.laplace(0.0, nu_scale, (n, m)) if nu_scale else np.zeros((n, m)))
    flags = np.full((n, m), np.nan)
    above = np.zeros((n, m), dtype=bool)
    count = np.zeros(n, dtype=np.int64)
    stopped = np.zeros(n, dtype=bool)
    for i in range(m):  # the queries, in order: SVT is sequential
        live = (noisy[:, i] >= t + rho) & ~stopped
        flags[~stopped, i] = live[~stopped]
        above[:, i] = live
        count += live
        if redraw:  # Algorithm 2: a fresh threshold noise after each "above"
            rho = np.where(live, rng.laplace(0.0, rho_scale, n), rho)
        if cutoff is not None:
            stopped |= count >= cutoff
    return flags, noisy, above


def _with_values(flags, above, values):
    """Interleave per query (flag, released value or NaN): shape (n_runs, 2 m)."""
    out = np.empty((flags.shape[0], 2 * flags.shape[1]))
    out[:, 0::2], out[:, 1::2] = flags, np.where(above, values, np.nan)
    return out


def svt1(q, rng, n_runs=1, eps=0.1, t=0.5, c=CUTOFF):
    """Lyu, Su & Li 2017, Algorithm 1: eps-DP. Output (n_runs, m)."""
    return _svt(q, rng, n_runs, 2.0 / eps, 4.0 * c / eps, t, c)[0]


def svt2(q, rng, n_runs=1, eps=0.1, t=THRESHOLD, c=CUTOFF):
    """Lyu, Su & Li 2017, Algorithm 2 (threshold noise redrawn after each "above"): eps-DP. (n_runs, m)."""
    return _svt(q, rng, n_runs, 2.0 * c / eps, 4.0 * c / eps, t, c, redraw=True)[0]


def svt3(q, rng, n_runs=1, eps=0.1, t=THRESHOLD, c=CUTOFF):
    """BROKEN: Lyu, Su & Li 2017, Algorithm 3: releases the compared noisy answer q_i + nu_i with
    nu_i = Lap(c/eps2). Not eps-DP. Output (n_runs, 2 m): (flag, value) per query."""
    flags, noisy, above = _svt(q, rng, n_runs, 2.0 / eps, 2.0 * c / eps, t, c)
    return _with_values(flags, above, noisy)


def svt4(q, rng, n_runs=1, eps=0.1, t=THRESHOLD, c=CUTOFF):
    """BROKEN: Lyu, Su & Li 2017, Algorithm 4 (eps1 = eps/4, nu_i = Lap(1/eps2)): ((1 + 6c)/4) eps-DP,
    0.175 at eps = 0.1 and c = 1. Output (n_runs, m)."""
    return _svt(q, rng, n_runs, 4.0 / eps, 4.0 / (3.0 * eps), t, c)[0]


def svt5(q, rng, n_runs=1, eps=0.1, t=THRESHOLD):
    """BROKEN: Lyu, Su & Li 2017, Algorithm 5: no query noise, no cutoff. Not eps-DP for any eps.
    Output (n_runs, m)."""
    return _svt(q, rng, n_runs, 2.0 / eps, 0.0, t, None)[0]


def svt6(q, rng, n_runs=1, eps=0.1, t=THRESHOLD):
    """BROKEN: Lyu, Su & Li 2017, Algorithm 6: nu_i = Lap(1/eps2), no cutoff. Not eps-DP. (n_runs, m)."""
    return _svt(q, rng, n_runs, 2.0 / eps, 2.0 / eps, t, None)[0]


def svt_fresh_value(q, rng, n_runs=1, eps=0.1, t=THRESHOLD, c=CUTOFF):
    """Correct twin of :func:`svt3`: Algorithm 1 at eps/2, each answered (integer) query re-noised with
    discrete Laplace of scale 2c/eps: eps-DP by composition. Output (n_runs, 2 m)."""
    flags, _, above = _svt(q, rng, n_runs, 4.0 / eps, 8.0 * c / eps, t, c)
    values = np.asarray(q, dtype=np.float64) + dlap(rng, 2.0 * c / eps, flags.shape)
    return _with_values(flags, above, values)


def _numerical(q, rng, n_runs, eps, t, c, answer_scale, discrete=True):
    flags, _, above = _svt(q, rng, n_runs, 3.0 / eps, 6.0 * c / eps, t, c)
    noise = dlap(rng, answer_scale, flags.shape) if discrete else rng.laplace(0.0, answer_scale, flags.shape)
    return _with_values(flags, above, np.asarray(q, dtype=np.float64) + noise)


def numerical_svt(q, rng, n_runs=1, eps=0.1, t=THRESHOLD, c=2):
    """NumericalSVT (Wang et al. 2019): rho = Lap(3/eps), nu_i = Lap(6c/eps), an "above" (integer) answer
    released with discrete Laplace noise of scale 3c/eps: eps-DP. Output (n_runs, 2 m)."""
    return _numerical(q, rng, n_runs, eps, t, c, 3.0 * c / eps)


def numerical_svt_float(q, rng, n_runs=1, eps=0.1, t=THRESHOLD, c=2):
    """BROKEN in floating point: NumericalSVT as published (and as Bichsel et al. 2021 ran it), the answer
    released as the float64 q_i + Lap(3c/eps): the low-order bits of the released value leak q_i (Mironov
    2012). Output (n_runs, 2 m)."""
    return _numerical(q, rng, n_runs, eps, t, c, 3.0 * c / eps, discrete=False)


def numerical_svt_small_noise(q, rng, n_runs=1, eps=0.1, t=THRESHOLD, c=2):
    """BROKEN: NumericalSVT whose released answers get discrete Laplace noise of scale c/eps, a third of the
    noise: up to (5/3) eps (the comparisons' eps/3 + eps/3 plus eps for the answers). (n_runs, 2 m)."""
    return _numerical(q, rng, n_runs, eps, t, c, c / eps)
