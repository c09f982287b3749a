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

An offline learner class answers :class:`OfflineLearner` (what it reads,
whether it is private, which options apply, how its privacy event is planned
from public facts): the CLI, the training functions and the pipeline ask the
class through its registry entry instead of branching on its name.

Adding a learner: write its class (``__init__`` stores parameters, ``fit``
returns ``self``, the policy in ``policy_``, the class attributes of
:class:`OfflineLearner`; see docs/learners.md, "Adding a learner"), then
:func:`register` an ``Algorithm`` here (or from your own module, before the
CLI parses its arguments). Nothing else names it: ``privaudit train --algo``,
``privaudit audit --mechanism`` (its adapter is built from the class,
``privaudit.audit.mechanisms.registry.ADAPTERS``), ``privaudit pipeline`` (its
``pipeline_share``) and the help texts read the registry when they run.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from privaudit.core.errors import UsageError

#: Families: how an algorithm reads the logs (offline) or meets its users (online).
FAMILIES = ("tabular", "linear", "online")
#: The offline families (``privaudit train``; private ones have an audit adapter).
OFFLINE = ("tabular", "linear")
#: What an offline learner reads (:attr:`OfflineLearner.reads`): "counts", exact counts of the
#: logs (not private); "release", a DP count release (made from the logs first, which spends the
#: budget; the learner is post-processing); "logs", the logs themselves (a private learner adds
#: its own noise and plans its own privacy event, :meth:`OfflineLearner.plan_event`).
READS = ("counts", "release", "logs")
#: Budget-share rules a private learner reading logs may name as its :attr:`OfflineLearner.pipeline_share`
#: (the pipeline setting that decides the share; ``privaudit.pipeline.guarantee.budget_shares``):
#: "linear_share", the configured share when the spec declares a feature map (DP-VAPVI);
#: "pbb_share", min(0.6, two thirds of what the others leave) when the spec has a public reward (DP-PBB).
SHARE_RULES = ("linear_share", "pbb_share")
#: Options of ``privaudit train`` that apply to some learners only (:attr:`OfflineLearner.options`):
#: the penalty constants C1, C2, C, and ``max_per_cell`` (a learner's own per-cell cap).
OPTIONS = ("C1", "C2", "C", "max_per_cell")


@runtime_checkable
class OfflineLearner(Protocol):
    """What every offline learner class answers, without an instance or a fit.

    Class attributes
    ----------------
    algorithm : str
        Its registry name (the ``--algo`` choice).
    private : bool
        True when its policy is differentially private (equals the registry entry's).
    reads : {"counts", "release", "logs"}
        See :data:`READS`.
    options : frozenset of str
        The members of :data:`OPTIONS` that apply to it (``privaudit train`` refuses the others).
    pipeline_output : str or None
        A private learner that reads logs and runs in ``privaudit pipeline``: what its part of
        the budget releases (one phrase for summary.json); None otherwise.

    Optional class attributes (read with a default of None)
    -------------------------------------------------------
    pipeline_share : float, str or None
        Whether and how ``privaudit pipeline`` runs it. None (default): it does not. A learner
        reading the release (``reads = "release"``): 0, it is fitted on the pipeline's count
        release (post-processing, no share). A private learner reading logs: its share of the
        total rho, a float in (0, 1), or the name of a rule of :data:`SHARE_RULES`.
    audit_adapter : str or None
        ``"module:Class"`` of its ``privaudit audit --mechanism`` adapter. None (default): the
        adapter is built from the learner (``privaudit.audit.mechanisms.registry.adapter_for``:
        the built-in adapter of its family and ``reads``, with this class as ``learner_class``).
    ledger_note : str or None
        A few words the ledger entry of its pipeline part adds (DP-PBB: "private Bellman backups").

    Methods
    -------
    get_params() -> dict
        Its constructor parameters (JSON-serialisable).
    fit(data, ...) -> self
        Learns; the policy is then in ``policy_``.
    plan_event(spec, budget, *, stationary) -> PrivacyEvent
        A private learner reading logs: the privacy event its fit on logs of ``spec`` records
        and the ledger is charged, from public facts only (before any row is read).
    mechanism_text(spec) -> str
        Same learners: how it adds its noise (one sentence for summary.json).
    train_on_logs(logs, spec, *, stationary, budget, seed, params, max_per_cell, context)
        A *tabular* learner that reads logs: the whole run (plan, ledger check, count, fit,
        charge), returning an object with the fitted ``learner``; the tabular ``train_from_logs``
        calls it. (The linear family's ``train_from_logs`` trains every linear learner itself.)
    """

    algorithm: ClassVar[str]
    private: ClassVar[bool]
    reads: ClassVar[str]
    options: ClassVar[frozenset]
    pipeline_output: ClassVar[str | None]

    def get_params(self) -> dict: ...

    def fit(self, data: Any, *args: Any, **kwargs: Any) -> Any: ...


def check_learner(cls: type, name: str, private: bool, family: str = "tabular") -> type:
    """``cls`` if it answers :class:`OfflineLearner` consistently with its registry entry.

    Raises
    ------
    UsageError
        A missing attribute, an unknown ``reads`` or option, ``algorithm`` / ``private``
        differing from the entry's ``name`` / ``private``, or a private learner reading logs
        without the methods that plan (``plan_event``, ``mechanism_text``) or, tabular, train
        (``train_on_logs``) it.
    """
    missing = [a for a in ("algorithm", "private", "reads", "options", "pipeline_output", "get_params", "fit")
               if not hasattr(cls, a)]
    if missing:
        raise UsageError(f"the learner class of algorithm {name!r} does not answer the OfflineLearner protocol: "
                         f"it misses {', '.join(missing)}.")
    needs = []
    if cls.private and cls.reads == "logs":
        needs = ["plan_event", "mechanism_text"] + (["train_on_logs"] if family == "tabular" else [])
    share = getattr(cls, "pipeline_share", None)
    checks = (
        (share is not None and not _share_fits(share, cls), f"has pipeline_share {share!r}: a release reader takes "
                                                            f"0, a private learner reading logs a float in (0, 1) "
                                                            f"or one of {SHARE_RULES}, others None"),
        (cls.reads not in READS, f"reads {cls.reads!r}, not one of {READS}"),
        (bool(set(cls.options) - set(OPTIONS)), f"has options {sorted(set(cls.options) - set(OPTIONS))} outside "
                                                f"{OPTIONS}"),
        (cls.algorithm != name, f"is named {cls.algorithm!r}"),
        (bool(cls.private) != private, f"says private={cls.private!r}, the registry {private!r}"),
        (any(not hasattr(cls, m) for m in needs), f"is private and reads logs but has no {'/'.join(needs)}"),
    )
    for failed, what in checks:
        if failed:
            raise UsageError(f"the learner class of algorithm {name!r} does not answer the OfflineLearner "
                             f"protocol: it {what}.")
    return cls


def _share_fits(share, cls: type) -> bool:
    """Whether ``share`` (not None) is a pipeline share ``cls`` may declare (:class:`OfflineLearner`)."""
    if not cls.private or cls.reads == "counts":
        return False
    if cls.reads == "release":
        return share == 0 and not isinstance(share, bool)
    if isinstance(share, str):
        return share in SHARE_RULES
    return isinstance(share, (int, float)) and not isinstance(share, bool) and 0 < share < 1


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
        """The learner class (checked against :class:`OfflineLearner`), or the online builder (imported now).

        Raises
        ------
        UsageError
            An offline learner class that does not answer the protocol (:func:`check_learner`).
        """
        module, _, attr = self.learner.partition(":")
        obj = getattr(importlib.import_module(module), attr)
        return obj if self.family not in OFFLINE else check_learner(obj, self.name, self.private, self.family)


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


def names_with(test, *, family: str | tuple[str, ...] = OFFLINE) -> tuple[str, ...]:
    """Registered offline names whose learner class passes ``test(cls)`` (imports those classes)."""
    return tuple(n for n in names(family=family) if test(get(n).load()))


def pipeline_names() -> tuple[str, ...]:
    """Offline learners ``privaudit pipeline`` runs (a ``pipeline_share`` other than None), in registry order."""
    return names_with(lambda cls: getattr(cls, "pipeline_share", None) is not None)


def _learner(name: str, family: str, private: bool, where: str, summary: str) -> Algorithm:
    """An offline learner's entry: ``where`` is its ``"module:Class"`` inside ``privaudit.learners.<family>``."""
    return Algorithm(name, family, private, f"privaudit.learners.{family}.{where}", summary)


def _linear_explorer(name: str, private: bool, summary: str) -> Algorithm:
    """An online explorer of a linear MDP: built by ``privaudit.online.linear.build.build_linear``
    (which tells them apart by ``algo``), it needs the environment's feature map."""
    return Algorithm(name, "online", private, "privaudit.online.linear.build:build_linear", summary,
                     needs_features=True)


for _a in (
    _learner("ve", "tabular", False, "ve:ValueIterationCE",
             "certainty-equivalent value iteration on exact counts (NOT private)"),
    _learner("apvi", "tabular", False, "apvi:APVI",
             "pessimistic value iteration, Bernstein penalty, on exact counts (NOT private)"),
    _learner("apvi-hoeffding", "tabular", False, "apvi:APVIHoeffding", "APVI with a Hoeffding penalty (NOT private)"),
    _learner("dp-apvi", "tabular", True, "dp_apvi:DPAPVI",
             "DP-APVI (Qiao & Wang 2023, Alg. 1): post-processing of a DP count release"),
    _learner("dp-pbb", "tabular", True, "dp_pbb:DPPBB",
             "DP-PBB: pessimistic value iteration with private Bellman backups (rho-zCDP), with a certificate"),
    _learner("pevi", "linear", False, "estimators:PEVI",
             "pessimistic value iteration with linear features (NOT private)"),
    _learner("vapvi", "linear", False, "estimators:VAPVI", "variance-aware PEVI with linear features (NOT private)"),
    _learner("dp-vapvi", "linear", True, "estimators:DPVAPVI",
             "DP-VAPVI (Qiao & Wang 2023, Alg. 2): Gaussian noise on its 5H statistics"),
    Algorithm("pucb", "online", True, "privaudit.online.explore:build_pucb",
              "PUCB (Vietri et al. 2020): tabular, Laplace (eps) or Gaussian (rho) tree counters, eps-JDP"),
    Algorithm("ucb-vi", "online", False, "privaudit.online.explore:build_ucbvi",
              "PUCB's non-private twin (exact counts; UBEV-style UCB-VI)"),
    Algorithm("dp-ucbvi-batched", "online", True, "privaudit.online.tabular.batched_ucb:build",
              "batched DP-UCBVI: Gaussian transition counts released once per geometric batch, pooled over h "
              "when stationary, Bernstein and privacy bonuses, rho-zCDP (learns at (1, 1e-6)-JDP)"),
    Algorithm("ucbvi-batched", "online", False, "privaudit.online.tabular.batched_ucb:build",
              "the non-private twin of dp-ucbvi-batched (exact counts, the same batches and bonuses)"),
    _linear_explorer("lsvi-ucb", False, "LSVI-UCB (Jin et al. 2020): linear MDP, non-private"),
    _linear_explorer("lsvi-ucb-pp", False,
                     "LSVI-UCB++ (He et al. 2023): variance-weighted, rare switching, non-private"),
    _linear_explorer("luyo", True, "private LSVI-UCB through batching (Luyo et al. 2021): Gram trees over batches, "
                                   "rho-zCDP"),
    _linear_explorer("ngo", True, "low-switching private LSVI-UCB (Ngo, Vietri & Wu 2022): Gram trees, capped "
                                  "det-doubling switches, rho-zCDP"),
    _linear_explorer("dp-lsvi-ucb-pp", True, "DP-LSVI-UCB++ (Sahu 2025, corrected): fresh GOE/Gaussian noise per "
                                             "(k, h), rho-zCDP"),
):
    register(_a)
del _a

__all__ = ["Algorithm", "FAMILIES", "OFFLINE", "READS", "OPTIONS", "SHARE_RULES", "pipeline_names", "OfflineLearner", "check_learner", "register",
           "get", "names", "names_with"]
