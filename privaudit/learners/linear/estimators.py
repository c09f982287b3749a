"""PEVI, VAPVI and DP-VAPVI estimators (scikit-learn style: parameters in
``__init__``, ``fit`` returns self, fitted results end in ``_``).

Defaults and their provenance (ALGORITHMS.md 2.3, 2.6, 2.7):

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

from privaudit.errors import UsageError
from privaudit.learners.linear import privacy as _privacy
from privaudit.learners.linear.core import DEFAULT_CHUNK_BYTES, backward_pass, step_statistics
from privaudit.learners.linear.data import LinearData
from privaudit.learners.policy import Policy, greedy_table
from privaudit.mdp.features import FeatureMap


def _check_common(data: LinearData, fmap: FeatureMap, data_var: LinearData | None) -> None:
    if (data.S, data.A) != (fmap.n_states, fmap.n_actions):
        raise UsageError(f"feature map covers (S, A) = ({fmap.n_states}, {fmap.n_actions}) "
                         f"but the data has ({data.S}, {data.A}).")
    if data_var is not None and (data_var.H, data_var.S, data_var.A) != (data.H, data.S, data.A):
        raise UsageError("D and D' must share (H, S, A).")


class _LinearLearner:
    """Shared fitted-state handling; subclasses define ``algorithm`` and ``fit``."""

    algorithm = "linear"

    def _store(self, fit, fmap: FeatureMap) -> None:
        self.w_ = fit.w
        self.Lambda_inv_ = fit.Lambda_inv
        self.Q_ = fit.Q
        self.offset_ = fit.offset
        self.table_ = greedy_table(fit.Q)
        self.features_ = fmap.manifest()

    def get_params(self) -> dict:
        """The constructor parameters (JSON-ready)."""
        return {k: v for k, v in vars(self).items() if not k.endswith("_") and not k.startswith("_")}

    def to_policy(self, privacy: dict | None = None, spec_hash: str | None = None) -> Policy:
        """The policy artifact: greedy table (H, S, A) plus extras ``w`` (H, d),
        ``Lambda_inv`` (H, d, d), ``penalty_offset`` (H,); parameters include the feature map.

        Raises
        ------
        UsageError
            If the estimator is not fitted.
        """
        if not hasattr(self, "w_"):
            raise UsageError(f"{type(self).__name__} is not fitted: call fit() first.")
        params = {**self.get_params(), "features": self.features_}
        return Policy(table=self.table_, algorithm=self.algorithm, parameters=params,
                      privacy=privacy or {"private": False}, spec_hash=spec_hash,
                      extras={"w": self.w_, "Lambda_inv": self.Lambda_inv_, "penalty_offset": self.offset_})


class PEVI(_LinearLearner):
    """PEVI (Jin, Yang & Wang 2021), linear-MDP version (ALGORITHMS.md 2.7). Not private.

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

    def __init__(self, *, lam: float = 1.0, beta: float | None = None, c: float = 1.0, xi: float = 0.05,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES):
        self.lam, self.beta, self.c, self.xi, self.chunk_bytes = lam, beta, c, xi, chunk_bytes

    def fit(self, data: LinearData, fmap: FeatureMap) -> "PEVI":
        """Run PEVI on the aggregated logs; sets ``w_``, ``Lambda_inv_``, ``Q_``, ``table_``."""
        _check_common(data, fmap, None)
        d, H, K = fmap.dim, data.H, max(data.n_episodes, 1)
        beta = self.beta if self.beta is not None else self.c * d * H * np.sqrt(np.log(2 * d * H * K / self.xi))
        self.beta_ = float(beta)
        fit = backward_pass(data, fmap, lam=self.lam, penalty_scale=beta, offset=0.0, variance_aware=False,
                            chunk_bytes=self.chunk_bytes)
        self._store(fit, fmap)
        return self


class VAPVI(_LinearLearner):
    """VAPVI (Yin, Duan, Wang & Wang 2022): DP-VAPVI without noise (ALGORITHMS.md 2.6). Not private.

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

    def fit(self, data: LinearData, fmap: FeatureMap, data_var: LinearData | None = None) -> "VAPVI":
        """Run VAPVI on D (and D' for the variance when given)."""
        _check_common(data, fmap, data_var)
        offset = self.d_scale * _privacy.d_constant(data.H, fmap.dim, None, None) / max(data.n_episodes, 1)
        fit = backward_pass(data, fmap, lam=self.lam, penalty_scale=self.C * np.sqrt(fmap.dim), offset=offset,
                            variance_aware=True, data_var=data_var, chunk_bytes=self.chunk_bytes)
        self._store(fit, fmap)
        return self


class DPVAPVI(_LinearLearner):
    """DP-VAPVI (seed 000 Algorithm 2): rho-zCDP under substitution of one privacy unit.

    Parameters
    ----------
    rho : float
        Total zCDP budget; each of the 5H statistics gets rho_0 = rho/(5H).
    C, lam, d_scale : float
        As in VAPVI; D = ``d_scale`` * ``privacy.d_constant`` (needs ``kappa`` when > 0).
    kappa : float, optional
        Public coverage constant for D (never computed from the logs).
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
    stream ``rng.spawn(H)[h]`` (ALGORITHMS.md 2.5 "noise per h"): the 5H
    draws are independent. Privacy holds for any data given the bounds
    ||phi|| <= 1 (FeatureMap checks), r in [0, 1] and k episodes per unit
    (enforced upstream by contribution bounding).
    """

    algorithm = "dp-vapvi"

    def __init__(self, rho: float, *, C: float = 1.0, lam: float = 1.0, d_scale: float = 0.0,
                 kappa: float | None = None, episodes_public: int | None = None, delta_fail: float = 0.05,
                 c1: float = 1.0, c2: float = 1.0, k: int = 1, shift: float = 1.0,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES):
        self.rho, self.C, self.lam, self.d_scale, self.kappa = rho, C, lam, d_scale, kappa
        self.episodes_public = episodes_public
        self.delta_fail, self.c1, self.c2, self.k, self.chunk_bytes = delta_fail, c1, c2, k, chunk_bytes
        self.shift = shift

    def fit(self, data: LinearData, fmap: FeatureMap, *, rng: np.random.Generator,
            data_var: LinearData | None = None) -> "DPVAPVI":
        """Run DP-VAPVI; the released object is the fitted policy (noisy statistics stay internal).

        Raises
        ------
        UsageError
            If rho <= 0, lam <= 0, the data does not match the map, or
            d_scale > 0 without a public kappa and a public ``episodes_public``.

        Notes
        -----
        The D/K term needs K. The number of episodes in the logs is a fact
        about the private data (with k > 1 it even differs between
        neighbouring datasets), and the offset D/K would put it, exactly, into
        every Q value and into the policy's ``penalty_offset``. So K must be a
        public, declared number (``episodes_public``), never read off the data.
        """
        _check_common(data, fmap, data_var)
        H, d = data.H, fmap.dim
        scales = self.noise_scales(H, d)
        offset = 0.0
        if self.d_scale:
            K = self.episodes_public
            if isinstance(K, bool) or not isinstance(K, (int, np.integer)) or K < 1:
                raise UsageError(
                    "`d_scale` > 0 needs `episodes_public`: a public, declared number of episodes K for the "
                    "D/K penalty (the logs' own episode count is private and would be released exactly). "
                    f"Found episodes_public={K!r}.")
            offset = self.d_scale * _privacy.d_constant(H, d, self.kappa, scales) / int(K)
        streams = rng.spawn(H)  # one independent child stream per step h

        def noise(h: int) -> dict:
            return _privacy.draw_step_noise(streams[h], d, scales, shift=self.shift)  # same draw as step_release

        fit = backward_pass(data, fmap, lam=self.lam, penalty_scale=self.C * np.sqrt(d), offset=offset,
                            variance_aware=True, data_var=data_var, noise=noise, chunk_bytes=self.chunk_bytes)
        self.scales_ = scales
        self._store(fit, fmap)
        return self

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

    def step_release(self, data: LinearData, fmap: FeatureMap, h: int, V_next: np.ndarray, *,
                     rng: np.random.Generator, data_var: LinearData | None = None,
                     n_runs: int | None = None) -> dict:
        """The 5 noisy statistics DP-VAPVI releases at step h, given V_{h+1}.

        Exactly what ``fit`` computes at step h (same ``privacy.draw_step_noise``
        and ``core.step_statistics``), exposed for the auditor. At h = H-1,
        V_H = 0, so the release depends on the data of step H-1 only and not on
        earlier releases: it is a valid mechanism on its own, rho_0-zCDP per
        statistic (``privaudit.audit.adapters.DPVAPVIMechanism``).

        Parameters
        ----------
        data, fmap, data_var
            As for ``fit``.
        h : int
            0-based step.
        V_next : ndarray, shape (S,)
            V_{h+1} (public: post-processing of later steps' releases; zeros at h = H-1).
        rng : numpy.random.Generator
            This step's stream.
        n_runs : int, optional
            Independent runs stacked on axis 0.

        Returns
        -------
        dict
            ``gram`` (d, d), ``v2``, ``v`` (d,), ``weighted_gram`` (d, d),
            ``r_plus_v`` (d,) noisy (K_i include the (E/2) I shift; the public
            lambda I is not added), ``sigma2`` (m,); leading n_runs axis when given.
        """
        _check_common(data, fmap, data_var)
        scales = self.noise_scales(data.H, fmap.dim)
        z = _privacy.draw_step_noise(rng, fmap.dim, scales, shift=self.shift, n_runs=n_runs)
        return self._statistics(data, fmap, h, V_next, data_var, z)

    def exact_step_statistics(self, data: LinearData, fmap: FeatureMap, h: int, V_next: np.ndarray,
                              data_var: LinearData | None = None) -> dict:
        """``step_release`` without noise (the gray-box view; never released).

        sigma^2 is computed from the exact statistics, so ``weighted_gram`` and
        ``r_plus_v`` equal the pre-noise values of a run only where sigma^2 does
        not depend on the noise: at h = H-1, where Var <= (H - h)^2 = 1 forces
        sigma^2 = 1.
        """
        _check_common(data, fmap, data_var)
        return self._statistics(data, fmap, h, V_next, data_var, None)

    def _statistics(self, data, fmap, h, V_next, data_var, z):
        if not 0 <= h < data.H:
            raise UsageError(f"step h must lie in [0, {data.H}). Got {h}.")
        st = data.steps[h]
        sv = (data if data_var is None else data_var).steps[h]
        return step_statistics(st, fmap.phi(st.s, st.a), np.asarray(V_next, dtype=np.float64), lam=self.lam,
                               cap=float(data.H - h), variance_aware=True, step_var=sv,
                               Phi_var=fmap.phi(sv.s, sv.a), noise=z)
