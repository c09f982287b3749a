"""The counts protocol: exact counts, a release read back and array counts answer alike.

Oracle: ``tests._release_logs.slow_counts`` (a Python loop over rows).
"""

from __future__ import annotations

import numpy as np
import pytest

from privaudit.core.errors import UsageError
from privaudit.data.prepare import prepare_logs
from privaudit.learners.tabular.dp_apvi import DPAPVI
from privaudit.learners.tabular.pbb_counts import capped_counts_from_logs
from privaudit.learners.tabular.counts import TabularCounts, exact_counts
from privaudit.core.spec import load_spec
from privaudit.data.counts import sparse_counts
from privaudit.data.counts_protocol import Counts
from privaudit.release.tabular import load_release, release_logs
from tests._release_logs import random_log, slow_counts, write_spec

H, S, A = 4, 6, 3
TERMINALS = (5,)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    d = tmp_path_factory.mktemp("protocol")
    df = random_log(np.random.default_rng(8), 120, H=H, S=S, A=A, terminals=TERMINALS)
    df.write_parquet(d / "logs.parquet")
    spec = load_spec(write_spec(d, H=H, S=S, A=A, terminals=TERMINALS))
    return {"dir": d, "df": df, "spec": spec}


@pytest.mark.parametrize("stationary", [False, True])
def test_exact_counts_answer_the_protocol_like_the_slow_oracle(world, stationary):
    df, spec = world["df"], world["spec"]
    counts = exact_counts(df, spec, stationary=stationary)
    assert isinstance(counts, Counts) and not counts.noisy and counts.has_reward_sums
    n, t, r = slow_counts(df, H, S, A, TERMINALS, stationary=stationary)
    arrays = TabularCounts.from_arrays(n, t, horizon=H, reward_sums=r)
    assert isinstance(arrays, Counts)
    for h in range(H):
        g = 0 if stationary else h
        for c in (counts, arrays):
            np.testing.assert_array_equal(c.visits_at(h), n[g] if not stationary else n)
            np.testing.assert_array_equal(c.transitions_at(h), t[g] if not stationary else t)
            np.testing.assert_allclose(c.reward_sums_at(h), r[g] if not stationary else r, rtol=0, atol=1e-9)
    for c in (counts, arrays):
        with pytest.raises(UsageError, match=r"step in \[0, 4\)"):
            c.visits_at(H)


def test_a_release_answers_the_protocol_in_scaled_reward_units(world, tmp_path):
    release_logs(world["dir"] / "logs.parquet", world["spec"], rho=1.0, out=tmp_path / "r", seed=3)
    rel = load_release(tmp_path / "r")
    assert isinstance(rel, Counts) and rel.noisy and rel.has_reward_sums
    assert (rel.horizon, rel.n_states, rel.n_actions, rel.stationary) == (H, S, A, False)
    unit = rel.manifest.families["rewards"].value_unit
    assert unit == pytest.approx(1 / 1000)
    for h in range(H):
        np.testing.assert_array_equal(rel.visits_at(h), rel.visits[h])
        np.testing.assert_allclose(rel.reward_sums_at(h), rel.rewards[h] * unit, rtol=1e-15)
    # DP-APVI reads the release through the protocol: the same as the same numbers held in arrays
    arrays = TabularCounts.from_arrays(rel.visits, np.stack([rel.transitions_at(h) for h in range(H)]), horizon=H,
                                       reward_sums=rel.rewards * unit, noisy=True)
    a = DPAPVI().fit(rel)
    b = DPAPVI(noise_bound=a.E_).fit(arrays, terminal_states=TERMINALS)
    np.testing.assert_array_equal(a.Q_, b.Q_)
    np.testing.assert_array_equal(a.policy_.table, b.policy_.table)


@pytest.mark.parametrize("stationary", [False, True])
def test_whole_tables_have_one_vocabulary(world, tmp_path, stationary):
    """visits (array) and iter_transitions() in all three containers; rewards (stored units) in the exact
    counts and the release read back: the names TabularRelease.apply reads. Checked against the slow oracle."""
    df, spec = world["df"], world["spec"]
    n, t, r = slow_counts(df, H, S, A, TERMINALS, stationary=stationary)
    exact = sparse_counts(df, spec, stationary=stationary, quantum=1000)
    arrays = TabularCounts.from_arrays(n, t, horizon=H, reward_sums=r)  # stationary from the shapes
    release_logs(world["dir"] / "logs.parquet", spec, rho=1.0, stationary=stationary, out=tmp_path / "r", seed=3)
    rel = load_release(tmp_path / "r")
    for c in (exact, arrays, rel):
        assert isinstance(c.visits, np.ndarray) and c.visits.shape == n.shape
        steps = [h for h, _ in c.iter_transitions()]
        assert steps == ([0] if stationary else list(range(H)))
    np.testing.assert_array_equal(exact.visits, n)
    np.testing.assert_array_equal(arrays.visits, n)
    for (h, a), (_, b) in zip(exact.iter_transitions(), arrays.iter_transitions()):
        np.testing.assert_array_equal(a, b)
    assert exact.rewards.dtype == rel.rewards.dtype == np.int64 and exact.rewards.shape == rel.rewards.shape
    np.testing.assert_allclose(exact.rewards / 1000, r, atol=0.5e-3 * (df.height + 1))  # per-row rounding to 1e-3
    assert sparse_counts(df, spec, rewards=False).rewards is None


@pytest.mark.parametrize("stationary", [False, True])
def test_dp_pbb_capped_counts_answer_the_protocol(world, stationary):
    """DP-PBB's CappedCounts (no per-cell cap here, so they are the exact counts) answer the protocol like the
    slow oracle: visits_at, transitions_at, the whole visits table, iter_transitions; no reward sums."""
    df, spec = world["df"], world["spec"]
    prepared = prepare_logs(world["dir"] / "logs.parquet", spec)
    capped = capped_counts_from_logs(prepared, spec, stationary=stationary, max_per_cell=None)
    n, t, _ = slow_counts(df, H, S, A, TERMINALS, stationary=stationary)
    assert isinstance(capped, Counts) and not capped.noisy and not capped.has_reward_sums
    assert (capped.horizon, capped.n_states, capped.n_actions, capped.stationary) == (H, S, A, stationary)
    np.testing.assert_array_equal(capped.visits, n)
    for h in range(H):
        g = 0 if stationary else h
        np.testing.assert_array_equal(capped.visits_at(h), n if stationary else n[g])
        np.testing.assert_array_equal(capped.transitions_at(h), t if stationary else t[g])
        assert capped.reward_sums_at(h) is None
    got = dict(capped.iter_transitions())
    assert sorted(got) == ([0] if stationary else list(range(H)))
    for h, th in got.items():
        np.testing.assert_array_equal(th, t if stationary else t[h])
    with pytest.raises(UsageError, match=r"step in \[0, 4\)"):
        capped.visits_at(H)
