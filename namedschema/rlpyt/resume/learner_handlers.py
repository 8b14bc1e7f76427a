"""State handlers of rlpyt's learner side: agents (models, epsilon, recurrent
state), algorithms (counters, optimizers, learning-rate schedulers) and replay
buffers. :func:`install` registers them (``namedschema.rlpyt.resume.state`` calls it).
"""

from __future__ import annotations

import copy

from ..._core.optional import is_tensor, torch_if_loaded
from .data_state import data_state, fresh_copy, restore_data_state
from .registry import StateMismatchError, capture, register_handler, restore

__all__ = ["install"]


# -- agents ------------------------------------------------------------------------

def _modules(obj) -> dict:
    """The torch modules among ``obj``'s attributes (an alias of one is listed once)."""
    torch = torch_if_loaded()
    if torch is None:
        return {}
    seen, out = set(), {}
    for name, value in vars(obj).items():
        if isinstance(value, torch.nn.Module) and id(value) not in seen:
            seen.add(id(value))
            out[name] = value
    return out


def _agent_capture(agent, ctx):
    return {"modules": {name: m.state_dict() for name, m in _modules(agent).items()},
            "mode": agent._mode}


def _agent_restore(agent, state, ctx):
    modules = _modules(agent)
    if sorted(modules) != sorted(state["modules"]):
        raise StateMismatchError(
            f"agent: the checkpoint has models {sorted(state['modules'])}, the built "
            f"agent {sorted(modules)}")
    for name, sd in state["modules"].items():
        # In place: shared-memory models stay shared with sampler workers.
        modules[name].load_state_dict(sd)
    agent._mode = state["mode"]


_EPS_NAMES = ("eps_sample", "eps_init", "eps_final", "eps_itr_min", "eps_itr_max",
              "_eps_itr_min_max")


def _eps_capture(agent, ctx):
    state = data_state(agent, _EPS_NAMES)
    dist = getattr(agent, "distribution", None)
    if dist is not None and hasattr(dist, "_epsilon"):
        state["distribution_epsilon"] = ["value", dist._epsilon] \
            if not is_tensor(dist._epsilon) else ["array", dist._epsilon]
    return state


def _eps_restore(agent, state, ctx):
    state = dict(state)
    dist_eps = state.pop("distribution_epsilon", None)
    for name in ("eps_sample", "eps_init", "eps_final"):
        # Tensors (vector epsilon) are replaced, not written into: rlpyt
        # rebinds these attributes itself, so nothing else holds them.
        if name in state:
            kind, data = state.pop(name)
            setattr(agent, name, fresh_copy(data))
    restore_data_state(agent, state, "agent")
    if dist_eps is not None and getattr(agent, "distribution", None) is not None:
        agent.distribution._epsilon = fresh_copy(dist_eps[1])


class _EpsilonAfterSchedule:
    """``agent.sample_mode`` that keeps epsilon right after the schedule ended.

    rlpyt sets ``eps_sample`` only while ``itr <= eps_itr_max``; a process that
    starts later (a resumed one, and its sampler workers) would keep
    ``eps_init`` forever. Past the schedule this sets what rlpyt computed at
    its end (the same expression with progress 1), so an uninterrupted run is
    unchanged bit for bit. An instance attribute, inherited by forked workers.
    """

    def __init__(self, agent, original):
        self.agent = agent
        self.original = original

    def __call__(self, itr):
        self.original(itr)
        agent = self.agent
        if itr > agent._eps_itr_min_max[1]:
            prog = 1
            agent.eps_sample = prog * agent.eps_final + (1 - prog) * agent.eps_init
            agent.distribution.set_epsilon(agent.eps_sample)


def _eps_prepare(agent, saved):
    if saved is not None and not isinstance(vars(agent).get("sample_mode"), _EpsilonAfterSchedule):
        agent.sample_mode = _EpsilonAfterSchedule(agent, agent.sample_mode)


def _rnn_capture(names):
    def capture_(agent, ctx):
        return {name: _plain(getattr(agent, name)) for name in names}
    return capture_


def _rnn_restore(names):
    def restore_(agent, state, ctx):
        for name in names:
            setattr(agent, name, _fresh_copy_deep(state[name]))
    return restore_


def _plain(value):
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _fresh_copy_deep(value):
    if isinstance(value, list):
        return [_fresh_copy_deep(v) for v in value]
    return fresh_copy(value)


# -- algorithms and replay buffers -------------------------------------------------

def _algo_capture(algo, ctx):
    torch = torch_if_loaded()
    state: dict = {"counters": data_state(algo, skip=("replay_buffer",))}
    if torch is not None:
        optim = {}
        for name, value in vars(algo).items():
            if isinstance(value, torch.optim.Optimizer) or _is_lr_scheduler(torch, value):
                optim[name] = value.state_dict()
        state["optimizers"] = optim
    buffer = getattr(algo, "replay_buffer", None)
    if buffer is not None:
        state["replay_buffer"] = capture(buffer, ctx)
    return state


def _is_lr_scheduler(torch, value) -> bool:
    return isinstance(value, torch.optim.lr_scheduler.LRScheduler)


def _algo_restore(algo, state, ctx):
    for name, sd in state.get("optimizers", {}).items():
        target = getattr(algo, name, None)
        if target is None:
            raise StateMismatchError(f"algo.{name}: the built algorithm has no {name}")
        # Copied: torch keeps the loaded tensors of an optimizer's state as given.
        target.load_state_dict(copy.deepcopy(sd))
    restore_data_state(algo, state["counters"], "algo")
    if "replay_buffer" in state:
        buffer = getattr(algo, "replay_buffer", None)
        if buffer is None:
            raise StateMismatchError("algo.replay_buffer: the built algorithm has none")
        restore(buffer, state["replay_buffer"], ctx, "algo.replay_buffer")


def _replay_capture(buffer, ctx):
    return data_state(buffer)


def _replay_restore(buffer, state, ctx):
    restore_data_state(buffer, state, "replay_buffer")


def install() -> None:
    """Register the handlers of rlpyt's agents, algorithms and replay buffers."""
    agents = "rlpyt.agents."
    register_handler(agents + "base.BaseAgent", _agent_capture, _agent_restore)
    register_handler(agents + "dqn.epsilon_greedy.EpsilonGreedyAgentMixin",
                     _eps_capture, _eps_restore, prepare=_eps_prepare)
    rnn = ("_prev_rnn_state", "_sample_rnn_state")
    register_handler(agents + "base.RecurrentAgentMixin", _rnn_capture(rnn),
                     _rnn_restore(rnn))
    alt = ("_alt", "_prev_rnn_state", "_prev_rnn_state_pair", "_sample_rnn_state_pair")
    register_handler(agents + "base.AlternatingRecurrentAgentMixin", _rnn_capture(alt),
                     _rnn_restore(alt))
    register_handler("rlpyt.algos.base.RlAlgorithm", _algo_capture, _algo_restore)
    register_handler("rlpyt.replays.base.BaseReplayBuffer", _replay_capture,
                     _replay_restore)
