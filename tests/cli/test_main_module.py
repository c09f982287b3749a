"""``python -m privaudit`` runs the same CLI as the ``privaudit`` script."""

from __future__ import annotations

import subprocess
import sys


def test_python_dash_m_runs_the_cli() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "privaudit", "validate", "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: privaudit validate")
