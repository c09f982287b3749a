"""Tabular and linear MDPs, loaders, simulation and exact evaluation."""

from privaudit.mdp.io import load_mdp, save_mdp
from privaudit.mdp.registry import MDP_REGISTRY, build_mdp
from privaudit.mdp.tabular import TabularMDP, evaluate_policy, policy_values, value_iteration

__all__ = ["TabularMDP", "evaluate_policy", "policy_values", "value_iteration",
           "save_mdp", "load_mdp", "MDP_REGISTRY", "build_mdp"]
