"""Audit records for ``namedschema check-resume``: what each checkpoint held, as digests.

When ``NAMEDSCHEMA_AUDIT`` names a file (the checker sets it; nobody else
needs to), checkpoint writers append one JSON line per event to it: a save
began, a save is on disk, a checkpoint's content (the step and a blake2b
digest of every tracked object by its registered name, down to each
tensor, array, generator state and scalar by its path inside it), a
restore, and the end of the run. The checker compares the records of a
killed-and-resumed run with those of the uninterrupted run.

Cost. An array larger than :data:`CHUNK` is digested as the blake2b of its
dtype, shape and the blake2b digests of its CHUNK-byte pieces (a difference
in any byte changes its piece's digest, hence the array's). A checkpoint's
record is made in a background thread from the file (mapped, so the bytes
come from the page cache the save just wrote), and the digests of the pieces
are kept, by file offset, from one save of the file to the next: an
incremental save reports the byte ranges it rewrote (``checkpoint._tracking``),
and only the pieces those touch are digested again. Anything else that
changed the file (a full save's new file, another process's save, a journal
replayed at recovery) breaks the chain of checkpoint ids the rewrites carry,
and the whole file is digested again.

Without the variable :func:`recorder` returns None and writers skip every
hook: no file, no thread, no hashing module is imported.

Some kept values are wall-clock readings that never repeat (gymnasium's
``RecordEpisodeStatistics.episode_start_time`` and ``time_queue``, SB3's
``Monitor.t_start``, the ``t`` of its episode infos): they are left out of
the digests (:data:`WALL_CLOCK`, :data:`WALL_CLOCK_PARTS`),
as are the parts the user names in ``NAMEDSCHEMA_AUDIT_IGNORE`` (shell-style
patterns, one a line, matched against ``OBJECT.PATH``: check-resume's
``--ignore``). Only what is hashed changes: the checkpoint keeps all of it.

Writers: ``RunCheckpoint`` (:func:`follow_run_checkpoint`),
``namedschema.rlpyt.resumable``; any other (an SB3 callback) calls
:meth:`Recorder.record_checkpoint` with its captured state tree and
:meth:`Recorder.record_end` at the end.

WALL_CLOCK             kept attributes that hold the time, by env wrapper class: not digested
WALL_CLOCK_PARTS       patterns of other parts that hold the time (SB3's episode infos)
recorder               the process's Recorder, or None when no audit is asked for
Recorder               appends events; digests in a background thread where the file is read back
follow_run_checkpoint  the Recorder for one RunCheckpoint (with its end-of-run record at exit)
digest_objects         ``{name: {"digest", "leaves": {path: [kind, digest]}}}`` of a state tree
FileDigests            the piece digests of one checkpoint file's arrays, kept between its saves
"""

from __future__ import annotations

import json
import os
import queue
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import _process
from .._core.tree import torch_if_loaded

if TYPE_CHECKING:
    import hashlib

__all__ = ["ENV_AUDIT", "ENV_NOTIFY", "ENV_IGNORE", "WALL_CLOCK", "WALL_CLOCK_PARTS", "recorder", "Recorder",
           "follow_run_checkpoint", "digest_objects", "FileDigests", "CHUNK"]

ENV_AUDIT = "NAMEDSCHEMA_AUDIT"      # the audit file to append to
ENV_NOTIFY = "NAMEDSCHEMA_AUDIT_NOTIFY"  # a pipe's write end: one byte after each event
ENV_IGNORE = "NAMEDSCHEMA_AUDIT_IGNORE"  # patterns of parts left out of digests, one a line
PROGRESS_SUFFIX = ".progress"        # 8 bytes beside the audit file: the last step seen
MAX_LEAVES = 4096                    # leaves listed per object (more: the object digest only)
MAX_DEPTH = 64                       # nesting walked; deeper values are digested by repr
DIGEST_SIZE = 16
CHUNK = 64 * 1024                    # arrays larger than this: digested piece by piece
# The checkpoint format's wire name of a dict with keys that are not all str (state.plain):
# an optimizer's ``state`` keyed by parameter number is walked as ``state.0.exp_avg``.
_KEYED = "namedschema.keyed"
_SCALAR_TYPES = (bool, int, float, str)
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")   # a repr's memory address differs between runs
# Attributes of env wrappers that hold wall-clock readings (a captured layer is
# ``{"class": name, "attributes": {...}}``): never equal in two runs, left out of digests.
WALL_CLOCK: dict[str, frozenset[str]] = {
    "RecordEpisodeStatistics": frozenset({"episode_start_time", "time_queue"}),  # gymnasium
    "Monitor": frozenset({"t_start", "episode_times"}),                           # SB3
    "VecMonitor": frozenset({"t_start"}),                                         # SB3
}
# Parts (``OBJECT.PATH`` patterns) that hold wall-clock readings: the episode infos of
# SB3's Monitor and gymnasium's RecordEpisodeStatistics (``{"r": return, "l": length,
# "t": seconds}``) in SB3's ``ep_info_buffer`` and in a vector env's last infos (an env
# attribute's dict is captured as ``["dict", {...}]``, hence the ``1``).
WALL_CLOCK_PARTS = ("*.ep_info_buffer.items.*.t", "*.episode.t", "*.episode.1.t")

_UNSET: Any = object()
_RECORDER: Any = _UNSET
_LOCK = threading.Lock()


def recorder() -> Recorder | None:
    """The Recorder of this process if ``NAMEDSCHEMA_AUDIT`` is set, else None (cheap)."""
    global _RECORDER
    if _RECORDER is _UNSET or (_RECORDER is not None and _RECORDER.pid != os.getpid()):
        with _LOCK:
            if _RECORDER is _UNSET or (_RECORDER is not None and _RECORDER.pid != os.getpid()):
                path = os.environ.get(ENV_AUDIT)
                # A forked worker inherits the parent's recorder: it records nothing.
                forked = _RECORDER is not _UNSET and _RECORDER is not None
                _RECORDER = Recorder(path) if path and not forked else None
    current: Recorder | None = _RECORDER    # set above: no longer _UNSET
    return current


class Recorder:
    """Appends audit events (JSON lines) to one file; one per process."""

    def __init__(self, path: str) -> None:
        self.path, self.pid = path, os.getpid()
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        notify = os.environ.get(ENV_NOTIFY, "")
        self._notify = int(notify) if notify.isdigit() else None
        self._write_lock = threading.Lock()
        # One worker thread digests the records in order (a thread per save would hold
        # the save while it starts: milliseconds on a busy machine).
        self._worker: threading.Thread | None = None
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._last: threading.Event | None = None     # set when the last job has ended
        self._files: dict[str, FileDigests] = {}   # path -> its piece digests
        self._ends: list[Callable[[], None]] = []
        self.ignore = tuple(p for p in os.environ.get(ENV_IGNORE, "").splitlines() if p)
        self.last_step: int | None = None
        self._progress = self._open_progress(path + PROGRESS_SUFFIX)
        self.event("start")
        _process.at_exit("training.audit", self._at_exit)

    @staticmethod
    def _open_progress(path: str) -> Any:
        import mmap
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                os.ftruncate(fd, 8)
                progress = mmap.mmap(fd, 8)
                progress[:8] = (-1).to_bytes(8, "little", signed=True)   # no step yet
                return progress
            finally:
                os.close(fd)
        except OSError:
            return None

    # -- events ---------------------------------------------------------------------

    def event(self, kind: str, step: int | None = None, **fields: Any) -> None:
        """Append one event line (and wake the checker); never raises into the run."""
        if os.getpid() != self.pid:
            return
        record = {"event": kind, "pid": self.pid, "t": time.monotonic(),
                  "step": None if step is None else int(step), **fields}
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        with self._write_lock:
            try:
                os.write(self._fd, line)
            except OSError:
                return
            if self._notify is not None:
                try:
                    os.write(self._notify, b".")
                except OSError:  # the checker went away, or its pipe is full
                    pass

    def progress(self, step: int) -> None:
        """The step the run is at (read by the checker after a kill; a memory store)."""
        self.last_step = step
        if self._progress is not None:
            self._progress[:8] = int(step).to_bytes(8, "little", signed=True)

    def save_begin(self, step: int) -> None:
        """A checkpoint of ``step`` starts to be written (the checker may kill now)."""
        self.flush()   # the previous checkpoint's file is read back before it changes
        self.event("save-begin", step)

    def record_restore(self, step: int) -> None:
        """The run resumed from its checkpoint of ``step``."""
        self.event("restore", step)

    def record_checkpoint(self, step: int, named_state: Mapping[str, Any]) -> None:
        """The content of the checkpoint of ``step``: ``named_state`` digested now.

        ``named_state`` maps each tracked object's registered name to its
        captured state (dicts, lists, numpy arrays, torch tensors, scalars);
        it must not change while this runs.
        """
        self.event("checkpoint", step, objects=digest_objects(named_state, self.ignore))

    def record_file(self, step: int, path: str, objects: Callable[[Any], Mapping[str, Any]],
                    saved_step: Callable[[Any], int], allow_pickle: bool = False) -> None:
        """The checkpoint of ``step`` being written to ``path``: in a background thread,
        wait for the write, read the file back and record its content.

        ``objects`` picks the named state out of the loaded file, ``saved_step``
        its step (a failed write leaves the previous checkpoint: not recorded).
        The next :meth:`save_begin` waits for the thread, so the file is read
        before the next save changes it. Only the pieces of arrays that the
        saves since the last record rewrote are digested again (:class:`FileDigests`).
        """
        files = self._files.get(path)
        if files is None:
            files = self._files[path] = FileDigests(path)

        def job() -> None:
            try:
                from ..checkpoint import load
                from ..checkpoint._background import written
                from ..checkpoint._read import mappable  # compressed files: read
                written(path)
                self.event("save-end", step)
                rewrites = files.rewrites()
                data = load(path, mmap_mode=mappable(path), allow_pickle=allow_pickle)
                if saved_step(data) != step:
                    files.forget()
                    self.event("save-failed", step)
                    return
                hasher = files.hasher(rewrites)
                named = _digest_objects(objects(data), self.ignore, hasher)
                self.event("checkpoint", step, objects=named, digested=hasher.digested)
            except Exception as exc:  # the audit never breaks the run
                files.forget()
                self.event("audit-error", step, error=f"{type(exc).__name__}: {exc}")

        self._submit(job)

    def _submit(self, job: Callable[[], None]) -> None:
        done = threading.Event()
        if self._worker is None or not self._worker.is_alive():
            # A daemon: a thread left running never holds the interpreter's exit (atexit
            # flushes).
            self._jobs = queue.SimpleQueue()
            self._worker = threading.Thread(target=_work, args=(self._jobs,),
                                            name="namedschema-audit", daemon=True)
            self._worker.start()
        self._last = done
        self._jobs.put((job, done))

    def record_end(self, step: int | None, named_state: Mapping[str, Any] | None = None) -> None:
        """The run ended normally at ``step``: its final state, digested now.

        ``named_state`` None: the checkpoint recorded at ``step`` is the final state.
        """
        self.flush()
        objects = None if named_state is None else digest_objects(named_state, self.ignore)
        self.event("end", step, objects=objects)

    def end_at_exit(self, end: Callable[[], None]) -> None:
        """Call ``end`` (which calls :meth:`record_end`) when the interpreter exits."""
        self._ends.append(end)

    def flush(self) -> None:
        """Wait for the background records in flight."""
        last = self._last
        if last is not None and self._worker is not threading.current_thread():
            last.wait()

    def _at_exit(self) -> None:
        if os.getpid() != self.pid:
            return
        self.flush()
        for end in self._ends:
            try:
                end()
            except Exception as exc:
                self.event("audit-error", self.last_step, error=f"{type(exc).__name__}: {exc}")


def _work(jobs: queue.SimpleQueue[Any]) -> None:
    """The audit's worker thread: run each job, then say it ended."""
    while True:
        job, done = jobs.get()
        try:
            job()
        finally:
            done.set()
            del job, done


# --------------------------------------------------------------------------
# RunCheckpoint
# --------------------------------------------------------------------------

def _run_checkpoint_objects(data: Mapping[str, Any]) -> dict[str, Any]:
    """The named objects of a RunCheckpoint's content (a file or ``ckpt.state(step)``)."""
    named = {name: part["state"] for name, part in data["components"].items()}
    if data.get("rng") is not None:
        named["global_rngs"] = data["rng"]
    if data.get("loop"):
        named["loop"] = data["loop"]
    return named


def follow_run_checkpoint(ckpt: Any) -> Recorder | None:
    """The Recorder for ``ckpt`` (None without an audit), with an end record at exit.

    The end record is the state of every tracked object when the interpreter
    exits normally (a SIGKILL leaves none), at the last step ``maybe_save``
    or ``save`` saw: no call is needed at the end of the user's loop.
    """
    rec = recorder()
    if rec is None:
        return None

    def end() -> None:
        step = rec.last_step if rec.last_step is not None else ckpt.step
        state = ckpt.state(-1 if step is None else step)
        state["loop"] = None   # the loop's variables are known only at a save
        rec.record_end(step, _run_checkpoint_objects(state))

    rec.end_at_exit(end)
    return rec


def record_run_checkpoint_save(rec: Recorder, step: int, path: str) -> None:
    """Record the RunCheckpoint save of ``step`` to ``path`` once it is written."""
    rec.record_file(step, path, _run_checkpoint_objects, lambda data: int(data["step"]),
                    allow_pickle=True)


# --------------------------------------------------------------------------
# Digests
# --------------------------------------------------------------------------

def digest_objects(named_state: Mapping[str, Any], ignore: Sequence[str] = ()
                   ) -> dict[str, dict[str, Any]]:
    """Each object's digest and its leaves' (``{path: [kind, digest]}``; None past
    MAX_LEAVES), in the order given. Paths join keys and indices with ``.``.

    Left out: the :data:`WALL_CLOCK` attributes of env wrappers, the
    :data:`WALL_CLOCK_PARTS`, and every part whose ``OBJECT.PATH`` (or the object's
    name alone) matches a shell-style pattern of ``ignore``
    (``envs.*.episode_start_time``, ``logger``); a part left out takes everything
    under it along.
    """
    return _digest_objects(named_state, ignore, _Hasher())


def _digest_objects(named_state: Mapping[str, Any], ignore: Sequence[str],
                    hasher: _Hasher) -> dict[str, dict[str, Any]]:
    from fnmatch import translate
    matches = re.compile("|".join(translate(p) for p in (*WALL_CLOCK_PARTS, *ignore))).match
    out: dict[str, dict[str, Any]] = {}
    for name, state in named_state.items():
        name = str(name)
        if matches(name):
            continue
        prefix = name + "."

        def skip(path: str, prefix: str = prefix) -> bool:
            return matches(prefix + path) is not None
        leaves: dict[str, list[str]] = {}
        _walk(state, "", leaves, 0, hasher, skip)
        whole = hasher.new()
        for path, (kind, digest) in leaves.items():
            whole.update(f"{path}\0{kind}\0{digest}\n".encode())
        out[name] = {"digest": whole.hexdigest(),
                     "leaves": leaves if len(leaves) <= MAX_LEAVES else None}
    return out


# --------------------------------------------------------------------------
# Digests of arrays, piece by piece, kept between saves of a file
# --------------------------------------------------------------------------

class _Pieces:
    """The piece digests of one array: ``digests`` (DIGEST_SIZE bytes each), ``current``."""

    __slots__ = ("digests", "current")

    def __init__(self, n: int) -> None:
        import numpy as np
        self.digests = bytearray(n * DIGEST_SIZE)
        self.current = np.zeros(n, np.bool_)


class _Hasher:
    """Digests leaves; arrays that lie in ``maps`` (of the file ``files`` follows) reuse
    the piece digests ``files`` kept for their file range."""

    def __init__(self, files: FileDigests | None = None, maps: Sequence[Any] = ()) -> None:
        import hashlib
        self.hashlib, self.files, self.maps = hashlib, files, maps
        self.digested = 0          # bytes of arrays digested piece by piece (not reused)

    def new(self) -> hashlib.blake2b:
        return self.hashlib.blake2b(digest_size=DIGEST_SIZE)

    def hash(self, *parts: Any) -> str:
        h = self.new()
        for part in parts:
            h.update(part)
        return h.hexdigest()

    def array(self, head: bytes, array: Any) -> str:
        """The digest of an array's ``head`` (dtype, shape) and bytes."""
        import numpy as np
        flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)   # no copy if contiguous
        if flat.nbytes <= CHUNK:
            return self.hash(head, flat)
        pieces = self._kept(array) if self.files is not None else None
        if pieces is None:
            pieces = _Pieces(-(-flat.nbytes // CHUNK))
        digests, blake2b, data = pieces.digests, self.hashlib.blake2b, flat.data
        for i in np.flatnonzero(~pieces.current).tolist():
            piece = data[i * CHUNK:(i + 1) * CHUNK]
            digests[i * DIGEST_SIZE:(i + 1) * DIGEST_SIZE] = blake2b(
                piece, digest_size=DIGEST_SIZE).digest()
            self.digested += piece.nbytes
        pieces.current[:] = True
        return self.hash(head, b"\0pieces\0", digests)

    def _kept(self, array: Any) -> _Pieces | None:
        """The kept piece digests of ``array`` if it views the file (by its file range)."""
        assert self.files is not None
        if not array.flags.c_contiguous:
            return None
        lo = array.__array_interface__["data"][0]
        hi = lo + array.nbytes
        for m in self.maps:
            if m.lo <= lo and hi <= m.hi:
                return self.files.pieces(lo + m.delta, array.nbytes)
        return None


class FileDigests:
    """The piece digests of the arrays of one checkpoint file, kept from one audited
    save of it to the next, by file range.

    They hold while every change to the file since is known: the rewrites of
    its incremental saves (``checkpoint._tracking``, watched from now on), whose
    checkpoint ids chain from the state digested last to the state found now.
    Otherwise (a full save's new file, another writer, a journal replayed at
    recovery, an error) they are dropped and the file is digested whole.
    """

    def __init__(self, path: str) -> None:
        from ..checkpoint import _tracking as writelog
        self.path, self._writelog = path, writelog
        writelog.watch(path)
        self.identity: tuple[int, int] | None = None
        self.checkpoint_id: str | None = None
        self.arrays: dict[tuple[int, int], _Pieces] = {}    # (file offset, nbytes) -> pieces

    def forget(self) -> None:
        """Drop everything kept (the next record digests the whole file)."""
        self.arrays.clear()
        self.identity = self.checkpoint_id = None

    def rewrites(self) -> list[Any] | None:
        """The rewrites of the file since the last call (None: not known)."""
        return self._writelog.take(self.path)

    def hasher(self, rewrites: list[Any] | None) -> _Hasher:
        """A hasher for the file as it is now (loaded, mapped), after ``rewrites``."""
        from ..checkpoint import _storage as pages
        from ..checkpoint._header import read_header
        with open(self.path, "rb", buffering=0) as f:
            st = os.fstat(f.fileno())
            checkpoint_id = read_header(f, self.path, st.st_size).description.checkpoint_id
        self.settle((st.st_dev, st.st_ino), checkpoint_id, rewrites)
        try:
            maps = pages.file_mappings(st.st_dev, st.st_ino)
        except OSError:                  # no /proc: nothing is kept
            maps = []
        return _Hasher(self, maps)

    def settle(self, identity: tuple[int, int], checkpoint_id: str,
               rewrites: list[Any] | None) -> None:
        """Bring what is kept to the file ``identity`` at ``checkpoint_id``: pieces that
        ``rewrites`` touched are marked stale, or all is dropped if the chain breaks."""
        known = rewrites is not None and self.identity == identity
        at = self.checkpoint_id
        ranges: list[tuple[int, int]] = []
        for r in rewrites or ():
            if not known or r.identity != identity or r.before != at:
                known = False
                break
            at = r.after
            ranges.extend(r.ranges)
        if not known or at != checkpoint_id:
            self.arrays.clear()
        elif ranges:
            self._stale(ranges)
        self.identity, self.checkpoint_id = identity, checkpoint_id

    def _stale(self, ranges: list[tuple[int, int]]) -> None:
        import numpy as np
        r = np.array(ranges, np.int64).reshape(-1, 2)
        for (lo, nbytes), pieces in self.arrays.items():
            hi = lo + nbytes
            hit = (r[:, 0] < hi) & (r[:, 1] > lo)
            if not hit.any():
                continue
            first = (np.maximum(r[hit, 0], lo) - lo) // CHUNK
            last = (np.minimum(r[hit, 1], hi) - 1 - lo) // CHUNK
            edges = np.zeros(pieces.current.size + 1, np.int64)
            np.add.at(edges, first, 1)
            np.add.at(edges, last + 1, -1)
            pieces.current &= np.cumsum(edges[:-1]) == 0

    def pieces(self, offset: int, nbytes: int) -> _Pieces:
        """The kept piece digests of the array at ``[offset, offset + nbytes)`` of the file."""
        found = self.arrays.get((offset, nbytes))
        if found is None:
            found = self.arrays[(offset, nbytes)] = _Pieces(-(-nbytes // CHUNK))
        return found


# --------------------------------------------------------------------------
# Walking a state tree
# --------------------------------------------------------------------------

def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _walk(value: Any, path: str, leaves: dict[str, Any], depth: int, hasher: _Hasher,
          skip: Callable[[str], bool] | None = None) -> None:
    if skip is not None and path and skip(path):
        return
    if depth > MAX_DEPTH:
        leaves[path] = ["deep", hasher.hash(repr(value).encode())]
        return
    if isinstance(value, Mapping):
        keyed = value.get(_KEYED) if len(value) == 1 else None
        if isinstance(keyed, list) and all(isinstance(p, (list, tuple)) and len(p) == 2
                                           for p in keyed):
            value = {_key_text(k): v for k, v in keyed}
        if "bit_generator" in value:        # a numpy generator's state: one leaf
            leaves[path] = ["generator", hasher.hash(repr(_plain(value)).encode())]
            return
        if not value:
            leaves[path] = ["empty", hasher.hash(type(value).__name__.encode())]
        layer = value.get("class") if "attributes" in value else None
        clock = WALL_CLOCK.get(layer) if isinstance(layer, str) else None
        for key, item in value.items():
            if clock and key == "attributes" and isinstance(item, Mapping):
                item = {k: v for k, v in item.items() if k not in clock}
            _walk(item, _join(path, key), leaves, depth + 1, hasher, skip)
        return
    fields = getattr(type(value), "_fields", None)
    if isinstance(value, (list, tuple)):
        if not value:
            leaves[path] = ["empty", hasher.hash(type(value).__name__.encode())]
        if len(value) > 8 and all(type(v) in _SCALAR_TYPES for v in value):
            # a generator's state as numbers (Python's random): one leaf
            leaves[path] = ["list", hasher.hash(repr(value).encode())]
            return
        names = fields if isinstance(fields, tuple) and len(fields) == len(value) else None
        for i, item in enumerate(value):
            _walk(item, _join(path, names[i] if names else i), leaves, depth + 1, hasher, skip)
        return
    leaf = _leaf(value, hasher)
    state = getattr(value, "__dict__", None)
    if leaf is None and isinstance(state, dict):   # an object stored by pickling
        leaves[_join(path, "__class__")] = ["class", hasher.hash(
            f"{type(value).__module__}.{type(value).__qualname__}".encode())]
        for key, item in state.items():
            _walk(item, _join(path, key), leaves, depth + 1, hasher, skip)
        return
    leaves[path] = leaf or ["object", hasher.hash(type(value).__qualname__.encode(),
                                                  _ADDRESS.sub("0x", repr(value)).encode())]


def _key_text(key: Any) -> str:
    return ",".join(map(str, key)) if isinstance(key, (list, tuple)) else str(key)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


def _leaf(value: Any, hasher: _Hasher) -> list[str] | None:
    """[kind, digest] of a tensor, array, scalar or generator; None for other objects."""
    import numpy as np
    torch = torch_if_loaded()
    if torch is not None and isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            t = t.view(torch.int16)
        head = f"{value.dtype}{tuple(value.shape)}".encode()
        return ["tensor", hasher.array(head, t.numpy())]
    if isinstance(value, np.ndarray):
        head = f"{value.dtype.str}{value.shape}".encode()
        if value.dtype.hasobject:
            return ["array", hasher.hash(head, repr(value.tolist()).encode())]
        return ["array", hasher.array(head, value)]
    if isinstance(value, np.generic):
        return ["scalar", hasher.hash(value.dtype.str.encode(), value.tobytes())]
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return ["scalar", hasher.hash(type(value).__name__.encode(), repr(value).encode())]
    if isinstance(value, np.random.Generator):
        return ["generator", hasher.hash(repr(_plain(value.bit_generator.state)).encode())]
    return None
