"""Tabular and linear MDPs, loaders, simulation and exact evaluation."""

from privaudit.mdp.tabular import TabularMDP, evaluate_policy, value_iteration

__all__ = ["TabularMDP", "evaluate_policy", "value_iteration"]
