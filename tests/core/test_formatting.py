"""privaudit.core.formatting: short numbers; budget amounts rounded in the safe direction (checked against Fraction)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from privaudit.core.formatting import bound, num


@pytest.mark.parametrize("x, direction, want", [
    (Fraction(1) - Fraction(1, 10 ** 300), "down", "~0.999999"),
    (Fraction(1) - Fraction(1, 10 ** 300), "up", "~1"),
    (Fraction(1, 10 ** 300), "up", "1e-300"),
    (Fraction(1, 4), "down", "0.25"),
    (Fraction(1, 3), "up", "~0.333334"),
    (Fraction(1, 3), "down", "~0.333333"),
    (Fraction(-1, 3), "up", "~-0.333333"),
    (Fraction(123456789), "down", "~123456000"),
    (Fraction(3, 200000), "down", "1.5e-5"),
    (0.25, "up", "0.25"),
    (0, "up", "0"),
])
def test_bound_examples(x, direction, want):
    assert bound(x, direction) == want


def test_bound_is_never_on_the_wrong_side_and_is_tight():
    rng = np.random.default_rng(3)
    for _ in range(500):
        x = Fraction(int(rng.integers(1, 10 ** 12)), int(rng.integers(1, 10 ** 12))) * Fraction(10) ** int(
            rng.integers(-30, 30))
        up, down = bound(x, "up"), bound(x, "down")
        u, d = Fraction(up.lstrip("~")), Fraction(down.lstrip("~"))
        assert d <= x <= u
        assert (u - d) <= x * Fraction(2, 10 ** 5)  # 6 significant digits: one unit of the 6th apart at most
        assert up.startswith("~") == (u != x) and down.startswith("~") == (d != x)


def test_bound_refuses_bad_arguments():
    with pytest.raises(ValueError, match="direction"):
        bound(1, "nearest")
    with pytest.raises(ValueError, match="sig"):
        bound(1, "up", sig=0)


def test_num_examples():
    assert num(1e-06) == "1e-6" and num(1.0000000000000002) == "1" and num(7.76614, 4) == "7.766"


@pytest.mark.parametrize("x, want", [
    (3.9999999999999343, "4"),            # float noise of a composed epsilon: rounded up, never shown
    (7.766216625319529, "7.767"),         # epsilon of rho = 1 at delta 1e-6: up, so never below the stated one
    (0.10825636382285353, "0.1083"),      # rho converted from (2, 1e-5)
    (0.1, "0.1"), (0.5, "0.5"), (2.0, "2"),  # a float is read at its decimal (0.1 is not 0.1000000000000000055...)
    (1e-06, "1e-6"), (1e-5, "1e-5"), (0.0, "0"), (1e-300, "1e-300"),
])
def test_privacy_param_four_digits_rounded_up(x, want):
    from privaudit.core.formatting import privacy_param
    assert privacy_param(x) == want
    assert Fraction(want) >= Fraction(repr(x))  # never more optimistic than the stated figure


def test_guarantee_text_is_the_one_form():
    from privaudit.core.formatting import guarantee_text
    assert guarantee_text({"definition": "zCDP", "rho": 1.0, "epsilon": 7.766216625319529, "delta": 1e-06}) \
        == "rho=1 zCDP => (epsilon=7.767, delta=1e-6)-DP"
    assert guarantee_text({"definition": "pure-DP", "rho": 2.0, "epsilon": 2.0, "delta": 0.0}) \
        == "(epsilon=2, delta=0)-DP (pure; ledger charge rho=2)"
    assert guarantee_text({"rho": None, "epsilon": 2.0, "delta": 0.0}, "JDP") == "(epsilon=2, delta=0)-JDP (pure)"
    assert guarantee_text({"rho": None, "epsilon": 1.0, "delta": 1e-5}) == "(epsilon=1, delta=1e-5)-DP"  # a claim
