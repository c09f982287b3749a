"""A catalogue of small count-release mechanisms, correct and deliberately broken.

Each broken mechanism reproduces one known class of DP bug that reaches a
count release; each has a correct twin. The auditor must flag every broken
one and never flag a correct one (tests/audit/mechanisms/test_catalogue.py). All are
batched (``n_runs``) numpy mechanisms over visit counts n_h(s, a) (or reward
sums R_h(s, a)) of shape (H, S, A), computed with the library's own
bounding (``privaudit.data.bounding``), counting (``privaudit.data.counts``)
and sensitivity / scale functions (``privaudit.privacy``) so that only the
named bug differs from the twin.

=====================  =========================================================  ==========
name                   what it does                                               bug class
=====================  =========================================================  ==========
gaussian               n + N(0, sigma^2), sigma = Delta_2 / sqrt(2 rho), rounded  correct
laplace                n + Lap(Delta_1 / eps), rounded                            correct
gaussian_rewards       R + N(0, sigma^2), snapped to a 2^-10 grid                 correct
discrete_gaussian      n + N_Z(0, sigma^2) exact (privaudit's CKS sampler),
                       claimed as rho (generic test)                              correct
discrete_laplace       n + exact discrete Laplace(Delta_1 / eps)                  correct
gaussian_small_noise   sigma halved (a wrong noise-scale formula)                 noise scale
gaussian_add_remove    Delta_2 = k sqrt(H): add/remove calibration for
                       substitution (2x under-counted change)                     neighbour relation
laplace_half_scale     b = Delta_1 / (2 eps): Laplace scale off by 2              noise scale
support_leak           noise only on observed cells, unobserved cells exactly 0  domain: every cell gets noise
domain_from_data       cells beyond the largest observed state are NaN            domain from the data
no_k_bound             contribution bounding skipped (k not enforced)             contribution bound
noise_reused_h         one noise draw reused for every step h                     noise shared across h
granular_rewards       reward sums + noise on a 1/64 grid (float granularity)     float granularity
float_gaussian         n + rng.normal(0, sigma) as float64, claimed (1, 1e-5)     float side channel
float_laplace          n + rng.laplace(0, b) as float64, claimed eps = 1          float side channel
float_rewards          R + rng.normal(0, sigma) as float64 (not snapped)          float side channel
no_noise               the exact counts                                           -
=====================  =========================================================  ==========

The float mechanisms are the textbook releases whose low-order bits carry the
count (Mironov 2012; Jin et al. 2022): the auditor's known-sampler scores
(:mod:`privaudit.audit.float_attacks`) flag them. ``gaussian_rewards`` rounds the
same float release to a 2^-10 grid, far coarser than the float spacing of the
outputs, which removes that channel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from privaudit.data.bounding import bound_contributions
from privaudit.core.errors import UsageError
from privaudit.audit.bounds import gdp_mu_from_eps
from privaudit.audit.claim import Claim
from privaudit.audit.explicit_pairs import check_neighbours
from privaudit.audit.pairs import NeighbouringPair
from privaudit.privacy.mechanisms import add_noise
from privaudit.privacy.noise import noise_family
from privaudit.privacy.sensitivity import count_sensitivity
from privaudit.core.spec import DomainSpec
from privaudit.data.counts import reward_sums, visit_counts

BROKEN = ("gaussian_small_noise", "gaussian_add_remove", "laplace_half_scale", "support_leak",
          "domain_from_data", "no_k_bound", "noise_reused_h", "granular_rewards", "float_gaussian",
          "float_laplace", "float_rewards", "no_noise")
CORRECT = ("gaussian", "laplace", "gaussian_rewards", "discrete_gaussian", "discrete_laplace")
#: Grid of the correct float reward release (a power of two: snapping is exact in float64).
REWARD_GRID = 2.0 ** -10
#: the correct twin of each broken mechanism
TWIN = {"gaussian_small_noise": "gaussian", "gaussian_add_remove": "gaussian",
        "laplace_half_scale": "laplace", "support_leak": "gaussian", "domain_from_data": "gaussian",
        "no_k_bound": "gaussian", "noise_reused_h": "gaussian", "granular_rewards": "gaussian_rewards",
        "float_gaussian": "gaussian", "float_laplace": "laplace", "float_rewards": "gaussian_rewards",
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
        self.kind = "laplace" if "laplace" in self.name else "gaussian"
        if self.name == "float_gaussian":  # claimed (1, 1e-5)-DP by the analytic Gaussian calibration
            self.rho = gdp_mu_from_eps(1.0, 1e-5) ** 2 / 2
        H, k = self.spec.horizon, self.spec.max_episodes_per_unit
        sens = count_sensitivity(H, k, False, self.family)
        self._declared = {"l1": sens.l1, "l2": sens.l2}
        if self.name == "gaussian_add_remove":
            self._declared = {"l1": k * H, "l2": k * np.sqrt(H)}  # the bug: one side of the change only
        fam = noise_family(self.kind)  # calibrated to the declared sensitivity in the family's norm
        self.scale = fam.calibrate(self._declared[fam.norm], getattr(self, fam.budget_unit))
        if self.name in ("gaussian_small_noise", "laplace_half_scale"):
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
        if self.name.startswith("discrete_"):
            xi = np.broadcast_to(x.astype(np.int64), shape).copy()
            return add_noise(xi, mechanism=self.kind, scale=self.scale, rng=rng, noise="exact").astype(np.float64)
        if self.name == "float_laplace":
            return x + rng.laplace(0.0, self.scale, shape)
        if self.kind == "laplace":
            return np.rint(x + rng.laplace(0.0, self.scale, shape))
        z = rng.normal(0.0, self.scale, shape)
        if self.name in ("float_gaussian", "float_rewards"):
            return x + z
        if self.name == "gaussian_rewards":
            return np.rint((x + z) / REWARD_GRID) * REWARD_GRID
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
        """The claim this mechanism's documentation would make.

        Laplace: pure eps. ``float_gaussian``: (1, 1e-5), generic. The exact
        discrete Gaussian: rho-zCDP, generic test (it is not sqrt(2 rho)-GDP).
        The other Gaussian ones (continuous Gaussian noise, rounded or
        snapped, or float): rho-zCDP with the GDP opt-in, which is valid for
        them as a post-processing of the Gaussian mechanism (for the float
        ones, only up to the float side channel the audit must find).
        """
        if self.kind == "laplace":
            return Claim.from_epsilon(self.epsilon, 0.0)
        if self.name == "float_gaussian":
            return Claim.from_epsilon(1.0, 1e-5)
        return Claim.from_rho(self.rho, 1e-5, kind="generic" if self.name == "discrete_gaussian" else "gaussian")


# --------------------------------------------------------------------------- claim kinds
#: Correct mechanisms whose rho claim is true but which are not sqrt(2 rho)-GDP: the GDP test
#: would call them broken (issue 14); the default generic test must not.
CLAIM_KIND = ("discrete_gaussian_rho", "randomized_response_rho", "laplace_rho")


def scalar_pair() -> "NeighbouringPair":
    """D: one unit whose single step is in state 0; D': in state 1 (a substitution).

    The statistic of :class:`ClaimKindMechanism` (rows in state 1) is 0 on D
    and 1 on D': sensitivity 1 under substitution.
    """

    def one(state):
        return pl.DataFrame({"episode_id": [0], "step": [0], "state": [state], "action": [0], "reward": [0.0],
                             "next_state": [state], "unit_id": [0]})
    d, d_prime = one(0), one(1)
    return NeighbouringPair(d, d_prime, check_neighbours(d, d_prime))


@dataclass
class ClaimKindMechanism:
    """A one-count mechanism (sensitivity 1) whose rho claim holds but which is not GDP.

    ``discrete_gaussian_rho``: n + N_Z(0, 1) (privaudit's exact sampler),
    claimed rho = 0.5 (CKS 2020, Thm 14: exact 0.5-zCDP; epsilon 4.4996 at
    delta 1e-6). ``randomized_response_rho``: the bit n flipped with
    probability 1 / (1 + e) (pure 1-DP, hence 0.5-zCDP), claimed rho = 0.5.
    ``laplace_rho``: rint(n + Lap(2)) (pure 0.5-DP, hence 0.125-zCDP), claimed
    rho = 0.125. Batched; output shape (n_runs, 1).
    """

    name: str

    def __post_init__(self):
        if self.name not in CLAIM_KIND:
            raise UsageError(f"unknown claim-kind mechanism {self.name!r}; known: {CLAIM_KIND}.")

    @property
    def __name__(self) -> str:
        return f"claim-kind:{self.name}"

    def __call__(self, logs: pl.DataFrame, rng: np.random.Generator, n_runs: int = 1) -> np.ndarray:
        n = int((logs["state"] == 1).sum())
        if self.name == "discrete_gaussian_rho":
            out = add_noise(np.full(n_runs, n, dtype=np.int64), mechanism="gaussian", scale=1.0, rng=rng,
                            noise="exact")
        elif self.name == "randomized_response_rho":
            flip = rng.random(n_runs) < 1 / (1 + np.e)
            out = np.where(flip, 1 - n, n)
        else:
            out = np.rint(n + rng.laplace(0.0, 2.0, n_runs))
        return np.asarray(out, dtype=np.float64).reshape(n_runs, 1)

    def claim(self, kind: str = "generic"):
        """The true rho claim, tested by default with the generic test (``kind="gaussian"``
        applies the GDP test, which is not valid for these mechanisms)."""
        return Claim.from_rho(0.125 if self.name == "laplace_rho" else 0.5, 1e-6, kind=kind)
