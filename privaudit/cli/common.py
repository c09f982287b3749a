"""Helpers shared by the CLI commands: error handling, JSON output, progress."""

from __future__ import annotations

import functools
import json
import os
import re
import sys
from typing import Any, Callable

import click

from privaudit.cli.numbers import FLOAT, FloatRange
from privaudit.core.errors import PrivauditError, Terminated, interrupted_import
from privaudit.core.formatting import privacy_param
from privaudit.core.outputs import kept_incomplete
from privaudit.core.jsonio import json_default
from privaudit.privacy.accounting import DEFAULT_REPORT_DELTA
from privaudit.privacy.ledger import charges_by_this_process
from privaudit.core.progress import progress_enabled
from privaudit.data.repairs import MAX_REPAIR_SHARE_DEFAULT


def as_flags(message: str) -> str:
    """A library message in the words of the running command: each `name` of a parameter becomes its flag.

    Library errors name the Python parameter in backticks (```rho` must be > 0``); the command's
    option whose name, or whose long flag without dashes, is that parameter replaces it
    (```--rho` must be > 0``); for an on/off flag pair, ```stationary`=False`` becomes its off flag
    (```--per-step```). Names the command does not have are left as they are.
    """
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return message
    for p in ctx.command.params:
        if not isinstance(p, click.Option):
            continue
        flag = max(p.opts, key=len)
        if p.is_flag and p.secondary_opts:  # an on/off pair: `name`=True / `name`=False are its two flags
            message = message.replace(f"`{p.name}`=True", f"`{flag}`")
            message = message.replace(f"`{p.name}`=False", f"`{max(p.secondary_opts, key=len)}`")
        for name in {p.name, flag.lstrip("-").replace("-", "_")}:
            message = message.replace(f"`{name}`", f"`{flag}`")
    return message


def handle_errors(fn: Callable) -> Callable:
    """Turn privaudit errors into a one-paragraph message on stderr and the
    error's exit code; never a traceback for bad input. A run that fails or
    is interrupted after charging a budget ledger says what it charged."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        mark = len(charges_by_this_process())

        def fail(message: str, code: int):
            click.echo(message, err=True)
            for path, e in charges_by_this_process(mark):
                if kept_incomplete(e.get("output"), e.get("run")):
                    retry = "its output is kept, marked incomplete: the same command again reuses it without charging"
                elif e.get("output") and os.path.exists(e["output"]):  # e.g. train's OUT.release: complete
                    retry = "its output is kept: use it rather than spending again"
                else:
                    retry = "a retry spends it again"
                click.echo(f"note: the budget ledger {path} was charged before this stopped, and that budget "
                           f"stays spent ({retry}): entry #{e['seq']}, rho={e['rho']}, "
                           f"run {e.get('run', '?')}, output {e.get('output', '?')}.", err=True)
            sys.exit(code)

        try:
            with progress_enabled(None):  # bars on stderr when it is a terminal
                return fn(*args, **kwargs)
        except PrivauditError as e:
            fail(f"error: {as_flags(str(e))}", e.exit_code)
        except FileExistsError as e:
            fail(f"error: {as_flags(str(e))}", 2)
        except BrokenPipeError:  # stdout closed early (`| head`): quiet, as a SIGPIPE-killed tool (141)
            try:
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
            except (OSError, ValueError):
                pass
            sys.exit(141)
        except OSError as e:  # e.g. the disk filled up or a permission changed during the run
            where = f"{e.filename}: " if e.filename else ""
            fail(f"error: {where}{e.strerror or e}; nothing was written (temporary outputs removed). "
                 "Check that the output location is writable and has free space.", 2)
        except MemoryError:
            fail("error: out of memory: the domain (S, A, H) or the logs are too large for this "
                 "machine; nothing was written (temporary outputs removed). Use a smaller domain "
                 "or a machine with more memory.", 1)
        except KeyboardInterrupt as e:  # a message: what the command kept (the pipeline's paid-for outputs)
            fail(f"interrupted: {str(e) or 'nothing was written (temporary outputs removed)'}", 130)
        except ImportError as e:  # Ctrl-C during a lazy import of a compiled module (matplotlib's, scipy's)
            if not interrupted_import(e):
                raise
            fail("interrupted: nothing was written (temporary outputs removed)", 130)
        except Terminated as e:  # SIGTERM, see privaudit.cli._terminated
            fail(f"terminated: {str(e) or 'nothing was written (temporary outputs removed)'}", 143)

    return wrapper


class PathArg(click.Path):
    """``click.Path`` that refuses an empty path.

    ``Path('')`` is the current folder: ``--out ''`` (an unset shell variable) was reported as
    "`.` already exists", ``--spec-out ''`` failed on a temporary file after the logs were written,
    and ``validate ''`` read every Parquet file under the current folder. An empty path is a usage
    error naming the option (exit 2) before any work.
    """

    def convert(self, value, param, ctx):
        if isinstance(value, str) and value == "":
            self.fail("the path is empty (an unset shell variable?); give a file or folder name.", param, ctx)
        return super().convert(value, param, ctx)


class Notices:
    """Notices on stderr held until the inputs are validated.

    :meth:`hold` keeps a notice (the step rule that applied, "this spends
    privacy budget", ...); :meth:`say` prints the held notices and then its
    message (the library speaks only once it has read and validated the
    inputs: give ``say`` as its ``echo``); :meth:`flush` prints what is still
    held (at the end of a command that succeeded). A command that fails
    earlier drops them, so an error on a missing file or a bad option is not
    preceded by unrelated chatter.
    """

    def __init__(self):
        self._held: list[str] = []

    def hold(self, text: str) -> None:
        self._held.append(text)

    def flush(self) -> None:
        held, self._held = self._held, []
        for text in held:
            click.echo(text, err=True)

    def say(self, text: str) -> None:
        self.flush()
        click.echo(text, err=True)


def echo_json(obj: Any) -> None:
    """Print ``obj`` as JSON on stdout (nothing else)."""
    click.echo(json.dumps(obj, indent=2, default=json_default))


def stderr_is_tty() -> bool:
    """Progress bars and chatter go to stderr only when it is a terminal."""
    return sys.stderr.isatty()


def engine_options(fn: Callable) -> Callable:
    """``--engine``, ``--master`` and ``--remote`` for a command whose counts may run on Spark
    (``release``, ``train``, ``pipeline``); :func:`spark_target` reads them."""
    fn = click.option("--remote", default=None, metavar="sc://HOST:PORT",
                      help="With --engine spark: a Spark Connect server to run on instead of --master (it reads "
                           "LOGS: a path its cluster sees).")(fn)
    fn = click.option("--master", default=None, help="With --engine spark: Spark master URL (default local[*]).")(fn)
    return click.option("--engine", type=click.Choice(["polars", "spark"]), default="polars", show_default=True,
                        help="Who validates, bounds and counts the logs: polars on this machine, or Apache "
                             "Spark (pip install 'privaudit[spark]'; LOGS may then be any path Spark reads). The "
                             "noise is added here either way: the same outputs.")(fn)


def repair_options(fn: Callable) -> Callable:
    """``--max-repair-share`` and ``--accept-repairs`` for a command that bounds and spends
    (``release``, ``train``, ``pipeline``): the data holder's stop before spending
    (``privaudit.data.repairs.RepairLimit``)."""
    fn = click.option("--accept-repairs", is_flag=True,
                      help="Go on even when contribution bounding changes more than --max-repair-share of the "
                           "logs (the repairs are still printed and written to the private log).")(fn)
    return click.option("--max-repair-share", type=FloatRange(0, 1), default=MAX_REPAIR_SHARE_DEFAULT,
                        show_default=True,
                        help="Stop before spending anything (exit 1, nothing written or charged) when "
                             "contribution bounding clips or drops a larger share of the logs: rewards clipped "
                             "into reward_range, steps beyond H, episodes above k, returns above return_bound "
                             "(a sign of a wrong declaration in the spec). A decision on private counts, "
                             "on this machine: recorded in no shareable output.")(fn)


#: The master URLs Spark itself parses (SparkContext.createTaskScheduler); anything else makes its JVM exit
#: at start-up, which reads as a Java problem.
_MASTER_URL = re.compile(r"local(\[\s*(\d+|\*)\s*(,\s*\d+\s*)?\])?|local-cluster\[[\d\s,]+\]"
                         r"|(spark|k8s|mesos)://\S+|yarn")


def spark_target(engine: str, master: str | None, remote: str | None) -> str | None:
    """The ``spark`` argument of the library from ``--engine``, ``--master`` and ``--remote``.

    Returns the master URL, the Spark Connect URL (``sc://HOST:PORT``) or
    None (the default session).

    Raises
    ------
    click.UsageError
        ``--master`` or ``--remote`` without ``--engine spark``, both given,
        or a ``--remote`` that is not an ``sc://`` URL (exit 2).
    """
    if master is not None and remote is not None:
        raise click.UsageError("give --master (a classic Spark master) or --remote (a Spark Connect server), "
                               "not both.")
    for flag, value in (("--master", master), ("--remote", remote)):
        if value is not None and engine != "spark":
            raise click.UsageError(f"{flag} needs --engine spark.")
    if remote is not None and not remote.startswith("sc://"):
        raise click.UsageError(f"--remote takes a Spark Connect URL sc://HOST:PORT. Found {remote!r}.")
    if master is not None and master.startswith("sc://"):
        raise click.UsageError(f"--master takes a Spark master URL (local[*], spark://HOST:7077, yarn); for a "
                               f"Spark Connect server use --remote {master}.")
    if master is not None and not _MASTER_URL.fullmatch(master.strip()):  # else "could not start its JVM: check
        raise click.UsageError(                                           # JAVA_HOME", after the checks' work
            f"--master {master!r} is not a Spark master URL: give local, local[N], local[*], "
            "local-cluster[N,C,M], spark://HOST:PORT, yarn, k8s://HOST:PORT or mesos://HOST:PORT.")
    return remote if remote is not None else master


#: The budget flags in words, the same in every command that spends or audits (docs/privacy.md, "Budget flags").
BUDGET_FORMS = (f"--rho R (R-zCDP, Gaussian noise; reported as (epsilon, delta)-DP at delta "
                f"{privacy_param(DEFAULT_REPORT_DELTA)}); --rho R --delta D (the same, reported at D); "
                "--epsilon E --delta D (an (E, D)-DP target, converted exactly to the largest rho giving it); "
                "--epsilon E alone (pure E-DP, Laplace noise)")


def budget_sentence(laplace: bool) -> str:
    """The help paragraph on a command's budget: the four forms, and whether ``--epsilon E`` alone applies."""
    return ("Budget (the same flags and meaning in every command; docs/privacy.md, \"Budget flags\"): "
            + BUDGET_FORMS + ("." if laplace else ", which this command refuses: its noise is Gaussian (zCDP) "
                              "only."))


def budget_options(laplace: bool, epsilon_note: str = "") -> Callable[[Callable], Callable]:
    """``--rho``, ``--epsilon`` and ``--delta`` with one meaning and one help in every command that spends.

    Parameters
    ----------
    laplace : bool
        Whether the command has a Laplace (pure epsilon-DP) mechanism for
        ``--epsilon E`` alone; without one the help says it is refused.
    epsilon_note : str
        A sentence the command adds to ``--epsilon``'s help (explore: ``inf``).
    """
    alone = ("Alone: pure epsilon-DP (Laplace noise)." if laplace
             else "Alone (pure epsilon-DP) refused: Gaussian noise only.")

    def decorate(fn: Callable) -> Callable:
        fn = click.option("--delta", type=FLOAT, default=None,
                          help="delta of an --epsilon target, or the delta --rho is reported at (default "
                               f"{privacy_param(DEFAULT_REPORT_DELTA)}).")(fn)
        fn = click.option("--epsilon", type=FLOAT, default=None,
                          help="With --delta: an (epsilon, delta)-DP target, converted exactly to rho (Gaussian). "
                               + alone + (" " + epsilon_note if epsilon_note else ""))(fn)
        return click.option("--rho", type=FLOAT, default=None,
                            help="rho-zCDP budget (Gaussian noise).")(fn)

    return decorate
