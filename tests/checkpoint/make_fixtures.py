"""Write the compatibility fixtures in tests/checkpoint/data (run once per release).

Each released format version and package version gets files that every later
version must keep loading: a checkpoint written by ``namedschema.save`` and
pickles of schema instances at several protocols. The expected contents are
built by ``expected()`` below, which the tests share, so a fixture is checked
value by value.

    python -m tests.checkpoint.make_fixtures
"""

from __future__ import annotations

import os
import pickle

import numpy as np

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def expected():
    """The object every fixture holds: nested schemas, None fields, views, scalars."""
    from namedschema import NamedArrayTupleSchema, NamedTupleSchema

    Obs = NamedArrayTupleSchema("Obs", "frames last")
    Step = NamedArrayTupleSchema("Step", "observation action reward done info")
    Meta = NamedTupleSchema("Meta", "name seed tags", defaults=((),))
    frames = np.arange(6 * 4 * 4, dtype=np.uint8).reshape(6, 4, 4)
    buffer = Step(Obs(frames, frames[-2:]),                  # a view of another field
                  np.arange(6, dtype=np.int32) % 3,
                  np.linspace(-1, 1, 6).astype(np.float32),
                  np.array([0, 0, 1, 0, 0, 1], bool),
                  None)
    return {"buffer": buffer, "meta": Meta("demo", 7), "cursor": 4}


def main() -> None:
    import namedschema

    os.makedirs(DATA, exist_ok=True)
    obj = expected()
    version = namedschema.__version__
    namedschema.save(obj, os.path.join(DATA, f"format-{namedschema.checkpoint.FORMAT_VERSION}.nsb"))
    for protocol in (2, 4, 5):
        with open(os.path.join(DATA, f"pickle-{version}-protocol{protocol}.pkl"), "wb") as f:
            pickle.dump(obj, f, protocol=protocol)
    print("wrote", sorted(os.listdir(DATA)))


if __name__ == "__main__":
    main()
