"""Packaging: every subpackage ships, the bundled files are found, the dependency ranges are tested."""

import re
import tomllib

from privaudit.core.package_data import sample_dir, schema_dir
from tests.conftest import REPO


def test_every_subpackage_is_listed_in_pyproject():
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "privaudit").rglob("__init__.py")}
    assert on_disk <= listed, f"add to pyproject.toml [tool.setuptools] packages: {sorted(on_disk - listed)}"


def test_bundled_files_are_found():
    assert (schema_dir() / "spec.schema.json").is_file()
    assert (sample_dir() / "icu-sepsis" / "dynamics.npz").is_file()
    assert (sample_dir() / "icu-sepsis" / "LICENSE.txt").is_file()
    assert (sample_dir() / "icu_sepsis_clinicians_20k.parquet").is_file()


def _requirements() -> list[str]:
    """Every direct requirement of pyproject.toml: the dependencies and the optional extras."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]


def test_every_dependency_has_a_tested_range_pinned_at_its_floor_for_ci():
    """Issue 33: a floor and an upper bound for each, and .ci/lowest-constraints.txt pins the floor (.ci/run)."""
    pins = dict(line.split("==") for line in (REPO / ".ci" / "lowest-constraints.txt").read_text().splitlines()
                if line.strip() and not line.startswith("#"))
    for req in _requirements():
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)(\[[a-z,]+\])?>=([0-9.]+),<([0-9.]+)", req)
        assert m, f"pyproject.toml: {req!r} must read NAME>=FLOOR,<UPPER (a tested range)"
        name, floor = m.group(1), m.group(3)
        assert name in pins, f".ci/lowest-constraints.txt does not pin {name} (floor {floor})"
        pinned = [int(x) for x in pins[name].split(".")]
        assert pinned[:len(floor.split("."))] == [int(x) for x in floor.split(".")], \
            f"{name}: pyproject's floor {floor} but .ci/lowest-constraints.txt pins {pins[name]}"
    assert set(pins) == {re.match(r"[A-Za-z0-9_.-]+", r).group(0) for r in _requirements()}
