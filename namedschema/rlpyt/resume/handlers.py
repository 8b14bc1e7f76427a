"""Every state handler of rlpyt's classes, in one table.

A component's state is captured by the handlers of every class in its MRO
that this table (or a user, through ``register_handler``) lists, base
classes first; the order here is only the order of reading. Supporting a new
rlpyt class is one row. Keys are ``"module.QualName"``, so nothing here
imports rlpyt.

BUILTIN   the rows: ``(class key, Handler)``
"""

from __future__ import annotations

from . import atari_state as atari
from . import learner_handlers as learner
from . import sampling_handlers as sampling
from . import workers
from .registry import Handler

__all__ = ["BUILTIN"]

_AGENTS = "rlpyt.agents."
_SAMPLERS = "rlpyt.samplers."


def _row(key: str, capture, restore, check=None, prepare=None,
         attributes: tuple[str, ...] = ()) -> tuple[str, Handler]:
    # rlpyt's handlers copy into existing memory: restore gets the checkpoint's arrays.
    return key, Handler(capture, restore, check, prepare, attributes, writable=False)


BUILTIN: tuple[tuple[str, Handler], ...] = (
    # -- learner side: agents, algorithms, replay buffers (learner_handlers)
    _row(_AGENTS + "base.BaseAgent", learner.agent_capture, learner.agent_restore),
    _row(_AGENTS + "dqn.epsilon_greedy.EpsilonGreedyAgentMixin", learner.eps_capture,
         learner.eps_restore, prepare=learner.eps_prepare),
    _row(_AGENTS + "base.RecurrentAgentMixin", learner.rnn_capture(learner.RNN_STATE),
         learner.rnn_restore(learner.RNN_STATE)),
    _row(_AGENTS + "base.AlternatingRecurrentAgentMixin",
         learner.rnn_capture(learner.ALTERNATING_RNN_STATE),
         learner.rnn_restore(learner.ALTERNATING_RNN_STATE)),
    _row("rlpyt.algos.base.RlAlgorithm", learner.algo_capture, learner.algo_restore),
    _row("rlpyt.replays.base.BaseReplayBuffer", learner.replay_capture,
         learner.replay_restore),
    # -- experience side: envs, collectors, samplers, runners (sampling_handlers)
    _row(sampling.ENV, sampling.env_capture, sampling.env_restore, sampling.env_check),
    _row(_SAMPLERS + "collectors.BaseCollector", sampling.collector_capture,
         sampling.collector_restore, sampling.collector_check),
    _row(_SAMPLERS + "collectors.BaseEvalCollector", sampling.eval_collector_capture,
         sampling.collector_restore, sampling.collector_check),
    _row(_SAMPLERS + "serial.sampler.SerialSampler", sampling.serial_sampler_capture,
         sampling.serial_sampler_restore, sampling.serial_sampler_check),
    _row("rlpyt.runners.minibatch_rl.MinibatchRlBase", sampling.minibatch_capture,
         sampling.minibatch_restore),
    _row("rlpyt.runners.async_rl.AsyncRlBase", sampling.async_capture,
         sampling.minibatch_restore),
    _row(sampling.ASYNC_SAMPLER, sampling.nothing_to_capture, sampling.nothing_to_restore,
         sampling.async_sampler_check),
    # -- Atari's emulator (atari_state)
    _row(atari.ATARI_ENV, atari.atari_capture, atari.atari_restore, atari.atari_check,
         attributes=("ale",)),
    # -- parallel samplers: their workers' envs, in other processes (workers)
    _row(workers.PARALLEL_SAMPLER, workers.parallel_sampler_capture,
         workers.parallel_sampler_restore, workers.parallel_sampler_check,
         workers.parallel_sampler_prepare),
)
