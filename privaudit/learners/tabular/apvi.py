"""APVI (non-private) and its Hoeffding variant, on exact counts.

APVI (Yin & Wang 2021) is DP-APVI with (ñ, P̃, E) := (n, P̂, 0), as Qiao &
Wang (2023), section 3, says ("If we replace ñ and P̃ with n and P̂, then our
DP-APVI (Algorithm 1) will degenerate to APVI"; docs/learners.md, "APVI"):

* P̂_h(s' | s, a) = n_h(s, a, s') / n_h(s, a) where n_h(s, a) > 0, uniform else;
* Γ_h(s, a) = C1 sqrt(Var_P̂(V̂_{h+1}) ι / n_h(s, a)) for n > 0 (the C2 term
  vanishes with E = 0), optionally + 16 H ι / n (Yin & Wang's lower-order
  term as we recall it, not checked against the paper, flag ``lower_order``); Γ = C H (so Q = 0) where n = 0;
* clip to [0, H - h] (0-based h), greedy policy.

These learners read exact counts: their policies are NOT private.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.learners.tabular.base import TabularLearnerBase
from privaudit.learners.tabular.pessimism import C1_DEFAULT, C2_DEFAULT, C_DEFAULT, FAILURE_PROB_DEFAULT, Penalty
from privaudit.learners.policy_manifest import PolicyPrivacy
from privaudit.data.counts_protocol import Counts

NON_PRIVATE = PolicyPrivacy.none("trained on exact counts of the logs; not differentially private")


def _identity(n_sas, n_sa):
    return np.asarray(n_sas, dtype=np.float64), np.asarray(n_sa, dtype=np.float64)


class APVI(TabularLearnerBase):
    """Adaptive Pessimistic Value Iteration on exact counts (Bernstein penalty).

    Parameters
    ----------
    failure_prob : float, default 0.05
        delta of ι = log(H S A / delta).
    C1 : float, default sqrt(2)
        Constant of the main penalty term.
    C : float, default 2
        Fallback penalty C * H for unseen pairs (C > 1).
    lower_order : bool, default False
        Add 16 H ι / n (Yin & Wang 2021, as recalled: docs/learners.md, "APVI").
    penalty : {"bernstein", "hoeffding"}
        Main penalty term (``APVIHoeffding`` sets "hoeffding").
    tie_break : {"visits", "first"}, default "visits"
        Among equal Q values, the most-visited action or the lowest index
        (``privaudit.learners.tabular.base.greedy_with_ties``).

    Attributes
    ----------
    See :class:`privaudit.learners.tabular.base.TabularLearnerBase`;
    ``visits_used_`` holds the exact n_h(s, a) and ``E_`` = 0.

    References
    ----------
    Yin & Wang 2021 (APVI); Qiao & Wang 2023, section 3 and footnote 6; docs/learners.md, "APVI".
    """

    algorithm = "apvi"
    options = frozenset({"C1", "C"})
    _param_names = ("failure_prob", "C1", "C", "lower_order", "penalty", "tie_break")

    def __init__(self, *, failure_prob: float = FAILURE_PROB_DEFAULT, C1: float = C1_DEFAULT,
                 C: float = C_DEFAULT, lower_order: bool = False, penalty: str = "bernstein",
                 tie_break: str = "visits"):
        self._store_params(locals())

    def fit(self, counts: Counts, reward=None, *, terminal_states: Sequence[int] = (),
            spec_hash: str | None = None, reward_range: Sequence[float] | None = None) -> "APVI":
        """Learn from exact counts.

        Parameters
        ----------
        counts : Counts
            Exact counts (``exact_counts``); per-step or pooled (stationary).
        reward : None or ndarray (S,), (S, A), (H, S, A)
            See :class:`privaudit.learners.tabular.base.StepModel`.
        terminal_states : sequence of int
            The spec's absorbing states (their Q is set to 0, their true value).
        spec_hash : str, optional
            Recorded in the policy.
        reward_range : (r_min, r_max), optional
            The spec's declared reward range (default [0, 1]): the rewards
            (scaled into [0, 1] by it) are planned with the terminal states
            worth reward 0 in these units, so the policy is the one for the
            declared reward (:class:`privaudit.learners.tabular.pessimism.RewardFrame`).

        Returns
        -------
        APVI
            ``self``, fitted (``policy_`` and the attributes above).

        Raises
        ------
        UsageError
            Noisy counts (use DPAPVI), bad reward shape or constants.
        """

        if counts.noisy:
            raise UsageError(f"{type(self).__name__} reads exact counts; these are noisy release counts. "
                             "Use DPAPVI (algo dp-apvi) on a release.")
        self._run(counts, reward, E=0.0, prepare=_identity,
                  penalty=Penalty(self.penalty, self.C1, C2_DEFAULT, self.C, self.failure_prob, self.lower_order),
                  terminal_states=terminal_states, privacy=NON_PRIVATE, spec_hash=spec_hash,
                  reward_range=reward_range)
        return self


class APVIHoeffding(APVI):
    """APVI with the Hoeffding-type penalty C1 H sqrt(ι / n) (Qiao & Wang 2023, section 3).

    Same parameters as :class:`APVI` (``penalty`` fixed to "hoeffding").
    """

    algorithm = "apvi-hoeffding"

    def __init__(self, *, failure_prob: float = FAILURE_PROB_DEFAULT, C1: float = C1_DEFAULT,
                 C: float = C_DEFAULT, lower_order: bool = False, tie_break: str = "visits"):
        super().__init__(failure_prob=failure_prob, C1=C1, C=C, lower_order=lower_order, penalty="hoeffding",
                         tie_break=tie_break)
