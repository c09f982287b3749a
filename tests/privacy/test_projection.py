"""Projection (Qiao & Wang 2023, eq. (2)) against scipy.optimize.linprog; transition estimate (eq. (3))."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linprog

from privaudit.core.errors import UsageError
from privaudit.privacy.projection import private_transition_estimate, project_counts


def lp_optimum(a, b, e):
    """min t s.t. |x_i - a_i| <= t, x >= 0, |sum x - b| <= e (eq. (2) as a linear program)."""
    S = a.size
    c = np.zeros(S + 1)
    c[-1] = 1.0
    eye = np.eye(S)
    A_ub = np.vstack([
        np.hstack([eye, -np.ones((S, 1))]),       # x_i - t <= a_i
        np.hstack([-eye, -np.ones((S, 1))]),      # -x_i - t <= -a_i
        np.hstack([np.ones((1, S)), [[0.0]]]),    # sum x <= b + e
        np.hstack([-np.ones((1, S)), [[0.0]]]),   # -sum x <= -(b - e)
    ])
    b_ub = np.concatenate([a, -a, [b + e], [-(b - e)]])
    res = linprog(c, A_ub=A_ub, b_ub=b_ub, bounds=[(0, None)] * (S + 1), method="highs",
                  options={"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10})
    assert res.status == 0
    return res.x[-1]


def make_instances(rng, kind, n, S):
    """Random noisy-count rows (n, S) and visit counts (n,) of a given kind."""
    a = np.maximum(0.0, rng.normal(3.0, 4.0, size=(n, S)))
    if kind == "zeros":  # many zeros, sum far above b: zeros bind (x_i = 0)
        a[:, : S // 2] = 0.0
        a[:, S // 2:] = rng.exponential(5.0, size=(n, S - S // 2))
        b = rng.uniform(0, 2, n)
    elif kind == "above":  # sum a > b + e
        b = a.sum(1) * rng.uniform(0.0, 0.7, n)
    elif kind == "below":  # sum a < b - e
        b = a.sum(1) * rng.uniform(1.5, 4.0, n) + 3
    elif kind == "inside":
        b = np.maximum(0.0, a.sum(1) + rng.uniform(-0.1, 0.1, n))
    elif kind == "ties":
        a = np.round(a)
        b = np.round(a.sum(1) * rng.uniform(0.2, 1.8, n))
    elif kind == "b_zero":
        b = np.zeros(n)
    elif kind == "a_zero":
        a[:] = 0.0
        b = rng.uniform(0, 20, n)
    else:  # large counts: relative precision
        a = a * 1e5
        b = a.sum(1) * rng.uniform(0.3, 1.7, n)
    return a, b


KINDS = ["zeros", "above", "below", "inside", "ties", "b_zero", "a_zero", "large"]


@pytest.mark.parametrize("E", [0.0, 0.5, 4.0])
@pytest.mark.parametrize("kind", KINDS)
def test_matches_linprog(kind, E):
    rng = np.random.default_rng(100 * KINDS.index(kind) + int(4 * E))
    for S in (1, 2, 7):
        n = 12
        a, b = make_instances(rng, kind, n, S)
        # vectorized call over a 3-D leading shape (h, s, a)
        x, nsa = project_counts(a.reshape(2, 3, 2, S), b.reshape(2, 3, 2), E)
        x, nsa = x.reshape(n, S), nsa.reshape(n)
        e = E / 2
        scale = max(1.0, float(np.abs(a).max()), float(b.max()))
        tol = 1e-9 * scale
        for i in range(n):
            t_lp = lp_optimum(a[i], b[i], e)
            t_ours = np.abs(x[i] - a[i]).max()
            assert t_ours == pytest.approx(t_lp, abs=tol), (kind, E, S, i)
            assert (x[i] >= 0).all()
            assert abs(x[i].sum() - b[i]) <= e + tol
            assert nsa[i] == pytest.approx(x[i].sum(), abs=tol)


def test_binding_cases_occur():
    # The instance families really exercise each branch of the solution.
    rng = np.random.default_rng(1)
    a, b = make_instances(rng, "above", 50, 7)
    x, _ = project_counts(a, b, 1.0)
    assert np.allclose(x.sum(1), b + 0.5)          # sum binds from above
    a, b = make_instances(rng, "below", 50, 7)
    x, _ = project_counts(a, b, 1.0)
    assert np.allclose(x.sum(1), b - 0.5)          # sum binds from below
    a, b = make_instances(rng, "zeros", 50, 7)
    x, _ = project_counts(a, b, 1.0)
    assert (x == 0).sum() > 3 * 50                 # x >= 0 binds
    a, b = make_instances(rng, "inside", 50, 7)
    x, _ = project_counts(a, b, 1.0)
    assert np.array_equal(x, a)                    # already consistent: untouched


def test_exact_consistency_when_E_zero():
    rng = np.random.default_rng(2)
    a = np.maximum(0, rng.normal(2, 3, size=(4, 5, 6)))
    b = np.maximum(0, rng.normal(10, 5, size=(4, 5)))
    x, nsa = project_counts(a, b, 0.0)
    np.testing.assert_allclose(nsa, b, rtol=1e-12, atol=1e-12)


def test_hand_example():
    # a = (3, 1, 0), b = 1, e = 0: minimise max |x - a| with sum x = 1, x >= 0.
    # x = max(a - u, 0) with Lo(u) = 1 -> u = 2, x = (1, 0, 0), deviation 2.
    x, n = project_counts(np.array([3.0, 1.0, 0.0]), np.array(1.0), 0.0)
    np.testing.assert_allclose(x, [1.0, 0.0, 0.0])
    assert n == pytest.approx(1.0)
    # a = (0, 0), b = 4, e = 1: sum must reach 3 -> x = (1.5, 1.5), deviation 1.5.
    x, _ = project_counts(np.zeros(2), np.array(4.0), 2.0)
    np.testing.assert_allclose(x, [1.5, 1.5])


def test_bad_input():
    with pytest.raises(UsageError):
        project_counts(np.ones((2, 3)), np.ones(3), 1.0)
    with pytest.raises(UsageError, match="clip"):
        project_counts(-np.ones((2, 3)), np.ones(2), 1.0)
    with pytest.raises(UsageError):
        project_counts(np.ones((2, 3)), np.ones(2), -1.0)
    with pytest.raises(UsageError):
        private_transition_estimate(np.ones((2, 3)), np.ones(3), 1.0)


def test_private_transition_estimate():
    x = np.array([[2.0, 1.0, 1.0], [0.5, 0.5, 0.0], [1.0, 1.0, 2.0]])
    n = x.sum(1)  # 4, 1, 4
    P = private_transition_estimate(x, n, E=4.0)  # n > E strictly: none, all uniform
    np.testing.assert_allclose(P, 1 / 3)
    P = private_transition_estimate(x, n, E=1.0)
    np.testing.assert_allclose(P[0], [0.5, 0.25, 0.25])
    np.testing.assert_allclose(P[1], 1 / 3)     # n = E: uniform
    np.testing.assert_allclose(P[2], [0.25, 0.25, 0.5])
    rng = np.random.default_rng(3)
    a = np.maximum(0, rng.normal(1, 3, size=(3, 4, 5, 6)))
    b = np.maximum(0, rng.normal(5, 5, size=(3, 4, 5)))
    xt, nt = project_counts(a, b, 2.0)
    P = private_transition_estimate(xt, nt, 2.0)
    np.testing.assert_allclose(P.sum(-1), 1.0, rtol=1e-12)
    assert (P >= 0).all()
