"""DP evaluation of any tabular policy from logs: a noisy capped-model value and a proven lower bound.

The mechanism (docs/certificates.md, "Policy evaluation from logs", which
holds the theorem, its proof and the sensitivities): on bounded logs, keep
one stay per privacy unit (``ope.model.held_out_stays``), compute the capped
model's value V', absorbed mass L and weighted variance proxy
Q = sum_j R_j^2 q_j of the policy (``ope.model.capped_model_value``, a public
coverage scale m), and release the three with exact discrete Gaussian noise
on 2^-b lattices. Sensitivities under substitution of one unit (reward units
r'' of ``ope.model.evaluation_frame``, non-negative for any declared range;
l_j from ``ope.model.lipschitz_bounds``, R_j = min(l_j, b_j), j = 0
the start and j = 1..H the steps h = j - 1, T_j = sum_{j' > j} R_{j'}^2):

    Delta(V') = 2 sum_j l_j / m,   Delta(L) = 6 (H + 1) / m,   Delta(Q) = 2 sum_j (R_j^2 + 4 T_j) / m^2,

plus one lattice step each for the rounding. The budget is split
:data:`SHARES`. The certificate is post-processing: with Q+ an upper
confidence bound of Q (never above the public Q_max = sum_j R_j^2 / m),

    lower = V~' - (noise tail of V') - min over a grid of lambda of [log(G / a) / lambda + lambda Q+ / 8],

a lower bound on the policy's value at its start distribution with
probability >= 1 - alpha over the held-out stays and the noise; the
two-sided interval adds the absorbed mass on its upper side. Results are
mapped back to declared units by the frame's increasing affine map
(width x + H low), so every width is multiplied by the range's width.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field, is_dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.core.spec import DomainSpec
from privaudit.data.exact_sums import REWARD_BITS
from privaudit.data.engines import prepare_on
from privaudit.data.prepare import PreparedLogs
from privaudit.ope.model import (ModelValue, capped_model_value, evaluation_frame, frame_value_bounds,
                                 held_out_stays, lipschitz_bounds, policy_table_for)
from privaudit.privacy import ledger as ledger_mod
from privaudit.privacy.budget import Budget
from privaudit.privacy.events import ComposedEvent, GaussianEvent, Neighbouring, PrivacyUnit
from privaudit.privacy.fixed_point import discrete_gaussian_batch, to_grid_nearest
from privaudit.privacy.noise import gaussian_sigma
from privaudit.release.behaviour_value import return_range

__all__ = ["PolicyEvaluation", "LedgerEntry", "UnitCount", "evaluate_policy_on_logs", "coverage_rule",
           "CONFIDENCE_DEFAULT", "COVERAGE_DEFAULT", "SHARES", "NOISE_TARGET", "UNITS_PER_COVERAGE", "LEAST_RATIO",
           "COUNT_SHARE"]

#: Default level of the lower bound and of the two-sided interval.
CONFIDENCE_DEFAULT = 0.95
#: The reference coverage scale m of :func:`coverage_rule` (the noise tail is computed there, then rescaled).
#: ``evaluate_policy_on_logs`` no longer defaults to it: without a given m it applies the rule to a DP count.
COVERAGE_DEFAULT = 10_000.0
#: The coverage rule's target for the noise tail of V' (a fraction of the start's range R_0).
NOISE_TARGET = 0.04
#: The coverage rule lets m grow with the units: m >= (estimated units) / UNITS_PER_COVERAGE (importance ratio ~50).
UNITS_PER_COVERAGE = 50.0
#: The coverage rule keeps m <= (estimated units) / LEAST_RATIO: the start cell passes all its mass, and a cell
#: is capped only where the policy's importance ratio exceeds about 2.
LEAST_RATIO = 2.0
#: Without a given m, this share of the evaluation's budget releases the number of evaluated units (``UnitCount``).
COUNT_SHARE = 0.05
#: Shares of the budget: the model value, the absorbed mass and the variance proxy.
SHARES = {"value": 0.7, "lost_mass": 0.1, "variance": 0.2}
#: Shares of a failure probability a: sampling (the martingale), the noise of V', of Q (and of L, upper side).
_FAILURE = {"sampling": 0.6, "value": 0.25, "variance": 0.15}
#: Grid of the martingale's lambda: G values, ratio 2, from the one optimal at Q = Q_max (covers Q down to
#: Q_max / 4^(G-1); below that the last lambda is used: still valid, slightly wider).
_GRID = 6
#: Sensitivity in lattice units is about 2^_LATTICE_BITS (rounding adds one unit).
_LATTICE_BITS = 20


@dataclass(frozen=True)
class PolicyEvaluation:
    """The planned mechanism: coverage scale, sensitivities, lattices and noise scales."""

    spec: DomainSpec = field(repr=False)
    #: Gaussian (zCDP) budget of the evaluation.
    budget: Budget
    #: m > 0.
    coverage: float
    #: Shape (H + 1,): l_h (``ope.model.lipschitz_bounds``).
    lipschitz: np.ndarray = field(repr=False)
    #: Per statistic (``value``, ``lost_mass``): the lattice 2^-bits.
    bits: dict
    #: Per statistic: the L2 sensitivity in lattice units.
    l2_lattice: dict
    #: Per statistic: the noise sigma in lattice units.
    sigma_lattice: dict

    @classmethod
    def plan(cls, spec: DomainSpec, budget: Budget, coverage: float = COVERAGE_DEFAULT) -> "PolicyEvaluation":
        """Sensitivities and noise scales for ``budget`` (module docstring).

        Raises
        ------
        UsageError
            A Laplace budget, coverage m not finite and > 0 (or so far from 1 that
            a sensitivity under- or overflows), or an event
            costing more than the budget. Any reward range is accepted: the
            statistics are in the non-negative frame of
            ``ope.model.evaluation_frame`` (docs/certificates.md, "Reward ranges").
        """
        if budget.family.pure:
            raise UsageError("policy evaluation from logs needs a Gaussian (zCDP) budget: give `rho`, or "
                             "`epsilon` with `delta`.")
        m = float(coverage)
        if not (math.isfinite(m) and m > 0):
            raise UsageError(f"the coverage scale m must be finite and > 0. Found {coverage!r}.")
        ell = lipschitz_bounds(spec)
        H = spec.horizon
        R2 = _ranges(spec, ell) ** 2
        tails = np.concatenate([np.cumsum(R2[::-1])[::-1][1:], [0.0]])
        sens = {"value": 2.0 * (ell[0] + ell[:H].sum()) / m, "lost_mass": 6.0 * (H + 1) / m,
                "variance": 2.0 * float(np.sum(R2 + 4.0 * tails)) / m / m}
        if not all(sys.float_info.min <= s < math.inf for s in sens.values()):  # m near the float range's ends
            raise UsageError(f"the coverage scale m = {coverage!r} is too {'large' if m > 1 else 'small'}: a "
                             "sensitivity of the evaluation (about 1/m and 1/m^2) leaves the range of floating "
                             "point. m is on the scale of the visit counts n_h(s, a) a cell needs (e.g. 10 to "
                             "10^5); without it, a rule picks m from a DP count of the units.")
        parts = budget.split(SHARES)
        bits, l2, sig = {}, {}, {}
        for name, s in sens.items():
            bits[name] = _LATTICE_BITS - math.floor(math.log2(s))
            l2[name] = float(math.ceil(math.ldexp(s, bits[name])) + 1)
            sig[name] = gaussian_sigma(l2[name], parts[name].rho)
        plan = cls(spec, budget, m, ell, bits, l2, sig)
        budget.guarantee(plan.event)  # raises AccountingError if the exact cost exceeds the budget
        return plan

    @property
    def unit(self) -> PrivacyUnit:
        return PrivacyUnit(self.spec.unit_column or "episode_id", int(self.spec.max_episodes_per_unit))

    @property
    def event(self) -> ComposedEvent:
        """One Gaussian leaf per statistic (exact discrete Gaussian noise, lattice units)."""
        return ComposedEvent(tuple(GaussianEvent(l2=self.l2_lattice[f], sigma=self.sigma_lattice[f],
                                                 family=f"ope-{f}", unit=self.unit,
                                                 neighbouring=Neighbouring.SUBSTITUTION, noise="exact")
                                   for f in SHARES), label="policy-evaluation")

    def step(self, name: str) -> float:
        """Lattice step of a statistic, scaled reward units (value) or mass (lost_mass)."""
        return math.ldexp(1.0, -self.bits[name])

    def sigma(self, name: str) -> float:
        """Noise standard deviation of a statistic in its real units."""
        return self.sigma_lattice[name] * self.step(name)

    def noisy(self, model: ModelValue, *, rng: np.random.Generator) -> dict:
        """Round each statistic to its lattice (nearest), add exact discrete Gaussian noise, rescale."""
        R2 = _ranges(self.spec, self.lipschitz) ** 2
        exact = {"value": model.value, "lost_mass": model.lost_mass,
                 "variance": float(np.dot(R2, model.weight_squares))}
        draws = discrete_gaussian_batch([(Fraction(self.sigma_lattice[f]) ** 2, 1) for f in SHARES], rng=rng)
        return {f: float(int(to_grid_nearest(np.array([exact[f]]), self.bits[f])[0]) + int(d[0])) * self.step(f)
                for f, d in zip(SHARES, draws)}

    def certify(self, noisy: dict, confidence: float = CONFIDENCE_DEFAULT) -> dict:
        """The lower bound and the two-sided interval from the noisy statistics (post-processing).

        Parameters
        ----------
        noisy : dict
            ``value`` and ``lost_mass`` from :meth:`noisy`.
        confidence : float
            1 - alpha in (0, 1): the level of the one-sided lower bound and,
            separately, of the two-sided interval.

        Returns
        -------
        dict
            Declared reward units: ``estimate`` (the noisy model value, biased
            low by the caps, clipped to the value range [0, V_max] and into the
            declared return range, ``release.behaviour_value.return_range``:
            the estimate, bound and interval alike; unclipped:
            ``estimate_unclipped``), ``absorbed_mass`` (the noisy share of the
            policy's mass the coverage caps absorb, clipped to [0, 1]: near 1,
            m is too large for these logs and the bound is empty),
            ``lower_bound``, ``interval`` [lo, hi],
            ``confidence``, ``sampling_width`` (one-sided, at 3 alpha / 4),
            ``noise_width``, ``coverage``, ``method``.
        """
        conf = float(confidence)
        if not (0 < conf < 1):
            raise UsageError(f"`confidence` must lie in (0, 1). Found {confidence!r}.")
        alpha = 1.0 - conf
        R = _ranges(self.spec, self.lipschitz)
        q_max = float(np.sum(R ** 2)) / self.coverage
        top = float(R[0])
        V, L, Q = noisy["value"], noisy["lost_mass"], noisy["variance"]

        def noise(name: str, a: float) -> float:  # discrete Gaussian tail (sub-Gaussian) + rounding
            return self.sigma(name) * math.sqrt(2.0 * math.log(1.0 / a)) + 0.5 * self.step(name)

        def width(a: float) -> float:  # the martingale's tail at Q+ (failure a: sampling and Q's noise)
            q_plus = min(q_max, max(0.0, Q + noise("variance", _FAILURE["variance"] * a)))
            return _martingale_width(q_plus, q_max, _FAILURE["sampling"] * a)

        lower = V - noise("value", _FAILURE["value"] * alpha) - width(alpha)
        lo2 = V - noise("value", _FAILURE["value"] * alpha / 2) - width(alpha / 2)
        hi2 = (V + noise("value", _FAILURE["value"] * alpha / 4) + width(alpha / 4)  # L takes alpha/4 of alpha/2
               + top * min(1.0, max(0.0, L + noise("lost_mass", alpha / 4)))
               + self.spec.horizon * 2.0 ** -REWARD_BITS)  # the rewards' floor to 2^-52 (ope.model)
        frame, H = evaluation_frame(self.spec), self.spec.horizon  # r'' units -> declared: width x + H low
        g_lo, g_hi, _ = return_range(self.spec)  # every policy's value lies in it (a declared return_bound)
        clip = (lambda x: float(np.clip(frame.declared(np.clip(x, 0.0, top), H), g_lo, g_hi)))
        scale = frame.width
        return {"estimate": clip(V), "estimate_unclipped": frame.declared(V, H),
                "absorbed_mass": float(np.clip(L, 0.0, 1.0)),
                "lower_bound": clip(lower), "interval": [clip(lo2), clip(hi2)],
                "confidence": conf, "sampling_width": width(alpha) * scale,
                "noise_width": noise("value", _FAILURE["value"] * alpha) * scale, "coverage": self.coverage,
                "method": ("capped per-step model of the policy on one stay per privacy unit; lower bound = "
                           "noisy model value - noise tail - martingale width at a noisy variance bound "
                           "(docs/certificates.md)")}

    def describe(self) -> dict:
        """Public description: coverage, sensitivities, sigmas (real units), budget shares."""
        return {"coverage": self.coverage, "shares": dict(SHARES),
                "statistics": {f: {"l2": self.l2_lattice[f] * self.step(f), "sigma": self.sigma(f)}
                               for f in SHARES}}


def coverage_rule(spec: DomainSpec, budget: Budget, units: float | None = None,
                  confidence: float = CONFIDENCE_DEFAULT, units_per_coverage: float = UNITS_PER_COVERAGE) -> float:
    """The coverage scale m, fixed before the evaluated stays are read (docs/certificates.md, "Choosing m").

    m = min(max(m_noise, units / units_per_coverage), units / LEAST_RATIO),
    where m_noise is the m at which the noise tail of V' in the lower bound
    (level ``confidence``) equals NOISE_TARGET R_0 (the tail is proportional
    to 1/m), and ``units`` is an estimate of the number of evaluated units
    that does not depend on their stays (a DP count, or a public figure);
    without it, m = m_noise. The cap units / LEAST_RATIO binds only on small
    logs (fewer units than 2 m_noise): a larger m would cap the start cell
    itself (it passes min(1, n/m)) and absorb mass the noise cannot repay.

    Parameters
    ----------
    spec : DomainSpec
    budget : Budget
        The evaluation's Gaussian budget.
    units : float, optional
        Estimated number of privacy units evaluated (>= 0).
    confidence : float
        Level of the lower bound.
    units_per_coverage : float
        The trusted importance ratio, about n / m (default :data:`UNITS_PER_COVERAGE`; a public constant of
        the evaluated policy's learner, e.g. ``pipeline.certify.UNITS_PER_COVERAGE_OF``).

    Returns
    -------
    float
        m >= 1.

    Raises
    ------
    UsageError
        As :meth:`PolicyEvaluation.plan`, or ``confidence`` outside (0, 1).
    """
    if not (0 < float(confidence) < 1):
        raise UsageError(f"`confidence` must lie in (0, 1). Found {confidence!r}.")
    ref = PolicyEvaluation.plan(spec, budget, COVERAGE_DEFAULT)
    alpha = 1.0 - float(confidence)
    tail = ref.sigma("value") * math.sqrt(2.0 * math.log(1.0 / (_FAILURE["value"] * alpha)))
    m_noise = COVERAGE_DEFAULT * tail / (NOISE_TARGET * float(_ranges(spec, ref.lipschitz)[0]))
    if not (math.isfinite(float(units_per_coverage)) and float(units_per_coverage) > 0):
        raise UsageError(f"`units_per_coverage` must be finite and > 0. Found {units_per_coverage!r}.")
    if units is None:
        return float(max(m_noise, 1.0))
    n = max(float(units), 0.0)
    return float(max(min(max(m_noise, n / float(units_per_coverage)), n / LEAST_RATIO), 1.0))


def _ranges(spec: DomainSpec, lipschitz: np.ndarray) -> np.ndarray:
    """R_j = min(l_j, b_j) for j = 0 (the start) and j = 1..H (steps h = j - 1): the targets' ranges."""
    H = spec.horizon
    R = np.minimum(lipschitz[:H], frame_value_bounds(spec)[:H])
    return np.concatenate([R[:1], R])


def _martingale_width(q_plus: float, q_max: float, a: float) -> float:
    """min over the lambda grid of log(G/a)/lambda + lambda q_plus/8 (Ville's inequality, union over G)."""
    log_term = math.log(_GRID / a)
    lam = math.sqrt(8.0 * log_term / q_max) * np.exp2(np.arange(_GRID))
    return float(np.min(log_term / lam + lam * q_plus / 8.0))


@dataclass(frozen=True)
class LedgerEntry:
    """The ledger entry of one evaluation (``privacy.ledger.charge``)."""

    #: The budget ledger (a path): checked with the event before any row is read, charged once after. None: no
    #: ledger.
    path: str | Path | None = None
    #: The entry's description.
    description: str = "policy evaluation"
    #: The entry's run id, e.g. a pipeline run's (optional).
    run: str | None = None
    #: The entry's output folder, e.g. a pipeline run's (optional).
    output: str | Path | None = None


@dataclass(frozen=True)
class UnitCount:
    """A DP count of the evaluated privacy units, from which :func:`coverage_rule` fixes m (docs/certificates.md).

    The count n (one kept stay per unit) gets exact discrete Gaussian noise of L2 sensitivity 1: under
    substitution n changes only if bounding drops a whole unit, by at most 1. The noisy count depends on
    the stays through n alone, so m = rule(n~) is independent of the stays given n, which the theorem needs.
    """

    budget: Budget
    sigma: float
    unit: PrivacyUnit

    @classmethod
    def plan(cls, budget: Budget, unit: PrivacyUnit) -> "UnitCount":
        return cls(budget, gaussian_sigma(1.0, budget.rho), unit)

    @property
    def event(self) -> GaussianEvent:
        return GaussianEvent(l2=1.0, sigma=self.sigma, family="ope-units", unit=self.unit,
                             neighbouring=Neighbouring.SUBSTITUTION, noise="exact")

    def noisy(self, n: int, *, rng: np.random.Generator) -> int:
        """n + N_Z(0, sigma^2), exact."""
        return int(n) + int(discrete_gaussian_batch([(Fraction(self.sigma) ** 2, 1)], rng=rng)[0][0])


def evaluate_policy_on_logs(logs: str | Path | PreparedLogs, spec: DomainSpec, pi: np.ndarray, *, budget: Budget,
                            coverage: float | None = None, confidence: float = CONFIDENCE_DEFAULT,
                            ledger: str | Path | LedgerEntry | None = None, seed: int | None = None, units=None,
                            engine: str = "polars", spark=None) -> dict:
    """Evaluate policy ``pi`` on the logs with DP: the Python side of ``privaudit evaluate --logs``.

    Parameters
    ----------
    logs : path, PreparedLogs or pyspark DataFrame
        Parquet logs (validated and bounded here, by ``engine``), logs
        already prepared under ``spec`` (polars' ``PreparedLogs``, or the
        Spark engine's prepared logs: a dataclass with ``bounded``, checked
        with its ``check_spec`` when it has one), or a Spark DataFrame of
        raw logs (``engine`` spark).
    spec : DomainSpec
        The logs' spec (any declared reward range).
    pi : ndarray, shape (H, S, A) or (S, A)
        The policy, chosen without these logs (or without the ``units`` part).
    budget : Budget
        Gaussian budget of this evaluation (``privacy.budget.resolve_budget``).
    coverage : float, optional
        Public coverage scale m. None (default): :data:`COUNT_SHARE` of the
        budget releases the number of evaluated units (:class:`UnitCount`)
        and m = :func:`coverage_rule` of that count; the rest evaluates.
    confidence : float
        Level 1 - alpha of the lower bound and of the interval.
    ledger : path or LedgerEntry, optional
        Checked with the event before any row is read; charged once after (a
        path: an entry described "policy evaluation").
    seed : int, optional
        Noise seed, for tests only (the report then says ``seeded-insecure``).
    units : polars expression or Spark column, optional
        A filter on the bounded rows (a public function of the unit id, e.g.
        ``ope.split.in_part``): only those units are evaluated.
    engine : {"polars", "spark"}
        Who reads, checks and bounds ``logs`` when it is a path: polars, or
        Spark (``privaudit.data.engines.prepare_on``; the
        stays' cells are then aggregated on the cluster and only they reach
        the driver). The statistics, hence the output for a given ``seed``,
        are the same with either.
    spark : SparkSession or str, optional
        With ``engine`` spark: the session or a master URL (``local[4]``,
        ``spark://...``, ``sc://...``); default the active session or
        ``local[*]``.

    Returns
    -------
    dict
        :meth:`PolicyEvaluation.certify`'s keys plus ``guarantee``,
        ``mechanism`` (:meth:`PolicyEvaluation.describe`, with
        ``units_released``: the noisy unit count when m came from the rule), ``rng``.

    Raises
    ------
    UsageError
        Bad policy table, budget, coverage or spec (before any row is read).
    BudgetExceededError
        The ledger refuses the evaluation (nothing read, nothing charged).
    LogReadError, ValidationFailed
        Unreadable or invalid logs (nothing charged).
    EngineError
        With Spark: Spark itself failed (one line; nothing charged).
    """
    table = policy_table_for(pi, spec)
    entry = ledger if isinstance(ledger, LedgerEntry) else LedgerEntry(path=ledger)
    if not (0 < float(confidence) < 1):
        raise UsageError(f"`confidence` must lie in (0, 1). Found {confidence!r}.")
    count, part = None, budget
    if coverage is None:  # m from a DP count of the evaluated units (rule fixed before their stays are read)
        if budget.family.pure:
            PolicyEvaluation.plan(spec, budget)  # its one-line error
        parts = budget.split({"count": COUNT_SHARE, "evaluate": 1.0 - COUNT_SHARE})
        part = parts["evaluate"]
        plan = PolicyEvaluation.plan(spec, part, coverage_rule(spec, part, confidence=confidence))
        count = UnitCount.plan(parts["count"], plan.unit)
    else:
        plan = PolicyEvaluation.plan(spec, budget, coverage)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
        raise UsageError(f"`seed` must be a non-negative integer. Found {seed!r}.")
    if engine not in ("polars", "spark"):
        raise UsageError(f"`engine` must be 'polars' or 'spark'. Found {engine!r}.")
    event = _event(plan, count)  # the cost is the budget's whatever m the count gives (noise scales with 1/m)
    budget.guarantee(event)
    if entry.path is not None:
        ledger_mod.check_event(Path(entry.path), spec.dataset_id, event, budget)
    own = None  # logs this call prepares (and closes: Spark drops its cached rows)
    if isinstance(logs, PreparedLogs) or (is_dataclass(logs) and hasattr(logs, "bounded")):  # either engine
        if callable(getattr(logs, "check_spec", None)):
            logs.check_spec(spec)
        bounded = logs.bounded
    else:
        own = prepare_on(engine, logs, spec, spark=spark)
        bounded = own.bounded
    rng = np.random.default_rng(seed)
    try:
        if units is not None:
            bounded = bounded.filter(units)
        stays = held_out_stays(bounded, spec)
    finally:
        if own is not None:
            own.close()
    released = None
    if count is not None:
        released = count.noisy(stays.n_units, rng=rng)
        plan = PolicyEvaluation.plan(spec, part, coverage_rule(spec, part, units=released, confidence=confidence))
        event = _event(plan, count)
    model = capped_model_value(stays, table, spec, plan.coverage)
    del stays
    noisy = plan.noisy(model, rng=rng)
    del model
    out = plan.certify(noisy, confidence)
    if entry.path is not None:
        ledger_mod.charge_event(Path(entry.path), spec.dataset_id, event, entry.description, budget, run=entry.run,
                                output=entry.output)
    mechanism = plan.describe()
    if count is not None:
        mechanism.update(units_released=released, units_sigma=count.sigma, coverage_rule=(
            f"m = min(max(m_noise, n~/{UNITS_PER_COVERAGE:g}), n~/{LEAST_RATIO:g}) on n~, the evaluated units "
            f"counted with {COUNT_SHARE:g} of the budget (sigma {count.sigma:.4g})"))
    out.update(guarantee=budget.guarantee(event), mechanism=mechanism,
               rng="seeded-insecure" if seed is not None else "os-entropy")
    return out


def _event(plan: PolicyEvaluation, count: UnitCount | None):
    """The evaluation's event, with the unit count's leaf first when m came from it."""
    if count is None:
        return plan.event
    return ComposedEvent((count.event, *plan.event.events), label="policy-evaluation")
