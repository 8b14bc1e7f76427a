"""Module-level schemas: a process that imports the same module agrees on the class."""

import multiprocessing as mp
import pickle

import numpy as np
import pytest

from namedschema import same_definition
from tests.core import module_schemas as ms
from tests.helpers import run_fresh


def test_identical_module_level_definitions_stay_distinct():
    """Two identical module-level calls still make two schemas with different ids."""
    assert ms.Traj is not ms.Twin and ms.Traj != ms.Twin and same_definition(ms.Traj, ms.Twin)
    assert ms.Traj._schema_id != ms.Twin._schema_id
    assert type(pickle.loads(pickle.dumps(ms.Twin(1, 2)))) is ms.Twin


@pytest.mark.parametrize("method", [m for m in ("spawn", "forkserver")
                                    if m in mp.get_all_start_methods()])
def test_spawned_child_sees_its_own_module_class(method):
    """A spawn child receives instances as its module's classes; its replies are ours."""
    ctx = mp.get_context(method)
    queue = ctx.Queue()
    proc = ctx.Process(target=ms.check_and_reply,
                       args=(queue, ms.Traj(np.zeros(2), ms.Info(np.ones(2)))))
    proc.start()
    same_class, nested_same, reply, point = queue.get(timeout=120)
    proc.join(60)
    assert proc.exitcode == 0 and same_class and nested_same
    assert type(reply) is ms.Traj and type(reply.act) is ms.Info and type(point) is ms.Point


def test_pickle_loaded_before_module_import_is_adopted():
    """If an instance arrives before its module is imported, the module's schema is that class."""
    data = pickle.dumps([ms.Traj(1, 2), ms.Twin(3, 4)])
    proc = run_fresh("""
        import pickle, sys
        traj, twin = pickle.loads(sys.stdin.buffer.read())
        from tests.core import module_schemas as ms
        assert type(traj) is ms.Traj and type(twin) is ms.Twin, (type(traj), ms.Traj)
        assert ms.Traj is not ms.Twin
        print("ok")
        """, stdin=data)
    assert proc.stdout.strip() == b"ok"


def test_function_local_schemas_keep_random_ids():
    """Schemas made inside functions get fresh random ids on every call."""
    from namedschema import NamedTupleSchema

    def make():
        return NamedTupleSchema("Traj", "obs act")
    assert make()._schema_id != make()._schema_id
