"""The rlpyt drop-in: rlpyt's named tuples and buffers replaced by namedschema's.

install        patch_rlpyt / unpatch_rlpyt / is_patched
pickling       reductions for rlpyt's replay buffers, sum trees, RWLock, AttrDict
lazy_globals   rlpyt classes that pickles name, imported when first needed
"""

from .install import RlpytImportError, RlpytPatch, is_patched, patch_rlpyt, unpatch_rlpyt

__all__ = ["patch_rlpyt", "unpatch_rlpyt", "is_patched", "RlpytPatch", "RlpytImportError"]
