"""When k (episodes per privacy unit) makes a noise scale too large: say so, with the largest k that fits.

Every sensitivity grows with k = ``privacy_unit.max_episodes`` (Qiao & Wang 2023 and the counts of
``privaudit.privacy.sensitivity``: a unit changes up to k episodes), and the exact samplers draw a
Gaussian only up to a largest scale (``privaudit.privacy.sampler_laws.GAUSSIAN_SIGMA_MAX``). A spec
declaring k = 10^12 then failed with "the privacy budget is too small", true but misleading: no
reasonable budget fits, k does not. :func:`k_bound` re-plans at smaller k to find the largest that
fits this budget and says that instead.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

from privaudit.core.errors import NoiseScaleTooLarge

__all__ = ["k_bound", "largest_fitting_k"]


def largest_fitting_k(k: int, fits: Callable[[int], bool]) -> int:
    """The largest k' in [1, k) with ``fits(k')`` (0: not even k' = 1), by bisection.

    ``fits`` must be monotone (true up to some k', false above): noise scales grow with k.
    About log2(k) calls of ``fits``.
    """
    if k <= 1 or not fits(1):
        return 0
    lo, hi = 1, k  # fits(lo), not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


@contextmanager
def k_bound(k: int, budget: str, what: str, plan_at: Callable[[int], object]) -> Iterator[None]:
    """Turn :class:`NoiseScaleTooLarge` raised inside into "k is too large" when a smaller k would fit.

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
        ``plan_at(k')`` plans the same part with k' episodes per unit (raises
        :class:`NoiseScaleTooLarge` when a scale does not fit).

    Raises
    ------
    NoiseScaleTooLarge
        The original error when even k = 1 does not fit (the budget is too
        small), or one naming k and the largest k that fits.
    """
    try:
        yield
    except NoiseScaleTooLarge:
        def fits(kk: int) -> bool:
            try:
                plan_at(kk)
            except NoiseScaleTooLarge:
                return False
            return True

        try:
            k_max = largest_fitting_k(int(k), fits)
        except Exception:  # another refusal at a smaller k (e.g. a cell cap above it): cannot tell; as it was
            k_max = 0
        if k_max == 0:
            raise
        raise NoiseScaleTooLarge(
            f"k = {k} episodes per privacy unit (the spec's privacy_unit.max_episodes) is too large for {what} at "
            f"{budget}: its noise scales grow with k, and at this budget k = {k_max} is the largest whose "
            "scales the exact sampler can draw. Declare the k your logs need (a unit's episodes beyond k are "
            "dropped before counting), or give a larger budget.") from None
