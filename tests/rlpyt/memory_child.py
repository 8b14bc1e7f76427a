"""One side of a resume memory test, in its own process (real rlpyt).

    python -m tests.rlpyt.memory_child save KIND[,KIND...] DIR MIB OUT.json
    python -m tests.rlpyt.memory_child resume KIND[,KIND...] DIR MIB OUT.json
    python -m tests.rlpyt.memory_child train CONFIG CKPT MIB OUT.json N_STEPS

``save`` builds rlpyt's replay buffer of each KIND at about MIB MiB (Atari
frames, 104x80 uint8, 8 envs), fills all its memory with a pattern, and
checkpoints its state as ``resumable`` does (DIR/KIND.nsc). ``resume`` builds
the same buffer afresh, loads the checkpoint as ``resumable`` does
(memory-mapped) and restores it in place, and reports the growth of the peak
resident set (VmHWM, started afresh for each kind) over the resident set
before, the buffer's bytes, the restored state's digest, whether the
checkpoint file is still mapped, and (first kind only) whether incremental
saves of the restored buffer round-trip. ``train`` runs a small DQN (CONFIG of
tests/rlpyt/driver.py, a MinibatchRl one: an async run's checkpoint taken at
its end is a finished run, which does not resume) with a
frame buffer of MIB MiB under ``resumable`` for N_STEPS steps, and
when it resumes, measures the peak resident growth of the startup that
restored it.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import sys

sys.path.append(os.environ["RLPYT_SRC"])

import numpy as np

import namedschema

namedschema.patch_rlpyt()

from rlpyt.utils.collections import namedarraytuple  # noqa: E402

from namedschema.apps.harness import peak_rss  # noqa: E402
from namedschema.rlpyt import resumable  # noqa: E402
from namedschema.rlpyt.resume import state  # noqa: E402

FRAME = (104, 80)
ENVS = 8
Samples = namedarraytuple("SamplesToBuffer", ["observation", "action", "reward", "done"])
SamplesRnn = namedarraytuple("SamplesToBufferRnn",
                             ["observation", "action", "reward", "done", "prev_rnn_state"])
RnnState = namedarraytuple("RnnState", ["h", "c"])

# KIND: (module, class, frame buffer, sequence buffer, prioritized)
KINDS = {
    "uniform": ("non_sequence.uniform", "UniformReplayBuffer", False, False, False),
    "prioritized": ("non_sequence.prioritized", "PrioritizedReplayBuffer", False, False, True),
    "prioritized_frame": ("non_sequence.frame", "PrioritizedReplayFrameBuffer",
                          True, False, True),
    "uniform_sequence": ("sequence.uniform", "UniformSequenceReplayBuffer",
                         False, True, False),
    "prioritized_sequence_frame": ("sequence.frame", "PrioritizedSequenceReplayFrameBuffer",
                                   True, True, True),
    "async_prioritized_frame": ("non_sequence.frame", "AsyncPrioritizedReplayFrameBuffer",
                                True, False, True),
    "async_uniform_sequence_frame": ("sequence.frame", "AsyncUniformSequenceReplayFrameBuffer",
                                     True, True, False),
}


def build(kind: str, mib: int):
    import importlib
    module, name, frames, sequence, prioritized = KINDS[kind]
    cls = getattr(importlib.import_module(f"rlpyt.replays.{module}"), name)
    observation = np.zeros((4, *FRAME), np.uint8)
    per_step = observation[0].nbytes if frames else observation.nbytes
    steps = (mib * 2**20 // per_step) // (ENVS * 40) * (ENVS * 40)
    kwargs = dict(size=steps, B=ENVS, discount=0.99, n_step_return=3)
    if sequence:
        rnn = RnnState(np.zeros((1, 64), np.float32), np.zeros((1, 64), np.float32))
        example = SamplesRnn(observation, np.int64(0), np.float32(0), False, rnn)
        kwargs.update(rnn_state_interval=40, batch_T=80)
    else:
        example = Samples(observation, np.int64(0), np.float32(0), False)
    if prioritized:
        kwargs.update(alpha=0.6, beta=0.4)
    return cls(example=example, **kwargs)


def arrays(data: dict) -> list:
    """Every array of a data_state, depth first, in order."""
    out = []
    for _, (kind, value) in sorted(data.items()):
        if kind == "object":
            out.extend(arrays(value))
        elif kind == "array":
            out.append(value)
        elif kind == "tuple":
            out.extend(_leaves(value))
    return out


def _leaves(value):
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def _roots(buffer) -> list:
    """The arrays owning the memory of the buffer's arrays (each once)."""
    roots: dict = {}
    for a in arrays(state.data_state(buffer)):
        while isinstance(a.base, np.ndarray):
            a = a.base
        roots[id(a)] = a
    return list(roots.values())


def fill(buffer) -> None:
    """A byte pattern in all memory (period 4099 bytes: an offset error shows)."""
    pattern = (np.arange(4099) * 37 % 256).astype(np.uint8)
    for root in _roots(buffer):
        flat = root.reshape(-1).view(np.uint8)
        whole = flat.size - flat.size % pattern.size
        flat[:whole].reshape(-1, pattern.size)[:] = pattern
        flat[whole:] = pattern[:flat.size - whole]
    for a in arrays(state.data_state(buffer)):
        if a.dtype == bool:     # only 0 and 1 are bools
            a.view(np.uint8)[...] &= 1
        elif a.dtype.kind == "f":
            np.nan_to_num(a, copy=False, nan=1.0, posinf=1.0, neginf=-1.0)


def digest(buffer) -> str:
    h = hashlib.sha256()
    for a in arrays(state.data_state(buffer)):
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).data)
    return h.hexdigest()


def nbytes(buffer) -> int:
    """Bytes of the buffer's memory (views counted once, through their base)."""
    return sum(root.nbytes for root in _roots(buffer))


def resident() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def reset_peak() -> None:
    """Start VmHWM afresh at the current resident set (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def mapped(path: str) -> bool:
    real = os.path.realpath(path)
    with open("/proc/self/maps") as f:
        return any(line.rstrip("\n").endswith(real) for line in f)


def save(kind: str, ckpt: str, mib: int) -> dict:
    buffer = build(kind, mib)
    fill(buffer)
    namedschema.save({"replay": state.capture(buffer, None)}, ckpt, allow_pickle=True)
    return {"bytes": nbytes(buffer), "digest": digest(buffer)}


def resume(kind: str, ckpt: str, mib: int, incremental: bool) -> dict:
    buffer = build(kind, mib)
    gc.collect()
    reset_peak()
    before = resident()
    loaded = namedschema.load(ckpt, allow_pickle=True, mmap_mode="r")
    state.restore(buffer, loaded["replay"], None, "replay")
    del loaded
    gc.collect()
    result = {"bytes": nbytes(buffer), "growth": peak_rss() - before,
              "digest": digest(buffer), "mapped": mapped(ckpt)}
    if incremental:
        # Issue 20: the restored buffer is the process's own memory, and saves of
        # it, incremental ones included, work on.
        again = ckpt + ".again"
        for _ in range(2):
            namedschema.save({"replay": state.capture(buffer, None)}, again,
                             incremental=True, allow_pickle=True)
            arrays(state.data_state(buffer))[0].reshape(-1)[:3] += 1
        arrays(state.data_state(buffer))[0].reshape(-1)[:3] -= 1
        fresh = build(kind, mib)
        state.restore(fresh, namedschema.load(again, allow_pickle=True)["replay"], None,
                      "replay")
        result["incremental"] = digest(fresh) == digest(buffer)
    return result


def train(config: str, ckpt: str, mib: int, n_steps: int) -> dict:
    """A DQN run (driver ``config``) with a frame buffer of about ``mib`` MiB, ``resumable``.

    Reports, when it resumed, the growth of the peak resident set during
    rlpyt's startup with the restore in it, the buffer's and the models'
    bytes (agent models and optimizer state), and whether the checkpoint
    stays mapped.
    """
    from tests.rlpyt.driver import build as build_run
    runner = build_run(config)
    runner.n_steps = n_steps
    runner.sampler.env_kwargs = dict(runner.sampler.env_kwargs, size=64)   # 4 KiB frames
    runner.algo.replay_size = mib * 2**20 // 4096
    resumable(runner, ckpt, every_itrs=10_000)
    resumed = os.path.exists(ckpt)
    startup, result = runner.startup, {}

    def measured_startup():
        gc.collect()
        reset_peak()
        before = resident()
        n_itr = startup()
        result["growth"] = peak_rss() - before
        if resumed:
            result["mapped"] = mapped(ckpt)
        result["bytes"] = nbytes(runner.algo.replay_buffer)
        result["start"] = runner._namedschema_resume.start
        return n_itr
    runner.startup = measured_startup
    runner.train()
    import torch
    tensors = [t for m in (runner.agent.model, runner.agent.target_model)
               for t in m.state_dict().values()]
    tensors += [t for s in runner.algo.optimizer.state.values() for t in s.values()
                if isinstance(t, torch.Tensor)]
    result["model_bytes"] = sum(t.nbytes for t in tensors)
    result["digest"] = digest(runner.algo.replay_buffer)
    return result


def main() -> None:
    """``MODE KIND[,KIND...] DIR MIB OUT.json``: one checkpoint per kind in DIR;
    ``train CONFIG CKPT MIB OUT.json N_STEPS``: a resumable training run."""
    mode, kinds, directory, mib, out = sys.argv[1:6]
    if mode == "train":
        with open(out, "w") as f:
            json.dump(train(kinds, directory, int(mib), int(sys.argv[6])), f)
        return
    results = {}
    for i, kind in enumerate(kinds.split(",")):
        ckpt = os.path.join(directory, f"{kind}.nsc")
        if mode == "save":
            results[kind] = save(kind, ckpt, int(mib))
        else:
            results[kind] = resume(kind, ckpt, int(mib), incremental=i == 0)
        gc.collect()
    with open(out, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
