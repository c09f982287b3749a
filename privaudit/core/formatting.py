"""Numbers printed as users write them: ``1e-6`` (not ``1e-06``), ``1`` (not ``1.0000000000000002``).

Two kinds of printing:

* :func:`num` rounds to nearest, for figures whose direction does not matter
  (a noise scale, a value);
* :func:`bound` rounds an exact amount *in the safe direction* (an amount
  spent or wanted up, an amount remaining down), for budget figures: the
  printed number is never more optimistic than the exact one.

A privacy guarantee on screen is printed by one function, :func:`guarantee_text`
(its numbers by :func:`privacy_param`: :data:`PRIVACY_DIGITS` significant
digits, rounded up); the JSON artifacts keep full precision.
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal
from fractions import Fraction
from typing import Mapping

#: Significant digits of every privacy parameter (rho, epsilon, delta) printed on screen, in every command.
PRIVACY_DIGITS = 4


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


def privacy_param(x) -> str:
    """A privacy parameter (rho, epsilon, delta) as every command prints it.

    At most :data:`PRIVACY_DIGITS` significant digits, rounded *up* (a printed
    rho, epsilon or delta is never smaller, i.e. never more optimistic, than
    the exact one; a float is taken at the shortest decimal that reads back as
    it, so 0.1 prints as "0.1"), exact when it is that short, no float noise and no
    zero-padded exponent: 0.5 -> "0.5", 3.9999999999999343 -> "4",
    5.22159 -> "5.222", 1e-06 -> "1e-6", 0.10825636 -> "0.1083". The JSON
    artifacts keep the full double.

    Raises
    ------
    ValueError
        A value that is not a finite number.
    """
    if isinstance(x, float) and not math.isfinite(x):
        raise ValueError(f"`x` must be a finite number. Found {x!r}.")
    # a float at the decimal it prints as (0.1 is the user's 1/10, not the double just above it)
    return bound(repr(float(x)) if isinstance(x, float) else x, "up", PRIVACY_DIGITS).lstrip("~")


def guarantee_text(g: Mapping, notion: str = "DP") -> str:
    """A stated guarantee in the one form every command prints.

    Parameters
    ----------
    g : mapping
        ``rho``, ``epsilon``, ``delta`` (and optionally ``definition``): a
        release or policy guarantee (``privaudit.privacy.accounting.guarantee``),
        an explore run's record or the pipeline's composed guarantee. Pure DP
        when ``definition`` is "pure-DP" or ``delta`` is 0.
    notion : str
        "DP", or "JDP" for an explorer's joint-DP guarantee.

    Returns
    -------
    str
        zCDP: ``rho=0.5 zCDP => (epsilon=5.222, delta=1e-6)-DP``; pure DP:
        ``(epsilon=2, delta=0)-DP (pure; ledger charge rho=2)`` (no rho for a
        pure record that states none); an (epsilon, delta) record without a
        rho (an audit claim): ``(epsilon=1, delta=1e-5)-DP``. Numbers by
        :func:`privacy_param`.
    """
    eps, delta, rho = g.get("epsilon"), g.get("delta"), g.get("rho")
    pure = g.get("definition") == "pure-DP" or delta == 0
    head = f"(epsilon={privacy_param(eps)}, delta={privacy_param(delta)})-{notion}"
    if pure:
        return f"{head} (pure" + (f"; ledger charge rho={privacy_param(rho)})" if rho is not None else ")")
    return head if rho is None else f"rho={privacy_param(rho)} zCDP => {head}"
