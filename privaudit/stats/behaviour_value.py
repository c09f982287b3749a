"""A DP estimate of the behaviour (clinicians') policy's value from the logs, with its interval.

A hospital's logs come with no known MDP, so no learned policy can be
evaluated exactly and nothing says how good the clinicians who wrote the
logs were. The logged returns do: the value of the behaviour policy at its
own start distribution is the mean return of its episodes. This mechanism
releases, under its own part of the budget, four statistics of the bounded
episodes (one row per episode: its start state and its return G over its
first H steps, in the spec's declared reward units):

``episode_count``  N = number of episodes (after keep-k bounding);
``return_sum``     T = sum of c = G - m, with G clipped into the declared
                   return range [G_lo, G_hi] and m its midpoint;
``return_squares`` Q = sum of c^2;
``start_states``   n_0(s) = episodes starting in state s, for every s in [0, S)
                   (the start distribution a learner's certified value needs
                   when no MDP is known: ``privaudit.pipeline.values``).

The return range is public: the spec's ``return_bound`` when it declares one,
else [H min(r_min, 0), H max(r_max, 0)] (an episode earns at most H rewards
in [r_min, r_max], and 0 after a terminal state: the frame of
``privaudit.learners.pessimism.RewardFrame``).

Sensitivities (substitution of one privacy unit holding at most k episodes,
each contributing one start state and one c in [-C, C]; proof as in
``privaudit.privacy.sensitivity``: a unit's contribution u satisfies u >= 0
for the counts, so ||u - v||_2^2 <= ||u||_2^2 + ||v||_2^2):

* N: |m_u - m_v| <= k, so L2 = k;
* T: |sum_u c - sum_v c| <= kC + kC, so L2 = 2kC;
* Q: c^2 in [0, C^2], so L2 = kC^2;
* n_0: ||u||_1 <= k, so L2 = k sqrt(2).

No float side channel: c is rounded toward zero onto the lattice 2^-b
(b = 16 - ceil(log2(G_hi - G_lo)), so |c| <= 2^15 lattice units and sums of
up to 2^32 episodes fit int64), T and Q are exact integers on their lattices
(2^-b, 2^-2b) and every statistic gets exact discrete Gaussian noise
(``privacy.fixed_point.discrete_gaussian_batch``; CKS 2020 Thm 14: the cost
is L2^2 / (2 sigma^2) as for the continuous Gaussian). The budget rho of the
part is split equally: rho/4 per statistic, each sigma = L2 / sqrt(2 rho/4)
(rounded up until the exact rational cost fits). The event is one Gaussian
leaf per statistic (``privaudit.privacy.events``); the pipeline composes it
with the release's.

The estimate (:func:`estimate_behaviour_value`) is post-processing:
n = max(N', 1), mean c-hat = T'/n, s^2 = Q'/n - c-hat^2 (clipped to
[0, C^2]), value G-hat = m + c-hat, and a normal (CLT + delta method)
interval with variance s^2/n + sigma_T^2/n^2 + c-hat^2 sigma_N^2/n^2 (the
sampling of n i.i.d. episodes, the noise of T and of N), widened by the
lattice rounding (< 2^-b per episode). It covers the behaviour policy's
value at its logged start distribution; coverage is measured by simulation
in ``tests/stats/test_behaviour_value.py`` and docs/pipeline.md.

Departures and limits (docs/pipeline.md "Value estimates without a known
MDP"): the episodes are taken as i.i.d. draws (several stays of one patient
are correlated); keep-k bounding drops the surplus stays of frequently
readmitted patients (a bias toward patients with few stays); an episode the
log stops before H without a terminal state counts with the rewards logged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import polars as pl
from scipy import special

from privaudit.errors import UsageError
from privaudit.privacy import accounting
from privaudit.privacy.budget import Budget
from privaudit.privacy.events import ComposedEvent, GaussianEvent, Neighbouring, PrivacyUnit
from privaudit.privacy.fixed_point import MAX_SIGMA_UNITS, discrete_gaussian_batch, to_grid_toward_zero
from privaudit.spec import DomainSpec

__all__ = ["BehaviourValueRelease", "ValueStatistics", "estimate_behaviour_value", "return_range",
           "VALUE_FAMILIES", "CONFIDENCE_DEFAULT"]

#: The released statistics, in order (each gets rho/4 of the part).
VALUE_FAMILIES = ("episode_count", "return_sum", "return_squares", "start_states")
#: Confidence of the reported interval.
CONFIDENCE_DEFAULT = 0.95
#: |c| <= 2^_C_BITS lattice units.
_C_BITS = 15
#: Most one-ulp increases of a sigma while fitting the exact cost into the budget.
_FIT_STEPS = 16


def return_range(spec: DomainSpec) -> tuple[float, float, str]:
    """The declared range [G_lo, G_hi] of an episode's return, and where it comes from.

    Parameters
    ----------
    spec : DomainSpec
        Its ``return_bound`` (when the spec declares one) or its H and reward range.

    Returns
    -------
    (G_lo, G_hi, source)
        ``source`` is ``"spec return_bound"`` or ``"H x reward range"``
        (then [H min(r_min, 0), H max(r_max, 0)]: H rewards in the range, 0
        after a terminal state).
    """
    rb = getattr(spec, "return_bound", None)
    if rb is not None:
        lo, hi = (float(x) for x in (rb if isinstance(rb, (list, tuple)) else (rb["low"], rb["high"])))
        return lo, hi, "spec return_bound"
    r_lo, r_hi = (float(x) for x in spec.reward_range)
    H = spec.horizon
    return H * min(r_lo, 0.0), H * max(r_hi, 0.0), "H x reward range"


@dataclass(frozen=True)
class ValueStatistics:
    """The released (noisy) statistics, in real units, and the public facts needed to read them.

    Attributes
    ----------
    episodes : float
        N' (noisy episode count).
    return_sum : float
        T' (noisy sum of centred clipped returns, declared reward units).
    return_squares : float
        Q' (noisy sum of their squares, units squared).
    start_states : ndarray of float, shape (S,)
        n'_0(s), noisy start-state counts (may be negative).
    sigma : dict[str, float]
        Noise standard deviation of each family, real units.
    low, high : float
        The declared return range; ``mid`` = (low + high) / 2 is the centre.
    rounding : float
        Largest lattice rounding of one episode's c (2^-b), declared units.
    """

    episodes: float
    return_sum: float
    return_squares: float
    start_states: np.ndarray = field(repr=False)
    sigma: dict = field(default_factory=dict)
    low: float = 0.0
    high: float = 1.0
    rounding: float = 0.0

    @property
    def mid(self) -> float:
        return 0.5 * (self.low + self.high)


@dataclass(frozen=True)
class BehaviourValueRelease:
    """The behaviour-value mechanism, planned from public facts only (nothing read, nothing drawn).

    Build it with :meth:`plan`; :attr:`event` is what it costs; :meth:`apply`
    reads the bounded logs and returns the noisy :class:`ValueStatistics`.

    Attributes
    ----------
    spec : DomainSpec
    budget : Budget
        The part of the budget it spends (Gaussian, rho).
    low, high : float
        Declared return range; ``range_source`` says where it comes from.
    bits : int
        Lattice exponent b: c is stored in units of 2^-b.
    c_max : int
        C in lattice units: |c| <= c_max.
    sigma_lattice : dict[str, float]
        Noise sigma per family in its lattice units (count: 1, T: 2^-b, Q: 2^-2b).
    """

    spec: DomainSpec = field(repr=False)
    budget: Budget
    low: float
    high: float
    range_source: str
    bits: int
    c_max: int
    sigma_lattice: dict

    @classmethod
    def plan(cls, spec: DomainSpec, budget: Budget) -> "BehaviourValueRelease":
        """Lattice, sensitivities and noise scales for ``budget`` (ALGORITHMS: module docstring).

        Raises
        ------
        UsageError
            A return range that is not finite with G_lo < G_hi, a Laplace
            budget, or a budget so small that a sigma exceeds the exact
            sampler's range (2^47 lattice units).
        """
        if budget.mechanism != "gaussian":
            raise UsageError("the behaviour-value estimate needs a Gaussian (zCDP) budget.")
        lo, hi, source = return_range(spec)
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise UsageError(f"the return range must be finite with low < high. Found [{lo}, {hi}] ({source}).")
        bits = _C_BITS + 1 - math.ceil(math.log2(hi - lo))
        c_max = int(math.floor(math.ldexp((hi - lo) / 2.0, bits)))
        share = budget.rho / len(VALUE_FAMILIES)
        sig = {}
        k = int(spec.max_episodes_per_unit)
        for fam in VALUE_FAMILIES:
            l2 = _l2_lattice(fam, k, c_max)
            s = float(np.nextafter(l2 / math.sqrt(2.0 * share), math.inf))
            for _ in range(_FIT_STEPS):
                if Fraction(l2) ** 2 / (2 * Fraction(s) ** 2) <= Fraction(share):
                    break
                s = float(np.nextafter(s, math.inf))
            else:
                raise UsageError(f"no noise scale fits the behaviour-value budget {budget.rho!r} (numerical failure).")
            if s > MAX_SIGMA_UNITS:
                raise UsageError(f"the behaviour-value budget rho = {budget.rho!r} is too small: its `{fam}` noise "
                                 f"would exceed the exact sampler's range. Give a larger value share or budget.")
            sig[fam] = s
        rel = cls(spec, budget, lo, hi, source, bits, c_max, sig)
        if accounting.event_rho(rel.event) > budget.rho * (1 + accounting.BOUND_RTOL):
            raise UsageError("the behaviour-value mechanism costs more than its budget (internal error).")
        return rel

    @property
    def unit(self) -> PrivacyUnit:
        return PrivacyUnit(self.spec.unit_column or "episode_id", int(self.spec.max_episodes_per_unit))

    def family_event(self, family: str) -> GaussianEvent:
        """One statistic's event, in its lattice units (exact discrete Gaussian noise)."""
        return GaussianEvent(l2=_l2_lattice(family, int(self.spec.max_episodes_per_unit), self.c_max),
                             sigma=self.sigma_lattice[family], family=f"value-{family}", unit=self.unit,
                             neighbouring=Neighbouring.SUBSTITUTION, noise="exact")

    @property
    def event(self) -> ComposedEvent:
        """The mechanism's privacy event: one Gaussian leaf per statistic."""
        return ComposedEvent(tuple(self.family_event(f) for f in VALUE_FAMILIES), label="behaviour-value")

    def step(self, family: str) -> float:
        """Lattice step of a family in real (declared) units: 1, 2^-b or 2^-2b."""
        return {"return_sum": math.ldexp(1.0, -self.bits),
                "return_squares": math.ldexp(1.0, -2 * self.bits)}.get(family, 1.0)

    def exact_statistics(self, bounded: pl.LazyFrame | pl.DataFrame) -> dict:
        """The exact statistics of the bounded logs, in lattice units. PRIVATE.

        Parameters
        ----------
        bounded : polars frame
            Bounded logs (``PreparedLogs.bounded``): columns ``episode_id``,
            ``step``, ``state``, ``reward`` (scaled into [0, 1]); at most k
            episodes per unit, steps h < H, every episode with its step 0.

        Returns
        -------
        dict
            ``episode_count`` (int), ``return_sum`` (int), ``return_squares``
            (int), ``start_states`` (int64 array (S,)).
        """
        r_lo, r_hi = (float(x) for x in self.spec.reward_range)
        lf = bounded.lazy() if isinstance(bounded, pl.DataFrame) else bounded
        c = pl.col
        per_ep = (lf.group_by("episode_id")
                  .agg(c("reward").sum().alias("r"), pl.len().alias("L"),
                       c("state").filter(c("step") == 0).first().alias("s0"))
                  .select("r", "L", "s0").collect())
        L = per_ep["L"].to_numpy().astype(np.float64)
        G = L * r_lo + (r_hi - r_lo) * per_ep["r"].to_numpy()        # declared units
        G = np.clip(G, self.low, self.high)
        cl = np.clip(to_grid_toward_zero(G - 0.5 * (self.low + self.high), self.bits), -self.c_max, self.c_max)
        s0 = per_ep["s0"].to_numpy()
        return {"episode_count": int(cl.size), "return_sum": int(cl.sum()), "return_squares": int((cl * cl).sum()),
                "start_states": np.bincount(s0.astype(np.int64), minlength=self.spec.n_states).astype(np.int64)}

    def noisy(self, exact: dict, *, rng: np.random.Generator) -> ValueStatistics:
        """Add exact discrete Gaussian noise to every statistic and convert to real units."""
        S = self.spec.n_states
        draws = discrete_gaussian_batch([(Fraction(self.sigma_lattice[f]) ** 2, S if f == "start_states" else 1)
                                         for f in VALUE_FAMILIES], rng=rng)
        noisy = {f: np.asarray(exact[f], dtype=np.int64) + d.reshape(np.shape(exact[f]))
                 for f, d in zip(VALUE_FAMILIES, draws)}
        return ValueStatistics(
            episodes=float(noisy["episode_count"]),
            return_sum=float(noisy["return_sum"]) * self.step("return_sum"),
            return_squares=float(noisy["return_squares"]) * self.step("return_squares"),
            start_states=noisy["start_states"].astype(np.float64),
            sigma={f: self.sigma_lattice[f] * self.step(f) for f in VALUE_FAMILIES},
            low=self.low, high=self.high, rounding=self.step("return_sum"))

    def apply(self, bounded, *, rng: np.random.Generator) -> ValueStatistics:
        """:meth:`exact_statistics` then :meth:`noisy` (the mechanism)."""
        return self.noisy(self.exact_statistics(bounded), rng=rng)

    def describe(self) -> dict:
        """Public description for summary.json: return range, lattice, sensitivities and sigmas (real units)."""
        k = int(self.spec.max_episodes_per_unit)
        return {"return_range": [self.low, self.high], "return_range_from": self.range_source,
                "lattice_step": self.step("return_sum"),
                "statistics": {f: {"l2": _l2_lattice(f, k, self.c_max) * self.step(f),
                                   "sigma": self.sigma_lattice[f] * self.step(f)} for f in VALUE_FAMILIES}}


def _l2_lattice(family: str, k: int, c_max: int) -> float:
    """L2 sensitivity of one statistic in its lattice units (module docstring)."""
    if family == "episode_count":
        return float(k)
    if family == "return_sum":
        return float(2 * k * c_max)
    if family == "return_squares":
        return float(k * c_max * c_max)
    if family == "start_states":
        return float(np.nextafter(k * math.sqrt(2.0), math.inf))
    raise UsageError(f"`family` must be one of {VALUE_FAMILIES}. Found {family!r}.")


def estimate_behaviour_value(stats: ValueStatistics, confidence: float = CONFIDENCE_DEFAULT) -> dict:
    """The behaviour policy's value and a confidence interval from the noisy statistics (post-processing).

    Parameters
    ----------
    stats : ValueStatistics
        From :meth:`BehaviourValueRelease.apply`.
    confidence : float
        Nominal coverage of the interval, in (0, 1).

    Returns
    -------
    dict
        ``estimate`` (declared reward units), ``interval`` [lo, hi] (inside
        the return range), ``confidence``, ``standard_error`` and its parts
        ``sampling_sd``, ``noise_sd`` (of the estimate), ``method``.

    Raises
    ------
    UsageError
        ``confidence`` outside (0, 1).

    Notes
    -----
    n = max(N', 1); c-hat = clip(T'/n, -C, C); s^2 = clip(Q'/n - c-hat^2, 0, C^2);
    Var = s^2/n + sigma_T^2/n^2 + c-hat^2 sigma_N^2/n^2 (first-order delta
    method for (T + Z_T)/(N + Z_N) around the sample mean, with independent
    noises), half-width z_{(1+confidence)/2} sqrt(Var) + 2^-b. An
    asymptotic interval: valid when N is large next to sigma_N and the
    returns are not too skewed (coverage by simulation: docs/pipeline.md).
    """
    conf = float(confidence)
    if not (0 < conf < 1):
        raise UsageError(f"`confidence` must lie in (0, 1). Found {confidence!r}.")
    C = 0.5 * (stats.high - stats.low)
    n = max(stats.episodes, 1.0)
    c_hat = float(np.clip(stats.return_sum / n, -C, C))
    s2 = float(np.clip(stats.return_squares / n - c_hat * c_hat, 0.0, C * C))
    sampling = s2 / n
    noise = (stats.sigma["return_sum"] ** 2 + c_hat * c_hat * stats.sigma["episode_count"] ** 2) / (n * n)
    se = math.sqrt(sampling + noise)
    z = float(special.ndtri(0.5 + conf / 2.0))
    half = z * se + stats.rounding
    est = stats.mid + c_hat
    return {"estimate": est, "interval": [max(stats.low, est - half), min(stats.high, est + half)],
            "confidence": conf, "standard_error": se, "sampling_sd": math.sqrt(sampling),
            "noise_sd": math.sqrt(noise),
            "method": "mean of the clipped episode returns from noisy sums (N', T', Q'); normal interval "
                      "(CLT + delta method) over the episodes' sampling and the DP noise"}
