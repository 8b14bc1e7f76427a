"""Pickling benchmarks: schema instances against stdlib namedtuple and rlpyt's types.

A list of many small instances (four fields: int, float, int, bool) is pickled
with protocol 4 by each contender; stdlib ``collections.namedtuple`` (pickled
by reference to a module-level class) is the reference. rlpyt's
class-per-type ``namedarraytuple`` and its ``NamedTupleSchema`` join when
``RLPYT_SRC`` points at an rlpyt source tree.

CASES   the case names, in running order
main    run the cases, print the table, optionally write JSON
"""

from __future__ import annotations

import collections
import pickle
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .common import (
    RLPYT_SKIP_NOTE,
    Result,
    best_of,
    best_times,
    compare,
    finish,
    load_rlpyt_collections,
    topic_parser,
)

if TYPE_CHECKING:
    from types import ModuleType

# Contender name -> constructor of an instance from four values.
_Made = dict[str, Callable[..., tuple[Any, ...]]]

__all__ = ["CASES", "main"]

CASES = ("pickle_list", "pickle_one")

PROTOCOL = 4
TARGETS = {"size": "<= 1.2", "dumps": "<= 1.5", "loads": "<= 1.5"}

# Pickle stores a classic class by module and name, so these must be module globals.
PickleSmall = collections.namedtuple("PickleSmall", ["step", "reward", "action", "done"])
FIELDS = PickleSmall._fields
RlpytSmall = None


def _contenders(rl: ModuleType | None) -> _Made:
    """Contender name -> constructor of an instance from four values."""
    global RlpytSmall
    from namedschema import NamedTupleSchema
    made: _Made = {"namedtuple": PickleSmall, "namedschema": NamedTupleSchema("PickleSmall", FIELDS)}
    if rl is not None:
        RlpytSmall = rl.namedarraytuple("RlpytSmall", FIELDS)
        made["rlpyt NAT"] = RlpytSmall
        made["rlpyt schema"] = rl.NamedTupleSchema("PickleSmall", FIELDS)
    return made


def _check_round_trip(name: str, data: bytes, objs: list[tuple[Any, ...]]) -> None:
    back = pickle.loads(data)
    if back != objs or type(back[0]).__name__ not in ("PickleSmall", "RlpytSmall",
                                                      "NamedTuple"):
        raise AssertionError(f"{name}: pickle round trip changed the data")


def _pickle_list(n: int, quick: bool, made: _Made) -> list[Result]:
    rows: list[Result] = []
    repeat = 5 if quick else 9
    lists = {name: [make(i, i * 0.5, i % 7, i % 2 == 0) for i in range(n)]
             for name, make in made.items()}
    blobs = {name: pickle.dumps(objs, protocol=PROTOCOL) for name, objs in lists.items()}
    for name in made:
        _check_round_trip(name, blobs[name], lists[name])
    sizes = {name: len(b) for name, b in blobs.items()}
    case = f"pickle_list_{n // 1000}k"
    rows += compare(case, "size", "MB", sizes, "namedtuple",
                    {"namedschema": TARGETS["size"]}, scale=1e-6)
    dumps, loads = dict.fromkeys(made, float("inf")), dict.fromkeys(made, float("inf"))
    # Rounds alternate contenders; each keeps its best time.
    for _ in range(repeat):
        for name in made:
            objs, blob = lists[name], blobs[name]
            dumps[name] = min(dumps[name],
                              best_of(lambda objs=objs: pickle.dumps(objs, protocol=PROTOCOL),
                                      repeat=1))
            loads[name] = min(loads[name], best_of(lambda blob=blob: pickle.loads(blob),
                                                           repeat=1))
    rows += compare(case, "dumps", "ms", dumps, "namedtuple",
                    {"namedschema": TARGETS["dumps"]}, scale=1e3)
    rows += compare(case, "loads", "ms", loads, "namedtuple",
                    {"namedschema": TARGETS["loads"]}, scale=1e3)
    return rows


def _pickle_one(quick: bool, made: _Made) -> list[Result]:
    objs = {name: make(1, 0.5, 3, False) for name, make in made.items()}
    blobs = {name: pickle.dumps(o, protocol=PROTOCOL) for name, o in objs.items()}
    rows = compare("pickle_one", "size", "B", {n: len(b) for n, b in blobs.items()},
                   "namedtuple")
    ns: dict[str, object] = {f"b{i}": blob for i, blob in enumerate(blobs.values())}
    ns["loads"] = pickle.loads
    times = best_times({name: f"loads(b{i})" for i, name in enumerate(blobs)},
                       repeat=3 if quick else 15, min_time=0.005 if quick else 0.02,
                       globals_=ns)
    rows += compare("pickle_one", "loads", "us", times, "namedtuple", scale=1e6)
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the pickling benchmarks (see the module docstring); return the exit status."""
    parser = topic_parser("pickling", __doc__.split("\n\n")[0], CASES)
    args = parser.parse_args(argv)
    notes = [f"protocol {PROTOCOL}; loads happen in the process that dumped "
             "(in a fresh process the first load of a schema also builds its class, once)"]
    rl = load_rlpyt_collections()
    if rl is None:
        notes.append(RLPYT_SKIP_NOTE)
    made = _contenders(rl)
    rows: list[Result] = []
    if "pickle_list" in args.cases:
        rows += _pickle_list(10_000 if args.quick else 100_000, args.quick, made)
    if "pickle_one" in args.cases:
        rows += _pickle_one(args.quick, made)
    return finish("pickling", args, rows, notes)


if __name__ == "__main__":
    sys.exit(main())
