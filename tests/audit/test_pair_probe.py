"""The auditor's "useless pair" probe (``sampling.pair_unchanged_warning``) on batched mechanisms.

It drew all 300 probe runs per side in one call; the online explorers are batched but run one stream at a time
in Python, so the probe was a third of an explorer audit's CPU. It now draws growing chunks (10, 30, 100, then
the rest) and stops after the first chunk whose outputs differ; the warning keeps its meaning (given only when all
300 runs agree). Deterministic: no statistical test here (the outputs are compared exactly).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from privaudit.audit.sampling import PROBE_RUNS, Sampler, pair_unchanged_warning, probe_chunks

PAIR = SimpleNamespace(d="D", d_prime="D'")


def _recording(differs):
    """A batched mechanism: Gaussian noise, plus 1 on D' where ``differs(call, sizes)`` says; records its calls."""
    calls = []

    def fn(logs, rng, n_runs):
        calls.append((logs, n_runs))
        call = sum(1 for c in calls if c[0] == logs)  # 1, 2, ... on each side
        out = rng.normal(size=(n_runs, 3))
        if logs == "D'" and differs(call):
            out[-1] += 1.0
        return out
    return fn, calls


def _warning(fn):
    sampler = Sampler(fn, batched=True, n_jobs=1, progress=lambda k: None)
    sampler.shape = (3,)  # as after the audit's first draws
    return pair_unchanged_warning(sampler, PAIR)


def test_probe_chunks_grow_and_add_up():
    assert probe_chunks(PROBE_RUNS) == [10, 30, 100, 160]
    assert probe_chunks(40) == [10, 30] and probe_chunks(59) == [10, 30, 19] and probe_chunks(5) == [5]
    assert all(sum(probe_chunks(m)) == m for m in range(1, 400))


def test_a_mechanism_that_ignores_its_input_is_warned_about_after_all_300_runs():
    fn, calls = _recording(lambda call: False)
    w = _warning(fn)
    assert w is not None and f"identical outputs in all {PROBE_RUNS} probe runs" in w
    # both sides drew every chunk, D then D', under the same random numbers (else the outputs would differ)
    assert calls == [(side, n) for n in probe_chunks(PROBE_RUNS) for side in ("D", "D'")]


def test_a_difference_only_in_the_last_chunk_is_no_warning():
    last = len(probe_chunks(PROBE_RUNS))
    fn, calls = _recording(lambda call: call == last)  # only the last run of the 160-run chunk differs
    assert _warning(fn) is None
    assert len(calls) == 2 * last


def test_the_probe_stops_after_the_first_chunk_with_a_difference():
    """The usual case: D and D' differ at once, so one chunk of 10 runs per side is drawn, not 300."""
    fn, calls = _recording(lambda call: True)
    assert _warning(fn) is None
    assert calls == [("D", 10), ("D'", 10)]


def test_the_two_sides_get_the_same_random_numbers_in_every_chunk():
    seen = {"D": [], "D'": []}

    def fn(logs, rng, n_runs):
        x = rng.random((n_runs, 3))
        seen[logs].append(x)
        return x
    assert _warning(fn) is not None
    assert len(seen["D"]) == 4 and all(np.array_equal(a, b) for a, b in zip(seen["D"], seen["D'"]))
    assert not np.array_equal(seen["D"][0], seen["D"][1][:10])  # each chunk draws fresh numbers
