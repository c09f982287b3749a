"""How the runner chooses the event on the selection split (GDP objective).

Simulated choice-half counts (no mechanism runs): scores of D ~ N(0, 1) and
of D' ~ N(mu, 1), 5000 runs per side, thresholds at the pooled quantiles the
runner tries. Fixed seeds; the failure probabilities are estimated from 400
seeds (see each test).
"""

from __future__ import annotations

import numpy as np
import pytest

from privaudit.audit import bounds as B
from privaudit.audit.choice import GDP_QUANTILES, _gdp_shrunk

N = 5000
A_SEL = 0.025 / (2 * 10 * len(GDP_QUANTILES))  # the runner's share with 10 candidates


def _counts(s0, s1):
    t = np.unique(np.quantile(np.concatenate([s0, s1]), GDP_QUANTILES, method="inverted_cdf"))
    s0, s1 = np.sort(s0), np.sort(s1)
    gt0 = len(s0) - np.searchsorted(s0, t, side="right")
    gt1 = len(s1) - np.searchsorted(s1, t, side="right")
    return gt0, gt1


def test_gdp_choice_keeps_the_central_threshold_on_a_gaussian_curve():
    """mu = 0.2 (issue 14's hard case): the plain in-sample argmax lands off-centre in about half the
    seeds (46% outside FPR 0.3-0.6 over 400 seeds), the shrunk prediction in none of 400 (its
    chosen FPR lay in 0.44-0.48); so a failure of the first assert on these 40 fixed seeds has
    probability < 40 x 0.75% (the 95% upper bound per seed) and the second (>= 8 of 40 off-centre
    for the plain rule, expected 18) about 1e-5."""
    off_plain, off_shrunk = 0, 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        gt0, gt1 = _counts(rng.normal(0, 1, N), rng.normal(0.2, 1, N))
        plain = B.predict_objective(gt0, gt1, N, N, N, N, A_SEL, 1e-5, "gaussian")
        shrunk = _gdp_shrunk(gt0, N, N - gt1, N, A_SEL)
        off_plain += not 0.3 <= gt0[np.argmax(plain)] / N <= 0.6
        off_shrunk += not 0.3 <= gt0[np.argmax(shrunk)] / N <= 0.6
    assert off_shrunk == 0
    assert off_plain >= 8


def test_gdp_choice_still_finds_a_leak_in_a_tail_event():
    """A real departure from a GDP shape is kept: 3% of D' runs leak (score 10), the rest N(0.2, 1).
    The event {score > t} in the top pooled quantiles has FPR ~ 0 and TPR ~ 0.03, mu ~ 1.9 >> 0.2;
    its Clopper-Pearson interval excludes the central level by far (deterministic given the counts:
    the leak gives 150 of 5000 D' runs above every D run with probability ~1)."""
    rng = np.random.default_rng(0)
    s1 = rng.normal(0.2, 1, N)
    s1[: int(0.03 * N)] = 10.0
    gt0, gt1 = _counts(rng.normal(0, 1, N), s1)
    shrunk = _gdp_shrunk(gt0, N, N - gt1, N, A_SEL)
    i = int(np.argmax(shrunk))
    assert gt0[i] / N < 0.005 and shrunk[i] > 0.5
    plain = B.predict_objective(gt0, gt1, N, N, N, N, A_SEL, 1e-5, "gaussian")
    assert shrunk[i] == pytest.approx(np.max(plain), rel=1e-6)  # the tail keeps its own (plain) prediction


def _weak_leak(seed: int, n: int = 4000):
    """Choice-half outputs: cell 0 pure noise (same law under D and D'), cell 1 a weak leak, an event of
    probability 0.05 under D and 0.05 e^0.45 under D' with a little continuous jitter (so the candidate has
    thousands of thresholds, as a real score does)."""
    rng = np.random.default_rng(seed)
    X0 = np.stack([rng.normal(size=n), (rng.random(n) < 0.05) + 1e-3 * rng.random(n)], axis=1)
    X1 = np.stack([rng.normal(size=n), (rng.random(n) < 0.05 * np.exp(0.45)) + 1e-3 * rng.random(n)], axis=1)
    return X0, X1


def test_weak_leak_choice_falls_back_to_the_milder_prediction():
    """~200 vs ~313 counts: log-ratio 0.45 +- 0.09. Corrected for ~8000 events tried (z ~ 4.5), the choice
    half proves nothing (on main the first candidate, the noise cell, was then counted at its median); the
    milder prediction (2 candidates x 2 directions, z ~ 2.5) is positive for the leaking cell. Over seeds
    0-199: the leak chosen in 191 (in 153 by the milder prediction alone, in 38 the simultaneous bound was
    already positive), the noise cell in 9 (nothing positive at all); seed 7 here, a milder-only choice."""
    from privaudit.audit.attacks import Candidate
    from privaudit.audit.choice import choose_event
    X0, X1 = _weak_leak(7)
    cands = [Candidate("noise", lambda X: X[:, 0]), Candidate("leak", lambda X: X[:, 1])]
    value, cand, t, d, rank = choose_event(cands, X0, X1, 0.025, 0.0, "generic")
    assert rank[0] == 0.0 and rank[1] > 0.0
    assert cand.name == "leak" and d == "+" and 0.0 <= t < 1.0  # the event {leak cell above t}: the leak


def _rare_and_frequent(rng, p, n):
    """One score: level 2 (rare), 1 (frequent) or 0, plus a uniform jitter of width 0.5 inside each level
    (thousands of thresholds, as a fitted score has)."""
    u = rng.random(n)
    lev = np.where(u < p[2], 2.0, np.where(u < p[2] + p[1], 1.0, 0.0))
    return (lev + 0.5 * rng.random(n))[:, None]


def test_choice_prefers_the_rare_strong_event_of_a_weak_sparse_vector_leak():
    """svt3's shape (literature suite, 10^6 runs per side: choice half 2.5x10^5, evaluation 5x10^5): its
    best event has probability 0.0072 and log-ratio 0.22; a 10 times more probable one has 0.11. The
    event chosen on the choice half is scored by the evaluation bound it is expected to give (exact rates
    of the simulated law, 5x10^5 runs). Over seeds 0-39 (a one-off study): session 13's rule (the
    simultaneous bound) averaged 0.102 and exceeded 0.1 in 25% of seeds; this rule (SHRINK_Z 1.5) 0.140
    and 90%. Seeds 0-7 here: the mean over them falls below 0.12 with probability well under 1% (per-seed
    sd ~ 0.02, so the mean of 8 has sd ~ 0.007 around 0.14)."""
    from privaudit.audit.attacks import Candidate
    from privaudit.audit.choice import choose_event
    n, n_ev = 250_000, 500_000
    p0 = {2: 0.0072, 1: 0.08 - 0.0072}
    p1 = {2: 0.0072 * np.exp(0.22)}
    p1[1] = 0.08 * np.exp(0.11) - p1[2]

    def above(t, lev):  # share of a level's mass above t
        return float(np.clip((lev + 0.5 - t) / 0.5, 0.0, 1.0))

    expected = []
    for seed in range(8):
        rng = np.random.default_rng(seed)
        X0, X1 = _rare_and_frequent(rng, p0, n), _rare_and_frequent(rng, p1, n)
        _, _, t, d, _ = choose_event([Candidate("level", lambda X: X[:, 0])], X0, X1, 0.025, 0.0, "generic", n_ev)
        assert d == "+"
        a = p0[2] * above(t, 2) + p0[1] * above(t, 1)
        b = p1[2] * above(t, 2) + p1[1] * above(t, 1)
        expected.append(float(np.log(B.cp_lower(b * n_ev, n_ev, 0.025) / B.cp_upper(a * n_ev, n_ev, 0.025))))
    assert np.mean(expected) > 0.12
