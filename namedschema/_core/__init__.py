"""Layer 1, the core: schemas, their instances, and how they pickle by value.

Nothing here imports a higher layer, numpy excepted; ``import namedschema`` loads
only this package (and the small ``errors`` module).

limits          bounds on field counts and names, shared with file readers
memory          where arrays lie in memory: byte spans, extents, owners, overlap groups
optional        torch used only where already loaded: torch_if_loaded, is_tensor
printable       short, safe reprs of untrusted values for error messages
attrdict        AttrDict (rlpyt's attribute dictionary), pickled by value
codegen         the generated ``__new__`` and accessors of schema classes
instance        NamedTuple / NamedArrayTuple bases: indexing, writes, repr
schema          NamedTupleSchema / NamedArrayTupleSchema, the schema classes
pickling        schema classes pickled by value: registry, reduce and rebuild
classdef        class syntax (``class Samples(NamedArrayTuple): ...``)
factories       rlpyt-compatible factories (``namedarraytuple`` ...) and checks
tree            the structure model every walker uses: container kinds, paths, is_named_class
dynamic_types   what type checkers see of factory-made schemas
write_check     the checks made before ``x[idx] = y`` writes anything
casting         which dtype casts keep values (writes and evolution)
extras          how to install an optional extra, for error messages
"""
