"""Every relative link and image in the README and the docs resolves: to an existing file, and for
``#anchor`` links to an existing heading (GitHub's slug rules) or ``<a id=...>`` anchor."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO

#: Markdown files whose links are checked.
DOCS = sorted({REPO / "README.md", REPO / "CHANGELOG.md", *REPO.glob("docs/**/*.md"),
               *REPO.glob("benchmarks/results/*.md")} & {p for p in REPO.rglob("*.md")})


_FENCE = re.compile(r"^(```|~~~)")
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
_HTML_TARGET = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)=\"([^\"]+)\"", re.I)
_HTML_ANCHOR = re.compile(r"<a\b[^>]*?\b(?:id|name)=\"([^\"]+)\"", re.I)
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def _prose_lines(text: str):
    """(line number, line) of the lines outside fenced code blocks."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            yield n, line


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: its rendered text, lowercased, punctuation other than '-' and '_'
    dropped, each space a '-' (runs of hyphens are kept)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "").replace("*", "")
    text = text.strip().lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a link may name in ``path``: heading slugs (duplicates numbered) and HTML ids."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    text = path.read_text()
    for _, line in _prose_lines(text):
        m = _HEADING.match(line)
        if m:
            slug = github_slug(m.group(2))
            k = seen.get(slug, 0)
            seen[slug] = k + 1
            found.add(slug if k == 0 else f"{slug}-{k}")
        found.update(_HTML_ANCHOR.findall(line))
    return found


def links(path: Path):
    """(line number, target) of every link, image and reference definition outside code."""
    for n, line in _prose_lines(path.read_text()):
        m = _REF_DEF.match(line)
        if m:
            yield n, m.group(1)
            continue
        prose = _INLINE_CODE.sub("", line)
        for target in _INLINE_LINK.findall(prose):
            yield n, target
        for target in _HTML_TARGET.findall(prose):
            yield n, target


def broken_links(path: Path, root: Path = REPO) -> list[str]:
    """Human-readable problems with the relative links of one Markdown file (paths shown relative to root)."""
    problems = []
    for n, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto: ...
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(root)}:{n}: {target}"
        if not dest.exists():
            problems.append(f"{where}: no such file")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{where}: no heading or anchor #{anchor} in {dest.relative_to(root)}")
    return problems


@pytest.mark.parametrize("path", DOCS, ids=[str(p.relative_to(REPO)) for p in DOCS])
def test_relative_links_resolve(path):
    assert broken_links(path) == []


def test_the_checked_set_covers_the_readme_and_docs():
    names = {str(p.relative_to(REPO)) for p in DOCS}
    assert {"README.md", "docs/guide.md", "docs/references.md"} <= names


@pytest.mark.parametrize("heading, slug", [
    ("The main job: `privaudit pipeline`", "the-main-job-privaudit-pipeline"),
    ("Logs too large for one machine: `--engine spark`", "logs-too-large-for-one-machine---engine-spark"),
    ("Linear MDPs (`privaudit.online.linear`)", "linear-mdps-privauditonlinelinear"),
    ("Constants: theory and practical (`privaudit.online.tabular.pucb_constants`)",
     "constants-theory-and-practical-privauditonlinetabularpucb_constants"),
    ("DP-PBB: private Bellman backups with pessimism (the default DP learner)",
     "dp-pbb-private-bellman-backups-with-pessimism-the-default-dp-learner"),
    ("2. Choose the privacy unit and k", "2-choose-the-privacy-unit-and-k"),
])
def test_github_slug(heading, slug):
    assert github_slug(heading) == slug


def test_a_broken_link_and_a_missing_anchor_are_found(tmp_path):
    (tmp_path / "a.md").write_text("# Title\n\n## Dup\n\n## Dup\n\n<a id=\"x1\"></a>\n")
    doc = tmp_path / "b.md"
    doc.write_text("[ok](a.md#title) [ok2](a.md#dup-1) [ok3](a.md#x1) [web](https://example.org/none)\n"
                   "`[code](nowhere.md)`\n```\n[fenced](nowhere.md)\n```\n"
                   "[gone](missing.md) ![img](img/none.png) [bad](a.md#nothing)\n[ref]: also-missing.md\n")
    problems = broken_links(doc, root=tmp_path)
    assert len(problems) == 4, problems
    assert any("missing.md: no such file" in p for p in problems)
    assert any("img/none.png: no such file" in p for p in problems)
    assert any("#nothing" in p for p in problems)
    assert any("also-missing.md" in p for p in problems)
