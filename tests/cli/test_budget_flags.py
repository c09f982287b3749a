"""One budget interface (issue 29, item 5): every command that spends or audits takes ``--rho``,
``--epsilon`` and ``--delta`` with one meaning (docs/privacy.md, "Budget flags"), converts exactly,
refuses the same combinations with the same one-line error naming the accepted ones, and prints a
guarantee the same way (``formatting.guarantee_text``: 4 significant digits, no float noise).

Before: ``explore`` refused ``--epsilon E --delta D``; release/train/pipeline refused ``--rho R
--delta D``; ``--epsilon E`` alone was refused by release and train (but meant Laplace in explore);
``train --algo dp-apvi --delta D`` crashed with a traceback; the audit read an explorer's rho claim
at delta 1e-5 against its help's 1e-6; rho was printed with 6 digits next to epsilon with 4.
"""

from __future__ import annotations

import json
import re

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from privaudit.cli import main
from privaudit.learners.policy import load_policy
from privaudit.mdp.random_tabular import random_tabular_mdp, random_tabular_spec_doc
from privaudit.mdp.simulate import simulate, uniform_policy, write_logs
from privaudit.privacy.accounting import DEFAULT_REPORT_DELTA, dp_to_zcdp, zcdp_to_dp

RHO, EPS, DELTA = 0.5, 2.0, 1e-5

#: Every budget form and the flags that give it; None: refused everywhere.
FORMS = {
    "rho": ["--rho", str(RHO)],
    "rho+delta": ["--rho", str(RHO), "--delta", str(DELTA)],
    "epsilon+delta": ["--epsilon", str(EPS), "--delta", str(DELTA)],
    "epsilon": ["--epsilon", str(EPS)],
    "epsilon+delta0": ["--epsilon", str(EPS), "--delta", "0"],
    "delta": ["--delta", str(DELTA)],
    "rho+epsilon": ["--rho", str(RHO), "--epsilon", str(EPS)],
    "none": [],
}
#: What each refused form's one-line error says (the accepted combinations follow it).
REFUSED = {"delta": "`--delta` alone is not a budget", "rho+epsilon": "not both", "none": "give a budget"}
#: The accepted combinations, as every refusal lists them.
GAUSSIAN_FORMS = ("`--rho` R (R-zCDP), `--rho` R with `--delta` D (R-zCDP reported at D)",
                  "`--epsilon` E with `--delta` D ((E, D)-DP, converted exactly to rho)")
LAPLACE_FORM = "`--epsilon` E alone (pure E-DP, Laplace noise)"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Tiny logs: tabular (S=3, A=2, H=2), the same with a public next-state reward (dp-pbb, pipeline), linear."""
    d, mdp = tmp_path_factory.mktemp("budget_flags"), random_tabular_mdp(3, 2, 2, instance_seed=1)
    doc = random_tabular_spec_doc(mdp)
    df = simulate(mdp, uniform_policy(mdp), 200, np.random.default_rng(0))
    # dp-pbb backs up a public next-state reward r(s') = 1{s' = 0}; its logs' rewards are that r(s')
    pbb = ({**doc, "public_reward": {"kind": "next_state", "values": {"0": 1.0}}},
           df.with_columns((pl.col("next_state") == 0).cast(pl.Float64).alias("reward")))
    for name, (spec, logs) in (("", (doc, df)), ("_pbb", pbb)):
        (d / f"spec{name}.json").write_text(json.dumps(spec))
        write_logs(logs, d / f"logs{name}.parquet")
    r = CliRunner().invoke(main, ["simulate", "synthetic-linear", "--episodes", "60", "--horizon", "2", "--seed", "1",
                                  "--out", str(d / "lin.parquet"), "--spec-out", str(d / "lin.json")])
    assert r.exit_code == 0, r.output
    return d


def _guarantee_of(cmd: str, out):
    """The guarantee the command recorded in its artifact: (rho, epsilon, delta)."""
    if cmd == "release":
        g = json.loads((out / "manifest.json").read_text())["guarantee"]
    elif cmd.startswith("train"):
        g = load_policy(out).privacy.guarantee
    elif cmd == "pipeline":
        g = json.loads((out / "summary.json").read_text())["privacy"]
    else:
        g = json.loads((out / "manifest.json").read_text())["guarantee"]
    return g["rho"], g["epsilon"], g["delta"]


#: command -> (arguments before the budget, whether it has a Laplace mechanism for --epsilon alone)
COMMANDS = {
    "release": (lambda d: ["release", d / "logs.parquet", "--spec", d / "spec.json"], True),
    "train dp-apvi": (lambda d: ["train", d / "logs.parquet", "--spec", d / "spec.json", "--algo", "dp-apvi"], True),
    "train dp-pbb": (lambda d: ["train", d / "logs_pbb.parquet", "--spec", d / "spec_pbb.json", "--algo", "dp-pbb"],
                     False),
    "train dp-vapvi": (lambda d: ["train", d / "lin.parquet", "--spec", d / "lin.json", "--algo", "dp-vapvi"], False),
    "pipeline": (lambda d: ["pipeline", d / "logs_pbb.parquet", "--spec", d / "spec_pbb.json", "--audit-trials", "0"],
                 False),
    "explore pucb": (lambda d: ["explore", "--algo", "pucb", "--env", "riverswim", "--episodes", "20"], True),
    "explore luyo": (lambda d: ["explore", "--algo", "luyo", "--env", "synthetic-linear", "--horizon", "2",
                                "--episodes", "10"], False),
}


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("cmd", list(COMMANDS))
def test_every_spending_command_takes_the_same_budget_flags(world, tmp_path, cmd, form):
    """The same acceptance, refusal and recorded guarantee for every spending command and every flag combination."""
    args, laplace = COMMANDS[cmd]
    out = tmp_path / "out"
    r = CliRunner().invoke(main, [str(a) for a in args(world)] + FORMS[form] + ["--seed", "1", "--out", str(out)])
    assert "Traceback" not in r.output
    pure = form in ("epsilon", "epsilon+delta0")
    if form in REFUSED or (pure and not laplace):
        assert r.exit_code == 2, r.output
        err = r.stderr.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: "), r.stderr  # one line
        said = REFUSED.get(form, "`--epsilon` alone is a pure epsilon-DP budget (Laplace noise), and here the noise "
                                 "is Gaussian (zCDP) only")
        assert said in err[0]
        assert all(f in err[0] for f in GAUSSIAN_FORMS) and (LAPLACE_FORM in err[0]) == laplace
        assert not out.exists()
        return
    assert r.exit_code == 0, r.output
    rho, eps, delta = _guarantee_of(cmd, out)
    if pure:  # pure EPS-DP (Laplace), charged as rho = EPS^2/2
        assert (eps, delta) == (EPS, 0.0) and rho in (None, EPS ** 2 / 2)
    elif form == "epsilon+delta":  # the tightest rho with (EPS, DELTA)-DP (the pipeline's decimal split of it may
        r = dp_to_zcdp(EPS, DELTA)    # state the double just below: its parts' costs add up to at most r)
        assert delta == DELTA and 0 <= r - rho <= 1e-15 * r and EPS - 1e-9 < eps <= EPS
    else:  # rho-zCDP, reported at --delta (default 1e-6)
        d = DELTA if form == "rho+delta" else DEFAULT_REPORT_DELTA
        assert (rho, delta) == (RHO, d) and eps == zcdp_to_dp(RHO, d)


#: A number token on screen: a decimal (with an optional exponent).
_NUMBER = re.compile(r"(?<![\w.])\d+\.\d+(?:e-?\d+)?")
#: A privacy parameter on screen: rho=..., epsilon=..., delta=...
_PARAM = re.compile(r"\b(?:rho|epsilon|delta)=(\d[\d.]*(?:e-?\d+)?)")


def _significant(token: str) -> int:
    return len(token.split("e")[0].replace(".", "").lstrip("0"))


@pytest.mark.parametrize("cmd", list(COMMANDS))
def test_no_command_prints_float_noise(world, tmp_path, cmd):
    """No number on screen carries float noise (3.9999999999999343, 0.4630649901377737: more than 6 significant
    digits), and every privacy parameter (rho=, epsilon=, delta=) has at most 4 significant digits, the one
    precision of every command (before: rho=0.0649538 next to rho=0.06495 in the same pipeline run)."""
    args, laplace = COMMANDS[cmd]
    budget = ["--epsilon", "2", "--delta", "1e-5"]  # converted: rho = 0.10825636382285353...
    seed = [] if cmd.startswith("explore") else ["--seed", "1"]  # a seeded explore run states no guarantee
    r = CliRunner().invoke(main, [str(a) for a in args(world)] + budget + seed + ["--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    _check_printed_numbers(r.output)


def _check_printed_numbers(output: str) -> None:
    noisy = [t for t in _NUMBER.findall(output) if _significant(t) > 6]
    assert not noisy, output
    params = _PARAM.findall(output)
    assert params, output  # the guarantee (or the budget) is printed
    assert all(_significant(t) <= 4 for t in params if "." in t), output
    assert "e-0" not in output  # 1e-5, not 1e-05


@pytest.mark.parametrize("flags, claim", [
    (["--rho", "0.5"], (0.5, DEFAULT_REPORT_DELTA)),
    (["--claim-rho", "0.5", "--delta", "1e-5"], (0.5, 1e-5)),
    (["--epsilon", "2", "--delta", "1e-5"], (None, 1e-5)),
    (["--claim-epsilon", "2"], (None, 0.0)),  # alone: pure epsilon-DP, as --epsilon alone everywhere
])
def test_audit_claims_in_the_same_flags(world, tmp_path, flags, claim):
    """The audit states its claim in the flags of every command (--rho/--epsilon are --claim-rho/--claim-epsilon)."""
    out = tmp_path / "r.json"
    r = CliRunner().invoke(main, ["audit", "--mechanism", "release", "--logs", str(world / "logs.parquet"), "--spec",
                                  str(world / "spec.json"), *flags, "--trials", "100", "--seed", "1",
                                  "--out", str(out)])
    assert r.exit_code == 0, r.output
    c = json.loads(out.read_text())["claim"]
    assert (c["rho"], c["delta"]) == claim
    assert "vs claimed " + ("(epsilon=2, delta=" if claim[0] is None else "rho=0.5 zCDP => (epsilon=") in r.stderr
    _check_printed_numbers(r.output)


def test_audit_reads_an_explorer_rho_claim_at_the_delta_its_help_states(tmp_path):
    """``--mechanism explore:ALGO --claim-rho R`` is compared at the delta every command reports rho at (1e-6, the
    help's), not 1e-5; and the explorer runs at that delta, as ``privaudit explore --rho R`` does."""
    out = tmp_path / "r.json"
    r = CliRunner().invoke(main, ["audit", "--mechanism", "explore:ngo", "--claim-rho", "0.1", "--trials", "100",
                                  "--seed", "1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    rep = json.loads(out.read_text())
    assert rep["claim"]["delta"] == DEFAULT_REPORT_DELTA
    assert rep["neighbouring_pair"]["explorer_budget"] == {"rho": 0.1, "delta": DEFAULT_REPORT_DELTA}
    assert "(default 1e-6, the delta every command reports rho at)" in " ".join(
        CliRunner().invoke(main, ["audit", "--help"]).output.split())
