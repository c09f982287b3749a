"""Independent explorer runs in lockstep: seeds and budgets along a leading axis of R runs.

A study repeats an explorer over seeds (and budgets): R runs of K users. For an explorer
that serves a batch of users one policy (``dp-ucbvi-batched``, ``ucbvi-batched``) the R
runs can be played together: at each stage the users of all R runs are rolled out in one
vectorised call (``privaudit.online.protocol.run_lockstep``), and each run's agent then
releases and plans on its own. Nothing is shared between the runs but the environment's
tables and the loop: run r's agent is the one ``run_explore(env, algo, K, budgets[r],
seed=seeds[r])`` builds, so its result EQUALS that run's (tested), and its privacy
accounting is its own (its own events, its own noise).

Seeds. Run r draws its noise and tie-breaking from ``numpy.random.default_rng(seeds[r])``,
as a single run with ``--seed seeds[r]`` does; distinct seeds give independent streams
(numpy's SeedSequence), and a repeated seed is refused (two runs with the same noise
are not independent). Without seeds each run draws its own OS entropy.
"""

from __future__ import annotations

from typing import Callable, Sequence

from privaudit.core.errors import UsageError
from privaudit.online.env import EpisodicEnv
from privaudit.online.explore import build_agent
from privaudit.online.protocol import Agent, RunResult, run_lockstep
from privaudit.privacy.budget import Budget


def explore_lockstep(envs: Sequence[EpisodicEnv], algo: str, n_episodes: int, budgets: Sequence[Budget | None], *,
                     seeds: Sequence[int | None] | None = None, constants: str = "practical", beta: float = 0.05,
                     progress: Callable[[int], None] | None = None) -> list[tuple[Agent, RunResult]]:
    """R runs of ``algo`` in lockstep; run r equals ``run_explore(envs[r], algo, K, budgets[r], seed=seeds[r])``.

    Parameters
    ----------
    envs : sequence of EpisodicEnv, length R or 1 (shared by every run)
        Over one MDP; different ``world_key`` values give independent user streams.
    algo : str
        An explorer that shares policies over batches of users (``dp-ucbvi-batched``, ``ucbvi-batched``).
    n_episodes : int
        K, users per run.
    budgets : sequence of Budget or None, length R or 1
        Each run's budget (from ``validate_budget``; None: the non-private twin).
    seeds : sequence of int or None, length R, optional
        Each run's noise seed (default: OS entropy for each run).
    constants, beta, progress
        As ``run_explore`` (``progress`` counts the users of all runs).

    Returns
    -------
    list of (Agent, RunResult), one per run

    Raises
    ------
    UsageError
        Lengths that do not match, a repeated seed, an explorer that changes its policy every user
        (PUCB, the linear explorers: nothing to play together), environments over different MDPs.
    """
    R = max(len(envs), len(budgets), len(seeds) if seeds is not None else 1)
    seeds = [None] * R if seeds is None else list(seeds)
    envs, budgets = (list(x) * R if len(x) == 1 else list(x) for x in (envs, budgets))
    if not len(envs) == len(budgets) == len(seeds) == R:
        raise UsageError(f"lockstep runs need one environment, budget and seed per run (or one for all). Got "
                         f"{len(envs)} environments, {len(budgets)} budgets, {len(seeds)} seeds.")
    given = [s for s in seeds if s is not None]
    if len(set(given)) != len(given):
        raise UsageError(f"lockstep seeds must differ (equal seeds give equal noise: not independent runs). "
                         f"Got {given}.")
    agents = [build_agent(e, algo, n_episodes, b, constants=constants, beta=beta, seed=s)
              for e, b, s in zip(envs, budgets, seeds)]
    return list(zip(agents, run_lockstep(envs, agents, n_episodes, progress=progress)))
