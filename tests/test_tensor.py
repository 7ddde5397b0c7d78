import copy
import pickle
import sys

import ml_dtypes
import numpy as np
import pytest

import modulekit as mk
from modulekit import Parameter, Tensor

FLOATS = [mk.float32, mk.float64, mk.float16, mk.bfloat16]


# ---- DataType and Device -------------------------------------------------------------------
@pytest.mark.parametrize(
    "dt, np_dt, floating",
    [
        (mk.float32, np.float32, True),
        (mk.float64, np.float64, True),
        (mk.float16, np.float16, True),
        (mk.bfloat16, ml_dtypes.bfloat16, True),
        (mk.int64, np.int64, False),
        (mk.int32, np.int32, False),
        (mk.int8, np.int8, False),
        (mk.uint8, np.uint8, False),
        (mk.bool_, np.bool_, False),
    ],
)
def test_datatype_roundtrip(dt, np_dt, floating):
    assert dt.numpy == np.dtype(np_dt)
    assert mk.DataType(np_dt) is dt
    assert mk.DataType(np.dtype(np_dt)) is dt
    assert mk.DataType(dt.name) is dt
    assert mk.DataType(dt) is dt
    assert dt.is_floating is floating
    assert dt.itemsize == np.dtype(np_dt).itemsize
    assert pickle.loads(pickle.dumps(dt)) is dt
    assert copy.deepcopy(dt) is dt


def test_datatype_aliases_and_refusals():
    assert mk.DataType("half") is mk.float16
    assert mk.DataType("double") is mk.float64
    assert mk.DataType("torch.float32") is mk.float32
    with pytest.raises(TypeError, match="unknown data type 'float8'"):
        mk.DataType("float8")
    with pytest.raises(TypeError, match="complex64"):
        mk.DataType(np.complex64)
    with pytest.raises(TypeError, match="cannot interpret"):
        mk.DataType(object())


def test_device():
    assert mk.Device("cpu") is mk.Device() is mk.Device("cpu:0")
    assert str(mk.Device("cpu")) == "cpu" and mk.Device("cpu") == "cpu"
    for bad in ("cuda", "cuda:0", "mps", "tpu"):
        with pytest.raises(ValueError, match="modulekit runs on the CPU only"):
            mk.Device(bad)
    with pytest.raises(TypeError):
        mk.Device(3)


# ---- construction ---------------------------------------------------------------------------
def test_constructor_copies_and_infers_dtype():
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    t = Tensor(a)
    assert t.dtype is mk.float64 and t.shape == (2, 3) and t.ndim == 2 and t.numel() == 6
    assert not np.shares_memory(t.numpy(), a)
    assert Tensor([1.0, 2.0]).dtype is mk.float32  # Python floats: float32, as torch
    assert Tensor([1, 2]).dtype is mk.int64
    assert Tensor([True]).dtype is mk.bool_
    assert Tensor(a, dtype="float16").dtype is mk.float16
    assert Tensor(3.5).shape == ()
    assert Tensor(memoryview(np.ones(3, np.int32))).dtype is mk.int32


def test_constructor_non_contiguous_and_odd_inputs():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2]
    t = Tensor(a)
    assert t.numpy().flags.c_contiguous
    np.testing.assert_array_equal(t.numpy(), a)
    f = np.asfortranarray(np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(Tensor(f).numpy(), f)


def test_constructor_refusals():
    with pytest.raises(TypeError, match="complex"):
        Tensor(np.zeros(2, np.complex64))
    with pytest.raises(TypeError, match="objects"):
        Tensor([object()])
    with pytest.raises(TypeError, match="uint16"):
        Tensor(np.zeros(2, np.uint16))


def test_from_numpy_shares_memory():
    a = np.zeros((3, 4), np.float32)
    t = Tensor.from_numpy(a)
    a[1, 2] = 7
    assert t[1, 2] == 7
    with pytest.raises(ValueError, match="C-contiguous"):
        Tensor.from_numpy(a.T)
    with pytest.raises(TypeError):
        Tensor.from_numpy([1, 2])


def test_torch_tensor_input():
    torch = pytest.importorskip("torch")
    x = torch.randn(3, 4)
    np.testing.assert_array_equal(Tensor(x).numpy(), x.numpy())
    b = torch.randn(5).to(torch.bfloat16)
    t = Tensor(b)
    assert t.dtype is mk.bfloat16
    np.testing.assert_array_equal(t.numpy().astype(np.float32), b.float().numpy())


# ---- buffer protocol and NumPy views -------------------------------------------------------
@pytest.mark.parametrize("dt", [mk.float32, mk.float64, mk.float16, mk.int64, mk.uint8])
def test_buffer_protocol_shares_memory(dt):
    t = Tensor(np.arange(12).reshape(3, 4), dtype=dt)
    m = memoryview(t)
    assert m.shape == (3, 4) and m.nbytes == t.nbytes and not m.readonly
    a = np.asarray(t)
    assert a.dtype == dt.numpy and np.shares_memory(a, t.numpy())
    a[0, 0] = 5
    assert t[0, 0] == 5 and np.frombuffer(m, dt.numpy)[0] == 5
    m.release()


def test_buffer_export_does_not_leak():
    t = Tensor(np.ones(4, np.float32))
    arr = t.numpy()
    before = sys.getrefcount(arr)
    for _ in range(1000):
        memoryview(t).release()
    after = sys.getrefcount(arr)
    assert after == before


def test_bfloat16_views():
    t = Tensor(np.arange(4, dtype=np.float32), dtype="bfloat16")
    a = np.asarray(t)
    assert a.dtype == ml_dtypes.bfloat16 and np.shares_memory(a, t.numpy())
    with pytest.raises(BufferError, match="bfloat16 has no PEP 3118"):
        memoryview(t)


# ---- casts ------------------------------------------------------------------------------------
@pytest.mark.parametrize("src", FLOATS)
@pytest.mark.parametrize("dst", FLOATS)
def test_to_matches_numpy_casts(src, dst, rng):
    base = (rng.standard_normal((5, 7)) * 100).astype(src.numpy)
    t = Tensor(base)
    out = t.to(dst)
    assert out.dtype is dst and (out is t) == (src is dst)
    np.testing.assert_array_equal(out.numpy().view(np.uint8), base.astype(dst.numpy).view(np.uint8))
    assert t.to("cpu") is t and t.to(mk.Device("cpu")) is t
    with pytest.raises(ValueError, match="CPU only"):
        t.to("cuda")


@pytest.mark.parametrize("src", FLOATS)
@pytest.mark.parametrize("dst", FLOATS)
@pytest.mark.parametrize("n", [1, 7, 4099])
def test_inplace_cast_keeps_identity(src, dst, n, rng):
    base = rng.standard_normal(n).astype(src.numpy)
    p = Parameter(base)
    expected = base.astype(dst.numpy)
    same = p._cast_(dst)
    assert same is p and p.dtype is dst and p.shape == (n,)
    np.testing.assert_array_equal(p.numpy().view(np.uint8), expected.view(np.uint8))


def test_inplace_narrowing_leaves_views_intact(rng):
    base = rng.standard_normal((64, 64)).astype(np.float32)
    p = Parameter(base)
    held = np.asarray(p)
    mv = memoryview(p)
    p._cast_(mk.float16)
    np.testing.assert_array_equal(held, base)  # the old view still shows float32 values
    np.testing.assert_array_equal(np.frombuffer(mv, np.float32).reshape(64, 64), base)
    np.testing.assert_array_equal(p.numpy(), base.astype(np.float16))


def test_inplace_narrowing_reuses_memory_when_alone(rng):
    p = Parameter(rng.standard_normal(1 << 16).astype(np.float32))
    p._cast_(mk.float16)
    assert p.nbytes == (1 << 16) * 2
    owner = p.numpy()
    while owner.base is not None:
        owner = owner.base
    assert owner.nbytes == (1 << 16) * 2  # the float32 buffer was shrunk, not kept


def test_copy_(rng):
    p = Parameter(np.zeros((2, 3), np.float16))
    keep = p.numpy()
    src = rng.standard_normal((2, 3))
    assert p.copy_(src) is p
    assert p.numpy() is keep
    np.testing.assert_array_equal(p.numpy(), src.astype(np.float16))
    with pytest.raises(ValueError, match=r"\(3, 2\).*\(2, 3\)"):
        p.copy_(np.zeros((3, 2)))


def test_integer_casts_and_refusal():
    t = Tensor(np.arange(4), dtype="int64")
    assert t.to("float32").numpy().tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(TypeError, match="unknown data type"):
        t.to("float128")


# ---- Parameter, repr, pickling ----------------------------------------------------------------
def test_parameter_shares_tensor_memory():
    t = Tensor(np.ones(3, np.float32))
    p = Parameter(t)
    assert isinstance(p, Tensor) and np.shares_memory(p.numpy(), t.numpy())
    assert Parameter(np.ones(2), requires_grad=False).dtype is mk.float64
    assert Parameter().shape == (0,)


def test_repr_like_torch():
    torch = pytest.importorskip("torch")
    values = [[0.1913, -0.3420], [-0.5113, -0.2325]]
    assert repr(Tensor(values)) == repr(torch.tensor(values))
    assert repr(Tensor(values, dtype="float16")) == repr(
        torch.tensor(values, dtype=torch.float16)
    ).replace("torch.", "modulekit.")
    assert repr(Tensor([1, 2, 3])) == repr(torch.tensor([1, 2, 3]))
    p = Parameter(values)
    assert repr(p).startswith("Parameter containing:\ntensor([[ 0.1913, -0.3420],")


@pytest.mark.parametrize("dt", FLOATS + [mk.int64, mk.bool_])
def test_pickle_and_copy(dt):
    p = Parameter(np.arange(6).reshape(2, 3), dtype=dt)
    q = pickle.loads(pickle.dumps(p))
    assert type(q) is Parameter and q.dtype is dt
    np.testing.assert_array_equal(q.numpy(), p.numpy())
    d = copy.deepcopy(p)
    assert not np.shares_memory(d.numpy(), p.numpy())
    assert np.shares_memory(copy.copy(p).numpy(), p.numpy())
    scalar = pickle.loads(pickle.dumps(Tensor(np.ones((), dt.numpy))))
    assert scalar.shape == () and scalar.dtype is dt  # a 0-d tensor stays 0-d


def test_identity_semantics():
    a, b = Tensor([1.0]), Tensor([1.0])
    assert a != b and len({a, b}) == 2 and a == a
