"""Layers that hold: each module imports only its own layer and lower ones, no cycles.

The layers are the table in ``namedschema/__init__.py``'s docstring (lowest
first), read here from the source, so the table a reader sees is the one
checked. The import graph is read from the source too (no imports, no
subprocesses): every ``import`` statement that can run, those inside
functions included, and module names given as strings to ``import_module``
or looked up in ``sys.modules``, so an upward reach hidden in a function body
fails here although it would only show at run time. Imports under
``if TYPE_CHECKING:`` never run and are left out.

Rules: no module imports a higher layer; nothing inside the package imports
a front door (``namedschema``, ``namedschema.rlpyt``: apps import from the
layers too); no cycles; ``import namedschema`` needs the standard library
alone; every module imports first in a fresh process.
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
FRONT_DOORS = "front doors"

# What ``import namedschema`` must work with: the standard library alone.
CORE = ["namedschema", "namedschema._core.schema", "namedschema._core.instance",
        "namedschema._core.pickling",
        "namedschema._pickle",  # the wire name of rebuild_schema
        "namedschema.errors", "namedschema._version", "namedschema._core.attrdict",
        "namedschema.integrations",
        # Hooks for torch / cloudpickle (they import neither); import_hooks is the
        # explicit install()'s finder, which import namedschema does not install.
        "namedschema.integrations.import_hooks", "namedschema.integrations._torch_hook",
        "namedschema.integrations._cloudpickle_hook"]


def _modules(package_dir: str = PACKAGE_DIR) -> dict[str, str]:
    """Dotted module name -> file, for every module of the package."""
    root = os.path.dirname(package_dir)
    found = {}
    for folder, _dirs, files in os.walk(package_dir):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
                found[dotted.removesuffix(".__init__")] = path
    return found


# --------------------------------------------------------------------------
# The layer table
# --------------------------------------------------------------------------

def parse_layers(docstring: str, package: str = PACKAGE) -> list[tuple[str, list[str]]]:
    """``[(layer name, [module or package, ...]), ...]`` lowest first, from the table
    that follows the line starting ``Layers, lowest first`` (up to the next blank line
    after it). An entry is a path relative to the package: ``x.py`` a module,
    ``x/`` a package with everything in it, ``x/__init__.py`` that package's module alone;
    text after an entry in parentheses is a note.
    """
    lines = docstring.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Layers, lowest first"))
    rows = []
    body = lines[start + 1:]
    i = next(i for i, line in enumerate(body) if line.startswith("    "))
    for line in body[i:]:
        if not line.strip():
            break
        words = line.split("(")[0].split()
        first = next(n for n, w in enumerate(words) if w.endswith((".py", "/")))
        entries = []
        for word in words[first:]:
            dotted = word.removesuffix("/").removesuffix(".py").replace("/", ".")
            entries.append(f"{package}.{dotted}".removesuffix(".__init__"))
        rows.append((" ".join(words[:first]), entries))
    return rows


def _package_docstring() -> str:
    with open(os.path.join(PACKAGE_DIR, "__init__.py"), encoding="utf-8") as f:
        return ast.get_docstring(ast.parse(f.read())) or ""


LAYERS = parse_layers(_package_docstring())


def layer_of(module: str, layers=None) -> int | None:
    """Index in ``layers`` of the entry that covers ``module`` most closely.

    A package entry covers its submodules; a front door (a package's
    ``__init__`` module) only itself.
    """
    layers = LAYERS if layers is None else layers
    best, best_len = None, -1
    for index, (name, entries) in enumerate(layers):
        for entry in entries:
            covers = module == entry or (name != FRONT_DOORS and module.startswith(entry + "."))
            if covers and len(entry) > best_len:
                best, best_len = index, len(entry)
    return best


# --------------------------------------------------------------------------
# The import graph
# --------------------------------------------------------------------------

def _is_type_checking(test: ast.expr) -> bool:
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _is_sys_modules(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "modules"
            and isinstance(node.value, ast.Name) and node.value.id == "sys")


def _named_module(node: ast.AST) -> str | None:
    """The module a string names in ``import_module("m")``, ``sys.modules["m"]``,
    ``sys.modules.get("m")`` or ``__import__("m")``; else None."""
    arg = None
    if isinstance(node, ast.Subscript) and _is_sys_modules(node.value):
        arg = node.slice
    elif isinstance(node, ast.Call) and node.args:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name in ("import_module", "__import__") or (
                name == "get" and isinstance(func, ast.Attribute)
                and _is_sys_modules(func.value)):
            arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    return None


def _runtime_imports(tree: ast.AST, strings: bool = True):
    """Import nodes of ``tree`` outside ``if TYPE_CHECKING:`` bodies, and with
    ``strings`` the expressions that name a module in a string."""
    pending = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)) or (strings and _named_module(node)):
            yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            pending.extend(node.orelse)
            continue
        pending.extend(ast.iter_child_nodes(node))


def _targets(node: ast.AST, module: str, is_package: bool, modules) -> list[str]:
    """The modules of the package that one import statement (or expression) names."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = module if is_package else module.rpartition(".")[0]
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            source = f"{base}.{node.module}" if node.module else base
        else:
            source = node.module or ""
        return [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source
                for a in node.names]
    return [_named_module(node) or ""]


def import_graph(modules: dict[str, str] | None = None,
                 strings: bool = True) -> dict[str, dict[str, int]]:
    """module -> {module of the package it imports: line of the first such import}.

    ``from . import x`` counts as importing the submodule ``x`` when there is
    one, else the package; a name below a module (``import a.b.c`` where ``c``
    is a function) counts as its module. Parent packages count only where
    named (``from .. import x`` with ``x`` not a submodule); importing a
    submodule runs them anyway, which :func:`find_cycles` users leave out.
    ``strings=False`` leaves out modules named in strings (``import_module``,
    ``sys.modules``): the lazily loaded plug-ins of a layer.
    """
    modules = modules or _modules()
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        is_package = path.endswith("__init__.py")
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        edges: dict[str, int] = {}
        for node in _runtime_imports(tree, strings):
            for target in _targets(node, module, is_package, modules):
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != module:
                    edges.setdefault(target, node.lineno)
        graph[module] = edges
    return graph


def without_parents(graph: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """``graph`` less each module's edges to its own parent packages (which a
    package's ``__init__`` importing its submodules would make cycles by construction)."""
    return {m: {t: n for t, n in edges.items() if not m.startswith(t + ".")}
            for m, edges in graph.items()}


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


def layer_violations(graph, layers=None) -> list[str]:
    """Each import of a higher layer or of a front door, as ``module:line -> target (why)``."""
    layers = LAYERS if layers is None else layers
    doors = {entry for name, entries in layers if name == FRONT_DOORS for entry in entries}
    found = []
    for module, edges in sorted(graph.items()):
        mine = layer_of(module, layers)
        for target, line in sorted(edges.items()):
            theirs = layer_of(target, layers)
            if target in doors:
                found.append(f"{module}:{line} -> {target} (a front door: import from "
                             "the layer that defines the name)")
            elif mine is not None and theirs is not None and theirs > mine:
                found.append(f"{module}:{line} -> {target} (layer {layers[mine][0]!r} "
                             f"imports the higher layer {layers[theirs][0]!r})")
    return found


# --------------------------------------------------------------------------
# The reader, checked on a made-up package
# --------------------------------------------------------------------------

_TOY_DOC = """Toy.

Layers, lowest first (a note):

    base        base.py (imports nothing)
    low         mid/low/
    high        mid/high.py
    front doors __init__.py mid/__init__.py
    apps        app.py

Text after the table.
"""


def _toy_package(tmp_path, files: dict[str, str]) -> dict[str, str]:
    pkg = tmp_path / "pkg"
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    return _modules(str(pkg))


def test_table_reader_reads_layers_and_entries():
    """The docstring table becomes (name, modules) rows; notes and surrounding text are left out."""
    assert parse_layers(_TOY_DOC, "pkg") == [
        ("base", ["pkg.base"]), ("low", ["pkg.mid.low"]), ("high", ["pkg.mid.high"]),
        ("front doors", ["pkg", "pkg.mid"]), ("apps", ["pkg.app"])]


def test_graph_reader_sees_function_level_imports_and_cycles(tmp_path):
    """The reader finds an import inside a function and reports the cycle it closes."""
    modules = _toy_package(tmp_path, {
        "__init__.py": "from . import a\n", "a.py": "from . import b\n",
        "b.py": "def f():\n    from .a import g\n    from pkg import c\n"
                "if TYPE_CHECKING:\n    from . import d\n",
        "d.py": "from . import b\n", "c.py": "import os\n"})
    graph = import_graph(modules)
    assert graph == {"pkg": {"pkg.a": 1}, "pkg.a": {"pkg.b": 1},
                     "pkg.b": {"pkg.a": 2, "pkg.c": 3}, "pkg.c": {}, "pkg.d": {"pkg.b": 1}}
    assert find_cycles(graph) == [["pkg.a", "pkg.b", "pkg.a"]]


def test_layer_check_finds_upward_and_front_door_imports(tmp_path):
    """Upward imports at any depth, module names in strings, and front-door imports are
    found; imports of the own and lower layers are not."""
    layers = parse_layers(_TOY_DOC, "pkg")
    modules = _toy_package(tmp_path, {
        "__init__.py": "from .mid.high import C\n",
        "base.py": "import sys\ndef f():\n    return sys.modules.get('pkg.mid.low.x')\n",
        "mid/__init__.py": "def __getattr__(n):\n    return 1\n",
        "mid/low/__init__.py": "from .x import D\n",
        "mid/low/x.py": "from ... import base\nclass D:\n"
                        "    def m(self):\n        import pkg\n        from .. import high\n",
        "mid/high.py": "from importlib import import_module\nfrom .low import x\n"
                       "def f():\n    return import_module('pkg.app')\nfrom . import C\n",
        "app.py": "from .mid.high import f\nfrom . import base\n"})
    found = layer_violations(import_graph(modules), layers)
    assert found == [
        "pkg.base:3 -> pkg.mid.low.x (layer 'base' imports the higher layer 'low')",
        "pkg.mid.high:4 -> pkg.app (layer 'high' imports the higher layer 'apps')",
        "pkg.mid.high:5 -> pkg.mid (a front door: import from the layer that defines the name)",
        "pkg.mid.low.x:4 -> pkg (a front door: import from the layer that defines the name)",
        "pkg.mid.low.x:5 -> pkg.mid.high (layer 'low' imports the higher layer 'high')"]


# --------------------------------------------------------------------------
# namedschema
# --------------------------------------------------------------------------

def test_layer_table_covers_every_module():
    """The table names existing modules and packages, each once, and covers every module."""
    modules = _modules()
    entries = [entry for _, row in LAYERS for entry in row]
    assert len(LAYERS) >= 10 and len(entries) == len(set(entries))
    assert [e for e in entries if e not in modules] == []
    assert sorted(m for m in modules if layer_of(m) is None) == []
    assert LAYERS[-1][0] == "apps" and LAYERS[-2][0] == FRONT_DOORS


@pytest.mark.slow
def test_no_module_imports_a_higher_layer_or_a_front_door():
    """Every import (function-level ones included) goes to the module's own layer or lower."""
    found = layer_violations(import_graph())
    assert not found, "imports against the layer order:\n" + "\n".join(found)


@pytest.mark.slow
def test_no_import_cycles_among_namedschema_modules():
    """No module of namedschema reaches itself through import statements, at any level.

    A module a layer loads by name when first needed (``_core.instance`` loads
    ``_core.writes``, which numpy-free processes never import) is not an edge here.
    """
    graph = without_parents(import_graph(strings=False))
    assert len(graph) > 20 and "namedschema._core.schema" in graph
    cycles = find_cycles(graph)
    described = [" -> ".join(f"{m} (line {graph[m][n]})" if n else m
                             for m, n in zip(c, c[1:] + [None], strict=True)) for c in cycles]
    assert not cycles, "import cycles:\n" + "\n".join(described)


@pytest.mark.slow
def test_no_import_cycles_even_through_modules_loaded_by_name():
    """No cycle either where a module loads another by name when first needed (issue 29):
    ``_core.schema`` loads ``_core.writes`` (numpy) at the first checked write, and
    ``checkpoint._save`` loads ``checkpoint._incremental`` to settle a journal; neither
    loaded module imports back."""
    graph = without_parents(import_graph(strings=True))
    assert "namedschema.checkpoint._incremental" in graph["namedschema.checkpoint._save"]
    assert "namedschema._core.writes" in graph["namedschema._core.schema"]
    assert find_cycles(graph) == []


@pytest.mark.slow
def test_core_imports_only_core_modules():
    """The core modules import nothing of namedschema outside the core (statements)."""
    graph = import_graph(strings=False)
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


@pytest.mark.subprocess
def test_core_imports_and_works_with_the_standard_library_alone():
    """A fresh interpreter without site-packages (``-S``) that cannot import numpy (or
    anything else outside the stdlib) imports namedschema and uses schemas over lists."""
    proc = subprocess.run([sys.executable, "-S", "-c", _BLOCK_NON_STDLIB], capture_output=True,
                          text=True, timeout=120, cwd=REPO_ROOT,
                          env=dict(os.environ, PYTHONPATH=REPO_ROOT))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ok", "False"]


@pytest.mark.subprocess
def test_blocking_numpy_really_blocks_it():
    """The blocker used above refuses numpy (so the test above can fail)."""
    code = _BLOCK_NON_STDLIB.split("import namedschema", maxsplit=1)[0] + "import numpy\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=REPO_ROOT)
    assert proc.returncode != 0 and "blocked: numpy" in proc.stderr


# Each module is imported first in a process that has loaded, of namedschema, only
# what importing its parent package loads: a module's first import always runs its
# parents first, so a fork of the process that imported the parent is that fresh
# process, without paying again for what they import (numpy is loaded once before).
# A module its parent's import already loaded is covered by that import.
_IMPORT_EACH = """
import importlib, os, sys, traceback
import numpy
names = set(sys.argv[1:])


def visit(package):
    # ``package`` is imported here; import each of its submodules in a fork of this process.
    prefix = package + "."
    for name in sorted(n for n in names if n.startswith(prefix) and "." not in n[len(prefix):]):
        if name in sys.modules:
            visit(name)
            continue
        pid = os.fork()
        if pid == 0:
            try:
                importlib.import_module(name)
                visit(name)
            except BaseException:
                print("FAILED", name, flush=True)
                traceback.print_exc()
                os._exit(1)
            os._exit(0)
        os.waitpid(pid, 0)


top = sys.argv[1].partition(".")[0]
try:
    importlib.import_module(top)
    visit(top)
except BaseException:
    print("FAILED", top, flush=True)
    traceback.print_exc()
"""


# Modules that import torch at their top; torch alone takes seconds to import.
_NEEDS_TORCH = ("namedschema.integrations.torch",)


def _import_each(names) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _IMPORT_EACH, *names], capture_output=True,
                          text=True, timeout=600, cwd=REPO_ROOT,
                          env=dict(os.environ, PYTHONPATH=REPO_ROOT))


@pytest.mark.subprocess
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_every_module_imports_on_its_own():
    """Each module imports first in a process that has loaded nothing of namedschema
    but its parent packages (no hidden order dependency)."""
    names = sorted(set(_modules()) - {"namedschema.__main__", *_NEEDS_TORCH})
    proc = _import_each(names)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [], proc.stderr


@pytest.mark.subprocess
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_torch_modules_import_on_their_own():
    """The same for the modules that import torch."""
    pytest.importorskip("torch")
    proc = _import_each(["namedschema", "namedschema.integrations", *_NEEDS_TORCH])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [], proc.stderr


@pytest.mark.subprocess
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_import_each_reports_a_module_that_fails():
    """The per-module check above can fail: a missing module is reported by name."""
    proc = _import_each(["namedschema", "namedschema.errors", "namedschema.state",
                         "namedschema.state.no_such", "namedschema.no_such"])
    assert proc.stdout.split() == ["FAILED", "namedschema.no_such",
                                   "FAILED", "namedschema.state.no_such"], proc.stderr
