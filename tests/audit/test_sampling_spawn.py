"""Unbatched runs go to spawned workers only when a worker can receive the mechanism (session 15).

Under load, a slow unbatched mechanism crosses ``PARALLEL_MIN_SERIAL_S`` and its runs go to a pool of spawned
processes. A mechanism defined in a notebook cell, the REPL or an ``exec``'d namespace (the worked examples of
docs/audit.md run that way in tests/audit/test_custom_mechanisms.py) cannot be sent there: the audit failed with
``PicklingError: Can't pickle <function svt_no_query_noise>`` (seen once in a loaded test run). Such mechanisms
now run in this process.
"""

from __future__ import annotations

import sys
import types

import numpy as np

import privaudit.audit.sampling as sampling
from privaudit.audit.inputs import sequence_output
from privaudit.audit.sampling import Sampler, spawn_can_receive

EXEC_SOURCE = """
import numpy as np

def noisy_sum(q, rng):
    return np.array([float(np.sum(q)) + rng.laplace(0.0, 1.0)])
"""


def _exec_mechanism():
    ns: dict = {}
    exec(compile(EXEC_SOURCE, "<a notebook cell>", "exec"), ns)  # noqa: S102 - a mechanism no worker can import
    return ns["noisy_sum"]


def test_what_a_spawned_worker_can_receive(monkeypatch, tmp_path):
    fn = _exec_mechanism()
    assert not spawn_can_receive(fn)
    assert not spawn_can_receive(sequence_output(fn, max_length=2))  # a wrapper holding it
    assert not spawn_can_receive(lambda q, rng: np.zeros(1))
    assert spawn_can_receive(np.mean)

    def in_main(q, rng):
        return np.zeros(1)

    in_main.__module__, in_main.__qualname__ = "__main__", "in_main"
    fake_main = types.ModuleType("__main__")
    fake_main.in_main = in_main
    monkeypatch.setitem(sys.modules, "__main__", fake_main)
    assert not spawn_can_receive(in_main)  # a notebook's or the REPL's __main__: no file to re-import
    script = tmp_path / "script.py"
    script.write_text("")
    fake_main.__file__ = str(script)
    assert spawn_can_receive(in_main)  # `python script.py`: the worker re-imports it as __mp_main__


def test_an_unimportable_mechanism_runs_here_instead_of_failing(monkeypatch):
    monkeypatch.setattr(sampling, "PARALLEL_MIN_SERIAL_S", 0.0)  # the pool from the second draw on
    sampler = Sampler(_exec_mechanism(), batched=False, n_jobs=2, progress=lambda k: None)
    q = np.array([1.0, 2.0])
    X = sampler.draw(q, 40, np.random.default_rng(0))
    try:
        assert X.shape == (40, 1) and np.isfinite(X).all()
        assert sampler._pool is None  # never sent to a worker (before: PicklingError from the pool's feeder)
        assert abs(float(np.median(X)) - 3.0) < 1.5  # Laplace(3, 1) runs; |median - 3| >= 1.5: p < 1e-6
    finally:
        sampler.close()
