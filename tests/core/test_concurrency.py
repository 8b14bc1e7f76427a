"""Concurrency: schema unpickling and creation under heavy thread contention, and
many processes memory-mapping one checkpoint.

Extends ``tests/core/test_threads.py`` (32 threads, one schema) with many
schemas at once, garbage collection racing the weak registry, mixed picklers
and a multi-process mmap reader test.
"""

import os
import pickle
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from namedschema import NamedArrayTupleSchema, NamedTupleSchema
from namedschema._core import pickling as _pickle
from tests.figures import record
from tests.helpers import REPO_ROOT, run_fresh

N_THREADS = 48
N_SCHEMAS = 24


def _payloads():
    """Pickles of N_SCHEMAS distinct schemas (instances), as a child would receive them."""
    out = []
    for i in range(N_SCHEMAS):
        kind = NamedArrayTupleSchema if i % 2 else NamedTupleSchema
        S = kind(f"S{i}", [f"f{k}" for k in range(i % 9)], defaults=(None,) * min(i % 9, 2))
        out.append(pickle.dumps(S._make(range(len(S._fields))), protocol=4 + i % 2))
    return out


def test_many_threads_unpickling_many_schemas_get_one_complete_class_each():
    """48 threads unpickling 24 unseen schemas in random order get one complete class per schema."""
    proc = run_fresh(f"""
        import pickle, random, sys, threading
        payloads = {_payloads()!r}
        barrier = threading.Barrier({N_THREADS})
        seen = {{}}
        lock = threading.Lock()
        problems = []
        def work(seed):
            order = list(range(len(payloads)))
            random.Random(seed).shuffle(order)
            barrier.wait()
            for i in order:
                x = pickle.loads(payloads[i])
                cls = type(x)
                # complete: every generated piece is there and works
                ok = (cls._fields == tuple(f"f{{k}}" for k in range(i % 9))
                      and all(getattr(x, f) == k for k, f in enumerate(cls._fields))
                      and cls._make(list(x)) == x and "_make" in cls.__dict__)
                if not ok:
                    problems.append((i, cls))
                with lock:
                    seen.setdefault(i, set()).add(id(cls))
                    keep.append(x)
        keep = []
        sys.setswitchinterval(1e-6)
        threads = [threading.Thread(target=work, args=(s,)) for s in range({N_THREADS})]
        for t in threads: t.start()
        for t in threads: t.join()
        assert not problems, problems
        assert len(seen) == len(payloads) and all(len(v) == 1 for v in seen.values()), seen
        print("ok", len(keep))
        """)
    assert proc.stdout.split() == [b"ok", str(N_THREADS * N_SCHEMAS).encode()]
    record("concurrency.threads", N_THREADS)


def test_threads_creating_and_reloading_schemas_while_gc_runs():
    """Creating, pickling and reloading schemas while another thread collects garbage stays consistent."""
    # In a fresh interpreter: full collections in this process's heap (torch and
    # the rest of the suite loaded) would make the collector thread dominate.
    proc = run_fresh("""
        import gc, pickle, random, sys, threading
        from namedschema import NamedArrayTupleSchema
        from namedschema._core import pickling as _pickle
        stop = threading.Event()
        errors = []

        def collector():
            while not stop.is_set():
                gc.collect()

        def work(seed):
            rng = random.Random(seed)
            try:
                for j in range(30):
                    S = NamedArrayTupleSchema(f"W{seed}_{j}",
                                              [f"a{k}" for k in range(rng.randint(0, 5))])
                    data = pickle.dumps(S, protocol=5)
                    sid = S._schema_id
                    if rng.random() < 0.5:
                        del S  # let the registry entry die and be rebuilt
                    T = pickle.loads(data)
                    U = pickle.loads(data)
                    assert T is U and T._schema_id == sid and _pickle.lookup_schema(sid) is T
                    x = T._make(range(len(T._fields)))
                    assert pickle.loads(pickle.dumps(x)) == x
            except Exception as exc:
                errors.append(repr(exc))

        sys.setswitchinterval(1e-5)
        gc_thread = threading.Thread(target=collector)
        gc_thread.start()
        threads = [threading.Thread(target=work, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stop.set()
        gc_thread.join()
        print(errors)
        """, timeout=300)
    assert proc.stdout.strip() == b"[]"
    record("concurrency.threads", 17)


def test_conflicting_ids_from_many_threads_give_one_class_per_definition():
    """Threads unpickling two definitions under one id: one class per definition, none merged.

    Neither definition is the program's own, so neither may block the other
    (issue 16): the first to arrive holds the id, the other gets the id
    derived from it and its exact definition.
    """
    sid = "f" * 32
    results = []
    barrier = threading.Barrier(20)

    def work(i):
        barrier.wait()
        fields = ("a", "b") if i % 2 else ("c",)
        results.append(_pickle.rebuild_schema("NamedTupleSchema", sid, "Clash", fields, (), None))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    by_fields = {}
    for cls in results:
        by_fields.setdefault(cls._fields, set()).add(id(cls))
    assert sorted(by_fields) == [("a", "b"), ("c",)]
    assert all(len(ids) == 1 for ids in by_fields.values())
    record("concurrency.threads", 20)


def test_cloudpickle_skeleton_not_published_half_built():
    """A schema rebuilt by value by cloudpickle is registered only once fully built."""
    pytest.importorskip("cloudpickle")
    data = run_fresh("""
        import cloudpickle, sys
        def make():
            from namedschema import NamedArrayTupleSchema
            return NamedArrayTupleSchema("Obs", "pos vel")
        sys.stdout.buffer.write(cloudpickle.dumps(make()))
        """).stdout
    out = run_fresh("""
        import cloudpickle, sys
        from namedschema._core import pickling as _pickle
        seen = []
        real = _pickle.register_schema
        def spy(cls, schema_id):
            seen.append(all(n in cls.__dict__ for n in ("_fields", "_make", "pos", "vel")))
            real(cls, schema_id)
        _pickle.register_schema = spy
        cloudpickle.loads(sys.stdin.buffer.read())
        print(seen)
        """, stdin=data).stdout.decode().strip()
    assert out == "[True]", out


def test_pickle_then_cloudpickle_in_one_process_give_one_class():
    """A schema loaded with pickle and then with cloudpickle in one process is one class."""
    pytest.importorskip("cloudpickle")
    both = run_fresh("""
        import cloudpickle, pickle, sys
        def make():
            from namedschema import NamedArrayTupleSchema
            return NamedArrayTupleSchema("Obs", "pos vel")
        S = make()
        sys.stdout.buffer.write(pickle.dumps((pickle.dumps(S(1, 2)), cloudpickle.dumps(S(1, 2)))))
        """).stdout
    out = run_fresh("""
        import cloudpickle, pickle, sys
        pk, cp = pickle.loads(sys.stdin.buffer.read())
        a = pickle.loads(pk)
        b = cloudpickle.loads(cp)
        print(type(a) is type(b))
        """, stdin=both).stdout.decode().strip()
    assert out == "True"


def test_many_processes_memory_map_and_read_one_checkpoint(tmp_path):
    """8 processes map one checkpoint at once; every one verifies it and reads the same sums."""
    from namedschema.checkpoint import save
    Step = NamedArrayTupleSchema("Step", "obs reward done")
    rng = np.random.default_rng(0)
    buf = Step(rng.integers(0, 255, (2048, 16, 16), dtype=np.uint8),
               rng.standard_normal(2048), np.zeros(2048, bool))
    path = tmp_path / "shared.nsb"
    save({"buffer": buf, "step": 2048}, path)
    expected = f"{int(buf.obs.sum())} {float(buf.reward.sum())!r} 2048"
    code = f"""
        import sys
        from multiprocessing import get_context
        def read(_):
            from namedschema.checkpoint import load
            d = load({str(path)!r}, mmap_mode="r", verify=True)
            b = d["buffer"]
            assert not b.obs.flags.writeable
            return f"{{int(b.obs.sum())}} {{float(b.reward.sum())!r}} {{d['step']}}"
        if __name__ == "__main__":
            with get_context("spawn").Pool(8) as pool:
                out = pool.map(read, range(32), chunksize=1)
            print("\\n".join(out))
        """
    script = tmp_path / "readers.py"
    script.write_text(textwrap.dedent(code))
    env = dict(os.environ, PYTHONPATH=REPO_ROOT)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, timeout=120,
                          env=env, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    lines = proc.stdout.decode().splitlines()
    assert len(lines) == 32 and set(lines) == {expected}
    record("concurrency.processes", 8)
