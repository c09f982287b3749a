"""Named MDPs: one entry per MDP that ``simulate`` and ``evaluate`` accept by name.

Adding an MDP is one entry in ``MDP_REGISTRY``: a builder taking keyword
arguments among ``horizon, states, actions, instance_seed`` (the CLI options
of ``privaudit simulate``), the defaults of those it accepts (``None`` =
required), a spec-document builder and, optionally, named behaviour policies
(``--behaviour NAME``), the base policy of ``mix:W``, and reference policy
values reported by ``evaluate``. The CLI's MDP choice list, its validation of the
size options and ``--mdp NAME`` in ``evaluate`` all read this dict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.mdp.icu_sepsis import N_ACTIONS, N_STATES, clinicians_policy, icu_sepsis_spec_doc, load_icu_sepsis
from privaudit.mdp.random_tabular import random_tabular_mdp, random_tabular_spec_doc
from privaudit.mdp.synthetic_linear import behaviour_policy as seed_behaviour
from privaudit.mdp.synthetic_linear import synthetic_linear_mdp, synthetic_linear_spec_doc
from privaudit.mdp.tabular import TabularMDP, evaluate_policy

#: Options a builder may take (names as keyword arguments; CLI --states etc.).
BUILD_OPTIONS = ("horizon", "states", "actions", "instance_seed")


@dataclass(frozen=True)
class MDPEntry:
    """How to build one named MDP.

    Attributes
    ----------
    build : callable
        ``build(**options) -> TabularMDP`` with keyword arguments among
        ``BUILD_OPTIONS``.
    options : dict[str, int | None]
        The options ``build`` accepts and their defaults (None = required).
    spec_doc : callable
        ``spec_doc(mdp, dataset_id, description) -> dict``: the domain spec
        document of logs simulated from ``mdp``.
    summary : str
        One line for ``--help``.
    references : callable or None
        ``references(mdp) -> dict[str, float] | None``: exact values of
        reference policies that ``evaluate`` prints next to the policy's value.
    behaviours : dict[str, callable]
        Named behaviour policies of this MDP besides ``uniform`` and
        ``mix:W``: name -> ``policy(mdp) -> ndarray (S, A) or (H, S, A)``.
    mix_base : str or None
        The key of ``behaviours`` that ``mix:W`` mixes with uniform; None: the
        fixed random policy ``privaudit.mdp.simulate.random_base_policy``.
    """

    build: Callable[..., TabularMDP]
    options: dict
    spec_doc: Callable[[TabularMDP, str, str | None], dict]
    summary: str
    references: Callable[[TabularMDP], dict] | None = None
    behaviours: dict = field(default_factory=dict)
    mix_base: str | None = None


def _icu_build(horizon: int) -> TabularMDP:
    return load_icu_sepsis(horizon=horizon)


def _icu_spec(mdp: TabularMDP, dataset_id: str, description: str | None) -> dict:
    return icu_sepsis_spec_doc(mdp.horizon, dataset_id=dataset_id, description=description)


def _icu_references(mdp: TabularMDP) -> dict:
    if (mdp.n_states, mdp.n_actions) != (N_STATES, N_ACTIONS):
        return None  # a file named icu-sepsis that is not the ICU-Sepsis MDP
    uniform = np.full((mdp.n_states, mdp.n_actions), 1.0 / mdp.n_actions)
    return {"clinicians": evaluate_policy(mdp, clinicians_policy()),
            "uniform": evaluate_policy(mdp, uniform)}


def _icu_clinicians(mdp: TabularMDP) -> np.ndarray:
    return clinicians_policy()


def _random_build(horizon: int, states: int, actions: int, instance_seed: int) -> TabularMDP:
    return random_tabular_mdp(states, actions, horizon, instance_seed)


def _random_spec(mdp: TabularMDP, dataset_id: str, description: str | None) -> dict:
    return random_tabular_spec_doc(mdp, dataset_id=dataset_id, description=description)


def _synthetic_linear_build(horizon: int, instance_seed: int) -> TabularMDP:
    return synthetic_linear_mdp(instance_seed, horizon)


def _synthetic_linear_spec(mdp: TabularMDP, dataset_id: str, description: str | None) -> dict:
    doc = synthetic_linear_spec_doc(mdp.horizon, dataset_id=dataset_id)
    if description:
        doc["description"] = description
    return doc


def _synthetic_linear_behaviour(mdp: TabularMDP) -> np.ndarray:
    return seed_behaviour()


def _synthetic_linear_references(mdp: TabularMDP) -> dict:
    uniform = np.full((mdp.n_states, mdp.n_actions), 1.0 / mdp.n_actions)
    return {"seed-behaviour": evaluate_policy(mdp, _synthetic_linear_behaviour(mdp)),
            "uniform": evaluate_policy(mdp, uniform)}


#: name -> MDPEntry. The first key is the default in help texts.
MDP_REGISTRY: dict[str, MDPEntry] = {
    "icu-sepsis": MDPEntry(
        build=_icu_build, options={"horizon": 20}, spec_doc=_icu_spec,
        summary="ICU-Sepsis (S=716, A=25; Choudhary, Gupta & Thomas 2024)",
        references=_icu_references, behaviours={"clinicians": _icu_clinicians}, mix_base="clinicians"),
    "random-tabular": MDPEntry(
        build=_random_build,
        options={"horizon": None, "states": None, "actions": None, "instance_seed": 0},
        spec_doc=_random_spec,
        summary="seeded random tabular MDP (--states --actions --horizon [--instance-seed])"),
    "synthetic-linear": MDPEntry(
        build=_synthetic_linear_build, options={"horizon": 20, "instance_seed": 0},
        spec_doc=_synthetic_linear_spec,
        summary="the synthetic linear MDP of Qiao & Wang 2023 (S=2, A=100, d=10; [--instance-seed]; behaviour 'seed')",
        references=_synthetic_linear_references, behaviours={"seed": _synthetic_linear_behaviour},
        mix_base="seed"),
}


def build_mdp(name: str, **options: int | None) -> TabularMDP:
    """Build the registered MDP ``name``.

    Parameters
    ----------
    name : str
        A key of ``MDP_REGISTRY``.
    **options : int or None
        Values for ``BUILD_OPTIONS``; None means "not given" (the entry's
        default applies).

    Raises
    ------
    UsageError
        For an unknown name, a required option missing, or an option the MDP
        does not take (e.g. ``--states`` for icu-sepsis).
    """
    entry = MDP_REGISTRY.get(name)
    if entry is None:
        raise UsageError(f"unknown MDP {name!r}; choose one of {sorted(MDP_REGISTRY)}.")
    given = {k: v for k, v in options.items() if v is not None}
    unknown = [k for k in given if k not in entry.options]
    if unknown:
        flags = ", ".join("--" + k.replace("_", "-") for k in unknown)
        raise UsageError(f"{flags} does not apply to the {name} MDP; it takes "
                         f"{['--' + k.replace('_', '-') for k in entry.options] or 'no options'}.")
    kwargs = {k: given.get(k, default) for k, default in entry.options.items()}
    missing = [k for k, v in kwargs.items() if v is None]
    if missing:
        flags = ", ".join("--" + k.replace("_", "-") for k in missing)
        raise UsageError(f"the {name} MDP needs {flags}.")
    return entry.build(**kwargs)
