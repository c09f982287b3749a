"""Linear-MDP online explorers under joint DP: LSVI-UCB, LSVI-UCB++ and their private versions.

* ``stats``: ridge statistics over a finite next-state space (Sherman-Morrison,
  target sums over next states), GOE and binary-tree Gram noise, eigen-floored inverses;
* ``sensitivity``: per-user sensitivities of every released statistic and noise scales;
* ``constants``: the theory and practical constant sets of every algorithm (one place);
* ``jin``: LSVI-UCB (Jin et al. 2020), Luyo et al. 2021 (batching), Ngo et al. 2022 (seed 002);
* ``plusplus``: LSVI-UCB++ (He et al. 2023) and DP-LSVI-UCB++ (seed 003);
* ``registry``: build any of them by name.

See docs/online.md, section "Linear MDPs".
"""
