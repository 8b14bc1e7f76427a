"""Compare the audit records of a killed-and-resumed run with the uninterrupted run's.

Exact means: every checkpoint record the resumed run wrote (from its resume
point on, and before the kill too) and its end record equal the
uninterrupted run's records of the same step, object by object and digest by
digest. The first record that differs names the step, the objects that
differ (in the order the run registered them, the first with its first
differing tensor, array or generator) and those still equal.

Difference       the first record that differs: step, objects, first leaf
reference_records  ``{step: objects}`` and the end record of the uninterrupted run
first_difference   the first differing record of a run's lives, and how many were compared
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .runs import Event, Life

__all__ = ["Difference", "Records", "reference_records", "first_difference"]


@dataclass
class Difference:
    """The first record of a resumed run that differs from the uninterrupted run's."""

    step: int | None
    record: str                        # "checkpoint" or "end"
    life: int                          # 0: before the first kill, 1: after it, ...
    objects: list[str]                 # objects that differ, in the run's order
    equal: list[str]                   # objects that are equal
    leaf: str | None = None            # the first object's first differing part
    leaf_kind: str | None = None       # tensor, array, generator, scalar, ...
    missing: list[str] = field(default_factory=list)   # in one record only

    def describe(self) -> str:
        """``step 2,400 in `net` (tensor `0.weight`), then `opt`; objects equal: `world```."""
        where = "the end of the run" if self.record == "end" else f"step {_n(self.step)}"
        text = f"{where} in `{self.objects[0]}`"
        if self.leaf_kind is not None:
            text += f" ({self.leaf_kind} `{self.leaf}`)" if self.leaf else f" ({self.leaf_kind})"
        if len(self.objects) > 1:
            text += ", then " + ", ".join(f"`{o}`" for o in self.objects[1:])
        if self.equal:
            text += "; objects equal: " + ", ".join(f"`{o}`" for o in self.equal)
        if self.missing:
            text += "; recorded by one run only: " + ", ".join(f"`{o}`" for o in self.missing)
        return text

    def to_dict(self) -> dict[str, Any]:
        """The difference as JSON-ready data."""
        return {"step": self.step, "record": self.record, "life": self.life,
                "objects": self.objects, "equal": self.equal, "leaf": self.leaf,
                "leaf_kind": self.leaf_kind, "missing": self.missing}


def _n(value: int | None) -> str:
    return "?" if value is None else f"{value:,}"


@dataclass
class Records:
    """The uninterrupted run's checkpoint records by step, and its end record."""

    by_step: dict[int, dict[str, Any]]
    end: dict[str, Any] | None
    end_step: int | None


def _objects_of_end(end: Event, by_step: dict[int, dict[str, Any]]) -> dict[str, Any] | None:
    if end.objects is not None:
        return end.objects
    return by_step.get(end.step) if end.step is not None else None


def reference_records(life: Life) -> Records:
    """The records of the uninterrupted run (one life)."""
    by_step: dict[int, dict[str, Any]] = {}
    end = None
    for event in life.events:
        if event.kind == "checkpoint" and event.step is not None and event.objects is not None:
            by_step.setdefault(event.step, event.objects)
        elif event.kind == "end":
            end = event
    return Records(by_step, None if end is None else _objects_of_end(end, by_step),
                   None if end is None else end.step)


def _compare(ref: dict[str, Any], got: dict[str, Any], step: int | None, record: str,
             life: int) -> Difference | None:
    names = list(ref) + [n for n in got if n not in ref]
    differ = [n for n in names if n in ref and n in got
              and ref[n].get("digest") != got[n].get("digest")]
    missing = [n for n in names if (n in ref) != (n in got)]
    if not differ and not missing:
        return None
    equal = [n for n in names if n not in differ and n not in missing]
    diff = Difference(step, record, life, differ or missing, equal,
                      missing=missing if differ else [])
    if differ:
        diff.leaf, diff.leaf_kind = _first_leaf(ref[differ[0]].get("leaves"),
                                                got[differ[0]].get("leaves"))
    return diff


def _first_leaf(ref: dict[str, Any] | None, got: dict[str, Any] | None
                ) -> tuple[str | None, str | None]:
    if not isinstance(ref, dict) or not isinstance(got, dict):
        return None, None
    for path, kind_digest in ref.items():
        if got.get(path) != kind_digest:
            return path, str(kind_digest[0])
    for path, kind_digest in got.items():
        if path not in ref:
            return path, str(kind_digest[0])
    return None, None


def first_difference(ref: Records, lives: Sequence[Life]) -> tuple[Difference | None, int, int]:
    """The first record of ``lives`` that differs from ``ref`` (None: all equal), the
    number of records compared, and the number that had no counterpart to compare with."""
    compared = uncompared = 0
    for index, life in enumerate(lives):
        for event in life.events:
            if event.kind != "checkpoint" or event.objects is None:
                continue
            if event.step not in ref.by_step:
                uncompared += 1
                continue
            compared += 1
            diff = _compare(ref.by_step[event.step], event.objects, event.step,
                            "checkpoint", index)
            if diff is not None:
                return diff, compared, uncompared
    ends = [e for e in lives[-1].events if e.kind == "end"] if lives else []
    if ends and ref.end is not None:
        got = ends[-1].objects
        if got is None:
            got = next((e.objects for life in reversed(lives) for e in reversed(life.events)
                        if e.kind == "checkpoint" and e.step == ends[-1].step), None)
        if got is not None:
            compared += 1
            diff = _compare(ref.end, got, ends[-1].step, "end", len(lives) - 1)
            if diff is None and ends[-1].step != ref.end_step:
                diff = Difference(ends[-1].step, "end", len(lives) - 1, ["step"], [])
            return diff, compared, uncompared
    return None, compared, uncompared
