"""Linear-MDP online explorers under joint DP: LSVI-UCB, LSVI-UCB++ and their private versions.

* ``base``: the episode loop every explorer shares, the privacy unit (one user) and the events;
* ``lsvi_ucb``: LSVI-UCB (Jin, Yang, Wang & Jordan 2020) and the backward pass of its private versions;
* ``luyo``: private LSVI-UCB through batching (Luyo, Garcelon, Lazaric & Pirotta 2021);
* ``ngo``: low-switching private LSVI-UCB (Ngo, Vietri & Wu 2022);
* ``lsvi_ucb_pp``: LSVI-UCB++ (He, Zhao, Zhou & Gu 2023) and DP-LSVI-UCB++ (Sahu 2025);
* ``numerics``: ridge statistics over a finite next-state space (Sherman-Morrison,
  target sums over next states), eigen-floored inverses, greedy tie-breaking;
* ``lattice``: the integer lattice statistics and exact discrete Gaussian noise of a private run;
* ``sensitivity``: per-user sensitivities of every released statistic and noise scales;
* ``constants``: the theory and practical constant sets of every algorithm (one place);
* ``build``: build any of them by name (the builder the registry names).

See docs/online.md, section "Linear MDPs".
"""
