"""``privaudit pipeline``: validate -> release -> train -> evaluate -> audit -> report, in one command."""

from __future__ import annotations

import click
from click.core import ParameterSource

from privaudit.audit.choice import MAX_TRIALS
from privaudit.cli.numbers import FLOAT, FloatRange, IntRange
from privaudit.cli.common import (PathArg, as_flags, budget_options, budget_sentence, echo_json, engine_options,
                                  handle_errors, repair_options, spark_target)
from privaudit.core.outputs import check_writable
from privaudit.core.errors import UsageError
from privaudit.pipeline import PipelineConfig, run_pipeline_config
from privaudit.pipeline.config import CERTIFY_PRESET
from privaudit.pipeline.guarantee import VALUE_SHARE_DEFAULT
from privaudit.pipeline.render import format_table

_HELP = """Run the main job end to end on LOGS into the folder DIR (--out):
validate the logs against SPEC, release DP counts, train DP-PBB (the
default DP policy: private Bellman backups from the logs, when SPEC has a
public reward) and DP-APVI on the release (and DP-VAPVI when SPEC declares
a feature map, column-x-action included, splitting the budget), evaluate the policies exactly on a known
MDP (--mdp; a seeded one such as synthetic-linear takes its instance from
--instance-seed or the spec), audit the
release at its claimed budget, and write summary.json, report.md and
figures. Without an MDP every policy still gets its certified value (a
lower confidence bound on its pessimistic value at the released start
distribution) and the clinicians'
value is estimated with DP from the logged returns, with a 95% interval
(--value-share of the budget, default 0.1).

With no LOGS, the bundled sample is used: 20,000 ICU-Sepsis episodes
under the clinicians' policy, its spec, and --mdp icu-sepsis.

The budget is the total of everything DIR holds, split between the
release, the learners and the value estimate; the guarantee in
DIR/summary.json is their composition. --stationary pools counts over the steps h;
--per-step releases one table per h (slower, noisier per cell); the
default follows --mdp (icu-sepsis is stationary) and is --stationary
without one.

DIR is built under a temporary name and appears when every stage
succeeded; invalid logs stop the run with the located errors and nothing
is written. A run stopped (error, Ctrl-C) after charging the budget keeps
what it charged in DIR, marked incomplete (DIR/INCOMPLETE.json); the same
command again finishes it without charging again (other logs, spec,
budget or ledger are refused). An existing DIR is refused; --overwrite
replaces it only if it holds a previous pipeline output. What contribution
bounding clipped or dropped (counts and shares of the logs: private) is
printed on stderr and goes to DIR/private/local-log.json only (never to
share; see report.md for which files may leave the building). When a
repair changes more than --max-repair-share of the logs (default 0.05;
e.g. a reward_range [0, 1] for rewards coded -1/0/+1, or H shorter than
the stays), the run stops before spending anything unless given
--accept-repairs.

Without a public reward in SPEC, DP-PBB is not trained (it is said on
stderr and in the summary) and DP-APVI on the release is the DP policy.

--seed makes the noise reproducible, for tests only: the outputs are then
marked rng "seeded-insecure" (the seed itself is written nowhere).

--engine spark has Apache Spark validate and bound the logs once and
aggregate them for the release, DP-PBB, the clinicians' value and, with
--hold-out, the held-out stays (--master URL, default local[*], with a
Java runtime; or --remote sc://HOST:PORT, a Spark Connect server; pip
install 'privaudit[spark]'); only per-cell and per-unit aggregates come
back, the noise and the rest run here: the same outputs as polars.
Tabular specs only (no feature map).

Exit codes: 0 ok; 1 invalid or unreadable logs, repairs above
--max-repair-share, or Spark failed (nothing written or charged); 2 usage
or spec error (DIR exists, bad budget, MDP not matching the spec; nothing
written); 3 the audit found a violation (DIR is written for inspection and
its summary.json marks no file as shareable).

\b
Examples:
  privaudit pipeline --rho 1 --out run1
  privaudit pipeline logs.parquet --spec spec.json --epsilon 4 --delta 1e-6 \\
      --out run2 --mdp icu-sepsis
"""


_HELP = _HELP.replace("\n\nThe budget is the total", "\n\n" + budget_sentence(laplace=False)
                      + "\n\nThe budget is the total", 1)


@click.command("pipeline", help=_HELP, short_help="The main job: validate, release, train, evaluate, audit, report.")
@click.argument("logs", metavar="[LOGS]", required=False, type=PathArg(readable=False, path_type=str))
@click.option("--spec", "spec", type=PathArg(readable=False, path_type=str), default=None,
              help="Domain spec (JSON); required with LOGS.")
@budget_options(laplace=False)
@click.option("--out", "out", required=True, type=PathArg(path_type=str), help="Output folder DIR to create.")
@click.option("--mdp", default=None,
              help="icu-sepsis, synthetic-linear or MDP.npz (privaudit simulate --mdp-out): evaluate the policies on it "
                   "(default with no LOGS: icu-sepsis).")
@click.option("--instance-seed", type=IntRange(min=0), default=None,
              help="Instance of a seeded --mdp (synthetic-linear). Required unless the spec records it "
                   "($.mdp.instance_seed, written by simulate); must agree with it (else exit 2).")
@click.option("--stationary/--per-step", default=None,
              help="Pool counts over the steps h (a time-homogeneous process) or release one table per h. "
                   "Default: as the --mdp is (icu-sepsis: stationary); without --mdp, stationary.")
@click.option("--audit-trials", type=IntRange(min=0, max=MAX_TRIALS), default=4000, show_default=True,
              help="Runs per side of the release audit (0 skips the audit).")
@click.option("--linear-share", type=FloatRange(0, 1, min_open=True, max_open=True), default=None,
              help="Share of rho given to DP-VAPVI when the spec declares a feature map (default 0.5; refused "
                   "for a spec without one).")
@click.option("--value-share", type=FloatRange(0, 1, max_open=True), default=None,
              help=f"Share of rho spent on the DP estimate of the clinicians' (behaviour) value and the start "
                   f"distribution of the certified values (0: neither). Default {VALUE_SHARE_DEFAULT}.")
@click.option("--seed", type=IntRange(min=0), default=None,
              help="TESTS ONLY: seed the noise and the audit (rng seeded-insecure; never written).")
@click.option("--overwrite", is_flag=True, help="Replace DIR if it holds a previous pipeline output.")
@click.option("--ledger", type=PathArg(readable=False, path_type=str), default=None,
              help="Budget ledger (privaudit budget init): refuse (exit 3) a run that would exceed it, "
                   "and charge what the run spends.")
@click.option("--hold-out", "hold_out", is_flag=True,
              help="Certify the learned policies on privacy units held out from training (a public hash of the "
                   "unit id; every other stage sees the rest): each gets a DP lower bound next to the "
                   "clinicians' DP interval, and 'improvement over the clinicians certified' only when it is "
                   "above their upper end (docs/certificates.md).")
@click.option("--hold-out-fraction", "hold_out_fraction", type=FLOAT, default=0.5, show_default=True,
              help="With --hold-out: the fraction of the privacy units held out to certify (in (0, 1); the rest "
                   "trains), e.g. 0.3: 70% train the policies, 30% certify them.")
@click.option("--dp-apvi-c2", "dp_apvi_c2", type=FLOAT, default=None,
              help="DP-APVI's constant C2 (default: the paper's 16). 0 drops its privacy term: it learns far more "
                   "at large sizes, and with --hold-out its policy is certified on held-out units (its own "
                   "pessimistic value is never a certificate; docs/certificates.md).")
@click.option("--pbb-share", "pbb_share", type=FLOAT, default=None,
              help="DP-PBB's share of the budget in [0, 1) (default: 0.6; next to DP-VAPVI, two thirds of what it and "
                   "--value-share leave, rounded down: 0.26 with their defaults). 0: DP-PBB is not trained; its "
                   "share goes to the release DP-APVI learns from.")
@click.option("--certify", "certify", is_flag=True,
              help="The recommended setting to certify a learned policy against the clinicians without an MDP: "
                   "the preset --hold-out --hold-out-fraction 0.3 --dp-apvi-c2 0 --pbb-share 0 (pre-registered "
                   "and measured in docs/results.md). Refused with another value of one of those flags.")
@click.option("--json", "as_json", is_flag=True, help="Print only summary.json's content on stdout.")
@engine_options
@repair_options
@handle_errors
def command(as_json, master, remote, certify, **choices):
    # every option but --json, --master, --remote and --certify is a field of PipelineConfig, by name
    if certify:
        choices.update(_certify_preset(choices))
    check_writable(choices["out"], "--out")  # before the logs are read or any budget is checked
    engine = choices["engine"]
    spark = spark_target(engine, master, remote)
    if choices["value_share"] is None:
        choices["value_share"] = VALUE_SHARE_DEFAULT
    config = PipelineConfig(**choices, spark=spark)
    summary = run_pipeline_config(config, echo=lambda s: click.echo(as_flags(s), err=True))
    private_log = summary.pop("private_log")
    if as_json:
        echo_json(summary)
    else:
        click.echo(format_table(summary, config.out))
    click.echo(f"private log (bounding facts; do not share): {private_log}", err=True)
    if summary["audit"] is not None and summary["audit"]["verdict"] == "violation":
        click.echo("AUDIT VIOLATION: the release's privacy claim is false at the stated confidence; "
                   "do not share the outputs. See audit/audit_report.json.", err=True)
        raise SystemExit(3)


def _certify_preset(choices: dict) -> dict:
    """``--certify``'s fields (``CERTIFY_PRESET``); UsageError if one of its flags was given another value."""
    ctx = click.get_current_context()
    for name, value in CERTIFY_PRESET.items():
        given = ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, None)
        if given and choices[name] != value:
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"--certify sets {flag} {value:g}; {flag} {choices[name]:g} was also given. Drop one "
                             "of them (the preset is the pre-registered setting: docs/results.md).")
    return dict(CERTIFY_PRESET)
