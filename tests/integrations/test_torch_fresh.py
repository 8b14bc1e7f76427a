"""torch in fresh interpreters: the weights_only hook whatever the import order."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from tests.helpers import run_fresh

pytestmark = pytest.mark.subprocess

# What ``import namedschema`` does once the hook line is in ``__init__``;
# calling install() again is harmless, so these tests hold either way.
_IMPORT = ("import namedschema as ns\n"
           "from namedschema.integrations import import_hooks, _torch_hook\n"
           "_torch_hook.install()\n")

_SAVE = _IMPORT + """
import io, sys
assert "torch" not in sys.modules, "importing namedschema imported torch"
assert "torch.serialization" in import_hooks.pending()
assert any(type(f).__name__ == "_Watcher" for f in sys.meta_path)
import torch
assert "torch.serialization" not in import_hooks.pending()
assert _torch_hook._registered
loader = sys.modules["torch.serialization"].__spec__.loader
assert "exec_module" not in vars(loader), "loader left patched"
Inner = ns.NamedArrayTupleSchema("Inner", "pos vel")
Traj = ns.NamedArrayTupleSchema("Traj", "obs inner done")
Meta = ns.NamedTupleSchema("Meta", "step name")
buf = io.BytesIO()
torch.save({"a": Traj(torch.arange(3.0), Inner(torch.ones(2), None), None),
            "b": [Meta(1, "x"), Traj(torch.zeros(1), None, torch.ones(1))]}, buf)
sys.stdout.buffer.write(buf.getvalue())
"""

_LOAD_CHECKS = """
y = torch.load(io.BytesIO(sys.stdin.buffer.read()), weights_only=True)
a, (m, b) = y["a"], y["b"]
assert type(a) is type(b) and type(a).__name__ == "Traj", (type(a), type(b))
assert isinstance(a, ns.NamedArrayTuple) and type(a.inner).__name__ == "Inner"
assert a.done is None and a.inner.vel is None and b.inner is None
assert torch.equal(a.obs, torch.arange(3.0)) and m == (1, "x")
assert a[1:].obs.tolist() == [1.0, 2.0]
print("ok", type(a).__name__, type(m).__name__)
"""


@pytest.fixture(scope="module")
def saved() -> bytes:
    """A torch.save file written by a fresh process that imported namedschema first."""
    return run_fresh(_SAVE).stdout


def test_namedschema_first_then_torch(saved):
    """Fresh process: namedschema imported before torch loads a weights_only file made elsewhere."""
    out = run_fresh(_IMPORT + "import io, sys, torch\n" + _LOAD_CHECKS, stdin=saved)
    assert out.stdout.decode().split() == ["ok", "Traj", "Meta"]


def test_torch_first_then_namedschema(saved):
    """Fresh process: torch imported first, then namedschema; weights_only load still works."""
    code = "import io, sys, torch\n" + _IMPORT + """
assert _torch_hook._registered and "torch.serialization" not in import_hooks.pending()
""" + _LOAD_CHECKS
    out = run_fresh(code, stdin=saved)
    assert out.stdout.decode().split() == ["ok", "Traj", "Meta"]


def test_without_namedschema_weights_only_refuses(saved):
    """Without namedschema imported, weights_only refuses the file (nothing is allowlisted by torch)."""
    code = """
import io, pickle, sys, torch
try:
    torch.load(io.BytesIO(sys.stdin.buffer.read()), weights_only=True)
except pickle.UnpicklingError as exc:
    print("refused", "rebuild_schema" in str(exc))
"""
    out = run_fresh(code, stdin=saved)
    assert out.stdout.decode().split() == ["refused", "True"]


def test_hook_costs_no_torch_import_and_uninstalls():
    """install() never imports torch; uninstall() drops the pending hook and the watcher goes."""
    code = _IMPORT + """
import sys
assert "torch" not in sys.modules
_torch_hook.install()  # idempotent: still one watcher, one callback
assert sum(type(f).__name__ == "_Watcher" for f in sys.meta_path) == 1
assert len(import_hooks._pending["torch.serialization"]) == 1
for name in list(import_hooks.pending()):
    for cb in list(import_hooks._pending[name]):
        import_hooks.cancel(name, cb)
assert not any(type(f).__name__ == "_Watcher" for f in sys.meta_path)
import torch
assert not _torch_hook._registered
print("ok")
"""
    assert run_fresh(code).stdout.decode().strip() == "ok"


def test_torch_submodule_import_triggers_registration():
    """Importing only torch.serialization (which imports torch) registers the entries too."""
    code = _IMPORT + """
import torch.serialization as ser
names = {g[1] for g in ser.get_safe_globals() if isinstance(g, tuple)}
print(sorted(n for n in names if n.startswith("namedschema")))
"""
    out = run_fresh(code).stdout.decode().strip()
    assert out == ("['namedschema._pickle.rebuild_schema', "
                   "'namedschema.integrations._torch_hook.ANY_SCHEMA']")


def test_two_files_one_schema_one_class(saved):
    """Two weights_only loads of one schema in a fresh process give one class."""
    code = _IMPORT + """
import io, sys, torch
data = sys.stdin.buffer.read()
one = torch.load(io.BytesIO(data), weights_only=True)["a"]
two = torch.load(io.BytesIO(data), weights_only=True)["a"]
print(type(one) is type(two), type(one.inner) is type(two.inner))
"""
    assert run_fresh(code, stdin=saved).stdout.decode().split() == ["True", "True"]
