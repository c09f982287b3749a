"""Numbers on the command line (fresh-user pass): underscores refused, huge k named, no Python in messages.

Before: `--rho 1_0` was a budget of 10 (click's FLOAT calls float(), which reads PEP 515 underscores), as
was `budget init --rho-total 1_0`; a spec with k = 10^12 episodes per unit got "the privacy budget is too
small" (no budget fits; k does not); `pipeline --pbb-share 1.5` said "(or None: the default rule)".
"""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from privaudit.audit.choice import MAX_TRIALS
from privaudit.audit.runner import run_audit
from privaudit.audit.claim import Claim
from privaudit.cli import main
from privaudit.cli.numbers import Float, FloatRange, Int, IntRange
from privaudit.core.errors import UsageError
from privaudit.privacy.k_bound import largest_fitting_k
from privaudit.privacy.ledger import init_ledger

SAMPLE_SPEC = "sample_data/icu_sepsis_spec.json"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _commands(group, prefix=()):
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, prefix + (name,))
        else:
            yield prefix + (name,), cmd


def test_every_numeric_option_refuses_underscores():
    """Every int/float option of every command uses a type of privaudit.cli.numbers (not click's plain ones)."""
    plain = []
    for path, cmd in _commands(main):
        for p in cmd.params:
            if isinstance(p.type, (click.types.FloatParamType, click.types.IntParamType)) and not isinstance(
                    p.type, (Float, Int, FloatRange, IntRange)):
                plain.append(f"{' '.join(path)} {p.name}")
    assert plain == []


@pytest.mark.parametrize("args,flag", [
    (["release", "logs.parquet", "--spec", "spec.json", "--rho", "1_0", "--out", "o"], "--rho"),
    (["pipeline", "--epsilon", "1_0", "--delta", "1e-6", "--out", "o"], "--epsilon"),
    (["pipeline", "--rho", "1", "--audit-trials", "4_000", "--out", "o"], "--audit-trials"),
    (["simulate", "icu-sepsis", "--episodes", "1_000", "--out", "o.parquet", "--spec-out", "s.json"], "--episodes"),
])
def test_underscores_are_a_usage_error_naming_the_option(tmp_path, args, flag):
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2, res.output
    assert f"Invalid value for '{flag}'" in res.output and "without underscores" in res.output, res.output
    assert "Traceback" not in res.output


def test_ledger_total_with_underscores_is_refused(tmp_path):
    res = run("budget", "init", tmp_path / "b.jsonl", "--dataset", "d", "--rho-total", "1_0")
    assert res.exit_code == 2 and "without underscores" in res.output, res.output
    assert not (tmp_path / "b.jsonl").exists()
    with pytest.raises(UsageError, match="without underscores"):
        init_ledger(tmp_path / "b.jsonl", "d", "1_0")


def test_pbb_share_message_says_the_default_in_words(tmp_path):
    res = run("pipeline", "--rho", "1", "--pbb-share", "1.5", "--out", tmp_path / "o")
    assert res.exit_code == 2, res.output
    assert "None" not in res.output and "leave it unset for the default: 0.6 of the budget" in res.output
    res = run("pipeline", "--rho", "1", "--dp-apvi-c2", "-1", "--out", tmp_path / "o")
    assert res.exit_code == 2 and "None" not in res.output and "unset for the paper's 16" in res.output


def test_largest_fitting_k_bisects():
    assert largest_fitting_k(10 ** 12, lambda k: k <= 1158) == 1158
    assert largest_fitting_k(10, lambda k: False) == 0
    assert largest_fitting_k(1, lambda k: True) == 0  # k = 1 itself: nothing smaller to offer


@pytest.mark.parametrize("cmd,what,k_max", [
    (["release", "--rho", "1", "--out"], "the count release at rho=1", 1158),
    (["train", "--algo", "dp-pbb", "--rho", "1", "--out"], "DP-PBB at rho=1", 7327),
    # Laplace: before, no scale cap, so no message: the exact sampler drew at b ~ 10^13 for hours
    (["release", "--epsilon", "1", "--out"], "the count release at pure epsilon=1", 209715),
])
def test_huge_k_is_named_with_the_largest_k_that_fits(tmp_path, cmd, what, k_max):
    doc = json.loads(open(SAMPLE_SPEC).read())
    doc["privacy_unit"]["max_episodes"] = 10 ** 12
    (tmp_path / "spec.json").write_text(json.dumps(doc))
    res = run(cmd[0], "sample_data/icu_sepsis_clinicians_20k.parquet", "--spec", tmp_path / "spec.json",
              *cmd[1:], tmp_path / "o")
    assert res.exit_code == 2, res.output
    assert res.output.strip() == (
        f"error: k = 1000000000000 episodes per privacy unit (the spec's privacy_unit.max_episodes) is too large "
        f"for {what}: its noise scales grow with k, and at this budget k = {k_max} is the largest whose scales "
        "the exact sampler can draw. Declare the k your logs need (a unit's episodes beyond k are dropped before "
        "counting), or give a larger budget.")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("k, budget, says", [
    (1, ["--rho", "1"], "at this budget and k = 1, H = 23170 is the largest"),
    (1, ["--epsilon", "1"], "at this budget and k = 1, H = 4194303 is the largest"),
    # neither k nor H alone: named together, with the largest H at k = 1
    (10 ** 6, ["--rho", "1"], "(together: no smaller k fits at this H, nor a smaller H at this k): its noise scales "
                              "grow with H and k, and at this budget and k = 1, H = 23170 is the largest"),
])
def test_huge_horizon_is_named_with_k_and_the_largest_h_that_fits(tmp_path, k, budget, says):
    """A spec horizon of 10^12 said "the privacy budget is too small" (session 14): the cause is H, named with k
    and the largest H whose noise scales the exact sampler can draw at this budget (a bisection of ~40 plans)."""
    doc = json.loads(open(SAMPLE_SPEC).read())
    doc["horizon"], doc["privacy_unit"]["max_episodes"] = 10 ** 12, k
    (tmp_path / "spec.json").write_text(json.dumps(doc))
    res = run("release", "sample_data/icu_sepsis_clinicians_20k.parquet", "--spec", tmp_path / "spec.json",
              *budget, "--out", tmp_path / "o")
    assert res.exit_code == 2, res.output
    assert res.output.startswith(
        f"error: H = 1000000000000 steps per episode (the spec's horizon H) is too large for the count release at "
        f"{'rho=1' if budget[0] == '--rho' else 'pure epsilon=1'} with k = {k} episodes per privacy unit (the "
        "spec's privacy_unit.max_episodes)"), res.output
    assert says in res.output and "too small" not in res.output, res.output
    assert not (tmp_path / "o").exists()


def test_the_h_bound_is_exact_for_the_count_release():
    """H_max plans at rho = 1 (k = 1, pooled counts) and H_max + 1 does not: the message's bound is the planner's."""
    import dataclasses
    from privaudit.core.errors import NoiseScaleTooLarge
    from privaudit.core.spec import load_spec
    from privaudit.privacy.budget import resolve_budget
    from privaudit.release.mechanism import TabularRelease

    spec, budget = load_spec(SAMPLE_SPEC), resolve_budget(rho=1.0)
    TabularRelease.plan(dataclasses.replace(spec, horizon=23170), budget, stationary=True)
    with pytest.raises(NoiseScaleTooLarge, match="^H = 23171 steps .* H = 23170 is the largest"):
        TabularRelease.plan(dataclasses.replace(spec, horizon=23171), budget, stationary=True)


def test_the_k_bound_is_exact_for_the_count_release():
    """k_max plans at rho = 1 (pooled counts, the CLI's default) and k_max + 1 does not (the message's bound
    is the planner's own)."""
    import dataclasses
    from privaudit.core.errors import NoiseScaleTooLarge
    from privaudit.core.spec import load_spec
    from privaudit.privacy.budget import resolve_budget
    from privaudit.release.mechanism import TabularRelease

    spec, budget = load_spec(SAMPLE_SPEC), resolve_budget(rho=1.0)
    TabularRelease.plan(dataclasses.replace(spec, max_episodes_per_unit=1158), budget, stationary=True)
    with pytest.raises(NoiseScaleTooLarge, match="^k = 1159 episodes per privacy unit .* k = 1158 is the largest"):
        TabularRelease.plan(dataclasses.replace(spec, max_episodes_per_unit=1159), budget, stationary=True)
    # Laplace (pure epsilon = 1): the scale cap samplers.LAPLACE_SCALE_MAX sets its bound the same way
    laplace = resolve_budget(epsilon=1.0, mechanism="laplace")
    TabularRelease.plan(dataclasses.replace(spec, max_episodes_per_unit=209715), laplace, stationary=True)
    with pytest.raises(NoiseScaleTooLarge, match="^k = 209716 .* at pure epsilon=1: .* k = 209715 is the largest"):
        TabularRelease.plan(dataclasses.replace(spec, max_episodes_per_unit=209716), laplace, stationary=True)


@pytest.mark.parametrize("extra,needle", [
    (["-K", str(10 ** 20)], "for K=100000000000000000000 users needs about"),  # a numpy traceback before
    (["-K", "20", "--states", str(10 ** 20)], "for its (H, S, A, S) transition table"),  # a numpy traceback before
    (["-K", "20", "--horizon", str(10 ** 12)], "riverswim with H=1000000000000"),  # ran for minutes before
])
def test_explore_sizes_beyond_memory_are_refused_up_front(tmp_path, extra, needle):
    res = run("explore", "--algo", "pucb", "--env", "riverswim", "--epsilon", "5", *extra, "--out", tmp_path / "x")
    assert res.exit_code == 2, res.output
    assert needle in res.output and "half of this machine's" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("flag,value", [("--users-after", "5"), ("--canary-user", "2"), ("--view", "actions"),
                                        ("--decoy", "null"), ("--constants", "theory")])
def test_audit_refuses_explorer_options_given_to_an_offline_mechanism(tmp_path, flag, value):
    """Before: `audit --mechanism release ... --users-after 5` ran and ignored the option (fresh-user pass)."""
    res = run("audit", "--mechanism", "release", "--logs", "sample_data/icu_sepsis_clinicians_20k.parquet",
              "--spec", SAMPLE_SPEC, "--claim-rho", "1", "--trials", "100", flag, value, "--out", tmp_path / "r.json")
    assert res.exit_code == 2, res.output
    assert res.output.strip() == f"error: {flag} applies to --mechanism explore:ALGO only."


@pytest.mark.parametrize("args,flag", [
    (["pipeline", "--rho", "1", "--audit-trials", "100000000000000000000", "--out", "o"], "--audit-trials"),
    (["audit", "--mechanism", "release", "--logs", "l.parquet", "--spec", SAMPLE_SPEC, "--claim-rho", "1",
      "--trials", "10000000000", "--out", "r.json"], "--trials"),
])
def test_run_counts_beyond_memory_are_a_usage_error(tmp_path, monkeypatch, args, flag):
    """Before: ``--audit-trials 10^20`` was accepted, the pipeline charged its budget and the audit never
    ended. Now refused at parsing (exit 2, nothing written or charged)."""
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2, res.output
    assert f"Invalid value for '{flag}'" in res.output and "1000000000" in res.output, res.output
    assert list(tmp_path.iterdir()) == []


def test_run_audit_refuses_a_run_count_beyond_max_trials():
    with pytest.raises(UsageError, match=r"`trials` must be an integer in \[20, 1,000,000,000\]"):
        run_audit(lambda logs, rng: 0.0, claim=Claim.from_epsilon(1.0, 0.0), trials=MAX_TRIALS + 1)


@pytest.mark.parametrize("digit", ["\u0663", "\uff13"])  # ARABIC-INDIC DIGIT THREE, FULLWIDTH DIGIT THREE
def test_non_ascii_digits_are_refused(tmp_path, digit):
    """float() and Fraction() read other scripts' digits as numbers: `--rho-total ٣` made a ledger whose total,
    stored as written, was "\\u0663" (3), and `--rho ３` a release at rho = 3. Both are refused before any work."""
    res = run("budget", "init", tmp_path / "b.jsonl", "--dataset", "d", "--rho-total", digit)
    assert res.exit_code == 2 and "ASCII digits" in res.output, res.output
    assert not (tmp_path / "b.jsonl").exists()
    with pytest.raises(UsageError, match="ASCII digits"):
        init_ledger(tmp_path / "b.jsonl", "d", digit)
    init_ledger(tmp_path / "c.jsonl", "d", "5")
    res = run("budget", "charge", tmp_path / "c.jsonl", "--dataset", "d", "--rho", digit, "--description", "x")
    assert res.exit_code == 2 and "ASCII digits" in res.output, res.output
    assert len((tmp_path / "c.jsonl").read_text().splitlines()) == 1  # the header only: nothing charged
    res = run("release", "logs.parquet", "--spec", SAMPLE_SPEC, "--rho", digit, "--out", tmp_path / "o")
    assert res.exit_code == 2 and "Invalid value for '--rho'" in res.output and "ASCII digits" in res.output
    assert "Traceback" not in res.output and not (tmp_path / "o").exists()
