"""``privaudit simulate``: write a log of simulated episodes, its spec and (optionally) the MDP."""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np

from privaudit.cli.numbers import INT, IntRange
from privaudit.cli.common import PathArg, echo_json, handle_errors
from privaudit.core.atomic import atomic_paths
from privaudit.core.outputs import OutputKind, check_outputs, json_object, json_output
from privaudit.mdp.io import is_mdp_file, save_mdp
from privaudit.mdp.registry import MDP_REGISTRY, build_mdp
from privaudit.mdp.simulate import behaviour_policy, is_simulated_logs, simulate, write_logs
from privaudit.core.errors import UsageError
from privaudit.core.spec import WRITTEN_BY_KEY, DomainSpec, mark_written_by, write_spec, written_by

_HELP = """Simulate N (--episodes) episodes of a behaviour policy in MDP and write them as
a Parquet log in the standard schema (episode_id, step, state, action,
reward, next_state, terminated, truncated, unit_id), with the domain spec
of that log and, with --mdp-out, the MDP itself.

\b
MDPs:
""" + "\n".join(f"  {k}: {e.summary}" for k, e in MDP_REGISTRY.items()) + """

Episodes stop on entering a terminal state (terminated=true on that row)
or after H steps (truncated=true on the last row). The same --seed gives
a byte-identical Parquet file. Exit codes: 0 ok, 2 bad arguments.

\b
Example:
  privaudit simulate icu-sepsis --episodes 20000 --behaviour clinicians \\
      --seed 2026 --out logs.parquet --spec-out spec.json
"""


#: Said at the end of the description of every spec simulate writes (for people: it is kept in copies).
SIMULATED_BY = "(privaudit simulate)."
#: The tool named in the provenance mark ``$.written_by`` of the specs simulate writes.
SIMULATE_TOOL = "privaudit simulate"
#: What --overwrite may replace: the logs, spec and MDP file an earlier simulate wrote. A spec only while
#: unedited: its ``$.written_by`` mark records the SHA-256 of the rest (an edited copy of the bundled
#: sample spec, whose description still ends SIMULATED_BY, is someone's input).
SIMULATED_LOGS = OutputKind("simulated logs (a Parquet file written by privaudit simulate)", is_simulated_logs)
SIMULATED_SPEC = json_output("an unedited spec written by privaudit simulate (its $.written_by names "
                             f"{SIMULATE_TOOL!r} with the SHA-256 of the rest of the spec)",
                             lambda d: written_by(d) == SIMULATE_TOOL)
MDP_FILE = OutputKind("an MDP file (an .npz written by privaudit simulate --mdp-out)", is_mdp_file)


@click.command("simulate", help=_HELP, short_help="Simulate logs (Parquet) and their spec from a known MDP.")
@click.argument("mdp_name", metavar="MDP", type=click.Choice(list(MDP_REGISTRY)))
@click.option("--episodes", "-n", type=IntRange(min=1), required=True, help="Number of episodes n.")
@click.option("--behaviour", default=None,
              help="Behaviour policy (default: the MDP's first named behaviour, else uniform): uniform | mix:W (W*uniform + (1-W)*base) | a policy the MDP names "
                   "(icu-sepsis: clinicians; synthetic-linear: seed = a 0 w.p. 0.6; also the base of mix:W; elsewhere the base is a fixed random policy).")
@click.option("--seed", type=IntRange(min=0), default=None,
              help="Seed of the simulation (default: OS entropy).")
@click.option("--out", "out", type=PathArg(dir_okay=False), required=True, help="Output Parquet file LOGS.parquet.")
@click.option("--spec-out", type=PathArg(dir_okay=False), required=True, help="Output domain spec SPEC.json.")
@click.option("--mdp-out", type=PathArg(dir_okay=False), default=None, help="Also save the MDP as MDP.npz.")
@click.option("--horizon", type=INT, default=None, help="H (icu-sepsis default 20; required for random-tabular).")
@click.option("--states", type=INT, default=None, help="S (random-tabular).")
@click.option("--actions", type=INT, default=None, help="A (random-tabular).")
@click.option("--instance-seed", type=IntRange(min=0), default=None,
              help="Seed naming the MDP instance (random-tabular and synthetic-linear, default 0); recorded in "
                   "the spec as $.mdp.instance_seed, where evaluate and pipeline read it.")
@click.option("--dataset-id", default=None, help="dataset_id written into the spec (default: '<MDP>-simulated').")
@click.option("--overwrite", is_flag=True, help="Replace --out/--spec-out/--mdp-out if they exist and an earlier simulate wrote them (only then).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary only.")
@handle_errors
def command(mdp_name, episodes, behaviour, seed, out, spec_out, mdp_out, horizon, states, actions,
            instance_seed, dataset_id, overwrite, as_json):
    targets = [Path(p) for p in (out, spec_out, mdp_out) if p]
    # before any episode is simulated; --overwrite replaces only what an earlier simulate wrote
    if overwrite:
        _refuse_unmarked_spec(Path(spec_out))
    check_outputs([("--out", out, SIMULATED_LOGS), ("--spec-out", spec_out, SIMULATED_SPEC),
                   ("--mdp-out", mdp_out, MDP_FILE)], [], overwrite)

    mdp = build_mdp(mdp_name, horizon=horizon, states=states, actions=actions, instance_seed=instance_seed)
    entry = MDP_REGISTRY[mdp_name]
    if behaviour is None:
        behaviour = next(iter(entry.behaviours), "uniform")
    pi = behaviour_policy(behaviour, mdp, entry=entry)
    seeded = "instance_seed" in entry.options
    if seeded and instance_seed is None:
        instance_seed = entry.options["instance_seed"]
    instance = f" instance {instance_seed}" if seeded else ""
    description = f"Simulated from the {mdp_name} MDP{instance} with behaviour policy {behaviour} {SIMULATED_BY}"
    spec_doc = entry.spec_doc(mdp, dataset_id or f"{mdp_name}-simulated", description)
    if seeded:  # machine-readable: evaluate / pipeline --mdp NAME rebuild this very instance
        spec_doc["mdp"] = {"name": mdp_name, "instance_seed": int(instance_seed)}
    spec_doc = mark_written_by(spec_doc, SIMULATE_TOOL)  # what a later --overwrite recognises
    DomainSpec.from_dict(spec_doc)  # refuse a bad spec before any work
    df = simulate(mdp, pi, episodes, rng=np.random.default_rng(seed))
    with atomic_paths(targets) as tmps:  # all three or none: a failure on the last leaves no logs behind
        write_logs(df, tmps[0])
        write_spec(spec_doc, tmps[1])
        if mdp_out:
            save_mdp(mdp, tmps[2])
    summary = {"mdp": mdp_name, "instance_seed": instance_seed if seeded else None,
               "behaviour": behaviour, "episodes": episodes, "rows": df.height,
               "horizon": mdp.horizon, "n_states": mdp.n_states, "n_actions": mdp.n_actions,
               "logs": str(out), "spec": str(spec_out), "mdp_file": str(mdp_out) if mdp_out else None}
    if as_json:
        echo_json(summary)
    else:
        click.echo(f"simulated {episodes} episodes ({df.height} rows) of {mdp_name} "
                   f"(H={mdp.horizon}, S={mdp.n_states}, A={mdp.n_actions}) with behaviour {behaviour}")
        click.echo(f"logs: {out}\nspec: {spec_out}" + (f"\nmdp:  {mdp_out}" if mdp_out else ""))


def _refuse_unmarked_spec(path: Path) -> None:
    """Refuse, with its own message, a spec whose description says simulate wrote it but which has no
    ``$.written_by`` mark (written before the mark existed, or a copy of one with the mark removed):
    whether it was edited since cannot be told, so ``--overwrite`` does not replace it.

    Raises
    ------
    UsageError
        ``path`` is such a spec.
    """
    doc = json_object(path)
    if doc is None or WRITTEN_BY_KEY in doc or not str(doc.get("description", "")).endswith(SIMULATED_BY):
        return
    raise UsageError(f"`--spec-out` {path}: its description says privaudit simulate wrote it, but it has no "
                     f"$.{WRITTEN_BY_KEY} mark (written by an older privaudit, or a copy someone may have "
                     "edited), so `--overwrite` cannot tell it is unedited and does not replace it. Remove the "
                     "file yourself if it is an old simulated spec, or choose another `--spec-out`.")
