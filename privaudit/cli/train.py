"""``privaudit train``: an offline policy from logs or from a DP release."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import click

from privaudit.cli.numbers import FloatRange, IntRange
from privaudit.cli.registry_help import (LiveHelpCommand, LiveHelpOption, RegistryChoice, joined, learner_lines,
                                         private_tabular, release_readers)
from privaudit.cli.common import (Notices, PathArg, as_flags, budget_options, echo_json, engine_options, handle_errors,
                                  repair_options, spark_target)
from privaudit.core.errors import Terminated, UsageError
from privaudit.core.formatting import guarantee_text
from privaudit.privacy.budget import accepted_budgets
from privaudit.privacy.noise import GAUSSIAN
from privaudit.core.outputs import check_outputs, check_sidecar_free, output_lock
from privaudit.core import registry
from privaudit.learners.options import BudgetRequest, RunContext
from privaudit.learners.linear.logs import local_log_path, train_from_logs as linear_train_from_logs
from privaudit.learners.policy import POLICY_LOG_OUTPUT, POLICY_OUTPUT, save_policy
from privaudit.learners.tabular.train import train_from_logs, train_from_release
from privaudit.core.spec import load_spec
from privaudit.data.io import refuse_privaudit_output
from privaudit.data.repairs import RepairLimit
from privaudit.release.tabular import default_stationary, local_log_path as release_log_path



def _offline() -> tuple[str, ...]:
    """The ``--algo`` choices: every offline learner of the registry, read when asked."""
    return registry.names(family=registry.OFFLINE)


def _with_option(option: str) -> str:
    """The learners an option of :data:`privaudit.core.registry.OPTIONS` applies to, for a help text."""
    return joined(registry.names_with(lambda cls: option in cls.options))


def _help(doc: str) -> str:
    """The command's help: its docstring with the learner list and names read from the registry."""
    linear = registry.names(family="linear")
    return (doc.replace("  LEARNERS_FROM_REGISTRY", learner_lines(indent=2))
            .replace("RELEASE_READERS", joined(release_readers(), " | "))
            .replace("LINEAR_LEARNERS", joined(linear)))


def release_dir_for(out: Path) -> Path:
    """Where ``train`` keeps the release it makes from logs: ``POLICY.release`` next to POLICY."""
    return out.with_name(out.name + ".release")


@click.command("train", cls=LiveHelpCommand, help_fn=_help,
               short_help="Train an offline policy (DP-APVI, APVI, VE, ...) from logs or a release.")
@click.argument("logs", metavar="[LOGS]", required=False, type=PathArg(readable=False, dir_okay=True))
@click.option("--spec", "spec_path", type=PathArg(readable=False, dir_okay=False), default=None,
              help="Domain spec JSON (required with LOGS; with --release, checked against the release).")
@click.option("--release", "release_dir", type=PathArg(readable=False, file_okay=False), default=None,
              help="Train on this release folder instead of LOGS (post-processing: spends no budget).")
@click.option("--algo", required=True, type=RegistryChoice(_offline), cls=LiveHelpOption,
              help_fn=lambda: " | ".join(registry.names(family="tabular")) + " (tabular); "
              + " | ".join(registry.names(family="linear")) + " (linear).")
@budget_options(laplace=True, epsilon_note="(dp-apvi's count release only; dp-pbb and dp-vapvi are Gaussian.)")
@click.option("--mechanism", type=click.Choice(["gaussian", "laplace"]), default=None,
              help="Noise family of dp-apvi's count release (default: the one the budget flags name: laplace for "
                   "--epsilon alone, else gaussian); dp-pbb and dp-vapvi are gaussian only.")
@click.option("--noise", type=click.Choice(["rounded", "exact"]), default=None, cls=LiveHelpOption,
              help_fn=lambda: f"Noise sampler of the release made from LOGS ({joined(release_readers())}; default "
                              "exact; rounded is refused).")
@click.option("--stationary/--per-step", default=None,
              help="Pool counts over h (stationary MDP, e.g. ICU-Sepsis) or count per step h (tabular "
                   "learners). Default from LOGS: pooled (the rule of every command, printed when it "
                   "applies); from --release: as the release is.")
@click.option("--failure-prob", type=FloatRange(0, 1, min_open=True, max_open=True), default=None,
              help="Learner's failure probability delta (tabular: iota = log(HSA/delta), E; dp-vapvi: "
                   "delta_fail in its E and L). Default 0.05.")
@click.option("--penalty-c1", "c1", type=FloatRange(min=0), default=None, cls=LiveHelpOption,
              help_fn=lambda: f"Penalty constant C1 of the variance term ({_with_option('C1')}; paper: sqrt(2)).")
@click.option("--penalty-c2", "c2", type=FloatRange(min=0), default=None, cls=LiveHelpOption,
              help_fn=lambda: f"Penalty constant C2 of DP-APVI's S*H*E*iota/n term ({_with_option('C2')}; paper: "
                              "16). Values other than the paper's leave the privacy guarantee intact "
                              "(post-processing) but not the paper's utility bound.")
@click.option("--penalty-c", "c_fallback", type=FloatRange(min=1, min_open=True), default=None,
              cls=LiveHelpOption,
              help_fn=lambda: f"Fallback penalty C*H where the count is at most E ({_with_option('C')}; "
                              "any C > 1; default 2).")
@click.option("--max-per-cell", "max_per_cell", type=IntRange(min=1), default=None, cls=LiveHelpOption,
              help_fn=lambda: f"{_with_option('max_per_cell')}: at most C steps of one privacy unit per (s, a) cell "
                              "(per (h, s, a) with --per-step); default 1.")
@click.option("--ledger", type=PathArg(readable=False, dir_okay=False), default=None,
              help="Budget ledger: a learner on a release charges the release made from LOGS; a private learner "
                   "reading LOGS is checked before any noise and charged before the policy is written.")
@click.option("--out", "out", required=True, type=PathArg(), help="Policy folder to write.")
@click.option("--overwrite", is_flag=True,
              help="Replace --out if it holds an earlier policy (only then), and the private bounding log an "
                   "earlier run wrote beside it; the new policy replaces it only once it is complete. A release "
                   "made from LOGS (OUT.release) is never replaced.")
@click.option("--seed", type=IntRange(min=0), default=None,
              help="TESTS ONLY: seed the release's noise (rng mode seeded-insecure).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary on stdout.")
@engine_options
@repair_options
@handle_errors
def command(logs, spec_path, release_dir, algo, rho, epsilon, delta, mechanism, noise, stationary, max_per_cell,
            failure_prob, c1, c2, c_fallback, ledger, out, overwrite, seed, as_json, max_repair_share,
            accept_repairs, engine, master, remote):
    """Train a policy and write it as a folder (policy.parquet + policy.json).

    \b
    Algorithms (the registry's, with how each reads LOGS):
      LEARNERS_FROM_REGISTRY

    The linear learners (LINEAR_LEARNERS) fit one regression per step h
    with the spec's feature map: --stationary does not apply.

    --engine spark has Apache Spark read, check, bound and count LOGS for
    the learners that release their own noisy statistics (dp-pbb: its
    capped counts and start counts; dp-apvi: its count release); only
    per-cell aggregates come back here, where the noise is added: the same
    policy as polars for the same --seed.

    From LOGS, every learner prints the PRIVATE contribution-bounding facts
    (episodes dropped above k per unit, truncated at H, with a clipped
    reward, as counts and shares) on stderr; the learners on a release
    (RELEASE_READERS) and the linear learners also write them beside the
    output, never inside the policy folder: OUT.release.local-log.json (on
    a release) or OUT.local-log.json (linear). Do not share them. When a
    repair changes more than --max-repair-share of the episodes (default
    0.05), training stops before spending anything unless given
    --accept-repairs.

    A learner that releases its own noisy statistics of LOGS and carries a
    certificate prints it: a lower bound on the learned policy's value from
    the logs' start distribution (post-processing of its DP releases),
    holding with probability >= 1 - failure_prob.

    Budget (the same flags and meaning in every command; docs/privacy.md,
    "Budget flags"): --rho R (R-zCDP, reported at delta 1e-6); --rho R
    --delta D (reported at D); --epsilon E --delta D (an (E, D)-DP target,
    converted exactly to rho); --epsilon E alone (pure E-DP, Laplace noise:
    dp-apvi's release only; refused by dp-pbb and dp-vapvi).

    Exit codes: 0 ok; 1 invalid logs, repairs above --max-repair-share, a
    missing/corrupt release, or Spark failed (one line; nothing written or
    charged); 2 bad arguments or spec (also a --spec the
    release was not made under); 3 budget exceeded.

    \b
    Examples:
      privaudit train logs.parquet --spec spec.json --algo dp-apvi --epsilon 5 --delta 1e-6 --stationary --out pol
      privaudit train --release rel --spec spec.json --algo dp-apvi --out pol
      privaudit train logs.parquet --spec spec.json --algo dp-pbb --epsilon 5 --delta 1e-6 --out pol_pbb
      privaudit train logs.parquet --spec spec.json --algo apvi --out pol_nonprivate
      privaudit train logs.parquet --spec lin_spec.json --algo dp-vapvi --rho 1 --out pol_lin
    """

    notes = Notices()  # notices are said once the inputs are read and validated (not before an unrelated error)
    say = notes.say

    if (logs is None) == (release_dir is None):
        raise UsageError("give exactly one input: LOGS (with --spec SPEC) or --release DIR.")
    spark = spark_target(engine, master, remote)
    on_spark = registry.names_with(lambda cls: cls.reads in ("logs", "release"), family="tabular")
    if engine == "spark" and (release_dir is not None or algo not in on_spark):
        raise UsageError(f"--engine spark reads LOGS for --algo {' | '.join(on_spark)}"
                         + (" (--release reads no logs)." if release_dir is not None else
                            f"; --algo {algo} reads them with polars."))
    out = Path(out)
    learner = registry.get(algo).load()  # what the learner reads and which options apply: asked, not branched on
    linear_algos = registry.names(family="linear")
    private_algos = registry.names(family=registry.OFFLINE, private=True)
    log_path = local_log_path(out) if algo in linear_algos and release_dir is None else None
    # before the logs are read or any budget is checked: never an input; an existing --out only with --overwrite
    check_outputs([("--out", out, POLICY_OUTPUT), ("--out", log_path if overwrite else None, POLICY_LOG_OUTPUT)],
                  [("LOGS", logs), ("--spec", spec_path), ("--release", release_dir),
                   ("--ledger", ledger), ("--ledger", ledger and f"{ledger}.head")], overwrite=overwrite)
    if log_path is not None and not overwrite:  # an earlier policy's private log: never replaced silently
        check_sidecar_free(log_path, "the policy's private bounding log", "policy")
    if release_dir is None and learner.reads == "release" and algo in private_algos:
        _check_release_free(release_dir_for(out), overwrite)
    if logs is not None:  # a release given as LOGS: say so before the budget flags are checked
        refuse_privaudit_output(logs)
    # held until the command ends: a second run writing the same --out at once is refused now
    stale = click.get_current_context().with_resource(output_lock(out, "--out"))
    if stale:
        say(f"removed {len(stale)} stale temporary folder(s) of an interrupted run: "
            + ", ".join(str(p) for p in stale))
    spec = load_spec(spec_path) if spec_path else None
    params = {} if failure_prob is None else {"failure_prob": failure_prob}
    penalty = {k: v for k, v in (("C1", c1), ("C2", c2), ("C", c_fallback)) if v is not None}
    if penalty:
        pessimistic = registry.names_with(lambda cls: {"C1", "C"} <= cls.options)
        if algo not in pessimistic:
            raise UsageError(f"--penalty-* apply to {', '.join(pessimistic)}, not to --algo {algo}.")
        if "C2" in penalty and "C2" not in learner.options:
            raise UsageError("--penalty-c2 is DP-APVI's privacy term: it applies to --algo "
                             f"{' | '.join(registry.names_with(lambda cls: 'C2' in cls.options))} only.")
        params.update(penalty)
    budget_given = any(v is not None for v in (rho, epsilon, delta))
    repairs = RepairLimit(max_repair_share, accept_repairs)
    certificate = None
    staged_log = None

    if release_dir is not None:
        if budget_given or ledger is not None or seed is not None:
            raise UsageError("--release trains on an existing release and spends nothing more: "
                             "--rho/--epsilon/--delta/--ledger/--seed do not apply.")
        policy = train_from_release(release_dir, algo=algo, spec=spec,
                                    stationary=stationary, params=params)
        release_used = Path(release_dir)
    elif algo in linear_algos:
        if spec is None:
            raise UsageError("LOGS needs --spec SPEC (the public domain of the logs).")
        if algo not in private_algos:
            notes.hold(f"warning: --algo {algo} reads the exact logs; the policy is NOT differentially private.")

        if ledger is not None and algo not in private_algos:
            raise UsageError(f"--algo {algo} is not private: it spends no budget, so --ledger does not apply.")
        if stationary:
            raise UsageError(f"--stationary does not apply to --algo {algo}: the linear learners fit one "
                             "regression per step h. Drop the flag.")
        if noise is not None:
            raise UsageError(f"--noise does not apply to --algo {algo}: it selects the sampler of a count "
                             "release (dp-apvi); DP-VAPVI draws continuous Gaussian noise. Drop the flag.")
        if mechanism not in (None, "gaussian"):
            raise UsageError(f"--mechanism {mechanism} does not apply to --algo {algo}: DP-VAPVI is "
                             f"Gaussian / zCDP only (give {as_flags(accepted_budgets((GAUSSIAN.name,)))})"
                             + ("" if algo in private_algos else f"; {algo} is not private and adds no noise")
                             + ".")
        staged_log = click.get_current_context().with_resource(_staged(out))  # renamed once the policy is written
        policy = linear_train_from_logs(logs, spec, algo, budget=BudgetRequest(rho, epsilon, delta), seed=seed,
                                        params=params or None, local_log=staged_log,
                                        context=RunContext(ledger=ledger, output=out, echo=say, repairs=repairs))
        say(f"private log (bounding facts; do not share): {log_path}")
        release_used = None
    else:
        if spec is None:
            raise UsageError("LOGS needs --spec SPEC (the public domain of the logs).")
        if stationary is None:  # the one default rule of every command, said when it applies
            stationary, said = default_stationary()
            notes.hold(as_flags(said))
        release_used = release_dir_for(out) if algo in private_algos else None
        if learner.reads == "logs":
            release_used = None  # its releases (noisy counts, private backups) live inside the learner
            if noise is not None:
                raise UsageError(f"--noise does not apply to --algo {algo}: it always draws exact discrete "
                                 "Gaussian noise. Drop the flag.")
        if max_per_cell is not None and "max_per_cell" not in learner.options:
            capped = " | ".join(registry.names_with(lambda cls: "max_per_cell" in cls.options))
            raise UsageError(f"--max-per-cell applies to --algo {capped} (its per-cell cap), not to --algo {algo}; "
                             "cap a count release with `privaudit release --max-per-cell`.")
        if learner.reads == "logs":
            if not budget_given:
                raise UsageError(f"--algo {algo} releases private Bellman backups: give a budget: "
                                 f"{as_flags(accepted_budgets((GAUSSIAN.name,)))}.")
        elif algo in private_algos:
            if not budget_given:
                raise UsageError(f"--algo {algo} releases the counts first: give a budget: "
                                 f"{as_flags(accepted_budgets())}.")
            b = BudgetRequest(rho, epsilon, delta, mechanism).resolve()  # checked now; the release resolves it again
            notes.hold(f"releasing DP counts of {logs} first ({b.mechanism} noise, {b.text}"
                       f"{', stationary' if stationary else ''}) into {release_used}: this spends privacy budget.")
        else:
            notes.hold(f"warning: --algo {algo} reads the exact logs; the policy is NOT differentially private "
                f"and can reveal patients' records. Use --algo {' or '.join(private_tabular())} for a private policy.")
        context = RunContext(ledger=ledger, output=out, echo=say, repairs=repairs, engine=engine, spark=spark)
        if learner.reads == "logs":  # its own noisy releases: the fitted learner holds its certificate
            run = learner.train_on_logs(logs, spec, stationary=stationary, budget=BudgetRequest(rho, epsilon, delta,
                                                                                              mechanism),
                                        seed=seed, params=params, max_per_cell=max_per_cell, context=context)
            policy, certificate = run.learner.policy_, _certificate(run.learner)
        else:
            with _kept_release(release_used, algo, spec_path, out):
                policy = train_from_logs(logs, spec, algo=algo, stationary=stationary,
                                         budget=BudgetRequest(rho, epsilon, delta, mechanism), noise=noise or "exact",
                                         release_out=release_used, seed=seed, params=params,
                                         max_per_cell=max_per_cell, context=context)
    notes.flush()
    with _kept_release(None if release_dir else release_used, algo, spec_path, out):
        save_policy(policy, out, overwrite=overwrite)  # complete in a temporary folder, then swapped in
    if staged_log is not None:
        os.replace(staged_log, log_path)
    summary = {"policy": str(out), "algorithm": policy.algorithm, "private": policy.privacy.private,
               "release": str(release_used) if release_used is not None else None,
               "stationary": policy.stationary, "shape": list(policy.table.shape),
               "parameters": policy.parameters, "certificate": certificate}
    if as_json:
        echo_json(summary)
    else:
        click.echo(f"wrote {out} ({policy.algorithm}, "
                   f"{'private: ' + str(policy.privacy.definition) if summary['private'] else 'NOT private'})")
        g = policy.privacy.envelope
        if g is not None and g.get("epsilon") is not None:
            click.echo(f"guarantee: {guarantee_text(g)}" + ("" if summary["private"] else
                                                            " (does not hold: seeded noise, --seed)"))
        if certificate is not None:
            click.echo(f"certificate: the policy's value (expected total reward over H={spec.H} steps, in the "
                       f"spec's reward units, averaged over the logs' start states) is at least "
                       f"{certificate['value']:.4f} with probability >= {1 - certificate['failure_prob']:g} "
                       f"(failure probability {certificate['failure_prob']:g}), when the logs follow the spec's "
                       "declarations; " + certificate["what"])


@contextlib.contextmanager
def _kept_release(release: Path | None, algo: str, spec_path, out: Path):
    """Ctrl-C or SIGTERM once the release made from LOGS exists (complete, charged): say that it is kept
    and how to train on it without spending again (a retry of the same command is refused: it never
    replaces a release)."""
    try:
        yield
    except (KeyboardInterrupt, Terminated) as e:
        if release is None or not release.exists() or str(e):
            raise
        raise type(e)(f"the policy was not written, but the release {release} was made (its budget is spent) and "
                      f"is kept: train on it without spending again: privaudit train --release {release} "
                      f"--spec {spec_path} --algo {algo} --out {out}") from e


def _check_release_free(release: Path, overwrite: bool) -> None:
    """Refuse, before any work, a release (or its private log) already where ``train`` would release into.

    A release spent budget: ``--overwrite`` replaces the policy, never a release (as ``release`` never
    replaces one); the earlier release can be trained on with ``--release``.
    """
    for path in (release, release_log_path(release)):
        if path.exists() or path.is_symlink():
            what = "its private bounding log" if path != release else "the release an earlier run made"
            raise UsageError(f"{path} already exists ({what} for this --out). A release spent budget and is "
                             f"never replaced{', not even with --overwrite (it replaces the policy only)' if overwrite else ''}"
                             f": train on it with --release {release}, move it away, or choose another --out.")


class _staged:
    """A context manager: a free hidden path next to ``out`` (``.OUT.XXXXXXXX.tmp``, which the next run's
    ``output_lock`` removes if this one is killed) for a file renamed into place at the end; removed on exit
    if still there."""

    def __init__(self, out: Path):
        fd, name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
        os.close(fd)
        os.unlink(name)
        self.path = Path(name)

    def __enter__(self) -> Path:
        return self.path

    def __exit__(self, *exc) -> None:
        self.path.unlink(missing_ok=True)


def _certificate(learner) -> dict | None:
    """A fitted learner's certificate from its own releases (``certified_value()`` without a d0), or None."""
    if not hasattr(learner, "certified_value"):
        return None
    return {"value": float(learner.certified_value()), "failure_prob": float(learner.failure_prob),
            "what": "a lower confidence bound from the learner's noisy backups and noisy start counts "
                    "(post-processing of its DP releases; docs/learners.md, \"DP-PBB\")."}
