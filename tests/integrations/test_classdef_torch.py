"""Class-syntax schemas with torch: weights_only loading and tensor fields."""

from __future__ import annotations

import io

import pytest

torch = pytest.importorskip("torch")

from tests.core import class_schemas as cs  # noqa: E402
from tests.helpers import run_fresh  # noqa: E402


def test_weights_only_load_keeps_the_class_and_its_methods():
    step = cs.Transition(torch.zeros(3, 2, dtype=torch.uint8), torch.arange(3),
                         torch.ones(3), None)
    buf = io.BytesIO()
    torch.save({"samples": step, "cfg": cs.Config(0.1)}, buf)
    buf.seek(0)
    back = torch.load(buf, weights_only=True)
    assert type(back["samples"]) is cs.Transition and back["samples"][1:].steps == 2
    assert type(back["cfg"]) is cs.Config and back["cfg"].discount(1) == 0.99
    assert torch.equal(back["samples"].reward, step.reward)


def test_weights_only_load_in_a_fresh_interpreter_imports_nothing(tmp_path):
    path = tmp_path / "ckpt.pt"
    torch.save(cs.Transition(torch.zeros(2, 2), torch.arange(2), torch.ones(2)), path)
    proc = run_fresh(f"""
        import sys, torch, namedschema
        x = torch.load({str(path)!r}, weights_only=True)
        assert "tests.core.class_schemas" not in sys.modules
        print(type(x).__name__, x.reward.tolist(), hasattr(x, "total_reward"))
        """)
    assert proc.stdout.split() == [b"Transition", b"[1.0,", b"1.0]", b"False"]
