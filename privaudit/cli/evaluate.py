"""``privaudit evaluate``: the exact value of a policy on a known MDP, or its DP value from logs (``--logs``)."""

from __future__ import annotations

from pathlib import Path

import click

from privaudit.cli.numbers import FLOAT, IntRange
from privaudit.cli.common import PathArg, budget_options, echo_json, engine_options, handle_errors, spark_target
from privaudit.core.errors import SpecError, UsageError
from privaudit.core.formatting import guarantee_text, num
from privaudit.learners.linear.logs import PLACEHOLDER_TABLE
from privaudit.learners.policy import load_policy, load_policy_table
from privaudit.mdp.evaluation import evaluate_report, resolve_mdp
from privaudit.mdp.spec_check import check_spec_matches_mdp
from privaudit.core.spec import load_spec
from privaudit.ope.evaluate import CONFIDENCE_DEFAULT, COUNT_SHARE, LedgerEntry, evaluate_policy_on_logs
from privaudit.privacy.budget import resolve_budget
from privaudit.privacy.noise import GAUSSIAN


@click.command("evaluate", short_help="Value of a policy: exact on a known MDP, or DP from logs with a lower bound.")
@click.argument("policy", metavar="POLICY", type=PathArg(readable=False, dir_okay=True))
@click.option("--mdp", "mdp", default=None,
              help="icu-sepsis, synthetic-linear, or an MDP.npz written by `privaudit simulate --mdp-out`.")
@click.option("--logs", "logs", type=PathArg(readable=False, path_type=str), default=None,
              help="Evaluate from these Parquet logs instead of an MDP (needs --spec and a budget).")
@budget_options(laplace=False, epsilon_note="(--logs only.)")
@click.option("--ledger", type=PathArg(readable=False, path_type=str), default=None,
              help="--logs: budget ledger, checked before any row is read and charged once.")
@click.option("--coverage", type=FLOAT, default=None,
              help="--logs: public coverage scale m (at most n_h(s,a)/m of the policy's mass passes a cell). "
                   f"Default: fixed by a rule from a DP count of the evaluated units ({COUNT_SHARE:g} of the "
                   "budget; docs/certificates.md, 'Choosing m').")
@click.option("--confidence", type=FLOAT, default=CONFIDENCE_DEFAULT, show_default=True,
              help="--logs: level of the lower bound and of the two-sided interval.")
@click.option("--seed", type=IntRange(min=0), default=None,
              help="--logs: noise seed, for tests only (not private against anyone who knows it).")
@click.option("--horizon", type=IntRange(min=1), default=None,
              help="H for a named MDP (icu-sepsis default 20).")
@click.option("--instance-seed", type=IntRange(min=0), default=None,
              help="Instance of a seeded named MDP (synthetic-linear; random-tabular with --spec). Required "
                   "unless --spec records it ($.mdp.instance_seed, written by simulate); must agree with it.")
@click.option("--spec", "spec_path", type=PathArg(readable=False, dir_okay=False), default=None,
              help="The logs' spec: names the MDP instance ($.mdp) and, for a policy folder, must be the spec "
                   "the policy was trained under. Its S, A, terminal states and public reward must be the MDP's.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON only: value, optimal_value, gap, references.")
@engine_options
@handle_errors
def command(policy, mdp, logs, rho, epsilon, delta, ledger, coverage, confidence, seed, horizon, instance_seed,
            spec_path, as_json, engine, master, remote):
    """Evaluate POLICY exactly (backward induction, no sampling) on an MDP,
    or with DP from logs (--logs) when no MDP is known.

    POLICY is a policy folder written by `privaudit train`, or a .npy array
    pi_h(a | s) of shape (H, S, A) or (S, A). Prints
    the policy's value v = E[sum of rewards over H steps], the optimal value
    (value iteration) and, for icu-sepsis, the clinicians' and the uniform
    policy's values.

    A seeded MDP (synthetic-linear) is never guessed: give --instance-seed
    N or the --spec written by `privaudit simulate` (it records the
    instance); a disagreement between the two is refused (exit 2).

    A dp-vapvi policy trained on per-row features (column-x-action) without
    a public state_table has only a uniform placeholder table: it acts
    through w_h and phi(features, a) of each patient, so it is refused
    (exit 2) rather than scored.

    With --logs LOGS --spec SPEC and a budget (--rho R, or --epsilon E
    --delta D): a DP estimate of the policy's value at the logs' start
    distribution, a one-sided lower bound and a two-sided interval, each at
    --confidence (docs/certificates.md, "Policy evaluation from logs"). One
    stay per privacy unit is used; the logs must come from patients the
    policy was not trained on. The guarantee is printed and, with --ledger,
    charged once. Any reward_range: negative rewards are shifted by the
    range's lower end, and the widths scale with the range. --engine spark
    has Apache Spark read, check and bound LOGS and aggregate the evaluated
    stays' cells (--master URL or --remote sc://HOST:PORT); the noise is
    drawn here, and the output for a given --seed is the same as with
    polars. A failure of Spark exits 1 with one line, nothing charged.

    Exit codes: 0 ok, 1 unreadable or invalid policy/MDP file or logs, 2 bad
    arguments or spec (also a --spec the policy was not trained under, or
    whose S, A, terminal states or public reward are not the MDP's), 3
    budget exceeded.

    \b
    Example:
      privaudit evaluate policy.npy --mdp icu-sepsis --json
      privaudit evaluate pol --mdp synthetic-linear --instance-seed 3
      privaudit evaluate pol --mdp synthetic-linear --spec spec.json
      privaudit evaluate pol --logs held_out.parquet --spec spec.json \\
          --epsilon 1 --delta 1e-6 --ledger budget.jsonl
    """
    if (mdp is None) == (logs is None):
        raise UsageError("give exactly one of --mdp (exact value on a known MDP) and --logs (DP value from logs).")
    if logs is None and any(v is not None for v in (rho, epsilon, delta, ledger, seed)):
        raise UsageError("--rho, --epsilon, --delta, --ledger and --seed apply to --logs only.")
    if logs is None and engine != "polars":
        raise UsageError("--engine spark applies to --logs only.")
    spark = spark_target(engine, master, remote)
    if logs is not None and spec_path is None:
        raise UsageError("--logs needs --spec SPEC (the logs' domain spec).")
    spec = load_spec(spec_path) if spec_path else None
    if Path(policy).is_dir():
        pol = load_policy(policy)
        if str(pol.parameters.get("table", "")).startswith(PLACEHOLDER_TABLE):
            raise UsageError(
                f"policy {policy} has no evaluable table: it was trained on per-row features "
                "(column-x-action) without a public state_table, so its (H, S, A) table is a uniform "
                "placeholder. The policy acts through w_h and phi(features, a) of each patient; evaluate "
                "needs a public state-feature table: add $.features.state_table (an (S, m) .npy) to the "
                "spec and train again.")
        if spec is not None and pol.spec_hash is not None and pol.spec_hash != spec.hash():
            raise SpecError(f"policy {policy} was trained under another spec (spec_hash {pol.spec_hash}); "
                                f"{spec_path} hashes to {spec.hash()}. Pass the spec of the policy's logs.")
    if logs is not None:
        _from_logs(policy, logs, spec, resolve_budget(rho=rho, epsilon=epsilon, delta=delta, families=(GAUSSIAN.name,)),
                   dict(coverage=coverage, confidence=confidence, ledger=ledger, seed=seed, engine=engine, spark=spark),
                   as_json)
        return
    m = resolve_mdp(mdp, horizon, instance_seed=instance_seed, spec=spec)
    if spec is not None:  # S, A, terminal states and public reward of the spec must be the MDP's (exit 2)
        check_spec_matches_mdp(spec, m, mdp)
    pi = load_policy_table(policy, m.n_states, m.n_actions, m.horizon)
    report = evaluate_report(pi, m)
    if as_json:
        echo_json(report)
        return
    click.echo(f"MDP {report['mdp']} (H={report['horizon']}, S={report['n_states']}, A={report['n_actions']})")
    click.echo(f"policy value   {report['value']:.4f}")
    click.echo(f"optimal value  {report['optimal_value']:.4f}  (gap {report['gap']:.4f})")
    for name, v in report.get("references", {}).items():
        click.echo(f"{name:<14} {v:.4f}")


def _from_logs(policy, logs, spec, budget, options: dict, as_json: bool) -> None:
    """The --logs mode: ``ope.evaluate.evaluate_policy_on_logs`` and its report."""
    pi = load_policy_table(policy, spec.n_states, spec.n_actions, spec.horizon, domain="the spec")
    entry = LedgerEntry(options.pop("ledger"), f"evaluate {policy} on {logs}")
    res = evaluate_policy_on_logs(logs, spec, pi, budget=budget, ledger=entry, **options)
    if as_json:
        echo_json(res)
        return
    g, lo, hi = res["guarantee"], res["interval"][0], res["interval"][1]
    level = f"{100 * res['confidence']:g}%"
    click.echo(f"policy {policy} on {logs} (one stay per privacy unit, coverage m = {num(res['coverage'])})")
    click.echo(f"estimate        {res['estimate']:.4f}  (noisy capped model value, biased low, clipped to the "
               "value range)")
    click.echo(f"lower bound     {res['lower_bound']:.4f}  (one-sided, {level})")
    click.echo(f"interval        [{lo:.4f}, {hi:.4f}]  (two-sided, {level})")
    click.echo(f"guarantee: {guarantee_text(g)}; neighbouring: substitution of one privacy unit"
               + (f"; charged to {entry.path}" if entry.path else ""))
    if "units_released" in res["mechanism"]:
        click.echo(f"coverage m = {num(res['coverage'])}, set by the rule from a DP count of the evaluated units: "
                   f"{res['mechanism']['units_released']}")
    if res["absorbed_mass"] > 0.5:
        click.echo(f"WARNING: the coverage caps absorb about {res['absorbed_mass']:.0%} of the policy's mass "
                   f"(m = {num(res['coverage'])} against the visits of the logs' cells; at a small m the noise alone "
                   "can say so), so the lower bound says little; choose m for logs of this size (fix m before looking at the data: "
                   "docs/certificates.md, 'Policy evaluation from logs').", err=True)
    if res["rng"] != "os-entropy":
        click.echo("WARNING: seeded noise (--seed): for tests only; not private against anyone who knows the seed.",
                   err=True)
