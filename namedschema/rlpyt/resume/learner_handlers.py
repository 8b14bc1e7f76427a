"""State handlers of rlpyt's learner side: agents (models, epsilon, recurrent
state), algorithms (counters, optimizers, learning-rate schedulers) and replay
buffers. The table of :mod:`.handlers` says which class each one handles.
"""

from __future__ import annotations

import copy

from ..._core.optional import is_tensor, torch_if_loaded
from .data_state import data_state, fresh_copy, restore_data_state
from .registry import ResumeContext, StateMismatchError

__all__ = ["agent_capture", "agent_restore", "eps_capture", "eps_restore", "eps_prepare",
           "rnn_capture", "rnn_restore", "RNN_STATE", "ALTERNATING_RNN_STATE",
           "algo_capture", "algo_restore", "replay_capture", "replay_restore"]


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


def agent_capture(agent, ctx: ResumeContext) -> dict:
    return {"modules": {name: m.state_dict() for name, m in _modules(agent).items()},
            "mode": agent._mode}


def agent_restore(agent, state, ctx: ResumeContext) -> None:
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


def eps_capture(agent, ctx: ResumeContext) -> dict:
    state = data_state(agent, _EPS_NAMES)
    dist = getattr(agent, "distribution", None)
    if dist is not None and hasattr(dist, "_epsilon"):
        state["distribution_epsilon"] = ["value", dist._epsilon] \
            if not is_tensor(dist._epsilon) else ["array", dist._epsilon]
    return state


def eps_restore(agent, state, ctx: ResumeContext) -> None:
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


def eps_prepare(agent, saved, ctx: ResumeContext) -> None:
    if saved is not None and not isinstance(vars(agent).get("sample_mode"), _EpsilonAfterSchedule):
        agent.sample_mode = _EpsilonAfterSchedule(agent, agent.sample_mode)


# The recurrent-state attributes of rlpyt's recurrent agent mixins.
RNN_STATE = ("_prev_rnn_state", "_sample_rnn_state")
ALTERNATING_RNN_STATE = ("_alt", "_prev_rnn_state", "_prev_rnn_state_pair",
                         "_sample_rnn_state_pair")


def rnn_capture(names):
    """A capture of the attributes ``names`` (recurrent states: arrays or lists of them)."""
    def capture_(agent, ctx):
        return {name: _plain(getattr(agent, name)) for name in names}
    return capture_


def rnn_restore(names):
    """The restore of :func:`rnn_capture`'s state."""
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

def algo_capture(algo, ctx: ResumeContext) -> dict:
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
        state["replay_buffer"] = ctx.capture(buffer)
    return state


def _is_lr_scheduler(torch, value) -> bool:
    return isinstance(value, torch.optim.lr_scheduler.LRScheduler)


def algo_restore(algo, state, ctx: ResumeContext) -> None:
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
        ctx.restore(buffer, state["replay_buffer"], "algo.replay_buffer")


def replay_capture(buffer, ctx: ResumeContext) -> dict:
    return data_state(buffer)


def replay_restore(buffer, state, ctx: ResumeContext) -> None:
    restore_data_state(buffer, state, "replay_buffer")
