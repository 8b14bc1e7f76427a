"""namedschema.rlpyt.patch.pickling on plain objects: views stay views, locks and shared values are new.

No rlpyt needed: ``Holder`` gets the reduction the patch gives rlpyt's replay
buffers and sum trees.
"""

import copy
import ctypes
import multiprocessing as mp
import pickle
import threading

import numpy as np
import pytest

from namedschema import NamedArrayTupleSchema, UnpicklableError
from namedschema.buffer import is_shared_memory, np_mp_array
from namedschema.rlpyt.patch.pickling import reduce_fresh, reduce_keeping_views
from tests.helpers import run_fresh

PROTOCOLS = range(pickle.HIGHEST_PROTOCOL + 1)
Samples = NamedArrayTupleSchema("Samples", "observation reward")


class Holder:
    __reduce_ex__ = reduce_keeping_views

    def __init__(self, **attrs):
        self.__dict__.update(attrs)


class Plain:
    def __init__(self, **attrs):
        self.__dict__.update(attrs)


class Locks:
    """Like rlpyt's RWLock: nothing but locks and a counter."""

    __reduce_ex__ = reduce_fresh

    def __init__(self):
        self.write_lock = mp.Lock()
        self.count = mp.RawValue("i")


def frame_like():
    frames = np.arange(2 * 12, dtype=np.float32).reshape(12, 2)
    tree = np.arange(15, dtype=np.float64)
    return Holder(frames=frames, new_frames=frames[2:], tree=tree,
                  priorities=tree[7:15].reshape(4, 2), t=3,
                  samples=Samples(np.ones((4, 2)), frames[:4, 0]))


def shares(a, b):
    return np.shares_memory(a, b)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_views_stay_views(protocol):
    """A base and its views (slice, reshape, inside a schema) come back sharing memory."""
    h = frame_like()
    back = pickle.loads(pickle.dumps(h, protocol))
    assert type(back) is Holder and back.t == 3
    assert shares(back.frames, back.new_frames) and shares(back.tree, back.priorities)
    assert shares(back.samples.reward, back.frames) and type(back.samples) is Samples
    for name in ("frames", "new_frames", "tree", "priorities"):
        assert np.array_equal(getattr(back, name), getattr(h, name))
    back.frames[5, 1] = -1
    assert back.new_frames[3, 1] == -1
    back.priorities[1, 0] = 99
    assert back.tree[9] == 99


@pytest.mark.parametrize("protocol", [2, 5])
def test_pickle_is_not_bigger_than_the_memory(protocol):
    """Views are stored as (offset, shape, strides): the pickle holds each byte once."""
    big = np.zeros((1000, 100), np.uint8)
    h = Holder(a=big, b=big[10:], c=big[:, 5], d=big.reshape(-1)[::-3])
    assert len(pickle.dumps(h, protocol)) < big.nbytes + 2000
    plain = Plain(**vars(h))
    assert len(pickle.dumps(plain, protocol)) > 2.2 * big.nbytes  # what plain pickle does


def test_negative_strides_transposes_and_read_only():
    """Reversed, transposed, overlapping-window and read-only views round-trip as views."""
    base = np.arange(60, dtype=np.int32).reshape(6, 10)
    ro = base[1:3]
    ro.flags.writeable = False
    windows = np.lib.stride_tricks.sliding_window_view(base.reshape(-1), 5)
    h = Holder(base=base, rev=base[::-1, ::-2], tr=base.T, win=windows, ro=ro)
    back = pickle.loads(pickle.dumps(h, 5))
    for name in ("rev", "tr", "win", "ro"):
        got = getattr(back, name)
        assert np.array_equal(got, getattr(h, name)) and shares(got, back.base)
        assert got.strides == getattr(h, name).strides
    assert not back.ro.flags.writeable and back.base.flags.writeable
    back.base[5, 9] = -7
    assert back.rev[0, 0] == -7 and back.tr[9, 5] == -7 and back.win[-1, -1] == -7


def test_group_without_a_spanning_member_is_one_block():
    """Two overlapping views of a base that is not in the object: one aligned byte block."""
    hidden = np.arange(100, dtype=np.float64)
    h = Holder(a=hidden[0:60], b=hidden[40:100])
    back = pickle.loads(pickle.dumps(h, 4))
    assert shares(back.a, back.b) and np.array_equal(back.b, hidden[40:])
    assert back.a.flags.aligned and back.b.flags.aligned
    back.a[50] = -1
    assert back.b[10] == -1


def test_identity_and_independent_arrays():
    """One array object twice is one object after loading; unrelated arrays stay apart."""
    a, b = np.zeros(4), np.ones(4)
    h = Holder(a=a, again=a, b=b, pair=[a, b])
    back = pickle.loads(pickle.dumps(h, 4))
    assert back.again is back.a and back.pair[0] is back.a and back.pair[1] is back.b
    assert not shares(back.a, back.b)


def test_shared_memory_is_shared_again(tmp_path):
    """Arrays in shared memory come back in (new) shared memory, views included."""
    shared = np_mp_array((8, 4), np.float32)
    shared[:] = 3
    h = Holder(s=shared, v=shared[2:], private=np.zeros(3))
    back = pickle.loads(pickle.dumps(h, 4))
    assert is_shared_memory(back.s) and is_shared_memory(back.v) and shares(back.s, back.v)
    assert not is_shared_memory(back.private) and not shares(back.s, shared)
    assert np.array_equal(back.s, shared)


def test_locks_and_shared_values_are_made_anew():
    """mp/threading locks, events, RawValue/Value/RawArray/Array: new objects, same values."""
    event = mp.Event()
    event.set()
    h = Holder(lock=mp.Lock(), rlock=mp.RLock(), sem=mp.Semaphore(3), event=event,
               cond=mp.Condition(), tlock=threading.Lock(), trlock=threading.RLock(),
               t=mp.RawValue("l", 7), flag=mp.RawValue(ctypes.c_bool, True),
               v=mp.Value("d", 2.5), arr=mp.RawArray("i", [1, 2, 3]),
               sarr=mp.Array("b", [4, 5]), rw=Locks())
    h.lock.acquire()  # held at save time: a new process holds nothing
    back = pickle.loads(pickle.dumps(h, 4))
    assert back.lock.acquire(block=False)
    assert back.t.value == 7 and back.flag.value is True and back.v.value == 2.5
    assert list(back.arr) == [1, 2, 3] and list(back.sarr) == [4, 5]
    assert back.event.is_set() and back.sem.get_value() == 3
    with back.v.get_lock(), back.cond, back.rlock, back.tlock, back.trlock:
        back.v.value += 1
    assert back.v.value == 3.5
    assert type(back.rw) is Locks and back.rw.write_lock.acquire(block=False)
    back.t.value = 8
    assert h.t.value == 7  # not the saver's memory


def test_shared_values_work_across_processes_after_load():
    """A loaded RawValue and Lock are real shared objects: a forked child's writes are seen."""
    h = pickle.loads(pickle.dumps(Holder(t=mp.RawValue("l", 1), lock=mp.Lock(),
                                         arr=np_mp_array((3,), np.int64)), 4))

    def child(obj):
        with obj.lock:
            obj.t.value += 10
            obj.arr[:] = 5

    ctx = mp.get_context("fork")
    p = ctx.Process(target=child, args=(h,))
    p.start()
    p.join(30)
    assert p.exitcode == 0 and h.t.value == 11 and list(h.arr) == [5, 5, 5]


def test_copy_is_shallow_and_deepcopy_keeps_views():
    """copy.copy shares the arrays (as the default does); deepcopy copies them, views kept."""
    h = frame_like()
    shallow = copy.copy(h)
    assert shallow.frames is h.frames and shallow.priorities is h.priorities
    deep = copy.deepcopy(h)
    assert not shares(deep.frames, h.frames) and shares(deep.frames, deep.new_frames)
    assert shares(deep.tree, deep.priorities)


def test_unpicklable_value_is_named_by_its_path():
    """Anything else that cannot be pickled fails before pickling, naming the attribute."""
    h = Holder(arr=np.zeros(3), extra={"ok": 1, "fn": lambda: 0})
    with pytest.raises(UnpicklableError) as info:
        pickle.dumps(h, 4)
    assert info.value.path == "Holder.extra.fn" and "lambda" in str(info.value)
    assert isinstance(info.value, TypeError)


def test_unpicklable_value_in_a_nested_object():
    """The path goes through nested objects, view-keeping or plain."""
    inner = Holder(tree=np.zeros(4), gen=(i for i in range(3)))
    outer = Holder(priority_tree=inner, plain=Plain(q=[1, threading.Thread()]))
    with pytest.raises(UnpicklableError) as info:
        pickle.dumps(Holder(x=1, child=inner), 4)
    assert info.value.path == "Holder.child.gen" and info.value.what == "builtins.generator"
    outer.priority_tree = Holder()
    with pytest.raises(UnpicklableError) as info:
        pickle.dumps(outer, 4)
    assert info.value.path.startswith("Holder.plain.q[1]")


def test_subclass_getstate_and_reduce_are_respected():
    """A subclass's own __getstate__ / __reduce__ win over the installed reduction."""
    class Custom(Holder):
        def __getstate__(self):
            return {"only": self.keep}

    c = Custom(keep=np.arange(3), drop=np.zeros(2))
    back = copy.deepcopy(c)
    assert list(vars(back)) == ["only"]


def test_spawning_uses_the_default_reduction():
    """While multiprocessing starts a child, shared memory and locks go by handle."""
    code = """
        import multiprocessing as mp, numpy as np, sys
        from tests.rlpyt.test_view_pickling import Holder, spawn_child
        from namedschema.buffer import np_mp_array
        if __name__ == "__main__":
            mp.set_start_method("spawn")
            h = Holder(a=np_mp_array((4,), np.int64), t=mp.RawValue("l", 1), lock=mp.Lock())
            h.v = h.a[1:]
            p = mp.Process(target=spawn_child, args=(h,))
            p.start(); p.join(60)
            assert p.exitcode == 0, p.exitcode
            print(h.a.tolist(), h.t.value)
        """
    proc = run_fresh(code, timeout=120)
    assert proc.stdout.decode().split() == ["[0,", "7,", "7,", "7]", "2"]


def spawn_child(h):
    with h.lock:
        h.v[:] = 7
        h.t.value += 1
