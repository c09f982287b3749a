"""Issue 13 item 8: the README's Python example runs as a script from any folder; sample data via the package."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import privaudit
from tests.conftest import REPO


def test_sample_data_paths_exist():
    s = privaudit.sample_data()
    assert all(p.is_file() for p in s)
    assert s.logs.suffix == ".parquet" and s.spec.suffix == ".json"


def test_readme_python_example_runs_from_another_folder(tmp_path):
    text = (REPO / "README.md").read_text()
    block = text.split("Everything the CLI does is a Python call", 1)[1]
    code = re.search(r"```python\n(.*?)```", block, re.S).group(1)
    script = tmp_path / "example.py"
    script.write_text(code)
    env = dict(os.environ, PYTHONPATH=str(REPO))  # the library as installed; cwd is elsewhere
    res = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr
    value = float(res.stdout.strip().splitlines()[-1])
    assert 0.0 <= value <= 1.0  # ICU-Sepsis values are survival probabilities
    assert (tmp_path / "rel" / "manifest.json").is_file()
