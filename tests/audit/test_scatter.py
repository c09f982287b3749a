"""The Fisher score's pooled covariance without np.cov (issue 19): block-wise scatter against np.cov."""

from __future__ import annotations

import numpy as np
import pytest

from privaudit.audit import attacks
from privaudit.audit.attacks import fit_candidates, within_scatter


@pytest.mark.parametrize("n, d", [(1, 3), (7, 1), (4096, 5), (10_000, 40)])
def test_within_scatter_is_n_minus_1_times_np_cov(n, d):
    rng = np.random.default_rng(n + d)
    # columns on very different scales and far from 0: centring must happen before the product
    F = rng.normal(size=(n, d)) * rng.uniform(0.01, 100.0, d) + rng.normal(size=d) * 1e4
    ref = np.atleast_2d(np.cov(F, rowvar=False, ddof=0) * n)  # ddof=0 * n: defined at n = 1 too
    got = within_scatter(F, F.mean(axis=0))
    assert got.shape == (d, d)
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-9 * np.abs(ref).max())
    np.testing.assert_array_equal(got, got.T)


def test_within_scatter_blocks_do_not_change_the_result(monkeypatch):
    rng = np.random.default_rng(3)
    F = rng.normal(size=(1000, 6))
    whole = within_scatter(F, F.mean(axis=0))
    monkeypatch.setattr(attacks, "SCATTER_BLOCK", 7)  # 143 blocks, the last one partial
    np.testing.assert_allclose(within_scatter(F, F.mean(axis=0)), whole, rtol=1e-12, atol=1e-12)


def test_fisher_weights_equal_the_np_cov_formula():
    rng = np.random.default_rng(5)
    X0 = rng.normal(size=(3000, 12)) @ rng.normal(size=(12, 12))
    X1 = X0[::-1] + 0.3 * np.arange(12)
    fisher = {c.name: c for c in fit_candidates(X0, X1)}["fisher"]
    C = (np.cov(X0, rowvar=False) * 2999 + np.cov(X1, rowvar=False) * 2999) / 5998
    ridge = fisher.info["ridge"]
    w_ref = np.linalg.solve(C + ridge * np.eye(12), X1.mean(axis=0) - X0.mean(axis=0))
    x = rng.normal(size=(50, 12))
    np.testing.assert_allclose(fisher.score(x), x @ w_ref, rtol=1e-8, atol=1e-10)
