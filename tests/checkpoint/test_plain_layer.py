"""The plain format stands alone: plain saves and loads load nothing of incremental,
background or evolution (issue 29), and crash recovery still runs where it is needed.

Each check runs in a fresh interpreter, where ``sys.modules`` shows exactly what a
program that only saves and loads plainly pays for.
"""

from __future__ import annotations

import json
import os
import zlib

import numpy as np
import pytest

import namedschema
from namedschema.checkpoint import _journal as journal
from tests.helpers import run_fresh

#: Modules of the incremental and background saves, and schema evolution.
NOT_PLAIN = ["namedschema.checkpoint._compression", "namedschema.checkpoint._journal",
             "namedschema.checkpoint._background", "namedschema.checkpoint._incremental",
             "namedschema.checkpoint._tracking", "namedschema.checkpoint._squeezed",
             "namedschema.evolution"]

#: The namedschema modules a plain save, load, inspect and verify load (a ratchet: lower
#: it when a change loads fewer): 62 before issue 29, 41 after it, 42 with
#: ``namedschema._process`` (process-wide state in one place), 21 once the small
#: modules were merged by concern, 20 once the codec was loaded only by files and saves
#: that compress, 19 once the integration hooks were loaded only by their libraries.
MOST_MODULES = 19

_PLAIN = """
import io, json, os, sys, tempfile
import numpy as np
import namedschema
from namedschema.checkpoint import verify
S = namedschema.NamedArrayTupleSchema("S", "obs reward")
d = tempfile.mkdtemp()
p = os.path.join(d, "x.nsc")
namedschema.save({"a": np.arange(10), "s": S(np.zeros((4, 3)), np.ones(4))}, p,
                 metadata={"kind": "test"})
namedschema.save({"a": np.arange(10)}, p)                 # over an existing file
back = namedschema.load(p, verify=True)
assert back["a"][9] == 9
namedschema.load(p, mmap_mode="r")
namedschema.inspect(p)
verify(p)
out = io.BytesIO()
namedschema.save([np.arange(3)], out)
out.seek(0)
namedschema.load(out)
print(json.dumps(sorted(m for m in sys.modules if m.startswith("namedschema"))))
"""


def _loaded(code: str) -> list[str]:
    proc = run_fresh(code)
    return json.loads(proc.stdout.decode().splitlines()[-1])


def _of(loaded: list[str], prefixes: list[str]) -> list[str]:
    return [m for m in loaded if any(m == p or m.startswith(p + ".") for p in prefixes)]


@pytest.mark.subprocess
def test_plain_save_load_inspect_verify_load_no_incremental_background_or_evolution():
    loaded = _loaded(_PLAIN)
    assert _of(loaded, NOT_PLAIN) == []
    print(f"{len(loaded)} namedschema modules loaded")
    assert len(loaded) <= MOST_MODULES, loaded


@pytest.mark.subprocess
def test_the_check_sees_what_a_background_save_and_schemas_load():
    """The check above can fail: the modules it looks for are loaded when used."""
    code = _PLAIN.replace("namedschema.inspect(p)", """namedschema.inspect(p)
namedschema.save({"a": np.arange(10)}, p, background=True).wait()
namedschema.load(p, schemas=[S])""")
    loaded = _loaded(code)
    assert {"namedschema.checkpoint._background", "namedschema.checkpoint._incremental",
            "namedschema.evolution"} <= set(loaded)


@pytest.mark.subprocess
def test_a_fresh_load_finishes_a_committed_journal_first(tmp_path):
    """A process that never saved incrementally still finds and applies the journal an
    interrupted incremental save left (loading ``incremental`` for it), and reads the
    file as the journal leaves it."""
    path = str(tmp_path / "run.nsc")
    namedschema.save({"a": np.arange(1000, dtype=np.int64)}, path)
    with open(path, "rb") as f:
        data = f.read()
    offset = data.index(np.arange(5, 8, dtype=np.int64).tobytes())
    new = np.int64(-77).tobytes()
    checkpoint_id = namedschema.inspect(path).checkpoint_id
    journal.write(journal.journal_path(path), checkpoint_id, checkpoint_id, len(data),
                  [(offset, new, zlib.crc32(new))])
    assert journal.is_file(journal.journal_path(path))
    proc = run_fresh(f"""
        import sys, namedschema
        a = namedschema.load({path!r})["a"]
        print(int(a[5]), int(a[6]), "namedschema.checkpoint._incremental" in sys.modules)
        """)
    assert proc.stdout.split() == [b"-77", b"6", b"True"]
    assert not os.path.exists(journal.journal_path(path))


@pytest.mark.subprocess
def test_a_load_leaves_something_that_is_not_a_journal_alone(tmp_path):
    """A directory at the journal's path is no journal: nothing loads ``incremental``."""
    path = str(tmp_path / "run.nsc")
    namedschema.save({"a": np.arange(4)}, path)
    os.mkdir(journal.journal_path(path))
    proc = run_fresh(f"""
        import sys, namedschema
        print(int(namedschema.load({path!r})["a"][3]),
              "namedschema.checkpoint._incremental" in sys.modules)
        """)
    assert proc.stdout.split() == [b"3", b"False"]
    assert os.path.isdir(journal.journal_path(path))
