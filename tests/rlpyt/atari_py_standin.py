"""A ctypes-free stand-in for atari_py's ``ALEInterface``, over ale-py's emulator.

atari_py does not build on Python 3.11, so its state path (``cloneSystemState``
returning a native pointer, ``encodeState``/``decodeState``/``deleteState``)
is tested with this class: the same methods with the same signatures as
``atari_py/ale_python_interface.py`` (openai/atari-py at f16dd11; checked by
test_atari_state.py against ``ATARI_PY_SIGNATURES`` below, and against the
source itself when ATARI_PY_SRC points at it). Like the original it keeps its
emulator behind an integer handle (``self.obj``, a "pointer" that pickles
and means nothing elsewhere), returns native states as integer handles that
must be freed with ``deleteState``, and action sets as ``intc`` arrays.
"""

from __future__ import annotations

import itertools

import numpy as np

# name -> parameters (after self), as in atari_py's ale_python_interface.py.
ATARI_PY_SIGNATURES = {
    "getString": ["key"], "getInt": ["key"], "getBool": ["key"], "getFloat": ["key"],
    "setString": ["key", "value"], "setInt": ["key", "value"], "setBool": ["key", "value"],
    "setFloat": ["key", "value"], "loadROM": ["rom_file"], "act": ["action"],
    "game_over": [], "reset_game": [], "getLegalActionSet": [], "getMinimalActionSet": [],
    "getAvailableModes": [], "setMode": ["mode"], "getAvailableDifficulties": [],
    "setDifficulty": ["difficulty"], "getFrameNumber": [], "lives": [],
    "getEpisodeFrameNumber": [], "getScreenDims": [], "getScreen": ["screen_data"],
    "getScreenRGB": ["screen_data"], "getScreenRGB2": ["screen_data"],
    "getScreenGrayscale": ["screen_data"], "getRAMSize": [], "getRAM": ["ram"],
    "saveScreenPNG": ["filename"], "saveState": [], "loadState": [], "cloneState": [],
    "restoreState": ["state"], "cloneSystemState": [], "restoreSystemState": ["state"],
    "deleteState": ["state"], "encodeStateLen": ["state"], "encodeState": ["state", "buf"],
    "decodeState": ["serialized"], "setLoggerMode": ["mode"],
}

_EMULATORS: dict = {}      # handle -> ale_py.ALEInterface ("the C library's memory")
NATIVE_STATES: dict = {}   # handle -> ale_py.ALEState, until deleteState
_HANDLES = itertools.count(0x7F0000001000, 0x1000)


def _key(value):
    return value.decode() if isinstance(value, bytes) else value


class ALEInterface:
    """atari_py's ``ALEInterface`` API, emulated with ale-py, no ctypes."""

    class Logger:
        Info = 0
        Warning = 1
        Error = 2

    def __init__(self):
        import ale_py
        self.obj = next(_HANDLES)
        _EMULATORS[self.obj] = ale_py.ALEInterface()

    @property
    def _ale(self):
        return _EMULATORS[self.obj]

    def getString(self, key):
        return self._ale.getString(_key(key)).encode()

    def getInt(self, key):
        return self._ale.getInt(_key(key))

    def getBool(self, key):
        return self._ale.getBool(_key(key))

    def getFloat(self, key):
        return self._ale.getFloat(_key(key))

    def setString(self, key, value):
        self._ale.setString(_key(key), _key(value))

    def setInt(self, key, value):
        self._ale.setInt(_key(key), int(value))

    def setBool(self, key, value):
        self._ale.setBool(_key(key), bool(value))

    def setFloat(self, key, value):
        self._ale.setFloat(_key(key), float(value))

    def loadROM(self, rom_file):
        self._ale.loadROM(_key(rom_file))

    def act(self, action):
        return self._ale.act(int(action))

    def game_over(self):
        return self._ale.game_over()

    def reset_game(self):
        self._ale.reset_game()

    def getLegalActionSet(self):
        return np.array([a.value for a in self._ale.getLegalActionSet()], dtype=np.intc)

    def getMinimalActionSet(self):
        return np.array([a.value for a in self._ale.getMinimalActionSet()], dtype=np.intc)

    def getAvailableModes(self):
        return np.array(self._ale.getAvailableModes(), dtype=np.intc)

    def setMode(self, mode):
        self._ale.setMode(int(mode))

    def getAvailableDifficulties(self):
        return np.array(self._ale.getAvailableDifficulties(), dtype=np.intc)

    def setDifficulty(self, difficulty):
        self._ale.setDifficulty(int(difficulty))

    def getFrameNumber(self):
        return self._ale.getFrameNumber()

    def lives(self):
        return self._ale.lives()

    def getEpisodeFrameNumber(self):
        return self._ale.getEpisodeFrameNumber()

    def getScreenDims(self):
        height, width = self._ale.getScreenDims()
        return (width, height)

    def getScreen(self, screen_data=None):
        screen = self._ale.getScreen().reshape(-1)
        if screen_data is None:
            return screen
        screen_data.reshape(-1)[:] = screen
        return screen_data

    def getScreenRGB(self, screen_data=None):
        rgb = self._ale.getScreenRGB()[..., ::-1]          # BGR, as atari_py on x86
        if screen_data is None:
            return np.ascontiguousarray(rgb)
        screen_data[...] = rgb
        return screen_data

    def getScreenRGB2(self, screen_data=None):
        if screen_data is None:
            return self._ale.getScreenRGB()
        screen_data[...] = self._ale.getScreenRGB()
        return screen_data

    def getScreenGrayscale(self, screen_data=None):
        gray = self._ale.getScreenGrayscale()
        if screen_data is None:
            return gray[..., np.newaxis]                   # (height, width, 1)
        screen_data.reshape(gray.shape)[...] = gray
        return screen_data

    def getRAMSize(self):
        return self._ale.getRAMSize()

    def getRAM(self, ram=None):
        if ram is None:
            return self._ale.getRAM().copy()
        ram[:] = self._ale.getRAM()
        return ram

    def saveScreenPNG(self, filename):
        return self._ale.saveScreenPNG(_key(filename))

    def saveState(self):
        raise NotImplementedError("saveState: removed from ALE; not used here")

    def loadState(self):
        raise NotImplementedError("loadState: removed from ALE; not used here")

    def cloneState(self):
        return self._native(self._ale.cloneState())

    def restoreState(self, state):
        self._ale.restoreState(NATIVE_STATES[state])

    def cloneSystemState(self):
        return self._native(self._ale.cloneState(include_rng=True))

    def restoreSystemState(self, state):
        self._ale.restoreState(NATIVE_STATES[state])

    def deleteState(self, state):
        del NATIVE_STATES[state]

    def encodeStateLen(self, state):
        return len(NATIVE_STATES[state].serialize())

    def encodeState(self, state, buf=None):
        data = NATIVE_STATES[state].serialize()
        if buf is None:
            buf = np.zeros(len(data), dtype=np.uint8)
        buf[:] = np.frombuffer(data, np.uint8)
        return buf

    def decodeState(self, serialized):
        import ale_py
        if not serialized.flags.writeable:                 # as numpy's as_ctypes
            raise TypeError("readonly arrays unsupported")
        return self._native(ale_py.ALEState(bytes(serialized)))

    def __del__(self):
        _EMULATORS.pop(getattr(self, "obj", None), None)

    @staticmethod
    def setLoggerMode(mode):
        pass

    @staticmethod
    def _native(state):
        handle = next(_HANDLES)
        NATIVE_STATES[handle] = state
        return handle


ALEInterface.__module__ = "atari_py.ale_python_interface"
