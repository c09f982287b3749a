"""Does a domain spec describe a known MDP? Terminal states and the public reward, compared.

``pipeline --mdp`` evaluates the learned policies exactly on a known MDP,
while the learners plan with the spec's public facts: its terminal states
(absorbing, value 0) and, when declared, its public reward r(s'). A spec
whose facts are not the MDP's trains policies for another problem and the
evaluation then scores them on this one, without a word (a spec whose
public reward names state 713 instead of 714 gave ICU-Sepsis policies of
value 0.684 instead of 0.707). :func:`check_spec_matches_mdp` refuses such
a pair before any row is read.
"""

from __future__ import annotations

import numpy as np

from privaudit.core.errors import SpecError
from privaudit.mdp.tabular import TabularMDP
from privaudit.core.spec import DomainSpec

#: Most differing cells listed in the error message.
MAX_LISTED = 3


def check_spec_matches_mdp(spec: DomainSpec, mdp: TabularMDP, name: str = "") -> None:
    """Raise SpecError unless the spec's terminal states and public reward are the MDP's.

    Parameters
    ----------
    spec : DomainSpec
        The logs' spec (its S and A must be the MDP's; H is not compared: a
        named MDP may be built at another horizon).
    mdp : TabularMDP
        The known MDP (``--mdp``).
    name : str
        How the user named the MDP, for the message.

    Raises
    ------
    SpecError
        * ``$.n_states`` or ``$.n_actions`` is not the MDP's;
        * ``$.terminal_states`` is not the MDP's set of terminal states: a
          state the spec declares terminal but the MDP continues from (the
          learners give it value 0), or a terminal state of the MDP the spec
          omits;
        * ``$.public_reward`` is declared and, at some step h, non-terminal
          state s and action a, the MDP's expected reward r_h(s, a) differs
          from the declared reward's expectation sum_{s'} P_h(s' | s, a) r(s')
          by more than ``spec.public_reward_tolerance()``. The message names
          the first such cell, both values and how many cells differ.

    Notes
    -----
    The reward is compared in expectation over the next state because that
    is all values depend on: the learners' backups r(s') + V(s') and the
    exact evaluation's r_h(s, a) + P_h V agree for every policy exactly when
    the expectations agree at every non-terminal (h, s, a) (terminal rows are
    absorbing with reward 0 on both sides). So the check is exact for MDPs
    whose reward is r(s, a, s') (ICU-Sepsis) and meaningful for r_h(s, a)
    ones (random-tabular, synthetic-linear): a public next-state reward
    declared for them is refused unless its expectation is their reward.
    Without ``$.public_reward`` the rewards are private (the logs carry them)
    and only the terminal states are compared. Each step costs one product
    of P_h (sparse when P_h is, ``TabularMDP.transition_operator``) with
    r(s'); a stationary MDP is checked once.
    """
    label = f"`mdp` {name}" if name else "the MDP"
    if (spec.n_states, spec.n_actions) != (mdp.n_states, mdp.n_actions):
        raise SpecError(f"spec ($.n_states, $.n_actions) = ({spec.n_states}, {spec.n_actions}) but {label} has "
                        f"(S, A) = ({mdp.n_states}, {mdp.n_actions}); pass the spec of logs from this MDP.")
    declared, actual = set(spec.terminal_states), set(mdp.terminal_states)
    if declared != actual:
        extra, missing = sorted(declared - actual), sorted(actual - declared)
        parts = ([f"{extra} are terminal in the spec but not in the MDP (the learners would give them value 0)"]
                 if extra else []) + ([f"{missing} are terminal in the MDP but not declared"] if missing else [])
        raise SpecError(f"spec $.terminal_states {sorted(declared)} are not the terminal states of {label} "
                        f"({sorted(actual)}): " + "; ".join(parts) + ". Declare the MDP's terminal states, "
                        "or pass the MDP the logs come from (or no `mdp`).")
    r_pub = spec.public_reward_vector()
    if r_pub is None:
        return
    S, A = mdp.n_states, mdp.n_actions
    live = np.ones(S, dtype=bool)
    live[list(actual)] = False
    tol = spec.public_reward_tolerance()
    steps = 1 if mdp.stationary else mdp.horizon
    bad_total, first = 0, None
    for h in range(steps):  # one mat-vec per step, vectorized over (s, a, s')
        implied = np.asarray(mdp.transition_operator(h) @ r_pub).reshape(S, A)
        diff = np.abs(implied - mdp.expected_reward(h))[live]
        bad = diff > tol
        n = int(bad.sum())
        if n and first is None:
            s_live, a = np.nonzero(bad)
            s = np.flatnonzero(live)[s_live[:MAX_LISTED]]
            first = (h, s, a[:MAX_LISTED], mdp.expected_reward(h)[s, a[:MAX_LISTED]],
                     implied[s, a[:MAX_LISTED]])
        bad_total += n
    if bad_total:
        h, s, a, want, got = first
        step = f"h={h}, " if steps > 1 else ""  # a stationary MDP: the same at every step
        at = "; ".join(f"({step}s={si}, a={ai}): MDP {w:.6g}, declared {g:.6g}"
                       for si, ai, w, g in zip(s, a, want, got))
        cells = steps * int(live.sum()) * A
        values = spec.public_reward["values"]
        shown = f"{dict(list(values.items())[:5])}" + (" (and more)" if len(values) > 5 else "")
        raise SpecError(
            f"spec $.public_reward {shown} is not the reward of {label}: the expected "
            f"reward sum_s' P(s'|s,a) r(s') it implies differs from the MDP's r(s, a) by more than "
            f"{tol:g} in {bad_total:,} of {cells:,} non-terminal (step, state, action) cells, e.g. {at}. "
            "The learners would plan with the declared reward and be scored on the MDP's. Declare the MDP's "
            "reward in $.public_reward (or remove it to learn from the logged rewards), or pass the MDP the "
            "logs come from.")


__all__ = ["check_spec_matches_mdp"]
