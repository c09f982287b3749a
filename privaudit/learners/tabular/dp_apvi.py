"""DP-APVI (Qiao & Wang 2023, Algorithm 1): pessimistic value iteration on a DP release.

Everything here is post-processing of the release's noisy counts, so the
policy carries the release's guarantee and spends nothing more
(docs/learners.md, "Privacy of the count release"). The steps, numbered as in
docs/learners.md, "DP-APVI step by step":

1. E: the noise bound of the release, from its manifest
   (``privacy.mechanisms.noise_bound`` with the manifest's mechanism, noise
   scale and noise mode over n = 2 H S^2 A cells, 2 S^2 A when stationary).
   With sigma^2 = 2H/rho this is Qiao & Wang's E_rho = 4 sqrt(H log(4HS^2A/delta)/rho)
   (+1 for rounded noise); with Laplace it is E_eps (docs/learners.md, "The
   Laplace variant": our concrete choice, the paper gives E_eps = Õ(H/eps)). Using the
   manifest's actual scale makes k > 1 episodes per unit and stationary
   (pooled) releases get the right E. ι = log(H S A / delta).
3. n' = max(0, noisy count) for visits and transitions (eq. (1), the {.}^+).
4. Projection (eq. (2)): ``privacy.projection.project_counts`` per (h, s, a).
   Rows with n'_{h,s,a} <= E/2 are not projected: every feasible x has
   sum x <= n' + E/2 <= E, so the fallback applies whatever the projection
   returns (their ``visits_used_`` entry holds n', itself <= E).
5. P̃ = ñ_{s,a,s'} / ñ_{s,a} if ñ_{s,a} > E else uniform (eq. (3)).
6. Backward pessimistic value iteration with the Bernstein penalty
   C1 sqrt(Var_P̃(Ṽ) ι / (ñ - E)) + C2 S H E ι / ñ, fallback C H for ñ <= E,
   clip to [0, H - h] (0-based h), greedy policy
   (:func:`privaudit.learners.tabular.pessimism.pessimistic_value_iteration`).

Rewards (the paper assumes r known, footnote 3): a public next-state reward
r(s') (spec ``public_reward``, e.g. ICU-Sepsis' 1 on reaching 714) gives
r̃_h(s, a) = sum_s' P̃_h(s' | s, a) r(s'); otherwise the release's noisy reward
sums divided by ñ_h(s, a), clipped to [0, 1] (post-processing; used only on
pairs with ñ > E).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.learners.tabular.base import TabularLearnerBase
from privaudit.learners.tabular.pessimism import C1_DEFAULT, C2_DEFAULT, C_DEFAULT, FAILURE_PROB_DEFAULT, Penalty
from privaudit.learners.policy_manifest import PolicyPrivacy
from privaudit.release.manifest import ReleaseManifest
from privaudit.release.mechanism import count_noise_bound
from privaudit.data.counts_protocol import Counts
from privaudit.privacy.projection import project_counts


def release_noise_bound(manifest: ReleaseManifest, failure_prob: float) -> float:
    """E such that every noise draw of the release is within ±E/2 w.p. >= 1 - failure_prob.

    Parameters
    ----------
    manifest : ReleaseManifest
        The release's manifest (``privaudit.release.manifest``).
    failure_prob : float
        delta of the bound (the learner's failure probability).

    Returns
    -------
    float
        ``count_noise_bound`` of the manifest's mechanism, max(sigma_visits,
        sigma_transitions), domain and noise mode: the same function as
        ``TabularRelease.noise_bound`` (2 H S^2 A cells, 2 S^2 A if stationary).

    References
    ----------
    Qiao & Wang 2023, E_rho (docs/learners.md, "DP-APVI step by step", step 1); E_eps
    (docs/learners.md, "The Laplace variant").
    """
    d, fam = manifest.domain, manifest.families
    scale = max(float(fam["visits"].noise_scale), float(fam["transitions"].noise_scale))
    return count_noise_bound(manifest.mechanism, scale, d.H, d.S, d.A, d.stationary, manifest.noise, failure_prob)


def release_privacy(manifest: ReleaseManifest, release_path: str | None = None) -> PolicyPrivacy:
    """The policy's privacy record, inherited from the release manifest.

    ``private`` is false (with a note) when the release's ``rng`` is
    ``seeded-insecure``: the guarantee is kept for reference but does not
    hold against anyone who knows the seed.
    """
    g = manifest.envelope.updated(event=None)  # a policy fitted on a release adds no event of its own
    note = (None if manifest.private  # else the release's noise is reproducible from a seed
            else "seeded noise (rng seeded-insecure): not private against anyone who knows the seed")
    return PolicyPrivacy(manifest.private, g, None if release_path is None else str(release_path), note)


def _clip_and_project(E: float):
    """Steps 3-4: clip noisy counts at 0, then project rows with n' > E/2 (see module docstring)."""

    def prepare(n_sas: np.ndarray, n_sa: np.ndarray):
        n_sas = np.asarray(n_sas)
        n_sa = np.maximum(np.asarray(n_sa, dtype=np.float64), 0.0)     # eq. (1): {n + N}^+
        out_sas = np.zeros(n_sas.shape)                                 # rows with n' <= E/2 stay 0
        out_sa = n_sa.copy()
        rows = n_sa > E / 2.0
        if rows.any():                                                  # eq. (2), on those rows only
            x, tot = project_counts(np.maximum(n_sas[rows].astype(np.float64), 0.0), n_sa[rows], E)
            out_sas[rows] = x
            out_sa[rows] = tot
        return out_sas, out_sa

    return prepare


class DPAPVI(TabularLearnerBase):
    """Differentially private APVI (Qiao & Wang 2023, Algorithm 1) on released noisy counts.

    Parameters
    ----------
    failure_prob : float, default 0.05
        delta of the noise bound E and of ι = log(H S A / delta).
    C1, C2 : float, default sqrt(2), 16
        Penalty constants (the paper's values).
    C : float, default 2
        Fallback penalty C * H (any C > 1).
    penalty : {"bernstein", "hoeffding"}, default "bernstein"
        "hoeffding" gives Qiao & Wang (2023) section 3's Hoeffding-type variant.
    noise_bound : float or None
        E. None: derived from the release manifest (required when ``fit``
        gets bare counts).
    tie_break : {"visits", "first"}, default "visits"
        Among equal Q values (e.g. all 0), the action with the largest
        projected noisy count ñ (post-processing) or the lowest index.

    Attributes
    ----------
    See :class:`privaudit.learners.tabular.base.TabularLearnerBase`;
    ``visits_used_`` holds ñ_h(s, a) (projected), ``E_`` the noise bound.

    References
    ----------
    Qiao & Wang 2023, Offline RL with DP, Algorithm 1, eqs. (1)-(3), section 3
    (Hoeffding variant, Laplace variant); docs/learners.md, "DP-APVI step by step".
    """

    algorithm = "dp-apvi"
    private = True
    reads = "release"
    options = frozenset({"C1", "C2", "C"})
    #: ``privaudit pipeline`` fits it on its count release (post-processing: no share of its own).
    pipeline_share = 0
    _param_names = ("failure_prob", "C1", "C2", "C", "penalty", "noise_bound", "tie_break")

    def __init__(self, *, failure_prob: float = FAILURE_PROB_DEFAULT, C1: float = C1_DEFAULT,
                 C2: float = C2_DEFAULT, C: float = C_DEFAULT, penalty: str = "bernstein",
                 noise_bound: float | None = None, tie_break: str = "visits"):
        self._store_params(locals())

    def fit(self, data, reward=None, *, terminal_states: Sequence[int] | None = None,
            spec_hash: str | None = None, privacy: PolicyPrivacy | None = None,
            release_path: str | None = None, reward_range: Sequence[float] | None = None) -> "DPAPVI":
        """Learn from a release (or from noisy counts and an explicit E).

        Parameters
        ----------
        data : Release or Counts
            A loaded release (``privaudit.release.tabular.load_release``): E,
            terminal states, spec hash, public reward and privacy record come
            from its manifest. Or counts with ``noise_bound`` set in the
            constructor (experiments; feeding exact counts with E = 0 gives
            APVI exactly).
        reward : None or ndarray (S,), (S, A), (H, S, A)
            Overrides the release's reward: None uses the manifest's public
            next-state reward if any, else the released reward sums.
        terminal_states, spec_hash : optional
            Default to the release manifest's.
        privacy : PolicyPrivacy, optional
            The policy's privacy record (default: from the manifest, or
            ``{"private": False}`` for bare counts that are not noisy).
        release_path : str, optional
            Recorded in the policy's privacy record.
        reward_range : (r_min, r_max), optional
            The declared reward range (default: the manifest's, else [0, 1]);
            see :class:`privaudit.learners.tabular.pessimism.RewardFrame`.

        Returns
        -------
        DPAPVI
            ``self``, fitted (``policy_`` and the attributes above).

        Raises
        ------
        UsageError
            Bare counts without ``noise_bound``, bad constants or reward.
        """
        if hasattr(data, "manifest"):
            man = data.manifest
            counts = data  # a Release answers the counts protocol (reward sums in scaled units)
            E = (self.noise_bound if self.noise_bound is not None
                 else release_noise_bound(man, self.failure_prob))
            if terminal_states is None:
                terminal_states = list(man.domain.terminal_states)
            if spec_hash is None:
                spec_hash = man.spec_hash
            if privacy is None:
                privacy = release_privacy(man, release_path)
            if reward_range is None:
                reward_range = list(man.domain.reward_range)
            if reward is None and man.public_reward:
                pr = man.public_reward  # in declared units: scaled into [0, 1] as the released sums are
                lo, hi = (float(x) for x in (reward_range or (0.0, 1.0)))
                reward = np.zeros(counts.n_states)
                for k, v in pr["values"].items():
                    reward[int(k)] = float(v)
                reward = (np.clip(reward, lo, hi) - lo) / (hi - lo)  # as DomainSpec.public_reward_scaled
        elif isinstance(data, Counts):
            counts = data
            if self.noise_bound is None:
                raise UsageError("DPAPVI.fit on bare counts needs the noise bound E: set "
                                 "DPAPVI(noise_bound=E) (0 for exact counts).")
            E = float(self.noise_bound)
            if privacy is None:
                privacy = PolicyPrivacy.none("noisy counts given without a release manifest" if counts.noisy
                                             else "exact counts (E = 0)")
        else:
            raise UsageError(f"DPAPVI.fit needs a Release or counts (privaudit.data.counts_protocol.Counts). "
                             f"Got {type(data).__name__}.")
        if not (np.isfinite(E) and E >= 0):
            raise UsageError(f"noise bound E must be a finite number >= 0. Got {E}.")
        self._run(counts, reward, E=float(E), prepare=_clip_and_project(float(E)),
                  penalty=Penalty(self.penalty, self.C1, self.C2, self.C, self.failure_prob),
                  terminal_states=terminal_states or (), privacy=privacy, spec_hash=spec_hash,
                  reward_range=reward_range)
        return self
