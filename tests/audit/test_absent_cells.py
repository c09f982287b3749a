"""Absent cells (NaN) of a variable-length output are not values: the medians behind the float side-channel
scores and the Laplace likelihood ratio are taken over the finite cells only (issue 30: "the float attack's
median estimate fails on NaN cells").

A float Laplace release of a count that is published in a third of the runs only (NaN otherwise) leaks
through its low-order bits like the always-published one (Mironov 2012). Before the fix, the median of each
mostly-NaN cell was 0 on both sides, so the auditor saw no changed cell, fitted no float score and found
nothing (eps_lb 0 at this seed and count).

The audit is at a fixed seed; the bound sits far above the claim (for a claim of 0.5), and the
integer twin's "not flagged" had at most 1 - confidence = 0.05 chance of failing when written."""

from __future__ import annotations

import numpy as np

from privaudit.audit import AuditSettings, Claim, input_pair, run_audit
from privaudit.audit.attacks import finite_median, fit_candidates
from privaudit.audit.graybox import sampler_hint


def sometimes_float_laplace(x, rng, n_runs=1):
    """BROKEN: ``x + Laplace(2)`` in float64 (claimed 0.5-DP), published in about a third of the runs (NaN
    otherwise)."""
    y = float(x) + rng.laplace(0.0, 2.0, n_runs)
    return np.where(rng.random(n_runs) < 1 / 3, y, np.nan)


def sometimes_discrete_laplace(x, rng, n_runs=1):
    """Correct twin: the integer count plus discrete Laplace noise (0.5-DP), published in about a third."""
    p = 1.0 - np.exp(-0.5)
    y = float(x) + (rng.geometric(p, n_runs) - rng.geometric(p, n_runs)).astype(float)
    return np.where(rng.random(n_runs) < 1 / 3, y, np.nan)


def test_finite_median_ignores_absent_cells():
    X = np.array([[np.nan, 1.0], [np.nan, np.inf], [5.0, 3.0], [np.nan, np.nan]])
    med = finite_median(X)
    assert med[0] == 5.0 and med[1] == 2.0
    assert np.isnan(finite_median(np.full((3, 1), np.nan))[0])


def test_sampler_hint_estimates_the_count_of_a_mostly_absent_cell():
    rng = np.random.default_rng(0)
    X0 = sometimes_float_laplace(0, rng, 6000)[:, None]
    X1 = sometimes_float_laplace(1, rng, 6000)[:, None]
    hint = sampler_hint(object(), None, X0, X1)  # no hooks: the rounded medians of the finite values
    # 2000 finite values of Laplace(2): the median's sd is ~2/sqrt(2000) = 0.045, so 0 and 1 round exactly
    # unless the estimate is off by 11 sd
    assert hint["c0"][0] == 0.0 and hint["c1"][0] == 1.0
    names = [c.name for c in fit_candidates(X0, X1, hint=hint)]
    assert "any_float_noise_lattice" in names and "laplace_lr" in names


def test_a_sometimes_published_float_release_is_flagged_and_its_integer_twin_is_not():
    claim = Claim.from_epsilon(0.5, 0.0)
    settings = AuditSettings(n_jobs=1)
    bad = run_audit(sometimes_float_laplace, pair=input_pair(0.0, 1.0), claim=claim, trials=6000, seed=3,
                    progress=False, settings=settings)
    assert bad.violation and bad.epsilon_lower_bound > 1.0
    assert bad.data["chosen_event"]["candidate"] == "any_float_noise_lattice"
    ok = run_audit(sometimes_discrete_laplace, pair=input_pair(0.0, 1.0), claim=claim, trials=6000, seed=3,
                   progress=False, settings=settings)
    assert not ok.violation and ok.epsilon_lower_bound <= 0.5
