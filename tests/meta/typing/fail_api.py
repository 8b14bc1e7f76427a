"""Top-level API calls type checkers must reject (see fail_class_syntax.py for the markers)."""

import namedschema

namedschema.load("replay.nsb", mmap_mode="w")  # expect-error: not a mmap mode
namedschema.save({"a": 1})  # expect-error: missing path
namedschema.is_namedtuple()  # expect-error: missing argument
namedschema.inspect()  # expect-error: missing path
namedschema.patch_rlpyt(True)  # expect-error: options are keyword-only
namedschema.unpatch_rlpyt(1)  # expect-error: takes no argument
namedschema.load("replay.nsb", schemas=[], extra="drop")  # expect-error: not an extra choice
namedschema.upgrade({}, [], casting="same-kind")  # expect-error: not a casting rule
namedschema.upgrade({}, "train")  # expect-error: a module's name is not schemas
namedschema.lod("replay.nsb")  # expect-error: no such name (the lazy names are typed)
namedschema.RunCheckpoint("run.nsc").next_step + None  # expect-error: an int
