"""Compressed checkpoint benchmarks: ``save(..., compression=)`` against raw I/O, same run.

Cases (``--size-mib`` of data each: 1024, or 32 with ``--quick``):

* ``frames``: a buffer of uint8 84x84 Atari frames (real Pong, played with
  random actions through ale-py and resized with OpenCV, when both are
  installed; else synthetic Pong-like frames), its consecutive frames
  repeated to the size (chunks are compressed independently, so repeating
  does not raise the ratio). Rows: the compressed file against the data
  (target <= 1/20); a full compressed save (level 1) against writing the raw
  bytes to a file with ``fsync`` (target <= 1.0); a compressed load against
  ``np.load`` of the same frames from the page cache (target <= 2.0).
* ``random``: uniformly random bytes, which do not compress: the compressed
  file and save against the uncompressed ones (targets <= 1.01 and <= 1.25).
* ``policy``: what ``compression=None``, ``"auto"`` and ``"zstd"`` cost on two
  training states: ``mlp_adam`` (an MLP's float32 weights and Adam's moments
  after a few steps) and ``dqn`` (a frame buffer with its float32 rewards,
  int64 actions and bool dones, a Nature-DQN network and Adam): a full save's
  time, the file's size and the load time, each against ``None``; and
  ``resave_1pct``, a save with ``incremental=True`` (the writers' mode) after 1%
  of the buffer's rows changed as a ring segment (in place, changed chunks only
  when compressed). The measurement behind the writers' default
  (docs/checkpoints.rst, "Compressed checkpoints of a run").

Every save writes a temporary file, fsyncs it and renames it; loads read
files just written (page cache). Contenders take turns, best of ``--rounds``.

CASES   the case names, in running order
main    run the cases, print the table, optionally write JSON
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from .common import Result, finish, missing_extra_note, progress, result, topic_parser

__all__ = ["CASES", "main"]

CASES = ("frames", "random", "policy")
MIB = 2**20
FRAME = (84, 84)
#: Consecutive frames generated (then repeated): 6,000 (1,000 with --quick).
PONG_FRAMES, QUICK_FRAMES = 6000, 1000


def _pong(n: int) -> Any:
    """``n`` consecutive 84x84 grayscale Pong frames, random actions (ALE, frameskip 4)."""
    import cv2
    import numpy as np
    from ale_py import ALEInterface, LoggerMode, roms
    ALEInterface.setLoggerMode(LoggerMode.Error)
    ale = ALEInterface()
    ale.setInt("random_seed", 0)
    ale.setFloat("repeat_action_probability", 0.0)
    rom = roms.get_rom_path("pong")
    if rom is None:
        raise ImportError("ale-py has no Pong ROM")
    ale.loadROM(rom)
    actions = ale.getMinimalActionSet()
    rng = np.random.default_rng(0)
    screen = np.empty((210, 160), np.uint8)
    out = np.empty((n, *FRAME), np.uint8)
    for i in range(n):
        action = actions[rng.integers(len(actions))]
        for _ in range(4):
            ale.act(action)
        if ale.game_over():
            ale.reset_game()
        ale.getScreenGrayscale(screen)
        out[i] = cv2.resize(screen, FRAME[::-1], interpolation=cv2.INTER_AREA)
    return out


def _synthetic(n: int) -> Any:
    """Pong-like frames: a background, a score bar, two paddles and a ball that move."""
    import numpy as np
    rng = np.random.default_rng(0)
    out = np.full((n, *FRAME), 87, np.uint8)
    out[:, :6, :] = 236
    left, bx, by, vx, vy = 40, 40.0, 40.0, 1.7, 1.1
    for i in range(n):
        left = int(np.clip(left + rng.integers(-3, 4), 0, 74))
        bx, by = bx + vx, by + vy
        vx, vy = (-vx if not 2 < bx < 80 else vx), (-vy if not 8 < by < 82 else vy)
        out[i, left:left + 8, 4:6] = 147
        out[i, int(np.clip(by - 4, 0, 74)):int(np.clip(by - 4, 0, 74)) + 8, 78:80] = 92
        out[i, int(by):int(by) + 2, int(bx):int(bx) + 2] = 236
    return out


def _frames(rows: int, quick: bool) -> tuple[Any, str]:
    """``rows`` frames, and what they are."""
    import numpy as np
    n = min(rows, QUICK_FRAMES if quick else PONG_FRAMES)
    try:
        base, what = _pong(n), f"real Pong frames (ALE, {n} consecutive frames repeated)"
    except ImportError:
        base, what = _synthetic(n), f"synthetic Pong-like frames ({n} repeated)"
    return np.concatenate([base] * -(-rows // n))[:rows], what


def _turns(contenders: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    """Best time of each contender, taking turns (each round starts one later)."""
    names = list(contenders)
    best = {name: float("inf") for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            began = time.perf_counter()
            contenders[name]()
            best[name] = min(best[name], time.perf_counter() - began)
    return best


def _raw_write(data: Any, path: str) -> None:
    """The data's bytes to a new file, fsynced: what a disk-bound save costs at best."""
    view = memoryview(data).cast("B")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for at in range(0, view.nbytes, 16 * MIB):
            piece = view[at:at + 16 * MIB]
            while piece.nbytes:
                piece = piece[os.write(fd, piece):]
        os.fsync(fd)
    finally:
        os.close(fd)


def _frames_rows(args: Any, directory: str) -> list[Result]:
    import numpy as np

    from namedschema import checkpoint
    rows = int(args.size_mib * MIB // (FRAME[0] * FRAME[1]))
    obs, what = _frames(rows, args.quick)
    args.notes.append(f"frames: {obs.nbytes / MIB:.0f} MiB of {what}")
    raw, packed, npy = (os.path.join(directory, n) for n in ("raw.bin", "z.nsb", "f.npy"))
    np.save(npy, obs)
    saves = _turns({"raw_write_fsync": lambda: _raw_write(obs, raw),
                    "zstd_save": lambda: checkpoint.save({"obs": obs}, packed,
                                                         compression="zstd")}, args.rounds)
    loads = _turns({"np_load": lambda: np.load(npy),
                    "zstd_load": lambda: checkpoint.load(packed)}, args.rounds)
    if not np.array_equal(checkpoint.load(packed, verify=True)["obs"], obs):
        raise RuntimeError("frames: the compressed round trip differs")
    size = os.path.getsize(packed)
    return [
        result("frames_size", "data", "bytes", obs.nbytes / MIB, "MiB"),
        result("frames_size", "zstd_file", "bytes", size / MIB, "MiB", reference="data",
               reference_value=obs.nbytes / MIB, target="<= 0.05"),
        result("frames_save", "raw_write_fsync", "time", saves["raw_write_fsync"], "s"),
        result("frames_save", "zstd_save", "time", saves["zstd_save"], "s",
               reference="raw_write_fsync", reference_value=saves["raw_write_fsync"],
               target="<= 1.0"),
        result("frames_load", "np_load", "time", loads["np_load"], "s"),
        result("frames_load", "zstd_load", "time", loads["zstd_load"], "s",
               reference="np_load", reference_value=loads["np_load"], target="<= 2.0"),
    ]


def _random_rows(args: Any, directory: str) -> list[Result]:
    import numpy as np

    from namedschema import checkpoint
    noise = np.random.default_rng(0).integers(0, 256, int(args.size_mib * MIB), np.uint8)
    plain, packed = os.path.join(directory, "r.nsb"), os.path.join(directory, "rz.nsb")
    saves = _turns({"uncompressed": lambda: checkpoint.save({"x": noise}, plain),
                    "zstd": lambda: checkpoint.save({"x": noise}, packed, compression="zstd")},
                   args.rounds)
    sizes = {"uncompressed": os.path.getsize(plain), "zstd": os.path.getsize(packed)}
    return [
        result("random_size", "uncompressed", "bytes", sizes["uncompressed"] / MIB, "MiB"),
        result("random_size", "zstd", "bytes", sizes["zstd"] / MIB, "MiB",
               reference="uncompressed", reference_value=sizes["uncompressed"] / MIB,
               target="<= 1.01"),
        result("random_save", "uncompressed", "time", saves["uncompressed"], "s"),
        result("random_save", "zstd", "time", saves["zstd"], "s", reference="uncompressed",
               reference_value=saves["uncompressed"], target="<= 1.25"),
    ]


def _mlp_adam(mib: float) -> dict[str, Any]:
    """An MLP's weights and Adam's state after a few steps: about ``mib`` MiB of float32."""
    import torch
    torch.manual_seed(0)
    width = max(64, int((mib * MIB / 4 / 3 / 4) ** 0.5))   # 4 square layers, x3 with Adam
    net = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(4)])
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    for _ in range(5):
        loss = net(torch.randn(64, width)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return _plain(net, opt)


def _plain(net: Any, opt: Any) -> dict[str, Any]:
    """A network's and its optimizer's tensors as plain data (str keys)."""
    moments = {f"{i}.{key}": value for i, state in opt.state_dict()["state"].items()
               for key, value in state.items()}
    return {"model": dict(net.state_dict()), "optimizer": moments}


def _dqn(mib: float, quick: bool) -> tuple[dict[str, Any], Any]:
    """A DQN's state: a frame buffer (``mib`` MiB of frames), a Nature-DQN network, Adam."""
    import numpy as np
    import torch
    rows = int(mib * MIB // (FRAME[0] * FRAME[1]))
    obs, _what = _frames(rows, quick)
    rng = np.random.default_rng(0)
    buffer = {"observation": obs, "action": rng.integers(0, 6, rows),
              "reward": rng.choice(np.array([-1, 0, 0, 0, 0, 0, 0, 1], np.float32), rows),
              "done": rng.random(rows) < 0.001}
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(4, 32, 8, 4), torch.nn.ReLU(), torch.nn.Conv2d(32, 64, 4, 2),
        torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 3, 1), torch.nn.ReLU(), torch.nn.Flatten(),
        torch.nn.Linear(3136, 512), torch.nn.ReLU(), torch.nn.Linear(512, 6))
    opt = torch.optim.Adam(net.parameters(), lr=1e-4)
    loss = net(torch.rand(8, 4, 84, 84)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return {"buffer": buffer, **_plain(net, opt)}, buffer


def _policy_rows(args: Any, directory: str) -> list[Result]:
    import numpy as np

    from namedschema import checkpoint
    out: list[Result] = []
    states = {"mlp_adam": (_mlp_adam(min(args.size_mib, 256) / 4), None),
              "dqn": _dqn(args.size_mib, args.quick)}
    policies: dict[str, Any] = {"none": None, "auto": "auto", "zstd": "zstd"}
    for name, (state, buffer) in states.items():
        paths = {p: os.path.join(directory, f"{name}-{p}.nsb") for p in policies}

        def save(p: str, state: dict[str, Any] = state, paths: dict[str, str] = paths,
                 incremental: bool = True) -> None:
            checkpoint.save(state, paths[p], incremental=incremental,
                            compression=policies[p])

        saves = _turns({p: functools.partial(save, p, incremental=False) for p in policies},
                       args.rounds)
        loads = _turns({p: functools.partial(checkpoint.load, paths[p]) for p in policies},
                       args.rounds)
        resaves: dict[str, float] = {}
        if buffer is not None:   # the next save after 1% of the rows changed
            rows = len(buffer["reward"])
            n = max(1, rows // 100)
            for p in policies:
                save(p)   # the layout of incremental saves (None), not timed
                for k in range(args.rounds):
                    at = (k * n + np.arange(n)) % rows
                    buffer["observation"][at] = buffer["observation"][(at + 7) % rows]
                    buffer["reward"][at] += 1
                    began = time.perf_counter()
                    save(p)
                    took = time.perf_counter() - began
                    resaves[p] = min(resaves.get(p, took), took)
        sizes = {p: os.path.getsize(paths[p]) / MIB for p in policies}
        for metric, values, unit, case in (("time", saves, "s", "save"),
                                           ("bytes", sizes, "MiB", "size"),
                                           ("time", loads, "s", "load"),
                                           ("time", resaves, "s", "resave_1pct")):
            if not values:
                continue
            out.append(result(f"{name}_{case}", "none", metric, values["none"], unit))
            for p in ("auto", "zstd"):
                out.append(result(f"{name}_{case}", p, metric, values[p], unit,
                                  reference="none", reference_value=values["none"]))
    return out


def _rows(case: str, args: Any) -> list[Result]:
    if case == "policy" and importlib.util.find_spec("torch") is None:
        args.notes.append(missing_extra_note("compression", [case], "torch",
                                             "its states hold torch networks"))
        return []
    directory = tempfile.mkdtemp(prefix="namedschema-bench-compression-", dir=args.dir)
    try:
        if case == "frames":
            return _frames_rows(args, directory)
        if case == "random":
            return _random_rows(args, directory)
        return _policy_rows(args, directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = topic_parser("compression", __doc__.split("\n\n")[0], CASES)
    parser.add_argument("--size-mib", type=float, default=None,
                        help="data per case (1024; 32 with --quick)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="turns per contender (3; 2 with --quick)")
    parser.add_argument("--dir", default=None, help="where the files go (a temp dir)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    args.size_mib = args.size_mib or (32 if args.quick else 1024)
    args.rounds = args.rounds or (2 if args.quick else 3)
    args.notes = []
    if importlib.util.find_spec("zstandard") is None:
        args.notes.append(f"compression: skipped {', '.join(args.cases)}: they compress "
                          "with zstd, and zstandard is not installed (pip install "
                          "'namedschema[zstd]')")
        return finish("compression", args, [], args.notes)
    from namedschema.checkpoint._compression import workers
    args.notes.append(f"{workers()} compression threads; load average "
                      f"{os.getloadavg()[0]:.1f} at the start")
    results: list[Result] = []
    for number, case in enumerate(args.cases, 1):
        progress("compression", f"{case} ({number}/{len(args.cases)}) ...")
        results += _rows(case, args)
    return finish("compression", args, results, args.notes)


if __name__ == "__main__":
    sys.exit(main())
