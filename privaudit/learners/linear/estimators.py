"""PEVI, VAPVI and DP-VAPVI estimators (scikit-learn style: parameters in
``__init__``, ``fit`` returns self, fitted results end in ``_``).

Defaults and their provenance (docs/linear.md, "Constants and their provenance", "PEVI and VAPVI";
[D] our choice, [R] recalled from the paper, not checked against its text):

* lambda = 1 ([D]; the theorem needs 0 < lambda < kappa, but kappa = 0 for the
  seed's map, see ``synthetic_linear.coverage_kappa``);
* C = 1 ([D], "universal constant", value unreported);
* D: ``d_scale`` times the formula of ``privacy.d_constant`` (O~ constants 1).
  Default ``d_scale = 0``: with O~ constants 1 the term D/K exceeds H on
  the seed's instance for K < 2 530 even without noise (VAPVI: 2 H^3 sqrt(d)
  / K = 50 596 / K), and the noise terms (H^2 L / kappa, ...) are larger by
  orders of magnitude, which makes Q = 0 everywhere; the paper's
  simulations evidently used other values (not reported);
* PEVI: beta = c d H sqrt(log(2 d H K / xi)) with c = 1, xi = 0.05 ([R],
  Jin, Yang & Wang 2021), or an explicit ``beta``.
"""

from __future__ import annotations

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.learners.linear import privacy as _privacy
from privaudit.learners.linear.dp_vapvi import ExactStatistics, backward_pass, step_statistics
from privaudit.learners.linear.logs import plan_dp_vapvi
from privaudit.learners.linear.providers import DEFAULT_CHUNK_BYTES, FiniteFeatures
from privaudit.learners.policy import Policy
from privaudit.learners.policy_manifest import PolicyPrivacy
from privaudit.mdp.features import FeatureMap

_EXACT = ExactStatistics()


def _providers(data, fmap: FeatureMap | None, data_var, chunk_bytes: int):
    """(provider, provider_var): ``LinearData`` + ``FeatureMap`` become ``FiniteFeatures``; a provider passes."""
    if fmap is None:
        return data, data_var
    if data_var is not None and (data_var.H, data_var.S, data_var.A) != (data.H, data.S, data.A):
        raise UsageError("D and D' must share (H, S, A).")
    return (FiniteFeatures(data, fmap, chunk_bytes),
            None if data_var is None else FiniteFeatures(data_var, fmap, chunk_bytes))


class _LinearLearner:
    """One ``fit`` for the three learners: they differ only in what they supply to ``dp_vapvi.backward_pass``.

    A subclass sets ``algorithm`` and ``variance_aware`` and defines
    ``_penalty(provider)`` -> (scale, offset) and ``_statistics(provider, rng)``
    -> h -> Statistics (line 11's penalty and lines 4-10's release).
    """

    algorithm = "linear"
    variance_aware = True
    #: :class:`privaudit.core.registry.OfflineLearner` answers: the linear learners read the logs (rows and
    #: the spec's feature map); only DP-VAPVI is private.
    private = False
    reads = "logs"
    options: frozenset = frozenset()
    pipeline_output = None

    def fit(self, data, fmap: FeatureMap | None = None, *, rng: np.random.Generator | None = None,
            data_var=None):
        """Run the backward pass (Qiao & Wang 2023, Algorithm 2) and store the fitted attributes.

        Parameters
        ----------
        data : LinearData or provider
            D, aggregated logs (with ``fmap``), or a ``providers.FiniteFeatures`` /
            ``providers.RowFeatures`` (then ``fmap`` is None).
        fmap : FeatureMap, optional
            phi over the spec's (S, A).
        rng : numpy.random.Generator, optional
            DP-VAPVI's noise (required there; ignored by the non-private learners).
        data_var : LinearData or provider, optional
            D', the variance data (VAPVI, DP-VAPVI; refused by PEVI).

        Returns
        -------
        self
            With ``w_`` (H, d), ``Lambda_inv_`` (H, d, d), ``Q_`` (tuple of the per-step
            Q at the provider's points), ``offset_`` (H,), ``penalty_scale_``, and for a
            feature table ``table_`` (H, S, A) and ``features_``.

        Raises
        ------
        UsageError
            Bad parameters, data that does not match the map, or D' for PEVI.
        """
        if data_var is not None and not self.variance_aware:
            raise UsageError(f"{type(self).__name__} has no variance step: it takes no D' (data_var).")
        provider, provider_var = _providers(data, fmap, data_var, self.chunk_bytes)
        scale, offset = self._penalty(provider)
        stats = self._statistics(provider, rng)
        fit = backward_pass(provider, stats=stats, lam=self.lam, penalty_scale=scale, offset=offset,
                            variance_aware=self.variance_aware, provider_var=provider_var)
        self.w_, self.Lambda_inv_, self.Q_, self.offset_ = fit.w, fit.Lambda_inv, fit.Q, fit.offset
        self.penalty_scale_ = fit.penalty_scale
        table = provider.greedy_table(fit.Q)  # None for per-row features (no public states)
        if table is not None:
            self.table_, self.features_ = table, provider.manifest()
        return self

    def _statistics(self, provider, rng):
        return lambda h: _EXACT

    def get_params(self) -> dict:
        """The constructor parameters (JSON-ready)."""
        return {k: v for k, v in vars(self).items() if not k.endswith("_") and not k.startswith("_")}

    def to_policy(self, privacy: PolicyPrivacy | None = None, spec_hash: str | None = None) -> Policy:
        """The policy artifact: greedy table (H, S, A) plus extras ``w`` (H, d),
        ``Lambda_inv`` (H, d, d), ``penalty_offset`` (H,); parameters include the feature map.

        Raises
        ------
        UsageError
            If the estimator is not fitted on a feature table.
        """
        if not hasattr(self, "table_"):
            raise UsageError(f"{type(self).__name__} is not fitted on a feature table: call fit() first.")
        params = {**self.get_params(), "features": self.features_}
        return Policy(table=self.table_, algorithm=self.algorithm, parameters=params,
                      privacy=privacy or PolicyPrivacy(False), spec_hash=spec_hash,
                      extras={"w": self.w_, "Lambda_inv": self.Lambda_inv_, "penalty_offset": self.offset_})


class PEVI(_LinearLearner):
    """PEVI (Jin, Yang & Wang 2021), linear-MDP version (docs/linear.md, "PEVI and VAPVI"). Not private.

    Parameters
    ----------
    lam : float
        Ridge lambda (theorem: 1).
    beta : float, optional
        Penalty multiplier; default c d H sqrt(log(2 d H K / xi)).
    c, xi : float
        Constants of the default beta ([R]).
    chunk_bytes : int
        Memory cap of one chunk of the Q computation.
    """

    algorithm = "pevi"
    variance_aware = False

    def __init__(self, *, lam: float = 1.0, beta: float | None = None, c: float = 1.0, xi: float = 0.05,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES):
        self.lam, self.beta, self.c, self.xi, self.chunk_bytes = lam, beta, c, xi, chunk_bytes

    def _penalty(self, provider):
        """beta ||phi||_{Lambda^-1}, beta = c d H sqrt(log(2 d H K / xi)) with the data's K (not private)."""
        d, H, K = provider.dim, provider.H, max(provider.n_episodes, 1)
        beta = self.beta if self.beta is not None else self.c * d * H * np.sqrt(np.log(2 * d * H * K / self.xi))
        self.beta_ = float(beta)
        return float(beta), 0.0


class VAPVI(_LinearLearner):
    """VAPVI (Yin, Duan, Wang & Wang 2022): DP-VAPVI without noise (docs/linear.md, "PEVI and VAPVI"). Not private.

    Parameters
    ----------
    C : float
        Penalty constant (line 11).
    lam : float
        Ridge lambda.
    d_scale : float
        Multiple of the additive term 2 H^3 sqrt(d) / K (default 0, module docstring).
    chunk_bytes : int
        Memory cap of one chunk of the Q computation.
    """

    algorithm = "vapvi"

    def __init__(self, *, C: float = 1.0, lam: float = 1.0, d_scale: float = 0.0,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES):
        self.C, self.lam, self.d_scale, self.chunk_bytes = C, lam, d_scale, chunk_bytes

    def _penalty(self, provider):
        """C sqrt(d) ||phi||_{Lambda^-1} + d_scale 2 H^3 sqrt(d) / K (K of the data: not private)."""
        offset = self.d_scale * _privacy.d_constant(provider.H, provider.dim, None, None) / max(provider.n_episodes, 1)
        return self.C * np.sqrt(provider.dim), offset


class DPVAPVI(_LinearLearner):
    """DP-VAPVI (Qiao & Wang 2023, Algorithm 2): rho-zCDP under substitution of one privacy unit.

    Parameters
    ----------
    rho : float
        Total zCDP budget; each of the 5H statistics gets rho_0 = rho/(5H).
    C, lam, d_scale : float
        As in VAPVI; D = ``d_scale`` * ``privacy.d_constant`` (needs ``kappa`` when > 0).
    kappa : float, optional
        Public coverage constant for D (never computed from the logs).
    episodes_public : int, optional
        Public, declared number of episodes K for the D/K term (needed when d_scale > 0).
    delta_fail : float
        Failure probability in E and L (not the DP delta).
    c1, c2 : float
        GOE tail constants of E ([R], 1).
    k : int
        Most episodes per privacy unit (noise scales multiply by k).
    shift : float
        Multiple of the (E/2) I shift in K_1, K_2 (default 1, the paper's).
        The shift is data-independent, so any value keeps the guarantee; 0 is
        a diagnostic (K_i may then be indefinite; the eigenvalue floor at
        lambda keeps the inverses finite).
    chunk_bytes : int
        Memory cap of one chunk of the Q computation.

    Notes
    -----
    Noise is drawn fresh for every statistic and every step h from a child
    stream ``rng.spawn(H)[h]`` (a departure from Algorithm 2, line 1, which draws once;
    docs/linear.md, "Fresh noise per h"): the 5H
    draws are independent. The statistics are exact lattice points and the
    noise exact discrete Gaussian (``privacy.LatticeGaussian``), so the
    guarantee is exactly rho-zCDP with no float side channel. Privacy holds
    for any data given the bounds ||phi|| <= 1 (FeatureMap checks), r in
    [0, 1] and k episodes per unit (enforced upstream by contribution bounding).

    The D/K term needs K. The number of episodes in the logs is a fact about
    the private data (with k > 1 it even differs between neighbouring
    datasets), and the offset D/K would put it, exactly, into every Q value
    and into the policy's ``penalty_offset``. So K must be a public, declared
    number (``episodes_public``), never read off the data.
    """

    algorithm = "dp-vapvi"
    private = True
    pipeline_output = "the DP-VAPVI policy (its noisy statistics are not output)"
    #: Its share of the pipeline's budget: the rule ``linear_share`` (``core.registry.SHARE_RULES``).
    pipeline_share = "linear_share"
    #: What the ledger entry of its pipeline part adds.
    ledger_note = "5H releases"

    @classmethod
    def plan_event(cls, spec, budget, *, stationary: bool = False):
        """The privacy event of a fit on logs of ``spec`` at ``budget`` (public facts only):
        :func:`privaudit.learners.linear.logs.plan_dp_vapvi` with default parameters (``stationary``
        does not apply: one regression per step)."""
        return plan_dp_vapvi(spec, budget)

    @staticmethod
    def mechanism_text(spec) -> str:
        """How DP-VAPVI adds its noise (one sentence for the pipeline's summary)."""
        return (f"exact discrete Gaussian on fixed-point statistics: 5H = {5 * spec.horizon} statistics "
                "with fresh noise per step, rho/(5H) each (grid in the policy manifest)")

    def __init__(self, rho: float, *, C: float = 1.0, lam: float = 1.0, d_scale: float = 0.0,
                 kappa: float | None = None, episodes_public: int | None = None, delta_fail: float = 0.05,
                 c1: float = 1.0, c2: float = 1.0, k: int = 1, shift: float = 1.0,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES):
        self.rho, self.C, self.lam, self.d_scale, self.kappa = rho, C, lam, d_scale, kappa
        self.episodes_public = episodes_public
        self.delta_fail, self.c1, self.c2, self.k, self.chunk_bytes = delta_fail, c1, c2, k, chunk_bytes
        self.shift = shift

    def _penalty(self, provider):
        """C sqrt(d) ||phi||_{Lambda^-1} + d_scale D / K with a public K (``episodes_public``)."""
        H, d = provider.H, provider.dim
        offset = 0.0
        if self.d_scale:
            K = self.episodes_public
            if isinstance(K, bool) or not isinstance(K, (int, np.integer)) or K < 1:
                raise UsageError(
                    "`d_scale` > 0 needs `episodes_public`: a public, declared number of episodes K for the "
                    "D/K penalty (the logs' own episode count is private and would be released exactly). "
                    f"Found episodes_public={K!r}.")
            offset = self.d_scale * _privacy.d_constant(H, d, self.kappa, self.noise_scales(H, d)) / int(K)
        return self.C * np.sqrt(d), offset

    def _statistics(self, provider, rng):
        """h -> LatticeGaussian with step h's own stream ``rng.spawn(H)[h]`` (drawn when the step runs)."""
        if rng is None:
            raise UsageError("DP-VAPVI needs `rng` (a numpy Generator; OS entropy outside tests).")
        H, d = provider.H, provider.dim
        scales = self.noise_scales(H, d)
        self.scales_ = scales
        streams = rng.spawn(H)  # one independent child stream per step h
        return lambda h: _privacy.LatticeGaussian(scales, _privacy.draw_step_noise(streams[h], d, scales),
                                                  self.shift)

    def noise_scales(self, H: int, d: int) -> "_privacy.DPVAPVINoiseScales":
        """The public noise scales of a run over horizon H and dimension d (``privacy.noise_scales``).

        Raises
        ------
        UsageError
            If rho <= 0, lam <= 0, k < 1 or delta_fail outside (0, 1).
        """
        if not self.lam > 0:
            raise UsageError(f"`lam` must be > 0. Got {self.lam}.")
        return _privacy.noise_scales(self.rho, H, d, k=int(self.k), delta_fail=self.delta_fail,
                                     c1=self.c1, c2=self.c2)

    def step_release(self, data, fmap: FeatureMap | None, h: int, V_next: np.ndarray, *,
                     rng: np.random.Generator, data_var=None, n_runs: int | None = None) -> dict:
        """The 5 noisy statistics DP-VAPVI releases at step h, given V_{h+1}.

        Exactly what ``fit`` computes at step h (same ``privacy.draw_step_noise``,
        ``privacy.LatticeGaussian`` and ``dp_vapvi.step_statistics``), exposed for the
        auditor. At h = H-1, V_H = 0, so the release depends on the data of step
        H-1 only and not on earlier releases: it is a valid mechanism on its own,
        rho_0-zCDP per statistic (``privaudit.audit.mechanisms.dp_vapvi``).

        Parameters
        ----------
        data, fmap, data_var
            As for ``fit``.
        h : int
            0-based step.
        V_next : ndarray
            V_{h+1} at the points of the provider (public: post-processing of later
            steps' releases; zeros at h = H-1).
        rng : numpy.random.Generator
            This step's stream.
        n_runs : int, optional
            Independent runs stacked on axis 0.

        Returns
        -------
        dict
            ``gram`` (d, d), ``v2``, ``v`` (d,), ``weighted_gram`` (d, d),
            ``r_plus_v`` (d,) noisy, each an integer multiple of 2^-L
            (``privacy.LATTICE_BITS``: the public lambda I and (E/2) I are not
            added); ``sigma2`` (m,); leading n_runs axis when given.
        """
        provider, provider_var = _providers(data, fmap, data_var, self.chunk_bytes)
        scales = self.noise_scales(provider.H, provider.dim)
        z = _privacy.draw_step_noise(rng, provider.dim, scales, n_runs=n_runs)
        return self._step(provider, provider_var, h, V_next, _privacy.LatticeGaussian(scales, z, self.shift),
                          n_runs)

    def exact_step_statistics(self, data, fmap: FeatureMap | None, h: int, V_next: np.ndarray,
                              data_var=None) -> dict:
        """``step_release`` without noise: the exact lattice statistics (the gray-box view; never released).

        sigma^2 is computed from the exact statistics, so ``weighted_gram`` and
        ``r_plus_v`` equal the pre-noise values of a run only where sigma^2 does
        not depend on the noise: at h = H-1, where Var <= (H - h)^2 = 1 forces
        sigma^2 = 1.
        """
        provider, provider_var = _providers(data, fmap, data_var, self.chunk_bytes)
        scales = self.noise_scales(provider.H, provider.dim)
        return self._step(provider, provider_var, h, V_next, _privacy.LatticeGaussian(scales, None), None)

    def _step(self, provider, provider_var, h, V_next, stats, n_runs):
        if not 0 <= h < provider.H:
            raise UsageError(f"step h must lie in [0, {provider.H}). Got {h}.")
        pv = provider if provider_var is None else provider_var
        return step_statistics(provider.step(h), provider.phi(h), V_next, stats=stats, lam=self.lam,
                               cap=float(provider.H - h), variance_aware=True, step_var=pv.step(h),
                               Phi_var=pv.phi(h), n_runs=n_runs)
