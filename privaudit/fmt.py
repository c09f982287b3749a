"""Numbers printed as users write them: ``1e-6`` (not ``1e-06``), ``1`` (not ``1.0000000000000002``)."""

from __future__ import annotations


def num(x: float, sig: int = 6) -> str:
    """``x`` with at most ``sig`` significant digits, no trailing zeros, no zero-padded exponent.

    Examples: 1e-06 -> "1e-6", 1.0000000000000002 -> "1", 4.999999999999816 -> "5",
    7.76614 (sig=4) -> "7.766", 2.5e+20 -> "2.5e20".
    """
    s = f"{float(x):.{sig}g}"
    mant, _, exp = s.partition("e")
    return f"{mant}e{int(exp)}" if exp else mant
