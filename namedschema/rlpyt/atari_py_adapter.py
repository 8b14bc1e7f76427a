"""An ``atari_py`` module over ``ale-py``, so rlpyt's own ``AtariEnv`` runs on Python 3.11+.

rlpyt's ``AtariEnv`` imports ``atari_py``, which is no longer maintained and does
not build on Python 3.11. ``ale-py`` (``pip install ale-py``, ROMs included) is
its successor, with almost the same ``ALEInterface``. This module gives
rlpyt what it calls, unchanged::

    import namedschema.rlpyt.atari_py_adapter as adapter
    adapter.install()        # before importing rlpyt.envs.atari
    from rlpyt.envs.atari.atari_env import AtariEnv
    env = AtariEnv(game="pong")

:func:`install` puts the adapter in ``sys.modules["atari_py"]`` only if no real
``atari_py`` can be imported (that one is left to do its job). The adapter's
``ALEInterface`` is a subclass of ``ale_py.ALEInterface`` that accepts
atari_py's calling conventions: bytes keys and paths (``setInt``,
``setFloat``, ``setBool``, ``setString``, ``getInt``..., ``loadROM``), an
integer action (numpy integers included) in ``act``, and action sets as
``numpy`` int arrays (``getMinimalActionSet``, ``getLegalActionSet``), as
``atari_py`` returns them. ``get_game_path``/``list_games`` find the ROMs
shipped with ale-py. Emulator states (``cloneState(include_rng=True)``) are
ale-py's; ``namedschema.rlpyt.resumable`` captures them exactly.

install         make ``import atari_py`` give the adapter (unless atari_py is installed)
make_module     the adapter as a new module object, without installing it
interface_class the adapter's ``ALEInterface`` (a subclass of ``ale_py.ALEInterface``)
is_adapter      whether a module is this adapter
get_game_path   the ROM file of a game (``"pong"``), from ale-py
list_games      the games whose ROMs ale-py ships
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from typing import TYPE_CHECKING, SupportsFloat, SupportsInt

import numpy as np

if TYPE_CHECKING:
    from ale_py import ALEInterface as _ALEInterface
    from numpy.typing import NDArray

__all__ = ["install", "make_module", "interface_class", "is_adapter", "get_game_path",
           "list_games", "AdapterError"]

MODULE_NAME = "atari_py"


class AdapterError(ImportError):
    """ale-py (the adapter's base) cannot be imported, or a game has no ROM."""


def _ale_py() -> types.ModuleType:
    try:
        import ale_py
    except ImportError as exc:
        raise AdapterError(
            "namedschema.rlpyt.atari_py_adapter needs ale-py (pip install ale-py, or "
            f"namedschema's 'atari' extra): {exc}") from exc
    return ale_py


def _text(value: str | bytes | bytearray | os.PathLike[str]) -> str:
    """atari_py's keys and paths are bytes; ale-py's are str."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf8")
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


_CLASS: list[type[_ALEInterface]] = []


def interface_class() -> type[_ALEInterface]:
    """The adapter's ``ALEInterface`` (one class per process, made on first use)."""
    if not _CLASS:
        _CLASS.append(_make_interface_class(_ale_py()))
    return _CLASS[0]


def _make_interface_class(ale_py: types.ModuleType) -> type[_ALEInterface]:

    # ale_py is passed in, imported when first needed; mypy gets the base class's type
    # from ale-py's stubs.
    if TYPE_CHECKING:
        from ale_py import ALEInterface as _Base
    else:
        _Base = ale_py.ALEInterface

    class ALEInterface(_Base):
        """``ale_py.ALEInterface`` taking atari_py's bytes keys, int actions, array sets."""

        def setInt(self, key: str | bytes, value: SupportsInt) -> None:
            super().setInt(_text(key), int(value))

        def setFloat(self, key: str | bytes, value: SupportsFloat) -> None:
            super().setFloat(_text(key), float(value))

        def setBool(self, key: str | bytes, value: object) -> None:
            super().setBool(_text(key), bool(value))

        def setString(self, key: str | bytes, value: str | bytes) -> None:
            super().setString(_text(key), _text(value))

        def getInt(self, key: str | bytes) -> int:
            return super().getInt(_text(key))

        def getFloat(self, key: str | bytes) -> float:
            return super().getFloat(_text(key))

        def getBool(self, key: str | bytes) -> bool:
            return super().getBool(_text(key))

        def getString(self, key: str | bytes) -> str:
            return super().getString(_text(key))

        def loadROM(self, rom_file: str | bytes | os.PathLike[str]) -> None:
            super().loadROM(_text(rom_file))

        def act(self, action: SupportsInt, *args: float) -> int:
            return super().act(int(action), *args)

        # atari_py returns an int array where ale-py returns a list of Actions
        def getMinimalActionSet(self) -> NDArray[np.intc]:  # type: ignore[override]
            return np.array([a.value for a in super().getMinimalActionSet()], dtype=np.intc)

        # atari_py returns an int array where ale-py returns a list of Actions
        def getLegalActionSet(self) -> NDArray[np.intc]:  # type: ignore[override]
            return np.array([a.value for a in super().getLegalActionSet()], dtype=np.intc)

    ALEInterface.__module__ = MODULE_NAME
    ALEInterface.__qualname__ = "ALEInterface"
    return ALEInterface


def get_game_path(game_name: str | bytes) -> str:
    """The ROM file of ``game_name`` (``"pong"``) that ale-py ships."""
    import warnings

    from ale_py import roms
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # "Rom X not supported": said below
        try:
            path = roms.get_rom_path(_text(game_name))
        except OSError as exc:               # a ROM file that fails its checksum
            raise AdapterError(f"atari_py adapter: the ROM of {game_name!r} in ale-py "
                               f"cannot be used ({exc})") from exc
    if path is None:
        raise AdapterError(f"atari_py adapter: ale-py ships no ROM for game {game_name!r} "
                           "(see atari_py.list_games())")
    return os.fspath(path)


def list_games() -> list[str]:
    """The games whose ROMs ale-py ships."""
    from ale_py import roms
    return sorted(roms.get_all_rom_ids())


def make_module() -> types.ModuleType:
    """A new ``atari_py`` module object: ``ALEInterface``, ``get_game_path``, ``list_games``."""
    ale_py = _ale_py()
    module = types.ModuleType(MODULE_NAME, "atari_py's API over ale-py "
                              "(namedschema.rlpyt.atari_py_adapter)")
    module.ALEInterface = interface_class()                       # type: ignore[attr-defined]
    module.get_game_path = get_game_path                                # type: ignore[attr-defined]
    module.list_games = list_games                                      # type: ignore[attr-defined]
    module.__namedschema_adapter__ = True                               # type: ignore[attr-defined]
    # As atari_py does at import: only errors from the emulator.
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    return module


def is_adapter(module: object) -> bool:
    """Whether ``module`` is this adapter (not a real atari_py)."""
    return bool(getattr(module, "__namedschema_adapter__", False))


def install() -> bool:
    """Make ``import atari_py`` give the adapter, unless a real atari_py is importable.

    Call it before rlpyt imports ``rlpyt.envs.atari.atari_env``. Calling it
    again is harmless.

    Returns:
        True if the adapter is (now) ``atari_py``; False if a real atari_py
        is installed and was left alone.

    Raises:
        AdapterError: ale-py is not installed.
    """
    current = sys.modules.get(MODULE_NAME)
    if current is not None:
        return is_adapter(current)
    if importlib.util.find_spec(MODULE_NAME) is not None:
        return False
    sys.modules[MODULE_NAME] = make_module()
    return True

