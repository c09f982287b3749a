"""Exact evaluation of a policy on a known MDP (``privaudit evaluate``).

``load_policy_table`` reads a policy file into an (H, S, A) table,
``resolve_mdp`` turns ``icu-sepsis`` or ``MDP.npz`` into a TabularMDP, and
``evaluate_report`` returns the policy's exact value next to the optimal value
(and, for ICU-Sepsis, the clinicians' and the uniform policy's values).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from privaudit.errors import ArtifactError, UsageError
from privaudit.mdp.io import load_mdp
from privaudit.mdp.registry import MDP_REGISTRY, build_mdp
from privaudit.mdp.tabular import TabularMDP, evaluate_policy, value_iteration

#: Largest deviation of a policy row's sum from 1 that is accepted.
ROW_SUM_TOL = 1e-6


def load_policy_table(path: str | Path, S: int, A: int, H: int) -> np.ndarray:
    """Read a policy file as a table pi_h(a | s).

    Parameters
    ----------
    path : path
        A policy folder written by ``privaudit train`` (``policy.json`` +
        ``policy.parquet``, read by ``privaudit.learners.policy.load_policy``,
        which checks its format version), or a ``.npy`` array of shape
        (H, S, A) (per step) or (S, A) (stationary).
    S, A, H : int
        The MDP's numbers of states, actions and steps.

    Returns
    -------
    ndarray, shape (H, S, A), float64
        Non-negative rows summing to 1 (a stationary table is repeated over h).

    Raises
    ------
    ArtifactError
        If the file is missing or not a ``.npy`` array (or a policy folder
        that ``load_policy`` refuses), has another shape,
        holds NaN/inf or negative entries, or a row whose sum is not 1 (the
        message names the first offending (h, s)).
    """
    path = Path(path)
    if path.is_dir():
        from privaudit.learners.policy import load_policy

        table = load_policy(path).table
        if table.shape != (H, S, A):
            raise ArtifactError(f"policy {path} has shape {table.shape}; the MDP needs ({H}, {S}, {A}) "
                                f"(H={H}, S={S}, A={A}). Train it under the MDP's spec (and horizon).")
        return table
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise ArtifactError(f"cannot read policy {path}: {e}. Expected a .npy array of shape "
                            f"({H}, {S}, {A}) or ({S}, {A}).") from None
    if not isinstance(arr, np.ndarray):
        arr.close()
        raise ArtifactError(f"policy {path} is an .npz archive; expected a single .npy array of shape "
                            f"({H}, {S}, {A}) or ({S}, {A}).")
    if arr.shape not in ((H, S, A), (S, A)):
        raise ArtifactError(f"policy {path} has shape {arr.shape}; the MDP needs ({H}, {S}, {A}) "
                            f"or ({S}, {A}) (H={H}, S={S}, A={A}).")
    if not np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.complexfloating):
        raise ArtifactError(f"policy {path} has dtype {arr.dtype}; expected real numbers.")
    pi = np.broadcast_to(arr.astype(np.float64), (H, S, A)).copy()
    bad = ~np.isfinite(pi).all(-1) | (pi < 0).any(-1) | (np.abs(pi.sum(-1) - 1.0) > ROW_SUM_TOL)
    if bad.any():
        h, s = np.argwhere(bad)[0]
        where = f"step h={h}, state s={s}" if arr.ndim == 3 else f"state s={s}"
        raise ArtifactError(f"policy {path}: row pi(. | {where}) = {pi[h, s].tolist()} is not a probability "
                            f"vector (finite, >= 0, summing to 1 within {ROW_SUM_TOL}); "
                            f"{int(bad.sum())} bad rows in all.")
    return pi


def resolve_mdp(mdp: str | Path | TabularMDP, horizon: int | None = None, *,
                instance_seed: int | None = None) -> TabularMDP:
    """The MDP named by ``mdp``: a registry name, an ``.npz`` path, or a TabularMDP.

    Parameters
    ----------
    mdp : str, path or TabularMDP
        ``icu-sepsis`` (any name in ``MDP_REGISTRY`` whose options all have
        defaults), a file written by ``save_mdp``, or an MDP object.
    horizon : int, optional
        H for a named MDP (default: the entry's, 20 for icu-sepsis). Not
        allowed with a file or object (their H is fixed).
    instance_seed : int, optional
        Instance of a seeded named MDP (synthetic-linear); entry default when None.

    Raises
    ------
    UsageError
        For a name that is neither registered nor an existing file, or a
        ``horizon`` given with a file.
    ArtifactError
        If the file is not a valid MDP file.
    """
    if isinstance(mdp, TabularMDP):
        if horizon is not None and horizon != mdp.horizon:
            raise UsageError(f"horizon {horizon} given for an MDP object of horizon {mdp.horizon}.")
        return mdp
    key = str(mdp)
    if key in MDP_REGISTRY:
        needs = [k for k, v in MDP_REGISTRY[key].options.items() if v is None and k != "horizon"]
        if needs:
            raise UsageError(f"the {key} MDP needs {needs} to be built; save it with `privaudit simulate "
                             f"{key} ... --mdp-out MDP.npz` and pass --mdp MDP.npz.")
        return build_mdp(key, horizon=horizon, instance_seed=instance_seed)
    path = Path(key)
    if not path.exists():
        raise UsageError(f"--mdp {key!r} is neither a known MDP ({', '.join(MDP_REGISTRY)}) nor an "
                         "existing .npz file (write one with `privaudit simulate ... --mdp-out MDP.npz`).")
    if horizon is not None:
        raise UsageError(f"--horizon applies only to a named MDP; {path} fixes its own horizon.")
    if instance_seed is not None:
        raise UsageError(f"--instance-seed applies only to a named MDP; {path} is one fixed instance.")
    return load_mdp(path)


def evaluate_report(policy: np.ndarray, mdp: str | Path | TabularMDP, horizon: int | None = None) -> dict:
    """Exact value of ``policy`` on ``mdp`` next to the optimal value.

    Parameters
    ----------
    policy : ndarray, shape (H, S, A) or (S, A)
        Stochastic policy pi_h(a | s).
    mdp : str, path or TabularMDP
        See ``resolve_mdp``.
    horizon : int, optional
        H for a named MDP.

    Returns
    -------
    dict
        ``mdp`` (name), ``horizon``, ``n_states``, ``n_actions``, ``value``
        (v^pi = E_{s~d0} V^pi_0(s)), ``optimal_value`` (v* by value
        iteration), ``gap`` (v* - v^pi >= 0), and, where the MDP has reference
        policies (ICU-Sepsis: ``clinicians``, ``uniform``), ``references``.

    Raises
    ------
    UsageError
        If the policy's shape or rows do not fit the MDP, or ``mdp`` is unknown.
    """
    m = resolve_mdp(mdp, horizon)
    value = evaluate_policy(m, policy)
    _, _, optimal = value_iteration(m)
    report = {"mdp": m.name, "horizon": m.horizon, "n_states": m.n_states, "n_actions": m.n_actions,
              "value": value, "optimal_value": optimal, "gap": optimal - value}
    entry = MDP_REGISTRY.get(m.name)
    refs = entry.references(m) if entry is not None and entry.references is not None else None
    if refs is not None:
        report["references"] = refs
    return report
