"""Why batched DP-UCBVI does or does not learn: noise against counts, known pairs and bonus sizes per batch.

For one environment, algorithm (``dp-ucbvi-batched`` at (1, 1e-6)-JDP or its twin ``ucbvi-batched``),
K and seed, plays the run as ``privaudit explore`` does (``run_episodes`` on the explorer of the
registry) and, after every batch release, prints one JSON line with:

* ``users``: users served so far; ``sd``: the noise sd of one released cell after j releases
  (sigma sqrt(j)); ``n_noise_sd``: the sd of the noise of a pair's visit count n~ = sum_s' m~
  (sd sqrt(S)); ``known_threshold``: the n~ a pair must exceed to leave the optimistic value;
* ``pairs``: the pairs (s, a), times H when not pooled; ``visited``: pairs with a true (capped)
  count > 0; ``true_above_threshold``: pairs whose TRUE count exceeds the threshold;
  ``known``: pairs the agent treats as known (noisy n~ above it); ``mass_known``: the share of all
  counted transitions that lie in known pairs;
* ``noise_to_count``: median over visited pairs of n_noise_sd / n(s, a) (true count), and the same
  over the pairs the current policy visits most (``noise_to_count_top``: the 1% most visited);
* ``bonus``: median over known pairs of each bonus term (Bernstein first order, second order,
  Gaussian privacy) at step 0, and the share of (h, s, a) whose Q sits at its optimistic cap;
* ``regret_batch``: the mean regret per user of the batch just played.

Diagnostics only: reads the agent's internal (unreleased) exact counts through a wrapper; nothing here
is an output of the explorer. Usage::

    python experiments/batched_ucbvi_diagnostics.py --env random-tabular --algo dp-ucbvi-batched \\
        --episodes 100000 --seed 0 [--out FILE.jsonl]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from privaudit.mdp.tabular import reference_regrets
from privaudit.online.explore import validate_budget
from privaudit.online.protocol import Agent, run_episodes
from privaudit.online.tabular.batched_ucb import build, capped_counts
from privaudit.privacy.budget import resolve_budget

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_batched_ucbvi import ENVS, make  # noqa: E402  (the benchmark's environments, one definition)


class Recorder(Agent):
    """Plays the wrapped batched explorer unchanged and summarises its state after every release."""

    acts_by_policy = True

    def __init__(self, agent, lines: list):
        self.agent, self.lines = agent, lines
        self.exact = np.zeros_like(agent.released_)
        self._batch_states, self._batch_actions, self._t0 = [], [], time.process_time()

    def start_episode(self, k):
        self.agent.start_episode(k)

    def policy(self):
        return self.agent.policy()

    def observe(self, h, s, a, r, s_next):  # pragma: no cover - the runner uses observe_episode
        raise NotImplementedError

    def observe_episode(self, states, actions, rewards):
        self._batch_states.append(states)
        self._batch_actions.append(actions)
        self.agent.observe_episode(states, actions, rewards)

    def end_episode(self):
        ag = self.agent
        before = ag.n_released
        ag.end_episode()
        if ag.n_released == before:
            return
        self.exact += capped_counts(np.stack(self._batch_states), np.stack(self._batch_actions), ag.S, ag.A,
                                    pooled=ag.pooled, cap=ag.cap)
        self._batch_states, self._batch_actions = [], []
        self.lines.append(self.summary())

    def summary(self) -> dict:
        ag, j = self.agent, self.agent.n_released
        S = ag.S
        sd = ag.sigma_ * math.sqrt(j)
        thr = max(ag._z * sd * math.sqrt(S), 0.5)
        n_true = self.exact.sum(-1)
        n_noisy = ag.released_.sum(-1)
        known = n_noisy > thr
        visited = n_true > 0
        ratio = (sd * math.sqrt(S)) / np.where(visited, n_true, 1.0)
        top = n_true >= np.quantile(n_true[visited], 0.99) if visited.any() else visited
        row = {"batch": j, "users": int(ag.ends_[j - 1]), "sd": round(sd, 2), "n_noise_sd": round(sd * math.sqrt(S), 1),
               "known_threshold": round(thr, 1), "pairs": int(n_true.size), "visited": int(visited.sum()),
               "true_above_threshold": int((n_true > thr).sum()), "known": int(known.sum()),
               "mass_known": round(float(n_true[known].sum() / max(n_true.sum(), 1)), 4),
               "max_true_count": int(n_true.max()),
               "median_true_count_visited": float(np.median(n_true[visited])) if visited.any() else 0.0,
               "noise_to_count": round(float(np.median(ratio[visited])), 3) if visited.any() else None,
               "noise_to_count_top": round(float(np.median(ratio[top])), 3) if visited.any() else None,
               "cpu_s": round(time.process_time() - self._t0, 1)}
        terms = getattr(ag, "bonus_terms_", None)
        if terms is not None and j < len(ag.ends_):
            k0 = known if known.ndim == 2 else known[0]
            if k0.any():
                row["bonus_h0_median_known"] = [round(float(np.median(t[k0])), 3) for t in terms[0]]
            row["share_at_cap"] = round(float(getattr(ag, "at_cap_", np.zeros(1)).mean()), 4)
        return row


def run(env_name: str, algo: str, K: int, seed: int) -> tuple[list, dict]:
    """One diagnosed run; returns the per-release lines and a run summary."""
    env = make(env_name)
    budget = validate_budget(algo, None, resolve_budget(epsilon=1.0, delta=1e-6).rho, 1e-6) \
        if algo.startswith("dp-") else None
    agent = build(env, K, budget, "practical", 0.05, np.random.default_rng(seed), algo=algo)
    lines: list = []
    rec = Recorder(agent, lines)
    res = run_episodes(env, rec, K)
    ends = np.r_[0, agent.ends_]
    for line, a, b in zip(lines, ends[:-1], ends[1:]):
        line["regret_batch"] = round(float(res.regret[a:b].mean()), 4)
    tenth = max(1, K // 10)
    summary = {"env": env_name, "algo": algo, "K": K, "seed": seed, "sigma": round(agent.sigma_, 3),
               "l2": round(agent.l2_, 3), "z": round(agent._z, 3),
               "cumulative_regret": round(float(res.regret.sum()), 1),
               "mean_regret_first_10pct": round(float(res.regret[:tenth].mean()), 4),
               "mean_regret_last_10pct": round(float(res.regret[-tenth:].mean()), 4),
               "references": {k: round(v, 4) for k, v in reference_regrets(env.mdp).items()}}
    return lines, summary


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="random-tabular", choices=sorted(ENVS))
    ap.add_argument("--algo", default="dp-ucbvi-batched", choices=["dp-ucbvi-batched", "ucbvi-batched"])
    ap.add_argument("--episodes", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    lines, summary = run(args.env, args.algo, args.episodes, args.seed)
    text = "\n".join(json.dumps(x) for x in lines + [summary])
    print(text)
    if args.out is not None:
        with open(args.out, "a") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
