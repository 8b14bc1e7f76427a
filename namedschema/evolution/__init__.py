"""Layer 4, schema evolution: load data saved under an older schema.

api          upgrade, upgrader: the public entry points, and the types of their options
reports      UpgradeReport, SchemaMapping, KeptField and dtype lookups
conversion   Upgrader: the per-field plan (renames, casts, defaults, drops)
walk         the walk that applies a plan through nested data
"""

from ._upgrade import (
    CASTING_CHOICES,
    EXTRA_CHOICES,
    CastingChoice,
    ExtraChoice,
    KeptField,
    SchemaMapping,
    SchemaSpec,
    UpgradeFunction,
    UpgradeReport,
    field_dtype,
    upgrade,
    upgrader,
)

__all__ = ["upgrade", "upgrader", "UpgradeReport", "SchemaMapping", "KeptField", "field_dtype",
           "ExtraChoice", "CastingChoice", "SchemaSpec", "UpgradeFunction",
           "EXTRA_CHOICES", "CASTING_CHOICES"]
