"""Packaging: every subpackage ships, and the bundled files are found."""

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
