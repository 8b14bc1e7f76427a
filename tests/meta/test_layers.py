"""Layers that hold: no import cycles among namedschema's modules, a stdlib-only core.

The import graph is read from the source: every ``import`` statement that can run,
those inside functions included, so a cycle hidden in a function body fails here
although it would only bite at run time. Imports under ``if TYPE_CHECKING:`` never
run and are left out (type checkers resolve cycles among annotations).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

from tests.helpers import REPO_ROOT

PACKAGE = "namedschema"
PACKAGE_DIR = os.path.join(REPO_ROOT, PACKAGE)

# What ``import namedschema`` must work with: the standard library alone.
CORE = ["namedschema", "namedschema._core.schema", "namedschema._core.instance", "namedschema._core.pickling",
        "namedschema._pickle",  # the wire name of rebuild_schema
        "namedschema._core.codegen", "namedschema._core.factories", "namedschema.errors",
        "namedschema._core.attrdict", "namedschema._core.classdef", "namedschema._core.dynamic_types",
        "namedschema._core.limits", "namedschema._core.printable",
        "namedschema.integrations",
        # Import hooks that wait for torch / cloudpickle (they import neither).
        "namedschema.integrations._import_hooks", "namedschema.integrations._torch_hook",
        "namedschema.integrations._cloudpickle_hook"]


def _modules() -> dict[str, str]:
    """Dotted module name -> file, for every module of the package."""
    found = {}
    for folder, _dirs, files in os.walk(PACKAGE_DIR):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path, REPO_ROOT)[:-3].replace(os.sep, ".")
                found[dotted.removesuffix(".__init__")] = path
    return found


def _runtime_imports(tree: ast.AST):
    """Import nodes of ``tree`` outside ``if TYPE_CHECKING:`` bodies."""
    pending = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        if isinstance(node, ast.If) and (
                (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
                or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")):
            pending.extend(node.orelse)
            continue
        pending.extend(ast.iter_child_nodes(node))


def import_graph(modules: dict[str, str] | None = None) -> dict[str, dict[str, int]]:
    """module -> {namedschema module it imports: line of the first such import}.

    ``from . import x`` counts as importing the submodule ``x`` when there is one,
    else the package; a module's own parent packages are not edges (importing a
    submodule always runs them first, and a package's ``__init__`` importing its
    submodules would otherwise be a cycle by construction).
    """
    modules = modules or _modules()
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        is_package = path.endswith("__init__.py")
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        edges: dict[str, int] = {}
        for node in _runtime_imports(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = module if is_package else module.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        base = base.rpartition(".")[0]
                    source = f"{base}.{node.module}" if node.module else base
                else:
                    source = node.module or ""
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source
                           for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != module and not module.startswith(target + "."):
                    edges.setdefault(target, node.lineno)
        graph[module] = edges
    return graph


def find_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Every cycle a depth-first search meets, each as [a, b, ..., a]."""
    cycles, state, stack = [], {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == "open":
                cycles.append(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return cycles


def test_graph_reader_sees_function_level_imports_and_cycles(tmp_path):
    """The reader finds an import inside a function and reports the cycle it closes."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from . import a\n")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .a import g\n    from pkg import c\n"
                              "if TYPE_CHECKING:\n    from . import d\n")
    (pkg / "d.py").write_text("from . import b\n")
    (pkg / "c.py").write_text("import os\n")
    modules = {name: str(pkg / f"{name.rpartition('.')[2]}.py")
               for name in ("pkg.a", "pkg.b", "pkg.c", "pkg.d")}
    modules["pkg"] = str(pkg / "__init__.py")
    graph = import_graph(modules)
    assert graph == {"pkg": {"pkg.a": 1}, "pkg.a": {"pkg.b": 1},
                     "pkg.b": {"pkg.a": 2, "pkg.c": 3}, "pkg.c": {}, "pkg.d": {"pkg.b": 1}}
    assert find_cycles(graph) == [["pkg.a", "pkg.b", "pkg.a"]]


def test_no_import_cycles_among_namedschema_modules():
    """No module of namedschema reaches itself through imports, at any level."""
    graph = import_graph()
    assert len(graph) > 20 and "namedschema._core.schema" in graph
    cycles = find_cycles(graph)
    described = [" -> ".join(f"{m} (line {graph[m][n]})" if n else m
                             for m, n in zip(c, c[1:] + [None], strict=True)) for c in cycles]
    assert not cycles, "import cycles:\n" + "\n".join(described)


def test_core_imports_only_core_modules():
    """The core modules import nothing of namedschema outside the core."""
    graph = import_graph()
    for module in CORE:
        outside = sorted(set(graph[module]) - set(CORE))
        assert not outside, f"{module} imports {outside}"


_BLOCK_NON_STDLIB = """
import sys
allowed = set(sys.stdlib_module_names)

class Block:
    def find_spec(self, name, path=None, target=None):
        top = name.partition('.')[0]
        if top not in allowed and top != 'namedschema':
            raise ImportError(f'blocked: {name} is not in the standard library')
        return None

sys.meta_path.insert(0, Block())
before = set(sys.modules)
import namedschema
from namedschema import NamedArrayTupleSchema, NamedTupleSchema, namedarraytuple
import pickle
P = NamedTupleSchema('P', 'x y')
A = NamedArrayTupleSchema('A', 'a b')
a = A([1, 2, 3], [4, 5, 6])
a[1] = A(0, 0)
assert pickle.loads(pickle.dumps(P(1, 2))) == (1, 2) and a.a == [1, 0, 3]
assert a[2] == (3, 6) and namedarraytuple('N', 'u v')(1, 2).v == 2
loaded = {m.partition('.')[0] for m in set(sys.modules) - before}
outside = sorted(m for m in loaded if m not in allowed and m != 'namedschema')
assert not outside, outside
print('ok', 'numpy' in sys.modules)
"""


def test_core_imports_and_works_with_the_standard_library_alone():
    """A fresh interpreter without site-packages (``-S``) that cannot import numpy (or
    anything else outside the stdlib) imports namedschema and uses schemas over lists."""
    proc = subprocess.run([sys.executable, "-S", "-c", _BLOCK_NON_STDLIB], capture_output=True,
                          text=True, timeout=120, cwd=REPO_ROOT,
                          env=dict(os.environ, PYTHONPATH=REPO_ROOT))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ok", "False"]


def test_blocking_numpy_really_blocks_it():
    """The blocker used above refuses numpy (so the test above can fail)."""
    code = _BLOCK_NON_STDLIB.split("import namedschema")[0] + "import numpy\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=REPO_ROOT)
    assert proc.returncode != 0 and "blocked: numpy" in proc.stderr


@pytest.mark.parametrize("module", sorted(set(_modules()) - {"namedschema.__main__"}))
def test_every_module_imports_on_its_own(module):
    """Each module imports first in a fresh interpreter (no hidden order dependency)."""
    if module == "namedschema.integrations.torch":
        pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True,
                          text=True, timeout=120, cwd=REPO_ROOT,
                          env=dict(os.environ, PYTHONPATH=REPO_ROOT))
    assert proc.returncode == 0, proc.stderr
