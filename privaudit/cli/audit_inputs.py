"""``privaudit audit``'s input search (``--search``) and run-count guidance (``--target-excess``).

Kept apart from :mod:`privaudit.cli.audit` (the command and its checks): these
turn two options into what :func:`privaudit.audit.run_audit` takes, and name
the hooks of a ``FILE.py:NAME`` mechanism that the audit uses.
"""

from __future__ import annotations

import re

import click

from privaudit.audit.choice import MIN_TRIALS
from privaudit.audit.claim import Claim
from privaudit.audit.guidance import trials_needed
from privaudit.audit.pairs import NeighbouringPair
from privaudit.audit.protocol import FileFunction, FileMechanism, hooks_of
from privaudit.audit.search import candidate_pairs, statdp_pairs
from privaudit.core.errors import UsageError

#: ``--search patterns:N``: the StatDP patterns on N query answers.
PATTERNS_RE = re.compile(r"patterns:(\d+)")
#: Excesses over the claim (as shares of the claimed epsilon) quoted when neither --trials nor --target-excess is given.
QUOTED_SHARES = (1.0, 0.5, 0.2, 0.1)


def search_pairs(value: str) -> list[NeighbouringPair]:
    """The candidate pairs of ``--search``: ``patterns:N`` or ``FILE.py:NAME``.

    ``patterns:N``: :func:`privaudit.audit.search.statdp_pairs` (N query answers
    of sensitivity 1). ``FILE.py:NAME``: ``NAME()`` returns an iterable of pairs,
    each a ``NeighbouringPair`` (e.g. ``privaudit.audit.input_pair(d, d2,
    relation=...)``) or a ``(D, D')`` tuple; it is called behind the user-code
    boundary (an exception in it: exit 2, no traceback).

    Raises
    ------
    UsageError
        Neither form, N < 1, or what NAME returns is not a list of pairs.
    UserCodeError
        NAME cannot be imported or raises.
    """
    m = PATTERNS_RE.fullmatch(value)
    if m:
        return statdp_pairs(int(m.group(1)))
    if ".py:" not in value:
        raise UsageError(f"--search {value!r}: expected patterns:N (the StatDP patterns on N query answers) or "
                         "FILE.py:NAME (a function returning your candidate pairs).")
    gen = FileFunction(value)
    items = gen.guarded(lambda: list(gen.load()()), value)  # a generator runs user code as it is read
    try:
        return candidate_pairs(items)
    except UsageError as e:
        raise UsageError(f"--search {value}: {e}") from None


def resolve_trials(trials: int | None, target_excess: float | None, target_fpr: float | None, claim: Claim,
                   confidence: float) -> tuple[int, str | None]:
    """Runs per side from ``--trials``, or from ``--target-excess`` through ``guidance.trials_needed``.

    Returns
    -------
    (trials, note)
        ``note`` (for stderr): how the count was derived, or None for ``--trials``.

    Raises
    ------
    UsageError
        Both or neither given (the message then quotes the counts this claim
        needs for a few excesses), a target <= 0, or more runs than the
        guidance can compute.
    """
    if trials is not None and target_excess is not None:
        raise UsageError("give --trials N or --target-excess X, not both.")
    if target_fpr is not None and target_excess is None:
        raise UsageError("--target-fpr applies with --target-excess only.")
    eps = claim.epsilon
    if trials is None and target_excess is None:
        quoted = []
        for share in QUOTED_SHARES:
            try:
                quoted.append(f"{share * eps:.3g} -> {max(MIN_TRIALS, trials_needed(eps, share * eps, claim.delta, confidence)):,}")
            except UsageError:  # beyond the guidance's range: not quoted
                continue
        raise UsageError(
            "give --trials N (runs per side) or --target-excess X. --target-excess X takes the runs at which an "
            f"audit proves a bound above the claim about half the time when the true epsilon exceeds the claimed "
            f"{eps:.4g} by X on the most likely event of a Laplace mechanism (privaudit.audit.guidance.trials_needed); "
            f"for this claim, excess -> trials per side: {'; '.join(quoted)}. A rarer event needs more "
            "(--target-fpr P: its probability under D), and the attack must find it.")
    if trials is not None:
        return int(trials), None
    if not target_excess > 0:
        raise UsageError(f"--target-excess must be > 0. Found {target_excess}.")
    n = max(MIN_TRIALS, trials_needed(eps, target_excess, claim.delta, confidence, fpr=target_fpr))
    event = (f"an event of probability {target_fpr:g} under D" if target_fpr is not None
             else "a Laplace mechanism's most likely event")
    return n, (f"trials: {n} per side (--target-excess {target_excess:g}: an audit at this count proves a bound above "
               f"the claimed epsilon {eps:.4g} about half the time when the true epsilon is {eps + target_excess:.4g} on "
               f"{event}, if the attack finds it; a smaller excess or a rarer event can go unseen)")


def say_hooks(mechanism: str, mech: FileMechanism) -> None:
    """Name on stderr the hooks of a FILE.py:NAME mechanism that the audit uses (protocol.FileMechanism)."""
    used = hooks_of(mech.load())
    if used:
        click.echo(f"{mechanism}: using its hook(s) {', '.join(used)}"
                   + ("; the gray-box sensitivity check runs before any noisy run"
                      if {"exact_statistics", "declared_sensitivity"} <= set(used) else ""), err=True)
