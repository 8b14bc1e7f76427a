"""The resume scenario behind ``namedschema demo``: checkpoint a replay buffer, resume it elsewhere.

A replay buffer of Atari-like transitions (uint8 84x84 frames, action, reward,
done) whose schema is made at run time inside a function, as rlpyt makes its
types, is filled with seeded synthetic data and checkpointed twice: with
``pickle`` (protocol 4) and with ``namedschema.save``. Each checkpoint is
loaded in a fresh interpreter that never defined the schema, which checks the
contents bit for bit (by SHA-256 per field), appends more transitions and
samples; the samples must equal those of an uninterrupted twin kept in this
process. For contrast, rlpyt-style classes (a class per type) go through the
same round trip and fail, and the demo shows how.

TinyReplay      a small ring-buffer replay with a seeded sampler (checkpointable state)
synthetic       seeded synthetic transitions
run_demo        the whole scenario; prints the table, returns the exit status
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from typing import IO, TYPE_CHECKING, Any, TextIO

import numpy as np

from ..buffer import buffer_from_example
from ..state.rng import pcg64_words, set_pcg64_words
from .harness import (
    ATARI_BYTES_PER_TRANSITION,
    ATARI_FIELDS,
    ATARI_FRAME,
    atari_example,
    atari_transitions,
    peak_rss,
    run_python,
)

if TYPE_CHECKING:
    import numpy.typing as npt

    from .._core.instance import NamedArrayTuple
    from .._core.schema import DynamicNamedArrayTuple, DynamicNamedTuple

__all__ = ["TinyReplay", "synthetic", "run_demo"]

# The Atari-like transition every benchmark uses (namedschema.apps.harness).
FRAME, FIELDS = ATARI_FRAME, ATARI_FIELDS
BYTES_PER_TRANSITION = ATARI_BYTES_PER_TRANSITION
APPEND_AFTER_RESUME = 257  # more than one batch and not a multiple of it
SAMPLE_BATCHES, BATCH_SIZE = 8, 32


def _schemas() -> tuple[type[DynamicNamedArrayTuple], type[DynamicNamedTuple]]:
    """The demo's schemas, made at run time like rlpyt's (never at module level).

    A child interpreter that imports this module therefore still knows no
    schema until it loads a checkpoint.
    """
    from .._core.schema import NamedArrayTupleSchema, NamedTupleSchema
    transition = NamedArrayTupleSchema("Transition", FIELDS)
    state = NamedTupleSchema("ReplayState", ("samples", "cursor", "filled", "rng_state"))
    return transition, state


def synthetic(transition_cls: type[DynamicNamedArrayTuple], n: int,
              seed: int) -> DynamicNamedArrayTuple:
    """``n`` seeded synthetic transitions as one ``transition_cls`` instance of arrays.

    Args:
        transition_cls: a named array tuple class with the fields in ``FIELDS``.
        n: number of transitions.
        seed: the data are a pure function of ``(n, seed)``.
    """
    return atari_transitions(transition_cls, n, seed)


def _unpack_rng(words: npt.ArrayLike) -> np.random.Generator:
    rng = np.random.Generator(np.random.PCG64())
    set_pcg64_words(rng, np.asarray(words, dtype=np.uint64), "demo replay")
    return rng


class TinyReplay:
    """A ring-buffer replay memory over a named array tuple, with a seeded sampler.

    Args:
        samples: a named array tuple whose fields have the capacity as leading
            dimension; the replay writes into it in place.
        seed: seed of the sampling generator.
    """

    def __init__(self, samples: DynamicNamedArrayTuple, seed: int = 0) -> None:
        self.samples = samples
        self.capacity = len(samples.observation)
        self.cursor = 0
        self.filled = 0
        self.rng = np.random.Generator(np.random.PCG64(seed))

    def append(self, batch: DynamicNamedArrayTuple) -> None:
        """Write the transitions of ``batch`` after the newest, overwriting the oldest."""
        n = len(batch.observation)
        start = 0
        while start < n:
            room = min(n - start, self.capacity - self.cursor)
            self.samples[self.cursor:self.cursor + room] = batch[start:start + room]
            self.cursor = (self.cursor + room) % self.capacity
            start += room
        self.filled = min(self.capacity, self.filled + n)

    def sample(self, batch_size: int) -> DynamicNamedArrayTuple:
        """A batch of ``batch_size`` stored transitions drawn uniformly with replacement."""
        return self.samples[self.rng.integers(0, self.filled, size=batch_size)]

    def state(self, state_cls: type[DynamicNamedTuple]) -> DynamicNamedTuple:
        """The complete state as a ``state_cls`` (schema) instance of arrays."""
        return state_cls(self.samples, np.array(self.cursor, dtype=np.int64),
                         np.array(self.filled, dtype=np.int64), pcg64_words(self.rng))

    @classmethod
    def from_state(cls, state: DynamicNamedTuple) -> TinyReplay:
        """Rebuild a replay from :meth:`state`'s output (it keeps using those arrays)."""
        replay = cls.__new__(cls)
        replay.samples = state.samples
        replay.capacity = len(state.samples.observation)
        replay.cursor, replay.filled = int(state.cursor), int(state.filled)
        replay.rng = _unpack_rng(state.rng_state)
        return replay


def _digest_fields(nat: NamedArrayTuple) -> dict[str, Any]:
    """Field name -> SHA-256 of dtype, shape and bytes (bit-exact comparison by hash)."""
    out = {}
    for name, value in zip(nat._fields, nat, strict=True):
        a = np.ascontiguousarray(value)
        h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.reshape(-1).view(np.uint8).data)
        out[name] = h.hexdigest()
    return out


def _resume_and_sample(replay: TinyReplay, seed: int) -> str:
    """Append the post-resume transitions, sample, and hash the samples in order."""
    replay.append(synthetic(type(replay.samples), APPEND_AFTER_RESUME, seed + 1))
    h = hashlib.sha256()
    for _ in range(SAMPLE_BATCHES):
        for digest in _digest_fields(replay.sample(BATCH_SIZE)).values():
            h.update(digest.encode())
    h.update(f"{replay.cursor},{replay.filled}".encode())
    return h.hexdigest()


# ----------------------------------------------------------------- fresh interpreter side


def _child_load(method: str, path: str, seed: int) -> dict[str, Any]:
    """Run in the fresh interpreter: load, describe, hash, resume; return a report."""
    from .._core import pickling as _pickle
    from ..checkpoint import load  # imported before the clock starts: "load" is the load
    report: dict[str, Any] = {"schemas_before_load": _pickle.registered_schema_count()}
    start = time.perf_counter()
    if method == "pickle":
        with open(path, "rb") as f:
            state = pickle.load(f)
    else:
        state = load(path)
    report["load_s"] = time.perf_counter() - start
    report["peak_rss"] = peak_rss()
    report["types"] = [type(state).__name__, type(state.samples).__name__,
                       list(type(state.samples)._fields)]
    report["digests"] = _digest_fields(state.samples)
    report["resume"] = _resume_and_sample(TinyReplay.from_state(state), seed)
    return report


_CHILD_CODE = """
import json, sys
from namedschema.apps.demo import _child_load
report = _child_load(sys.argv[1], sys.argv[2], int(sys.argv[3]))
sys.stdout.write(json.dumps(report))
"""


def _run_child(args: list[Any], timeout: float = 3600) -> subprocess.CompletedProcess[Any]:
    return run_python(["-c", *args], timeout=timeout)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "(no output)"


# ---------------------------------------------------------------- rlpyt-style contrast


def _classic_namedarraytuple(typename: str, fields: str | Iterable[str], module: str) -> type:
    """A class-per-type named array tuple as rlpyt makes them (a namedtuple subclass).

    Used when ``RLPYT_SRC`` is not set; with it, rlpyt's own function is used.
    """
    import collections
    base: Any = collections.namedtuple(typename, fields, module=module)  # type: ignore[misc]  # a run-time name

    def __getitem__(self: Any, loc: object) -> Any:    # self: an instance of the class below
        return type(self)(*(None if v is None else v[loc] for v in self))

    return type(typename, (base,), {"__slots__": (), "__getitem__": __getitem__,
                                    "__module__": module})


def _rlpyt_factory_source() -> tuple[str, str]:
    """(source of a ``namedarraytuple`` factory for a script, where it comes from)."""
    root = os.environ.get("RLPYT_SRC")
    path = root and os.path.join(root, "rlpyt", "utils", "collections.py")
    if path and os.path.isfile(path):
        return (f"import importlib.util\n"
                f"spec = importlib.util.spec_from_file_location('rlpyt_collections', {path!r})\n"
                f"rl = importlib.util.module_from_spec(spec); spec.loader.exec_module(rl)\n"
                f"namedarraytuple = rl.namedarraytuple\n", "rlpyt's namedarraytuple")
    return ("from namedschema.apps.demo import _classic_namedarraytuple as _c\n"
            "namedarraytuple = lambda name, fields: _c(name, fields, '__main__')\n",
            "a class-per-type namedarraytuple like rlpyt's; set RLPYT_SRC to use rlpyt's own")


def _rlpyt_style_rows(workdir: str) -> tuple[list[tuple[str, str, str]], str]:
    """What class-per-type types do with the same checkpoint: (rows of each failure, as
    text; where the factory came from)."""
    factory, origin = _rlpyt_factory_source()
    rows = []
    # 1. The type is made inside a function (as rlpyt's buffer_from_example does):
    #    pickle cannot even write it.
    script = factory + (
        "import pickle, numpy as np\n"
        "def make_buffer():\n"
        "    T = namedarraytuple('Transition', ['observation', 'action', 'reward', 'done'])\n"
        "    return T(np.zeros((4, 84, 84), np.uint8), np.zeros(4, np.int32),\n"
        "             np.zeros(4, np.float32), np.zeros(4, bool))\n"
        "try:\n"
        "    pickle.dumps(make_buffer(), protocol=4)\n"
        "    print('OK pickled')\n"
        "except Exception as exc:\n"
        "    print(f'{type(exc).__name__}: {exc}')\n")
    proc = _run_child([script])
    rows.append(("type made in a function", "pickle.dumps", _last_line(proc.stdout + proc.stderr)))
    # 2. The type is made at the top of a training script (__main__): pickle
    #    writes it by reference, and a fresh interpreter cannot find it.
    path = os.path.join(workdir, "rlpyt_style.pkl")
    script = factory + (
        "import pickle, sys, numpy as np\n"
        "Transition = namedarraytuple('Transition', ['observation', 'action', 'reward', 'done'])\n"
        "buf = Transition(np.zeros((4, 84, 84), np.uint8), np.zeros(4, np.int32),\n"
        "                 np.zeros(4, np.float32), np.zeros(4, bool))\n"
        "with open(sys.argv[1], 'wb') as f:\n"
        "    pickle.dump(buf, f, protocol=4)\n")
    rows.append(("type made in __main__",) + _dump_then_load(script, path))
    # 3. rlpyt's replay modules: a module global that stays None until a
    #    buffer's constructor assigns it. Pickling works; a fresh interpreter
    #    imports the module, finds None and fails with the classic NEWOBJ error.
    module_name = "rlpyt_style_replay"
    with open(os.path.join(workdir, module_name + ".py"), "w") as f:
        f.write(factory.replace("'__main__'", repr(module_name)) + (
            "import numpy as np\n"
            "SamplesToBuffer = None\n"
            "class ReplayBuffer:\n"
            "    def __init__(self, size):\n"
            "        global SamplesToBuffer\n"
            "        SamplesToBuffer = namedarraytuple('SamplesToBuffer', ['observation', 'reward'])\n"
            "        self.samples = SamplesToBuffer(np.zeros((size, 84, 84), np.uint8),\n"
            "                                       np.zeros(size, np.float32))\n"))
    path = os.path.join(workdir, "rlpyt_style_replay.pkl")
    script = (f"import pickle, sys; sys.path.insert(0, {workdir!r})\n"
              f"import {module_name}\n"
              f"buf = {module_name}.ReplayBuffer(4)\n"
              "with open(sys.argv[1], 'wb') as f:\n"
              "    pickle.dump(buf, f, protocol=4)\n")
    rows.append(("global set in a constructor",)
                + _dump_then_load(script, path, sys_path=workdir))
    return rows, origin


def _dump_then_load(dump_script: str, path: str, sys_path: str | None = None) -> tuple[Any, ...]:
    """Run ``dump_script`` (it pickles to ``path``), then load ``path`` in a fresh
    interpreter; return (step, what happened) for the step that failed or the load."""
    proc = _run_child([dump_script, path])
    if proc.returncode != 0:
        return "pickle.dump", _last_line(proc.stderr)
    prelude = f"import sys; sys.path.insert(0, {sys_path!r})\n" if sys_path else ""
    load = (prelude + "import pickle, sys\n"
            "try:\n"
            "    pickle.load(open(sys.argv[1], 'rb'))\n"
            "    print('OK loaded')\n"
            "except Exception as exc:\n"
            "    print(f'{type(exc).__name__}: {exc}')\n")
    proc = _run_child([load, path])
    return "load in fresh interpreter", _last_line(proc.stdout + proc.stderr)


# ----------------------------------------------------------------------------- output


class _Progress:
    """A one-line progress bar on stderr (plain start/end lines when not a terminal).

    ``bar=False`` shows only the final line: for a step that draws its own bar
    (``namedschema.save(progress=True)``), so that one bar is on screen at a time.
    """

    def __init__(self, label: str, total: int, enabled: bool, bar: bool = True) -> None:
        self.label, self.total, self.done = label, max(int(total), 1), 0
        self.enabled = enabled
        self.tty = enabled and sys.stderr.isatty() and bar
        self.start = time.perf_counter()
        self._shown = -1
        if enabled and not self.tty:
            print(f"  {label} ...", file=sys.stderr, flush=True)
        self.update(0)

    def update(self, n: int) -> None:
        self.done += n
        if not self.tty:
            return
        pct = min(100, 100 * self.done // self.total)
        if pct != self._shown:
            self._shown = pct
            bar = "#" * (pct * 30 // 100)
            print(f"\r  {self.label:<34} [{bar:<30}] {pct:3d}%", end="", file=sys.stderr,
                  flush=True)

    def close(self) -> None:
        if self.enabled:
            elapsed = time.perf_counter() - self.start
            if self.tty:
                print("\r", end="", file=sys.stderr)
            pad = " " * 30 if self.tty else ""  # overwrite the rest of the bar
            print(f"  {self.label:<34} done in {elapsed:.2f} s{pad}", file=sys.stderr,
                  flush=True)


class _CountingWriter:
    """A binary file wrapper that reports bytes written to a progress bar."""

    def __init__(self, f: IO[bytes], progress: _Progress) -> None:
        self._f, self._progress = f, progress

    def write(self, data: bytes | bytearray | memoryview) -> int:
        n = self._f.write(data)
        self._progress.update(memoryview(data).nbytes)
        return n


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _table(header: Sequence[object], rows: Sequence[Sequence[object]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def fmt(row: Sequence[object]) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=False)).rstrip()
    return "\n".join([fmt(header), fmt(["-" * w for w in widths]), *map(fmt, rows)])


# ------------------------------------------------------------------------------ driver


def run_demo(size: int = 64 * 10**6, workdir: str | None = None, seed: int = 0,
             progress: bool = True, keep: bool = False, out: TextIO | None = None) -> int:
    """Run the resume scenario and print its table.

    Args:
        size: approximate bytes of the replay buffer.
        workdir: where to write the checkpoints (default: a temporary directory).
        seed: seed of the data and of sampling.
        progress: show progress lines on stderr.
        keep: keep the checkpoint files in ``workdir``.
        out: text stream for the report (default stdout).

    Returns:
        0 if every check passed, 1 otherwise.
    """
    out = out or sys.stdout
    capacity = max(BATCH_SIZE * 2, size // BYTES_PER_TRANSITION)
    own_dir = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="namedschema-demo-")
    os.makedirs(workdir, exist_ok=True)
    try:
        return _scenario(capacity, workdir, seed, progress, out)
    finally:
        if own_dir or not keep:
            for name in ("replay.pkl", "replay.nsb", "rlpyt_style.pkl",
                         "rlpyt_style_replay.pkl", "rlpyt_style_replay.py"):
                path = os.path.join(workdir, name)
                if os.path.exists(path):
                    os.unlink(path)
            if own_dir:
                shutil.rmtree(workdir, ignore_errors=True)


def _fill(transition_cls: type[DynamicNamedArrayTuple], capacity: int, seed: int,
          progress: bool) -> TinyReplay:
    """Allocate the buffer (``buffer_from_example``) and fill it in chunks."""
    example = atari_example(transition_cls)
    samples = buffer_from_example(example, (capacity,))
    replay = TinyReplay(samples, seed=seed)
    bar = _Progress(f"fill {capacity:,} transitions", capacity, progress)
    chunk = 4096
    for i, start in enumerate(range(0, capacity, chunk)):
        n = min(chunk, capacity - start)
        replay.append(synthetic(transition_cls, n, seed * 1_000_003 + i))
        bar.update(n)
    bar.close()
    for _ in range(3):  # a run that has been sampling, so the generator has moved
        replay.sample(BATCH_SIZE)
    return replay


def _scenario(capacity: int, workdir: str, seed: int, progress: bool, out: TextIO) -> int:
    transition_cls, state_cls = _schemas()
    print(f"namedschema demo: a replay buffer of {capacity:,} Atari-like transitions "
          f"({_human(capacity * BYTES_PER_TRANSITION)}), checkpointed and resumed in "
          "fresh interpreters", file=out, flush=True)
    replay = _fill(transition_cls, capacity, seed, progress)
    state = replay.state(state_cls)
    digests = _digest_fields(state.samples)

    from ..checkpoint import save as ns_save

    save_error = None
    methods: list[tuple[str, str, str, float, int]] = []
    # namedschema.save runs first: peak RSS only rises, so the later pickle's
    # extra copy cannot hide namedschema's (it would, the other way round).
    path = os.path.join(workdir, "replay.nsb")
    own_bar = progress and sys.stderr.isatty()   # namedschema.save draws the bar itself
    bar = _Progress("save with namedschema.save", 1, progress, bar=not own_bar)
    before = peak_rss()
    start = time.perf_counter()
    try:
        ns_save(state, path, progress=own_bar)
    except Exception as exc:  # reported as a failed check below
        save_error = f"{type(exc).__name__}: {exc}"
    elapsed = time.perf_counter() - start
    bar.update(1)
    bar.close()
    if save_error is None:
        methods.append(("namedschema.save", "namedschema", path, elapsed,
                        peak_rss() - before))
    path = os.path.join(workdir, "replay.pkl")
    total = sum(a.nbytes for a in state.samples)
    bar = _Progress("save with pickle (protocol 4)", total, progress)
    before = peak_rss()
    start = time.perf_counter()
    with open(path, "wb") as f:
        pickle.dump(state, _CountingWriter(f, bar), protocol=4)
    elapsed = time.perf_counter() - start
    bar.close()
    methods.append(("pickle protocol 4", "pickle", path, elapsed, peak_rss() - before))

    reports: dict[str, dict[str, Any]] = {}
    for label, method, path, _, _ in methods:
        bar = _Progress(f"load {label} in a fresh interpreter", 1, progress)
        proc = _run_child([_CHILD_CODE, method, path, str(seed)])
        bar.update(1)
        bar.close()
        if proc.returncode != 0:
            reports[label] = {"error": _last_line(proc.stderr)}
        else:
            reports[label] = json.loads(proc.stdout)

    bar = _Progress("resume the uninterrupted twin", 1, progress)
    twin_resume = _resume_and_sample(replay, seed)
    bar.close()
    bar = _Progress("rlpyt-style classes, same round trip", 1, progress)
    rlpyt_rows, origin = _rlpyt_style_rows(workdir)
    bar.close()

    checks, rows = [], []
    for label, _method, path, save_s, save_mem in methods:
        r = reports[label]
        if "error" in r:
            rows.append([label, _human(os.path.getsize(path)), f"{save_s:.2f} s",
                         _human(save_mem), "FAILED", "-", "-", "-"])
            checks.append((f"{label}: load in a fresh interpreter", False, r["error"]))
            continue
        fresh = r["schemas_before_load"] == 0
        typed = r["types"] == ["ReplayState", "Transition", list(FIELDS)]
        exact = r["digests"] == digests
        resumed = r["resume"] == twin_resume
        checks += [(f"{label}: the fresh interpreter knew no schema before loading", fresh, ""),
                   (f"{label}: loaded types are ReplayState / Transition", typed,
                    "" if typed else str(r["types"])),
                   (f"{label}: contents bit-exact (SHA-256 of every field)", exact, ""),
                   (f"{label}: sampling after resume matches the uninterrupted twin",
                    resumed, "")]
        rows.append([label, _human(os.path.getsize(path)), f"{save_s:.2f} s",
                     _human(save_mem), f"{r['load_s']:.2f} s", _human(r["peak_rss"]),
                     "yes" if exact else "NO", "yes" if resumed else "NO"])
    if save_error is not None:
        checks.append(("namedschema.save wrote the checkpoint", False, save_error))

    print("", file=out)
    print(_table(["checkpoint", "file size", "save", "extra peak RSS on save",
                  "load (fresh interpreter)", "child peak RSS", "bit-exact", "resume = twin"],
                 rows), file=out)
    print("(namedschema.save writes a temporary file, syncs it to disk and renames it into "
          "place; pickle.dump writes in place without syncing)", file=out)
    print("(load: the load call alone, in a new interpreter that has imported namedschema "
          "but not the schema; start-up and imports are not counted; the whole file is read "
          "into new arrays from the page cache; one run each, so noisy on a busy machine)",
          file=out)
    ns_path = os.path.join(workdir, "replay.nsb")
    if any(m[1] == "namedschema" for m in methods):
        from ..checkpoint import inspect as inspect_file
        from ..checkpoint._read import describe
        print("\n$ namedschema inspect replay.nsb   # reads only the header", file=out)
        try:
            print(describe(inspect_file(ns_path)).replace(ns_path, "replay.nsb"), file=out)
        except Exception as exc:  # a failed check, not a crash
            checks.append(("namedschema inspect reads the checkpoint", False,
                           f"{type(exc).__name__}: {exc}"))
    print("", file=out)
    print(f"What rlpyt-style classes do under the same round trip ({origin}):", file=out)
    print(_table(["how the type was made", "step", "what happened"],
                 [[a, b, c if len(c) <= 120 else c[:117] + "..."] for a, b, c in rlpyt_rows]),
          file=out)
    print("", file=out)
    failed = [c for c in checks if not c[1]]
    for name, ok, detail in checks:
        print(f"  [{'ok' if ok else 'FAILED'}] {name}" + (f": {detail}" if detail else ""),
              file=out)
    print(f"\n{'all checks passed' if not failed else f'{len(failed)} check(s) FAILED'}",
          file=out, flush=True)
    return 0 if not failed else 1
