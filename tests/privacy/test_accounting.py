"""The accountant (events -> costs, composition, guarantees), budget resolution, conversions (vs dp_accounting)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from privaudit.core.errors import AccountingError, UsageError
from privaudit.privacy.accounting import (Accountant, round_up, dp_to_zcdp, event_epsilon, event_rho, guarantee,
                                          zcdp_to_dp, zcdp_to_dp_simple)
from privaudit.privacy.budget import DEFAULT_REPORT_DELTA, resolve_budget
from privaudit.privacy.events import ComposedEvent, GaussianEvent, LaplaceEvent, PrivacyUnit

dp_accounting = pytest.importorskip("dp_accounting")


UNIT = PrivacyUnit("episode_id", 1)


def _g(l2, sigma, family="visits", unit=UNIT):
    return GaussianEvent(family=family, unit=unit, l2=l2, sigma=sigma)


def _lap(l1, b, family="visits"):
    return LaplaceEvent(family=family, unit=UNIT, l1=l1, b=b)


def test_event_costs_are_exact_and_never_optimistic():
    H, rho = 20, 0.5
    e = _g(2 * math.sqrt(H), math.sqrt(2 * H / rho))  # Qiao & Wang 2023 eq. (1): l2 = 2 sqrt(H), sigma^2 = 2H/rho
    exact = Fraction(e.l2) ** 2 / (2 * Fraction(e.sigma) ** 2)
    assert Fraction(event_rho(e)) >= exact and event_rho(e) == pytest.approx(rho, rel=1e-15)
    assert event_epsilon(_lap(80, 40)) == 2.0
    with pytest.raises(AccountingError, match="pure"):
        event_epsilon(e)


def test_accountant_composes_and_refuses_before_changing_state():
    acc = Accountant()
    acc.compose(_g(1.0, 1.0)).compose(_g(2.0, 2.0, "transitions"))
    assert acc.total_rho() == 1.0
    with pytest.raises(AccountingError, match="pure"):
        acc.total_epsilon()
    other_unit = _g(1.0, 1.0, unit=PrivacyUnit("patient_id", 1))
    assert not acc.supports(other_unit) and not acc.supports("not an event")
    for ev in [other_unit, "not an event", ComposedEvent([_g(1.0, 1.0), other_unit])]:
        with pytest.raises(AccountingError):
            acc.compose(ev)
    assert len(acc.events) == 2 and acc.total_rho() == 1.0
    # mixing: a pure eps-DP event counts as eps^2/2 zCDP (Bun-Steinke Prop. 1.4)
    acc.compose(_lap(1.0, 2.0, "rewards"))
    assert acc.total_rho() == 1.125
    assert acc.epsilon_delta(1e-6) == zcdp_to_dp(acc.total_rho(), 1e-6)
    pure = Accountant().compose(_lap(1.0, 2.0, "a")).compose(_lap(3.0, 2.0, "b"))
    assert pure.total_epsilon() == 2.0 and pure.epsilon_delta(1e-6) == pure.total_epsilon()
    # a pure composition costs (sum eps)^2 / 2 as a whole
    assert pure.total_rho() == 2.0
    # self-composition multiplies
    assert Accountant().compose(_g(1.0, 1.0), count=4).total_rho() == 2.0


def test_guarantee_states_the_bound_only_when_the_event_fits():
    ev = _g(1.0, 1.0)  # rho = 0.5 exactly
    g = guarantee(ev, delta=1e-6, requested={"rho": 0.5}, bound=0.5)
    assert g["rho"] == 0.5 and g["epsilon"] == zcdp_to_dp(0.5, 1e-6) and "default reporting delta" in g["conversion"]
    assert guarantee(ev, delta=1e-5, requested={"rho": 0.5, "delta": 1e-5})["rho"] == 0.5
    with pytest.raises(AccountingError, match="above the budget"):
        guarantee(ev, delta=1e-6, requested={"rho": 0.4}, bound=0.4)
    # exact: one ulp below the cost is refused (no float slack, BOUND_RTOL = 0)
    with pytest.raises(AccountingError, match="above the budget"):
        guarantee(ev, delta=1e-6, requested={"rho": 0.5}, bound=float(np.nextafter(0.5, 0.0)))
    p = guarantee(_lap(1.0, 0.5), delta=0.0, requested={"epsilon": 2.0}, bound=2.0)
    assert p["definition"] == "pure-DP" and p["epsilon"] == 2.0 and p["rho"] == 2.0 and p["delta"] == 0.0


def test_budget_resolution():
    b = resolve_budget(rho=0.3)
    assert (b.mechanism, b.rho, b.delta, b.requested) == ("gaussian", 0.3, DEFAULT_REPORT_DELTA, {"rho": 0.3})
    e = resolve_budget(epsilon=4.0, delta=1e-6)
    assert zcdp_to_dp(e.rho, 1e-6) <= 4.0 and e.delta == 1e-6
    lap = resolve_budget(epsilon=2.0, mechanism="laplace")
    assert (lap.rho, lap.epsilon, lap.delta, lap.amount) == (2.0, 2.0, 0.0, 2.0)
    part = e.part(0.25)
    exact = Fraction(e.rho) / 4
    assert Fraction(part.rho) <= exact and exact - Fraction(part.rho) <= exact * Fraction(1, 10 ** 15)
    assert part.delta == 1e-6 and part.requested == {"rho": part.rho, "delta": 1e-6}
    assert resolve_budget(rho=1).part(0.3).rho == 0.3  # short as written, never above the exact share


@pytest.mark.parametrize("rho", [1.0, 0.7, 0.3, 0.1, 2.5, 1e-3, 0.31106495494026376])
@pytest.mark.parametrize("share", [0.5, 0.3, 0.25, 0.1, 1 / 3])
def test_budget_split_never_exceeds_the_whole_and_states_it(rho, share):
    """The parts' calibrations add up exactly to at most rho (as a double and as the decimal it prints as);
    each part states its exact decimal share, the stated decimals add up to rho exactly, and a stated part is
    never below what its noise is calibrated to (so the statement bounds the cost)."""
    b = resolve_budget(rho=rho)
    parts = b.split({"release": 1 - share, "dp-vapvi": share})
    total = sum(Fraction(p.rho) for p in parts.values())
    assert total <= Fraction(rho) and total <= Fraction(repr(rho))
    assert round_up(total) <= rho and round_up(total) >= rho * (1 - 1e-15)
    shown = [Fraction(repr(p.shown)) for p in parts.values()]
    assert sum(shown) <= Fraction(repr(rho))  # the ledger adds these decimals: at most rho (exactly, below)
    for p, s in zip(parts.values(), (1 - share, share)):
        assert Fraction(p.rho) <= min(Fraction(p.shown), Fraction(repr(p.shown)))  # never calibrated above it
        assert Fraction(p.shown) - Fraction(p.rho) <= Fraction(p.shown) * Fraction(1, 10 ** 15)
        assert p.requested["rho"] == p.shown
    if share != 1 / 3:  # decimal shares of a decimal rho state exact decimals: 0.3 and 0.7 of 1, not 0.30000000000000004
        want = [Fraction(repr(rho)) * Fraction(repr(1 - share)), Fraction(repr(rho)) * Fraction(repr(share))]
        if all(len(str(float(w))) <= 12 for w in want):
            assert shown == want and sum(shown) == Fraction(repr(rho)), parts


def test_budget_split_of_four_decimal_shares_is_exact():
    """0.14 + 0.26 + 0.5 + 0.1 of rho = 1 (the pipeline with DP-VAPVI and DP-PBB): each part states its decimal
    (before: the last was 0.0999999999999999 because the doubles of 0.14, 0.26 and 0.1 lie above the decimals)."""
    parts = resolve_budget(rho=1).split({"release": 0.14, "dp-pbb": 0.26, "dp-vapvi": 0.5, "value": 0.1})
    assert [p.shown for p in parts.values()] == [0.14, 0.26, 0.5, 0.1]
    assert sum(Fraction(p.rho) for p in parts.values()) <= 1
    assert parts["value"].rho < 0.1 and parts["value"].stated == 0.1  # calibrated just below 1/10, states 0.1
    b = resolve_budget(rho=1)
    with pytest.raises(UsageError, match="add up to 1"):
        b.split({"a": 0.5, "b": 0.6})
    for bad in [dict(rho=-1), dict(epsilon=1, delta=1.5), dict(epsilon=1, mechanism="gaussian"),
                dict(epsilon=1, families=("gaussian",)), dict(delta=1e-5), dict(rho=1, epsilon=1),
                dict(rho=1, mechanism="laplace"), dict(epsilon=1, delta=1e-5, mechanism="laplace"),
                dict(rho=1, mechanism="cauchy"), dict(rho=5e-324), dict(rho=1e-300),
                dict(epsilon=1e-300, mechanism="laplace"), dict(epsilon=1e-6, mechanism="laplace")]:
        with pytest.raises(UsageError):
            resolve_budget(**bad)


RHOS = [1e-4, 0.01, 0.1, 0.5, 1.0, 5.0, 50.0]
DELTAS = [1e-12, 1e-8, 1e-5, 1e-2]


@pytest.mark.parametrize("rho", RHOS)
@pytest.mark.parametrize("delta", DELTAS)
def test_cks_against_dp_accounting_rdp(rho, delta):
    # A Gaussian of noise multiplier sigma is (alpha, alpha / (2 sigma^2))-RDP, i.e.
    # rho-zCDP with rho = 1 / (2 sigma^2). dp_accounting applies the same CKS
    # Prop. 12 conversion over a finite grid of orders, so its eps is >= ours and
    # close to it on a fine grid.
    sigma = math.sqrt(1 / (2 * rho))
    orders = np.concatenate([1.0 + np.geomspace(0.011, 1e5, 6000)])
    acc = dp_accounting.rdp.RdpAccountant(orders=list(orders))
    acc.compose(dp_accounting.GaussianDpEvent(noise_multiplier=sigma))
    theirs = acc.get_epsilon(delta)
    ours = zcdp_to_dp(rho, delta)
    assert ours <= theirs * (1 + 1e-9)
    assert theirs <= ours * (1 + 2e-3)
    assert ours <= zcdp_to_dp_simple(rho, delta)


@pytest.mark.parametrize("rho,delta", [(0.05, 1e-6), (0.5, 1e-5), (2.0, 1e-8)])
def test_cks_is_above_the_exact_gaussian_pld(rho, delta):
    # zCDP -> DP is an upper bound for the Gaussian mechanism, whose exact
    # (eps, delta) curve the PLD accountant computes (pessimistic discretisation).
    sigma = math.sqrt(1 / (2 * rho))
    pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    pld.compose(dp_accounting.GaussianDpEvent(noise_multiplier=sigma))
    exact = pld.get_epsilon(delta)
    ours = zcdp_to_dp(rho, delta)
    assert exact <= ours
    assert ours < 1.6 * exact  # and not absurdly loose


def _cks_longdouble(alpha, rho, delta):
    a = np.asarray(alpha, dtype=np.longdouble)
    L = np.log(np.longdouble(1) / np.longdouble(delta))
    return a * np.longdouble(rho) + (L - np.log(a)) / (a - 1) + np.log1p(-1 / a)


def test_cks_strictly_improves_simple_and_is_the_infimum():
    for rho in RHOS:
        for delta in DELTAS:
            ours = zcdp_to_dp(rho, delta)
            simple = zcdp_to_dp_simple(rho, delta)
            if ours == 0.0:  # (0, delta)-DP: the KL case, also 0 in dp_accounting
                assert rho < 1e-3 and delta >= 1e-2
                continue
            assert ours < simple
            # brute force: coarse grid over alpha, then a fine long-double grid around
            # its minimum. ours is a true value of the bound rounded up by 1e-12, so
            # it lies in [inf, inf * (1 + 2e-12)] up to the grid's own resolution.
            alpha = 1 + np.geomspace(1e-9, 1e9, 20_001)
            j = int(np.argmin(_cks_longdouble(alpha, rho, delta)))
            fine = np.linspace(alpha[max(j - 1, 0)], alpha[j + 1], 200_001)
            inf_ = float(_cks_longdouble(fine, rho, delta).min())
            assert inf_ * (1 - 1e-13) <= ours <= inf_ * (1 + 3e-12)


def test_known_value():
    # rho = 1, delta = 1e-6: simple conversion 1 + 2 sqrt(log 1e6) = 8.4338...
    assert zcdp_to_dp_simple(1.0, 1e-6) == pytest.approx(1 + 2 * math.sqrt(6 * math.log(10)))
    assert zcdp_to_dp(0.0, 1e-6) == 0.0


@pytest.mark.parametrize("eps", [0.1, 1.0, 3.0, 10.0])
@pytest.mark.parametrize("delta", [1e-9, 1e-5])
def test_round_trips(eps, delta):
    rho = dp_to_zcdp(eps, delta)
    back = zcdp_to_dp(rho, delta)
    assert back <= eps and back == pytest.approx(eps, rel=1e-9)
    assert dp_to_zcdp(zcdp_to_dp(0.3, delta), delta) == pytest.approx(0.3, rel=1e-9)
    # the tight conversion allows a larger rho than inverting the simple one
    assert rho > (math.sqrt(math.log(1 / delta) + eps) - math.sqrt(math.log(1 / delta))) ** 2 * (1 - 1e-12)


@pytest.mark.parametrize("bad", [dict(rho=-1, delta=1e-5), dict(rho=1, delta=0), dict(rho=1, delta=1),
                                 dict(rho=float("nan"), delta=0.1)])
def test_conversion_bad_input(bad):
    with pytest.raises(UsageError):
        zcdp_to_dp(**bad)
    with pytest.raises(UsageError):
        zcdp_to_dp_simple(**bad)
    with pytest.raises(UsageError):
        dp_to_zcdp(0.0, 1e-5)


def test_never_below_a_high_precision_infimum_where_terms_cancel():
    # At tiny rho the optimal alpha is huge and the terms of the CKS formula nearly cancel:
    # double-precision evaluation alone under-reported eps by ~1e-10 relative (review finding).
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 40

    def true_inf(rho, delta):
        L, r = mp.log(1 / mp.mpf(delta)), mp.mpf(rho)
        f = lambda x: (1 + mp.e ** x) * r + (L - mp.log1p(mp.e ** x)) / mp.e ** x + (x - mp.log1p(mp.e ** x))  # noqa: E731
        x0 = min((mp.mpf(-25) + mp.mpf(70) * i / 2000 for i in range(2001)), key=f)
        return min(f(mp.findroot(lambda x: mp.diff(f, x), x0)), f(x0))

    for rho, delta in [(1e-12, 1e-12), (1e-9, 1e-10), (1e-6, 1e-12), (1.0, 1e-6)]:
        exact = true_inf(rho, delta)
        ours = zcdp_to_dp(rho, delta)
        assert mp.mpf(ours) >= exact
        assert ours <= float(exact) * (1 + 1e-6)  # and still tight
