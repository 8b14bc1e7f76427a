"""Capture and restore the training state of rlpyt components, one handler per class.

A component's state is ``{handler key: captured dict}`` for every class in its
method resolution order that has a handler, so mixins compose: a
``DqnAgent`` is handled by ``BaseAgent`` (its torch modules) and by
``EpsilonGreedyAgentMixin`` (epsilon), an ``R2d1Agent`` also by
``RecurrentAgentMixin`` (its recurrent states). Supporting a new rlpyt class
is one :func:`register_handler` call.

Captured state is data wherever it can be (arrays, tensors, numbers, lists,
dicts), so a checkpoint stores it raw; restoring writes arrays *into* the
objects a freshly built run made (``np.copyto``), which keeps views as views
and shared memory shared. Only objects that are not data (an environment's
own attributes, say) are pickled by the checkpoint.

This module is the public face; importing it installs the handlers of rlpyt's
classes. Where things live: the registry and its composition in ``_registry``,
generic data state, trajectory infos and RNGs in ``_data_state``, the handlers
of agents, algorithms and replay buffers in ``_learner_handlers``, those of
envs, collectors, samplers and runners in ``_sampling_handlers``.

register_handler   add or replace the handler of one class
capture            the state of one component (a dict)
restore            put a captured state back into a freshly built component
check              why a component cannot be resumed exactly (list of strings)
prepare            what a resume must do to a component before rlpyt's startup
data_state / restore_data_state   generic attribute-wise state, for handlers
rng_state / set_rng_state         the global RNGs (Python, numpy, torch)
"""

from __future__ import annotations

from . import _learner_handlers, _sampling_handlers
from ._data_state import (
    data_state,
    fresh_copy,
    make_traj_infos,
    restore_data_state,
    rng_state,
    set_rng_state,
    traj_infos_state,
)
from ._registry import (
    Handler,
    StateMismatchError,
    capture,
    check,
    handlers_for,
    prepare,
    register_handler,
    restore,
)
from ._sampling_handlers import is_async_sampler

__all__ = ["register_handler", "capture", "restore", "check", "prepare", "data_state",
           "fresh_copy", "is_async_sampler", "traj_infos_state", "make_traj_infos",
           "restore_data_state", "rng_state", "set_rng_state", "Handler",
           "StateMismatchError", "handlers_for"]

_learner_handlers.install()
_sampling_handlers.install()
