"""Top-level API calls type checkers must reject (see fail_class_syntax.py for the markers)."""

import namedschema

namedschema.load("replay.nsb", mmap_mode="w")  # expect-error: not a mmap mode
namedschema.save({"a": 1})  # expect-error: missing path
namedschema.is_namedtuple()  # expect-error: missing argument
namedschema.inspect()  # expect-error: missing path
namedschema.patch_rlpyt(True)  # expect-error: options are keyword-only
namedschema.unpatch_rlpyt(1)  # expect-error: takes no argument
