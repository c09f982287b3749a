"""The one algorithm registry: the names ``privaudit train``, ``privaudit explore``,
the Python training functions and ``privaudit audit`` take their choices from.

Offline learners (families ``tabular`` and ``linear``) and online explorers
(family ``online``) are entries of the same registry; it lives in the core
layer so that both ``privaudit.learners`` and ``privaudit.online`` (which do
not import each other) read it.

Each :class:`Algorithm` names its learner class (offline) or its builder
(online) by import path, so reading the registry imports no learner
(``privaudit --help`` stays fast); it is imported by :meth:`Algorithm.load`
when a command uses it.

Adding a learner: write its class (``__init__`` stores parameters, ``fit``
returns ``self``, the policy in ``policy_``; see docs/learners.md), then
:func:`register` an ``Algorithm`` here (or from your own module, before the
CLI parses its arguments). A private learner also needs an audit adapter
(``privaudit.audit.mechanisms.registry.MECHANISMS``, under the same name): a test
checks that every private algorithm has one.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from privaudit.core.errors import UsageError

#: Families: how an algorithm reads the logs (offline) or meets its users (online).
FAMILIES = ("tabular", "linear", "online")
#: The offline families (``privaudit train``; private ones have an audit adapter).
OFFLINE = ("tabular", "linear")


@dataclass(frozen=True)
class Algorithm:
    """One trainable algorithm.

    Attributes
    ----------
    name : str
        The ``--algo`` name.
    family : {"tabular", "linear", "online"}
        "tabular": counts over (H, S, A) (``privaudit.data.counts_protocol.Counts``);
        "linear": per-step regressions on the spec's feature map;
        "online": an explorer for ``privaudit explore``.
    private : bool
        True when the algorithm is differentially private (it spends budget).
    learner : str
        ``"module:Class"`` of the learner; for an online explorer
        ``"module:function"`` of its builder
        ``build(env, K, budget, constants, beta, rng, *, algo) -> Agent``.
    summary : str
        One line for help texts.
    needs_features : bool
        Online only: True when the explorer needs the environment's feature map.
    """

    name: str
    family: str
    private: bool
    learner: str
    summary: str
    needs_features: bool = False

    def load(self) -> type:
        """The learner class, or the online builder (imported now)."""
        module, _, attr = self.learner.partition(":")
        return getattr(importlib.import_module(module), attr)


_REGISTRY: dict[str, Algorithm] = {}


def register(algorithm: Algorithm) -> Algorithm:
    """Add an algorithm; refuses a second one under the same name or an unknown family.

    Raises
    ------
    UsageError
        ``algorithm.name`` is taken, or ``algorithm.family`` is not one of :data:`FAMILIES`.
    """
    if algorithm.family not in FAMILIES:
        raise UsageError(f"`family` must be one of {FAMILIES}. Found {algorithm.family!r}.")
    if algorithm.name in _REGISTRY:
        raise UsageError(f"an algorithm named {algorithm.name!r} is already registered.")
    _REGISTRY[algorithm.name] = algorithm
    return algorithm


def get(name: str) -> Algorithm:
    """The algorithm called ``name``.

    Raises
    ------
    UsageError
        Unknown name (the message lists the registered ones).
    """
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UsageError(f"unknown algorithm {name!r}; choose one of {', '.join(names())}.") from None


def names(*, family: str | tuple[str, ...] | None = None, private: bool | None = None) -> tuple[str, ...]:
    """Registered names, in registration order, optionally of one family (or a tuple of them) and/or privacy."""
    fams = (family,) if isinstance(family, str) else family
    return tuple(a.name for a in _REGISTRY.values()
                 if (fams is None or a.family in fams) and (private is None or a.private == private))


for _a in (
    Algorithm("ve", "tabular", False, "privaudit.learners.tabular.ve:ValueIterationCE",
              "certainty-equivalent value iteration on exact counts (NOT private)"),
    Algorithm("apvi", "tabular", False, "privaudit.learners.tabular.apvi:APVI",
              "pessimistic value iteration, Bernstein penalty, on exact counts (NOT private)"),
    Algorithm("apvi-hoeffding", "tabular", False, "privaudit.learners.tabular.apvi:APVIHoeffding",
              "APVI with a Hoeffding penalty (NOT private)"),
    Algorithm("dp-apvi", "tabular", True, "privaudit.learners.tabular.dp_apvi:DPAPVI",
              "DP-APVI (seed 000 Alg. 1): post-processing of a DP count release"),
    Algorithm("dp-pbb", "tabular", True, "privaudit.learners.tabular.dp_pbb:DPPBB",
              "DP-PBB: pessimistic value iteration with private Bellman backups (rho-zCDP), with a certificate"),
    Algorithm("pevi", "linear", False, "privaudit.learners.linear.estimators:PEVI",
              "pessimistic value iteration with linear features (NOT private)"),
    Algorithm("vapvi", "linear", False, "privaudit.learners.linear.estimators:VAPVI",
              "variance-aware PEVI with linear features (NOT private)"),
    Algorithm("dp-vapvi", "linear", True, "privaudit.learners.linear.estimators:DPVAPVI",
              "DP-VAPVI (seed 000 Alg. 2): Gaussian noise on its 5H statistics"),
    Algorithm("pucb", "online", True, "privaudit.online.explore:build_pucb",
              "PUCB (Vietri et al. 2020): tabular, Laplace (eps) or Gaussian (rho) tree counters, eps-JDP"),
    Algorithm("ucb-vi", "online", False, "privaudit.online.explore:build_ucbvi",
              "PUCB's non-private twin (exact counts; UBEV-style UCB-VI)"),
    Algorithm("lsvi-ucb", "online", False, "privaudit.online.linear.build:build_linear",
              "LSVI-UCB (Jin et al. 2020): linear MDP, non-private", needs_features=True),
    Algorithm("lsvi-ucb-pp", "online", False, "privaudit.online.linear.build:build_linear",
              "LSVI-UCB++ (He et al. 2023): variance-weighted, rare switching, non-private", needs_features=True),
    Algorithm("luyo", "online", True, "privaudit.online.linear.build:build_linear",
              "private LSVI-UCB through batching (Luyo et al. 2021): Gram trees over batches, rho-zCDP",
              needs_features=True),
    Algorithm("ngo", "online", True, "privaudit.online.linear.build:build_linear",
              "low-switching private LSVI-UCB (Ngo, Vietri & Wu 2022): Gram trees, capped "
              "det-doubling switches, rho-zCDP", needs_features=True),
    Algorithm("dp-lsvi-ucb-pp", "online", True, "privaudit.online.linear.build:build_linear",
              "DP-LSVI-UCB++ (Sahu 2025, corrected): fresh GOE/Gaussian noise per (k, h), rho-zCDP",
              needs_features=True),
):
    register(_a)
del _a

__all__ = ["Algorithm", "FAMILIES", "OFFLINE", "register", "get", "names"]
