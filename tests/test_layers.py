"""Import layers (issue 11): the import-linter contracts of pyproject.toml, private names, imports at top.

Layers, highest first: cli > pipeline > audit > learners | online | ope > release >
data | privacy | mdp > core (errors, spec, schemas, atomic writes, outputs, package data, ...). A
module imports only from its own package or a lower layer; no two modules of
a package import each other in a cycle.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from importlinter import cli as importlinter_cli

from privaudit.cli import COMMANDS, main
from privaudit.core.errors import UsageError
from privaudit.learners.options import BudgetRequest
from privaudit.learners.tabular.train import train_from_logs
from privaudit.core.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "privaudit"

#: Folders (under privaudit/, "" for the top-level modules) whose modules import everything at module
#: top; the sweep of issue 11 item 6 goes package by package.
TOP_IMPORTS_ONLY = ("", "audit", "audit/mechanisms", "audit/online", "cli", "core", "data", "data/spark", "learners",
                    "learners/linear", "learners/tabular", "mdp", "online", "online/linear", "online/tabular",
                    "ope", "pipeline", "privacy", "release")
#: Libraries imported inside the function that plots: heavy, and needed only when a figure is asked
#: for (issue 19: ``privaudit --help`` and non-plotting runs must not pay for them).
LAZY_LIBRARIES = ("matplotlib",)
# Modules of an optional extra (their library may be absent): imported where they are asked for.
OPTIONAL_EXTRA_MODULES = tuple(f"privaudit.data.spark.{m}" for m in (  # pyspark, extra [spark]
    "engine", "session", "logs", "fatal_rules", "bounding", "counts", "stats"))


def _modules():
    for f in sorted(PACKAGE.rglob("*.py")):
        yield f, ast.parse(f.read_text(), filename=str(f))


def _package(path: Path) -> str:
    rel = path.relative_to(PACKAGE).parts
    return rel[0] if len(rel) > 1 else "core"


def test_import_linter_contracts_hold(monkeypatch):
    monkeypatch.chdir(ROOT)
    assert importlinter_cli.lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True) == 0


def test_no_private_name_is_imported_across_packages():
    bad = []
    for f, tree in _modules():
        here = _package(f)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("privaudit."):
                there = node.module.split(".")[1] if node.module.count(".") >= 2 else "core"
                if there == here:
                    continue
                private = [a.name for a in node.names if a.name.startswith("_")]
                private += [p for p in node.module.split(".") if p.startswith("_")]
                if private:
                    bad.append(f"{f.relative_to(ROOT)}:{node.lineno} imports {private} from {node.module}")
    assert bad == []


def test_imports_at_module_top():
    bad = []
    for f, tree in _modules():
        folder = str(f.parent.relative_to(PACKAGE)).replace(".", "")
        if folder not in TOP_IMPORTS_ONLY:
            continue
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if not isinstance(node, (ast.Import, ast.ImportFrom)):
                        continue
                    module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                    full = module if isinstance(node, ast.Import) else ".".join(
                        [module] + [a.name for a in node.names][:1])
                    if module.split(".")[0] not in LAZY_LIBRARIES and full not in OPTIONAL_EXTRA_MODULES:
                        bad.append(f"{f.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}")
    assert bad == []


def test_cli_help_imports_no_command_module_and_no_heavy_library():
    """``privaudit --help`` stays fast (issue 19): command modules (which import the library at their
    top) load only when their command runs."""
    code = ("import sys; from privaudit.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith(('privaudit.cli.', 'numpy', 'polars', 'scipy',"
            " 'matplotlib'))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    loaded = eval(out.stdout.strip().splitlines()[-1])  # a list literal printed above
    assert loaded == [], loaded


#: Libraries a command that neither plots nor audits must not load (issue 19: seconds of CPU per call).
NOT_ON_PLAIN_PATHS = ("matplotlib", "scipy.stats")


#: Commands whose ``--help`` must load neither (one process runs them in turn: the modules loaded are
#: printed after each, so the first command that pulls a library in is the one named).
PLAIN_HELPS = (["validate", "--help"], ["budget", "--help"], ["release", "--help"], ["pipeline", "--help"])


def test_commands_import_neither_matplotlib_nor_scipy_stats():
    """Loading a command (its module and every library module it imports at top) pulls in neither
    matplotlib (imported inside the plotting functions) nor scipy.stats (the audit's normal and beta
    quantiles come from scipy.special)."""
    code = ("import sys; from privaudit.cli import main\n"
            f"for argv in {list(PLAIN_HELPS)!r}:\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            f"    print(repr((argv, sorted(m for m in sys.modules if m.startswith({NOT_ON_PLAIN_PATHS!r})))))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    printed = [eval(line) for line in out.stdout.splitlines() if line.startswith("([")]  # tuples printed above
    assert [argv for argv, _ in printed] == list(PLAIN_HELPS), out.stdout[-2000:]
    for argv, loaded in printed:
        assert loaded == [], (argv, loaded)


def test_validate_run_imports_neither_matplotlib_nor_scipy_stats():
    """A whole ``privaudit validate`` run on the bundled sample (not only its --help)."""
    code = ("import sys; from privaudit.cli import main\n"
            "from privaudit.core.package_data import sample_dir\n"
            "d = sample_dir()\n"
            "try:\n    main(['validate', str(d / 'icu_sepsis_clinicians_20k.parquet'), '--spec',"
            " str(d / 'icu_sepsis_spec.json')])\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
            f"print(sorted(m for m in sys.modules if m.startswith({NOT_ON_PLAIN_PATHS!r})))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    loaded = eval(out.stdout.strip().splitlines()[-1])
    assert loaded == [], loaded


def test_cli_short_helps_are_the_commands_own():
    for name, short in COMMANDS.items():
        command = importlib.import_module(f"privaudit.cli.{name}").command
        assert command.get_short_help_str(limit=90) == short, name


def test_library_errors_name_the_parameter_and_the_cli_its_flag(tmp_path):
    """Library messages name the Python parameter (`algo`); the CLI shows its own flag (`--algo`)."""
    spec = tmp_path / "spec.json"
    spec.write_text('{"format_version": 1, "dataset_id": "t", "horizon": 2, "n_states": 2, "n_actions": 2, '
                    '"terminal_states": [], "reward_range": [0, 1], "privacy_unit": {"column": null, '
                    '"max_episodes": 1}}')
    with pytest.raises(UsageError, match="`algo` apvi is not private: it takes no budget "
                                         r"\(`rho`/`epsilon`/`delta`\)"):
        train_from_logs(tmp_path / "logs.parquet", load_spec(spec), algo="apvi", budget=BudgetRequest(rho=1.0))
    res = CliRunner().invoke(main, ["train", str(tmp_path / "logs.parquet"), "--spec", str(spec), "--algo", "apvi",
                                    "--rho", "1", "--out", str(tmp_path / "pol")])
    assert res.exit_code == 2
    assert "`--algo` apvi is not private: it takes no budget (`--rho`/`--epsilon`/`--delta`)" in res.output
