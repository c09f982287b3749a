"""What the benchmarks that measure a run in a fresh child process share.

A benchmark script re-runs itself as ``python SCRIPT --child ARGS...`` so that
the child's peak resident memory and CPU time are the measured run's own; the
child prints one JSON object as its last line of stdout. Imported as a sibling
module (``python benchmarks/NAME.py`` puts ``benchmarks/`` first on sys.path).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


class ChildFailed(RuntimeError):
    """The child exited non-zero; the message is its stderr (or its exit code)."""


def cache_dir() -> Path:
    """The benchmarks' shared cache of simulated logs: ``<temp>/privaudit-bench`` (created)."""
    cache = Path(tempfile.gettempdir()) / "privaudit-bench"
    cache.mkdir(exist_ok=True)
    return cache


def run_child(script: str, *args: str, env: dict | None = None) -> dict:
    """Run ``python SCRIPT --child ARGS...`` and return the JSON object of its last stdout line.

    Parameters
    ----------
    script : str
        The benchmark's own path (``__file__``).
    *args : str
        The arguments after ``--child``.
    env : dict, optional
        Extra environment variables; ``POLARS_MAX_THREADS`` is 2 unless given (the 2-core target).

    Raises
    ------
    ChildFailed
        The child exited non-zero (its stderr is the message).
    """
    res = subprocess.run([sys.executable, script, "--child", *map(str, args)], capture_output=True, text=True,
                         env={**os.environ, "POLARS_MAX_THREADS": "2", **(env or {})})
    if res.returncode:
        raise ChildFailed(res.stderr.strip() or f"exit code {res.returncode}")
    return json.loads(res.stdout.strip().splitlines()[-1])
