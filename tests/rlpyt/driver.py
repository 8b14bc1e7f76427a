"""One training run of a resume twin test, in its own process.

    python -m tests.rlpyt.driver CONFIG OUT.json [--ckpt PATH] [--every N]
        [--kill-at-itr K] [--kill-in-loss K] [--kill-in-save N:write|N:replace|N:pwrite]
        [--sync-full-saves]
        [--alone] [--no-patch] [--import-order rlpyt-first|namedschema-first]

Builds a small real-rlpyt run (CONFIG: dqn_uniform, dqn_prioritized, dqn_eval,
r2d1, sac on small stand-in envs; pong and pong_eval on real Atari Pong through
rlpyt's own AtariEnv and the atari_py adapter over ale-py; a suffix picks the
sampler: none for SerialSampler, ``_cpu`` CpuSampler, ``_gpu`` GpuSampler with
``cuda_idx=None``, ``_alt`` AlternatingSampler, 2 workers each, as example_5;
``_async`` AsyncSerialSampler), makes it resumable when ``--ckpt`` is given, trains, and writes
to OUT.json every sampler batch, replay batch, loss and logged diagnostic
(by iteration, as digests) and the digest of the final state. The kill
options end the process with SIGKILL at a chosen moment: at the start of an
iteration (once the background checkpoint in flight, if any, is written: the
kill falls between checkpoints, so the resume point does not depend on how
fast the writer was), inside the first loss computation of an iteration, or inside the N-th checkpoint
(at its first write, just before its rename, or at its first in-place write after the
journal commit of an incremental save); in a background save's writer process, the
training process is killed and then the writer. ``--sync-full-saves`` makes resumable
write full checkpoints while training waits (``incremental=False, background=False``).

``--alone`` runs rlpyt without namedschema: nothing of namedschema is imported
until training has ended (the final state is then read with its handlers); the
atari_py adapter is loaded from its file. ``--no-patch`` runs ``resumable``
without ``patch_rlpyt()`` (the one-call use), importing rlpyt before
namedschema or after it (``--import-order``).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import pickle
import signal
import sys

sys.path.append(os.environ["RLPYT_SRC"])

import numpy as np
import torch

# Set by main(): namedschema, its rlpyt state module, rlpyt's logger.
namedschema = rstate = logger = None
ADAPTER_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "namedschema", "rlpyt", "atari_py_adapter.py")


def install_atari_adapter(from_file):
    """``import atari_py`` gives the adapter over ale-py (from its file: no namedschema)."""
    if from_file:
        import importlib.util
        spec = importlib.util.spec_from_file_location("_atari_py_adapter", ADAPTER_FILE)
        adapter = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(adapter)
    else:
        from namedschema.rlpyt import atari_py_adapter as adapter
    adapter.install()


def load_env_class(spec):
    """Class NAME of file FILE (``FILE:NAME``), the file imported as module ``env_module``."""
    import importlib.util
    path, _, name = spec.rpartition(":")
    module_spec = importlib.util.spec_from_file_location("env_module", path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules["env_module"] = module
    module_spec.loader.exec_module(module)
    return getattr(module, name)


def import_namedschema(patch):
    global namedschema, rstate
    import namedschema as ns
    namedschema = ns
    if patch:
        namedschema.patch_rlpyt()
    from namedschema.rlpyt.resume import runner as resume
    from namedschema.rlpyt.resume import state
    rstate = state
    del resume


def import_rlpyt_logger():
    global logger
    from rlpyt.utils.logging import logger as rlpyt_logger
    logger = rlpyt_logger

# Timings differ between any two runs; everything else must not.
_TIMING_WORDS = ("Time", "PerSecond", "OptThrottle")


def digest(obj) -> str:
    h = hashlib.sha256()
    _feed(h, obj)
    return h.hexdigest()[:16]


def _feed(h, obj):
    if isinstance(obj, torch.Tensor):
        obj = obj.detach().cpu().numpy()
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        # Named tuples by fields: rlpyt's classes and namedschema's schemas alike.
        h.update(f"nt{tuple(obj._fields)}".encode())
        for v in obj:
            _feed(h, v)
        return
    if isinstance(obj, np.ndarray):
        h.update(f"a{obj.dtype.str}{obj.shape}".encode())
        h.update(np.ascontiguousarray(obj).tobytes())
    elif isinstance(obj, dict):
        h.update(b"{")
        for k, v in obj.items():
            h.update(repr(k).encode())
            _feed(h, v)
        h.update(b"}")
    elif isinstance(obj, (list, tuple)):
        h.update(f"({type(obj).__name__}".encode())
        for v in obj:
            _feed(h, v)
        h.update(b")")
    elif isinstance(obj, (bool, int, float, str, bytes, type(None), np.generic)):
        h.update(repr(obj).encode())
    elif isinstance(obj, np.random.RandomState):
        _feed(h, obj.get_state())
    elif isinstance(obj, np.dtype):
        h.update(obj.str.encode())
    elif hasattr(obj, "__dict__"):
        # By value: pickle's bytes also encode which objects are shared.
        h.update(type(obj).__qualname__.encode())
        _feed(h, vars(obj))
    else:
        try:
            h.update(pickle.dumps(obj, protocol=4))
        except TypeError:                 # a lock, say: no state of its own to compare
            h.update(f"<{type(obj).__qualname__}>".encode())


_SAMPLERS = ("_cpu", "_gpu", "_alt", "_async")


def split_config(config):
    """``(base, sampler suffix)``: ``"dqn_eval_gpu"`` -> ``("dqn_eval", "_gpu")``."""
    for suffix in _SAMPLERS:
        if config.endswith(suffix):
            return config[:-len(suffix)], suffix
    return config, ""


def build(config):
    from rlpyt.samplers.serial.sampler import SerialSampler

    from tests.rlpyt.envs import AtariLike, ContinuousLike, NoopAtariLike
    base, kind = split_config(config)
    n_steps, runner_cls, sampler_cls = 480, "MinibatchRl", SerialSampler
    sampler_kwargs = dict(batch_T=4, batch_B=2, max_decorrelation_steps=10)
    runner_kwargs = {}
    parallel = kind in ("_cpu", "_gpu", "_alt")
    if kind == "_cpu":
        from rlpyt.samplers.parallel.cpu.sampler import CpuSampler
        sampler_cls = CpuSampler
    elif kind == "_gpu":
        from rlpyt.samplers.parallel.gpu.sampler import GpuSampler
        sampler_cls = GpuSampler
    elif kind == "_alt":
        from rlpyt.samplers.parallel.gpu.alternating_sampler import AlternatingSampler
        sampler_cls = AlternatingSampler
    if parallel:
        # example_5's affinity on two workers, not pinned (a shared CI machine).
        runner_kwargs["affinity"] = dict(workers_cpus=[0, 1], set_affinity=False,
                                         cuda_idx=None, alternating=kind == "_alt")
    if kind == "_async":
        from rlpyt.samplers.async_.serial_sampler import AsyncSerialSampler
        from rlpyt.utils.collections import AttrDict
        sampler_cls = AsyncSerialSampler
        runner_cls = "AsyncRlEval" if base == "dqn_eval" else "AsyncRl"
        runner_kwargs["affinity"] = AttrDict(
            sampler=dict(set_affinity=False),
            optimizer=[dict(cpus=[0], torch_threads=1, set_affinity=False)])
    # Parallel samplers end an evaluation at eval_max_trajectories by polling a queue
    # against the clock, which even rlpyt alone does not reproduce: none for them.
    if base.startswith("dqn"):
        from rlpyt.agents.dqn.atari.atari_dqn_agent import AtariDqnAgent
        from rlpyt.algos.dqn.dqn import DQN
        agent = AtariDqnAgent(
            model_kwargs=dict(channels=[4], kernel_sizes=[4], strides=[2], paddings=[0],
                              fc_sizes=16),
            eps_final=0.05, eps_eval=0.01)
        algo = DQN(replay_size=200, min_steps_learn=40, batch_size=8, replay_ratio=2,
                   eps_steps=200, target_update_interval=5, n_step_return=2,
                   learning_rate=1e-3, double_dqn=True,
                   prioritized_replay=base == "dqn_prioritized",
                   pri_beta_steps=300, updates_per_sync=2)
        env_cls, env_kwargs = AtariLike, {"delay": 0.003} if kind == "_async" else {}
        if parallel:
            # Like rlpyt's AtariEnv: reset() when built, no-ops drawn from np.random.
            env_cls = NoopAtariLike
        if base == "dqn_eval":
            runner_cls = "MinibatchRlEval" if kind != "_async" else runner_cls
            sampler_kwargs.update(eval_n_envs=2, eval_max_steps=60,
                                  eval_max_trajectories=None if parallel else 4,
                                  eval_env_kwargs={})
    elif base == "r2d1":
        from rlpyt.agents.dqn.atari.atari_r2d1_agent import AtariR2d1Agent
        from rlpyt.algos.dqn.r2d1 import R2D1
        from rlpyt.samplers.parallel.cpu.collectors import CpuWaitResetCollector
        agent = AtariR2d1Agent(
            model_kwargs=dict(channels=[4], kernel_sizes=[4], strides=[2], paddings=[0],
                              fc_size=16, lstm_size=8, head_size=8),
            eps_final=0.05)
        algo = R2D1(batch_T=4, batch_B=4, warmup_T=2, store_rnn_state_interval=2,
                    min_steps_learn=48, replay_size=192, replay_ratio=4,
                    target_update_interval=5, n_step_return=2, learning_rate=1e-3,
                    eps_steps=200, pri_beta_steps=300)
        sampler_kwargs["CollectorCls"] = CpuWaitResetCollector
        env_cls, env_kwargs = AtariLike, {}
    elif base == "sac":
        from rlpyt.agents.qpg.sac_agent import SacAgent
        from rlpyt.algos.qpg.sac import SAC
        agent = SacAgent(model_kwargs=dict(hidden_sizes=[16, 16]),
                         q_model_kwargs=dict(hidden_sizes=[16, 16]))
        algo = SAC(batch_size=8, min_steps_learn=40, replay_size=200, replay_ratio=2,
                   learning_rate=1e-3)
        env_cls, env_kwargs = ContinuousLike, {}
    elif base in ("pong", "pong_eval"):
        from rlpyt.agents.dqn.atari.atari_dqn_agent import AtariDqnAgent
        from rlpyt.algos.dqn.dqn import DQN
        from rlpyt.envs.atari.atari_env import AtariEnv, AtariTrajInfo
        n_steps = PONG_ITRS * 8
        agent = AtariDqnAgent(
            model_kwargs=dict(channels=[4], kernel_sizes=[8], strides=[4], paddings=[0],
                              fc_sizes=16),
            eps_final=0.05, eps_eval=0.01)
        algo = DQN(replay_size=PONG_REPLAY, min_steps_learn=200, batch_size=16,
                   replay_ratio=2, eps_steps=1000, target_update_interval=20,
                   n_step_return=3, learning_rate=1e-3, double_dqn=True,
                   prioritized_replay=True, pri_beta_steps=1600, updates_per_sync=1)
        # Episodes cut at 150 steps so that several end (and reset) in a short run.
        env_cls, env_kwargs = AtariEnv, dict(game="pong", horizon=150)
        sampler_kwargs.update(TrajInfoCls=AtariTrajInfo, max_decorrelation_steps=30)
        if base == "pong_eval":
            runner_cls = "MinibatchRlEval"
            # In parallel: one eval env per worker (no eval_max_trajectories: above).
            sampler_kwargs.update(eval_n_envs=2 if parallel else 1, eval_max_steps=120,
                                  eval_max_trajectories=None if parallel else 2,
                                  eval_env_kwargs={})
    else:
        raise SystemExit(f"unknown config {config}")
    if "eval_env_kwargs" in sampler_kwargs:
        sampler_kwargs["eval_env_kwargs"] = env_kwargs
        if base.startswith("pong"):        # evaluation episodes that end within the cap
            sampler_kwargs["eval_env_kwargs"] = dict(env_kwargs, horizon=40)
    sampler = sampler_cls(EnvCls=env_cls, env_kwargs=env_kwargs, **sampler_kwargs)
    from rlpyt.runners import async_rl, minibatch_rl
    module = async_rl if runner_cls.startswith("Async") else minibatch_rl
    return getattr(module, runner_cls)(
        algo=algo, agent=agent, sampler=sampler, n_steps=n_steps,
        log_interval_steps=320 if base.startswith("pong") else 64, seed=7,
        **runner_kwargs)


# Pong runs: 8 steps an iteration; the 1000-step replay wraps at iteration 125,
# epsilon reaches its final value at 1000 steps (iteration 125).
PONG_ITRS = 240
PONG_REPLAY = 1000


class Recorder:
    def __init__(self, args):
        self.args = args
        self.itr = None
        self.events: list = []
        self.losses = 0
        self.saves = 0
        self.in_save = False
        self.kill_worker = None

    def add(self, kind, value):
        self.events.append([self.itr, kind, digest(value)])

    def hook_logger(self):
        set_iteration, record = logger.set_iteration, logger.record_tabular

        def set_iteration_(itr):
            self.itr = itr
            if self.args.kill_at_itr is not None and itr == self.args.kill_at_itr:
                if self.args.ckpt:   # "between checkpoints": the last one has been written
                    from namedschema.checkpoint._background import written
                    written(str(self.args.ckpt))
                os.kill(os.getpid(), signal.SIGKILL)
            if self.kill_worker is not None and itr == self.kill_worker[0]:
                os.kill(self.kill_worker[1], signal.SIGKILL)
            set_iteration(itr)

        def record_tabular(key, val, *a, **k):
            if not any(word in key for word in _TIMING_WORDS):
                self.add(f"log:{key}", val)
            return record(key, val, *a, **k)
        logger.set_iteration = set_iteration_
        logger.record_tabular = record_tabular

    def hook_components(self, runner):
        sampler, algo = runner.sampler, runner.algo
        if hasattr(sampler, "collector"):   # serial: envs in this process
            collect = sampler.collector.collect_batch

            def collect_batch(*a, **k):
                out = collect(*a, **k)
                self.add("batch", (sampler.samples_np, out[0]))
                return out
            sampler.collector.collect_batch = collect_batch
        else:                               # parallel: the batch reaches the algo
            to_buffer = algo.samples_to_buffer

            def samples_to_buffer(samples):
                self.add("batch", samples)
                return to_buffer(samples)
            algo.samples_to_buffer = samples_to_buffer
        sample = algo.replay_buffer.sample_batch

        def sample_batch(*a, **k):
            out = sample(*a, **k)
            self.add("replay", out)
            return out
        algo.replay_buffer.sample_batch = sample_batch
        loss = algo.loss

        def loss_(*a, **k):
            self.losses += 1
            if self.args.kill_in_loss is not None and self.itr == self.args.kill_in_loss:
                os.kill(os.getpid(), signal.SIGKILL)
            out = loss(*a, **k)
            self.add("loss", out)
            return out
        algo.loss = loss_

    def hook_saves(self):
        if self.args.kill_in_save is None:
            return
        number, where = self.args.kill_in_save.split(":")
        number = int(number)
        from namedschema import checkpoint  # resumable saves through checkpoint.save
        save = checkpoint.save
        write, replace, pwrite = os.write, os.replace, os.pwrite
        main_pid = os.getpid()

        def kill():
            # In a background writer (a fork) the training process dies first, as a kill
            # of the run would do; the writer dies with it (and here, at once).
            os.kill(main_pid, signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)

        @functools.wraps(save)
        def save_(*a, **k):
            # Armed from the start of save N until save N+1 begins: a small state is
            # written by the writer thread after save() returned, a large one by a fork
            # that inherits the count.
            self.saves += 1
            self.in_save = self.saves == number
            return save(*a, **k)

        def write_(fd, data):
            if self.in_save and where == "write":
                kill()
            return write(fd, data)

        def replace_(src, dst, *a, **k):
            if self.in_save and where == "replace":
                kill()
            return replace(src, dst, *a, **k)

        def pwrite_(fd, data, offset):
            if self.in_save and where == "pwrite":
                kill()
            return pwrite(fd, data, offset)
        checkpoint.save = save_
        os.write, os.replace, os.pwrite = write_, replace_, pwrite_


def strip_times(what, state):
    if what == "runner":
        state = {key: {k: v for k, v in value.items()
                       if k not in ("times", "_cum_time", "_cum_eval_time")}
                 for key, value in state.items()}
    return state


def components_state(runner):
    ctx = rstate.context(traj_info_cls=runner.sampler.TrajInfoCls, note_once=lambda m: None)
    return {what: strip_times(what, rstate.capture(
        runner if what == "runner" else getattr(runner, what), ctx))
        for what in ("agent", "algo", "sampler", "runner")}


def emulators_without_rng():
    """Final states compare emulators without their RNG: ALE seeds it from the clock.

    (atari_py does the same.) With rlpyt's default repeat_action_probability
    of 0 nothing draws from it, so two runs of rlpyt alone are equal but for
    those bytes; test_atari_state checks that a resume restores it.
    """
    def capture(env, ctx):
        return {"ale": np.frombuffer(env.ale.cloneState().serialize(), np.uint8)}
    rstate.register_handler("rlpyt.envs.atari.atari_env.AtariEnv", capture,
                            lambda env, state, ctx: None, attributes=("ale",))


def final_state(runner):
    if "rlpyt.envs.atari.atari_env" in sys.modules:
        emulators_without_rng()
    out = {what: digest(state) for what, state in components_state(runner).items()}
    # Pieces named separately, so that a failure says which one differs.
    out["rng"] = digest(rstate.rng_state())
    out["update_counter"] = runner.algo.update_counter
    out["replay"] = digest(rstate.data_state(runner.algo.replay_buffer))
    out["params"] = digest({k: v for k, v in runner.agent.state_dict().items()})
    out["optimizers"] = digest({k: v.state_dict() for k, v in vars(runner.algo).items()
                                if isinstance(v, torch.optim.Optimizer)})
    eps = getattr(runner.agent, "eps_sample", None)
    out["eps_sample"] = None if eps is None else np.asarray(eps, np.float64).tolist()
    out["beta"] = repr(getattr(runner.algo.replay_buffer, "beta", None))
    if hasattr(runner.sampler, "collector"):
        out["envs"] = digest([{k: v for k, v in vars(env).items() if k != "ale"}
                              for env in runner.sampler.collector.envs])
    out["views"] = views_intact(runner.algo.replay_buffer)
    return out


def views_intact(buffer):
    """Whether the buffer's views still share memory with their bases."""
    pairs = []
    if hasattr(buffer, "samples_new_frames"):
        pairs.append((buffer.samples_new_frames, buffer.samples_frames))
    tree = getattr(buffer, "priority_tree", None)
    if tree is not None:
        pairs.append((tree.priorities, tree.tree))
    return [bool(np.shares_memory(a, b)) for a, b in pairs]


def evaluations_in_canonical_order(sampler):
    """Parallel samplers queue evaluation trajectories as their workers finish them, so
    even two runs of rlpyt alone log them in different orders, and the float32 average of
    their returns can differ in the last bit (seen in CI: ``dqn_eval_cpu``, the same
    trajectories in three orders over ten runs of rlpyt alone). Sorted by content, the
    logged statistics depend only on which trajectories ended. Every run gets this,
    rlpyt alone included; serial samplers keep their (deterministic) order."""
    cls = type(sampler)     # on the class: nothing new in the sampler's own state
    evaluate = cls.evaluate_agent

    def evaluate_agent(self, itr):
        return sorted(evaluate(self, itr), key=digest)
    cls.evaluate_agent = evaluate_agent


def write_pids_after_startup(runner, path):
    """The main and worker pids, written as soon as rlpyt's startup forked the workers
    (before anything of a resume, which may fail)."""
    startup = runner.startup

    def startup_():
        n_itr = startup()
        with open(path, "w") as f:
            json.dump({"main": os.getpid(),
                       "workers": [w.pid for w in getattr(runner.sampler, "workers", [])]}, f)
        return n_itr
    runner.startup = startup_


def inject_worker_failure(where):
    """Every sampler worker raises in its resume or capture (forked: they inherit it)."""
    from namedschema.rlpyt.resume import workers
    name = {"resume": "_apply_worker_state", "capture": "_worker_state"}[where]
    original, main_pid = getattr(workers, name), os.getpid()

    def failing(*args, **kwargs):
        if os.getpid() != main_pid:
            raise RuntimeError(f"injected failure in the worker's {where}")
        return original(*args, **kwargs)
    setattr(workers, name, failing)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("config")
    parser.add_argument("out")
    parser.add_argument("--ckpt")
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--kill-at-itr", type=int)
    parser.add_argument("--kill-in-loss", type=int, metavar="ITR",
                        help="SIGKILL inside the first loss computation of iteration ITR")
    parser.add_argument("--kill-in-save")
    parser.add_argument("--sync-full-saves", action="store_true")
    parser.add_argument("--compression", help="resumable's compression= ('zstd', 'auto')")
    parser.add_argument("--unpicklable-env", action="store_true",
                        help="envs hold a lambda, so their state cannot be saved")
    parser.add_argument("--disable-handler", action="append", default=[],
                        help="rlpyt class whose state handler is replaced by a no-op "
                             "(to show what goes wrong without it)")
    parser.add_argument("--env-class", metavar="FILE:NAME",
                        help="the env class NAME of the Python file FILE (run as module "
                             "env_module), instead of the config's")
    parser.add_argument("--alone", action="store_true",
                        help="rlpyt alone: namedschema is imported only after training")
    parser.add_argument("--no-patch", action="store_true",
                        help="resumable without patch_rlpyt() (the one-call use)")
    parser.add_argument("--import-order", choices=("rlpyt-first", "namedschema-first"),
                        default="namedschema-first")
    parser.add_argument("--pids-file",
                        help="write the main and sampler worker pids (JSON) after startup")
    parser.add_argument("--kill-worker-at-itr", type=int, metavar="ITR",
                        help="SIGKILL sampler worker 1 at the start of iteration ITR")
    parser.add_argument("--fail-in-worker", choices=("resume", "capture"),
                        help="a RuntimeError in every sampler worker's resume or capture")
    args = parser.parse_args(argv)
    if args.alone and (args.ckpt or args.disable_handler):
        raise SystemExit("--alone runs rlpyt without namedschema: no --ckpt or handlers")
    if args.config.startswith("pong"):
        install_atari_adapter(args.alone or args.import_order == "rlpyt-first")
    if args.import_order == "rlpyt-first" or args.alone:
        import rlpyt.runners.minibatch_rl
        import rlpyt.samplers.serial.sampler  # noqa: F401
    if not args.alone:
        import_namedschema(patch=not args.no_patch)
    import_rlpyt_logger()
    for key in args.disable_handler:
        rstate.register_handler(key, lambda obj, ctx: {}, lambda obj, state, ctx: None)
    if args.fail_in_worker:
        inject_worker_failure(args.fail_in_worker)
    saved = None
    if args.ckpt and os.path.exists(args.ckpt):
        saved = namedschema.load(args.ckpt, allow_pickle=True)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    rec = Recorder(args)
    rec.hook_logger()
    rec.hook_saves()
    runner = build(args.config)
    from rlpyt.samplers.parallel.base import ParallelSamplerBase
    if isinstance(runner.sampler, ParallelSamplerBase):
        evaluations_in_canonical_order(runner.sampler)
    if args.env_class:
        runner.sampler.EnvCls = load_env_class(args.env_class)
    if args.unpicklable_env:
        from tests.rlpyt.envs import UnpicklableAtariLike
        runner.sampler.EnvCls = UnpicklableAtariLike
    if args.pids_file:
        write_pids_after_startup(runner, args.pids_file)
    resume = None
    if args.ckpt:
        from namedschema.rlpyt import resumable
        mode: dict = {"incremental": False, "background": False} if args.sync_full_saves else {}
        if args.compression:
            mode["compression"] = args.compression
        resumable(runner, args.ckpt, every_itrs=args.every, **mode)
        resume = runner._namedschema_resume
    startup = runner.startup

    roundtrip = {}

    def startup_():
        n_itr = startup()
        if saved is not None:
            # What was restored is what was saved, component by component.
            now = components_state(runner)
            roundtrip.update({k: digest(now[k]) == digest(strip_times(k, saved["state"][k]))
                              for k in now})
        rec.hook_components(runner)
        if args.kill_worker_at_itr is not None:
            rec.kill_worker = (args.kill_worker_at_itr, runner.sampler.workers[1].pid)
        return n_itr
    runner.startup = startup_
    runner.train()
    if args.alone:
        assert not any(m == "namedschema" or m.startswith("namedschema.")
                       for m in sys.modules), "rlpyt alone imported namedschema"
        import_namedschema(patch=False)
    result = {"events": rec.events, "final": final_state(runner),
              "start": resume.start if resume else 0,
              "notes": resume.notes if resume else [],
              "saves": resume.saves if resume else 0, "roundtrip": roundtrip,
              "history": [vars(s) for s in resume.writer.history] if resume else []}
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
