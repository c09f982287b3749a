"""Certainty-equivalent value iteration (VE): the naive, non-pessimistic baseline.

Plans in the empirical model P̂_h(s' | s, a) = n_h(s, a, s') / n_h(s, a) as if
it were the truth: Q_h = r_h + P̂_h V_{h+1}, V_h = max_a Q_h, no penalty.

Unseen pairs (n_h(s, a) = 0) have no model. VE gives them Q = 0 (as if the
episode ended with no further reward): it is the same value the pessimistic
learners give them, so the comparison with APVI isolates the penalty on
*seen* pairs, where certainty equivalence trusts one lucky transition as much
as a thousand. (Internally: the core with penalty "none", whose fallback
Γ = C H clips unseen pairs to 0; on seen pairs Q is never clipped, since
0 <= r + P̂ V <= H - h.)

NOT private: it reads exact counts.
"""

from __future__ import annotations

from typing import Sequence

from privaudit.core.errors import UsageError
from privaudit.learners.tabular.base import TabularLearnerBase
from privaudit.learners.tabular.apvi import NON_PRIVATE, _identity
from privaudit.learners.tabular.pessimism import Penalty
from privaudit.data.counts_protocol import Counts


class ValueIterationCE(TabularLearnerBase):
    """Certainty-equivalent value iteration on exact counts.

    Parameters
    ----------
    tie_break : {"visits", "first"}, default "visits"
        Among equal Q values, the most-visited action or the lowest index.

    Attributes
    ----------
    See :class:`privaudit.learners.tabular.base.TabularLearnerBase`
    (``penalty_`` is 0 on seen pairs; ``V_`` is the plug-in, *optimistic in
    expectation*, value estimate).
    """

    algorithm = "ve"
    _param_names = ("tie_break",)

    def __init__(self, *, tie_break: str = "visits"):
        self.tie_break = tie_break

    def fit(self, counts: Counts, reward=None, *, terminal_states: Sequence[int] = (),
            spec_hash: str | None = None, reward_range: Sequence[float] | None = None) -> "ValueIterationCE":
        """Plan in the empirical model. Same arguments as :meth:`APVI.fit`.

        Raises
        ------
        UsageError
            Noisy counts or a bad reward.
        """
        if counts.noisy:
            raise UsageError("ValueIterationCE reads exact counts; these are noisy release counts. "
                             "Use DPAPVI (algo dp-apvi) on a release.")
        self._run(counts, reward, E=0.0, prepare=_identity, penalty=Penalty("none"),
                  terminal_states=terminal_states, privacy=NON_PRIVATE, spec_hash=spec_hash,
                  reward_range=reward_range)
        return self
