"""Pickles loaded by processes that never made the schema: fresh interpreters and start methods."""

import multiprocessing as mp
import pickle

import numpy as np
import pytest

from namedschema import NamedArrayTupleSchema, NamedTupleSchema
from tests.core import workers
from tests.helpers import echo_fresh, run_fresh


def make_schemas():
    """Schemas made inside a function (cannot be found by module and name)."""
    return (NamedTupleSchema("Point", "x y", defaults=(0,)),
            NamedArrayTupleSchema("Batch", "obs act info"))


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_fresh_interpreter_loads_every_protocol(protocol):
    """A fresh interpreter loads instances of function-local schemas and sends them back intact."""
    Point, Batch = make_schemas()
    obj = [Point(1), Batch(np.arange(4.0), np.ones(4, np.int8), None), Point(2, 3)]
    back = echo_fresh(obj, protocol=protocol)
    assert type(back[0]) is Point and type(back[1]) is Batch and type(back[2]) is Point
    assert back[0] == (1, 0) and np.array_equal(back[1].obs, obj[1].obs) and back[1].info is None


def test_schema_made_in_main_loads_elsewhere(tmp_path):
    """A schema defined in a script's __main__ pickles to a file that another interpreter loads."""
    path = tmp_path / "buf.pkl"
    run_fresh(f"""
        import pickle, numpy as np
        from namedschema import namedarraytuple
        Samples = namedarraytuple("Samples", "obs reward")
        assert Samples.__module__ == "__main__"
        buf = Samples(np.arange(6).reshape(3, 2), np.zeros(3))
        with open({str(path)!r}, "wb") as f:
            pickle.dump(buf, f, protocol=4)
        """)
    proc = run_fresh(f"""
        import pickle
        with open({str(path)!r}, "rb") as f:
            buf = pickle.load(f)
        print(type(buf).__name__, buf._fields, buf[2].obs.tolist())
        """)
    assert proc.stdout.decode().split() == ["Samples", "('obs',", "'reward')", "[4,", "5]"]


def test_lazily_assigned_module_global_type_loads_without_the_module(tmp_path):
    """A type assigned to a module global inside a constructor loads where that never ran."""
    from tests.core.lazy_types import Replay
    replay = Replay(4)
    replay.samples[1] = 3
    data = pickle.dumps(replay.samples, protocol=4)
    proc = run_fresh("""
        import pickle, sys
        x = pickle.loads(sys.stdin.buffer.read())
        assert "tests.core.lazy_types" not in sys.modules
        print(type(x).__name__, x.reward.tolist())
        """, stdin=data)
    assert proc.stdout.decode().split() == ["SamplesToBuffer", "[0.0,", "3.0,", "0.0,", "0.0]"]


def test_separate_loads_in_fresh_interpreter_share_one_schema():
    """Across separate pickle.loads calls, one schema comes back as one class, not a class per load."""
    Point, Batch = make_schemas()
    a, b = pickle.dumps(Point(1)), pickle.dumps([Batch(1, 2, 3), Point(5)])
    proc = run_fresh(f"""
        import pickle
        a = pickle.loads({a!r})
        b = pickle.loads({b!r})
        assert type(a) is type(b[1]), "two classes for one schema"
        assert type(a) == type(b[1]) and type(b[0]).__name__ == "Batch"
        print("ok")
        """)
    assert proc.stdout.strip() == b"ok"


def test_instance_and_schema_ids_survive_a_round_trip_through_a_child():
    """What comes back from a child is the parent's own schema (same id, same class)."""
    Point, _ = make_schemas()
    back = echo_fresh([Point, Point(4)])
    assert back[0] is Point and type(back[1]) is Point


def test_cloudpickle_and_dill_pickles_load_in_fresh_interpreter():
    """cloudpickle and dill pickles of instances load with plain pickle in a fresh process."""
    for name in ("cloudpickle", "dill"):
        mod = pytest.importorskip(name)
        _, Batch = make_schemas()
        data = mod.dumps([Batch(np.ones(2), None, 1), Batch(np.zeros(2), None, 2)])
        proc = run_fresh(f"""
            import pickle, sys, {name}
            x = pickle.loads(sys.stdin.buffer.read())
            assert type(x[0]) is type(x[1])
            again = pickle.loads(pickle.dumps(x[0]))
            assert type(again) is type(x[0])
            print(type(x[0]).__name__, x[1].info)
            """, stdin=data)
        assert proc.stdout.split() == [b"Batch", b"2"]


START_METHODS = [m for m in ("spawn", "forkserver", "fork") if m in mp.get_all_start_methods()]


@pytest.mark.parametrize("method", START_METHODS)
def test_process_args_and_queue(method):
    """Instances passed as Process arguments come back through a Queue as the same schemas."""
    ctx = mp.get_context(method)
    Point, Batch = make_schemas()
    queue = ctx.Queue()
    objs = (Point(1, 2), Batch(np.arange(3), None, "x"), Point(3))
    proc = ctx.Process(target=workers.echo_types, args=(queue, *objs))
    proc.start()
    back, same = queue.get(timeout=120)
    proc.join(60)
    assert proc.exitcode == 0 and same
    assert [type(o) for o in back] == [Point, Batch, Point]
    assert np.array_equal(back[1].obs, objs[1].obs)


@pytest.mark.parametrize("method", [m for m in START_METHODS if m != "fork"])
def test_queue_at_run_time(method):
    """An instance sent through a Queue to a running child comes back mutated, same schema."""
    ctx = mp.get_context(method)
    _, Batch = make_schemas()
    inbox, outbox = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=workers.receive_and_reply, args=(inbox, outbox))
    proc.start()
    inbox.put(Batch(np.zeros(3), None, 7))
    back = outbox.get(timeout=120)
    proc.join(60)
    assert type(back) is Batch and back.obs.tolist() == [1, 1, 1] and back.info == 7


@pytest.mark.parametrize("method", [m for m in START_METHODS if m != "fork"])
def test_pool_map(method):
    """Pool.map ships instances both ways and returns the parent's schema."""
    _, Batch = make_schemas()
    with mp.get_context(method).Pool(2) as pool:
        out = pool.map(workers.double_obs, [Batch(np.full(2, i), None, i) for i in range(4)])
    assert all(type(o) is Batch for o in out)
    assert [o.obs.tolist() for o in out] == [[2 * i, 2 * i] for i in range(4)]


def test_child_does_not_import_test_module():
    """Sanity check of the premise: a fresh child has no access to this module's schemas."""
    proc = run_fresh("import sys; print('tests.core.test_fresh_interpreter' in sys.modules)")
    assert proc.stdout.strip() == b"False"
