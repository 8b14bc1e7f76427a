"""The table of state kinds behind RunCheckpoint: matching order, registering rows."""

import numpy as np
import pytest

import namedschema
from namedschema.errors import RunCheckpointError, StateMismatchError
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


# -- one resume engine: each kind read and written in one place (issue 29) -------------------

_ONE_PLACE = {
    # Atari emulators: ale-py's and atari_py's state calls.
    "namedschema/state/env.py": {"cloneState", "cloneSystemState", "restoreState",
                                 "restoreSystemState", "encodeState", "decodeState"},
    # Generators: random.Random, RandomState, torch.Generator and torch's global one.
    "namedschema/state/rng.py": {"getstate", "setstate", "get_state", "set_state",
                                 "get_rng_state", "get_rng_state_all", "set_rng_state_all"},
}


def _calls(path):
    import ast
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    return {node.func.attr for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)}


@pytest.mark.slow
def test_each_kind_of_state_is_captured_and_restored_in_one_module():
    """RunCheckpoint, namedschema.sb3 and namedschema.rlpyt.resumable read and write
    emulators only through namedschema.state.env, generators only through
    namedschema.state.rng (before: the emulator in two modules, generators in three)."""
    import os

    from tests.helpers import REPO_ROOT
    found: dict = {}
    for folder, _dirs, files in os.walk(os.path.join(REPO_ROOT, "namedschema")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, REPO_ROOT).replace(os.sep, "/")
                for owner, methods in _ONE_PLACE.items():
                    if rel != owner and _calls(path) & methods:
                        found.setdefault(owner, []).append(rel)
    assert found == {}, f"state read or written outside its module: {found}"
    for owner, methods in _ONE_PLACE.items():       # the check sees the calls where they are
        assert _calls(os.path.join(REPO_ROOT, owner)) & methods


def test_rlpyt_resume_uses_the_rows_of_the_state_kind_table():
    """The rlpyt handlers capture a torch module and an optimizer with the ``state_dict``
    row: the state is the row's, and a saved state that does not fit is refused before
    anything is loaded, naming the parameter."""
    torch = pytest.importorskip("torch")
    from namedschema.errors import StateMismatchError
    from namedschema.rlpyt.resume import state as rstate
    ctx = rstate.context(note_once=lambda message: None)
    net = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    net(torch.ones(3)).sum().backward()
    opt.step()
    kctx = KindContext("opt", "", allow_pickle=True)
    assert kind_of(opt).name == "state_dict"
    saved = ctx.capture_kind(opt, "algo.optim")
    assert repr(saved) == repr(kind_of(opt).capture(opt, kctx))
    other = torch.nn.Linear(4, 2)
    before = [p.detach().clone() for p in other.parameters()]
    with pytest.raises(StateMismatchError, match=r"agent\.model: .*weight was saved as"):
        ctx.restore_kind(other, ctx.capture_kind(net, "agent.model"), "agent.model")
    assert all(torch.equal(a, b) for a, b in zip(before, other.parameters(), strict=True))
    fresh = torch.nn.Linear(3, 2)
    ctx.restore_kind(fresh, ctx.capture_kind(net, "agent.model"), "agent.model")
    assert all(torch.equal(a, b) for a, b in zip(net.parameters(), fresh.parameters(),
                                                 strict=True))


# -- a refusal names its component once (StateMismatchError.where) ----------------------------

def _refusing(where):
    """A row for Counter whose check refuses every state, with ``where`` set or not."""
    def check(obj, state, ctx):
        raise StateMismatchError("the count does not fit", where=ctx.name if where else None)
    return StateKind("test_counter", lambda obj: isinstance(obj, Counter),
                     capture=COUNTER.capture, apply=COUNTER.apply, check=check)


@pytest.mark.parametrize("names_itself", [True, False])
def test_run_checkpoint_adds_the_component_to_a_refusal_that_does_not_name_it(
        monkeypatch, tmp_path, names_itself):
    """A refusal whose ``where`` is set already names the component and passes through
    as it is; one raised below that layer (an env's own check) gets the name added."""
    monkeypatch.setattr(state_kinds, "_rows", list(state_kinds.KINDS))
    state_kinds.register_kind(COUNTER, before="dict")
    namedschema.RunCheckpoint(tmp_path / "c.nsc", background=False).track(
        counter=Counter()).save(0)
    monkeypatch.setattr(state_kinds, "_rows", list(state_kinds.KINDS))
    state_kinds.register_kind(_refusing(names_itself), before="dict")
    ckpt = namedschema.RunCheckpoint(tmp_path / "c.nsc").track(counter=Counter())
    with pytest.raises(StateMismatchError) as info:
        ckpt.restore()
    assert info.value.where == "counter"
    if names_itself:
        assert str(info.value) == "the count does not fit"
    else:
        assert str(info.value).startswith("RunCheckpoint: 'counter' cannot be restored from ")
        assert "StateMismatchError: the count does not fit (nothing in the run changed)" \
            in str(info.value)


@pytest.mark.parametrize("names_itself", [True, False])
def test_rlpyt_resume_adds_the_component_to_a_refusal_that_does_not_name_it(names_itself):
    from namedschema.rlpyt.resume import state as rstate
    ctx = rstate.context(note_once=lambda message: None)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(state_kinds, "_rows", list(state_kinds.KINDS))
        state_kinds.register_kind(_refusing(names_itself), before="dict")
        with pytest.raises(StateMismatchError) as info:
            ctx.restore_kind(Counter(), {"n": 1}, "algo.counter")
    assert info.value.where == "algo.counter"
    assert str(info.value) == ("the count does not fit" if names_itself
                               else "algo.counter: the count does not fit")
