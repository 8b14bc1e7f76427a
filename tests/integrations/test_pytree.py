"""Pytrees: torch.utils._pytree, torch's C++ pytree, optree and torch.func.vmap keep schema types."""

from __future__ import annotations

import collections

import pytest

torch = pytest.importorskip("torch")

import torch.utils._pytree as pytree  # noqa: E402
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import namedschema as ns  # noqa: E402
from namedschema._core.schema import same_definition  # noqa: E402
from namedschema.integrations.torch import batch_dims  # noqa: E402

Inner = ns.NamedArrayTupleSchema("Inner", "pos vel")
Traj = ns.NamedArrayTupleSchema("Traj", "obs inner done")
# Distinct classes with one definition: nothing below may merge them.
TwinA = ns.NamedArrayTupleSchema("Twin", "a b")
TwinB = ns.NamedArrayTupleSchema("Twin", "a b")


def _example():
    return Traj(torch.arange(6.0).reshape(3, 2), Inner(torch.ones(3), None), None)


def _optree():
    return pytest.importorskip("optree")


def _cxx():
    _optree()
    import torch.utils._cxx_pytree as cxx
    return cxx


def test_twins_have_one_definition_but_are_distinct():
    """The twin schemas used below really share a definition and are distinct types."""
    assert same_definition(TwinA, TwinB) and TwinA != TwinB


def test_torch_pytree_flatten_unflatten_nested():
    """torch pytree flattens nested instances (None is a leaf) and unflattens to the same types."""
    x = _example()
    leaves, spec = pytree.tree_flatten(x)
    assert len(leaves) == 4 and leaves[2] is None and leaves[3] is None
    y = pytree.tree_unflatten(leaves, spec)
    assert type(y) is Traj and type(y.inner) is Inner and y.done is None


def test_torch_pytree_tree_map_keeps_types():
    """torch pytree tree_map returns the same schema types, None passed to the function."""
    seen = []

    def f(leaf):
        seen.append(leaf is None)
        return None if leaf is None else leaf * 2
    y = pytree.tree_map(f, _example())
    assert type(y) is Traj and type(y.inner) is Inner
    assert seen == [False, False, True, True]
    assert torch.equal(y.inner.pos, torch.full((3,), 2.0))


def _outcome(func):
    try:
        return type(func())
    except Exception as exc:
        return type(exc)


def test_torch_pytree_twins_keep_own_type():
    """Distinct schemas with one definition each unflatten to their own class under
    torch pytree, and mapping over both at once does what it does for namedtuple twins."""
    a, b = TwinA(torch.ones(1), None), TwinB(torch.ones(1), None)
    for x in (a, b):
        leaves, spec = pytree.tree_flatten(x)
        assert type(pytree.tree_unflatten(leaves, spec)) is type(x)
        assert type(pytree.tree_map(lambda v: v, x)) is type(x)
    NtA, NtB = collections.namedtuple("Twin", "a b"), collections.namedtuple("Twin", "a b")
    nta, ntb = NtA(torch.ones(1), None), NtB(torch.ones(1), None)
    for first, second, nt_first, nt_second in ((a, b, nta, ntb), (b, a, ntb, nta)):
        ours = _outcome(lambda x=first, y=second: pytree.tree_map(lambda u, v: u, x, y))
        theirs = _outcome(lambda x=nt_first, y=nt_second: pytree.tree_map(lambda u, v: u, x, y))
        assert (ours is type(first)) == (theirs is type(nt_first)), (ours, theirs)
        assert ours is type(first) or ours is theirs


def test_torch_pytree_needs_no_registration():
    """Schemas are handled by torch's generic namedtuple node; none is put in its registry."""
    pytree.tree_flatten(_example())
    assert Traj not in pytree.SUPPORTED_NODES and TwinA not in pytree.SUPPORTED_NODES
    assert pytree.is_namedtuple_class(Traj) and pytree.is_namedtuple_class(TwinB)


def test_cxx_pytree_keeps_types_none_is_leaf():
    """torch's C++ (optree-backed) pytree keeps types, nested twins too, with None as a leaf."""
    cxx = _cxx()
    x = Traj(TwinA(torch.ones(1), None), TwinB(torch.zeros(1), torch.ones(2)), None)
    leaves, spec = cxx.tree_flatten(x)
    assert len(leaves) == 5 and leaves[1] is None and leaves[4] is None
    y = cxx.tree_unflatten(leaves, spec)
    assert type(y) is Traj and type(y.obs) is TwinA and type(y.inner) is TwinB


def test_optree_none_is_empty_node_by_default():
    """optree treats None fields as empty nodes by default, as leaves with none_is_leaf=True."""
    optree = _optree()
    x = _example()
    leaves, spec = optree.tree_flatten(x)
    assert len(leaves) == 2 and all(isinstance(v, torch.Tensor) for v in leaves)
    y = optree.tree_unflatten(spec, leaves)
    assert type(y) is Traj and type(y.inner) is Inner and y.done is None
    leaves, spec = optree.tree_flatten(x, none_is_leaf=True)
    assert len(leaves) == 4 and leaves[2] is None
    assert type(optree.tree_unflatten(spec, leaves)) is Traj


def test_optree_map_and_twins():
    """optree tree_map keeps each twin's own type, including over two trees."""
    optree = _optree()
    a, b = TwinA(torch.ones(1), Inner(torch.ones(1), None)), TwinB(torch.zeros(1), None)
    assert type(optree.tree_map(lambda v: v + 1, a)) is TwinA
    assert type(optree.tree_map(lambda v: v + 1, b)) is TwinB
    c = TwinB(torch.zeros(1), Inner(torch.zeros(1), None))
    # Two trees of distinct namedtuple types: optree refuses them, for stdlib twins too.
    NtA, NtB = collections.namedtuple("Twin", "a b"), collections.namedtuple("Twin", "a b")
    with pytest.raises(ValueError, match="namedtuple type mismatch"):
        optree.tree_map(lambda u, v: u + v, NtA(1, 2), NtB(3, 4))
    with pytest.raises(ValueError, match="namedtuple type mismatch"):
        optree.tree_map(lambda u, v: u + v, a, c)
    d = TwinA(torch.zeros(1), Inner(torch.zeros(1), None))
    assert type(optree.tree_map(lambda u, v: u + v, a, d)) is TwinA
    assert optree.is_namedtuple_class(TwinA)


def test_vmap_with_none_field_needs_batch_dims():
    """vmap over an instance with a None field fails with in_dims=0 and works with batch_dims."""
    x = _example()

    def f(t):
        return Traj(t.obs.sum(), Inner(t.inner.pos * 2, t.inner.vel), t.done)
    with pytest.raises(ValueError, match="NoneType"):
        torch.func.vmap(f)(x)
    dims = batch_dims(x)
    y = torch.func.vmap(f, in_dims=(dims,), out_dims=dims)(x)
    assert type(y) is Traj and type(y.inner) is Inner and y.done is None
    assert torch.equal(y.obs, x.obs.sum(1)) and torch.equal(y.inner.pos, x.inner.pos * 2)


def test_vmap_all_tensor_fields_default_dims():
    """vmap with default in_dims/out_dims works for instances whose fields are all tensors."""
    x = TwinA(torch.randn(4, 3), torch.randn(4))
    y = torch.func.vmap(lambda t: type(t)(t.a.sum() + t.b, t.b))(x)
    assert type(y) is TwinA and torch.allclose(y.a, x.a.sum(1) + x.b)


def test_func_grad_through_instance():
    """torch.func.grad differentiates a loss of a NamedArrayTuple and returns the same schema."""
    x = Inner(torch.tensor([1.0, 2.0]), torch.tensor([3.0]))
    g = torch.func.grad(lambda t: (t.pos ** 2).sum() + t.vel.sum())(x)
    assert type(g) is Inner and torch.equal(g.pos, torch.tensor([2.0, 4.0]))


_names = st.lists(st.sampled_from(list("abcdef")), min_size=1, max_size=4, unique=True)


@st.composite
def _trees(draw, depth=0):
    names = draw(_names)
    kind = draw(st.sampled_from([ns.NamedArrayTupleSchema, ns.NamedTupleSchema]))
    schema = kind(f"T{depth}", names)
    values = []
    for _ in names:
        choice = draw(st.integers(0, 2 if depth < 2 else 1))
        values.append(None if choice == 0 else draw(_trees(depth + 1)) if choice == 2
                      else torch.full((draw(st.integers(0, 3)),), float(depth)))
    return schema(*values)


def _same_structure(a, b):
    if isinstance(a, tuple):
        return (type(a) is type(b) and len(a) == len(b)
                and all(_same_structure(u, v) for u, v in zip(a, b, strict=True)))
    if a is None:
        return b is None
    return torch.equal(a, b)


@given(_trees())
def test_pytree_roundtrip_property(tree):
    """Any nesting round-trips through torch pytree and optree with the exact types."""
    leaves, spec = pytree.tree_flatten(tree)
    assert _same_structure(tree, pytree.tree_unflatten(leaves, spec))
    assert _same_structure(tree, pytree.tree_map(lambda v: v, tree))
    try:
        import optree
    except ImportError:
        return
    leaves, spec = optree.tree_flatten(tree)
    assert _same_structure(tree, optree.tree_unflatten(spec, leaves))
