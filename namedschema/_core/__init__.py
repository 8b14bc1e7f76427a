"""Layer 1, the core: schemas, their instances, and how they pickle by value.

Nothing here imports a higher layer; ``import namedschema`` loads ``schema``,
``instance``, ``pickling`` and ``attrdict`` (the standard library alone) and the
small ``errors`` module. One module per concern:

schema      the metaclasses, their generated ``__new__`` and indexing code, the limits
            on a definition, the rlpyt-compatible factories, class syntax, and what
            type checkers see of factory-made schemas
instance    the NamedTuple / NamedArrayTuple bases (indexing, writes, repr, the error
            reporters), and ``printable`` text for messages
pickling    schema classes pickled by value (registry, reduce, rebuild; the wire name
            ``namedschema._pickle.rebuild_schema``), and the checkpoint pickler's flag
attrdict    AttrDict (rlpyt's attribute dictionary), pickled by value
writes      (numpy) which casts keep values; the checks before ``x[idx] = y`` writes,
            loaded by name at the first write that needs one (no import cycle: it
            imports nothing of the core but ``optional``)
tree        (numpy) the structure model every walker uses, and where arrays lie in memory
optional    torch used only where already loaded; how to install an optional extra
"""
