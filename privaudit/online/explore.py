"""``privaudit explore``: run an online explorer on a simulated user stream and write its regret.

Outputs, in one folder written atomically (``--out DIR``):

* ``regret.parquet``: one row per episode (user): ``episode`` (0-based),
  ``initial_state``, ``regret`` (exact V*_0(s_0) - V^{pi_k}_0(s_0)),
  ``cumulative_regret``, ``realised_return``; the Parquet schema metadata
  holds ``privaudit_format_version``;
* ``manifest.json``: format version, software version, configuration, the
  JDP guarantee (neighbouring relation, what is protected from whom, the
  privacy events of every counter family), a summary of the regret: a typed
  :class:`~privaudit.online.manifest.ExploreManifest` (schema
  ``schemas/explore_manifest.schema.json``, checked on write and read;
  :func:`~privaudit.online.manifest.read_explore_manifest` reads it);
* ``regret.png``: cumulative regret against episodes.

All data here is simulated from a known MDP (the users are response trees
keyed by ``world_key``), so the manifest records the environment's seeds:
nothing in the folder describes a real person. The agent's noise seed
(``--seed``) is never written: a seeded run is marked rng
``seeded-insecure`` and not private, as a seeded release is.

Algorithms are the ``online`` entries of the one algorithm registry
(:mod:`privaudit.core.registry`; :data:`ONLINE_ALGOS` maps their names to them): each
names its builder ``build(env, K, budget, constants, beta, rng, *, algo) -> Agent``
and says whether it takes a privacy budget.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from privaudit import __version__
from privaudit.core import registry
from privaudit.core.artifact import Guarantee
from privaudit.core.envelope import EXPLORE_WORDS, envelope, noise_mode
from privaudit.core.errors import UsageError
from privaudit.core.formatting import guarantee_text
from privaudit.core.atomic import atomic_dir
from privaudit.core.outputs import check_outputs, folder_output
from privaudit.online.counters import tree_levels
from privaudit.online.env import EpisodicEnv
from privaudit.online.manifest import (EXPLORE_FORMAT_VERSION, EXPLORE_KIND, ExploreEnvironment, ExploreManifest,
                                       ExploreSummary)
from privaudit.online.protocol import Agent, RunResult, run_episodes
from privaudit.online.tabular.pucb import PUCB, UCBVI
from privaudit.privacy import accounting, samplers
from privaudit.privacy.accounting import Accountant
from privaudit.privacy.budget import Budget, resolve_budget
from privaudit.privacy.noise import GAUSSIAN, NOISE_FAMILY_NAMES
from privaudit.privacy.events import leaves
from privaudit.release.size import physical_memory_bytes



def build_pucb(env: EpisodicEnv, K: int, budget: Budget | None, constants: str, beta: float, rng, *,
               algo: str = "pucb") -> Agent:
    """PUCB for ``privaudit explore`` (registry entry ``pucb``); None: no noise (the twin's counts)."""
    epsilon = math.inf if budget is None else budget.epsilon
    rho = budget.rho if budget is not None and not budget.family.pure else None
    return PUCB(env.n_states, env.n_actions, env.horizon, K, epsilon=epsilon, rho=rho,
                beta=beta, constants=constants, rng=rng)


def build_ucbvi(env: EpisodicEnv, K: int, budget: Budget | None, constants: str, beta: float, rng, *,
                algo: str = "ucb-vi") -> Agent:
    """PUCB's non-private twin for ``privaudit explore`` (registry entry ``ucb-vi``)."""
    return UCBVI(env.n_states, env.n_actions, env.horizon, K, beta=beta, constants=constants, rng=rng)


#: name -> registry entry of every online explorer (those registered when this module is imported).
ONLINE_ALGOS: dict[str, registry.Algorithm] = {n: registry.get(n) for n in registry.names(family="online")}

#: What joint DP protects, for the manifest and the docs.
JDP_TEXT = {
    "notion": "joint differential privacy (JDP) under continual observation, billboard model "
              "(Vietri et al. 2020; Kearns et al. 2014)",
    "neighbouring": "one user's whole data replaced: her response tree (initial state and her reward and "
                    "next state in response to every possible action sequence); all other users' trees "
                    "unchanged",
    "privacy_unit": "one user = one episode",
    "protected_from": "every other user: the distribution of the actions recommended to all users other "
                      "than u (jointly, including later users who probe the agent) and of the final policy "
                      "changes by at most the stated budget when u's data is replaced; a fortiori anyone "
                      "who sees only the released counters or the final policy",
    "not_protected": "the actions recommended to user u herself (they depend on her own states, as they "
                     "must); the agent itself (trusted: it sees every raw trajectory); side channels such "
                     "as timing; users who share data across episodes (one person = several users "
                     "multiplies the budget by their number of episodes)",
}


def sampler_statement(events, paths=("table",)) -> dict:
    """What the explorer's noise samplers deliver, as the release manifest's ``guarantee.sampler``.

    ``samplers.noise_statement("exact", paths=paths)`` (total variation 0,
    extra delta 0; ``paths`` names the exact samplers that drew, from
    ``Agent.exact_sampler_paths``) when every event's noise is ``"exact"``;
    otherwise the statement of the first non-exact kind (``"continuous"`` for
    float Gaussians: not certified, total variation and extra delta None).
    """
    mode = noise_mode(leaf.noise for e in events for leaf, _ in leaves(e))
    return samplers.noise_statement("exact", paths=paths) if mode in (None, "exact") else samplers.noise_statement(mode)


#: The note of a seeded run's guarantee (as the release's rng ``seeded-insecure``).
SEEDED_NOTE = "seeded noise (--seed, rng seeded-insecure): for tests only, not private against anyone who knows the seed"


def _guarantee(agent: Agent, budget: Budget | None, seeded: bool = False) -> Guarantee:
    """The run's joint-DP guarantee in the envelope's shape (``privaudit.core.envelope``): the statement
    (``private``, ``epsilon``, ``delta``, ``rho``, ``statement``, ``note``), the sampler, the noise family and
    mode of the events, the JDP relation and unit in words, ``rng``, the composed event (label ``explore``)
    and, under ``details``, the JDP words (:data:`JDP_TEXT`) and the linear explorers' lattices."""
    events = list(getattr(agent, "events_", []))
    words = dict(neighbouring=JDP_TEXT["neighbouring"], unit=JDP_TEXT["privacy_unit"],
                 rng="seeded-insecure" if seeded else "secure")
    details = {k: JDP_TEXT[k] for k in EXPLORE_WORDS}
    if budget is None or not events:
        return envelope({"private": False, "epsilon": None, "delta": None, "rho": None}, mechanism=None,
                        noise=None, details=details, **words)
    sampler = sampler_statement(events, agent.exact_sampler_paths())
    certified = sampler["extra_delta"] is not None
    acc = Accountant()
    for e in events:
        acc.compose(e)
    pure = acc.is_pure()
    delta = 0.0 if pure else budget.delta
    # derived from the composed event; the budget is stated when the events cost at most it (else: raises)
    composed = acc.composed("explore")
    derived = accounting.guarantee(composed, delta=delta, requested={}, bound=budget.amount)
    eps, rho = derived["epsilon"], None if pure else derived["rho"]
    statement = {"private": not seeded, "epsilon": eps, "delta": delta, "rho": rho,
                 "statement": guarantee_text({"epsilon": eps, "delta": delta, "rho": rho}, "JDP")
                 + " for the actions recommended to all users and the final policy"
                 + ("" if certified else " (of the ideal continuous Gaussian mechanism; not certified for the "
                    "float sampler that ran: see guarantee.sampler)"),
                 # the guarantee is kept for reference; it does not hold against anyone who knows the seed
                 **({"note": SEEDED_NOTE} if seeded else {})}
    lattice = getattr(agent, "lattice", None)
    if lattice is not None:  # the linear explorers' grids (privaudit.online.linear.lattice)
        details["grid"] = lattice.describe()
    kinds = {leaf.KIND for e in events for leaf, _ in leaves(e)}
    return envelope(statement, mechanism=kinds.pop() if len(kinds) == 1 else None,
                    noise=noise_mode(leaf.noise for e in events for leaf, _ in leaves(e)), event=composed.to_dict(),
                    sampler=sampler, details=details, **words)


def budget_families(algo: str) -> tuple[str, ...]:
    """The noise families of a private explorer: PUCB's tree counters take Laplace or Gaussian noise;
    the linear explorers (Luyo, Ngo, DP-LSVI-UCB++) are Gaussian (zCDP) only."""
    return (GAUSSIAN.name,) if ONLINE_ALGOS[algo].needs_features else NOISE_FAMILY_NAMES


def validate_budget(algo: str, epsilon: float | None, rho: float | None,
                    delta: float | None) -> Budget | None:
    """Check the budget arguments against the algorithm; returns the resolved budget, or None.

    The meaning of every entry point (:func:`~privaudit.privacy.budget.resolve_budget`):
    ``rho`` (Gaussian counters, reported as (eps, delta)-JDP at ``delta``, default
    :data:`~privaudit.privacy.accounting.DEFAULT_REPORT_DELTA`); ``epsilon`` with
    ``delta`` (Gaussian counters at the largest rho giving that (eps, delta));
    ``epsilon`` alone (pure eps-JDP, Laplace tree counters, PUCB only:
    :func:`budget_families`). ``epsilon`` = inf alone, or a non-private
    algorithm: None (no noise, no guarantee).

    Raises
    ------
    UsageError
        Unknown algorithm; a private algorithm without a budget, or with a
        form it has no noise for; a non-private one given a budget; budgets
        out of range. Messages name the parameters (``epsilon``, ``rho``,
        ``delta``, ``algo``) and the accepted combinations.
    """
    if algo not in ONLINE_ALGOS:
        raise UsageError(f"unknown algorithm {algo!r}; choose one of {sorted(ONLINE_ALGOS)}.")
    entry = ONLINE_ALGOS[algo]
    if not entry.private:
        if epsilon is not None or rho is not None or delta is not None:
            raise UsageError(f"`algo` {algo} is not private; it takes no `epsilon`/`rho`/`delta` (use `algo` pucb).")
        return None
    if (epsilon is not None and rho is None and delta is None and not isinstance(epsilon, bool)
            and math.isinf(epsilon) and epsilon > 0):
        return None  # the documented "no privacy" setting: the twin, no noise
    return resolve_budget(rho=rho, epsilon=epsilon, delta=delta, families=budget_families(algo))


def memory_estimate(algo: str, env: EpisodicEnv, n_episodes: int) -> int:
    """Peak bytes of a tabular explorer's state: (L + 6) float64 arrays of C = 2SAH + S^2AH counters.

    The batched explorers (``privaudit.online.tabular.batched_ucb``) hold about eight float64 arrays of their
    S^2A (pooled) or S^2AH transition counts instead.

    (L + 2) per counter family (exact sum, one noise sum per level), plus the
    released copy, the increments and PrivQ's temporaries (about three more).
    Linear explorers' own state (a few (H, d, d) arrays) is not counted. Every run adds two float64/int64 arrays
    of K entries (the regret evaluator's regret and start states, ``protocol.RegretEvaluator``).
    """
    per_user = 16 * int(n_episodes)
    if ONLINE_ALGOS[algo].needs_features:
        return per_user
    S, A, H = env.n_states, env.n_actions, env.horizon
    if ONLINE_ALGOS[algo].learner.startswith("privaudit.online.tabular.batched_ucb:"):
        # one (S, A, S) or (H, S, A, S) sum of releases, a batch's counts and noise, the projection's temporaries
        return 8 * S * S * A * (1 if env.mdp.stationary else H) * 8 + per_user
    C = 2 * S * A * H + S * S * A * H
    return 8 * C * (tree_levels(n_episodes) + 6) + per_user


def check_memory(algo: str, env: EpisodicEnv, n_episodes: int) -> None:
    """Refuse (UsageError) a run whose state would take more than half the physical memory."""
    need, phys = memory_estimate(algo, env, n_episodes), physical_memory_bytes()
    if phys is not None and need > phys / 2:
        S, A, H = env.n_states, env.n_actions, env.horizon
        raise UsageError(f"`algo` {algo} on {env.name} (S={S}, A={A}, H={H}) for K={n_episodes} users needs about "
                         f"{need / 2**30:.3g} GiB for its counters (S^2AH transitions and their tree levels) and the "
                         f"regret of every user, above half of this machine's {phys / 2**30:.1f} GiB. Use fewer "
                         "`episodes`, a smaller `horizon` or a smaller environment.")


def run_explore(env: EpisodicEnv, algo: str, n_episodes: int, budget: Budget | None, *, constants: str = "practical",
                beta: float = 0.05, seed: int | None = None, progress: Callable[[int], None] | None = None
                ) -> tuple[Agent, RunResult]:
    """Build the agent and play ``n_episodes`` users of ``env``.

    Parameters
    ----------
    env : EpisodicEnv
    algo : str
        A key of :data:`ONLINE_ALGOS`.
    n_episodes : int
        K (public; fixes the counters' trees).
    budget : Budget or None
        From :func:`validate_budget` (None: no privacy).
    constants : {"practical", "theory"}
    beta : float
        Failure probability of the confidence bounds.
    seed : int, optional
        Seed of the agent's noise and tie-breaking (default: OS entropy).
    progress : callable, optional
        See :func:`~privaudit.online.protocol.run_episodes`.

    Returns
    -------
    (Agent, RunResult)
    """
    agent = build_agent(env, algo, n_episodes, budget, constants=constants, beta=beta, seed=seed)
    return agent, run_episodes(env, agent, n_episodes, progress=progress)


def build_agent(env: EpisodicEnv, algo: str, n_episodes: int, budget: Budget | None, *, constants: str = "practical",
                beta: float = 0.05, seed: int | None = None) -> Agent:
    """The agent :func:`run_explore` plays (its registry builder; noise and ties from ``default_rng(seed)``).

    Raises
    ------
    UsageError
        ``algo`` needs a feature map ``env`` lacks, or the run would not fit in memory.
    """
    entry = ONLINE_ALGOS[algo]
    check_memory(algo, env, n_episodes)
    if entry.needs_features and env.phi is None:
        raise UsageError(f"`algo` {algo} needs a feature map; environment {env.name!r} has none "
                         "(use synthetic-linear).")
    return entry.load()(env, int(n_episodes), budget, constants, beta, np.random.default_rng(seed), algo=algo)


def regret_frame(res: RunResult) -> pl.DataFrame:
    """The per-episode table written to ``regret.parquet``."""
    return pl.DataFrame({
        "episode": np.arange(res.first_user, res.first_user + len(res.regret), dtype=np.int64),
        "initial_state": res.initial_state,
        "regret": res.regret,
        "cumulative_regret": np.cumsum(res.regret),
        "realised_return": res.realised_return,
    })


def _plot(df: pl.DataFrame, title: str, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ep = df["episode"].to_numpy() + 1
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(ep, df["cumulative_regret"].to_numpy(), lw=1.5)
    ax.set_xlabel("episode k (users)")
    ax.set_ylabel("cumulative regret  sum_k V*(s0) - V^pi_k(s0)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


#: What ``overwrite`` may replace: a previous explore output (``privaudit.core.outputs.check_outputs``).
EXPLORE_OUTPUT = folder_output(f"a previous explore output (a folder whose manifest.json has kind {EXPLORE_KIND!r})",
                               "manifest.json", "kind", EXPLORE_KIND)


def check_explore_out(out: str | Path, overwrite: bool = False, env: str | Path | None = None) -> None:
    """Refuse, before any user is simulated, an ``out`` that cannot be written or would replace anything
    but a previous explore output (``privaudit.core.outputs.check_outputs``).

    ``overwrite`` removes the folder it replaces, so it applies only to a folder whose
    ``manifest.json`` has kind ``privaudit-explore`` (as ``pipeline --overwrite`` replaces only a
    pipeline output): never to a pipeline run, a release or any other folder, nor to one holding the
    environment file ``env`` (an MDP.npz) the run reads.

    Raises
    ------
    UsageError
        ``out`` exists and ``overwrite`` is False, or it is not a previous explore output, or it holds
        ``env``, or it cannot be written.
    """
    check_outputs([("out", out, EXPLORE_OUTPUT)], [("env", env if env is not None and Path(env).exists() else None)],
                  overwrite)


def write_explore(out: str | Path, env: EpisodicEnv, algo: str, agent: Agent, res: RunResult, budget: Budget | None,
                  config: dict, overwrite: bool = False, seeded: bool = False) -> ExploreManifest:
    """Write regret.parquet, manifest.json and regret.png into ``out`` atomically; returns the manifest.

    ``seeded`` (the agent's noise came from a seed): the guarantee is marked
    rng ``seeded-insecure`` and ``private: false``; ``config`` must hold no
    seed value (as in a release manifest), and a ``"seed"`` key is dropped.
    """
    df = regret_frame(res)
    guarantee = _guarantee(agent, budget, seeded)
    config = {k: v for k, v in config.items() if k != "seed"}
    K = len(res.regret)
    tail = max(1, K // 10)
    manifest = ExploreManifest(
        software={"privaudit": __version__, "python": sys.version.split()[0], "numpy": np.__version__},
        config=config,
        environment=ExploreEnvironment(env.name, int(env.horizon), int(env.n_states), int(env.n_actions),
                                       env.world_key),
        guarantee=guarantee,
        calibration=_calibration_dict(agent),
        summary=ExploreSummary(K, float(df["cumulative_regret"][-1]), float(res.regret[-tail:].mean()),
                               float(res.regret[:tail].mean())))
    check_explore_out(out, overwrite)
    doc = manifest.to_dict()  # checked against its schema before anything is written
    g = manifest.envelope
    label = ("non-private" if g.statement is None else g.statement.split(" for")[0]
             + ("" if g.private else " (seeded: not private)"))
    # two lines: on one, "(7.76622, 1e-06)-JDP (seeded: not private)" ran off the 6-inch figure
    title = f"{algo} on {env.name} (H={env.horizon}, S={env.n_states}, A={env.n_actions})\n{label}"
    with atomic_dir(Path(out), overwrite=overwrite) as tmp:
        table = df.to_arrow()
        table = table.replace_schema_metadata({"privaudit_format_version": str(EXPLORE_FORMAT_VERSION),
                                               "privaudit_kind": "explore-regret"})
        pq.write_table(table, tmp / "regret.parquet")
        ExploreManifest.FORMAT.dump(doc, tmp / "manifest.json")
        _plot(df, title, tmp / "regret.png")
    return manifest


def _calibration_dict(agent: Agent) -> dict | None:
    schedule = getattr(agent, "schedule_", None)
    if schedule is not None:  # batched DP-UCBVI (and its twin): the public batch schedule and the noise per release
        return {"mechanism": "gaussian" if agent.sigma_ > 0 else "none", "batch_schedule": dict(schedule),
                "sigma_per_release": agent.sigma_, "l2_sensitivity": agent.l2_}
    cal = getattr(agent, "calibration_", None)
    if cal is None:
        return None
    return {"mechanism": cal.mechanism, "node_scale": cal.scale, "tree_levels": cal.n_levels,
            "n_counters": cal.n_counters, "family_step_sensitivity": cal.step_sensitivity,
            "family_budget": cal.family_budget, "counter_error_E": cal.E, "bonus_log_term": cal.log_term,
            "noise": "exact discrete Laplace / Gaussian on integer counters (privacy.samplers)"
                     if cal.mechanism != "none" else None,
            "lattice": {"visits": "1", "transitions": "1",
                        "rewards": f"2^-{cal.reward_bits} (stochastic rounding of each reward before any sum)"},
            "constants": {"name": cal.constants.name, "error": cal.constants.error,
                          "c_threshold": cal.constants.c_threshold, "c_phi": cal.constants.c_phi,
                          "c_psi": cal.constants.c_psi}}
