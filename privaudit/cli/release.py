"""``privaudit release``: differentially private counts of tabular logs, with their guarantee."""

from __future__ import annotations

import click

from privaudit.cli.numbers import IntRange
from privaudit.cli.common import (Notices, PathArg, as_flags, budget_options, budget_sentence, echo_json,
                                  engine_options, handle_errors, repair_options, spark_target)
from privaudit.data.repairs import RepairLimit
from privaudit.core.formatting import guarantee_text, num
from privaudit.core.outputs import check_outputs
from privaudit.release.tabular import ReleaseOptions, default_stationary, release_logs

_HELP = """Release noisy visit counts n_h(s,a), transition counts n_h(s,a,s') and,
unless the spec declares the reward public, reward sums R_h(s,a) of the
logs LOGS, over the whole domain declared by SPEC, into the folder DIR
(--out), with the guarantee in DIR/manifest.json.

With --ledger FILE the release is checked against the dataset's remaining
budget before any row is read, and charged once DIR is complete.

Before counting, the logs are validated (rules that cannot be repaired are
fatal: the same located errors as `privaudit validate`), then bounded: at
most k episodes per privacy unit, steps h < H, rewards clipped into the
declared range and scaled to [0, 1]; with --max-per-cell C, at most C
steps per unit and cell. What bounding clipped or dropped (counts and
shares of the logs) is printed on stderr and written to DIR.local-log.json
beside (not inside) DIR: these are private facts for the data holder,
never part of the release. When a repair changes more than
--max-repair-share of the logs (default 0.05), the release stops before
any noise is drawn unless given --accept-repairs: a share that large
usually means a wrong declaration (reward_range, H, k, return_bound).

--seed makes the noise reproducible, for tests only: the manifest then says
rng "seeded-insecure" (the seed itself is never written), since anyone who
knows the seed can subtract the noise.

Exit codes: 0 ok; 1 invalid or unreadable logs, or repairs above
--max-repair-share; 2 usage or spec error
(e.g. rho <= 0, DIR exists); 3 budget exceeded. On error nothing is written.

--engine spark runs validation's fatal rules, bounding (--max-per-cell
too) and the exact counts on Apache Spark (--master URL, default
local[*]; or --remote sc://HOST:PORT, a Spark Connect server, which then
reads LOGS); only the exact cell counts come back to this process, one
step h at a time, and it adds the noise. A failure of Spark itself (a
failed job, out of memory, a lost JVM, no Connect server answering at
HOST:PORT) exits 1 with one line; no Java runtime (for --master), a
--master that is no Spark master URL or a malformed sc:// URL exits 2
before Spark starts; nothing is written or charged either way.

\b
Example:
  privaudit release logs.parquet --spec spec.json --rho 1 --out rel/ \\
      --ledger budget.jsonl
"""


_HELP = _HELP.replace("\n\nWith --ledger FILE", "\n\n" + budget_sentence(laplace=True) + " --mechanism picks "
                      "the noise family explicitly (default: the one the budget flags name).\n\nWith --ledger FILE", 1)


@click.command("release", help=_HELP, short_help="Release DP counts of tabular logs (Parquet + manifest).")
@click.argument("logs", type=PathArg(readable=False, path_type=str))
@click.option("--spec", "spec_path", required=True, type=PathArg(readable=False, path_type=str), help="Domain spec (JSON).")
@budget_options(laplace=True)
@click.option("--mechanism", type=click.Choice(["gaussian", "laplace"]), default=None,
              help="Noise family (default: the one the budget flags name: laplace for --epsilon alone, else "
                   "gaussian).")
@click.option("--stationary/--per-step", default=None,
              help="Pool the counts over h (tables (S,A), (S,A,S)) or release one table per h. "
                   "Default: pooled (the rule of every command, printed when it applies).")
@click.option("--noise", type=click.Choice(["exact", "rounded"]), default="exact", show_default=True,
              help="exact: exact discrete Gaussian/Laplace (total variation 0, the manifest's guarantee holds "
                   "exactly). rounded (numpy float noise) is refused: its guarantee is not certified.")
@click.option("--out", "out", required=True, type=PathArg(path_type=str), help="Release folder DIR to create.")
@click.option("--ledger", type=PathArg(readable=False, path_type=str), default=None, help="Budget ledger (privaudit budget init).")
@click.option("--seed", type=IntRange(min=0), default=None,
              help="Noise seed, for tests only (rng mode seeded-insecure; never written).")
@click.option("--json", "as_json", is_flag=True, help="Print only a JSON summary (the manifest path and guarantee).")
@engine_options
@click.option("--max-per-cell", "max_per_cell", type=IntRange(min=1), default=None,
              help="Keep at most C steps of each privacy unit in each released cell ((s, a) pooled, (h, s, a) "
                   "per step; transitions and rewards follow), in the unit's own order: less noise "
                   "(L2 sensitivity sqrt(2 c k H) pooled instead of sqrt(2) k H), biased counts. Recorded in "
                   "the manifest.")
@repair_options
@handle_errors
def command(logs, spec_path, rho, epsilon, delta, mechanism, stationary, noise, out, ledger, seed, as_json,
            engine, master, remote, max_per_cell, max_repair_share, accept_repairs):
    # before the logs are read or any budget is checked: a new folder, never an input
    check_outputs([("--out", out, None)], [("LOGS", logs), ("--spec", spec_path), ("--ledger", ledger),
                                          ("--ledger", ledger and f"{ledger}.head")], overwrite=None)
    notes = Notices()  # said once the logs are read and validated (not in front of an unrelated error)
    if stationary is None:
        stationary, said = default_stationary()
        notes.hold(as_flags(said))
    spark = spark_target(engine, master, remote)
    info = release_logs(logs, spec_path, rho=rho, epsilon=epsilon, delta=delta, mechanism=mechanism,
                        stationary=stationary, max_per_cell=max_per_cell, out=out, ledger=ledger, seed=seed,
                        options=ReleaseOptions(noise=noise, echo=notes.say, engine=engine, spark=spark,
                                               repairs=RepairLimit(max_repair_share, accept_repairs)))
    notes.flush()
    m = info.manifest
    g = m.envelope  # the one reader of a guarantee, whichever shape the manifest was written in
    summary = {"release": str(info.out), "manifest": str(info.out / "manifest.json"),
               "local_log": str(info.local_log), "mechanism": m.mechanism,
               "definition": g["definition"], "rho": g["rho"], "epsilon": g["epsilon"], "delta": g["delta"],
               "families": list(m.families), "rng": m.rng, "private": m.private,
               "ledger": ledger}
    if as_json:
        echo_json(summary)
        return
    fam = ", ".join(f"{f} ({p.noise_scale_name}={num(p.noise_scale, 4)})" for f, p in m.families.items())
    click.echo(f"released {fam} to {info.out}")
    click.echo(f"guarantee: {guarantee_text(g)}; neighbouring: "
               f"{m.neighbouring}; unit {m.privacy_unit.column}, k={m.privacy_unit.max_episodes}"
               + (f", c={max_per_cell} per cell" if max_per_cell is not None else ""))
    if not m.private:
        click.echo("WARNING: seeded noise (--seed): for tests only; this release is not private "
                   "against anyone who knows the seed.", err=True)
    click.echo(f"local bounding log (private, do not share): {info.local_log}", err=True)
