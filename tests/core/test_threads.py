"""Thread safety of schema creation and of unpickling into the registry."""

import pickle
import threading

from namedschema import NamedArrayTupleSchema, NamedTupleSchema
from tests.helpers import run_fresh


def test_concurrent_unpickling_in_fresh_process_yields_one_class():
    """32 threads unpickling one never-seen schema at once all get the same, complete class."""
    Obs = NamedArrayTupleSchema("Obs", "pos vel", defaults=(None,))
    data = pickle.dumps(Obs([1, 2]), protocol=4)
    proc = run_fresh(f"""
        import pickle, sys, threading
        data = {data!r}
        barrier = threading.Barrier(32)
        results = []
        def load():
            barrier.wait()
            x = pickle.loads(data)
            results.append((type(x), x.pos, x.vel, type(x)._fields))
        threads = [threading.Thread(target=load) for _ in range(32)]
        sys.setswitchinterval(1e-6)
        for t in threads: t.start()
        for t in threads: t.join()
        classes = {{id(r[0]) for r in results}}
        assert len(results) == 32 and len(classes) == 1, classes
        assert all(r[1] == [1, 2] and r[2] is None and r[3] == ("pos", "vel") for r in results)
        print("ok")
        """)
    assert proc.stdout.strip() == b"ok"


def test_concurrent_schema_creation_is_safe():
    """Threads creating and pickling schemas concurrently never see each other's classes."""
    errors = []
    barrier = threading.Barrier(16)

    def work(i):
        try:
            barrier.wait()
            for j in range(50):
                kind = NamedArrayTupleSchema if j % 2 else NamedTupleSchema
                S = kind(f"S{i}_{j}", [f"f{k}" for k in range(j % 7)])
                x = S._make(range(len(S._fields)))
                assert type(pickle.loads(pickle.dumps(x))) is S
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
