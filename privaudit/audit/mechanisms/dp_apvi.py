"""DP-APVI end to end as an audit mechanism.

DP-APVI. Each run draws a whole release over the declared domain (every
visit and transition cell, exactly as ``release_logs`` would), fits
:class:`privaudit.learners.tabular.dp_apvi.DPAPVI` on it and outputs the greedy
policy's action table pi_h(s), shape (H, S). This costs one full release per
run: practical for small domains, minutes per hundred runs at the ICU-Sepsis
shape.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from privaudit.audit.mechanisms.library import LibraryStatistics
from privaudit.core.errors import UsageError
from privaudit.learners.tabular.counts import TabularCounts
from privaudit.learners.tabular.dp_apvi import DPAPVI


class DPAPVIMechanism(LibraryStatistics):
    """DP-APVI end to end: a full release per run, then the learner; output pi_h(s).

    Parameters
    ----------
    spec : DomainSpec
    rho, epsilon, delta, mechanism, stationary
        The release's budget (as ``privaudit release``).
    noise : {"exact", "rounded"}
        As for :class:`ReleaseMechanism` (default ``exact``; ``rounded`` only
        for the GDP opt-in).
    learner_params : dict, optional
        Passed to the learner class (:attr:`learner_class`).

    Notes
    -----
    Output: int64 array (H, S), the greedy action at each (h, s). Not batched
    (runs are spread over processes by the auditor).
    """

    name = "dp-apvi"
    #: The learner fitted on each release: a learner that post-processes a release (``reads = "release"``) is
    #: audited by a subclass that sets ``name`` and ``learner_class`` (docs/learners.md, "Adding a learner").
    learner_class = DPAPVI

    def __init__(self, spec, *, learner_params: dict | None = None, **kw):
        super().__init__(spec, **kw)
        self.learner_params = dict(learner_params or {})
        self.exact: dict[str, dict] = {}

    def prepare(self, d: pl.DataFrame, d_prime: pl.DataFrame) -> "DPAPVIMechanism":
        for key, logs in (("d", d), ("d_prime", d_prime)):
            frame = self.bounded_frame(logs)
            fams = self.sa_families(frame)
            fams["transitions"] = np.stack([s for _, s in self.transition_slices(frame)])
            self.exact[key] = fams
        self.E = self.release.noise_bound(self.learner_params.get("failure_prob", 0.05))
        self.bind(d, d_prime)
        return self

    def exact_statistics(self, logs: pl.DataFrame) -> dict:
        return {f: v for f, v in self.exact[self.which(logs)].items()}

    def __call__(self, logs: pl.DataFrame, rng: np.random.Generator) -> np.ndarray:
        if not self.exact:
            raise UsageError("DPAPVIMechanism: call prepare(d, d_prime) before running it.")
        ex = self.exact[self.which(logs)]
        rel = self.release
        st = rel.streams(rng)  # the same child streams as TabularRelease.apply
        visits = rel.noise_family("visits", ex["visits"], rng=st["visits"])
        trans = rel.noise_family("transitions", ex["transitions"], rng=st["transitions"])
        rsum = None
        if "rewards" in ex:
            rsum = rel.noise_family("rewards", ex["rewards"], rng=st["rewards"]) / rel.families["rewards"].quantum
        counts = TabularCounts.from_arrays(visits if not self.stationary else visits, trans if not self.stationary
                                           else trans[0], horizon=self.spec.H, reward_sums=rsum, noisy=True)
        learner = self.learner_class(noise_bound=self.E, **self.learner_params)
        learner.fit(counts, self.spec.public_reward_scaled(), terminal_states=self.spec.terminal_states,
                    reward_range=self.spec.reward_range)
        return np.argmax(learner.policy_.table, axis=-1).astype(np.int64)

    def attack_scores(self, pair) -> list:
        """"The policy acts as the canary did": number of canary steps (h, s_h)
        where pi_h(s_h) equals the canary's action a_h."""
        steps = (pair.description.get("canary") or {}).get("steps")
        if not steps:
            return []
        h = np.array([s["h"] for s in steps])
        s_ = np.array([s["state"] for s in steps])
        a = np.array([s["action"] for s in steps])

        def canary_actions(out, h=h, s_=s_, a=a):
            return (out[:, h, s_] == a).sum(axis=1).astype(np.float64)
        return [("policy_follows_canary", canary_actions)]
