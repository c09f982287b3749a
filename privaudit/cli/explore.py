"""``privaudit explore``: online exploration under joint DP on a simulated stream of users."""

from __future__ import annotations

import math
import sys

import click
from tqdm import tqdm

from privaudit.cli.numbers import FloatRange, IntRange
from privaudit.cli.common import PathArg, budget_options, echo_json, handle_errors, stderr_is_tty
from privaudit.online.env import ENV_NAMES, make_env
from privaudit.online.explore import ONLINE_ALGOS, check_explore_out, run_explore, validate_budget, write_explore

_HELP = """Run an online explorer for K users (--episodes), one episode each, on a
simulated environment, and write its exact per-episode regret.

\b
Algorithms:
""" + "\n".join(f"  {k}: {a.summary}" for k, a in ONLINE_ALGOS.items()) + """

\b
Environments: """ + ", ".join(ENV_NAMES) + """, or MDP.npz (written by
`privaudit simulate --mdp-out`). Each user is a deterministic response tree
keyed by (--world-key, user index).

A private algorithm takes one budget, in the flags of every command:
--rho R (Gaussian counters, R-zCDP, reported as (eps, delta)-JDP at delta
1e-6); --rho R --delta D (reported at D); --epsilon E --delta D (an
(E, D)-JDP target: Gaussian counters at the largest rho giving it);
--epsilon E alone (pure E-JDP, Laplace counters: pucb only; the linear
explorers are Gaussian only). --epsilon inf runs without noise. See
docs/privacy.md, "Budget flags". The guarantee is
joint DP: replacing one user's whole data changes the distribution of the
actions recommended to all *other* users and of the final policy by at most
the budget; the actions recommended to a user herself are not protected
from her.

Writes DIR/regret.parquet (episode, initial_state, regret,
cumulative_regret, realised_return), DIR/manifest.json (configuration,
guarantee, privacy events, summary) and DIR/regret.png. Exit codes: 0 ok;
1 an unreadable or invalid MDP.npz; 2 bad arguments, a budget out of range
or an --env that is neither a known environment nor an existing file
(nothing written in every error case).

\b
Example:
  privaudit explore --algo pucb --env riverswim --episodes 20000 --epsilon 5 --out runs/pucb
"""


@click.command("explore", help=_HELP, short_help="Online exploration under joint DP (PUCB, UCB-VI, LSVI-UCB, Luyo, Ngo, LSVI-UCB++, DP-LSVI-UCB++): regret on a simulated user stream.")
@click.option("--algo", type=click.Choice(list(ONLINE_ALGOS)), required=True, help="The explorer.")
@click.option("--env", "env_name", required=True, metavar="ENV",
              help=f"One of {', '.join(ENV_NAMES)}, or MDP.npz.")
@click.option("--episodes", "-K", type=IntRange(min=1), required=True, help="K, the number of users.")
@budget_options(laplace=True, epsilon_note="(pucb only; the linear explorers are Gaussian only.) inf: no noise.")
@click.option("--constants", type=click.Choice(["practical", "theory"]), default="practical", show_default=True,
              help="Constant set of the bonuses and thresholds (docs/online.md).")
@click.option("--failure-prob", "beta", type=FloatRange(min=0, max=1, min_open=True, max_open=True),
              default=0.05, show_default=True, help="beta of the confidence bounds.")
@click.option("--seed", type=IntRange(min=0), default=None,
              help="TESTS ONLY: seed the agent's noise (rng seeded-insecure: NOT private against anyone who knows "
                   "the seed). Default: OS entropy.")
@click.option("--world-key", type=IntRange(min=0, max=2 ** 64 - 1), default=0, show_default=True,
              help="Key of the simulated user population: user k's key is (world-key, k).")
@click.option("--horizon", type=IntRange(min=1), default=None, help="H (defaults per environment).")
@click.option("--states", type=IntRange(min=1), default=None, help="S (random-tabular, riverswim).")
@click.option("--actions", type=IntRange(min=1), default=None, help="A (random-tabular).")
@click.option("--instance-seed", type=IntRange(min=0), default=None,
              help="Instance of random-tabular / synthetic-linear (default 0).")
@click.option("--out", "out", type=PathArg(file_okay=False), required=True, help="Output folder DIR.")
@click.option("--overwrite", is_flag=True, help="Replace DIR if it holds a previous explore output (only then).")
@click.option("--json", "as_json", is_flag=True, help="Print the manifest's summary and guarantee as JSON only.")
@handle_errors
def command(algo, env_name, episodes, epsilon, rho, delta, constants, beta, seed, world_key, horizon, states,
            actions, instance_seed, out, overwrite, as_json):
    check_explore_out(out, overwrite, env_name)  # before any user is simulated
    budget = validate_budget(algo, epsilon, rho, delta)
    env = make_env(env_name, world_key=world_key, horizon=horizon, states=states, actions=actions,
                   instance_seed=instance_seed)
    bar = None
    if stderr_is_tty() and not as_json:
        bar = tqdm(total=episodes, desc=f"{algo} on {env.name}", unit="user", file=sys.stderr)
    try:
        agent, res = run_explore(env, algo, episodes, budget, constants=constants, beta=beta, seed=seed,
                                 progress=None if bar is None else bar.update)
    finally:
        if bar is not None:
            bar.close()

    def num(x):
        return None if x is None else (str(x) if isinstance(x, float) and math.isinf(x) else x)

    config = {"algo": algo, "env": env_name, "episodes": episodes, "epsilon": num(epsilon), "rho": rho,
              "delta": delta, "constants": constants, "failure_prob": beta,
              "world_key": world_key, "horizon": env.horizon, "states": env.n_states, "actions": env.n_actions,
              "instance_seed": instance_seed}
    manifest = write_explore(out, env, algo, agent, res, budget, config, overwrite=overwrite, seeded=seed is not None)
    if seed is not None and budget is not None:
        click.echo("WARNING: seeded noise (--seed): for tests only; the run is marked rng seeded-insecure and NOT "
                   "private against anyone who knows the seed (the seed is not written).", err=True)
    g, s = manifest.envelope, manifest.summary
    if as_json:
        echo_json({"out": str(out), "summary": s.to_dict(),
                   "guarantee": {"private": g.private, "rng": g.rng, "epsilon": g.epsilon, "delta": g.delta,
                                 "rho": g.rho, "sampler": g.sampler}})
        return
    click.echo(f"{algo} on {env.name} (H={env.horizon}, S={env.n_states}, A={env.n_actions}), K={episodes}: "
               f"cumulative regret {s.cumulative_regret:.1f}, mean regret in the last 10% "
               f"{s.mean_regret_last_10pct:.3f} (first 10%: {s.mean_regret_first_10pct:.3f})")
    click.echo(("guarantee: " + g.statement) if g.private else
               f"guarantee: none ({g.note})" if g.note is not None else "guarantee: none (non-private run)")
    click.echo(f"wrote {out}/regret.parquet, manifest.json, regret.png")
