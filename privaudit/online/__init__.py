"""Online exploration under joint differential privacy (JDP).

An agent meets a stream of users, one episode each, and must keep every
user's data private from all other users, who see only the actions
recommended to them (billboard model). Modules:

* ``env``: episodic environments whose users are deterministic response trees
  (counter-based Philox keyed by user, step and action history);
* ``protocol``: the agent protocol and a runner measuring exact regret;
* ``counters``: private counters (binary tree mechanism, Laplace / Gaussian /
  GOE), their error bound and privacy event;
* ``tabular``: PUCB (Vietri, Balle, Krishnamurthy & Wu 2020) and its non-private
  twin (UCB-VI), with their constants;
* ``linear``: the linear-MDP explorers (LSVI-UCB, Luyo et al., Ngo et al.,
  LSVI-UCB++, DP-LSVI-UCB++);
* ``explore``: the library side of ``privaudit explore`` (build, run, write);
* ``manifest``: the typed explore manifest.

See docs/online.md.
"""
