"""The names pickles of patched rlpyt objects call: ``namedschema.rlpyt.pickling.*``.

A pickled rlpyt replay buffer, sum tree or ``AttrDict`` under the patch refers to
these by module path (the code is in ``rlpyt.patch.pickling``). The path is part
of every such pickle and checkpoint, so it stays here however the package is
arranged.
"""

from .patch.pickling import _Ref, _Span, restore_state, restore_with_globals

__all__ = ["restore_state", "restore_with_globals", "_Ref", "_Span"]
