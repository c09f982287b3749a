"""Exact sufficient statistics against a slow row-by-row reference."""

import numpy as np
import polars as pl
import pytest

from privaudit.core.errors import ValidationFailed
from privaudit.core.spec import DomainSpec
from privaudit.data import counts
from tests._release_logs import random_log, slow_counts, spec_doc

H, S, A = 4, 6, 3
TERMINALS = (4, 5)


@pytest.fixture(scope="module")
def log():
    rng = np.random.default_rng(2024)
    return random_log(rng, 400, H=H, S=S, A=A, terminals=TERMINALS)


@pytest.fixture(scope="module")
def spec():
    return DomainSpec.from_dict(spec_doc(H=H, S=S, A=A, terminals=TERMINALS))


@pytest.mark.parametrize("stationary", [False, True])
def test_counts_match_slow_reference(log, spec, stationary):
    n_ref, t_ref, r_ref = slow_counts(log, H, S, A, TERMINALS, stationary)
    shape = (S, A) if stationary else (H, S, A)
    n = counts.visit_counts(log.lazy(), spec, stationary=stationary)
    t = counts.transition_counts(log, spec, stationary=stationary)
    r = counts.reward_sums(log, spec, stationary=stationary)
    assert n.shape == shape and n.dtype == np.int64
    assert t.shape == shape + (S,) and t.dtype == np.int64
    np.testing.assert_array_equal(n, n_ref)
    np.testing.assert_array_equal(t, t_ref)
    np.testing.assert_allclose(r, r_ref, rtol=1e-12, atol=1e-12)
    # every step has a next state: transitions sum to visits exactly
    np.testing.assert_array_equal(t.sum(axis=-1), n)
    assert n.sum() == log.height  # no row starts in a terminal state in this log


def test_iterator_yields_one_slice_per_h(log, spec):
    _, t_ref, _ = slow_counts(log, H, S, A, TERMINALS)
    hs = []
    for h, sl in counts.iter_transition_counts(log.lazy(), spec):
        hs.append(h)
        assert sl.shape == (S, A, S)
        np.testing.assert_array_equal(sl, t_ref[h])
    assert hs == list(range(H))


def test_quantized_reward_sums(log, spec):
    q = 1000
    ref = np.zeros((H, S, A), dtype=np.int64)
    for row in log.iter_rows(named=True):
        ref[row["step"], row["state"], row["action"]] += int(round(row["reward"] * q))
    got = counts.reward_sums(log, spec, quantum=q)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, ref)


def test_terminal_rows_not_counted_transitions_into_terminal_counted(spec):
    df = pl.DataFrame({"episode_id": [0, 0, 1], "step": [0, 1, 0], "state": [0, 4, 1],
                       "action": [1, 2, 0], "reward": [0.0, 0.0, 1.0], "next_state": [4, 4, 5]})
    n = counts.visit_counts(df, spec)
    t = counts.transition_counts(df, spec)
    assert n.sum() == 2 and n[0, 0, 1] == 1 and n[0, 1, 0] == 1
    assert t[0, 0, 1, 4] == 1 and t[0, 1, 0, 5] == 1 and t[1].sum() == 0


def test_dense_over_declared_domain_not_the_data(spec):
    df = pl.DataFrame({"episode_id": [0], "step": [0], "state": [0], "action": [0],
                       "reward": [0.5], "next_state": [1]})
    assert counts.visit_counts(df, spec).shape == (H, S, A)
    assert counts.transition_counts(df, spec).shape == (H, S, A, S)
    empty = df.clear()
    assert counts.visit_counts(empty, spec).sum() == 0


@pytest.mark.parametrize("col,val", [("state", S), ("action", -1), ("next_state", 99), ("step", H)])
def test_out_of_domain_index_is_refused(spec, col, val):
    df = pl.DataFrame({"episode_id": [0], "step": [0], "state": [0], "action": [0],
                       "reward": [0.5], "next_state": [1]}).with_columns(pl.lit(val).cast(pl.Int64).alias(col))
    with pytest.raises(ValidationFailed, match=col):
        counts.visit_counts(df, spec) if col != "next_state" else counts.transition_counts(df, spec)
