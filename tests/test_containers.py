"""Sequential, ModuleList and ModuleDict: every list/dict operation agrees with torch's."""

from collections import OrderedDict

import numpy as np
import pytest

import modulekit.nn as nn

torch = pytest.importorskip("torch")
tnn = torch.nn


def layers(lib, n):
    return [lib.Linear(i + 1, i + 2) for i in range(n)]


def geometry(container):
    return [
        (name, type(m).__name__, getattr(m, "in_features", None))
        for name, m in container.named_children()
    ]


def both(fn):
    """Run ``fn(lib)`` on torch.nn and modulekit.nn; return both results."""
    return fn(tnn), fn(nn)


# --------------------------------------------------------------------------- Sequential
def test_sequential_forward_chains_and_orders():
    seq = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    tseq = tnn.Sequential(tnn.Linear(3, 4), tnn.ReLU(), tnn.Linear(4, 2))
    seq.load_state_dict(tseq.state_dict())
    x = np.random.default_rng(0).random((5, 3), dtype=np.float32)
    np.testing.assert_allclose(
        seq(x), tseq(torch.from_numpy(x)).detach().numpy(), rtol=1e-6, atol=1e-6
    )


def test_sequential_ordereddict_names():
    t, m = both(lambda lib: lib.Sequential(OrderedDict(a=lib.ReLU(), b=lib.Tanh())))
    assert geometry(t) == geometry(m) and repr(t) == repr(m)


@pytest.mark.parametrize("idx", [0, 2, -1, -3, slice(1, None), slice(None, None, -1)])
def test_sequential_indexing(idx):
    t, m = both(lambda lib: lib.Sequential(*layers(lib, 3)))
    tv, mv = t[idx], m[idx]
    if isinstance(idx, slice):
        assert isinstance(mv, nn.Sequential) and geometry(tv) == geometry(mv)
    else:
        assert tv.in_features == mv.in_features


@pytest.mark.parametrize("idx", [3, -4])
def test_sequential_index_out_of_range(idx):
    with pytest.raises(IndexError, match="out of range"):
        nn.Sequential(*layers(nn, 3))[idx]


def test_sequential_mutations_match_torch():
    def ops(lib):
        s = lib.Sequential(*layers(lib, 4))
        s.append(lib.ReLU())
        s.insert(1, lib.Tanh())
        s.insert(-1, lib.Sigmoid())
        s.extend([lib.Identity(), lib.Linear(9, 9)])
        del s[2]
        del s[1:3]
        s[0] = lib.Linear(7, 7)
        popped = s.pop(-1)
        s2 = s + lib.Sequential(lib.ReLU())
        return s, s2, popped, len(s), [type(x).__name__ for x in s]

    t, m = both(ops)
    assert geometry(t[0]) == geometry(m[0])
    assert geometry(t[1]) == geometry(m[1])
    assert t[2].in_features == m[2].in_features
    assert t[3:] == m[3:]
    assert repr(t[0]) == repr(m[0])


def test_sequential_add_mul_and_errors():
    s = nn.Sequential(nn.ReLU(), nn.Tanh())
    assert len(s * 2) == 4 and len(2 * s) == 4
    with pytest.raises(ValueError, match="Sequential"):
        s + nn.ModuleList()
    with pytest.raises(ValueError, match="Non-positive"):
        s * 0
    with pytest.raises(TypeError):
        s * 1.5
    with pytest.raises(IndexError):
        s.insert(5, nn.ReLU())
    with pytest.raises(TypeError):
        s.append(3)
    s += nn.Sequential(nn.Sigmoid())
    assert [type(x).__name__ for x in s] == ["ReLU", "Tanh", "Sigmoid"]
    assert "0" not in dir(s)


# --------------------------------------------------------------------------- ModuleList
def test_modulelist_list_api_matches_torch():
    def ops(lib):
        ml = lib.ModuleList(layers(lib, 3))
        ml.append(lib.ReLU())
        ml.extend([lib.Tanh(), lib.Sigmoid()])
        ml.insert(0, lib.Identity())
        ml += [lib.Linear(8, 8)]
        del ml[1]
        del ml[::3]
        ml[-1] = lib.Linear(6, 6)
        popped = ml.pop(0)
        joined = ml + lib.ModuleList([lib.ReLU()])
        sliced = ml[1:3]
        return (
            [type(x).__name__ for x in ml],
            geometry(ml),
            type(popped).__name__,
            geometry(joined),
            type(sliced).__name__,
            geometry(sliced),
            len(ml),
            repr(ml),
        )

    t, m = both(ops)
    assert t == m


def test_modulelist_registration_errors_and_no_forward():
    ml = nn.ModuleList()
    with pytest.raises(TypeError):
        ml.append(np.zeros(1))
    with pytest.raises(TypeError, match="iterable"):
        ml.extend(3)
    with pytest.raises(IndexError):
        ml[0]
    with pytest.raises(NotImplementedError):
        ml(1)


def test_modulelist_repr_compresses_repeats_like_torch():
    t, m = both(lambda lib: lib.ModuleList([lib.Linear(2, 2) for _ in range(3)] + [lib.ReLU()] * 2))
    assert repr(t) == repr(m)


# --------------------------------------------------------------------------- ModuleDict
def test_moduledict_dict_api_matches_torch():
    def ops(lib):
        md = lib.ModuleDict({"a": lib.ReLU(), "b": lib.Linear(2, 3)})
        md["c"] = lib.Tanh()
        md.update([("d", lib.Sigmoid()), ["a", lib.Identity()]])
        md.update(OrderedDict(e=lib.Linear(4, 4)))
        popped = md.pop("b")
        del md["c"]
        return (
            list(md.keys()),
            [type(v).__name__ for v in md.values()],
            [(k, type(v).__name__) for k, v in md.items()],
            list(md),
            "d" in md,
            "b" in md,
            len(md),
            type(popped).__name__,
            repr(md),
            list(md.state_dict()),
        )

    t, m = both(ops)
    assert t == m


def test_moduledict_errors_and_clear():
    md = nn.ModuleDict({"a": nn.ReLU()})
    with pytest.raises(TypeError, match="iterable"):
        md.update(3)
    with pytest.raises(ValueError, match="length 3"):
        md.update([("x", nn.ReLU(), 1)])
    with pytest.raises(TypeError, match="element #0"):
        md.update([3])
    with pytest.raises(KeyError):
        md["a.b"] = nn.ReLU()
    with pytest.raises(TypeError):
        md["z"] = 5
    md.clear()
    assert len(md) == 0


def test_nested_containers_state_dict_and_load_with_torch():
    def build(lib):
        return lib.Sequential(
            lib.ModuleDict({"enc": lib.ModuleList([lib.Linear(3, 3), lib.Linear(3, 2)])}),
        )

    t, m = both(build)
    assert list(t.state_dict()) == list(m.state_dict())
    m.load_state_dict(t.state_dict())
    np.testing.assert_array_equal(
        np.asarray(m[0]["enc"][1].weight), t[0]["enc"][1].weight.detach().numpy()
    )
