"""``privaudit audit``: an empirical lower bound on epsilon next to a DP claim."""

from __future__ import annotations

import click

from privaudit.cli.numbers import FLOAT, FloatRange, IntRange
from privaudit.audit.choice import MAX_TRIALS, MIN_TRIALS
from privaudit.cli.common import PathArg, as_flags, echo_json, handle_errors
from privaudit.cli.registry_help import LiveHelpCommand, LiveHelpOption, joined, release_readers
from privaudit.core import registry
from privaudit.audit import Claim, load_pair, run_audit
from privaudit.audit.mechanisms.registry import ADAPTERS
from privaudit.audit.protocol import FileFunction, FileMechanism
from privaudit.audit.online.catalogue import explore_audit
from privaudit.audit.online.jdp import ExplorerSetup
from privaudit.audit.online.streams import StreamSetup
from privaudit.audit.runner import AuditSettings, default_canary
from privaudit.data.prepare import collect_or_raise, prepare_logs
from privaudit.core.errors import UsageError
from privaudit.core.atomic import atomic_paths
from privaudit.audit.plotting import AUDIT_PLOT_MARK
from privaudit.cli.audit_inputs import resolve_trials, say_hooks, search_pairs
from privaudit.core.outputs import check_outputs, json_output, png_output
from privaudit.core.formatting import guarantee_text, privacy_param
from privaudit.privacy import budget as budget_mod
from privaudit.privacy.accounting import DEFAULT_REPORT_DELTA
from privaudit.core.spec import load_spec
from privaudit.release.tabular import default_stationary



def _capped() -> tuple[str, ...]:
    """Private learners with their own per-cell cap (audited through their first releases, DP-PBB)."""
    return registry.names_with(lambda cls: cls.private and "max_per_cell" in cls.options)


def _pooled() -> str:
    """The built-ins that count pooled over h or per step: the release and the learners on a release."""
    return " / ".join(("release",) + release_readers())


def _mechanism_help() -> str:
    return (" | ".join(ADAPTERS) + " | explore:ALGO (an online explorer's joint-DP claim: "
            + ", ".join(registry.names(family="online", private=True)) + ", or a broken one of the online "
            "catalogue) | FILE.py:NAME (a callable fn(logs, rng[, n_runs])).")


def _canary_help() -> str:
    return ("How D' is built from D (docs/audit.md). synthetic / synthetic-repeat: D = logs + u*, D' = logs + v*, "
            "units built from the spec that attain the declared sensitivity (per step / pooled) and involve no real "
            f"unit; the default for --mechanism {_pooled()} (synthetic-repeat when pooled over h, the default). "
            "rare / repeat / random replace a real unit; rare is the default for FILE.py:NAME. "
            f"{joined(registry.names(family='linear', private=True), ' / ')}: synthetic (default) sets the units' "
            "last-step features to orthogonal unit vectors; rare/repeat aim a real-feature canary at its "
            f"statistics. {joined(_capped(), ' / ')}: synthetic (default) spreads each unit's transitions over "
            "cells at the per-cell cap (attains its capped sensitivity); synthetic-repeat puts them in one cell "
            "(where the cap must bite).")


def _help(doc: str) -> str:
    """The command's help: its docstring with the built-ins' names read from the registry."""
    return (doc.replace("POOLED_BUILTINS", _pooled()).replace("CAPPED_LEARNERS", joined(_capped(), " / "))
            .replace("LINEAR_LEARNERS", joined(registry.names(family="linear", private=True), " / ")))


def budget_in_flags(message: str, override: bool) -> str:
    """A built-in mechanism's budget error in this command's words.

    The mechanism runs at the claim's budget (``--claim-rho`` / ``--claim-epsilon``)
    or at ``--mechanism-rho`` / ``--mechanism-epsilon`` when given; its
    library errors name its own `rho` / `epsilon` (``resolve_budget``), which
    this command has no option for (before: "`rho` = 1e-300 is too small" for
    ``--claim-rho 1e-300``).
    """
    prefix = "--mechanism-" if override else "--claim-"
    for name in ("rho", "epsilon"):
        message = message.replace(f"`{name}`", f"`{prefix}{name}`")
    return message


def builtin_budget(claim, release_mechanism, mechanism_rho, mechanism_epsilon):
    """Noise family and budget a built-in mechanism runs at (the claim is left as claimed).

    Returns
    -------
    (family, budget) : (str, dict)
        ``family`` "gaussian" | "laplace"; ``budget`` keywords of
        ``privaudit.privacy.budget.resolve_budget`` (rho, or epsilon [+ delta]).

    Raises
    ------
    UsageError
        Any combination that cannot run as asked: both overrides; an override
        <= 0; Laplace noise with a rho claim, a Gaussian-kind claim or
        ``--mechanism-rho`` (Laplace is pure epsilon-DP: it has no rho budget
        and the GDP test does not describe it); Gaussian noise that would need
        a delta when the claim has delta = 0 and no ``--mechanism-rho``.
    """

    if mechanism_rho is not None and mechanism_epsilon is not None:
        raise UsageError("give at most one of --mechanism-rho and --mechanism-epsilon.")
    for opt, v in (("--mechanism-rho", mechanism_rho), ("--mechanism-epsilon", mechanism_epsilon)):
        if v is not None and not (0 < v < float("inf")):
            raise UsageError(f"{opt} must be a finite number > 0. Found {v}.")
    fam = release_mechanism or ("laplace" if claim.delta == 0 else "gaussian")
    if fam == "laplace":
        if claim.rho is not None:
            raise UsageError("--release-mechanism laplace with a rho claim: Laplace noise is pure epsilon-DP and "
                             "`privaudit release` never states a rho claim for it. Audit it with --claim-epsilon E "
                             "--delta 0 (or use Gaussian noise for a rho claim).")
        if claim.kind == "gaussian":
            raise UsageError("--claim-kind gaussian with Laplace noise: the GDP test describes Gaussian noise only. "
                             "Use --claim-kind generic (or --release-mechanism gaussian).")
        if mechanism_rho is not None:
            raise UsageError("--mechanism-rho with Laplace noise: Laplace has no rho budget; give "
                             "--mechanism-epsilon E (or --release-mechanism gaussian).")
        return fam, {"epsilon": mechanism_epsilon if mechanism_epsilon is not None else claim.epsilon}
    if mechanism_rho is not None:
        return fam, {"rho": mechanism_rho}
    if claim.delta == 0:
        raise UsageError("Gaussian noise with a pure-DP claim (--delta 0): the Gaussian mechanism has no "
                         "epsilon at delta 0. Give --mechanism-rho R to set its budget, or use Laplace noise.")
    if mechanism_epsilon is not None:
        return fam, {"epsilon": mechanism_epsilon, "delta": claim.delta}
    if claim.rho is not None:
        return fam, {"rho": claim.rho}
    return fam, {"epsilon": claim.epsilon, "delta": claim.delta}


@click.command("audit", cls=LiveHelpCommand, help_fn=_help, short_help="Audit a DP claim empirically: epsilon lower bound from neighbouring runs.")
@click.option("--mechanism", "mechanism", required=True, cls=LiveHelpOption, help_fn=_mechanism_help)
@click.option("--logs", "logs_path", type=PathArg(readable=False), default=None,
              help="Logs D (Parquet file or folder); D' = D with one unit replaced by a canary. "
                   "Validated against the spec first (the fatal rules of a release).")
@click.option("--spec", "spec_path", default=None, type=PathArg(readable=False, dir_okay=False),
              help="Domain spec JSON (required except for explore:ALGO).")
@click.option("--claim-epsilon", "--epsilon", "claim_epsilon", type=FLOAT, default=None,
              help="Claimed epsilon: with --delta D an (epsilon, D)-DP claim; alone (or --delta 0) pure epsilon-DP.")
@click.option("--claim-rho", "--rho", "claim_rho", type=FLOAT, default=None,
              help="Claimed rho-zCDP, compared as (epsilon, delta)-DP at --delta.")
@click.option("--delta", type=FLOAT, default=None,
              help=f"delta of an --claim-epsilon claim, or the delta a --claim-rho claim is compared at (default "
                   f"{privacy_param(DEFAULT_REPORT_DELTA)}, the delta every command reports rho at).")
@click.option("--claim-kind", type=click.Choice(["gaussian", "generic"]), default="generic", cls=LiveHelpOption,
              help_fn=lambda: "generic (default): the (epsilon, delta) test, valid for every claim. gaussian (opt-in): "
              "also the GDP test, valid only if the mechanism is mu-GDP (continuous Gaussian noise, post-processed); "
              "rho-zCDP alone does not imply it (refused with --noise exact, except for "
              f"{joined(registry.names(family='linear', private=True), ' / ')}, whose fine-lattice Gaussian is "
              "provably close: docs/audit.md).")
@click.option("--canary", type=click.Choice(["rare", "repeat", "random", "synthetic", "synthetic-repeat"]),
              default=None, cls=LiveHelpOption, help_fn=_canary_help)
@click.option("--pair", nargs=2, type=PathArg(readable=False, dir_okay=False), default=None,
              metavar="D.parquet D2.parquet",
              help="An explicit neighbouring pair, read with the spec's column mapping; both validated "
                   "against the spec.")
@click.option("--score", "scores", multiple=True, metavar="FILE.py:NAME",
              help="Extra attack score fn(outputs (n, *shape)) -> (n,), larger = more like D'. Repeatable.")
@click.option("--trials", type=IntRange(min=MIN_TRIALS, max=MAX_TRIALS), default=None,
              help=f"Runs per side (selection + evaluation), at least {MIN_TRIALS}; or --target-excess.")
@click.option("--target-excess", type=FLOAT, default=None, metavar="X",
              help="Instead of --trials: the runs at which an audit proves a bound above the claim about half the "
                   "time when the true epsilon exceeds the claim by X (guidance.trials_needed; printed). Without "
                   "either, the error quotes the counts for a few X.")
@click.option("--target-fpr", type=FloatRange(0, 1, min_open=True, max_open=True), default=None, metavar="P",
              help="With --target-excess: the leaking event's probability under D (default: a Laplace mechanism's "
                   "most likely event); rarer events need more runs.")
@click.option("--search", "search", default=None, metavar="patterns:N|FILE.py:NAME",
              help="FILE.py:NAME mechanisms, instead of --logs/--pair/--spec: search the neighbouring pair. "
                   "patterns:N: the StatDP patterns on N query answers (one above, ..., x shape); FILE.py:NAME: a "
                   "function returning your pairs (input_pair(d, d2) or (D, D') tuples). Each pair gets a selection "
                   "split; the best is counted on fresh runs (docs/audit.md, Input search).")
@click.option("--confidence", type=FloatRange(0.5, 1, max_open=True), default=0.95, show_default=True)
@click.option("--release-mechanism", type=click.Choice(["gaussian", "laplace"]), default=None,
              help="Built-ins: noise family (default: laplace for a pure-DP claim, else gaussian).")
@click.option("--mechanism-rho", type=FLOAT, default=None,
              help="Built-ins: run the mechanism at this rho instead of the claim's (to audit a mis-stated claim).")
@click.option("--mechanism-epsilon", type=FLOAT, default=None,
              help="Built-ins: run the mechanism at this epsilon instead of the claim's.")
@click.option("--stationary/--per-step", default=None, cls=LiveHelpOption,
              help_fn=lambda: f"Built-ins {_pooled()}: counts pooled over h, or per step h. Default: pooled "
                              "(the rule of every command, printed when it applies).")
@click.option("--noise", type=click.Choice(["rounded", "exact"]), default=None,
              help="Built-ins: noise mode of the release (default: exact, as `privaudit release`; "
                   "rounded for the GDP opt-in).")
@click.option("--out", "out", required=True, type=PathArg(dir_okay=False), help="REPORT.json to write.")
@click.option("--plot", "plot", type=PathArg(dir_okay=False), default=None, help="REPORT.png (trade-off plot).")
@click.option("--overwrite", is_flag=True, help="Replace an existing --out / --plot if it is an earlier audit report / plot (only then).")
@click.option("--seed", type=IntRange(min=0), default=None, help="Seed of the audit (OS entropy if omitted).")
@click.option("--jobs", type=IntRange(min=1), default=None, help="Processes for unbatched mechanisms.")
@click.option("--json", "as_json", is_flag=True, help="Print the report JSON on stdout.")
@click.option("--env", "env_name", default=None,
              help="explore:ALGO: background users' environment (riverswim, random-tabular, synthetic-linear, "
                   "icu-sepsis or an MDP .npz; default riverswim).")
@click.option("--horizon", type=IntRange(min=1), default=None, help="explore:ALGO: H (default 2).")
@click.option("--states", type=IntRange(min=2), default=None, help="explore:ALGO: environment states.")
@click.option("--actions", type=IntRange(min=2), default=None, help="explore:ALGO: environment actions.")
@click.option("--instance-seed", type=IntRange(min=0), default=None, help="explore:ALGO: environment instance.")
@click.option("--episodes", type=IntRange(min=1), default=None,
              help="explore:ALGO: the public K the noise is sized for (default k + m + 1).")
@click.option("--canary-user", type=IntRange(min=0), default=0, show_default=True,
              help="explore:ALGO: k, the user whose data differs (users before k are the environment's).")
@click.option("--users-after", type=IntRange(min=0), default=3, show_default=True,
              help="explore:ALGO: m, users after k (silent); the run stops after user k + m.")
@click.option("--decoy", type=click.Choice(["orthogonal", "null"]), default="orthogonal", show_default=True,
              help="explore:ALGO: user k of D in its own lane (full sensitivity) or a null user.")
@click.option("--view", type=click.Choice(["billboard", "actions"]), default="billboard", show_default=True,
              help="explore:ALGO: gray-box (released statistics) or black-box (recommended actions).")
@click.option("--constants", type=click.Choice(["practical", "theory"]), default="practical", show_default=True,
              help="explore:ALGO: the explorer's constant set.")
@click.option("--fixed-event", is_flag=True, default=None,
              help="explore:ALGO --view billboard: count the projection on user k's known change, thresholds fixed "
                   "from the public design, on all runs (no selection split).")
@handle_errors
def command(mechanism, logs_path, spec_path, claim_epsilon, claim_rho, delta, claim_kind, canary, pair, scores,
            trials, confidence, release_mechanism, mechanism_rho, mechanism_epsilon, stationary, noise, out, plot,
            overwrite, seed, jobs, as_json, env_name, horizon, states, actions, instance_seed, episodes, canary_user,
            users_after, decoy, view, constants, fixed_event, target_excess, target_fpr, search):
    """Run MECHANISM many times on D and on a neighbour D', attack the outputs,
    and report a valid lower bound on epsilon (confidence --confidence) next to
    the claim. "no violation found" never means "private": it means none was
    found at the audit's resolution (in the report).

    The logs (--logs, or both files of --pair) are validated against the
    spec before anything runs: rules that contribution bounding cannot
    repair (duplicated steps, NaN rewards, ...) are fatal, with the same
    located errors as `privaudit release` (exit 1), so bad input is never
    reported as a violation of the mechanism.

    Canary (with --logs): --canary, by default `synthetic` for --mechanism
    POOLED_BUILTINS (`synthetic-repeat` when pooled over h: units built
    from the spec that attain the declared sensitivity), else `rare`; the
    one used is printed.

    CAPPED_LEARNERS: audited through the noisy capped visit counts and start
    counts (gray-box, against their share of the claim, with events fixed
    from the pair before any run); LINEAR_LEARNERS: through the noisy
    statistics of the last step h = H-1 (against their share of the claim);
    see docs/audit.md.

    Steps: the built-ins POOLED_BUILTINS pool their counts over h unless
    given --per-step, the default of every command (printed when it applies).

    Errors in user code (FILE.py:NAME for --mechanism or --score: import
    error, wrong signature, an exception, a non-numeric output) are reported
    naming FILE.py:NAME with exit 2. A FILE.py:NAME mechanism's hooks
    (exact_statistics, declared_sensitivity, noise, prepare, make_pair,
    attack_scores) are used as from Python, and named on stderr.

    --search patterns:N (the StatDP input patterns on N query answers) or
    --search FILE.py:NAME (your pairs) audits a FILE.py:NAME mechanism on
    the pair that an input search picks on selection runs, counted on fresh
    runs (no --logs, --pair or --spec). --target-excess X instead of
    --trials: the runs that see an excess X over the claim about half the
    time (printed); with neither, the error quotes the counts. An existing --out / --plot is refused
    unless --overwrite, which replaces only an earlier audit report / plot,
    never a file the audit reads (exit 2, before any run).

    --mechanism-rho / --mechanism-epsilon run a built-in at that budget; the
    claim stays as claimed. Combinations that cannot run as asked (Laplace
    noise with a rho claim or --mechanism-rho, Gaussian noise under a
    delta-0 claim without --mechanism-rho) are refused (exit 2); so are the
    built-in options with a FILE.py:NAME mechanism. See docs/audit.md.

    explore:ALGO audits an online explorer's joint-DP claim on two user
    streams that differ in user k's whole data (--env for the other users,
    --view billboard: the released statistics, or actions: the recommended
    actions; docs/audit.md "Online explorers"). The JDP output audited is
    named in the report's neighbouring_pair.

    Exit codes: 0 no violation found; 3 violation; 1 invalid, unreadable or
    missing logs, or artifacts; 2 bad arguments, spec or user code.

    \b
    Examples:
      privaudit audit --mechanism release --logs logs.parquet --spec spec.json --claim-rho 1 --trials 100000 --out rep.json --plot rep.png
      privaudit audit --mechanism release --per-step --logs logs.parquet --spec spec.json --claim-rho 1 --trials 20000 --out per_step.json
      privaudit audit --mechanism mine.py:release --pair D.parquet D2.parquet --spec spec.json --claim-epsilon 1 --delta 0 --trials 20000 --out rep.json
      privaudit audit --mechanism svt.py:svt --search patterns:10 --claim-epsilon 0.5 --target-excess 0.25 --out svt.json
    """

    if (claim_epsilon is None) == (claim_rho is None):
        raise UsageError("give exactly one claim, in the budget flags of every command: --claim-rho R [--delta D] "
                         "(rho-zCDP), --claim-epsilon E --delta D ((E, D)-DP) or --claim-epsilon E alone (pure "
                         "E-DP); --rho and --epsilon are the same flags.")
    if claim_rho is not None:
        claim = Claim.from_rho(claim_rho, DEFAULT_REPORT_DELTA if delta is None else delta, kind=claim_kind)
    else:  # --claim-epsilon alone: pure epsilon-DP, as --epsilon alone everywhere
        claim = Claim.from_epsilon(claim_epsilon, 0.0 if delta is None else delta, kind=claim_kind)
    n_trials, said_trials = resolve_trials(trials, target_excess, target_fpr, claim, confidence)
    explore_opts = {"--env": env_name, "--horizon": horizon, "--states": states, "--actions": actions,
                    "--instance-seed": instance_seed, "--episodes": episodes, "--fixed-event": fixed_event}
    src = click.get_current_context().get_parameter_source  # the explorer options with a default, when given
    explore_opts.update({"--" + n.replace("_", "-"): True for n in ("canary_user", "users_after", "decoy", "view",
                         "constants") if src(n) not in (click.core.ParameterSource.DEFAULT, None)})
    if mechanism.startswith("explore:"):
        given = [o for o, v in (("--logs", logs_path), ("--pair", pair), ("--spec", spec_path), ("--canary", canary),
                                ("--release-mechanism", release_mechanism), ("--stationary/--per-step", stationary),
                                ("--noise", noise), ("--score", scores or None), ("--jobs", jobs)) if v is not None]
        if given:
            raise UsageError(f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} not apply to {mechanism}: an online explorer is audited on "
                             "simulated user streams (--env) it builds itself. Remove the option(s).")
        _check_outputs(out, plot, overwrite, _reads(logs_path, spec_path, pair, mechanism, scores, env_name))
        if said_trials:
            click.echo(said_trials, err=True)
        env_options = {"horizon": horizon if horizon is not None else (
                           2 if env_name in (None, "riverswim", "random-tabular") else None),
                       "states": states if states is not None else (2 if env_name in (None, "riverswim") else None),
                       "actions": actions, "instance_seed": instance_seed}
        rep = explore_audit(mechanism[len("explore:"):], claim_epsilon=claim_epsilon, claim_rho=claim_rho,
                            delta=delta, claim_kind=claim_kind,
                            explorer=ExplorerSetup(view=view, constants=constants, mechanism_rho=mechanism_rho,
                                                   mechanism_epsilon=mechanism_epsilon),
                            streams=StreamSetup(env_name=env_name or "riverswim", env_options=env_options,
                                                episodes=episodes, canary_user=canary_user, users_after=users_after,
                                                decoy=decoy),
                            trials=n_trials, confidence=confidence, seed=seed, fixed=bool(fixed_event))
        _finish(rep, out, plot, confidence, as_json)
    if mechanism not in ADAPTERS and ".py:" not in mechanism:  # a typo: say so before asking for --spec
        raise UsageError(f"--mechanism {mechanism!r}: expected a built-in ({', '.join(ADAPTERS)}), explore:ALGO "
                         "(an online explorer) or FILE.py:NAME (your own mechanism).")
    bad = [o for o, v in explore_opts.items() if v is not None]
    if bad:
        raise UsageError(f"{', '.join(bad)} appl{'ies' if len(bad) == 1 else 'y'} to --mechanism explore:ALGO only.")
    if search is not None:
        _search_audit(mechanism, search, claim, n_trials, said_trials, scores, seed, confidence, jobs, out, plot,
                      overwrite, as_json, given={"--logs": logs_path, "--pair": pair, "--spec": spec_path,
                                                 "--canary": canary, "--release-mechanism": release_mechanism,
                                                 "--mechanism-rho": mechanism_rho,
                                                 "--mechanism-epsilon": mechanism_epsilon,
                                                 "--stationary/--per-step": stationary, "--noise": noise})
    if spec_path is None:
        raise UsageError("--spec is required (except for --mechanism explore:ALGO).")
    if (logs_path is None) == (pair is None):
        raise UsageError("give exactly one input: --logs LOGS (a canary pair is built) or --pair D D2.")
    _check_outputs(out, plot, overwrite, _reads(logs_path, spec_path, pair, mechanism, scores, env_name))
    spec = load_spec(spec_path)
    # Validate the input before anything runs: a broken log (duplicated step, NaN reward) must be
    # reported as bad input (exit 1, located errors), never as a violation of the mechanism.
    prepared = [prepare_logs(path, spec) for path in ([logs_path] if pair is None else list(pair))]

    # asked of the registry, not of the name: a linear learner (DP-VAPVI) releases one step's zCDP lattice
    # statistics; a learner with its own per-cell cap (DP-PBB) audits its first releases
    linear = mechanism in registry.names(family="linear")
    capped = mechanism in registry.names_with(lambda cls: "max_per_cell" in cls.options)
    if mechanism in ADAPTERS:
        if linear and noise == "rounded":
            raise UsageError(f"--noise rounded does not apply to --mechanism {mechanism}: DP-VAPVI always draws "
                             "exact discrete Gaussian noise on its fixed-point lattice. Remove --noise.")
        noise = noise or "exact"  # what `privaudit release` releases by default: the audit tests that
        # dp-vapvi keeps the GDP opt-in: its lattice is so fine (sigma >= 1e4 lattice steps) that the runner
        # proves the GDP test valid up to a total-variation share of alpha (DPVAPVIMechanism.gaussian_tv_per_run)
        if claim.kind == "gaussian" and noise == "exact" and not linear:
            raise UsageError("--claim-kind gaussian with --noise exact (the default): discrete Gaussian noise is "
                             "rho-zCDP but not sqrt(2 rho)-GDP (its trade-off curve lies below the Gaussian one "
                             "at lattice thresholds), so the GDP test could report a false violation. Use "
                             "--claim-kind generic (the default), or --noise rounded (continuous Gaussian noise) "
                             "for the GDP test.")
        if linear and claim.rho is None:
            raise UsageError(f"--mechanism {mechanism} needs a rho claim (--claim-rho R): its accounting is rho-zCDP.")
        fam, budget = builtin_budget(claim, release_mechanism, mechanism_rho, mechanism_epsilon)
        budget.setdefault("delta", claim.delta if "rho" in budget else None)  # rho: the delta it is reported at
        said = None
        if stationary is None and not linear:  # the one default rule of every command, said
            stationary, said = default_stationary()        # once the mechanism is built (its budget checked)
        try:
            mech = ADAPTERS[mechanism](spec, mechanism=fam, stationary=bool(stationary), noise=noise, **budget)
        except UsageError as e:  # the mechanism's `rho` / `epsilon` is the budget this command gave it
            raise UsageError(budget_in_flags(str(e), mechanism_rho is not None or mechanism_epsilon is not None)) \
                from None
        if said is not None:
            click.echo(as_flags(said), err=True)
        name = mechanism
        b = mech.budget
        runs_at = b.text + (
            " (--mechanism-rho / --mechanism-epsilon)" if mechanism_rho is not None or mechanism_epsilon is not None
            else " (the claim's budget)")
        click.echo(f"mechanism: {mechanism}, {fam} noise at {runs_at}", err=True)
        if capped and mech.view == "statistics":  # first releases: test their share of rho
            total = claim
            rho_total = total.rho if total.rho is not None else budget_mod.resolve_budget(
                epsilon=total.epsilon, delta=total.delta).rho
            claim = mech.audited_claim(total.delta, rho_total=rho_total, kind=total.kind)
            name = mech.describe() + f"; total claim rho={privacy_param(rho_total)}"
            click.echo(f"{mechanism}: auditing its noisy capped visit counts and start counts (gray-box) against "
                       f"their share of the claim, {guarantee_text(claim.to_dict())}; see docs/audit.md", err=True)
        if linear:  # the output is one step's statistics: test the accounting's share of rho
            total = claim
            claim = mech.audited_claim(claim.delta, rho_total=total.rho, kind=total.kind)
            name = mech.describe() + f"; total claim rho={privacy_param(total.rho)}"
            click.echo(f"{mechanism}: auditing the noisy statistics of step h=H-1 against their share of the claim, "
                       f"{guarantee_text(claim.to_dict())}; see docs/audit.md",
                       err=True)
    else:
        given = [opt for opt, v in (("--mechanism-rho", mechanism_rho), ("--mechanism-epsilon", mechanism_epsilon),
                                    ("--stationary/--per-step", stationary), ("--noise", noise),
                                    ("--release-mechanism", release_mechanism)) if v is not None]
        if given:
            raise UsageError(f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to the built-in "
                             f"mechanisms ({', '.join(ADAPTERS)}) only; {mechanism} is your code, which sets its "
                             "own noise and budget. Remove the option(s).")
        mech = FileMechanism(mechanism)  # its hooks honoured as from Python, and named
        name = mechanism
        say_hooks(mechanism, mech)
    score_fns = [("user:" + s.rpartition(":")[2], FileFunction(s, role="score")) for s in scores]
    if pair is not None:
        p = load_pair(*pair, spec=spec)
        logs = None
    else:
        p, logs = None, collect_or_raise(prepared[0].raw, logs_path)
        if canary is None:
            canary = default_canary(mech)
            why = ("default: units built from the spec that attain the declared "
                   + ("pooled sensitivity" if canary == "synthetic-repeat" else
                      "capped sensitivity (transitions spread over cells at the cap)" if capped
                      else "sensitivity")
                   if canary.startswith("synthetic") else "default")
        else:
            why = "--canary"
        shown = canary
        if linear and canary in ("rare", "repeat"):  # dp-vapvi aims its own (canary-linear)
            shown, why = "linear", f"{mechanism}'s canary aimed at its audited statistics; --canary random for a typical one"
        click.echo(f"canary: {shown} ({why})", err=True)
    design = "design" if hasattr(mech, "design_events") and not score_fns else None
    if said_trials:  # the audited claim (a learner's share of its total claim) sets the count
        n_trials, said_trials = resolve_trials(None, target_excess, target_fpr, claim, confidence)
        click.echo(said_trials, err=True)
    rep = run_audit(mech, logs, spec, claim=claim, pair=p, trials=n_trials, scores=score_fns, seed=seed, fixed=design,
                    settings=AuditSettings(confidence=confidence, n_jobs=jobs, mechanism_name=name, canary=canary))
    _finish(rep, out, plot, confidence, as_json)


def _search_audit(mechanism, search, claim, trials, said_trials, scores, seed, confidence, jobs, out, plot,
                  overwrite, as_json, given) -> None:
    """``--search``: a FILE.py:NAME mechanism audited on the pair an input search chooses (exits)."""
    if ".py:" not in mechanism:
        raise UsageError(f"--search needs --mechanism FILE.py:NAME (your mechanism over the searched inputs); "
                         f"{mechanism} reads trajectory logs (--logs or --pair).")
    extra = [o for o, v in given.items() if v is not None]
    if extra:
        raise UsageError(f"{', '.join(extra)} {'does' if len(extra) == 1 else 'do'} not apply with --search: the "
                         "inputs are the searched pairs. Remove the option(s).")
    code = [("--search", search.rpartition(":")[0] if ".py:" in search else None)]
    _check_outputs(out, plot, overwrite, _reads(None, None, None, mechanism, scores, None) + code)
    mech = FileMechanism(mechanism)
    say_hooks(mechanism, mech)
    pairs = search_pairs(search)
    if said_trials:
        click.echo(said_trials, err=True)
    click.echo(f"search: {len(pairs)} candidate pairs ({search})", err=True)
    score_fns = [("user:" + s.rpartition(":")[2], FileFunction(s, role="score")) for s in scores]
    rep = run_audit(mech, claim=claim, search=pairs, trials=trials, scores=score_fns, seed=seed,
                    settings=AuditSettings(confidence=confidence, n_jobs=jobs, mechanism_name=mechanism))
    _finish(rep, out, plot, confidence, as_json)


#: What --overwrite may replace: a report and a plot written by an earlier audit.
AUDIT_REPORT = json_output("an earlier audit report (a JSON file written by privaudit audit)",
                           lambda d: (d.get("software") or {}).get("name") == "privaudit" and "verdict" in d)
AUDIT_PLOT = png_output("an earlier audit plot (a PNG written by privaudit audit)", AUDIT_PLOT_MARK)


def _check_outputs(out, plot, overwrite, reads) -> None:
    """Refuse, before any run, an --out / --plot at one path, at a path the audit reads, existing (unless
    --overwrite and it is an earlier audit report / plot), or unwritable (``core.outputs.check_outputs``)."""
    check_outputs([("--out", out, AUDIT_REPORT), ("--plot", plot, AUDIT_PLOT)], reads, overwrite)


def _reads(logs_path, spec_path, pair, mechanism, scores, env_name) -> list[tuple[str, object]]:
    """The files the audit reads: logs, spec, the pair, user code (FILE.py of FILE.py:NAME), the MDP file."""
    code = [("--mechanism", mechanism.rpartition(":")[0] if ".py:" in mechanism else None)]
    code += [("--score", s.rpartition(":")[0]) for s in scores]
    return [("--logs", logs_path), ("--spec", spec_path), ("--env", env_name),
            *(("--pair", p) for p in (pair or ()))] + code


#: Said after the verdict, from the report's ``shareable`` field (docs/audit.md "Which reports may be shared").
NOT_SHAREABLE = "not shareable: {reason}. Keep the report (and the figure) with the private logs."
SHAREABLE = "shareable: {reason}."


def _finish(rep, out, plot, confidence, as_json) -> None:
    """Write the report (and plot), print the verdict and whether the report may be shared, exit 0 / 3."""
    with atomic_paths([out] + ([plot] if plot else [])) as tmps:  # both or neither: no report without its figure
        rep.write_json(tmps[0])
        if plot:
            rep.plot(tmps[1])
    claim = rep.data["claim"]
    lb = "n/a (gray-box)" if rep.epsilon_lower_bound is None else f"{rep.epsilon_lower_bound:.4g}"
    click.echo(f"{rep.verdict}: epsilon lower bound {lb} vs claimed {guarantee_text(claim)} "
               f"({rep.data['method']['test']} test, confidence {confidence}); report {out}", err=True)
    for m in rep.data["messages"]:
        click.echo(f"  {as_flags(m)}", err=True)  # library messages name parameters; here, the flags
    said = SHAREABLE if rep.data["shareable"] else NOT_SHAREABLE
    click.echo(as_flags(said.format(reason=rep.data["shareable_reason"])), err=True)
    if as_json:
        echo_json(rep.to_dict())
    raise SystemExit(rep.exit_code)
