"""Claims in README.md and docs/ that were found false (issue 29 item 6), checked against the code."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from privaudit.pipeline import PipelineConfig, run_pipeline
from privaudit.pipeline.config import PipelineConfig as Config

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def test_no_private_explorer_example_uses_a_seed():
    """A seeded explorer is not private: examples with a budget must not pass --seed (tests only)."""
    bad = [f"{p.name}: {line.strip()}" for p in DOCS for line in p.read_text().splitlines()
           if "privaudit explore" in line and "--seed" in line and re.search(r"--(epsilon|rho)\b", line)]
    assert bad == []


def test_no_doc_says_the_first_k_episodes_are_kept():
    """Bounding keeps the k episodes with the smallest hash of their id (data.bounding), not the first k."""
    bad = [f"{p.name}: {line.strip()}" for p in DOCS for line in p.read_text().splitlines()
           if re.search(r"(first k (episodes|stays)|the first k are kept)", line)]
    assert bad == []


def test_pipeline_doc_lists_every_run_pipeline_option():
    """docs/pipeline.md's run_pipeline paragraph names every PipelineConfig field, and no other."""
    text = (REPO / "docs" / "pipeline.md").read_text()
    para = text[text.index("`run_pipeline(logs=None, spec=None, *, echo=None, **options) -> dict`"):]
    para = para[:para.index("\n\n")]
    named = set(re.findall(r"`(\w+)(?:=[^`]*)?`", para)) - {"PipelineConfig", "private_log", "run_pipeline_config"}
    fields = set(inspect.signature(Config).parameters) - {"logs", "spec"}
    assert named >= fields and PipelineConfig is Config
    # the signature as written matches the code's (names, defaults, kinds; annotations left out)
    shown = []
    for p in inspect.signature(run_pipeline).parameters.values():
        if p.kind is p.VAR_KEYWORD:
            shown.append(f"**{p.name}")
            continue
        if p.kind is p.KEYWORD_ONLY and "*" not in shown:
            shown.append("*")
        shown.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}")
    assert f"`run_pipeline({', '.join(shown)}) -> dict`" in text
