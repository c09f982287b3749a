"""``privaudit evaluate``: the exact value of a policy on a known MDP."""

from __future__ import annotations

from pathlib import Path

import click

from privaudit.cli.common import PathArg, echo_json, handle_errors
from privaudit.core.errors import SpecError, UsageError
from privaudit.learners.linear.logs import PLACEHOLDER_TABLE
from privaudit.learners.policy import load_policy, load_policy_table
from privaudit.mdp.evaluation import evaluate_report, resolve_mdp
from privaudit.mdp.spec_check import check_spec_matches_mdp
from privaudit.core.spec import load_spec


@click.command("evaluate", short_help="Exact value of a policy on a known MDP, next to the optimal value.")
@click.argument("policy", metavar="POLICY", type=PathArg(readable=False, dir_okay=True))
@click.option("--mdp", "mdp", required=True,
              help="icu-sepsis, synthetic-linear, or an MDP.npz written by `privaudit simulate --mdp-out`.")
@click.option("--horizon", type=click.IntRange(min=1), default=None,
              help="H for a named MDP (icu-sepsis default 20).")
@click.option("--instance-seed", type=click.IntRange(min=0), default=None,
              help="Instance of a seeded named MDP (synthetic-linear; random-tabular with --spec). Required "
                   "unless --spec records it ($.mdp.instance_seed, written by simulate); must agree with it.")
@click.option("--spec", "spec_path", type=PathArg(readable=False, dir_okay=False), default=None,
              help="The logs' spec: names the MDP instance ($.mdp) and, for a policy folder, must be the spec "
                   "the policy was trained under. Its S, A, terminal states and public reward must be the MDP's.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON only: value, optimal_value, gap, references.")
@handle_errors
def command(policy, mdp, horizon, instance_seed, spec_path, as_json):
    """Evaluate POLICY exactly (backward induction, no sampling) on an MDP.

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

    Exit codes: 0 ok, 1 unreadable or invalid policy/MDP file, 2 bad
    arguments or spec (also a --spec the policy was not trained under, or
    whose S, A, terminal states or public reward are not the MDP's).

    \b
    Example:
      privaudit evaluate policy.npy --mdp icu-sepsis --json
      privaudit evaluate pol --mdp synthetic-linear --instance-seed 3
      privaudit evaluate pol --mdp synthetic-linear --spec spec.json
    """

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
