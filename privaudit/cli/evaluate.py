"""``privaudit evaluate``: the exact value of a policy on a known MDP."""

from __future__ import annotations

import click

from privaudit.cli.common import echo_json, handle_errors


@click.command("evaluate", short_help="Exact value of a policy on a known MDP, next to the optimal value.")
@click.argument("policy", metavar="POLICY", type=click.Path(dir_okay=True))
@click.option("--mdp", "mdp", required=True,
              help="icu-sepsis, synthetic-linear, or an MDP.npz written by `privaudit simulate --mdp-out`.")
@click.option("--horizon", type=click.IntRange(min=1), default=None,
              help="H for a named MDP (icu-sepsis default 20).")
@click.option("--instance-seed", type=int, default=None,
              help="Instance of a seeded named MDP (synthetic-linear, default 0).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON only: value, optimal_value, gap, references.")
@handle_errors
def command(policy, mdp, horizon, instance_seed, as_json):
    """Evaluate POLICY exactly (backward induction, no sampling) on an MDP.

    POLICY is a policy folder written by `privaudit train`, or a .npy array
    pi_h(a | s) of shape (H, S, A) or (S, A). Prints
    the policy's value v = E[sum of rewards over H steps], the optimal value
    (value iteration) and, for icu-sepsis, the clinicians' and the uniform
    policy's values. Exit codes: 0 ok, 1 unreadable or invalid policy/MDP
    file, 2 bad arguments.

    \b
    Example:
      privaudit evaluate policy.npy --mdp icu-sepsis --json
      privaudit evaluate pol --mdp synthetic-linear --instance-seed 0
    """
    from privaudit.mdp.evaluation import evaluate_report, load_policy_table, resolve_mdp

    m = resolve_mdp(mdp, horizon, instance_seed=instance_seed)
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
