"""Fold the long, unreadable parts of an ``inspect`` tree into one line each.

A checkpoint of a training run holds generator states (Python's ``random``
is a tuple of 625 ints, numpy's a key array and counters) and other long
tuples of numbers: printed in full they bury the structure a reader looks
for under a thousand lines. ``fold`` keeps every line of the tree but:

* a generator state (Python ``random``, numpy ``Generator`` and legacy
  ``RandomState``, as namedschema stores them) becomes one line naming it;
* a tuple or list of more than ``LONG`` plain values becomes one line with
  its first values.

``namedschema inspect --full`` prints the tree unfolded.

fold   ``(folded text, number of lines folded away)``
"""

from __future__ import annotations

import re

__all__ = ["fold", "LONG"]

LONG = 8                # a tuple or list of more plain values than this is folded
_SHOWN = 3              # values shown of a folded tuple or list
_CONTAINER = re.compile(r"(tuple|list) of ([0-9]+)$")
_KEY = re.compile(r"^('(?:[^'\\]|\\.)*'|\[[0-9]+\]): ")


class _Node:
    __slots__ = ("text", "children")

    def __init__(self, text: str) -> None:
        self.text = text
        self.children: list[_Node] = []

    def key_and_value(self) -> tuple[str, str]:
        match = _KEY.match(self.text)
        return (match.group(1), self.text[match.end():]) if match else ("", self.text)

    def size(self) -> int:
        return 1 + sum(child.size() for child in self.children)


def _parse(lines: list[str]) -> list[_Node]:
    roots: list[_Node] = []
    stack: list[tuple[int, _Node]] = []
    for line in lines:
        depth = len(line) - len(line.lstrip(" "))
        node = _Node(line.strip())
        while stack and stack[-1][0] >= depth:
            stack.pop()
        (stack[-1][1].children if stack else roots).append(node)
        stack.append((depth, node))
    return roots


def _values(node: _Node) -> dict[str, str]:
    """The children as ``{key: value text}``, keys unquoted (``'pos'`` -> ``pos``)."""
    return {key.strip("'"): value for key, value in
            (child.key_and_value() for child in node.children)}


def _generator(node: _Node) -> str | None:
    """What generator state ``node`` is, or None."""
    if not node.children:
        return None
    values = _values(node)
    if {"bit_generator", "state"} <= values.keys():
        return f"numpy {values['bit_generator'].strip(chr(34))} generator state"
    if {"kind", "keys", "pos"} <= values.keys():
        return f"numpy RandomState ({values['kind'].strip(chr(34))}) state"
    if values.keys() == {"version", "internal", "gauss"}:
        return "Python random state (MT19937)"
    if values.keys() == {"[0]", "[1]", "[2]"} and values["[1]"] == "tuple of 625":
        return "Python random state (MT19937, 625 words)"
    return None


def _long_values(node: _Node) -> str | None:
    """One line for a tuple or list of many plain values, or None."""
    _key, value = node.key_and_value()
    match = _CONTAINER.search(value)
    if not match or int(match.group(2)) <= LONG or len(node.children) <= LONG:
        return None
    if any(child.children for child in node.children):
        return None
    shown = ", ".join(child.key_and_value()[1] for child in node.children[:_SHOWN])
    return f"{shown}, ..."


def _render(node: _Node, depth: int, out: list[str]) -> int:
    """Append ``node``'s lines to ``out``; return how many lines were folded away."""
    pad = "  " * depth
    what = _generator(node)
    if what is not None:
        key, _value = node.key_and_value()
        out.append(f"{pad}{key + ': ' if key else ''}{what}")
        return node.size() - 1
    values = _long_values(node)
    if values is not None:
        out.append(f"{pad}{node.text}: {values}")
        return node.size() - 1
    out.append(pad + node.text)
    return sum(_render(child, depth + 1, out) for child in node.children)


def fold(tree: str) -> tuple[str, int]:
    """``tree`` (an inspect tree) with generator states and long tuples on one line each.

    Returns the folded text and how many lines it left out.

    >>> text = "dict of 1\\n  'xs': tuple of 10\\n" + "".join(
    ...     f"    [{i}]: {i}\\n" for i in range(10))
    >>> folded, left_out = fold(text)
    >>> print(folded)
    dict of 1
      'xs': tuple of 10: 0, 1, 2, ...
    >>> left_out
    10
    """
    out: list[str] = []
    folded = sum(_render(root, 0, out) for root in _parse(tree.splitlines()))
    return "\n".join(out), folded
