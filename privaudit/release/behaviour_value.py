"""A DP estimate of the behaviour (clinicians') policy's value from the logs, with its interval.

A hospital's logs come with no known MDP, so no learned policy can be
evaluated exactly and nothing says how good the clinicians who wrote the
logs were. The logged returns do: the value of the behaviour policy at its
own start distribution is the mean return of its episodes. This mechanism
releases, under its own part of the budget, statistics of the bounded
episodes (one row per episode: its privacy unit, its start state and its
return G over its first H steps, in the spec's declared reward units). With
c = G - m, G clipped into the declared return range [G_lo, G_hi] and m its
midpoint (so |c| <= C = (G_hi - G_lo)/2), and for each privacy unit u its
n_u <= k kept episodes and their total t_u = sum of the unit's c:

``episode_count``       N = sum_u n_u (after keep-k bounding);
``return_sum``          T = sum_u t_u = sum of c over the episodes;
``return_squares``      Q = sum_u t_u^2 (the unit totals' squares; = sum of
                        c^2 when k = 1);
``unit_return_cross``   B = sum_u t_u n_u          (only when k > 1);
``unit_count_squares``  D = sum_u n_u^2            (only when k > 1);
``start_states``        n_0(s) = episodes starting in state s, for every s
                        in [0, S) (the start distribution a learner's
                        certified value needs when no MDP is known:
                        ``privaudit.pipeline.values``).

When k = 1 every unit holds one episode, so B = T and D = N exactly: the
release is then N, T, Q and n_0 only, the same four statistics, noise and
estimate as format version 1 (below). B and D make the interval's variance
a cluster-robust one at the privacy unit (below).

The return range is public: the spec's ``return_bound`` when it declares one,
else [H min(r_min, 0), H max(r_max, 0)] (an episode earns at most H rewards
in [r_min, r_max], and 0 after a terminal state: the frame of
``privaudit.learners.tabular.pessimism.RewardFrame``).

Sensitivities (substitution of one privacy unit u, holding 0 <= n_u <= k
kept episodes, by another unit v with 0 <= n_v <= k; every other unit's
terms are unchanged, so each statistic changes by the difference of one
unit's term, a scalar except n_0; |t_u| <= n_u C since each |c| <= C):

* N: n_u in [0, k], so |n_u - n_v| <= k: L2 = k;
* T: t_u in [-kC, kC], so |t_u - t_v| <= 2kC: L2 = 2kC;
* Q: t_u^2 in [0, (kC)^2], so |t_u^2 - t_v^2| <= (kC)^2: L2 = (kC)^2
  (= kC^2 of version 1 at k = 1; attained by k episodes at +C against a
  unit whose c add up to 0);
* B: |t_u n_u| <= n_u^2 C <= k^2 C, so |t_u n_u - t_v n_v| <= 2 k^2 C:
  L2 = 2 k^2 C (attained: k episodes at +C against k at -C);
* D: n_u^2 in [0, k^2]: L2 = k^2;
* n_0: a unit's vector u >= 0 has ||u||_1 <= k, so
  ||u - v||_2^2 <= ||u||_2^2 + ||v||_2^2 <= 2 k^2: L2 = k sqrt(2)
  (as ``privaudit.privacy.sensitivity``).

No float side channel: c is rounded toward zero onto the lattice 2^-b
(b = 16 - ceil(log2(G_hi - G_lo)), so |c| <= C' = 2^15 lattice units,
|t_u| <= k C' and t_u^2 < 2^63 for k < 2^16), T, B are exact integers on
the lattice 2^-b and Q on 2^-2b (sums taken exactly, no int64 overflow),
and every statistic gets exact discrete Gaussian noise
(``privacy.fixed_point.discrete_gaussian_batch``; CKS 2020 Thm 14: the cost
is L2^2 / (2 sigma^2) as for the continuous Gaussian). The sensitivities
above hold on the lattice with C = C' (rounding toward zero keeps |c| <= C').
Budget rho of the part: N, T and n_0 get rho/4 each; Q gets rho/4 when
k = 1, and Q, B, D get rho/12 each when k > 1 (they only enter the
interval's width, so the estimate's own noise is the same as at k = 1).
Each sigma = L2 / sqrt(2 share), rounded up until the exact rational cost
fits its share. The event is one Gaussian leaf per statistic
(``privaudit.privacy.events``); the pipeline composes it with the release's.

Engines: :meth:`BehaviourValueRelease.exact_statistics` takes polars'
bounded frame or the Spark engine's (``privaudit.data.spark.stats``) and
returns the same integers: each episode's scaled rewards are summed as
integers after a floor to 2^-52 (``privaudit.data.exact_sums``), and G, its
clipping and c run the same float64 operations in both; the error of G
this leaves (< 4 H max|r| 2^-52, :attr:`BehaviourValueRelease.sum_error`)
widens the interval with the lattice rounding.

The estimate (:func:`estimate_behaviour_value`, in
:mod:`privaudit.release.behaviour_estimate`) is post-processing. The
estimand is the mean return per episode, the ratio R = E[t_u] / E[n_u] over
patients (m + R in declared units): with n = max(N', 1) and c-hat =
clip(T'/n, -C, C), G-hat = m + c-hat. Its interval is finite-sample (issue
28; before, a normal interval that covered 88.6-93% with few stays or values
near 0 or 1): Hoeffding and empirical Bernstein over the i.i.d. privacy units
(a patient's stays correlated in any way), widened by the noise
(``privaudit.release.unit_mean``; proof: docs/certificates.md). The reported
standard error is the delta-method (sandwich) one of a ratio estimator over
units, Var = (Q' - 2 c-hat B' + c-hat^2 D') / n^2 + (sigma_T^2 + c-hat^2
sigma_N^2) / n^2, the residual sum clipped to [0, k C^2 n] (weighted
Bhatia-Davis); at k = 1, B = T and D = N.

Versions: ``MECHANISM_VERSION`` 2 (this) writes ``"version": 2`` in
:meth:`BehaviourValueRelease.describe`. Version 1 (summaries without the
key) released Q = sum of c^2 over episodes with L2 = kC^2 and an interval
that took the episodes as i.i.d.: too narrow when k > 1 and a patient's
stays are correlated. Both read under ``schemas/summary.schema.json``.

Departures and limits (docs/pipeline.md "Value estimates without a known
MDP"): keep-k bounding drops the surplus stays of frequently readmitted
patients (a bias toward patients with few stays); an episode the log stops
before H without a terminal state counts with the rewards logged; the
interval is conservative (wider than the normal one: about 4 times with
60 stays near 0.97, 2 times with 20,000 stays on a wide declared range).

References
----------
Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential Privacy",
NeurIPS 2020, arXiv:2004.00010 (Thm 14). Cochran, *Sampling Techniques*,
3rd ed. (1977), Sec. 6.4 (variance of the ratio estimator) and Sec. 9.2
(cluster sampling); the sandwich form is Liang & Zeger, Biometrika 73 (1986).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import polars as pl

from privaudit.core.errors import NoiseScaleTooLarge, UsageError
from privaudit.core.spec import DomainSpec
from privaudit.data.bounding import unit_column_of
from privaudit.data.parts import hash_parts, part_count, part_rows
from privaudit.data.exact_sums import REWARD_BITS, value_sums
from privaudit.privacy import accounting
from privaudit.privacy.budget import Budget
from privaudit.privacy.events import ComposedEvent, GaussianEvent, Neighbouring, PrivacyUnit
from privaudit.privacy.k_bound import k_bound
from privaudit.privacy.fixed_point import MAX_SIGMA_UNITS, discrete_gaussian_batch
from privaudit.release.behaviour_estimate import CONFIDENCE_DEFAULT, ValueStatistics, estimate_behaviour_value

__all__ = ["BehaviourValueRelease", "ValueStatistics", "estimate_behaviour_value", "return_range",
           "VALUE_FAMILIES", "UNIT_FAMILIES", "value_families", "CONFIDENCE_DEFAULT", "MECHANISM_VERSION"]

#: The statistics released at every k, in order (k = 1: each gets rho/4 of the part).
VALUE_FAMILIES = ("episode_count", "return_sum", "return_squares", "start_states")
#: The unit-level second moments released besides when k > 1 (B = T and D = N when k = 1).
UNIT_FAMILIES = ("unit_return_cross", "unit_count_squares")
#: Version of the mechanism and interval (module docstring "Versions"); written in ``describe()``.
MECHANISM_VERSION = 2
#: |c| <= 2^_C_BITS lattice units.
_C_BITS = 15
#: Seed of the hash of the unit that splits :meth:`BehaviourValueRelease.exact_statistics` into parts of at
#: most ``part_rows()`` rows (``privaudit.data.parts``; a part's episodes in memory, about 200 bytes each).
VALUE_PASS_SEED = 0x56
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


def value_families(k: int) -> tuple[str, ...]:
    """The statistics released for k episodes per unit, in order (module docstring)."""
    return VALUE_FAMILIES[:3] + UNIT_FAMILIES + VALUE_FAMILIES[3:] if int(k) > 1 else VALUE_FAMILIES


def _shares(k: int) -> dict[str, Fraction]:
    """Each statistic's fraction of the part's rho (exact; they add up to 1)."""
    if int(k) == 1:
        return {f: Fraction(1, 4) for f in VALUE_FAMILIES}
    second = ("return_squares",) + UNIT_FAMILIES
    return {f: Fraction(1, 12) if f in second else Fraction(1, 4) for f in value_families(k)}


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
        Noise sigma per family in its lattice units (counts and D: 1, T and
        B: 2^-b, Q: 2^-2b).
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
        """Lattice, sensitivities and noise scales for ``budget`` (the derivation: this module's docstring).

        Raises
        ------
        UsageError
            A return range that is not finite with G_lo < G_hi, a Laplace
            budget, k >= 2^16 (a unit total's square would overflow int64),
            or a budget so small that a sigma exceeds the exact sampler's
            range (2^47 lattice units).
            "k is too large", with the largest k that fits, when a
            smaller k would (``privaudit.privacy.k_bound``).
        """
        with k_bound(spec.max_episodes_per_unit, budget.text, "the behaviour-value estimate",
                     lambda k, _: cls._plan(dataclasses.replace(spec, max_episodes_per_unit=k), budget)):
            return cls._plan(spec, budget)

    @classmethod
    def _plan(cls, spec: DomainSpec, budget: Budget) -> "BehaviourValueRelease":
        """:meth:`plan` at the spec's k (a too-large scale raises ``NoiseScaleTooLarge``)."""
        if budget.family.pure:
            raise UsageError("the behaviour-value estimate needs a Gaussian (zCDP) budget.")
        lo, hi, source = return_range(spec)
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise UsageError(f"the return range must be finite with low < high. Found [{lo}, {hi}] ({source}).")
        bits = _C_BITS + 1 - math.ceil(math.log2(hi - lo))
        c_max = int(math.floor(math.ldexp((hi - lo) / 2.0, bits)))
        k = int(spec.max_episodes_per_unit)
        if k >= 2 ** 16:
            raise UsageError(f"the behaviour-value estimate needs privacy_unit.max_episodes < 65536. Found {k}.")
        sig = {}
        for fam, part in _shares(k).items():
            share = Fraction(budget.rho) * part
            l2 = _l2_lattice(fam, k, c_max)
            s = float(np.nextafter(l2 / math.sqrt(2.0 * float(share)), math.inf))
            for _ in range(_FIT_STEPS):
                if Fraction(l2) ** 2 / (2 * Fraction(s) ** 2) <= share:
                    break
                s = float(np.nextafter(s, math.inf))
            else:
                raise UsageError(f"no noise scale fits the behaviour-value budget {budget.rho!r} (numerical failure).")
            if s > MAX_SIGMA_UNITS:
                raise NoiseScaleTooLarge(f"the behaviour-value budget rho = {budget.rho!r} is too small: its `{fam}` noise "
                                 f"would exceed the exact sampler's range. Give a larger value share or budget.")
            sig[fam] = s
        rel = cls(spec, budget, lo, hi, source, bits, c_max, sig)
        if accounting.event_rho(rel.event) > budget.rho * (1 + accounting.BOUND_RTOL):
            raise UsageError("the behaviour-value mechanism costs more than its budget (internal error).")
        return rel

    @property
    def families(self) -> tuple[str, ...]:
        """The released statistics, in order (:func:`value_families` of the spec's k)."""
        return value_families(int(self.spec.max_episodes_per_unit))

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
        return ComposedEvent(tuple(self.family_event(f) for f in self.families), label="behaviour-value")

    @property
    def sum_error(self) -> float:
        """A bound on how far an episode's computed return G is from its exact value, declared units:
        4 H max(|r_min|, |r_max|) 2^-52 covers the limbs' floor (< H (r_max - r_min) 2^-52,
        ``privaudit.data.exact_sums``) and the float64 rounding of G (< H max|r| 2^-53 per operation).
        Added to the interval's rounding widening (far below one lattice step)."""
        r = max(abs(float(x)) for x in self.spec.reward_range)
        return 4.0 * self.spec.horizon * r * 2.0 ** -REWARD_BITS

    def step(self, family: str) -> float:
        """Lattice step of a family in real (declared) units: 1, 2^-b or 2^-2b."""
        return {"return_sum": math.ldexp(1.0, -self.bits), "unit_return_cross": math.ldexp(1.0, -self.bits),
                "return_squares": math.ldexp(1.0, -2 * self.bits)}.get(family, 1.0)

    def exact_statistics(self, bounded, rows: int | None = None) -> dict:
        """The exact statistics of the bounded logs, in lattice units. PRIVATE.

        Parameters
        ----------
        bounded : polars frame or pyspark DataFrame
            Bounded logs (``PreparedLogs.bounded``, or the Spark engine's
            ``privaudit.data.spark.bounding.bound_contributions``): columns
            ``episode_id``, ``step``, ``state``, ``reward`` (scaled into
            [0, 1]) and the unit column ``unit_id`` (absent in a polars frame:
            each episode is its own unit); at most k episodes per unit, steps
            h < H, every episode with its step 0. A Spark frame is aggregated
            on the cluster (``privaudit.data.spark.stats.spark_value_sums``):
            the same integers as polars.
        rows : int, optional
            Its number of rows (``BoundingReport.rows_kept``): above
            ``part_rows()`` a polars frame's units are aggregated in
            parts, split by a hash of the unit (``privaudit.data.parts``), so
            that memory holds one part's episodes (issue 33). Every sum is
            exact, so the statistics do not depend on the split. None: one
            pass.

        Returns
        -------
        dict
            ``episode_count``, ``return_sum``, ``return_squares`` (int, exact:
            Python ints), ``start_states`` (int64 array (S,)) and, when
            k > 1, ``unit_return_cross`` and ``unit_count_squares`` (int).

        Notes
        -----
        Each episode's scaled rewards are summed exactly as integer limbs
        (``privaudit.data.exact_sums``: floor(r 2^52) each, so the return is
        the float sum of the rewards up to less than 2^-52 per step, and the
        same bits in every engine and partition order); G, its clipping and
        c follow with the same float64 operations in both engines.
        """
        lattice = dict(n_states=self.spec.n_states, max_episodes=int(self.spec.max_episodes_per_unit),
                       reward_range=self.spec.reward_range, low=self.low, high=self.high, bits=self.bits,
                       c_max=self.c_max)
        if isinstance(bounded, (pl.LazyFrame, pl.DataFrame)):
            lf = bounded.lazy()
            unit = unit_column_of(lf)
            out: dict = {}
            for part in hash_parts(lf, unit, part_count(rows, part_rows()), VALUE_PASS_SEED):
                got = value_sums(part, unit, **lattice)
                out = {f: out[f] + v for f, v in got.items()} if out else got
            return out
        from privaudit.data.spark import session, stats  # optional dependency: pyspark only with a Spark frame

        with session.spark_errors("computing the clinicians' value statistics"):
            return stats.spark_value_sums(bounded, **lattice)

    def noisy(self, exact: dict, *, rng: np.random.Generator) -> ValueStatistics:
        """Add exact discrete Gaussian noise to every statistic and convert to real units.

        The scalar sums are added to their noise as Python ints (exact: Q may
        exceed int64 on very large logs), then scaled by their lattice step.
        """
        S = self.spec.n_states
        fams = self.families
        draws = discrete_gaussian_batch([(Fraction(self.sigma_lattice[f]) ** 2, S if f == "start_states" else 1)
                                         for f in fams], rng=rng)
        noisy = {f: (np.asarray(exact[f], dtype=np.int64) + d.reshape(np.shape(exact[f])) if f == "start_states"
                     else float(int(exact[f]) + int(d.reshape(-1)[0])) * self.step(f))
                 for f, d in zip(fams, draws)}
        return ValueStatistics(
            episodes=noisy["episode_count"], return_sum=noisy["return_sum"],
            return_squares=noisy["return_squares"],
            start_states=noisy["start_states"].astype(np.float64),
            sigma={f: self.sigma_lattice[f] * self.step(f) for f in fams},
            low=self.low, high=self.high, rounding=self.step("return_sum") + self.sum_error,
            unit_cross=noisy.get("unit_return_cross"), unit_count_squares=noisy.get("unit_count_squares"),
            max_episodes=int(self.spec.max_episodes_per_unit))

    def apply(self, bounded, *, rng: np.random.Generator, rows: int | None = None) -> ValueStatistics:
        """:meth:`exact_statistics` (``rows``: its row count, for the parts) then :meth:`noisy` (the mechanism)."""
        return self.noisy(self.exact_statistics(bounded, rows), rng=rng)

    def describe(self) -> dict:
        """Public description for summary.json: version, interval unit, return range, lattice,
        sensitivities and sigmas (real units)."""
        k = int(self.spec.max_episodes_per_unit)
        return {"version": MECHANISM_VERSION,
                "interval_unit": "episode (k = 1: one per unit)" if k == 1 else "privacy unit (cluster-robust)",
                "return_range": [self.low, self.high], "return_range_from": self.range_source,
                "lattice_step": self.step("return_sum"),
                "statistics": {f: {"l2": _l2_lattice(f, k, self.c_max) * self.step(f),
                                   "sigma": self.sigma_lattice[f] * self.step(f)} for f in self.families}}


def _l2_lattice(family: str, k: int, c_max: int) -> float:
    """L2 sensitivity of one statistic in its lattice units (module docstring)."""
    if family == "episode_count":
        return float(k)
    if family == "return_sum":
        return float(2 * k * c_max)
    if family == "return_squares":
        return float((k * c_max) ** 2)
    if family == "unit_return_cross":
        return float(2 * k * k * c_max)
    if family == "unit_count_squares":
        return float(k * k)
    if family == "start_states":
        return float(np.nextafter(k * math.sqrt(2.0), math.inf))
    raise UsageError(f"`family` must be one of {VALUE_FAMILIES + UNIT_FAMILIES}. Found {family!r}.")
