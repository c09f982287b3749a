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

The estimate (:func:`estimate_behaviour_value`) is post-processing. The
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

import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import polars as pl

from privaudit.data.bounding import unit_column_of
from privaudit.data.parts import hash_parts, part_count
from privaudit.core.errors import UsageError
from privaudit.privacy import accounting
from privaudit.release.unit_mean import unit_ratio_interval
from privaudit.privacy.budget import Budget
from privaudit.privacy.events import ComposedEvent, GaussianEvent, Neighbouring, PrivacyUnit
from privaudit.privacy.fixed_point import MAX_SIGMA_UNITS, discrete_gaussian_batch, to_grid_toward_zero
from privaudit.core.spec import DomainSpec

__all__ = ["BehaviourValueRelease", "ValueStatistics", "estimate_behaviour_value", "return_range",
           "VALUE_FAMILIES", "UNIT_FAMILIES", "value_families", "CONFIDENCE_DEFAULT", "MECHANISM_VERSION"]

#: The statistics released at every k, in order (k = 1: each gets rho/4 of the part).
VALUE_FAMILIES = ("episode_count", "return_sum", "return_squares", "start_states")
#: The unit-level second moments released besides when k > 1 (B = T and D = N when k = 1).
UNIT_FAMILIES = ("unit_return_cross", "unit_count_squares")
#: Version of the mechanism and interval (module docstring "Versions"); written in ``describe()``.
MECHANISM_VERSION = 2
#: Confidence of the reported interval.
CONFIDENCE_DEFAULT = 0.95
#: |c| <= 2^_C_BITS lattice units.
_C_BITS = 15
#: Most rows aggregated per pass of :meth:`BehaviourValueRelease.exact_statistics` (a part's episodes in
#: memory, about 200 bytes each); the seed of the hash of the unit that splits the parts (changes nothing).
VALUE_PASS_ROWS, VALUE_PASS_SEED = 8_000_000, 0x56
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
class ValueStatistics:
    """The released (noisy) statistics, in real units, and the public facts needed to read them.

    Attributes
    ----------
    episodes : float
        N' (noisy episode count).
    return_sum : float
        T' (noisy sum of centred clipped returns, declared reward units).
    return_squares : float
        Q' (noisy sum over privacy units of the squared unit totals of c,
        units squared; the sum of c^2 when k = 1).
    start_states : ndarray of float, shape (S,)
        n'_0(s), noisy start-state counts (may be negative).
    sigma : dict[str, float]
        Noise standard deviation of each family, real units.
    low, high : float
        The declared return range; ``mid`` = (low + high) / 2 is the centre.
    rounding : float
        Largest lattice rounding of one episode's c (2^-b), declared units.
    unit_cross : float or None
        B' (noisy sum over units of t_u n_u, declared units); None when k = 1
        (then B = T).
    unit_count_squares : float or None
        D' (noisy sum over units of n_u^2); None when k = 1 (then D = N).
    max_episodes : int
        k, the most episodes one unit contributes (public, from the spec).
    """

    episodes: float
    return_sum: float
    return_squares: float
    start_states: np.ndarray = field(repr=False)
    sigma: dict = field(default_factory=dict)
    low: float = 0.0
    high: float = 1.0
    rounding: float = 0.0
    unit_cross: float | None = None
    unit_count_squares: float | None = None
    max_episodes: int = 1

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
        """
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
                raise UsageError(f"the behaviour-value budget rho = {budget.rho!r} is too small: its `{fam}` noise "
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

    def step(self, family: str) -> float:
        """Lattice step of a family in real (declared) units: 1, 2^-b or 2^-2b."""
        return {"return_sum": math.ldexp(1.0, -self.bits), "unit_return_cross": math.ldexp(1.0, -self.bits),
                "return_squares": math.ldexp(1.0, -2 * self.bits)}.get(family, 1.0)

    def exact_statistics(self, bounded: pl.LazyFrame | pl.DataFrame, rows: int | None = None) -> dict:
        """The exact statistics of the bounded logs, in lattice units. PRIVATE.

        Parameters
        ----------
        bounded : polars frame
            Bounded logs (``PreparedLogs.bounded``): columns ``episode_id``,
            ``step``, ``state``, ``reward`` (scaled into [0, 1]) and the unit
            column ``unit_id`` (absent: each episode is its own unit); at
            most k episodes per unit, steps h < H, every episode with its
            step 0.
        rows : int, optional
            Its number of rows (``BoundingReport.rows_kept``): above
            ``VALUE_PASS_ROWS`` the units are aggregated in parts, split by a
            hash of the unit (``privaudit.data.parts``), so that memory holds
            one part's episodes (issue 33). Every sum is exact, so the
            statistics do not depend on the split. None: one pass.

        Returns
        -------
        dict
            ``episode_count``, ``return_sum``, ``return_squares`` (int, exact:
            Python ints), ``start_states`` (int64 array (S,)) and, when
            k > 1, ``unit_return_cross`` and ``unit_count_squares`` (int).
        """
        lf = bounded.lazy() if isinstance(bounded, pl.DataFrame) else bounded
        unit = unit_column_of(lf)
        out: dict = {}
        for part in hash_parts(lf, unit, part_count(rows, VALUE_PASS_ROWS), VALUE_PASS_SEED):
            got = self._part_statistics(part, unit)
            out = {f: out[f] + v for f, v in got.items()} if out else got
        return out

    def _part_statistics(self, lf: pl.LazyFrame, unit: str) -> dict:
        """:meth:`exact_statistics` of the rows of whole units ``lf`` (one part)."""
        r_lo, r_hi = (float(x) for x in self.spec.reward_range)
        c = pl.col
        # one streaming group-by with plain aggregations (the rows stay on disk; a filter().first() inside the
        # aggregation kept every row in memory, issue 33): validated logs have one step-0 row per episode
        # and one unit per episode, so the minimum is that row's state and that unit
        per_ep = (lf.group_by("episode_id")
                  .agg(c("reward").sum().alias("r"), pl.len().alias("L"),
                       pl.when(c("step") == 0).then(c("state")).min().alias("s0"), c(unit).min().alias("_unit"))
                  .select("r", "L", "s0", "_unit").collect(engine="streaming"))
        L = per_ep["L"].to_numpy().astype(np.float64)
        G = L * r_lo + (r_hi - r_lo) * per_ep["r"].to_numpy()        # declared units
        G = np.clip(G, self.low, self.high)
        cl = np.clip(to_grid_toward_zero(G - 0.5 * (self.low + self.high), self.bits), -self.c_max, self.c_max)
        s0 = per_ep["s0"].to_numpy()
        out = {"episode_count": int(cl.size), "return_sum": _exact_sum(cl),
               "start_states": np.bincount(s0.astype(np.int64), minlength=self.spec.n_states).astype(np.int64)}
        if int(self.spec.max_episodes_per_unit) == 1:  # one episode per unit: t_u = c, B = T, D = N
            out["return_squares"] = _exact_sum(cl * cl)
            return out
        per_unit = (pl.DataFrame({"_unit": per_ep["_unit"], "c": cl}).group_by("_unit")
                    .agg(c("c").sum().alias("t"), pl.len().cast(pl.Int64).alias("n")))
        t, n = per_unit["t"].to_numpy().astype(np.int64), per_unit["n"].to_numpy().astype(np.int64)
        out.update(return_squares=_exact_sum(t * t), unit_return_cross=_exact_sum(t * n),
                   unit_count_squares=_exact_sum(n * n))
        return out

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
            low=self.low, high=self.high, rounding=self.step("return_sum"),
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


def _exact_sum(x: np.ndarray) -> int:
    """Exact sum of an int64 array as a Python int (no overflow for fewer than 2^31 terms).

    Each x = hi 2^32 + lo with 0 <= lo < 2^32: both partial sums fit int64.
    """
    x = np.asarray(x, dtype=np.int64)
    return (int((x >> 32).sum()) << 32) + int((x & 0xFFFFFFFF).sum())


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
        ``sampling_sd`` is over i.i.d. privacy units (cluster-robust).

    Raises
    ------
    UsageError
        ``confidence`` outside (0, 1).

    Notes
    -----
    n = max(N', 1); c-hat = clip(T'/n, -C, C); the units' squared residuals
    V = clip(Q' - 2 c-hat B' + c-hat^2 D', 0, k C^2 n), with B' = c-hat n and
    D' = n when k = 1 (B = T, D = N there);
    Var = V/n^2 + sigma_T^2/n^2 + c-hat^2 sigma_N^2/n^2: the delta-method
    (sandwich) variance of the ratio estimator sum_u t_u / sum_u n_u over
    i.i.d. privacy units (Cochran 1977, Sec. 6.4 and 9.2; Liang & Zeger
    1986), plus the first-order effect of the independent noises of T and N
    (``standard_error`` = sqrt(Var)). At k = 1, V = Q' - c-hat^2 n = n s^2 with s^2 = Q'/n - c-hat^2 clipped to [0, C^2]. The
    ``interval`` is not est -+ z se (a normal interval undercovers with few
    units or values near the range's ends) but the finite-sample interval of
    :func:`_interval` (Hoeffding and empirical Bernstein over privacy units and
    the noise's Gaussian tails; docs/certificates.md).
    """
    conf = float(confidence)
    if not (0 < conf < 1):
        raise UsageError(f"`confidence` must lie in (0, 1). Found {confidence!r}.")
    C = 0.5 * (stats.high - stats.low)
    k = int(stats.max_episodes)
    n = max(stats.episodes, 1.0)
    c_hat = float(np.clip(stats.return_sum / n, -C, C))
    B = c_hat * n if stats.unit_cross is None else stats.unit_cross
    D = n if stats.unit_count_squares is None else stats.unit_count_squares
    resid = float(np.clip(stats.return_squares - 2.0 * c_hat * B + c_hat * c_hat * D, 0.0, k * C * C * n))
    sampling = resid / (n * n)
    noise = (stats.sigma["return_sum"] ** 2 + c_hat * c_hat * stats.sigma["episode_count"] ** 2) / (n * n)
    se = math.sqrt(sampling + noise)
    est = stats.mid + c_hat
    lo, hi = _interval(stats, 1.0 - conf)
    return {"estimate": est, "interval": [lo, hi], "confidence": conf, "standard_error": se,
            "sampling_sd": math.sqrt(sampling), "noise_sd": math.sqrt(noise),
            "method": ("mean of the clipped episode returns from noisy sums (N', T'); interval: the intersection "
                       f"of a Hoeffding and an empirical-Bernstein interval over the privacy units (k = {k} episodes "
                       "each, correlated in any way), widened by the DP noise (union bound; coverage >= the "
                       "confidence in finite samples); standard error: delta method for a ratio (noisy "
                       "unit-level Q'" + (")" if k == 1 else ", B', D')"))}


def _interval(stats: ValueStatistics, miss: float) -> tuple[float, float]:
    """The finite-sample interval of :func:`estimate_behaviour_value`, missing w.p. <= ``miss``:
    ``unit_mean.unit_ratio_interval`` on (T', N', Q', B', D') (B = T and D = N at k = 1), each end widened
    by the lattice rounding (< 2^-b per episode), inside [low, high]. Proof: docs/certificates.md, "The
    clinicians' value interval"."""
    sg = stats.sigma
    B, sB = ((stats.return_sum, sg["return_sum"]) if stats.unit_cross is None
             else (stats.unit_cross, sg["unit_return_cross"]))
    D, sD = ((stats.episodes, sg["episode_count"]) if stats.unit_count_squares is None
             else (stats.unit_count_squares, sg["unit_count_squares"]))
    lo, hi = unit_ratio_interval((stats.return_sum, stats.episodes, stats.return_squares, B, D),
                                 (sg["return_sum"], sg["episode_count"], sg["return_squares"], sB, sD),
                                 0.5 * (stats.high - stats.low), max_episodes=int(stats.max_episodes), miss=miss)
    return max(stats.low, stats.mid + lo - stats.rounding), min(stats.high, stats.mid + hi + stats.rounding)
