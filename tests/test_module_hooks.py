"""Forward hooks and pre-hooks: the same scenarios run on torch and modulekit must agree."""

import warnings

import pytest

import modulekit.nn as nn
from modulekit.module import Module

torch = pytest.importorskip("torch")


class MkAdd(Module):
    def forward(self, a, b=0):
        return a + b


class TAdd(torch.nn.Module):
    def forward(self, a, b=0):
        return a + b


class MkFail(Module):
    def forward(self, a):
        raise ZeroDivisionError("forward failed")


class TFail(torch.nn.Module):
    def forward(self, a):
        raise ZeroDivisionError("forward failed")


@pytest.fixture(params=["torch", "modulekit"])
def lib(request):
    return request.param


def make(lib, kind="add"):
    if kind == "add":
        return TAdd() if lib == "torch" else MkAdd()
    return TFail() if lib == "torch" else MkFail()


def test_pre_hook_replaces_args_single_value_wrapped(lib):
    m = make(lib)
    m.register_forward_pre_hook(lambda mod, args: args[0] * 10)  # single value -> (value,)
    assert m(2) == 20
    m2 = make(lib)
    m2.register_forward_pre_hook(lambda mod, args: (args[0], 5))
    assert m2(1) == 6
    m3 = make(lib)
    m3.register_forward_pre_hook(lambda mod, args: None)
    assert m3(4, b=1) == 5


def test_pre_hook_with_kwargs(lib):
    m = make(lib)
    seen = []

    def hook(mod, args, kwargs):
        seen.append((args, dict(kwargs)))
        return args, {"b": 100}

    m.register_forward_pre_hook(hook, with_kwargs=True)
    assert m(1, b=2) == 101
    assert seen == [((1,), {"b": 2})]
    bad = make(lib)
    bad.register_forward_pre_hook(lambda mod, a, k: 3, with_kwargs=True)
    with pytest.raises(RuntimeError, match="forward pre-hook must return None or a tuple"):
        bad(1)


def test_forward_hook_replaces_output_and_sees_args(lib):
    m = make(lib)
    seen = []

    def hook(mod, args, out):
        seen.append((mod is m, args, out))
        return out + 1

    m.register_forward_hook(hook)
    m.register_forward_hook(lambda mod, args, out: None)  # None keeps the output
    assert m(3, b=1) == 5
    assert seen == [(True, (3,), 4)]  # keyword arguments are not in args


def test_forward_hook_with_kwargs(lib):
    m = make(lib)
    m.register_forward_hook(lambda mod, args, kwargs, out: (args, kwargs, out), with_kwargs=True)
    assert m(1, b=2) == ((1,), {"b": 2}, 3)


def test_prepend_orders(lib):
    m = make(lib)
    order = []
    m.register_forward_pre_hook(lambda mod, a: order.append("pre1"))
    m.register_forward_pre_hook(lambda mod, a: order.append("pre0"), prepend=True)
    m.register_forward_hook(lambda mod, a, o: order.append("post1"))
    m.register_forward_hook(lambda mod, a, o: order.append("post0"), prepend=True)
    m.register_forward_hook(lambda mod, a, o: order.append("post2"))
    m(1)
    assert order == ["pre0", "pre1", "post0", "post1", "post2"]


def test_always_call_hooks_run_when_forward_raises_then_error_propagates(lib):
    m = make(lib, "fail")
    order = []
    m.register_forward_hook(lambda mod, a, o: order.append(("plain", o)))
    m.register_forward_hook(lambda mod, a, o: order.append(("always", o)), always_call=True)
    m.register_forward_hook(
        lambda mod, a, k, o: order.append(("always_kw", k)), always_call=True, with_kwargs=True
    )
    with pytest.raises(ZeroDivisionError):
        m(1)
    assert order == [("always", None), ("always_kw", {})]


def test_always_call_hook_failing_after_error_warns(lib):
    m = make(lib, "fail")

    def broken(mod, a, o):
        raise ValueError("hook broken")

    m.register_forward_hook(broken, always_call=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ZeroDivisionError):
            m(1)
    assert any("hook broken" in str(w.message) for w in caught)


def test_always_call_hook_not_rerun_when_a_later_hook_raises(lib):
    m = make(lib)
    calls = []
    m.register_forward_hook(lambda mod, a, o: calls.append("always"), always_call=True)

    def later(mod, a, o):
        raise KeyError("later")

    m.register_forward_hook(later)
    with pytest.raises(KeyError):
        m(1)
    assert calls == ["always"]


def test_handles_remove_and_context_manager(lib):
    m = make(lib)
    h = m.register_forward_hook(lambda mod, a, o: o * 2)
    assert m(2) == 4
    h.remove()
    assert m(2) == 2
    with m.register_forward_pre_hook(lambda mod, a: (a[0] + 1,)):
        assert m(2) == 3
    assert m(2) == 2
    h_kw = m.register_forward_hook(lambda mod, a, k, o: 0, with_kwargs=True, always_call=True)
    h_kw.remove()
    assert m(5) == 5


def test_no_hook_fast_path_flag_tracks_registrations():
    m = MkAdd()
    assert m._has_hooks is False
    h1 = m.register_forward_pre_hook(lambda mod, a: None)
    h2 = m.register_forward_hook(lambda mod, a, o: None)
    assert m._has_hooks is True
    h1.remove()
    assert m._has_hooks is True
    h2.remove()
    assert m._has_hooks is False
    assert type(m).__call__ is Module.__call__


def test_hooks_fire_inside_containers():
    seq = nn.Sequential(nn.Identity(), nn.Identity())
    seen = []
    seq[1].register_forward_hook(lambda mod, a, o: seen.append(o))
    assert seq(7) == 7 and seen == [7]
