"""The one algorithm registry: the CLI, train and audit take their choices from it."""

from __future__ import annotations

import inspect

import pytest

from privaudit.audit.mechanisms.registry import MECHANISMS
from privaudit.cli import audit as cli_audit
from privaudit.cli import explore as cli_explore
from privaudit.cli import train as cli_train
from privaudit.core.errors import UsageError
from privaudit.core import registry
from privaudit.learners.linear.logs import train_from_logs as linear_train
from privaudit.learners.tabular.train import train_from_logs as tabular_train
from privaudit.online.linear.build import LINEAR_ALGOS


def test_every_algorithm_loads_a_learner_with_fit():
    for name in registry.names(family=registry.OFFLINE):
        cls = registry.get(name).load()
        assert inspect.isclass(cls) and callable(getattr(cls, "fit", None)), name
        assert "fit" in {m for k in cls.__mro__ for m in vars(k)}


def test_cli_and_audit_choices_come_from_the_registry():
    algo = next(p for p in cli_train.command.params if p.name == "algo")
    assert tuple(algo.type.choices) == registry.names(family=registry.OFFLINE)
    private = registry.names(family=registry.OFFLINE, private=True)
    assert private == ("dp-apvi", "dp-pbb", "dp-vapvi")
    assert cli_audit.BUILTIN == ("release",) + private
    assert set(MECHANISMS) == set(cli_audit.BUILTIN)  # every private algorithm has an audit adapter


def test_families_partition_the_names_and_train_refuses_the_other_family(tmp_path):
    tab, lin, onl = (registry.names(family=f) for f in registry.FAMILIES)
    assert set(tab) | set(lin) | set(onl) == set(registry.names()) and len(tab + lin + onl) == len(registry.names())
    with pytest.raises(UsageError, match="unknown tabular algorithm 'pevi'; choose one of ve, apvi"):
        tabular_train(tmp_path / "never-read", None, algo="pevi")
    with pytest.raises(UsageError, match="unknown linear algorithm 'apvi'; choose one of pevi, vapvi, dp-vapvi"):
        linear_train(tmp_path / "never-read", None, "apvi")


def test_register_refuses_a_taken_name_or_an_unknown_family():
    with pytest.raises(UsageError, match="already registered"):
        registry.register(registry.Algorithm("apvi", "tabular", False, "x:Y", "dup"))
    with pytest.raises(UsageError, match="family"):
        registry.register(registry.Algorithm("new", "deep", False, "x:Y", "?"))
    with pytest.raises(UsageError, match="unknown algorithm 'nope'; choose one of ve, apvi"):
        registry.get("nope")


def test_explore_choices_come_from_the_same_registry():
    """One registry (issue 11): ``privaudit explore --algo`` lists its ``online`` entries, each builder loads."""
    algo = next(p for p in cli_explore.command.params if p.name == "algo")
    online = registry.names(family="online")
    assert tuple(algo.type.choices) == online and {"pucb", "ucb-vi", "dp-lsvi-ucb-pp"} <= set(online)
    assert set(online).isdisjoint(registry.names(family=registry.OFFLINE))
    for name in online:
        assert callable(registry.get(name).load()), name
    assert LINEAR_ALGOS == {n: registry.get(n).private for n in online if registry.get(n).needs_features}
