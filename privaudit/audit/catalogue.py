"""A catalogue of small count-release mechanisms, correct and deliberately broken.

Each broken mechanism reproduces one bug class of AUDITING.md that reaches a
count release; each has a correct twin. The auditor must flag every broken
one and never flag a correct one (tests/audit/test_catalogue.py). All are
batched (``n_runs``) numpy mechanisms over visit counts n_h(s, a) (or reward
sums R_h(s, a)) of shape (H, S, A), computed with the library's own
bounding (``privaudit.data.bounding``), counting (``privaudit.stats.counts``)
and sensitivity / scale functions (``privaudit.privacy``) so that only the
named bug differs from the twin.

=====================  =========================================================  ==========
name                   what it does                                               bug class
=====================  =========================================================  ==========
gaussian               n + N(0, sigma^2), sigma = Delta_2 / sqrt(2 rho), rounded  correct
laplace                n + Lap(Delta_1 / eps), rounded                            correct
gaussian_rewards       R + N(0, sigma^2) (continuous float noise)                 correct
gaussian_small_noise   sigma halved (a wrong noise-scale formula)                 B6
gaussian_add_remove    Delta_2 = k sqrt(H): add/remove calibration for
                       substitution (2x under-counted change)                     B15 / B7
laplace_half_scale     b = Delta_1 / (2 eps): Laplace scale off by 2              B6 / B9
support_leak           noise only on observed cells, unobserved cells exactly 0  DESIGN "every cell"
domain_from_data       cells beyond the largest observed state are NaN            B10
no_k_bound             contribution bounding skipped (k not enforced)             B8
noise_reused_h         one noise draw reused for every step h                     ALGORITHMS 2.5/7.3
granular_rewards       reward sums + noise on a 1/64 grid (float granularity)     B1-B3
no_noise               the exact counts                                           -
=====================  =========================================================  ==========
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from privaudit.data.bounding import bound_contributions
from privaudit.errors import UsageError
from privaudit.privacy.mechanisms import gaussian_sigma, laplace_scale
from privaudit.privacy.sensitivity import count_sensitivity
from privaudit.spec import DomainSpec
from privaudit.stats.counts import reward_sums, visit_counts

BROKEN = ("gaussian_small_noise", "gaussian_add_remove", "laplace_half_scale", "support_leak",
          "domain_from_data", "no_k_bound", "noise_reused_h", "granular_rewards", "no_noise")
CORRECT = ("gaussian", "laplace", "gaussian_rewards")
#: the correct twin of each broken mechanism
TWIN = {"gaussian_small_noise": "gaussian", "gaussian_add_remove": "gaussian",
        "laplace_half_scale": "laplace", "support_leak": "gaussian", "domain_from_data": "gaussian",
        "no_k_bound": "gaussian", "noise_reused_h": "gaussian", "granular_rewards": "gaussian_rewards",
        "no_noise": "gaussian"}


@dataclass
class CatalogueMechanism:
    """One catalogue mechanism (batched; exposes the gray-box hooks).

    Parameters
    ----------
    name : str
        One of ``CORRECT`` or ``BROKEN``.
    spec : DomainSpec
    rho : float
        Budget of the Gaussian mechanisms (rho-zCDP claim).
    epsilon : float
        Budget of the Laplace mechanisms (pure eps-DP claim).
    """

    name: str
    spec: DomainSpec
    rho: float = 0.5
    epsilon: float = 1.0

    def __post_init__(self):
        if self.name not in CORRECT + BROKEN:
            raise UsageError(f"unknown catalogue mechanism {self.name!r}; known: {CORRECT + BROKEN}.")
        self.family = "rewards" if "rewards" in self.name else "visits"
        self.kind = "laplace" if self.name.startswith("laplace") else "gaussian"
        H, k = self.spec.horizon, self.spec.max_episodes_per_unit
        sens = count_sensitivity(H, k, False, self.family)
        self._declared = {"l1": sens.l1, "l2": sens.l2}
        if self.name == "gaussian_add_remove":
            self._declared = {"l1": k * H, "l2": k * np.sqrt(H)}  # the bug: one side of the change only
        if self.kind == "gaussian":
            self.scale = gaussian_sigma(self._declared["l2"], self.rho)
            if self.name == "gaussian_small_noise":
                self.scale /= 2
        else:
            self.scale = laplace_scale(sens.l1, self.epsilon)
            if self.name == "laplace_half_scale":
                self.scale /= 2

    @property
    def __name__(self) -> str:
        return f"catalogue:{self.name}"

    # gray-box hooks --------------------------------------------------------
    def exact_statistics(self, logs: pl.DataFrame) -> dict:
        lf = logs.lazy()
        if self.name != "no_k_bound":
            lf, _ = bound_contributions(lf, self.spec)
        if self.family == "rewards":
            return {"rewards": reward_sums(lf, self.spec)}
        return {"visits": visit_counts(lf, self.spec)}

    def declared_sensitivity(self) -> dict:
        return {self.family: dict(self._declared)}

    def noise(self) -> dict:
        return {self.family: {"mechanism": self.kind, "scale": self.scale}}

    # the mechanism ---------------------------------------------------------
    def __call__(self, logs: pl.DataFrame, rng: np.random.Generator, n_runs: int = 1) -> np.ndarray:
        """n_runs independent releases, shape (n_runs, H, S, A)."""
        x = self.exact_statistics(logs)[self.family].astype(np.float64)
        shape = (n_runs,) + x.shape
        if self.name == "no_noise":
            return np.broadcast_to(x, shape).copy()
        if self.name == "noise_reused_h":
            z = rng.normal(0.0, self.scale, (n_runs, 1) + x.shape[1:])
            return np.rint(x + z)
        if self.kind == "laplace":
            return np.rint(x + rng.laplace(0.0, self.scale, shape))
        z = rng.normal(0.0, self.scale, shape)
        if self.name == "gaussian_rewards":
            return x + z
        if self.name == "granular_rewards":
            return x + np.round(z * 64) / 64
        y = np.rint(x + z)
        if self.name == "support_leak":
            y = np.where(x > 0, y, 0.0)
        elif self.name == "domain_from_data":
            seen = int(logs["state"].max())
            y[:, :, seen + 1:, :] = np.nan
        return y

    def claim(self):
        """The claim this mechanism's documentation would make."""
        from privaudit.audit.model import Claim
        if self.kind == "laplace":
            return Claim.from_epsilon(self.epsilon, 0.0)
        return Claim.from_rho(self.rho, 1e-5, kind="gaussian")
