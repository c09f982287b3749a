"""Numbers printed as users write them: ``1e-6`` (not ``1e-06``), ``1`` (not ``1.0000000000000002``).

Two kinds of printing:

* :func:`num` rounds to nearest, for figures whose direction does not matter
  (a noise scale, a value);
* :func:`bound` rounds an exact amount *in the safe direction* (an amount
  spent or wanted up, an amount remaining down), for budget figures: the
  printed number is never more optimistic than the exact one.
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal
from fractions import Fraction


def num(x: float, sig: int = 6) -> str:
    """``x`` with at most ``sig`` significant digits, no trailing zeros, no zero-padded exponent.

    Examples: 1e-06 -> "1e-6", 1.0000000000000002 -> "1", 4.999999999999816 -> "5",
    7.76614 (sig=4) -> "7.766", 2.5e+20 -> "2.5e20".
    """
    s = f"{float(x):.{sig}g}"
    mant, _, exp = s.partition("e")
    return f"{mant}e{int(exp)}" if exp else mant


def bound(x, direction: str, sig: int = 6) -> str:
    """``x`` (exact: a Fraction, int, float or decimal string) as a short decimal rounded the safe way.

    Parameters
    ----------
    x : Fraction, int, float or str
        The exact amount (a float is taken at its exact binary value).
    direction : {"up", "down"}
        ``"up"``: the printed value is >= x (amounts spent, wanted, costs);
        ``"down"``: <= x (amounts remaining).
    sig : int
        Most significant digits printed (>= 1).

    Returns
    -------
    str
        The exact value when it has at most ``sig`` significant digits
        (``"0.25"``, ``"1e-300"``), else the value rounded to ``sig``
        significant digits towards ``direction``, prefixed by ``"~"`` only
        when rounding happened: ``bound(Fraction(1) - Fraction("1e-300"), "down")``
        is ``"~0.999999"``; ``"up"`` gives ``"~1"``.

    Raises
    ------
    ValueError
        ``direction`` other than "up"/"down", ``sig`` < 1, or a value that is
        not a finite number.
    """
    if direction not in ("up", "down"):
        raise ValueError(f"`direction` must be 'up' or 'down'. Found {direction!r}.")
    if isinstance(sig, bool) or not isinstance(sig, int) or sig < 1:
        raise ValueError(f"`sig` must be an integer >= 1. Found {sig!r}.")
    if isinstance(x, float) and not math.isfinite(x):
        raise ValueError(f"`x` must be a finite number. Found {x!r}.")
    q = Fraction(x) if not isinstance(x, str) else Fraction(x.strip())
    if q == 0:
        return "0"
    # exact decimal of q when it has at most sig significant digits: q * 10^k an integer of <= sig digits
    mag = _floor_log10(abs(q))
    scaled = abs(q) * Fraction(10) ** (sig - 1 - mag)  # in [10^(sig-1), 10^sig)
    exact = scaled.denominator == 1 and scaled < 10 ** sig
    ctx = Context(prec=sig, rounding=ROUND_CEILING if direction == "up" else ROUND_FLOOR)
    d = ctx.divide(Decimal(q.numerator), Decimal(q.denominator))  # exact when ``exact``
    text = _short(d)
    return text if exact else "~" + text


def _floor_log10(q: Fraction) -> int:
    """floor(log10(q)) of a positive rational, exactly."""
    k = len(str(q.numerator)) - len(str(q.denominator))
    while Fraction(10) ** k > q:
        k -= 1
    while Fraction(10) ** (k + 1) <= q:
        k += 1
    return k


def _short(d: Decimal) -> str:
    """A Decimal as users write it: no trailing zeros, plain notation for 1e-4 <= |d| < 1e16."""
    d = d.normalize()
    if d == 0:
        return "0"
    if Decimal("1e-4") <= abs(d) < Decimal("1e16"):
        s = format(d, "f")
        return s.rstrip("0").rstrip(".") if "." in s else s
    mant, _, exp = format(d, "e").partition("e")
    return f"{mant}e{int(exp)}"
