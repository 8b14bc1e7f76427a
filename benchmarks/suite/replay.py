"""Replay-buffer benchmarks: namedschema's buffers against TorchRL's and SB3's, same data.

Every contender stores the same Atari-like transitions (observation and next
observation ``uint8 (4, 84, 84)``, ``int64`` action, ``float32`` reward and done),
is filled to capacity first (so writes wrap, the steady state of training), and
is timed in the same process, interleaved round by round (``best_times``).

* ``extend_8`` / ``extend_256``: write a batch of 8 / 256 transitions (8 envs; a
  256-step chunk). SB3's ``ReplayBuffer.add`` takes exactly ``n_envs`` rows, so
  its buffer is built with ``n_envs`` = the batch size.
* ``sample_32`` / ``sample_256``: draw a uniform batch. Outputs differ in kind:
  SB3 returns torch tensors (copied), TorchRL a ``TensorDict``, namedschema a
  schema of numpy arrays; the namedschema contender also wraps every field with
  ``torch.as_tensor`` (no copy), so all three hand torch tensors to a loss.
* ``per_sample_update_32`` / ``per_sample_update_256``: prioritized replay (alpha
  0.6, beta 0.4): sample a batch and set its priorities, against TorchRL's
  ``PrioritizedSampler`` (C++ sum tree). SB3 has no prioritized buffer.

Contenders: ``torchrl LazyTensorStorage``, ``torchrl LazyMemmapStorage`` (files
in a temporary folder), ``sb3 ReplayBuffer`` (references, one row each) and
``namedschema`` (one row per reference, ratio = namedschema / reference, target
``<= 1.0``). torchrl and stable-baselines3 are benchmark-only dependencies
(``pip install -e ".[bench]"``); a missing one is left out and said. Without torch
(the ``torch`` extra) only the ``extend`` cases run: the others hand torch
tensors to a loss; the skipped cases are said in one note.

CASES   the case names, in running order
main    run the cases, print the table, optionally write JSON
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np

from .common import (
    Result,
    best_times,
    finish,
    missing_extra_note,
    progress,
    result,
    topic_parser,
)

__all__ = ["CASES", "main"]

CASES = ("extend_8", "extend_256", "sample_32", "sample_256", "per_sample_update_32",
         "per_sample_update_256")
#: The cases that need torch (namedschema's rows wrap each sampled field in a tensor).
TORCH_CASES = tuple(c for c in CASES if not c.startswith("extend_"))
OBS = (4, 84, 84)
TARGET = "<= 1.0"


def _transitions(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"obs": rng.integers(0, 255, (n, *OBS), np.uint8),
            "next_obs": rng.integers(0, 255, (n, *OBS), np.uint8),
            "action": rng.integers(0, 6, n).astype(np.int64),
            "reward": rng.random(n, dtype=np.float32),
            "done": (rng.random(n) < 0.01).astype(np.float32)}


class _Namedschema:
    name = "namedschema"

    def __init__(self, capacity: int, prioritized: bool, n_envs: int):
        from namedschema import NamedArrayTupleSchema
        from namedschema.training.replay import PrioritizedReplayBuffer, ReplayBuffer
        self.Step = NamedArrayTupleSchema(
            "BenchTransition", ["obs", "next_obs", "action", "reward", "done"])
        example = self.Step(np.zeros(OBS, np.uint8), np.zeros(OBS, np.uint8), np.int64(0),
                            np.float32(0), np.float32(0))
        self.rb: Any = (PrioritizedReplayBuffer(example, capacity, seed=0)
                        if prioritized else ReplayBuffer(example, capacity, seed=0))

    def batch(self, data: dict[str, np.ndarray]) -> Any:
        return self.Step(**data)

    def extend(self, batch: Any) -> None:
        self.rb.extend(batch)

    def sample(self, n: int) -> Any:
        import torch
        return [torch.as_tensor(x) for x in self.rb.sample(n)]

    def per(self, n: int) -> None:
        import torch
        batch, index, weights = self.rb.sample(n)
        [torch.as_tensor(x) for x in batch]
        self.rb.update_priorities(index, np.abs(np.asarray(weights, np.float64)) + 0.5)


class _TorchRL:
    def __init__(self, capacity: int, prioritized: bool, n_envs: int, memmap: bool,
                 scratch: str):
        from torchrl.data import (
            LazyMemmapStorage,
            LazyTensorStorage,
            ReplayBuffer,
        )
        from torchrl.data.replay_buffers.samplers import (
            PrioritizedSampler,
        )
        self.name = f"torchrl {'LazyMemmapStorage' if memmap else 'LazyTensorStorage'}"
        storage = (LazyMemmapStorage(capacity, scratch_dir=tempfile.mkdtemp(dir=scratch))
                   if memmap else LazyTensorStorage(capacity))
        sampler = PrioritizedSampler(capacity, alpha=0.6, beta=0.4) if prioritized else None
        self.rb = ReplayBuffer(storage=storage, sampler=sampler)

    def batch(self, data: dict[str, np.ndarray]) -> Any:
        import torch
        from tensordict import TensorDict
        n = len(data["action"])
        return TensorDict({k: torch.from_numpy(v) for k, v in data.items()}, batch_size=[n])

    def extend(self, batch: Any) -> None:
        self.rb.extend(batch)

    def sample(self, n: int) -> Any:
        return self.rb.sample(n)

    def per(self, n: int) -> None:
        import torch
        batch, info = self.rb.sample(n, return_info=True)
        self.rb.update_priority(info["index"], torch.rand(n) + 0.5)


class _SB3:
    name = "sb3 ReplayBuffer"

    def __init__(self, capacity: int, prioritized: bool, n_envs: int):
        from gymnasium import spaces
        from stable_baselines3.common.buffers import ReplayBuffer
        self.n_envs = n_envs
        self.rb = ReplayBuffer(capacity, spaces.Box(0, 255, OBS, np.uint8), spaces.Discrete(6),
                               device="cpu", n_envs=n_envs, handle_timeout_termination=False)

    def batch(self, data: dict[str, np.ndarray]) -> Any:
        return (data["obs"], data["next_obs"], data["action"][:, None], data["reward"],
                data["done"], [{}] * len(data["action"]))

    def extend(self, batch: Any) -> None:
        self.rb.add(*batch)

    def sample(self, n: int) -> Any:
        return self.rb.sample(n)


def _available(module: str) -> bool:
    """Whether ``module`` can be used here (torchrl and SB3 are built on torch, too)."""
    if module in ("torchrl", "stable_baselines3") and not _available("torch"):
        return False
    return importlib.util.find_spec(module) is not None


def _contenders(capacity: int, prioritized: bool, n_envs: int, scratch: str,
                notes: list[str]) -> list[Any]:
    out: list[Any] = [_Namedschema(capacity, prioritized, n_envs)]
    if _available("torchrl"):
        try:
            out += [_TorchRL(capacity, prioritized, n_envs, False, scratch),
                    _TorchRL(capacity, prioritized, n_envs, True, scratch)]
        except RuntimeError as exc:   # its C++ sum tree did not load
            note = (f"torchrl {'PrioritizedSampler' if prioritized else 'ReplayBuffer'} "
                    f"unavailable here: {str(exc).splitlines()[0]} (torchrl's C++ extension "
                    "was built for another torch)")
            if note not in notes:
                notes.append(note)
    if not prioritized and _available("stable_baselines3"):
        out.append(_SB3(capacity, prioritized, n_envs))
    return out


def _fill(contender: Any, capacity: int, rows: int, rng: np.random.Generator) -> None:
    chunk = contender.batch(_transitions(rows, rng))
    for _ in range(-(-capacity // rows) + 1):
        contender.extend(chunk)


def _statement(c: Any, kind: str, n: int, data: dict[str, np.ndarray]) -> Callable[[], Any]:
    if kind == "extend":
        batch = c.batch(data)
        return lambda: c.extend(batch)
    if kind == "sample":
        return lambda: c.sample(n)
    return lambda: c.per(n)


def _case(case: str, capacity: int, repeat: int, scratch: str,
          notes: list[str]) -> list[Result]:
    kind, size = case.rsplit("_", 1)
    n = int(size)
    rng = np.random.default_rng(0)
    prioritized = kind == "per_sample_update"
    rows = n if kind == "extend" else 8
    contenders = _contenders(capacity, prioritized, rows, scratch, notes)
    for c in contenders:
        _fill(c, capacity, rows, rng)
    data = _transitions(rows, rng)
    stmts = {c.name: _statement(c, kind, n, data) for c in contenders}
    times = best_times(stmts, repeat=repeat)
    rows_out = [result(case, name, "time", t * 1e6, "us") for name, t in times.items()
                if name != "namedschema"]
    ours = times["namedschema"] * 1e6
    for name, t in times.items():
        if name != "namedschema":
            rows_out.append(result(case, f"namedschema (vs {name.split()[0]}"
                                   f"{' memmap' if 'Memmap' in name else ''})", "time", ours,
                                   "us", reference=name,
                                   reference_value=t * 1e6, target=TARGET))
    if len(times) == 1:
        rows_out.append(result(case, "namedschema", "time", ours, "us"))
    return rows_out


def main(argv: list[str] | None = None) -> int:
    parser = topic_parser("replay", __doc__.split("\n\n")[0], CASES)
    parser.add_argument("--capacity", type=int, default=None,
                        help="transitions per buffer (default 10,000: 565 MB each; "
                             "--quick 1,000)")
    args = parser.parse_args(argv)
    capacity = args.capacity or (1_000 if args.quick else 10_000)
    repeat = 3 if args.quick else 7
    notes = [f"capacity {capacity:,} transitions of 56.5 KB; times are per call (best of "
             f"{repeat} interleaved rounds)"]
    if _available("torch"):
        notes.append("namedschema's sample rows include torch.as_tensor of every field (no "
                     "copy); SB3 copies into new tensors, TorchRL returns a TensorDict")
    missing = [m for m in ("torchrl", "stable_baselines3") if not _available(m)]
    if missing and not _available("torch"):
        notes.append(f"left out: {', '.join(missing)} (built on torch, which is not "
                     "installed): namedschema's rows have no reference")
    elif missing:
        notes.append(f"not installed, left out: {', '.join(missing)} "
                     "(pip install -e '.[bench]')")
    if _available("torch"):
        import torch
        torch.set_num_threads(1)   # one learner thread each; no oversubscription on small VMs
        notes.append("torch.set_num_threads(1) for every contender")
    cases = list(args.cases)
    if not _available("torch"):
        skipped = [c for c in cases if c in TORCH_CASES]
        cases = [c for c in cases if c not in TORCH_CASES]
        if skipped:
            notes.append(missing_extra_note(
                "replay", skipped, "torch",
                "they hand torch tensors to a loss (every contender's sample is timed so)"))
    scratch = tempfile.mkdtemp(prefix="namedschema-bench-replay-")
    results: list[Result] = []
    try:
        for number, case in enumerate(cases, 1):
            progress("replay", f"{case} ({number}/{len(cases)}) ...")
            results += _case(case, capacity, repeat, scratch, notes)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return finish("replay", args, results, notes)


if __name__ == "__main__":
    sys.exit(main())
