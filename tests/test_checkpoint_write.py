"""``modulekit.save`` writes the format the file's extension names, checked against the
format's own reader as the oracle: ``numpy.load(allow_pickle=False)`` for ``.npz``,
``torch.load(weights_only=True)`` for ``.pt``/``.pth``/``.bin`` (torch's zip format written
without torch), the ``safetensors`` package for ``.safetensors`` (issue #15 item 6)."""

import os
import pickle

import ml_dtypes
import numpy as np
import pytest

from modulekit import Tensor
from modulekit.checkpoint import detect_format, load, save
from modulekit.checkpoint._common import FileBuffer, dtype_name
from modulekit.checkpoint._zip import read_central_directory
from modulekit.checkpoint.torch_zip import _PickleWriter

torch = pytest.importorskip("torch")
st_numpy = pytest.importorskip("safetensors.numpy")

BF16 = np.dtype(ml_dtypes.bfloat16)
TORCH_DTYPES = {
    "float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "int64": torch.int64, "int32": torch.int32,
    "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool,
}


def every_dtype(bf16=True):
    """One value of each dtype modulekit has, and the awkward cases: 0-d, zero-size,
    non-contiguous, non-native byte order, a Tensor, a tied pair."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 5)).astype(np.float32)
    state = {
        "f32": a,
        "f64": rng.standard_normal(7),
        "f16": rng.standard_normal((2, 2)).astype(np.float16),
        "i64": np.array([-(2**62), 3, 2**40], np.int64),
        "i32": np.int32([-7, 8]),
        "i8": np.int8([-128, 127]),
        "u8": np.uint8([0, 255]),
        "bool": np.array([[True, False], [False, True]]),
        "scalar": np.array(2.5, np.float32),
        "empty": np.zeros((2, 0, 3), np.float32),
        "strided": rng.standard_normal((4, 6)).astype(np.float32)[:, ::2],
        "big_endian": np.arange(5, dtype=">f4"),
        "tensor": Tensor(rng.standard_normal((2, 3)).astype(np.float32)),
        "tied": a,
    }
    if bf16:
        state["bf16"] = rng.standard_normal(9).astype(np.float32).astype(BF16)
        state["bf16_tensor"] = Tensor(np.float32([1.5, -2.0]), dtype="bfloat16")
    return state


def as_numpy(value):
    return np.ascontiguousarray(np.asarray(value))


def assert_same(got, want, key):
    want = as_numpy(want)
    got = as_numpy(got)
    assert got.shape == want.shape, key
    assert got.dtype == want.dtype.newbyteorder("="), key
    assert got.tobytes() == want.astype(want.dtype.newbyteorder("=")).tobytes(), key


def torch_to_numpy(t):
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(BF16)
    return t.numpy()


@pytest.mark.parametrize("ext", [".pt", ".pth", ".bin", ".PT"])
def test_torch_extensions_write_torch_zip_that_torch_loads_weights_only(tmp_path, ext):
    state = every_dtype()
    path = tmp_path / f"model{ext}"
    save(state, path)
    assert detect_format(path) == "torch-zip"
    theirs = torch.load(path, weights_only=True)
    assert type(theirs).__name__ == "OrderedDict" and list(theirs) == list(state)
    for key, value in state.items():
        t = theirs[key]
        assert not t.requires_grad
        assert t.dtype == TORCH_DTYPES[dtype_name(as_numpy(value).dtype.newbyteorder("="))]
        assert t.is_contiguous()
        assert_same(torch_to_numpy(t), value, key)
    # tied values share their storage, in torch as in modulekit
    assert theirs["tied"].data_ptr() == theirs["f32"].data_ptr()
    ours = load(path)
    assert ours["tied"] is ours["f32"]
    for key, value in state.items():
        assert_same(ours[key].numpy(), value, key)


def test_torch_zip_records_are_aligned_and_stored(tmp_path):
    path = tmp_path / "a.pt"
    save({f"k{i}": np.full(i + 1, i, np.float32) for i in range(5)}, path)
    entries = read_central_directory(FileBuffer(path))
    data = [e for name, e in entries.items() if "/data/" in name]
    assert len(data) == 5
    assert all(e.method == 0 and e.data_start % 64 == 0 for e in data)
    assert {n.split("/")[0] for n in entries} == {"archive"}


def test_torch_zip_many_keys_and_large_ints(tmp_path):
    # > 256 memo entries (LONG_BINPUT / LONG_BINGET) and sizes past one byte
    state = {f"layer.{i}.weight": np.full((i % 3 + 1, 300), i, np.float32) for i in range(300)}
    state["again"] = state["layer.299.weight"]
    path = tmp_path / "many.pt"
    save(state, path)
    theirs = torch.load(path, weights_only=True)
    ours = load(path)
    for key, value in state.items():
        np.testing.assert_array_equal(theirs[key].numpy(), value)
        np.testing.assert_array_equal(ours[key].numpy(), value)
    assert ours["again"] is ours["layer.299.weight"]


@pytest.mark.parametrize("value", [0, 255, 256, -1, 2**31 - 1, 2**31, -(2**31) - 1, 2**40,
                                   -(2**63)])
def test_pickle_writer_ints_round_trip(value):
    p = _PickleWriter()
    p.int_(value)
    p.out += b"."
    assert pickle.loads(bytes(p.out)) == value


def test_npz_is_what_numpy_loads_without_pickle(tmp_path):
    state = every_dtype(bf16=False)
    path = tmp_path / "model.npz"
    save(state, path)
    assert detect_format(path) == "npz"
    with np.load(path, allow_pickle=False) as theirs:
        assert list(theirs.files) == list(state)
        for key, value in state.items():
            assert_same(theirs[key], value, key)
    ours = load(path)
    for key, value in state.items():
        assert_same(ours[key].numpy(), value, key)


def test_npz_refuses_bfloat16_and_writes_nothing(tmp_path):
    with pytest.raises(TypeError, match=r"state\['bf16'\].*bfloat16.*\.safetensors or \.pt"):
        save({"ok": np.ones(2, np.float32), "bf16": np.ones(2, BF16)}, tmp_path / "x.npz")
    assert os.listdir(tmp_path) == []


def test_safetensors_is_what_the_safetensors_package_loads(tmp_path):
    state = every_dtype()
    path = tmp_path / "model.safetensors"
    save(state, path)
    theirs = st_numpy.load_file(str(path))
    for key, value in state.items():
        if key != "tied":  # written once, recorded as an alias of "f32"
            assert_same(theirs[key], value, key)
    ours = load(path)
    for key, value in state.items():
        assert_same(ours[key].numpy(), value, key)


@pytest.mark.parametrize("name", ["model", "model.ckpt", "model.safetensor", "model.npy",
                                  "model.tar"])
def test_unknown_extension_is_refused_listing_what_is_written(tmp_path, name):
    with pytest.raises(ValueError, match=r"\.safetensors.*\.npz.*\.pt.*\.pth.*\.bin.*format="):
        save({"x": np.ones(2)}, tmp_path / name)
    assert os.listdir(tmp_path) == []


def test_format_overrides_the_extension(tmp_path):
    save({"x": np.ones(2)}, tmp_path / "weights.bin", format="safetensors")
    assert detect_format(tmp_path / "weights.bin") == "safetensors"
    save({"x": np.ones(2)}, tmp_path / "weights", format="torch-zip")
    assert detect_format(tmp_path / "weights") == "torch-zip"
    with pytest.raises(ValueError, match="unknown format 'pickle'"):
        save({"x": np.ones(2)}, tmp_path / "w.pt", format="pickle")


@pytest.mark.parametrize("name", ["x.npz", "x.pt"])
def test_metadata_only_in_safetensors(tmp_path, name):
    with pytest.raises(ValueError, match="metadata is stored only in safetensors"):
        save({"x": np.ones(2)}, tmp_path / name, metadata={"a": "b"})
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("name", ["x.npz", "x.pt", "x.safetensors"])
def test_bad_values_refused_in_every_format_writing_nothing(tmp_path, name):
    with pytest.raises(TypeError, match="keys must be str"):
        save({1: np.zeros(2)}, tmp_path / name)
    with pytest.raises(TypeError, match=r"state\['x'\].*int16"):
        save({"a": np.zeros(2), "x": np.zeros(2, np.int16)}, tmp_path / name)
    with pytest.raises(TypeError, match="mapping"):
        save([np.zeros(2)], tmp_path / name)
    assert os.listdir(tmp_path) == []
