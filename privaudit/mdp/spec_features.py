"""The feature map a domain spec names (``$.features``), built from public facts only.

Separate from :mod:`privaudit.mdp.features` (the maps themselves) because the
synthetic-linear map lives in :mod:`privaudit.mdp.synthetic_linear`, which
builds on ``features``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from privaudit.core.errors import SpecError
from privaudit.mdp.features import FeatureMap, one_hot_features, state_table_x_action
from privaudit.mdp.synthetic_linear import N_ACTIONS, N_STATES, synthetic_linear_features


def read_state_table(ref: str, base: Path | None) -> np.ndarray:
    """Read a public (S, m) table from ``path.npy`` or ``path.npz:key`` (relative to ``base``).

    Raises
    ------
    SpecError
        The file cannot be read, or the ``.npz`` has no array ``key``.
    """
    path, key = ref.rsplit(":", 1) if ".npz:" in ref else (ref, "")
    p = Path(path)
    if not p.is_absolute() and base is not None:
        p = base / p
    try:
        if p.suffix == ".npz":
            with np.load(p, allow_pickle=False) as z:
                if key not in z.files:
                    raise SpecError(f"spec $.features.state_table: {p} has no array {key!r} "
                                    f"(arrays: {sorted(z.files)}); write it as 'file.npz:key'.")
                return np.array(z[key], dtype=np.float64)
        return np.array(np.load(p, allow_pickle=False), dtype=np.float64)
    except OSError as e:
        raise SpecError(f"spec $.features.state_table: cannot read {p}: {e}") from None


def feature_map_from_spec(spec) -> FeatureMap:
    """Build the feature map named by ``spec.features`` (schemas/spec.schema.json).

    Parameters
    ----------
    spec : DomainSpec
        Its ``features`` object: ``map`` one of ``one-hot``, ``synthetic-linear``,
        ``state-table-x-action`` (with ``state_table``, optional
        ``projection_dim``, ``projection_seed``); ``norm`` (default rescale).

    Returns
    -------
    FeatureMap
        Over the spec's S states and A actions.

    Raises
    ------
    SpecError
        If the spec has no ``features``, names ``column-x-action`` (row
        features are not supported by the finite-state learners yet), the map
        does not fit (S, A), or ``dim`` disagrees with the map.
    """
    f = spec.features
    if not f:
        raise SpecError("spec has no $.features object; linear learners need one, e.g. "
                        '{"map": "one-hot"} or {"map": "state-table-x-action", "state_table": "x.npy"}.')
    kind, norm = f["map"], f.get("norm", "rescale")
    if kind == "one-hot":
        fmap = one_hot_features(spec.n_states, spec.n_actions)
    elif kind == "synthetic-linear":
        if (spec.n_states, spec.n_actions) != (N_STATES, N_ACTIONS):
            raise SpecError(f"spec $.features.map synthetic-linear needs S={N_STATES}, A={N_ACTIONS}. "
                            f"Found S={spec.n_states}, A={spec.n_actions}.")
        fmap = synthetic_linear_features(norm=norm)
    elif kind == "state-table-x-action":
        if "state_table" not in f:
            raise SpecError("spec $.features.state_table is required for state-table-x-action "
                            "(a public .npy or .npz:key file of shape (S, m)).")
        base = spec.source.parent if spec.source is not None else None
        X = read_state_table(f["state_table"], base)
        if X.ndim != 2 or X.shape[0] != spec.n_states:
            raise SpecError(f"spec $.features.state_table must have shape (S={spec.n_states}, m). Found {X.shape}.")
        fmap = state_table_x_action(X, spec.n_actions, projection_dim=f.get("projection_dim"),
                                    projection_seed=f.get("projection_seed", 0), norm=norm)
        fmap.settings["state_table"] = f["state_table"]
    else:
        raise SpecError(f"spec $.features.map {kind!r} is not supported by the linear learners "
                        "(supported: one-hot, synthetic-linear, state-table-x-action).")
    if "dim" in f and int(f["dim"]) != fmap.dim:
        raise SpecError(f"spec $.features.dim = {f['dim']} but the {kind} map has d = {fmap.dim}.")
    return fmap


__all__ = ["feature_map_from_spec", "read_state_table"]
