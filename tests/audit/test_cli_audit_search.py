"""``privaudit audit --search`` and ``--target-excess`` (issue 30 items 2 and 3) from the command line."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from privaudit.audit import load_report
from privaudit.audit.guidance import trials_needed
from privaudit.cli import main

USER_CODE = '''
import numpy as np

def noisy_sum(q, rng, n_runs=1):
    """Sum of integer query answers + discrete Laplace(scale 2): 0.5-DP if ONE answer moves by 1; the
    StatDP patterns move several (all above: the sum moves by 4, true epsilon 2)."""
    p = 1.0 - np.exp(-0.5)
    return np.asarray(q, dtype=float).sum() + (rng.geometric(p, (n_runs, 1)) - rng.geometric(p, (n_runs, 1)))

def my_pairs():
    yield [1.0, 1.0, 1.0, 1.0], [2.0, 1.0, 1.0, 1.0]
    yield [1.0, 1.0, 1.0, 1.0], [2.0, 2.0, 2.0, 2.0]

def broken_pairs():
    yield [1.0], [2.0]
    raise RuntimeError("no more inputs")
'''


@pytest.fixture
def code(tmp_path):
    (tmp_path / "mine.py").write_text(USER_CODE)
    return tmp_path


def _run(args):
    return CliRunner().invoke(main, ["audit", *map(str, args)])


def test_search_patterns_from_the_cli_names_the_pair(code):
    res = _run(["--mechanism", f"{code / 'mine.py'}:noisy_sum", "--search", "patterns:4", "--claim-epsilon", "0.5",
                "--trials", "2000", "--seed", "0", "--out", code / "rep.json"])
    assert res.exit_code == 3, res.output                   # true epsilon 2 on 'all above' / 'all below'
    assert "search: 8 candidate pairs (patterns:4)" in res.stderr
    doc = load_report(code / "rep.json")
    assert doc["neighbouring_pair"]["pattern"] in ("all above", "all below") and doc["epsilon_lower_bound"] > 1
    assert len(doc["neighbouring_pair"]["search"]["pairs"]) == 8 and not doc["shareable"]
    assert "pattern) (substitution neighbours)" in res.stderr and "input search: 8 candidate pairs" in res.stderr


def test_search_with_the_users_pairs_and_its_errors(code):
    res = _run(["--mechanism", f"{code / 'mine.py'}:noisy_sum", "--search", f"{code / 'mine.py'}:my_pairs",
                "--claim-epsilon", "0.5", "--trials", "2000", "--seed", "0", "--out", code / "mine.json"])
    assert res.exit_code == 3, res.output
    assert load_report(code / "mine.json")["neighbouring_pair"]["pattern"] == "pair 1"  # the 'all above' one
    broken = _run(["--mechanism", f"{code / 'mine.py'}:noisy_sum", "--search", f"{code / 'mine.py'}:broken_pairs",
                   "--claim-epsilon", "0.5", "--trials", "2000", "--out", code / "b.json"])
    assert broken.exit_code == 2 and "broken_pairs raised RuntimeError: no more inputs" in broken.output
    assert "Traceback" not in broken.output and not (code / "b.json").exists()
    for extra, words in ((["--spec", code / "mine.py"], "--spec does not apply with --search"),
                         (["--search", "patterns"], "expected patterns:N")):
        args = ["--mechanism", f"{code / 'mine.py'}:noisy_sum", "--search", "patterns:4", "--claim-epsilon", "0.5",
                "--trials", "2000", "--out", code / "x.json", *extra]
        bad = _run(args)
        assert bad.exit_code == 2 and words in bad.output, bad.output
    builtin = _run(["--mechanism", "release", "--search", "patterns:4", "--claim-epsilon", "0.5", "--trials", "2000",
                    "--out", code / "x.json"])
    assert builtin.exit_code == 2 and "--search needs --mechanism FILE.py:NAME" in builtin.output


def test_trials_from_a_target_excess_or_an_error_that_quotes_the_counts(code):
    base = ["--mechanism", f"{code / 'mine.py'}:noisy_sum", "--search", "patterns:4", "--claim-epsilon", "0.5",
            "--seed", "0"]
    none = _run([*base, "--out", code / "n.json"])
    assert none.exit_code == 2 and "give --trials N (runs per side) or --target-excess X" in none.output
    assert f"0.5 -> {trials_needed(0.5, 0.5):,}" in none.output and not (code / "n.json").exists()
    both = _run([*base, "--trials", "2000", "--target-excess", "1", "--out", code / "b.json"])
    assert both.exit_code == 2 and "not both" in both.output
    res = _run([*base, "--target-excess", "1", "--out", code / "t.json"])
    n = trials_needed(0.5, 1.0)
    assert res.exit_code in (0, 3) and f"trials: {max(n, 65)} per side (--target-excess 1:" in res.stderr, res.output
    assert load_report(code / "t.json")["trials"] == max(n, 65)


HOOKS = '''
import numpy as np

class Prepared:
    """prepare binds a scale to the pair; the prepared object is the mechanism and has the hooks."""
    def __init__(self, scale=None):
        self.scale = scale

    def prepare(self, d, d_prime):
        return Prepared(scale=1.0 + abs(float(np.sum(d_prime)) - float(np.sum(d))))

    def __call__(self, x, rng, n_runs=1):
        return float(np.sum(x)) + rng.laplace(0.0, self.scale, (n_runs, 1))

    def exact_statistics(self, x):
        return {"sum": np.array([float(np.sum(x))])}

    def declared_sensitivity(self):
        raise ValueError("sensitivity unknown")

prepared = Prepared()
'''


def test_file_mechanism_forwards_prepare_and_hooks_behind_the_user_code_boundary(tmp_path):
    import pickle

    from privaudit.audit.protocol import FileMechanism
    from privaudit.core.errors import UserCodeError

    (tmp_path / "hooks.py").write_text(HOOKS)
    m = FileMechanism(f"{tmp_path / 'hooks.py'}:prepared")
    assert hasattr(m, "prepare") and not hasattr(m, "noise") and not hasattr(m, "SELF_CONTAINED")
    bound = m.prepare(np.zeros(2), np.array([1.0, 2.0]))
    assert not hasattr(bound, "prepare")                   # prepared once
    assert bound.callee().scale == 4.0 and bound.exact_statistics(np.ones(3))["sum"][0] == 3.0
    again = pickle.loads(pickle.dumps(bound))               # a worker process re-prepares from the pair
    assert again.callee().scale == 4.0 and again(np.ones(2), np.random.default_rng(0)).shape == (1, 1)
    with pytest.raises(UserCodeError, match=r"hooks.py:prepared.declared_sensitivity raised ValueError: "
                                            "sensitivity unknown"):
        bound.declared_sensitivity()


def test_malformed_hook_outputs_are_located_errors_not_tracebacks(code):
    (code / "bad_hooks.py").write_text(USER_CODE + '''
class Listed:
    def __call__(self, q, rng, n_runs=1):
        return noisy_sum(q, rng, n_runs)

    def exact_statistics(self, q):
        return [float(np.sum(q))]                  # not a dict

    def declared_sensitivity(self):
        return {"sum": {"l1": 1.0}}

listed = Listed()
''')
    res = _run(["--mechanism", f"{code / 'bad_hooks.py'}:listed", "--search", "patterns:2", "--claim-epsilon", "0.5",
                "--trials", "2000", "--out", code / "l.json"])
    assert res.exit_code == 2 and "exact_statistics must return a dict {name: array}" in res.output, res.output
    assert "Traceback" not in res.output and not (code / "l.json").exists()
