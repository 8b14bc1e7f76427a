"""The table of state kinds behind RunCheckpoint: matching order, registering rows."""

import numpy as np
import pytest

import namedschema
from namedschema.errors import RunCheckpointError
from namedschema.training import state_kinds
from namedschema.training.state_kinds import KindContext, StateKind, kind_named, kind_of


class Counter:
    """An object no built-in row captures."""

    def __init__(self):
        self.n = 0


def _check_counter(obj, state, ctx):
    if int(state["n"]) < 0:
        raise RunCheckpointError(f"{ctx.name!r}: negative count")


COUNTER = StateKind(
    "test_counter", lambda obj: isinstance(obj, Counter),
    capture=lambda obj, ctx: {"n": obj.n},
    apply=lambda obj, state, ctx: setattr(obj, "n", int(state["n"])),
    check=_check_counter, accepts="test counters")


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setattr(state_kinds, "_rows", list(state_kinds.KINDS))
    state_kinds.register_kind(COUNTER, before="dict")
    return COUNTER


def test_built_in_rows_match_in_table_order():
    assert kind_of(np.random.default_rng(0)).name == "generator"
    assert kind_of(np.zeros(3)).name == "array"
    assert kind_of({"a": 1}).name == "dict"
    assert kind_of(np.random).name == "numpy_random_state"
    assert kind_named("env") is not None and kind_named("no such kind") is None


def test_an_unknown_object_lists_every_row_it_could_have_been():
    with pytest.raises(TypeError, match="cannot capture a Counter.*numpy arrays"):
        kind_of(Counter())


def test_a_registered_row_is_tried_and_named_in_the_error(registered):
    assert kind_of(Counter()) is registered
    state_kinds.register_kind(COUNTER)          # the same row again: a no-op
    with pytest.raises(ValueError, match="exists"):
        state_kinds.register_kind(StateKind("test_counter", bool, COUNTER.capture,
                                            COUNTER.apply))
    with pytest.raises(ValueError, match="no state kind named 'nope'"):
        state_kinds.register_kind(StateKind("other", bool, COUNTER.capture, COUNTER.apply),
                                  before="nope")


def test_a_registered_row_round_trips_through_run_checkpoint(registered, tmp_path):
    counter, rng = Counter(), np.random.default_rng(1)
    counter.n = 41
    namedschema.RunCheckpoint(tmp_path / "c.nsc", background=False).track(
        counter=counter, rng=rng).save(3)
    again = Counter()
    ckpt = namedschema.RunCheckpoint(tmp_path / "c.nsc").track(
        counter=again, rng=np.random.default_rng(2))
    assert ckpt.restore() and again.n == 41 and ckpt.step == 3


def test_checks_run_for_every_component_before_any_is_applied(registered, tmp_path):
    counter, array = Counter(), np.arange(3.0)
    counter.n = -1
    namedschema.RunCheckpoint(tmp_path / "c.nsc", background=False).track(
        array=array, counter=counter).save(0)
    target = np.zeros(3)
    ckpt = namedschema.RunCheckpoint(tmp_path / "c.nsc").track(array=target, counter=Counter())
    with pytest.raises(RunCheckpointError, match="negative count"):
        ckpt.restore()
    assert not target.any(), "an array was restored before a later check failed"


def test_context_names_the_component():
    ctx = KindContext("net", "run.nsc")
    assert ctx.name == "net" and ctx.restarted == {}
