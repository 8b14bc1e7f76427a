"""torch integration: weights_only loading, the allowlist's limits, torch.multiprocessing."""

from __future__ import annotations

import collections
import io
import pickle

import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import namedschema as ns  # noqa: E402
from namedschema._core import pickling as _pickle  # noqa: E402
from namedschema.integrations import _torch_hook  # noqa: E402
from namedschema.integrations import torch as nst  # noqa: E402
from tests.helpers import examples  # noqa: E402

_torch_hook.install()

Inner = ns.NamedArrayTupleSchema("Inner", "pos vel")
Traj = ns.NamedArrayTupleSchema("Traj", "obs inner done")
Meta = ns.NamedTupleSchema("Meta", "step name extra", defaults=(None,))


def _roundtrip(obj, **load_kw):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True, **load_kw)


def test_install_registered_without_user_action():
    """After install() with torch imported, both allowlist entries are in torch's list."""
    names = {name for _, name in (g for g in torch.serialization.get_safe_globals()
                                  if isinstance(g, tuple))}
    assert {_torch_hook.REBUILD_NAME, _torch_hook.ANY_SCHEMA_NAME} <= names


def test_only_two_entries_registered():
    """namedschema adds exactly two allowlist entries and nothing else of its own."""
    ours = [g for g in torch.serialization.get_safe_globals()
            if "namedschema" in (g[1] if isinstance(g, tuple) else
                                 getattr(g, "__module__", ""))]
    assert sorted(name for _, name in ours) == sorted(
        [_torch_hook.REBUILD_NAME, _torch_hook.ANY_SCHEMA_NAME])


def test_weights_only_nested_with_none():
    """A nested NamedArrayTuple with a None field loads under weights_only as the same schema."""
    x = Traj(torch.arange(6.0).reshape(3, 2), Inner(torch.ones(3), torch.zeros(3, 1)), None)
    y = _roundtrip(x)
    assert type(y) is Traj and type(y.inner) is Inner and y.done is None
    assert torch.equal(y.obs, x.obs) and torch.equal(y.inner.vel, x.inner.vel)


def test_weights_only_namedtuple_in_containers():
    """NamedTuple instances inside dicts and lists, with defaults, survive weights_only."""
    state = {"meta": [Meta(1, "a"), Meta(2, "b", torch.tensor([1, 2]))],
             "w": torch.randn(2, 2)}
    out = _roundtrip(state)
    assert out["meta"][0] == Meta(1, "a") and type(out["meta"][1]) is Meta
    assert torch.equal(out["meta"][1].extra, torch.tensor([1, 2]))
    assert torch.equal(out["w"], state["w"])


def test_weights_only_state_dict_style_checkpoint():
    """A module state_dict next to a replay sample loads with weights_only=True."""
    model = torch.nn.Linear(3, 2)
    ckpt = {"model": model.state_dict(),
            "batch": Traj(torch.zeros(4, 3), Inner(torch.ones(4), None), torch.zeros(4))}
    out = _roundtrip(ckpt)
    model.load_state_dict(out["model"])
    assert type(out["batch"]) is Traj and out["batch"].inner.vel is None


def test_weights_only_mmap_load(tmp_path):
    """torch.load(mmap=True, weights_only=True) also rebuilds schema instances."""
    path = tmp_path / "x.pt"
    x = Traj(torch.arange(4.0), None, Inner(torch.ones(2), None))
    torch.save(x, path)
    y = torch.load(path, weights_only=True, mmap=True)
    assert type(y) is Traj and torch.equal(y.obs, x.obs) and type(y.done) is Inner


def test_weights_only_shared_storage_kept():
    """A field that is a view of another keeps sharing storage after weights_only load."""
    base = torch.arange(10.0)
    y = _roundtrip(Inner(base, base[2:5]))
    y.pos[3] = -1.0
    assert y.vel[1].item() == -1.0


@pytest.mark.slow
@settings(max_examples=examples(20))
@given(fields=st.lists(st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True),
                       min_size=1, max_size=5, unique=True),
       n=st.integers(0, 4), array=st.booleans())
def test_weights_only_roundtrip_property(fields, n, array):
    """Any schema of tensors (None fields included) round-trips under weights_only."""
    import keyword
    fields = [f for f in fields if not keyword.iskeyword(f) and f not in ("get", "items")]
    if not fields:
        fields = ["x"]
    kind = ns.NamedArrayTupleSchema if array else ns.NamedTupleSchema
    S = kind("S", fields)
    values = [None if i % 3 == 2 else torch.arange(float(n + i)) for i in range(len(fields))]
    x = S(*values)
    y = _roundtrip(x)
    assert type(y) is S
    for a, b in zip(x, y, strict=True):
        assert (a is None and b is None) or torch.equal(a, b)


class _Record:
    """Pickles as a call to rebuild_schema with whatever arguments a test wants."""

    def __init__(self, args):
        self.args = args

    def __reduce__(self):
        return (_pickle.rebuild_schema, self.args)


def _load_crafted(args):
    buf = io.BytesIO()
    torch.save(_Record(args), buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


@pytest.mark.parametrize("args, needle", [
    (("NamedTupleSchema", "id1", "os.system", ("x",), (), None), "not a valid identifier"),
    (("NamedTupleSchema", "id2", "P", ("__class__",), (), None), "underscore"),
    (("Popen", "id3", "P", ("x",), (), None), "unknown kind"),
    (("NamedTupleSchema", "id4", {"a": 1}, ("x",), (), None), "plain strings and tuples"),
    (("NamedTupleSchema", "id5", "P", ["x"], (), None), "plain strings and tuples"),
    (("NamedTupleSchema", "id6", "P", ("x",), (), 7), "plain strings and tuples"),
])
def test_crafted_schema_records_refused(args, needle):
    """Hostile schema records in a weights_only file fail with a message saying why."""
    # torch lets errors raised by allowlisted callables through unwrapped.
    with pytest.raises((pickle.UnpicklingError, ns.SchemaDefinitionError), match=needle):
        _load_crafted(args)


def test_checked_rebuild_matches_rebuild_schema():
    """checked_rebuild_schema returns the live class for a genuine record."""
    kind, *_ = _pickle.reduce_schema(Traj)[1]
    assert _torch_hook.checked_rebuild_schema(*_pickle.reduce_schema(Traj)[1]) is Traj
    assert kind == "NamedArrayTupleSchema"


def test_any_schema_matches_only_live_schemas():
    """ANY_SCHEMA equals registered schema classes and no other class or object."""
    class Sub(Meta):
        pass
    Plain = collections.namedtuple("Plain", "a b")
    assert _torch_hook.ANY_SCHEMA == Traj and _torch_hook.ANY_SCHEMA == Meta
    assert Traj in [_torch_hook.ANY_SCHEMA]
    for other in (Sub, Plain, tuple, ns.NamedTuple, ns.NamedArrayTuple,
                  ns.NamedTupleSchema, Traj(1, 2, 3), "Traj", None, object):
        assert _torch_hook.ANY_SCHEMA != other, other
        assert not (other == _torch_hook.ANY_SCHEMA), other  # noqa: SIM201 -- __eq__ under test


def test_plain_namedtuple_still_refused():
    """The allowlist is no broader than schemas: a collections.namedtuple is still refused."""
    Plain = collections.namedtuple("Plain", "a b")
    globals()["Plain"] = Plain  # picklable by reference for torch.save
    Plain.__module__ = __name__
    try:
        with pytest.raises(pickle.UnpicklingError, match="Plain"):
            _roundtrip(Plain(torch.ones(1), 2))
    finally:
        del globals()["Plain"]


def test_user_subclass_of_schema_refused():
    """A class statement subclassing a schema pickles by reference and stays refused."""
    global SubMeta

    class SubMeta(Meta):
        pass
    with pytest.raises(pickle.UnpicklingError, match="SubMeta"):
        _roundtrip(SubMeta(1, "a"))


def test_safe_globals_context_after_clear():
    """safe_globals() works in torch's context manager even when the global list was cleared."""
    saved = torch.serialization.get_safe_globals()
    torch.serialization.clear_safe_globals()
    try:
        with pytest.raises(pickle.UnpicklingError):
            _roundtrip(Meta(1, "x"))
        with torch.serialization.safe_globals(nst.safe_globals()):
            assert _roundtrip(Meta(1, "x")) == Meta(1, "x")
        assert nst.register_safe_globals() is True
        assert _roundtrip(Meta(2, "y")) == Meta(2, "y")
    finally:
        torch.serialization.clear_safe_globals()
        torch.serialization.add_safe_globals(saved)


def test_batch_dims_structure():
    """batch_dims keeps schema types and puts None where fields are None or not tensors."""
    x = Traj(torch.zeros(2), Inner(torch.zeros(2), None), 3)
    d = nst.batch_dims(x, 1)
    assert type(d) is Traj and type(d.inner) is Inner
    assert tuple(d) == (1, Inner(1, None), None)
    assert nst.batch_dims({"a": [torch.ones(1)], "b": (None,)}) == {"a": [0], "b": (None,)}


def test_share_memory_moves_nested_tensors():
    """share_memory_ puts every nested tensor into shared memory and returns the instance."""
    x = Traj(torch.zeros(2), Inner(torch.zeros(2), None), [torch.ones(1)])
    assert nst.share_memory_(x) is x
    assert x.obs.is_shared() and x.inner.pos.is_shared() and x.done[0].is_shared()


def _child_write(queue_in, queue_out, received):
    """Spawned child: receive an instance, write into it in place, report its type."""
    x = queue_in.get(timeout=60)
    x.obs[0] = 42.0
    x.inner.pos[:] = 7.0
    queue_out.put((type(x).__name__, type(x.inner).__name__, x.done is None,
                   x.obs.is_shared()))
    # This module's Inner, re-created on import in the child, has the parent's
    # id (module-level schemas get ids derived from their definition), so it
    # is the very class the received instance has.
    queue_out.put((type(x.inner)(torch.full((2,), 3.0), None),
                   Inner(torch.ones(1), None), isinstance(x.inner, Inner)))
    # Tensors sent through a queue are shared by file descriptor: the sender
    # must stay alive until the receiver has them.
    received.wait(60)


@pytest.mark.subprocess
def test_multiprocessing_spawn_shares_tensors():
    """A spawned torch.multiprocessing child writes into shared tensor fields; the parent sees it."""
    mp = torch.multiprocessing.get_context("spawn")
    x = nst.share_memory_(Traj(torch.zeros(4), Inner(torch.zeros(2), None), None))
    q_in, q_out, received = mp.Queue(), mp.Queue(), mp.Event()
    proc = mp.Process(target=_child_write, args=(q_in, q_out, received))
    proc.start()
    try:
        q_in.put(x)
        report = q_out.get(timeout=120)
        back, child_own, child_isinstance = q_out.get(timeout=60)
    finally:
        received.set()
        proc.join(timeout=60)
        if proc.is_alive():
            proc.kill()
    assert report == ("Traj", "Inner", True, True)
    assert x.obs[0].item() == 42.0 and torch.equal(x.inner.pos, torch.full((2,), 7.0))
    assert type(back) is Inner and back.vel is None
    assert child_isinstance and type(child_own) is Inner
    assert proc.exitcode == 0


def _fake_module(tmp_path, monkeypatch, name, body="VALUE = 1\n"):
    (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(__import__("sys").modules, name, raising=False)


def test_import_hook_runs_after_import_and_removes_itself(tmp_path, monkeypatch):
    """when_imported fires once the module executed, restores its loader and leaves no watcher."""
    import importlib
    import sys

    from namedschema.integrations import import_hooks
    _fake_module(tmp_path, monkeypatch, "ns_fake_mod_a")
    seen = []
    import_hooks.when_imported("ns_fake_mod_a", lambda m: seen.append(m.VALUE))
    assert "ns_fake_mod_a" in import_hooks.pending() and seen == []
    module = importlib.import_module("ns_fake_mod_a")
    assert seen == [1] and "ns_fake_mod_a" not in import_hooks.pending()
    assert "exec_module" not in vars(module.__spec__.loader)
    if not import_hooks.pending():
        assert not any(type(f).__name__ == "_Watcher" for f in sys.meta_path)
    import_hooks.when_imported("ns_fake_mod_a", lambda m: seen.append("now"))
    assert seen == [1, "now"]


def test_import_hook_failure_warns_not_breaks(tmp_path, monkeypatch):
    """A failing callback gives a RuntimeWarning and the import still succeeds."""
    import importlib

    from namedschema.integrations import import_hooks
    _fake_module(tmp_path, monkeypatch, "ns_fake_mod_b")

    def boom(module):
        raise RuntimeError("boom")
    import_hooks.when_imported("ns_fake_mod_b", boom)
    with pytest.warns(RuntimeWarning, match="ns_fake_mod_b.*boom"):
        module = importlib.import_module("ns_fake_mod_b")
    assert module.VALUE == 1


def test_import_hook_cancel(tmp_path, monkeypatch):
    """A cancelled callback does not run when the module is imported."""
    import importlib

    from namedschema.integrations import import_hooks
    _fake_module(tmp_path, monkeypatch, "ns_fake_mod_c")
    seen = []
    callback = seen.append
    import_hooks.when_imported("ns_fake_mod_c", callback)
    import_hooks.cancel("ns_fake_mod_c", callback)
    assert "ns_fake_mod_c" not in import_hooks.pending()
    importlib.import_module("ns_fake_mod_c")
    assert seen == []
