"""Class-syntax schemas across processes: fresh interpreters, every protocol, spawn, checkpoints.

What a loading process gets: the fields always (the pickle carries the definition); the
class body only where the class statement ran (before or after loading), which a
module-level definition allows by importing its module.
"""

import multiprocessing as mp
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import namedschema
from tests.core import class_schemas as cs
from tests.helpers import REPO_ROOT, echo_fresh, run_fresh

pytestmark = pytest.mark.subprocess

START_METHODS = [m for m in ("spawn", "forkserver") if m in mp.get_all_start_methods()]


def _transition():
    return cs.Transition(np.arange(6, dtype=np.uint8).reshape(3, 2), np.arange(3),
                         np.full(3, 0.5, np.float32))


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_fresh_interpreter_round_trip_every_protocol(protocol):
    """Module-level and function-local class schemas go to a fresh interpreter and back intact."""
    local = cs.make_local()
    obj = [_transition(), cs.Config(0.1), local(np.arange(3.0)), cs.Config(0.2, 0.5)]
    back = echo_fresh(obj, protocol=protocol)
    assert [type(x) for x in back] == [cs.Transition, cs.Config, local, cs.Config]
    assert back[0].total_reward() == 1.5 and back[2].double().x.tolist() == [0, 2, 4]
    assert back[3].discount(1) == 0.5 and np.array_equal(back[0].observation, obj[0].observation)


def test_loaded_without_the_module_has_fields_but_no_methods_until_imported():
    """A fresh interpreter that never imported the module gets a class without the body;
    importing the module afterwards completes that very class, for instances already loaded."""
    proc = run_fresh("""
        import pickle, sys
        from namedschema._core.schema import has_class_body, declared_dtypes
        x, cfg = pickle.loads(sys.stdin.buffer.read())
        assert "tests.core.class_schemas" not in sys.modules
        print(type(x).__name__, x._fields, x.reward.tolist(), has_class_body(type(x)))
        print(hasattr(x, "total_reward"), hasattr(cfg, "discount"), declared_dtypes(type(x)))
        from tests.core import class_schemas as cs
        assert type(x) is cs.Transition and type(cfg) is cs.Config
        print(x.total_reward(), x.steps, cfg.discount(2), type(x).__doc__)
        print(has_class_body(type(x)), declared_dtypes(type(x))["reward"])
        """, stdin=pickle.dumps((_transition(), cs.Config(0.1)), 4))
    lines = proc.stdout.decode().splitlines()
    assert lines[0] == ("Transition ('observation', 'action', 'reward', 'done') "
                        "[0.5, 0.5, 0.5] False")
    assert lines[1] == ("False False {'observation': None, 'action': None, 'reward': None, "
                        "'done': None}")
    assert lines[2] == "1.5 3 0.9801 One step of experience."
    assert lines[3] == "True float32"


def test_loaded_after_the_module_import_has_methods():
    proc = run_fresh("""
        import pickle, sys
        from tests.core import class_schemas as cs
        x = pickle.loads(sys.stdin.buffer.read())
        assert type(x) is cs.Transition
        print(x.total_reward(), x[1:].steps)
        """, stdin=pickle.dumps(_transition(), 2))
    assert proc.stdout.split() == [b"1.5", b"2"]


def test_function_local_class_loads_by_value_without_its_methods():
    local = cs.make_local()
    proc = run_fresh("""
        import pickle, sys
        from tests.core import class_schemas as cs
        x = pickle.loads(sys.stdin.buffer.read())
        again = cs.make_local()
        print(type(x).__name__, x.x.tolist(), hasattr(x, "double"), type(x) is again)
        """, stdin=pickle.dumps(local(np.arange(2)), 5))
    assert proc.stdout.split() == [b"Local", b"[0,", b"1]", b"False", b"False"]


def test_class_defined_in_main_loads_in_another_interpreter(tmp_path):
    path = tmp_path / "buf.pkl"
    run_fresh(f"""
        import pickle, numpy as np
        from namedschema import NamedArrayTuple
        class Samples(NamedArrayTuple):
            obs: np.ndarray
            reward: np.ndarray
            def mean_reward(self):
                return self.reward.mean()
        assert Samples.__module__ == "__main__"
        buf = Samples(np.arange(6).reshape(3, 2), np.arange(3.0))
        assert buf.mean_reward() == 1.0
        with open({str(path)!r}, "wb") as f:
            pickle.dump(buf, f, protocol=4)
        """)
    proc = run_fresh(f"""
        import pickle
        with open({str(path)!r}, "rb") as f:
            buf = pickle.load(f)
        print(type(buf).__name__, buf._fields, buf[2].obs.tolist(), hasattr(buf, "mean_reward"))
        """)
    assert proc.stdout.decode().split() == ["Samples", "('obs',", "'reward')", "[4,", "5]",
                                            "False"]


@pytest.mark.parametrize("method", START_METHODS)
def test_spawned_child_gets_its_module_class_with_methods(method):
    ctx = mp.get_context(method)
    queue = ctx.Queue()
    proc = ctx.Process(target=cs.reply_with_methods, args=(queue, _transition()))
    proc.start()
    same_class, total, steps, reply = queue.get(timeout=120)
    proc.join(60)
    assert proc.exitcode == 0 and same_class and total == 1.5 and steps == 3
    assert type(reply) is cs.Transition and reply.total_reward() == 2.0


def test_spawn_pool_with_function_local_class():
    local = cs.make_local()
    with mp.get_context("spawn").Pool(1) as pool:
        results = pool.map(cs.sum_local, [local(np.arange(4.0)), local(np.ones(2))])
    assert results == [(6.0, False, "Local"), (2.0, False, "Local")]


def test_spawn_from_a_main_script_gives_the_child_the_class_body(tmp_path):
    """A class defined in a script's __main__ is the same class (methods included) in its
    spawn children, which import the script as __mp_main__."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import multiprocessing as mp
        import numpy as np
        from namedschema import NamedArrayTuple
        from namedschema._core.schema import has_class_body

        class Step(NamedArrayTuple):
            obs: np.ndarray
            def doubled(self):
                return Step(self.obs * 2)

        def work(step):
            return type(step) is Step, has_class_body(type(step)), step.doubled()

        if __name__ == "__main__":
            with mp.get_context("spawn").Pool(1) as pool:
                same, body, reply = pool.apply(work, (Step(np.arange(3)),))
            assert same and body and type(reply) is Step, (same, body, type(reply))
            print(reply.obs.tolist())
        """))
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, timeout=180,
                          env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.strip() == b"[0, 2, 4]"


def test_checkpoint_loads_in_a_fresh_interpreter(tmp_path):
    path = tmp_path / "replay.nsb"
    local = cs.make_local()
    namedschema.save({"samples": _transition(), "local": local(np.arange(3.0)),
                      "cfg": cs.Config(0.1)}, path)
    proc = run_fresh(f"""
        import sys, namedschema
        state = namedschema.load({str(path)!r}, mmap_mode="r")
        s = state["samples"]
        print(type(s).__name__, s.reward.tolist(), hasattr(s, "total_reward"),
              type(state["local"]).__name__)
        from tests.core import class_schemas as cs
        assert type(s) is cs.Transition and type(state["cfg"]) is cs.Config
        print(s.total_reward(), state["cfg"].discount(1))
        again = namedschema.load({str(path)!r})
        assert type(again["samples"]) is cs.Transition
        """)
    lines = proc.stdout.decode().splitlines()
    assert lines == ["Transition [0.5, 0.5, 0.5] False Local", "1.5 0.99"]


def test_shared_memory_buffer_of_a_class_schema_in_a_spawn_pool():
    """A shared-memory buffer of a class schema is written by spawn workers in place."""
    from namedschema.buffer import buffer_from_example
    example = cs.Transition(np.zeros((2, 2), np.uint8), np.int64(0), np.float32(0), np.False_)
    buf = buffer_from_example(example, (3,), share_memory=True)
    with mp.get_context("spawn").Pool(1) as pool:
        replies = [pool.apply(cs.write_step, (buf, t)) for t in (1, 2)]
    assert [same for same, _ in replies] == [True, True] and replies[1][1] == 3.0
    assert type(buf) is cs.Transition and buf.action.tolist() == [0, 1, 2]
    assert buf.done.tolist() == [False, True, True] and buf.observation[2].max() == 2


RESUME_SCRIPT = '''
import os, pickle, sys
import numpy as np
import namedschema
from namedschema import NamedArrayTuple

class Replay(NamedArrayTuple):
    obs: np.ndarray
    reward: np.ndarray

    def mean_reward(self):
        return float(self.reward.mean())

path = sys.argv[1]
if os.path.exists(path + ".pkl"):            # resuming: a new process, same script
    with open(path + ".pkl", "rb") as f:
        replay = pickle.load(f)
    state = namedschema.load(path + ".nsb")
    assert type(replay) is Replay and type(state) is Replay, (type(replay), Replay)
    print("resumed", replay.mean_reward(), state[1:].mean_reward())
else:
    replay = Replay(np.zeros((4, 2)), np.arange(4.0))
    with open(path + ".pkl", "wb") as f:
        pickle.dump(replay, f)
    namedschema.save(replay, path + ".nsb")
    print("saved")
'''


def test_script_run_again_resumes_with_its_main_class(tmp_path):
    """Running the same script again (as __main__) resumes with the class, methods included."""
    script = tmp_path / "train.py"
    script.write_text(RESUME_SCRIPT)
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    outputs = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, str(script), str(tmp_path / "ckpt")],
                              capture_output=True, timeout=120, env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr.decode()
        outputs.append(proc.stdout.decode().strip())
    assert outputs == ["saved", "resumed 1.5 2.0"]
