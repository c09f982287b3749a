"""Limits of the code's shape (issue 27): no module over 500 lines; no library function outside cli/ over 12
parameters (item 4: settings that travel together are one object, ``PipelineConfig``, ``AuditSettings``,
``RunContext``, ..., not a long signature).

Parameters are counted from the source with ast, so every function counts, nested and private ones too: positional,
keyword-only, ``*args`` and ``**kwargs`` each count one; ``self`` / ``cls`` of a method do not. The
command functions of ``privaudit/cli/`` take one parameter per flag (click) and are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "privaudit"
#: The most parameters a library function may take.
MAX_PARAMETERS = 12
#: The most lines a module of privaudit/ may have.
MAX_LINES = 500
#: Modules allowed over MAX_LINES (none).
LONG_MODULES_EXEMPT: set[str] = set()
#: Functions allowed over the limit, as "module path:name" (none).
EXEMPT: set[str] = set()


def parameter_count(fn: ast.FunctionDef | ast.AsyncFunctionDef, in_class: bool) -> int:
    """How many parameters a caller can pass ``fn`` (a bound method's ``self`` / ``cls`` not counted)."""
    a = fn.args
    names = [p.arg for p in a.posonlyargs + a.args]
    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list)
    if in_class and not static and names:
        names = names[1:]
    return len(names) + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)


def long_signatures(root: Path = PACKAGE, limit: int = MAX_PARAMETERS) -> list[str]:
    """``"path:line name (n parameters)"`` of every function under ``root`` (cli/ left out) over ``limit``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] == "cli":
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for parent in ast.walk(tree):
            for node in ast.iter_child_nodes(parent):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                n = parameter_count(node, isinstance(parent, ast.ClassDef))
                if n > limit and f"{rel.as_posix()}:{node.name}" not in EXEMPT:
                    found.append(f"privaudit/{rel.as_posix()}:{node.lineno} {node.name} ({n} parameters)")
    return found


def test_no_library_function_takes_more_than_12_parameters():
    assert long_signatures() == []


def test_the_count_sees_every_kind_of_parameter(tmp_path):
    """Broken control: a function of 13 parameters (each kind once), a method whose self is not counted,
    a static method whose first parameter is, and a cli/ function that is left out."""
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "command.py").write_text("def command(" + ", ".join(f"p{i}" for i in range(20)) + "): pass\n")
    (tmp_path / "lib.py").write_text(
        "def too_many(a, b, /, c, d, *args, e, f, g, h, i, j, k, **kw): pass\n"
        "def twelve(a, b, c, d, e, f, g, h, i, j, k, l): pass\n"
        "class C:\n"
        "    def method(self, a, b, c, d, e, f, g, h, i, j, k, l): pass\n"
        "    @staticmethod\n"
        "    def static(a, b, c, d, e, f, g, h, i, j, k, l, m): pass\n"
        "    @classmethod\n"
        "    def klass(cls, a, b, c, d, e, f, g, h, i, j, k, l):\n"
        "        def inner(a, b, c, d, e, f, g, h, i, j, k, l, m): pass\n")
    assert long_signatures(tmp_path) == ["privaudit/lib.py:1 too_many (13 parameters)",
                                         "privaudit/lib.py:6 static (13 parameters)",
                                         "privaudit/lib.py:9 inner (13 parameters)"]


def test_no_module_over_500_lines():
    long = {p.relative_to(PACKAGE).as_posix(): n for p in sorted(PACKAGE.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert {m: n for m, n in long.items() if m not in LONG_MODULES_EXEMPT} == {}
