"""The one algorithm registry: the CLI, train and audit take their choices from it."""

from __future__ import annotations

import inspect
import json

import polars as pl
import pytest
from click.testing import CliRunner

from privaudit.audit.mechanisms.dp_apvi import DPAPVIMechanism
from privaudit.audit.mechanisms.registry import ADAPTERS, adapter_for
from privaudit.cli import main
from privaudit.cli import explore as cli_explore
from privaudit.cli import train as cli_train
from privaudit.core.errors import UsageError
from privaudit.core import registry
from privaudit.learners.linear.logs import train_from_logs as linear_train
from privaudit.learners.tabular.dp_apvi import DPAPVI
from privaudit.learners.tabular.dp_pbb import DPPBB
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
    assert tuple(ADAPTERS) == ("release",) + private  # every private algorithm has an audit adapter
    for name in private:
        assert ADAPTERS[name].name == name and ADAPTERS[name].learner_class is registry.get(name).load()


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


def test_every_offline_learner_answers_the_protocol_as_its_entry_says():
    """The CLI, training functions and pipeline ask the class (reads, options, plan_event), not the name."""
    reads = {}
    for name in registry.names(family=registry.OFFLINE):
        cls = registry.get(name).load()
        assert isinstance(cls, type) and issubclass(cls, object)
        assert cls.algorithm == name and cls.private == registry.get(name).private
        assert cls.reads in registry.READS and set(cls.options) <= set(registry.OPTIONS)
        reads[name] = cls.reads
    assert reads == {"ve": "counts", "apvi": "counts", "apvi-hoeffding": "counts", "dp-apvi": "release",
                     "dp-pbb": "logs", "pevi": "logs", "vapvi": "logs", "dp-vapvi": "logs"}
    for name in registry.names(family=registry.OFFLINE, private=True):
        cls = registry.get(name).load()
        if cls.reads == "logs":  # plans its own event; the pipeline's summary reads its phrases
            assert callable(cls.plan_event) and callable(cls.mechanism_text) and cls.pipeline_output


def test_check_learner_refuses_a_class_that_does_not_answer_the_protocol():
    class Good:
        algorithm, private, reads, options, pipeline_output = "x", False, "counts", frozenset(), None

        def get_params(self):
            return {}

        def fit(self, data):
            return self

    assert registry.check_learner(Good, "x", False) is Good
    assert isinstance(Good(), registry.OfflineLearner)
    with pytest.raises(UsageError, match="is named 'x'"):
        registry.check_learner(Good, "y", False)
    with pytest.raises(UsageError, match="says private=False, the registry True"):
        registry.check_learner(Good, "x", True)
    Bad = type("Bad", (Good,), {"reads": "tea leaves"})
    with pytest.raises(UsageError, match="reads 'tea leaves'"):
        registry.check_learner(Bad, "x", False)
    Bad = type("Bad", (Good,), {"options": frozenset({"gamma"})})
    with pytest.raises(UsageError, match="options"):
        registry.check_learner(Bad, "x", False)
    Bad = type("Bad", (Good,), {"private": True, "reads": "logs"})
    with pytest.raises(UsageError, match="no plan_event"):
        registry.check_learner(Bad, "x", True)
    for kind, share in (({}, 0.1), ({"private": True, "reads": "release"}, 0.3),
                        ({"private": True, "reads": "logs"}, "most"), ({"private": True, "reads": "logs"}, True)):
        Bad = type("Bad", (Good,), {**kind, "pipeline_share": share, "plan_event": None, "mechanism_text": None,
                                    "train_on_logs": None})
        with pytest.raises(UsageError, match="has pipeline_share"):
            registry.check_learner(Bad, "x", Bad.private)
    with pytest.raises(UsageError, match="misses fit"):
        registry.check_learner(type("NoFit", (), {k: getattr(Good, k) for k in
                                                  ("algorithm", "private", "reads", "options", "pipeline_output",
                                                   "get_params")}), "x", False)


def test_a_new_learner_is_its_class_and_one_registry_line(tmp_path):
    """Issue 27: a learner added by one ``register`` call is trained by ``train_from_logs`` through its
    protocol answers (no name branch anywhere); a class that breaks the protocol is refused at load."""
    from click.testing import CliRunner

    from privaudit.cli import main
    from privaudit.core.spec import load_spec
    from privaudit.learners.tabular.apvi import APVI

    class Cautious(APVI):  # APVI with a larger fallback: a "new" non-private learner on exact counts
        algorithm = "cautious-apvi"

        def __init__(self, *, C: float = 5.0):
            super().__init__(C=C)

    res = CliRunner().invoke(main, ["simulate", "random-tabular", "--episodes", "200", "--seed", "1", "--horizon",
                                    "4", "--states", "3", "--actions", "2", "--out", str(tmp_path / "logs.parquet"),
                                    "--spec-out", str(tmp_path / "spec.json")])
    assert res.exit_code == 0, res.output
    spec = load_spec(tmp_path / "spec.json")
    module = inspect.getmodule(test_a_new_learner_is_its_class_and_one_registry_line)
    module.Cautious = Cautious
    try:
        registry.register(registry.Algorithm("cautious-apvi", "tabular", False, f"{module.__name__}:Cautious", "test"))
        pol = tabular_train(tmp_path / "logs.parquet", spec, algo="cautious-apvi")
        assert pol.algorithm == "cautious-apvi" and pol.parameters["C"] == 5.0 and not pol.privacy.private
        registry._REGISTRY.pop("cautious-apvi")
        registry.register(registry.Algorithm("cautious-apvi", "tabular", True, f"{module.__name__}:Cautious", "x"))
        with pytest.raises(UsageError, match="says private=False, the registry True"):
            tabular_train(tmp_path / "logs.parquet", spec, algo="cautious-apvi")
    finally:
        registry._REGISTRY.pop("cautious-apvi", None)
        del module.Cautious


class CautiousDPAPVI(DPAPVI):
    """A "new" private learner on a count release: DP-APVI with a larger fallback penalty (C = 5)."""

    algorithm = "cautious-dp-apvi"

    def __init__(self, *, C: float = 5.0, **kw):
        super().__init__(C=C, **kw)


class ToyPBB(DPPBB):
    """A "new" private learner on the logs with DP-PBB's noise, run by the pipeline at a fixed 0.1 of rho."""

    algorithm = "toy-pbb"
    pipeline_share = 0.1


@pytest.fixture
def new_learners():
    """The two toy learners, each registered by one line (and removed after the test)."""
    added = [registry.register(registry.Algorithm("cautious-dp-apvi", "tabular", True, f"{__name__}:CautiousDPAPVI",
                                                  "DP-APVI with C = 5 (a test's learner)")),
             registry.register(registry.Algorithm("toy-pbb", "tabular", True, f"{__name__}:ToyPBB",
                                                  "DP-PBB at a fixed pipeline share (a test's learner)"))]
    yield added
    for a in added:
        registry._REGISTRY.pop(a.name, None)


def _small_logs(tmp_path):
    """tmp_path / logs.parquet and spec.json: 200 episodes of a random tabular MDP (H = 3, S = 3, A = 2)."""
    res = CliRunner().invoke(main, ["simulate", "random-tabular", "--episodes", "200", "--seed", "1", "--horizon",
                                    "3", "--states", "3", "--actions", "2", "--out", str(tmp_path / "logs.parquet"),
                                    "--spec-out", str(tmp_path / "spec.json")])
    assert res.exit_code == 0, res.output


def test_a_new_private_learner_is_trained_and_audited_from_the_cli(new_learners, tmp_path):
    """Issue 27 item 4: a private learner registered by one line is an --algo choice of `train` and a built-in
    of `audit --mechanism` (its adapter built from the class), and both help pages list it; no other file."""
    _small_logs(tmp_path)
    assert "cautious-dp-apvi (tabular; private: from LOGS the counts are released first" in " ".join(
        CliRunner().invoke(main, ["train", "--help"]).output.split())
    assert "| cautious-dp-apvi | toy-pbb |" in " ".join(CliRunner().invoke(main, ["audit", "--help"]).output.split())
    res = CliRunner().invoke(main, ["train", str(tmp_path / "logs.parquet"), "--spec", str(tmp_path / "spec.json"),
                                    "--algo", "cautious-dp-apvi", "--rho", "1", "--stationary",
                                    "--out", str(tmp_path / "pol")])
    assert res.exit_code == 0, res.output
    manifest = json.loads((tmp_path / "pol" / "policy.json").read_text())
    assert manifest["algorithm"] == "cautious-dp-apvi" and manifest["parameters"]["C"] == 5.0
    assert manifest["privacy"]["private"] and manifest["privacy"]["guarantee"]["rho"] == 1
    adapter = ADAPTERS["cautious-dp-apvi"]
    assert issubclass(adapter, DPAPVIMechanism) and adapter.learner_class is CautiousDPAPVI
    assert ADAPTERS["toy-pbb"].learner_class is ToyPBB and ADAPTERS["dp-apvi"] is DPAPVIMechanism
    res = CliRunner().invoke(main, ["audit", "--mechanism", "cautious-dp-apvi", "--logs", str(tmp_path / "logs.parquet"),
                                    "--spec", str(tmp_path / "spec.json"), "--claim-rho", "1", "--trials", "100",
                                    "--seed", "1", "--out", str(tmp_path / "rep.json")])
    assert res.exit_code == 0, res.output
    assert "mechanism: cautious-dp-apvi, gaussian noise" in res.output
    rep = json.loads((tmp_path / "rep.json").read_text())
    assert rep["mechanism"].startswith("cautious-dp-apvi") and rep["claim"]["rho"] == 1


def test_a_new_private_learner_runs_in_the_pipeline_at_its_declared_share(new_learners, tmp_path):
    """The pipeline asks the registry: the toy learner on the logs gets its 0.1 of rho (planned, charged and
    composed like DP-PBB's part), the toy learner on the release is fitted on the pipeline's release."""
    _small_logs(tmp_path)  # DP-PBB and the toy need a public reward: r(s') = 1 on entering state 2
    logs = pl.read_parquet(tmp_path / "logs.parquet")
    logs.with_columns(reward=(pl.col("next_state") == 2).cast(pl.Float64)).write_parquet(tmp_path / "logs.parquet")
    doc = json.loads((tmp_path / "spec.json").read_text())
    (tmp_path / "spec.json").write_text(json.dumps({**doc, "public_reward": {"kind": "next_state",
                                                                             "values": {"2": 1.0}}}))
    res = CliRunner().invoke(main, ["pipeline", str(tmp_path / "logs.parquet"), "--spec", str(tmp_path / "spec.json"),
                                    "--rho", "1", "--audit-trials", "0", "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    out = tmp_path / "out"
    assert {p.name for p in (out / "policies").iterdir()} == {"dp-pbb", "dp-apvi", "cautious-dp-apvi", "toy-pbb"}
    assert json.loads((out / "policies" / "toy-pbb" / "policy.json").read_text())["algorithm"] == "toy-pbb"
    privacy = json.loads((out / "summary.json").read_text())["privacy"]
    # DP-PBB's rule counts the toy's 0.1 with the others: two thirds of 1 - 0.1 - 0.1, rounded down to 0.53
    assert privacy["details"]["split"] == {"release": 0.27, "dp-pbb": 0.53, "behaviour-value": 0.1, "toy-pbb": 0.1}
    parts = {p["name"]: p for p in privacy["details"]["parts"]}
    assert parts["toy-pbb"]["rho"] == 0.1 and privacy["rho"] == 1
    policies = {p["name"]: p for p in json.loads((out / "summary.json").read_text())["policies"]}
    assert policies["toy-pbb"]["privacy_part"] == "toy-pbb" and policies["cautious-dp-apvi"]["privacy_part"] == "release"


class OwnAdapterPBB(DPPBB):
    """A private learner on the logs that names its own audit adapter (here DP-PBB's, by path)."""

    algorithm = "own-adapter-pbb"
    audit_adapter = "privaudit.audit.mechanisms.dp_pbb:DPPBBMechanism"


def test_adapters_are_asked_of_the_registry():
    """A declared ``audit_adapter`` is imported as it is; a non-private or unknown name has no adapter."""
    entry = registry.register(registry.Algorithm("own-adapter-pbb", "tabular", True, f"{__name__}:OwnAdapterPBB",
                                                 "test"))
    try:
        assert ADAPTERS["own-adapter-pbb"] is ADAPTERS["dp-pbb"] and "own-adapter-pbb" in ADAPTERS
    finally:
        registry._REGISTRY.pop(entry.name)
    assert "own-adapter-pbb" not in ADAPTERS and "apvi" not in ADAPTERS and len(ADAPTERS) == 4
    with pytest.raises(KeyError):
        ADAPTERS["apvi"]
    with pytest.raises(UsageError, match="not a private offline learner"):
        adapter_for("apvi")
