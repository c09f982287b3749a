"""Value estimates that need no known MDP: certified values of the learners, the behaviour's DP value.

A hospital analyst has logs and no MDP, so the exact value of a policy is
unknown. The pipeline reports two estimates that need none:

* the **certified value** of each pessimistic learner (DP-APVI and any
  learner exposing ``declared_values()``): d0 . V_0, its own pessimistic value
  at step 0 averaged over a start distribution d0. Post-processing of DP
  outputs, provided d0 is public or released, never read off the logs
  (:func:`start_distribution` says which it is);
* the **behaviour (clinicians') value**, estimated with DP from the logged
  returns under its own part of the budget
  (``privaudit.release.behaviour_value``), with a confidence interval.

With a known MDP both are shown next to the exact values, and
``certificate_held`` says whether certified <= exact.
"""

from __future__ import annotations

import math

import numpy as np

from privaudit.learners.confidence import gaussian_tail, start_mean_lower_bound
from privaudit.release.behaviour_value import ValueStatistics

__all__ = ["start_distribution", "certified_value", "certified_entries", "start_lower_bound", "D0_SOURCES",
           "START_FAILURE_PROB", "PROVEN_CERTIFICATES", "NOT_A_CERTIFICATE", "NOT_A_CERTIFICATE_HELD",
           "upgrade_policy_entry"]

#: Where a start distribution can come from, in the order they are used.
D0_SOURCES = {
    "mdp": "the known MDP's initial distribution (public)",
    "value-release": "the noisy start-state counts of the behaviour-value release (DP), normalised by their sum",
    "release-h0": "the release's noisy visit counts at h = 0 summed over actions (DP), normalised by their sum",
}

#: The learners whose pessimistic value d0 . V_0 is proven here to lower-bound the policy's value
#: (docs/certificates.md, "DP-PBB: the certified value"). Any other learner's (APVI, DP-APVI: their papers'
#: analyses, Yin & Wang 2021, Qiao & Wang 2023) is a pessimistic estimate, not a certificate.
PROVEN_CERTIFICATES = ("dp-pbb",)
#: What summary.json, stdout and report.md say of such a number.
NOT_A_CERTIFICATE = ("pessimistic estimate, not a certificate (it rests on the learner's paper's analysis, which "
                     "docs/certificates.md does not prove; certify the policy on held-out units: --hold-out)")
#: The same for a policy that ``--hold-out`` certified (the advice above would tell the user to do what was done).
NOT_A_CERTIFICATE_HELD = ("pessimistic estimate, not a certificate (it rests on the learner's paper's analysis, "
                          "which docs/certificates.md does not prove; the held-out lower bound is the certificate)")

#: Failure probability spent on the start distribution when d0 is released, not public: the
#: certificate then holds with probability >= 1 - failure_prob(learner) - START_FAILURE_PROB.
START_FAILURE_PROB = 0.01


def _normalised(noisy: np.ndarray, terminal_states=()) -> np.ndarray | None:
    """n' / sum(n') with terminal states set to 0 (unclipped: the numerator of d0 . V stays unbiased),
    None if the sum is not > 0."""
    noisy = np.array(noisy, dtype=np.float64)
    noisy[list(terminal_states)] = 0.0
    tot = float(noisy.sum())
    return noisy / tot if tot > 0 else None


def start_distribution(*, value_stats: ValueStatistics | None = None, release=None,
                       mdp=None, terminal_states=()) -> tuple[np.ndarray | None, str | None]:
    """The start distribution d0 a certified value is averaged over, and its source.

    Only public facts or DP outputs are used, in this order: the known
    MDP's d0 (public: the certified value is then d0 . V_0 exactly); the
    behaviour-value release's noisy start-state counts; a per-step release's
    noisy h = 0 visits (a stationary release pools the steps: it has none). The noisy counts are normalised by their sum without
    clipping at 0: d0 . V is then a ratio of an unbiased numerator (clipping
    would add about sigma / sqrt(2 pi) of spurious mass to every unvisited
    start state) to a sum whose noise is small next to the number of episodes.
    Terminal states (public) get no mass: no episode has a step from one.

    Parameters
    ----------
    value_stats : ValueStatistics, optional
        The behaviour-value release (``privaudit.release.behaviour_value``).
    release : Release, optional
        The count release (``privaudit.release.tabular.load_release``).
    mdp : TabularMDP, optional
        A known MDP (``--mdp``).
    terminal_states : sequence of int
        The spec's terminal states: their noisy counts are set to 0.

    Returns
    -------
    (d0, source)
        d0 of shape (S,) (entries may be slightly negative; they sum to 1)
        and a key of :data:`D0_SOURCES`; (None, None) when none is available.
    """
    if mdp is not None:
        return np.asarray(mdp.d0, dtype=np.float64), "mdp"
    if value_stats is not None:
        d0 = _normalised(value_stats.start_states, terminal_states)
        if d0 is not None:
            return d0, "value-release"
    if release is not None and not release.stationary:
        d0 = _normalised(np.asarray(release.visits_at(0)).sum(-1), terminal_states)
        if d0 is not None:
            return d0, "release-h0"
    return None, None


def start_lower_bound(V0: np.ndarray, noisy_starts: np.ndarray, sigma: float, return_range: tuple[float, float],
                      terminal_states=(), failure_prob: float = START_FAILURE_PROB, *, max_episodes: int = 1) -> float:
    """A lower confidence bound on E_{s ~ d0}[V_0(s)] from released start counts (declared units).

    The plug-in d0' . V_0 with d0' the normalised noisy counts is an
    estimate, not a bound: the N logged start states are a sample of d0 and
    the counts carry noise. The margin is
    :func:`privaudit.learners.confidence.start_mean_lower_bound` (the one
    implementation, which DP-PBB's ``certified_value()`` also uses) on
    W = clip(V_0, lo, hi) - lo in [0, hi - lo], terminal states excluded,
    with failure_prob split in three: failure_prob / 3 for the noise of the
    numerator m' . W (sub-Gaussian tail), failure_prob / 6 for each side of
    the number of episodes N, failure_prob / 3 for the Hoeffding bound over
    privacy units (k = ``max_episodes`` episodes of one unit may share their
    start state), uniform over every V_0 (V_0 is learned from the same logs).
    Hence E_d0[V_0] >= lo + that bound, w.p. >= 1 - failure_prob; lo when N's
    lower bound is below 1 (docs/certificates.md, "Start distribution").

    Parameters
    ----------
    V0 : ndarray, shape (S,)
        Pessimistic values at step 0, declared units.
    noisy_starts : ndarray, shape (S,)
        m', the released start-state counts (float; may be negative).
    sigma : float
        Noise standard deviation of each count (>= 0).
    return_range : (lo, hi)
        The declared range of every episode's return.
    terminal_states : sequence of int
        Public: no episode starts in one (their counts and values are dropped).
    failure_prob : float
        In (0, 1).
    max_episodes : int
        k, the most episodes of one privacy unit (the spec's; public).

    Returns
    -------
    float
        The bound, in [lo, hi].
    """
    lo, hi = float(return_range[0]), float(return_range[1])
    keep = np.ones(np.asarray(V0).shape[0], dtype=bool)
    keep[list(terminal_states)] = False
    W = np.clip(np.asarray(V0, dtype=np.float64)[keep], lo, hi) - lo
    m = np.asarray(noisy_starts, dtype=np.float64)[keep]
    return lo + start_mean_lower_bound(W, m, sigma, hi - lo, max_episodes=max_episodes,
                                       t=gaussian_tail(failure_prob / 3.0), t_total=gaussian_tail(failure_prob / 6.0),
                                       log_term=math.log(3.0 / failure_prob))


def certified_value(V0: np.ndarray, d0: np.ndarray | None, return_range: tuple[float, float] | None = None
                    ) -> float | None:
    """d0 . V_0 (declared reward units), clipped into the declared return range; None without d0.

    Parameters
    ----------
    V0 : ndarray, shape (S,)
        A pessimistic learner's value at step 0 in declared units
        (``TabularLearnerBase.declared_values()[0]``).
    d0 : ndarray, shape (S,) or None
    return_range : (G_lo, G_hi), optional
        The declared range of every episode's return
        (``privaudit.release.behaviour_value.return_range``): every policy's
        value lies in it, so clipping keeps a lower bound a lower bound (a
        learner whose frame ignores a declared ``return_bound`` can certify
        less than G_lo, e.g. H r_min).
    """
    if d0 is None:
        return None
    v = float(np.asarray(d0, dtype=np.float64) @ np.asarray(V0, dtype=np.float64))
    return v if return_range is None else float(np.clip(v, return_range[0], return_range[1]))


def certified_entries(start_values: dict, d0: np.ndarray | None, d0_source: str | None,
                      exact: dict | None, return_range: tuple[float, float] | None = None, *,
                      value_stats: ValueStatistics | None = None, terminal_states=()) -> dict:
    """Per policy: ``certified_value``, ``certified_start``, ``certificate_held`` and ``pessimistic_estimate``.

    Only a learner of :data:`PROVEN_CERTIFICATES` gets a ``certified_value``; any other's number (computed
    the same way) is its ``pessimistic_estimate``, not a certificate (:data:`NOT_A_CERTIFICATE`), and its
    ``certified_value``, ``certified_start`` and ``certificate_held`` are None.

    With a public d0 (source ``mdp``) the certified value is d0 . V_0; with
    the behaviour-value release's noisy start counts (``value-release``) it
    is :func:`start_lower_bound` (the plug-in average over a noisy d0 would
    be an estimate, not a bound); a per-step release's h = 0 visits
    (``release-h0``) give no certified value (no margin is derived for them:
    give ``--value-share`` > 0 or ``--mdp``).

    Parameters
    ----------
    start_values : dict[str, ndarray (S,) or None]
        Policy name -> its pessimistic V_0 in declared units (None: the
        learner exposes none, e.g. DP-VAPVI).
    d0, d0_source
        From :func:`start_distribution`.
    exact : dict[str, float] or None
        Policy name -> exact value on a known MDP.
    return_range : (G_lo, G_hi), optional
        Passed to :func:`certified_value`; needed for ``value-release``.
    value_stats : ValueStatistics, optional
        The behaviour-value release (its ``start_states`` and their sigma).
    terminal_states : sequence of int
        The spec's terminal states.

    Returns
    -------
    dict[str, dict]
        ``certified_value`` (float or None), ``certified_start`` (a key of
        :data:`D0_SOURCES` or None), ``certificate_held`` (certified <=
        exact + 1e-9; None unless both are known) and ``pessimistic_estimate``
        (the same number for a learner whose certificate is not proven here, else None).
    """
    out = {}
    for name, V0 in start_values.items():
        cert = None
        if V0 is not None and d0_source == "mdp":
            cert = certified_value(V0, d0, return_range)
        elif V0 is not None and d0_source == "value-release" and value_stats is not None and return_range:
            cert = start_lower_bound(V0, value_stats.start_states, value_stats.sigma["start_states"],
                                     return_range, terminal_states, max_episodes=value_stats.max_episodes)
        estimate = None
        if name not in PROVEN_CERTIFICATES:
            cert, estimate = None, cert
        v = (exact or {}).get(name)
        out[name] = {"certified_value": cert, "certified_start": d0_source if cert is not None else None,
                     "certificate_held": None if cert is None or v is None else bool(cert <= v + 1e-9),
                     "pessimistic_estimate": estimate}
    return out


def upgrade_policy_entry(entry: dict) -> dict:
    """A summary.json policy entry written before ``pessimistic_estimate`` existed, read as today's.

    Such a summary printed every pessimistic learner's d0 . V_0 as ``certified_value``; for a learner
    outside :data:`PROVEN_CERTIFICATES` that number moves to ``pessimistic_estimate`` (the certificate
    fields become None). An entry that has the key is returned as it is.
    """
    if "pessimistic_estimate" in entry:
        return entry
    if entry.get("name") in PROVEN_CERTIFICATES:
        return {**entry, "pessimistic_estimate": None}
    out = {**entry, "pessimistic_estimate": entry.get("certified_value"), "certified_value": None,
           "certified_start": None, "certificate_held": None}
    if out.get("diagnostics"):
        out["diagnostics"] = {**out["diagnostics"], "certified_value": None}
    return out
