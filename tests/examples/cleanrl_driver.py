"""Runs one of the CleanRL examples as its users run it, and digests its final state.

    python -m tests.examples.cleanrl_driver SCRIPT --digest FILE [--buffer sb3|namedschema]
        [--without-namedschema] [--kill-at STEP] [--kill-in-save N] [--marker FILE]
        -- SCRIPT'S ARGUMENTS

The script runs as ``__main__`` (``runpy``) with deterministic torch on one thread.
What the driver adds, none of which draws from a generator or changes the run:

* ``tyro`` and ``torch.utils.tensorboard`` when they are not installed: a ``tyro.cli``
  that reads the dataclass's fields from the command line (``--total-timesteps 3000``,
  ``--no-cuda``), and a ``SummaryWriter`` that appends each scalar to
  ``<log_dir>/scalars.jsonl`` and honours ``purge_step`` as TensorBoard does (the
  events at or after it are dropped), so the tests can compare what a run logged.
* ``--buffer namedschema``: ``stable_baselines3.common.buffers.ReplayBuffer`` is
  ``examples/cleanrl_namedschema_buffer.ReplayBuffer``, as the script's import line
  changed to it would make it.
* ``--without-namedschema``: the script with every line marked ``# namedschema`` or
  ``# resumed logs`` removed and its loop over ``range(args.total_timesteps)``: CleanRL's
  file with the gymnasium 1.x fixes only; namedschema is not imported until the
  digest is taken, after the run.
* ``--kill-at STEP``: at ``maybe_save(STEP)`` the background save in flight is waited
  for, then the whole process group gets SIGKILL (a kill between checkpoints).
* ``--kill-in-save N``: the whole process group gets SIGKILL at the first write of the
  N-th save that happens outside the training thread (in a background writer: a fork
  child or a thread), so the save is killed while it is being written.
* ``--marker FILE``: written just before a kill, saying which one it was.

The digest (JSON, one SHA-256 per part) covers the networks, Adam's state, the buffer
(arrays and counters), every env layer's data (the ALE emulator through
``cloneState(include_rng=True)``, generators included; wall-clock fields left out),
the global generators, the loop's last observation and what the run logged.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import hashlib
import json
import os
import random
import runpy
import signal
import sys
import threading
import types

import numpy as np
import torch

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "examples")
WALL_CLOCK = {"episode_start_time", "time_queue"}   # RecordEpisodeStatistics' times


# -- stand-ins for the two packages CleanRL logs and parses with --------------------------

def install_tyro_if_missing() -> None:
    try:
        import tyro  # noqa: F401
        return
    except ImportError:
        pass

    def cli(cls):
        parser = argparse.ArgumentParser()
        for f in dataclasses.fields(cls):
            flag = "--" + f.name.replace("_", "-")
            default = f.default
            if isinstance(default, bool):
                parser.add_argument(flag, dest=f.name, action="store_true", default=default)
                parser.add_argument("--no-" + f.name.replace("_", "-"), dest=f.name,
                                    action="store_false")
            else:
                kind = type(default) if default is not None else str
                parser.add_argument(flag, dest=f.name, type=kind, default=default)
        return cls(**vars(parser.parse_args(sys.argv[1:])))
    sys.modules["tyro"] = types.SimpleNamespace(cli=cli)  # type: ignore[assignment]


class RecordingWriter:
    """``SummaryWriter``'s calls that CleanRL makes, appended to ``scalars.jsonl``."""

    def __init__(self, log_dir, purge_step=None):
        os.makedirs(log_dir, exist_ok=True)
        self.log_dir, self.path = log_dir, os.path.join(log_dir, "scalars.jsonl")
        if purge_step is not None and os.path.exists(self.path):
            with open(self.path) as f:
                kept = [line for line in f if json.loads(line)[2] < purge_step]
            with open(self.path, "w") as f:
                f.writelines(kept)

    def add_scalar(self, tag, value, step):
        with open(self.path, "a") as f:
            f.write(json.dumps([tag, float(getattr(value, 'detach', lambda: value)()), int(step)]) + "\n")

    def add_text(self, tag, text):
        pass

    def close(self):
        pass


def install_summary_writer_if_missing() -> None:
    try:
        import tensorboard  # noqa: F401
        return
    except ImportError:
        pass
    module = types.ModuleType("torch.utils.tensorboard")
    module.SummaryWriter = RecordingWriter  # type: ignore[attr-defined]
    sys.modules["torch.utils.tensorboard"] = module


# -- the two kills ------------------------------------------------------------------------

def kill_group(marker: str | None, what: str) -> None:
    if marker:
        with open(marker, "w") as f:
            f.write(what)
    os.killpg(os.getpgrp(), signal.SIGKILL)


def hook_kill_at(step: int, marker: str | None) -> None:
    import namedschema
    maybe_save = namedschema.RunCheckpoint.maybe_save

    def maybe_save_(self, at, **loop):
        if at == step:
            self.wait()              # the event: the save in flight is on disk
            kill_group(marker, f"between checkpoints, at step {at}")
        return maybe_save(self, at, **loop)
    namedschema.RunCheckpoint.maybe_save = maybe_save_


def hook_kill_in_save(number: int, marker: str | None) -> None:
    import namedschema
    save = namedschema.RunCheckpoint.save
    main_pid, main_thread = os.getpid(), threading.current_thread()
    count = {"saves": 0}
    write, pwrite = os.write, os.pwrite

    def save_(self, step, **loop):
        # The previous save's background write ends first (save() waits for it too, a
        # moment later): otherwise its last writes, under load, would count as this one's
        # and the kill would land in the save before the N-th.
        self.wait()
        count["saves"] += 1
        return save(self, step, **loop)

    def in_background_writer() -> bool:
        return count["saves"] == number and (
            os.getpid() != main_pid or threading.current_thread() is not main_thread)

    def write_(fd, data):
        if in_background_writer():
            kill_group(marker, f"in the background write of save {number}")
        return write(fd, data)

    def pwrite_(fd, data, offset):
        if in_background_writer():
            kill_group(marker, f"in the background write of save {number}")
        return pwrite(fd, data, offset)
    namedschema.RunCheckpoint.save = save_
    os.write, os.pwrite = write_, pwrite_


# -- the script without namedschema -----------------------------------------------------

def without_namedschema(source: str) -> str:
    """The script with namedschema's lines taken out (CleanRL's file + gymnasium 1.x fixes)."""
    lines = []
    for line in source.splitlines():
        if line.rstrip().endswith(("# namedschema", "# resumed logs")) or \
                "# namedschema:" in line or "# resumed logs:" in line:
            if "range(ckpt.next_step, args.total_timesteps)" in line:
                lines.append(line.split("  # namedschema")[0].replace(
                    "range(ckpt.next_step, ", "range("))
            continue
        lines.append(line)
    text = "\n".join(lines) + "\n"
    if "ckpt" in text or "import namedschema" in text:
        raise SystemExit("cleanrl_driver: a namedschema line is left unmarked")
    return text


# -- the digest ---------------------------------------------------------------------------

def _feed(h, x, skip=frozenset()) -> None:
    """Hash a value's data (deterministically): arrays, tensors, numbers, containers."""
    if isinstance(x, torch.Tensor):
        h.update(repr((x.dtype, tuple(x.shape))).encode())
        h.update(x.detach().cpu().contiguous().numpy().tobytes())
    elif isinstance(x, np.ndarray):
        h.update(repr((x.dtype.str, x.shape)).encode())
        h.update(np.ascontiguousarray(x).tobytes())
    elif isinstance(x, dict):
        for k in sorted(x, key=repr):
            if k not in skip:
                h.update(repr(k).encode())
                _feed(h, x[k], skip)
    elif isinstance(x, (list, tuple, collections.deque)):
        h.update(f"{type(x).__name__}{len(x)}".encode())
        for item in x:
            _feed(h, item, skip)
    elif isinstance(x, np.random.Generator):
        _feed(h, x.bit_generator.state)
    else:
        h.update(repr(x).encode())


def _env_layers(env) -> list:
    layers = []
    while env is not None:
        layers.append(env)
        env = getattr(env, "env", None)
    return layers


def env_state(envs) -> list:
    """Every layer's data of every env (ALE: its emulator state with its RNG)."""
    import gymnasium as gym
    out = []
    for env in envs.envs:
        for layer in _env_layers(env):
            state = {}
            for name, value in vars(layer).items():
                if name in WALL_CLOCK or name == "env":
                    continue
                if isinstance(value, gym.spaces.Space) and "observation_space" in name:
                    continue   # gymnasium's batch_space seeds it from OS entropy; never drawn from
                if isinstance(value, gym.spaces.Space):
                    state[name] = value._np_random   # None while unseeded (np_random would seed it)
                elif type(value).__name__ == "ALEInterface":
                    state[name] = value.cloneState(include_rng=True).serialize()
                elif isinstance(value, (np.ndarray, np.random.Generator, int, float, bool,
                                        np.generic, collections.deque, list, tuple)) or \
                        value is None:
                    state[name] = value
            out.append((type(layer).__name__, state))
    out.append(("single_action_space", envs.single_action_space._np_random))
    out.append(("action_space", envs.action_space._np_random))
    return out


def buffer_state(rb) -> dict:
    if hasattr(rb, "state_dict"):
        return rb.state_dict()
    return {k: v for k, v in vars(rb).items()
            if isinstance(v, (np.ndarray, int, bool, np.generic))}


def logged(run_name: str) -> list:
    path = os.path.join("runs", run_name, "scalars.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [row for row in map(json.loads, f) if row[0] != "charts/SPS"]


def digest(g: dict) -> dict[str, str]:
    parts = {
        "q_network": g["q_network"].state_dict(),
        "target_network": g["target_network"].state_dict(),
        "optimizer": g["optimizer"].state_dict(),
        "rb": buffer_state(g["rb"]),
        "envs": env_state(g["envs"]),
        "obs": g["obs"],
        "rngs": [random.getstate(), np.random.get_state(), torch.get_rng_state()],
        "logged": logged(g["run_name"]),
    }
    if os.environ.get("CLEANRL_DRIVER_DETAIL"):    # one hash per env layer's field, to debug
        parts.update({f"envs.{i}.{layer}.{k}": v for i, (layer, state) in
                      enumerate(parts["envs"]) if isinstance(state, dict)
                      for k, v in state.items()})
    out = {}
    for name, value in parts.items():
        h = hashlib.sha256()
        _feed(h, value)
        out[name] = h.hexdigest()
    return out


def main() -> None:
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    p = argparse.ArgumentParser()
    p.add_argument("script")
    p.add_argument("--digest", required=True)
    p.add_argument("--buffer", choices=["sb3", "namedschema"], default="sb3")
    p.add_argument("--without-namedschema", action="store_true")
    p.add_argument("--kill-at", type=int)
    p.add_argument("--kill-in-save", type=int)
    p.add_argument("--marker")
    args = p.parse_args(argv[:split])
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    install_tyro_if_missing()
    install_summary_writer_if_missing()
    if args.buffer == "namedschema":
        import stable_baselines3.common.buffers as sb3_buffers
        sys.path.insert(0, EXAMPLES)
        import cleanrl_namedschema_buffer
        sb3_buffers.ReplayBuffer = cleanrl_namedschema_buffer.ReplayBuffer  # type: ignore
    if args.kill_at is not None:
        hook_kill_at(args.kill_at, args.marker)
    if args.kill_in_save is not None:
        hook_kill_in_save(args.kill_in_save, args.marker)
    sys.argv = [args.script, *argv[split + 1:]]
    if args.without_namedschema:
        with open(args.script) as f:
            code = compile(without_namedschema(f.read()), args.script, "exec")
        if "namedschema" in sys.modules:
            raise SystemExit("cleanrl_driver: namedschema was imported before the run")
        g: dict = {"__name__": "__main__", "__file__": args.script}
        exec(code, g)
    else:
        g = runpy.run_path(args.script, run_name="__main__")
    with open(args.digest, "w") as f:
        json.dump(digest(g), f, indent=1)


if __name__ == "__main__":
    main()
