"""Ray: schema instances through the object store, tasks and actors of a real local Ray."""

from __future__ import annotations

import os

# Before ray is imported: stay on loopback and send no usage statistics.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import namedschema as ns  # noqa: E402

# True once ``import namedschema`` installs the integration hooks itself; until
# then workers get them through Ray's worker setup hook (see the fixture).
_AUTO = hasattr(ns, "_install_integrations")

import namedschema.integrations  # noqa: E402

namedschema.integrations.install()

pytestmark = pytest.mark.subprocess  # a local Ray cluster: raylet and worker processes

TIMEOUT = 120  # seconds for every ray.get; a first task also starts a worker

Inner = ns.NamedArrayTupleSchema("Inner", "pos vel")
Traj = ns.NamedArrayTupleSchema("Traj", "obs inner done")
Meta = ns.NamedTupleSchema("Meta", "step tag")

# Above Ray's inline limit (100 KiB), so these fields live in the object store.
BIG = (256, 84, 84)


def _batch(n=BIG[0]):
    obs = np.arange(n * 84 * 84, dtype=np.uint32).astype(np.uint8).reshape(n, 84, 84)
    return Traj(obs, Inner(np.ones((n, 3)), None), None)


@pytest.fixture(scope="module")
def ray_local():
    """One local Ray instance for the whole module, shut down afterwards."""
    runtime_env = None if _AUTO else {
        "worker_process_setup_hook": "namedschema.integrations.install"}
    ray.init(address="local", num_cpus=2, include_dashboard=False,
             object_store_memory=256 * 2**20, logging_level="ERROR",
             runtime_env=runtime_env)
    try:
        yield ray
    finally:
        ray.shutdown()


def _describe(x):
    """What a worker sees: type names, None fields, writability, one checksum."""
    return (type(x).__name__, type(x.inner).__name__, x.done is None,
            x.inner.vel is None, isinstance(x, ns.NamedArrayTuple),
            bool(x.obs.flags.writeable), int(x.obs[-1].sum()))


@ray.remote
def describe(x):
    """Task: report what arrived."""
    return _describe(x)


@ray.remote
def describe_wrapped(refs):
    """Task: get an instance from a reference nested in a list (not resolved by Ray)."""
    x = ray.get(refs[0], timeout=TIMEOUT)
    return _describe(x)


@ray.remote
def same_class(a, b):
    """Task: two arguments of one schema arrive as one class."""
    return type(a) is type(b), type(a.inner) is type(b.inner)


@ray.remote
def halve(x):
    """Task: return a new instance of the received schema."""
    return x[: len(x.obs) // 2]


@ray.remote
def make_new_schema():
    """Task: build a schema in the worker and return an instance of it."""
    Made = ns.NamedArrayTupleSchema("MadeInWorker", "a b")
    return Made(np.arange(4), None)


@ray.remote
class Store:
    """Actor holding a preallocated buffer of one schema."""

    def __init__(self, example, size):
        self.buf = type(example)(np.zeros((size,) + example.obs.shape, example.obs.dtype),
                                 np.zeros(size, dtype=np.int64))

    def write(self, index, sample):
        self.buf[index] = sample
        return type(self.buf).__name__

    def read(self, start, stop):
        return self.buf[start:stop]


Sample = ns.NamedArrayTupleSchema("Sample", "obs step")


def test_put_get_same_schema_zero_copy(ray_local):
    """put/get returns the same schema; two gets share memory and arrays are read-only."""
    x = _batch()
    ref = ray.put(x)
    a = ray.get(ref, timeout=TIMEOUT)
    b = ray.get(ref, timeout=TIMEOUT)
    assert type(a) is Traj and type(a.inner) is Inner
    assert a.done is None and a.inner.vel is None
    np.testing.assert_array_equal(a.obs, x.obs)
    assert np.shares_memory(a.obs, b.obs) and np.shares_memory(a.inner.pos, b.inner.pos)
    assert not np.shares_memory(a.obs, x.obs)
    assert not a.obs.flags.writeable and not a.inner.pos.flags.writeable
    with pytest.raises(ValueError):
        a.obs[0, 0, 0] = 1


def test_namedtuple_put_get(ray_local):
    """A plain NamedTuple schema instance with scalars comes back equal and of the same type."""
    got = ray.get(ray.put([Meta(1, "x"), Meta(2, None)]), timeout=TIMEOUT)
    assert got == [Meta(1, "x"), Meta(2, None)] and all(type(m) is Meta for m in got)


def test_task_argument_by_value(ray_local):
    """An instance passed by value reaches a task as the schema, arrays read-only from the store."""
    x = _batch()
    got = ray.get(describe.remote(x), timeout=TIMEOUT)
    assert got == ("Traj", "Inner", True, True, True, False, int(x.obs[-1].sum()))


def test_task_argument_by_reference(ray_local):
    """An ObjectRef argument, top-level or nested in a list, arrives as the schema."""
    x = _batch()
    ref = ray.put(x)
    expected = ("Traj", "Inner", True, True, True, False, int(x.obs[-1].sum()))
    assert ray.get(describe.remote(ref), timeout=TIMEOUT) == expected
    assert ray.get(describe_wrapped.remote([ref]), timeout=TIMEOUT) == expected


def test_task_sees_one_class_per_schema(ray_local):
    """Two arguments of one schema are one class in the worker."""
    assert ray.get(same_class.remote(_batch(2), _batch(3)), timeout=TIMEOUT) == (True, True)


def test_task_result_is_callers_schema(ray_local):
    """A task result built from the received schema is the caller's very class."""
    x = _batch()
    y = ray.get(halve.remote(x), timeout=TIMEOUT)
    assert type(y) is Traj and type(y.inner) is Inner and y.done is None
    np.testing.assert_array_equal(y.obs, x.obs[: len(x.obs) // 2])


def test_schema_made_in_worker(ray_local):
    """A schema created inside a worker arrives as one class across gets."""
    ref = make_new_schema.remote()
    a = ray.get(ref, timeout=TIMEOUT)
    b = ray.get(make_new_schema.remote(), timeout=TIMEOUT)
    c = ray.get(ref, timeout=TIMEOUT)
    assert type(a).__name__ == "MadeInWorker" and isinstance(a, ns.NamedArrayTuple)
    assert type(a) is type(c) and a.b is None
    # A new worker call makes a new schema (a new id): one definition, another class.
    assert ns.same_definition(type(b), type(a))


def test_actor_methods(ray_local):
    """Actor methods take and return instances of the caller's schemas."""
    store = Store.remote(Sample(np.zeros((84, 84), np.uint8), 0), 8)
    for i in range(4):
        name = ray.get(store.write.remote(i, Sample(np.full((84, 84), i, np.uint8), i)),
                       timeout=TIMEOUT)
        assert name == "Sample"
    out = ray.get(store.read.remote(1, 3), timeout=TIMEOUT)
    assert type(out) is Sample and out.step.tolist() == [1, 2]
    assert int(out.obs[1, 0, 0]) == 2
    ray.kill(store)


@ray.remote
def hooks_installed():
    """Task: whether this worker's cloudpickle routes schema classes by id."""
    import ray.cloudpickle.cloudpickle as cp

    from namedschema.integrations import _cloudpickle_hook
    return _cloudpickle_hook.is_patched(cp)


def test_workers_have_cloudpickle_hook(ray_local):
    """Ray workers pickle schema classes by id (the cloudpickle hook is active there)."""
    assert ray.get(hooks_installed.remote(), timeout=TIMEOUT) is True


def test_main_module_schema_roundtrip(ray_local):
    """A schema that is not importable by name (as in a driver script) comes back as itself."""
    Local = ns.NamedArrayTupleSchema("Local", "x y", module="__main__")
    x = Local(np.arange(5), None)
    y = ray.get(halve_any.remote(x), timeout=TIMEOUT)
    assert type(y) is Local and y.y is None and y.x.tolist() == [0, 1]


@ray.remote
def halve_any(x):
    """Task: return the first half of any array-tuple instance."""
    return x[: len(x.get(0)) // 2]


# cloudpickle is what Ray pickles with; the hook is checked here without Ray too.

def test_cloudpickle_uses_schema_reducer():
    """With the hook, cloudpickle ships a non-importable schema class by id (rebuild_schema)."""
    import cloudpickle
    Local = ns.NamedArrayTupleSchema("Local", "x y", module="__main__")
    data = cloudpickle.dumps(Local(np.arange(3), None))
    assert b"rebuild_schema" in data and len(data) < 1000
    assert type(cloudpickle.loads(data)) is Local


def test_cloudpickle_fresh_echo_keeps_identity():
    """An instance echoed by cloudpickle through a fresh interpreter comes back as the same class."""
    import pickle

    import cloudpickle

    from tests.helpers import run_fresh
    Local = ns.NamedArrayTupleSchema("Local", "x y", module="__main__")
    out = run_fresh("""
        import pickle, sys
        import namedschema.integrations
        namedschema.integrations.install()
        import cloudpickle
        x = pickle.loads(sys.stdin.buffer.read())
        sys.stdout.buffer.write(cloudpickle.dumps(x[1:]))
        """, stdin=cloudpickle.dumps(Local(np.arange(3), None))).stdout
    back = pickle.loads(out)
    assert type(back) is Local and back.x.tolist() == [1, 2] and back.y is None


def test_cloudpickle_other_classes_untouched():
    """Local ordinary classes and class-statement subclasses of schemas still go by value."""
    import cloudpickle
    import cloudpickle.cloudpickle as cp_module

    from namedschema.integrations import _cloudpickle_hook
    assert _cloudpickle_hook.patch(cp_module) is True  # idempotent
    # Through the public Pickler.reducer_override; cloudpickle's private names untouched.
    assert _cloudpickle_hook.is_patched(cp_module)
    assert not hasattr(cp_module._class_reduce, "_namedschema_original")

    class Plain:
        pass

    class Sub(ns.NamedTupleSchema("Base", "a")):
        pass
    data = cloudpickle.dumps(Plain)
    assert b"rebuild_schema" not in data and b"_make_skeleton_class" in data
    assert cloudpickle.loads(data).__name__ == "Plain"
    # The subclass itself is a cloudpickle skeleton; only its schema base goes by id.
    data = cloudpickle.dumps(Sub)
    assert b"_make_skeleton_class" in data
    loaded = cloudpickle.loads(data)
    assert loaded.__name__ == "Sub" and loaded.__mro__[1] is Sub.__mro__[1]
