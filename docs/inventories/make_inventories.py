"""Write the small intersphinx inventories the docs link through (python.inv, numpy.inv,
torch.inv next to this file).

Why: intersphinx normally downloads each project's ``objects.inv`` at build time, and CI
(like this project's build machines) cannot reach docs.python.org, numpy.org or
pytorch.org. These files list only the outside names the docs refer to, each with the
address of its entry in that project's documentation, in Sphinx's inventory format (v2).
docs/conf.py reads them first and falls back to the project's own inventory online.

To link another outside name, add it below and run ``python docs/inventories/make_inventories.py``;
tests/meta/test_docs_build.py fails if the files are not what this script writes.
"""

from __future__ import annotations

import os
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))

# project -> (version, [(name, domain:role, address relative to the project's docs root)])
# An address ending in "#$" ends in the name itself (Sphinx's shorthand).
_EXC = "library/exceptions.html#$"
INVENTORIES = {
    "python": ("3", [
        ("argparse", "py:module", "library/argparse.html#module-$"),
        ("copyreg", "py:module", "library/copyreg.html#module-$"),
        ("tracemalloc", "py:module", "library/tracemalloc.html#module-$"),
        ("collections.namedtuple", "py:function", "library/collections.html#$"),
        ("collections.abc.Callable", "py:class", "library/collections.abc.html#$"),
        ("collections.abc.Iterable", "py:class", "library/collections.abc.html#$"),
        ("collections.abc.Iterator", "py:class", "library/collections.abc.html#$"),
        ("collections.abc.Mapping", "py:class", "library/collections.abc.html#$"),
        ("io.BufferedIOBase", "py:class", "library/io.html#$"),
        ("io.RawIOBase", "py:class", "library/io.html#$"),
        ("os.PathLike", "py:class", "library/os.html#$"),
        ("pickle.dump", "py:function", "library/pickle.html#$"),
        ("pickle.dumps", "py:function", "library/pickle.html#$"),
        ("pickle.load", "py:function", "library/pickle.html#$"),
        ("pickle.loads", "py:function", "library/pickle.html#$"),
        ("pickle.PickleBuffer", "py:class", "library/pickle.html#$"),
        ("pickle.PicklingError", "py:exception", "library/pickle.html#$"),
        ("pickle.UnpicklingError", "py:exception", "library/pickle.html#$"),
        ("types.ModuleType", "py:class", "library/types.html#$"),
        ("typing.Any", "py:data", "library/typing.html#$"),
        ("typing.NamedTuple", "py:class", "library/typing.html#$"),
        ("typing.dataclass_transform", "py:function", "library/typing.html#$"),
        ("bool", "py:class", "library/functions.html#$"),
        ("float", "py:class", "library/functions.html#$"),
        ("int", "py:class", "library/functions.html#$"),
        ("object", "py:class", "library/functions.html#$"),
        ("type", "py:class", "library/functions.html#$"),
        ("bytes", "py:class", "library/stdtypes.html#$"),
        ("dict", "py:class", "library/stdtypes.html#$"),
        ("list", "py:class", "library/stdtypes.html#$"),
        ("str", "py:class", "library/stdtypes.html#$"),
        ("tuple", "py:class", "library/stdtypes.html#$"),
        ("None", "py:data", "library/constants.html#$"),
        ("AttributeError", "py:exception", _EXC),
        ("Exception", "py:exception", _EXC),
        ("ImportError", "py:exception", _EXC),
        ("IndexError", "py:exception", _EXC),
        ("KeyError", "py:exception", _EXC),
        ("MemoryError", "py:exception", _EXC),
        ("ModuleNotFoundError", "py:exception", _EXC),
        ("OSError", "py:exception", _EXC),
        ("OverflowError", "py:exception", _EXC),
        ("RecursionError", "py:exception", _EXC),
        ("RuntimeError", "py:exception", _EXC),
        ("TypeError", "py:exception", _EXC),
        ("UserWarning", "py:exception", _EXC),
        ("ValueError", "py:exception", _EXC),
    ]),
    "numpy": ("2", [
        ("numpy.ndarray", "py:class", "reference/generated/$.html#$"),
        ("numpy.dtype", "py:class", "reference/generated/$.html#$"),
        # scalar types, as annotations cite them (NDArray[np.int64])
        ("numpy.float32", "py:class", "reference/arrays.scalars.html#$"),
        ("numpy.int64", "py:class", "reference/arrays.scalars.html#$"),
        ("numpy.memmap", "py:class", "reference/generated/$.html#$"),
        ("numpy.load", "py:function", "reference/generated/$.html#$"),
        ("numpy.save", "py:function", "reference/generated/$.html#$"),
        ("numpy.can_cast", "py:function", "reference/generated/$.html#$"),
        ("numpy.zeros", "py:function", "reference/generated/$.html#$"),
        ("numpy.random.Generator", "py:class", "reference/random/generator.html#$"),
        ("numpy.random.SeedSequence", "py:class",
         "reference/random/bit_generators/generated/$.html#$"),
        ("numpy.typing.DTypeLike", "py:class", "reference/typing.html#$"),  # as annotations cite it
        ("numpy.typing.NDArray", "py:data", "reference/typing.html#$"),
    ]),
    "torch": ("2", [
        ("torch.Tensor", "py:class", "tensors.html#$"),
        ("torch.load", "py:function", "generated/$.html#$"),
        ("torch.save", "py:function", "generated/$.html#$"),
        ("torch.from_numpy", "py:function", "generated/$.html#$"),
        ("torch.multiprocessing", "py:module", "multiprocessing.html#module-$"),
    ]),
}


def inventory_bytes(project: str, version: str, entries: list) -> bytes:
    """The ``objects.inv`` (version 2) of ``entries``: a text header, then zlib lines."""
    header = (f"# Sphinx inventory version 2\n# Project: {project}\n# Version: {version}\n"
              "# The remainder of this file is compressed using zlib.\n")
    lines = "".join(f"{name} {role} 1 {uri.replace('$.html', name + '.html')} -\n"
                    for name, role, uri in sorted(entries))
    return header.encode() + zlib.compress(lines.encode(), 9)


def main() -> None:
    for project, (version, entries) in INVENTORIES.items():
        with open(os.path.join(HERE, f"{project}.inv"), "wb") as f:
            f.write(inventory_bytes(project, version, entries))


if __name__ == "__main__":
    main()
