"""Exact evaluation of a policy on a known MDP (``privaudit evaluate``).

``resolve_mdp`` turns ``icu-sepsis`` or ``MDP.npz`` into a TabularMDP, and
``evaluate_report`` returns the policy's exact value next to the optimal value
(and, for ICU-Sepsis, the clinicians' and the uniform policy's values).
A policy file is read into an (H, S, A) table by
``privaudit.learners.policy.load_policy_table``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.mdp.io import load_mdp
from privaudit.mdp.registry import MDP_REGISTRY, build_mdp
from privaudit.mdp.tabular import TabularMDP, evaluate_policy, value_iteration


def declared_mdp(spec) -> dict | None:
    """The spec's optional ``$.mdp`` object ({name, instance_seed}) written by ``privaudit simulate``, or None."""
    if spec is None:
        return None
    raw = getattr(spec, "raw", None) or {}
    m = raw.get("mdp")
    return dict(m) if isinstance(m, dict) else None


def resolve_instance_seed(name: str, instance_seed: int | None, spec=None) -> int | None:
    """The instance seed of the named MDP ``name``, from ``instance_seed`` and/or the spec.

    Parameters
    ----------
    name : str
        A key of ``MDP_REGISTRY``.
    instance_seed : int or None
        ``--instance-seed`` as given.
    spec : DomainSpec, optional
        Its ``$.mdp.instance_seed`` (written by ``privaudit simulate``), when
        it names this MDP.

    Returns
    -------
    int or None
        None for an MDP without instances (icu-sepsis), when none was given.

    Raises
    ------
    UsageError
        A negative seed; a spec declaring another MDP; ``instance_seed``
        contradicting the spec; or a seeded MDP (synthetic-linear,
        random-tabular) with neither: the instance is never guessed (a silent
        instance 0 would report another MDP's values).
    """
    entry = MDP_REGISTRY[name]
    declared = declared_mdp(spec)
    if declared is not None and declared.get("name") != name:
        raise UsageError(f"`mdp` {name}: the spec{_spec_where(spec)} declares logs simulated from the "
                         f"{declared.get('name')} MDP ($.mdp.name); pass that MDP.")
    if instance_seed is not None and int(instance_seed) < 0:
        raise UsageError(f"`instance_seed` must be >= 0. Got {instance_seed}.")
    if "instance_seed" not in entry.options:
        if instance_seed is not None:
            raise UsageError(f"`instance_seed` does not apply to the {name} MDP (it has one instance).")
        return None
    from_spec = declared.get("instance_seed") if declared is not None else None
    if instance_seed is not None and from_spec is not None and int(instance_seed) != int(from_spec):
        raise UsageError(f"`instance_seed` {instance_seed} contradicts the spec{_spec_where(spec)}, whose logs "
                         f"were simulated from {name} instance {from_spec} ($.mdp.instance_seed); drop "
                         "`instance_seed` or pass the matching spec.")
    seed = instance_seed if instance_seed is not None else from_spec
    if seed is None:
        raise UsageError(f"`mdp` {name} has one instance per seed and the instance is unknown: pass "
                         f"`instance_seed` (the `privaudit simulate {name} --instance-seed N` of the logs) "
                         "or the `spec` as written by simulate (it records $.mdp.instance_seed).")
    return int(seed)


def _spec_where(spec) -> str:
    src = getattr(spec, "source", None)
    return f" {src}" if src is not None else ""


def resolve_mdp(mdp: str | Path | TabularMDP, horizon: int | None = None, *,
                instance_seed: int | None = None, spec=None) -> TabularMDP:
    """The MDP named by ``mdp``: a registry name, an ``.npz`` path, or a TabularMDP.

    Parameters
    ----------
    mdp : str, path or TabularMDP
        ``icu-sepsis`` or ``synthetic-linear`` (a name in ``MDP_REGISTRY``;
        ``random-tabular`` only with a spec from ``privaudit simulate`` that
        declares it, whose S, A, H build it), a file written by ``save_mdp``,
        or an MDP object.
    horizon : int, optional
        H for a named MDP (default: the entry's, 20 for icu-sepsis). Not
        allowed with a file or object (their H is fixed).
    instance_seed : int, optional
        Instance of a seeded named MDP (synthetic-linear, random-tabular).
        See ``resolve_instance_seed``: it must agree with the spec's
        ``$.mdp.instance_seed``, and one of the two is required.
    spec : DomainSpec, optional
        The logs' spec: its ``$.mdp`` object names the MDP and instance.

    Raises
    ------
    UsageError
        For a name that is neither registered nor an existing file, a
        ``horizon`` or ``instance_seed`` given with a file, or an unknown or
        contradicted instance seed.
    ArtifactError
        If the file is not a valid MDP file.
    """
    if isinstance(mdp, TabularMDP):
        if horizon is not None and horizon != mdp.horizon:
            raise UsageError(f"horizon {horizon} given for an MDP object of horizon {mdp.horizon}.")
        return mdp
    key = str(mdp)
    if key in MDP_REGISTRY:
        entry = MDP_REGISTRY[key]
        sizes = {}
        needs = [k for k, v in entry.options.items() if v is None and k != "horizon"]
        if needs and declared_mdp(spec) is None:
            raise UsageError(f"the {key} MDP needs {needs} to be built; pass `mdp` MDP.npz, its saved file "
                             "(privaudit.mdp.io.save_mdp, which `privaudit simulate` runs for its MDP output), or "
                             "pass the `spec` simulate wrote, which declares the instance.")
        seed = resolve_instance_seed(key, instance_seed, spec)
        if needs:
            sizes = {"states": spec.n_states, "actions": spec.n_actions}
            horizon = spec.horizon if horizon is None else horizon
        return build_mdp(key, horizon=horizon, instance_seed=seed, **sizes)
    path = Path(key)
    if not key or not path.exists():  # Path('') is the current folder
        raise UsageError(f"`mdp` {key!r} is neither a known MDP ({', '.join(MDP_REGISTRY)}) nor an "
                         "existing .npz file (write one with `privaudit simulate ... --mdp-out MDP.npz`).")
    if horizon is not None:
        raise UsageError(f"`horizon` applies only to a named MDP; {path} fixes its own horizon.")
    if instance_seed is not None:
        raise UsageError(f"`instance_seed` applies only to a named MDP; {path} is one fixed instance.")
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
