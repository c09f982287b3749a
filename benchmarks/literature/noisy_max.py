"""Report-noisy-max and histograms of the DP-testing literature, written from the papers, vectorised over runs.

Every mechanism takes ``q`` (a vector of query answers, each of sensitivity 1: on neighbouring datasets each
answer moves by at most 1), a ``numpy.random.Generator`` and ``n_runs``, and returns ``n_runs`` outputs
(shape (n_runs,) or (n_runs, d)), the batched interface of ``privaudit.audit.run_audit``. ``eps`` is the
epsilon the mechanism's author claims; the noise is what the author wrote, right or wrong.

Report-noisy-max (Dwork & Roth 2014, section 3.3; the four variants tested by Ding et al. 2018 and Bichsel
et al. 2021): argmax_i (q_i + noise_i) with Laplace noise of scale 2/eps, or exponential (one-sided) noise of
scale 2/eps, is eps-DP when only the index is released. Releasing the noisy maximum itself (the value, not
the index) is not eps-DP: the value reveals the level of all the answers. The correct way to release a value
too is to pay for it: here the index at eps/2 and the chosen (integer) answer again with fresh discrete
Laplace noise at eps/2 (sequential composition), the "correct twin" of each value-releasing variant.

Histograms (Ding et al. 2018, "histogram" and "histogram_eps"; Bichsel et al. 2021, NoisyHist1/2): counts of
bins, one record added or removed changes one bin by 1 (L1 sensitivity 1). Laplace noise of scale 1/eps is
eps-DP on paper; the bug is a scale of eps (the reciprocal forgotten), which at eps = 0.1 is 10-DP, not
0.1-DP. In float64 both leak through the low-order bits (Mironov 2012): the correct twin adds integer
(discrete Laplace) noise to the integer counts.
"""

from __future__ import annotations

import numpy as np

from .floats import dlap


def _answers(q, rng: np.random.Generator, n_runs: int, scale: float, noise: str) -> np.ndarray:
    q = np.asarray(q, dtype=np.float64)
    if noise == "laplace":
        z = rng.laplace(0.0, scale, (n_runs, q.size))
    else:  # one-sided exponential noise of mean `scale`
        z = rng.exponential(scale, (n_runs, q.size))
    return q + z


def rnm_laplace(q, rng, n_runs=1, eps=0.1):
    """Report-noisy-max, index only, Laplace noise of scale 2/eps: eps-DP. Output (n_runs,) float index."""
    return _answers(q, rng, n_runs, 2.0 / eps, "laplace").argmax(axis=1).astype(np.float64)


def rnm_exponential(q, rng, n_runs=1, eps=0.1):
    """Report-noisy-max, index only, exponential noise of scale 2/eps: eps-DP. Output (n_runs,) float index."""
    return _answers(q, rng, n_runs, 2.0 / eps, "exponential").argmax(axis=1).astype(np.float64)


def rnm_laplace_value(q, rng, n_runs=1, eps=0.1):
    """BROKEN: the noisy maximum value of Laplace noise of scale 2/eps (Ding et al. 2018, noisy_max_v1b;
    Bichsel et al. 2021, ReportNoisyMax3). Not eps-DP. Output (n_runs,)."""
    return _answers(q, rng, n_runs, 2.0 / eps, "laplace").max(axis=1)


def rnm_exponential_value(q, rng, n_runs=1, eps=0.1):
    """BROKEN: the noisy maximum value of exponential noise of scale 2/eps (Ding et al. 2018,
    noisy_max_v2b; Bichsel et al. 2021, ReportNoisyMax4). Not eps-DP. Output (n_runs,)."""
    return _answers(q, rng, n_runs, 2.0 / eps, "exponential").max(axis=1)


def _index_and_fresh_value(q, rng, n_runs, eps, noise):
    i = _answers(q, rng, n_runs, 4.0 / eps, noise).argmax(axis=1)  # the index at eps / 2
    value = np.asarray(q, dtype=np.float64)[i] + dlap(rng, 2.0 / eps, n_runs)  # the answer at eps / 2
    return np.stack([i.astype(np.float64), value], axis=1)


def rnm_laplace_fresh_value(q, rng, n_runs=1, eps=0.1):
    """Correct twin of :func:`rnm_laplace_value`: (index, value) with the index by Laplace noisy max at eps/2
    and the chosen answer re-noised with discrete Laplace of scale 2/eps (eps/2): eps-DP by composition.
    Output (n_runs, 2)."""
    return _index_and_fresh_value(q, rng, n_runs, eps, "laplace")


def rnm_exponential_fresh_value(q, rng, n_runs=1, eps=0.1):
    """Correct twin of :func:`rnm_exponential_value`: the index by exponential noisy max at eps/2, the chosen
    answer re-noised with discrete Laplace of scale 2/eps: eps-DP by composition. Output (n_runs, 2)."""
    return _index_and_fresh_value(q, rng, n_runs, eps, "exponential")


def hist_laplace(q, rng, n_runs=1, eps=0.1):
    """BROKEN in floating point: histogram with float64 Laplace noise of scale 1/eps (Ding et al. 2018,
    histogram; Bichsel et al. 2021, NoisyHist1): eps-DP on paper, but the low-order bits of each noisy
    count leak the count (Mironov 2012). Output (n_runs, bins)."""
    return _answers(q, rng, n_runs, 1.0 / eps, "laplace")


def hist_discrete_laplace(q, rng, n_runs=1, eps=0.1):
    """Correct twin: integer counts plus discrete Laplace noise of scale 1/eps: eps-DP under add/remove.
    Output (n_runs, bins)."""
    q = np.asarray(q, dtype=np.float64)
    return q + dlap(rng, 1.0 / eps, (n_runs, q.size))


def hist_wrong_scale(q, rng, n_runs=1, eps=0.1):
    """BROKEN: histogram with Laplace noise of scale eps instead of 1/eps (Ding et al. 2018, histogram_eps;
    Bichsel et al. 2021, NoisyHist2): (1/eps)-DP, not eps-DP (10 against 0.1). Output (n_runs, bins)."""
    return _answers(q, rng, n_runs, eps, "laplace")
