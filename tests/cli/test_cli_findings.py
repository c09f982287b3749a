"""Small CLI findings of the fresh-user pass (issue 11 leftovers): each refusal names the user's value and the
rule, a missing input path is a usage error (exit 2) in every command, and notices wait for valid inputs."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from privaudit.cli import COMMANDS, main
from privaudit.cli.common import PathArg, spark_target

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "sample_data" / "icu_sepsis_clinicians_20k.parquet"
SPEC = ROOT / "sample_data" / "icu_sepsis_spec.json"
NOTICE = "counts pooled over the steps h"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_value_share_too_small_names_the_value_and_the_rule(tmp_path):
    """Before: "`rho` = 1.11e-16 is too small" (the float rest of 1 - 0.6 - 0.3), naming neither the flag nor
    the value given."""
    res = run("pipeline", "--rho", 1, "--value-share", "1e-300", "--out", tmp_path / "o")
    assert res.exit_code == 2, res.output
    assert "`--value-share` = 1e-300" in res.stderr and "Rule: every part of the budget" in res.stderr
    assert "1.11e-16" not in res.stderr and "Traceback" not in res.output and not (tmp_path / "o").exists()


@pytest.mark.parametrize("cmd", [["release", "--rho", "1"], ["train", "--algo", "dp-pbb", "--rho", "1"]])
def test_absurd_max_per_cell_is_refused_before_the_logs_are_read(tmp_path, cmd):
    """Before: --max-per-cell 99999999999999999999 was accepted and recorded as c in the manifest."""
    res = run(cmd[0], LOGS, "--spec", SPEC, *cmd[1:], "--max-per-cell", "99999999999999999999",
              "--out", tmp_path / "o")
    assert res.exit_code == 2, res.output
    assert "`--max-per-cell` must be at most k H = 20" in res.stderr and "Found 99999999999999999999" in res.stderr
    assert NOTICE not in res.stderr and not (tmp_path / "o").exists()


@pytest.mark.parametrize("cmd", [
    ["train", "{nope}", "--spec", SPEC, "--algo", "ve"],
    ["train", "{nope}", "--spec", SPEC, "--algo", "dp-pbb", "--rho", "1"],
    ["release", "{nope}", "--spec", SPEC, "--rho", "1"],
    ["pipeline", "{nope}", "--spec", SPEC, "--rho", "1"],
    ["validate", "{nope}", "--spec", SPEC],
    ["audit", "--mechanism", "release", "--logs", "{nope}", "--spec", SPEC, "--claim-rho", "1", "--trials", "100"],
])
def test_missing_logs_are_a_usage_error_everywhere_and_say_nothing_else(tmp_path, cmd):
    """A LOGS path that does not exist: exit 2 (usage, as a missing --spec or --env), the path named, and no
    notice in front of the error (before: exit 1, after the step-rule notice)."""
    nope = tmp_path / "nope.parquet"
    args = [str(nope) if a == "{nope}" else a for a in cmd]
    out = [] if cmd[0] == "validate" else ["--out", tmp_path / "o"]
    res = run(*args, *out)
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == f"error: {nope}: no such file or folder.", res.stderr
    assert not (tmp_path / "o").exists()


def test_missing_policy_and_release_are_usage_errors(tmp_path):
    res = run("evaluate", tmp_path / "nope.npy", "--mdp", "icu-sepsis")
    assert res.exit_code == 2 and "no such policy file or folder" in res.stderr, res.output
    res = run("train", "--release", tmp_path / "nope", "--algo", "dp-apvi", "--out", tmp_path / "o")
    assert res.exit_code == 2 and f"{tmp_path / 'nope'}: no such release folder" in res.stderr, res.output
    (tmp_path / "empty").mkdir()  # exists but is not a release: invalid artifact, exit 1
    res = run("train", "--release", tmp_path / "empty", "--algo", "dp-apvi", "--out", tmp_path / "o")
    assert res.exit_code == 1 and "is not a privaudit release" in res.stderr, res.output


def test_notice_follows_valid_inputs(tmp_path):
    """With valid inputs the step rule is still said (once), before the result."""
    res = run("train", LOGS, "--spec", SPEC, "--algo", "ve", "--out", tmp_path / "p")
    assert res.exit_code == 0, res.output
    assert res.stderr.count(NOTICE) == 1 and res.stderr.index(NOTICE) < res.output.index("wrote ")


def test_audit_claim_budget_errors_name_the_claim_flag(tmp_path):
    """`audit --claim-rho 1e-300`: the mechanism runs at the claim's budget, whose refusal names `--claim-rho`
    (before: "`rho` = 1e-300", a name the command has no option for), with no step-rule notice in front."""
    res = run("audit", "--mechanism", "release", "--logs", LOGS, "--spec", SPEC, "--claim-rho", "1e-300",
              "--trials", 100, "--out", tmp_path / "a.json")
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("error: `--claim-rho` = 1e-300 is too small"), res.stderr
    assert NOTICE not in res.stderr and not (tmp_path / "a.json").exists()
    res = run("audit", "--mechanism", "release", "--logs", LOGS, "--spec", SPEC, "--claim-rho", "1",
              "--mechanism-rho", "1e-300", "--trials", 100, "--out", tmp_path / "a.json")
    assert res.exit_code == 2 and "`--mechanism-rho` = 1e-300 is too small" in res.stderr, res.output


@pytest.mark.parametrize("claim,flag,value", [(["--claim-rho", "inf"], "--claim-rho", "inf"),
                                              (["--claim-epsilon", "inf", "--delta", "0"], "--claim-epsilon", "inf"),
                                              (["--claim-epsilon", "nan", "--delta", "0"], "--claim-epsilon", "nan")])
def test_an_infinite_claim_is_called_not_finite(tmp_path, claim, flag, value):
    """Before: "`--claim-epsilon` must be > 0. Found inf." (fresh-user pass)."""
    res = run("audit", "--mechanism", "release", "--logs", LOGS, "--spec", SPEC, *claim, "--trials", 100,
              "--out", tmp_path / "a.json")
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == f"error: `{flag}` must be a finite number > 0. Found {value}."
    assert not (tmp_path / "a.json").exists()


def test_online_audit_errors_name_the_audit_flags(tmp_path):
    """The online catalogue's errors describe its parameters (`claim_epsilon`, `delta`); `audit` shows its flags."""
    res = run("audit", "--mechanism", "explore:pucb", "--claim-rho", "1", "--trials", 100, "--out", tmp_path / "a.json")
    assert res.exit_code == 2, res.output
    assert "give `--claim-epsilon` (and `--delta` 0)" in res.stderr, res.stderr


def test_library_errors_do_not_name_cli_flags():
    """Library modules (everything outside privaudit/cli) raise errors naming parameters in backticks; the CLI maps
    them to its flags (cli.common.as_flags). A `privaudit COMMAND ...` pointer to another command may name its
    flags. Scans every ``raise`` of the package (fails on e.g. the former "--canary synthetic" of adapter_dpvapvi)."""
    import ast
    import re
    bad = []
    for path in sorted((ROOT / "privaudit").rglob("*.py")):
        if path.relative_to(ROOT / "privaudit").parts[0] == "cli":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and node.exc is not None:
                text = "".join(n.value for n in ast.walk(node.exc) if isinstance(n, ast.Constant)
                               and isinstance(n.value, str))
                text = re.sub(r"`privaudit [^`]*`", "", text)
                if re.search(r"(?<![\w.-])--[a-z][a-z-]*", text):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {text[:100]}")
    assert bad == []


@pytest.mark.parametrize("cmd", [
    ("release", LOGS, "--spec", SPEC, "--rho", "1e308"),
    ("pipeline", "--rho", "1e300"),
    ("release", LOGS, "--spec", SPEC, "--mechanism", "laplace", "--epsilon", "1e300"),
])
def test_a_budget_too_large_to_convert_names_the_flag(tmp_path, cmd):
    """`--rho 1e308` said "zCDP->DP conversion failed numerically for rho=1e+308, delta=1e-06" (fresh-user pass,
    hfu): the refusal names the flag, the value and the rule (the tight conversion overflows: a budget that large
    protects nothing)."""
    res = run(*cmd, "--out", tmp_path / "x")
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith(f"error: `{cmd[-2]}` = {cmd[-1]} is too large"), res.stderr
    assert not (tmp_path / "x").exists()


AUDIT_RELEASE = ("audit", "--mechanism", "release", "--logs", LOGS, "--spec", SPEC, "--trials", "100")


@pytest.mark.parametrize("cmd, flag, value, says", [
    (("release", LOGS, "--spec", SPEC, "--epsilon", "1e308", "--delta", "1e-6"), "--epsilon", "1e308",
     "its conversion to rho would overflow"),
    (("pipeline", "--epsilon", "1e300", "--delta", "1e-6"), "--epsilon", "1e300", "its conversion to rho"),
    (AUDIT_RELEASE + ("--claim-rho", "1e308"), "--claim-rho", "1e308", "its epsilon would overflow"),
    (AUDIT_RELEASE + ("--claim-epsilon", "1e308", "--delta", "1e-5"), "--claim-epsilon", "1e308",
     "its conversion to rho"),
    # pure: the rho = epsilon^2/2 it is charged as (before: "its epsilon at delta = 1e-6", a delta never given)
    (AUDIT_RELEASE + ("--claim-epsilon", "1e308", "--delta", "0"), "--claim-epsilon", "1e308", "epsilon^2/2"),
    (("audit", "--mechanism", "explore:ngo", "--claim-rho", "1e300", "--trials", "100"), "--claim-rho", "1e300",
     "its epsilon would overflow"),
])
def test_every_huge_budget_gets_the_too_large_message(tmp_path, cmd, flag, value, says):
    """`release --epsilon 1e308 --delta 1e-6` and `audit --claim-rho 1e308` said "zCDP->DP conversion failed
    numerically for rho=1e+308" (session 14): every form of every command now gets the one rule of
    ``budget.check_not_too_large``, naming the flag, the value and the largest accepted; exit 2, nothing written
    (release: nothing charged to its ledger)."""
    ledger = tmp_path / "b.jsonl"
    assert run("budget", "init", ledger, "--dataset", "icu-sepsis-sample", "--rho-total", "10").exit_code == 0
    before = ledger.read_bytes()
    extra = ("--ledger", ledger) if cmd[0] == "release" else ()
    res = run(*cmd, *extra, "--seed", "1", "--out", tmp_path / "x")
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith(f"error: `{flag}` = {value} is too large: "), res.stderr
    assert says in res.stderr and "The largest accepted is " in res.stderr, res.stderr
    assert "failed numerically" not in res.output and "Traceback" not in res.output
    if cmd[-1] == "0":
        assert "delta = 1e-6" not in res.stderr and "The largest accepted is 1.41421e144" in res.stderr
    assert not (tmp_path / "x").exists() and ledger.read_bytes() == before


def _all_params():
    """(command path, parameter) of every option and argument of every command (groups walked)."""
    def walk(name, cmd):
        if isinstance(cmd, click.Group):
            for sub, c in cmd.commands.items():
                yield from walk(f"{name} {sub}", c)
        else:
            for p in cmd.params:
                yield name, p
    ctx = click.Context(main)
    for name in COMMANDS:
        yield from walk(name, main.get_command(ctx, name))


def test_every_path_parameter_refuses_an_empty_path():
    """A new path option must use PathArg (an empty path is the current folder otherwise)."""
    plain = [f"{name} {p.name}" for name, p in _all_params()
             if isinstance(p.type, click.Path) and not isinstance(p.type, PathArg)]
    assert plain == []
    assert len([p for _, p in _all_params() if isinstance(p.type, PathArg)]) >= 20


@pytest.mark.parametrize("args,flag", [
    (["release", LOGS, "--spec", SPEC, "--rho", "1", "--out", ""], "'--out'"),
    (["release", LOGS, "--spec", SPEC, "--rho", "1", "--out", "o", "--ledger", ""], "'--ledger'"),
    (["pipeline", "--rho", "1", "--out", ""], "'--out'"),
    (["train", LOGS, "--spec", SPEC, "--algo", "ve", "--out", ""], "'--out'"),
    (["simulate", "icu-sepsis", "-n", "5", "--out", "x.parquet", "--spec-out", ""], "'--spec-out'"),
    (["simulate", "icu-sepsis", "-n", "5", "--out", "x.parquet", "--spec-out", "s.json", "--mdp-out", ""],
     "'--mdp-out'"),
    (["validate", "", "--spec", SPEC], "'LOGS'"),
    (["validate", LOGS, "--spec", ""], "'--spec'"),
    (["budget", "init", "", "--dataset", "d", "--rho-total", "1"], "'FILE'"),
    (["evaluate", "", "--mdp", "icu-sepsis"], "'POLICY'"),
    (["explore", "--algo", "pucb", "--env", "riverswim", "-K", "5", "--epsilon", "1", "--out", ""], "'--out'"),
    (["audit", "--mechanism", "explore:ngo", "--claim-rho", "1", "--trials", "100", "--out", ""], "'--out'"),
])
def test_an_empty_path_is_a_usage_error_naming_the_option(tmp_path, monkeypatch, args, flag):
    """Before: `--out ''` said "`.` already exists" (Path('') is the current folder), `--spec-out ''` failed on
    a temporary file '..xxxx.tmp: Device or resource busy' after the logs were written (x.parquet left
    behind), `--mdp-out ''` was silently ignored and `validate ''` read every Parquet file under the current
    folder (fresh-user pass)."""
    monkeypatch.chdir(tmp_path)
    res = run(*args)
    assert res.exit_code == 2, res.output
    assert f"Invalid value for {flag}: the path is empty" in res.output and "Traceback" not in res.output
    assert list(tmp_path.iterdir()) == []


def test_an_empty_mdp_is_a_usage_error(tmp_path):
    """Before: `evaluate POLICY --mdp ''` said "cannot read MDP file .: [Errno 21] Is a directory: '.'", exit 1."""
    (tmp_path / "p.npy").write_bytes(b"")
    res = run("evaluate", tmp_path / "p.npy", "--mdp", "")
    assert res.exit_code == 2 and "`--mdp` '' is neither a known MDP" in res.stderr, res.output
    (tmp_path / "d").mkdir()
    res = run("evaluate", tmp_path / "p.npy", "--mdp", tmp_path / "d")
    assert res.exit_code == 1, res.output
    assert res.stderr.strip().startswith(f"error: cannot read MDP file {tmp_path / 'd'}: it is a folder, not a file.")


@pytest.mark.parametrize("cmd", [["release", LOGS, "--spec", SPEC], ["pipeline"]])
@pytest.mark.parametrize("master", ["foo", "local[x]", "spark:/head:7077", ""])
def test_a_master_that_is_no_spark_url_is_a_usage_error_before_spark_starts(tmp_path, cmd, master):
    """Before: `--master foo` started Spark, whose JVM exited, and the run ended with "Spark could not start its
    JVM ... Check JAVA_HOME and the Java version" (exit 1) after the step-rule notice (fresh-user pass)."""
    res = run(*cmd, "--rho", 1, "--out", tmp_path / "o", "--engine", "spark", "--master", master)
    assert res.exit_code == 2, res.output
    assert f"Error: --master {master!r} is not a Spark master URL: give local, local[N]" in res.output
    assert "JVM" not in res.output and NOTICE not in res.output and not (tmp_path / "o").exists()


@pytest.mark.parametrize("master", ["local", "local[1]", "local[*]", "local[2,3]", "local-cluster[2, 1, 1024]",
                                    "spark://head:7077", "spark://a:7077,b:7077", "yarn", "k8s://https://h:443"])
def test_spark_master_urls_are_accepted(master):
    assert spark_target("spark", master, None) == master
