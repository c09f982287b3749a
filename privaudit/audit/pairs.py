"""The neighbouring pair (D, D') an audit runs on, and the visit counts its checks compare.

privaudit's neighbouring relation is substitution: D' is D with all the data
of one privacy unit replaced by other data (docs/privacy.md). Pairs are built
by :mod:`privaudit.audit.neighbours` (canaries),
:mod:`privaudit.audit.synthetic_pairs` (from the spec alone) or read and
checked by :mod:`privaudit.audit.explicit_pairs`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from privaudit.core.spec import DomainSpec


@dataclass(frozen=True)
class NeighbouringPair:
    """Two datasets that differ in one privacy unit (substitution).

    Attributes
    ----------
    d : polars.DataFrame
        D, standard trajectory schema.
    d_prime : polars.DataFrame
        D', same schema.
    description : dict
        JSON-able: ``kind`` (``canary-rare``, ``canary-random``, ``explicit``,
        ``identical``), ``relation`` (``substitution``), the removed unit (as
        its row count only: neither its id nor a hash of it), the canary
        episode's steps.
    """

    d: pl.DataFrame
    d_prime: pl.DataFrame
    description: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"NeighbouringPair(kind={self.description.get('kind')!r}, rows={self.d.height}/{self.d_prime.height})"


def unit_column(df: pl.DataFrame) -> str:
    return "unit_id" if "unit_id" in df.columns else "episode_id"


def visits_change(d: pl.DataFrame, d_prime: pl.DataFrame, spec: DomainSpec, k: int, pooled: bool) -> dict:
    """L2 change of the visits between D and D' (raw rows) against the declared sensitivity.

    Declared (a unit of k episodes of H steps, docs/privacy.md):
    k sqrt(2H) per step h, k H sqrt(2) pooled over h. A warning is added when
    the pair falls short (the removed unit has fewer or shorter episodes, or
    episodes in different cells): the audit then tests a weaker pair.
    """
    H, S, A = spec.horizon, spec.n_states, spec.n_actions
    diff = visit_counts(d_prime, H, S, A) - visit_counts(d, H, S, A)
    if pooled:
        diff = diff.sum(axis=0)
    achieved = float(np.sqrt((diff.astype(np.float64) ** 2).sum()))
    declared = float(k * H * np.sqrt(2)) if pooled else float(k * np.sqrt(2 * H))
    out = {"statistic": "visits pooled over h" if pooled else "visits per step h",
           "l2": achieved, "declared_l2": declared}
    if achieved < declared * (1 - 1e-9):
        out["warning"] = (f"the canary pair changes the {out['statistic']} by L2 {achieved:.4g}, below the declared "
                          f"sensitivity {declared:.4g} (k={k}, H={H}): no unit of D has {k} full-length "
                          "episode(s) in the same cells, so this audit tests a weaker pair than the worst case")
    return out


def visit_counts(logs: pl.DataFrame, H: int, S: int, A: int) -> np.ndarray:
    """n_h(s, a) of D over the declared domain (rows outside it are ignored)."""
    cells = (logs.filter((pl.col("step") < H) & pl.col("state").is_between(0, S - 1)
                         & pl.col("action").is_between(0, A - 1))
             .group_by("step", "state", "action").len())
    out = np.zeros((H, S, A), dtype=np.int64)
    out[cells["step"].to_numpy(), cells["state"].to_numpy(), cells["action"].to_numpy()] = cells["len"].to_numpy()
    return out
