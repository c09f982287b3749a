"""When k (episodes per privacy unit) or H makes a noise scale too large: say so, with the largest that fits.

Every sensitivity grows with k = ``privacy_unit.max_episodes`` (Qiao & Wang 2023 and the counts of
``privaudit.privacy.sensitivity``: a unit changes up to k episodes), and the exact samplers draw a
Gaussian only up to a largest scale (``privaudit.privacy.sampler_laws.GAUSSIAN_SIGMA_MAX``). A spec
declaring k = 10^12 then failed with "the privacy budget is too small", true but misleading: no
reasonable budget fits, k does not. :func:`k_bound` re-plans at smaller k to find the largest that
fits this budget and says that instead. The count release's sensitivities also grow with the horizon H
(pooled over h, a unit's k episodes of H steps each: ``count_sensitivity``); a spec declaring H = 10^12
got the same "budget too small" message, so when k = 1 or no smaller k fits, :func:`k_bound` re-plans at
smaller H the same way and names H (with k, and the largest H that fits at this k).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

from privaudit.core.errors import NoiseScaleTooLarge

__all__ = ["k_bound", "largest_fitting_k"]

_K = "episodes per privacy unit (the spec's privacy_unit.max_episodes)"
_H = "steps per episode (the spec's horizon H)"


def largest_fitting_k(k: int, fits: Callable[[int], bool]) -> int:
    """The largest k' in [1, k) with ``fits(k')`` (0: not even k' = 1), by bisection.

    ``fits`` must be monotone (true up to some k', false above): noise scales grow with k (and with H, for
    which it serves as well). About log2(k) calls of ``fits``.
    """
    if k <= 1 or not fits(1):
        return 0
    lo, hi = 1, k  # fits(lo), not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


@contextmanager
def k_bound(k: int, budget: str, what: str, plan_at: Callable[[int, int | None], object],
            H: int | None = None) -> Iterator[None]:
    """Turn :class:`NoiseScaleTooLarge` raised inside into "k is too large" or "H is too large" when a smaller one fits.

    First a smaller k at the spec's H (the message of session 13, unchanged); when none fits (k = 1 already,
    or the budget is too small even at k = 1) and ``H`` is given, a smaller H at the spec's k. Each search is
    a bisection of about log2(k) or log2(H) plans (``probe`` plans: no sampler tables are built).

    Parameters
    ----------
    k : int
        The spec's episodes per privacy unit.
    budget : str
        The budget of the planned part as commands print it (``Budget.text``: ``rho=1``,
        ``pure epsilon=1``), for the message.
    what : str
        What is planned ("the count release", "DP-PBB"), for the message.
    plan_at : callable
        ``plan_at(k', H')`` plans the same part with k' episodes per unit and horizon H' (raises
        :class:`NoiseScaleTooLarge` when a scale does not fit); ``H'`` is ``H`` unless H is searched.
    H : int, optional
        The spec's horizon, when the planned scales grow with it (then searched too); None: k only.

    Raises
    ------
    NoiseScaleTooLarge
        The original error when nothing smaller fits (the budget is too small), else one naming k and
        the largest k that fits, or H and k and the largest H that fits at this k (at k = 1 when k and
        H are too large only together).
    """
    try:
        yield
    except NoiseScaleTooLarge:
        def fits(kk: int, hh: int | None) -> bool:
            try:
                plan_at(kk, hh)
            except NoiseScaleTooLarge:
                return False
            return True

        def largest(n: int, at: Callable[[int], bool]) -> int:
            try:
                return largest_fitting_k(int(n), at)
            except Exception:  # another refusal at a smaller value (e.g. a cell cap above it): cannot tell
                return 0

        k_max = largest(k, lambda kk: fits(kk, H))
        if k_max > 0:
            raise NoiseScaleTooLarge(
                f"k = {k} {_K} is too large for {what} at {budget}: its noise scales grow with k, and at this "
                f"budget k = {k_max} is the largest whose scales the exact sampler can draw. Declare the k your "
                "logs need (a unit's episodes beyond k are dropped before counting), or give a larger budget.") \
                from None
        if H is None:
            raise
        h_max, at_k = largest(H, lambda hh: fits(k, hh)), k
        if h_max == 0 and k > 1:  # neither alone: k and H together (at k = 1, the largest H)
            h_max, at_k = largest(H, lambda hh: fits(1, hh)), 1
        if h_max == 0:
            raise
        together = "" if at_k == k else " (together: no smaller k fits at this H, nor a smaller H at this k)"
        raise NoiseScaleTooLarge(
            f"H = {H} {_H} is too large for {what} at {budget} with k = {k} {_K}{together}: its noise scales "
            f"grow with H and k, and at this budget and k = {at_k}, H = {h_max} is the largest whose scales the "
            "exact sampler can draw. Declare the H your episodes need (steps h >= H are dropped before "
            "counting) and the k your logs need, or give a larger budget.") from None
