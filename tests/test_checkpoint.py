"""modulekit.checkpoint: files written by torch.save, safetensors and numpy, compared value by
value; the writer's round trip; and the reader's refusals (every one a CheckpointError)."""

import collections
import io
import json
import os
import struct
import zipfile

import ml_dtypes
import numpy as np
import pytest

from modulekit import Parameter, Tensor
from modulekit.checkpoint import CheckpointError, detect_format, load, save

torch = pytest.importorskip("torch")

TORCH_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
                torch.int32, torch.int8, torch.uint8, torch.bool]


def _bits(x):
    """An ndarray whose bytes are the tensor's bytes (bfloat16 as uint16), for exact compare."""
    if isinstance(x, torch.Tensor):
        x = x.detach()
        if x.dtype == torch.bfloat16:
            return x.contiguous().view(torch.int16).numpy().view(np.uint16)
        return x.contiguous().numpy()
    arr = x.numpy() if isinstance(x, Tensor) else np.asarray(x)
    return arr.view(np.uint16) if arr.dtype == ml_dtypes.bfloat16 else arr


def _same(expected, got):
    a, b = _bits(expected), _bits(got)
    assert a.shape == b.shape and a.dtype == b.dtype
    assert a.tobytes() == b.tobytes()


def _tsave(obj, path, fmt):
    torch.save(obj, path, _use_new_zipfile_serialization=(fmt == "zip"))
    return path


def _random(dtype, shape, gen):
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen, dtype=torch.float32).to(dtype)
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    return torch.randint(-100 if dtype.is_signed else 0, 100, shape, generator=gen,
                         dtype=dtype)


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(0)


# ---- torch.save: zip and legacy ---------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["zip", "legacy"])
def test_torch_every_dtype(tmp_path, gen, fmt):
    state = {f"t.{str(d)[6:]}": _random(d, (3, 5), gen) for d in TORCH_DTYPES}
    state["scalar"] = torch.tensor(7, dtype=torch.int64)
    state["empty"] = torch.zeros(0, 4)
    path = _tsave(state, tmp_path / "m.pt", fmt)
    assert detect_format(path) == ("torch-zip" if fmt == "zip" else "torch-legacy")
    got = load(path)
    assert list(got) == list(state)
    for k, v in state.items():
        assert type(got[k]) is Tensor
        _same(v, got[k])


@pytest.mark.parametrize("fmt", ["zip", "legacy"])
def test_torch_views_shared_storage_and_params(tmp_path, gen, fmt):
    w = torch.randn(6, 8, generator=gen)
    state = collections.OrderedDict()
    state["w"] = torch.nn.Parameter(w)
    state["rows"] = w[2:4]                    # contiguous view with an offset
    state["col"] = w[:, 3]                    # strided
    state["t"] = w.t()                        # transposed
    state["expanded"] = torch.arange(3.0).expand(4, 3)   # stride 0
    state["same"] = state["rows"]             # the same tensor object twice
    path = _tsave(state, tmp_path / "v.pt", fmt)
    got = load(path)
    ref = torch.load(path, weights_only=True)
    for k in state:
        _same(ref[k], got[k])
        assert got[k].numpy().flags.c_contiguous
    assert type(got["w"]) is Parameter and type(got["rows"]) is Tensor
    assert got["same"] is got["rows"]
    # views of one storage share one buffer; the strided ones are contiguous copies
    assert np.shares_memory(got["w"].numpy(), got["rows"].numpy())
    assert not np.shares_memory(got["w"].numpy(), got["t"].numpy())


@pytest.mark.parametrize("fmt", ["zip", "legacy"])
def test_torch_module_state_dict_and_nested(tmp_path, fmt):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    model(torch.randn(5, 4))  # BatchNorm running stats move
    sd = model.state_dict()   # an OrderedDict with a `_metadata` attribute (pickled via BUILD)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    ckpt = {"state_dict": sd, "epoch": 3, "optimizer": opt.state_dict(), "name": "run"}
    got = load(_tsave(ckpt, tmp_path / "c.pt", fmt))
    assert list(got) == list(sd)
    for k in sd:
        _same(sd[k], got[k])
    assert got["1.num_batches_tracked"].shape == ()
    # without a state_dict entry: nested containers flatten to dotted keys
    flat = load(_tsave({"model": sd, "extra": [torch.ones(2)], "step": 5}, tmp_path / "n.pt",
                       fmt))
    assert set(flat) == {f"model.{k}" for k in sd} | {"extra.0"}
    _same(sd["0.weight"], flat["model.0.weight"])


def test_torch_zip_root_name_and_file_objects(tmp_path, gen):
    state = {"a": torch.randn(3, generator=gen)}
    buf = io.BytesIO()
    torch.save(state, buf)  # root "archive"
    (tmp_path / "x.bin").write_bytes(buf.getvalue())
    torch.save(state, tmp_path / "some_other-name.pt")
    for p in (tmp_path / "x.bin", tmp_path / "some_other-name.pt"):
        _same(state["a"], load(p)["a"])
    names = zipfile.ZipFile(tmp_path / "x.bin").namelist()
    assert "archive/data.pkl" in names


def _rewrite_zip(src, dst, replace=None, compress=False, drop=()):
    """Copy a zip record by record, replacing some records' bytes."""
    replace = replace or {}
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            if info.filename in drop:
                continue
            data = replace.get(info.filename, zin.read(info.filename))
            zout.writestr(info.filename, data,
                          compress_type=zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED)
    return dst


def test_torch_zip_deflated_and_big_endian(tmp_path, gen):
    state = {"f": torch.randn(4, 3, generator=gen), "h": torch.randn(5).half(),
             "b": torch.randn(2).bfloat16(), "i": torch.arange(6)}
    src = torch.save(state, tmp_path / "s.pt") or tmp_path / "s.pt"
    got = load(_rewrite_zip(src, tmp_path / "d.pt", compress=True))
    for k in state:
        _same(state[k], got[k])
    # a big-endian archive: byteorder record says so, storages hold big-endian bytes
    with zipfile.ZipFile(src) as z:
        records = {i.filename: z.read(i.filename) for i in z.infolist()}
    root = next(n for n in records if n.endswith("/data.pkl")).split("/")[0]
    swapped = {f"{root}/byteorder": b"big"}
    for name, data in records.items():
        if name.startswith(f"{root}/data/"):
            for t in state.values():
                if t.untyped_storage().nbytes() == len(data) and \
                        bytes(t.untyped_storage()) == data:
                    k = t.element_size()
                    swapped[name] = np.frombuffer(data, np.uint8).reshape(-1, k)[:, ::-1] \
                        .tobytes()
    got = load(_rewrite_zip(src, tmp_path / "be.pt", replace=swapped))
    for k in state:
        _same(state[k], got[k])


def test_torch_unsupported_dtype_refused_by_name(tmp_path):
    path = _tsave({"x": torch.ones(2, dtype=torch.int16)}, tmp_path / "i16.pt", "zip")
    with pytest.raises(CheckpointError, match="int16"):
        load(path)
    path = _tsave({"x": torch.ones(2, dtype=torch.complex64)}, tmp_path / "c.pt", "legacy")
    with pytest.raises(CheckpointError, match="complex64"):
        load(path)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_torchscript_archive_refused(tmp_path):
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), tmp_path / "ts.pt")
    with pytest.raises(CheckpointError, match="TorchScript"):
        load(tmp_path / "ts.pt")


# ---- memory maps --------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["safetensors", "zip", "legacy"])
def test_mmap_zero_copy_private_and_writable(tmp_path, kind):
    w = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    path = tmp_path / "m.bin"
    if kind == "safetensors":
        save({"w": w}, path, format="safetensors")
    else:
        _tsave({"w": torch.from_numpy(w.copy())}, path, kind)
    before = path.read_bytes()
    t = load(path)["w"]
    arr = t.numpy()
    base = arr
    while getattr(base, "base", None) is not None:
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    if kind != "legacy":  # legacy storages sit at unaligned offsets: those are copied
        import mmap

        assert isinstance(base, mmap.mmap)
    arr[0, 0] = -1.0  # writable, copy-on-write
    assert path.read_bytes() == before
    got = load(path, mmap=False)["w"].numpy()
    assert got[0, 0] == 0.0 and got.flags.writeable
    np.testing.assert_array_equal(got, w)


# ---- safetensors written by the safetensors package ------------------------------------------
def test_safetensors_package_files(tmp_path):
    st_numpy = pytest.importorskip("safetensors.numpy")
    st_torch = pytest.importorskip("safetensors.torch")
    rng = np.random.default_rng(0)
    arrays = {
        "f32": rng.standard_normal((3, 4)).astype(np.float32),
        "f64": rng.standard_normal(5),
        "f16": rng.standard_normal((2, 2)).astype(np.float16),
        "i64": rng.integers(-9, 9, (4,)), "i32": rng.integers(-9, 9, (2, 3)).astype(np.int32),
        "i8": rng.integers(-9, 9, (7,)).astype(np.int8),
        "u8": rng.integers(0, 255, (3,)).astype(np.uint8),
        "b": rng.random(6) > 0.5, "scalar": np.array(2.5, np.float32),
        "empty": np.zeros((0, 3), np.float32),
    }
    st_numpy.save_file(arrays, tmp_path / "n.safetensors", metadata={"format": "np"})
    got, meta = load(tmp_path / "n.safetensors", metadata=True)
    assert meta == {"format": "np"}
    assert set(got) == set(arrays)
    for k, v in arrays.items():
        _same(v, got[k])
    bf = {"w": torch.randn(4, 3).bfloat16(), "h": torch.randn(3).half()}
    st_torch.save_file(bf, tmp_path / "t.safetensors")
    got = load(tmp_path / "t.safetensors")
    for k in bf:
        _same(bf[k], got[k])


# ---- save -----------------------------------------------------------------------------------
def test_save_roundtrip_bit_exact_and_interop(tmp_path):
    rng = np.random.default_rng(1)
    f32 = rng.standard_normal((5, 3)).astype(np.float32)
    f32[0, 0] = np.float32(np.nan)
    f32.view(np.uint32)[0, 1] = 0x7FC00001  # a NaN payload
    state = {
        "f32": Tensor(f32), "f64": rng.standard_normal(3), "f16": f32.astype(np.float16),
        "bf16": Tensor(f32, dtype="bfloat16"), "i64": np.arange(5), "i8": np.int8([1, -2]),
        "u8": np.uint8([250]), "b": np.array([True, False]), "list": [[1.0, 2.0]],
        "p": Parameter(np.ones(3, np.float32)), "strided": f32[:, 1],
        "scalar": np.float64(3.0), "empty": np.zeros((2, 0), np.int32),
    }
    path = tmp_path / "s.safetensors"
    save(state, path, metadata={"who": "me"})
    got, meta = load(path, metadata=True)
    assert meta == {"who": "me"}
    for k, v in state.items():
        _same(v, got[k])
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert (8 + n) % 8 == 0
    header = json.loads(raw[8:8 + n])
    for k, info in header.items():
        if k != "__metadata__":
            assert info["data_offsets"][0] % np.dtype(_bits(state[k]).dtype).itemsize == 0
    st_numpy = pytest.importorskip("safetensors.numpy")
    plain = st_numpy.load_file(path) if "bf16" not in state else None
    del plain
    st_torch = pytest.importorskip("safetensors.torch")
    theirs = st_torch.load_file(path)
    for k, v in state.items():
        _same(v, theirs[k])
    # deterministic: insertion order does not matter
    save(dict(reversed(list(state.items()))), tmp_path / "r.safetensors",
         metadata={"who": "me"})
    assert (tmp_path / "r.safetensors").read_bytes() == raw


def test_save_tied_tensors_written_once_restored_tied(tmp_path):
    w = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    arr = np.ones((2, 2), np.float32)
    state = {"enc.weight": w, "dec.weight": w, "a": arr, "b": arr[:], "c": arr.copy()}
    path = tmp_path / "tied.safetensors"
    save(state, path)
    header = json.loads(path.read_bytes()[8:8 + struct.unpack("<Q", path.read_bytes()[:8])[0]])
    assert set(header) == {"__metadata__", "dec.weight", "a", "c"}
    got, meta = load(path, metadata=True)
    assert meta == {}
    assert got["enc.weight"] is got["dec.weight"]
    assert got["a"] is got["b"] and got["c"] is not got["a"]
    _same(w, got["enc.weight"])
    theirs = pytest.importorskip("safetensors.numpy").load_file(path)
    assert set(theirs) == {"dec.weight", "a", "c"}


def test_save_refuses_bad_input(tmp_path):
    p = tmp_path / "x.safetensors"
    with pytest.raises(TypeError, match="keys must be str"):
        save({1: np.zeros(2)}, p)
    with pytest.raises(TypeError, match=r"state\['x'\].*int16"):
        save({"x": np.zeros(2, np.int16)}, p)
    with pytest.raises(TypeError, match="object"):
        save({"x": np.array([object()])}, p)
    with pytest.raises(TypeError, match="metadata"):
        save({"x": np.zeros(2)}, p, metadata={"a": 1})
    with pytest.raises(ValueError, match="reserved"):
        save({"x": np.zeros(2)}, p, metadata={"modulekit.aliases": "{}"})
    with pytest.raises(TypeError, match="mapping"):
        save([np.zeros(2)], p)
    assert not p.exists() and os.listdir(tmp_path) == []


# ---- safetensors validation -----------------------------------------------------------------
def _st(header, data=b"", raw_header=None):
    h = raw_header if raw_header is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


GOOD = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}


@pytest.mark.parametrize("blob, match", [
    (struct.pack("<Q", 100_000_001) + b"{" + b" " * 64, "cap"),
    (struct.pack("<Q", 50) + b"{}", "past the end"),
    (_st(None, b"\0" * 8, raw_header=b'["a"]'), "starting with"),
    (_st(None, b"", raw_header=b"{\xff}"), "UTF-8"),
    (_st(None, b"\0" * 8, raw_header=b'{"a": {"dtype": "F32",'), "malformed JSON"),
    (_st(None, b"\0" * 16, raw_header=json.dumps(GOOD).encode()[:-1] + b', "a": '
         + json.dumps(GOOD["a"]).encode() + b"}"), "duplicate"),
    (_st({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, b"\0" * 8),
     "non-negative"),
    (_st({"a": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}}, b"\0" * 8),
     "non-negative"),
    (_st({"a": {"dtype": "F32", "shape": [True, 2], "data_offsets": [0, 8]}}, b"\0" * 8),
     "non-negative"),
    (_st({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8), "needs 12"),
    (_st(GOOD, b"\0" * 12), "cover 8 data bytes but the file holds 12"),
    (_st({**GOOD, "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8),
     "overlaps"),
    (_st({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8), "hole"),
    (_st({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4), "cover"),
    (_st({"a": {"dtype": "I16", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4),
     "I16 is not supported"),
    (_st({"a": {"dtype": "F33", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8),
     "unknown dtype"),
    (_st({**GOOD, "__metadata__": {"k": 1}}, b"\0" * 8), "strings to strings"),
    (_st({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, b"\0" * 8), "end before"),
    (_st({"a": {"dtype": "BOOL", "shape": [2], "data_offsets": [0, 2]}}, b"\0\x07"),
     "bool"),
    (_st({"a": {"dtype": "F32", "shape": [2]}}, b"\0" * 8), "lacks 'data_offsets'"),
])
def test_safetensors_validation(tmp_path, blob, match):
    p = tmp_path / "bad.safetensors"
    p.write_bytes(blob)
    with pytest.raises(CheckpointError, match=match) as info:
        load(p)
    assert str(p) in str(info.value)


def test_safetensors_trailing_spaces_and_alias_metadata_checked(tmp_path):
    p = tmp_path / "ok.safetensors"
    h = json.dumps(GOOD).encode() + b"   "
    p.write_bytes(_st(None, b"\0" * 8, raw_header=h))
    assert load(p)["a"].shape == (2,)
    bad = {**GOOD, "__metadata__": {"modulekit.aliases": json.dumps({"b": "zz"})}}
    p.write_bytes(_st(bad, b"\0" * 8))
    with pytest.raises(CheckpointError, match="not a stored tensor"):
        load(p)


# ---- npz ------------------------------------------------------------------------------------
@pytest.mark.parametrize("compressed", [False, True])
def test_npz(tmp_path, compressed):
    rng = np.random.default_rng(2)
    arrays = {"f32": rng.standard_normal((4, 5)).astype(np.float32), "f64": rng.random(3),
              "f16": np.float16([1, 2]), "i64": np.arange(4), "i32": np.int32([3]),
              "i8": np.int8([-1]), "u8": np.uint8([9]), "b": np.array([True]),
              "fortran": np.asfortranarray(rng.standard_normal((3, 4))),
              "big": np.arange(5, dtype=">i4"), "scalar": np.array(1.5)}
    path = tmp_path / "a.npz"
    (np.savez_compressed if compressed else np.savez)(path, **arrays)
    assert detect_format(path) == "npz"
    got = load(path)
    assert set(got) == set(arrays)
    for k, v in arrays.items():
        np.testing.assert_array_equal(got[k].numpy(), v)
        assert got[k].numpy().dtype == v.dtype.newbyteorder("=")


def test_npz_refuses_object_arrays_and_bombs(tmp_path):
    p = tmp_path / "o.npz"
    np.savez(p, x=np.array([{"a": 1}], dtype=object))
    with pytest.raises(CheckpointError, match="allow_pickle"):
        load(p)
    # a record whose directory claims far more than deflate can produce from its bytes
    np.savez_compressed(p, x=np.zeros(1000, np.float32))
    raw = bytearray(p.read_bytes())
    cd = raw.rfind(b"PK\x01\x02")
    struct.pack_into("<I", raw, cd + 24, 0x7FFFFFFF)  # uncompressed size
    p.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="maximum ratio|zip bomb"):
        load(p)


# ---- general refusals ------------------------------------------------------------------------
def test_missing_empty_and_unknown_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "nope.pt")
    (tmp_path / "empty").write_bytes(b"")
    with pytest.raises(CheckpointError, match="empty"):
        load(tmp_path / "empty")
    (tmp_path / "txt").write_bytes(b"hello world, not a checkpoint")
    with pytest.raises(CheckpointError, match="unrecognised"):
        load(tmp_path / "txt")
    np.save(tmp_path / "one.npy", np.zeros(3))
    with pytest.raises(CheckpointError, match=".npy"):
        load(tmp_path / "one.npy")
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as z:
        z.writestr("readme.txt", "hi")
    with pytest.raises(CheckpointError, match="neither"):
        load(tmp_path / "other.zip")


def test_torch_zip_storage_size_mismatch_and_bomb(tmp_path):
    src = torch.save({"a": torch.zeros(1000)}, tmp_path / "s.pt") or tmp_path / "s.pt"
    with zipfile.ZipFile(src) as z:
        name = next(n for n in z.namelist() if "/data/" in n)
    # the record holds fewer bytes than the pickle's numel needs
    short = _rewrite_zip(src, tmp_path / "short.pt", replace={name: b"\0" * 16})
    with pytest.raises(CheckpointError, match="needs 1000 x 4"):
        load(short)
    # deflated record whose directory entry lies about its size
    comp = bytearray(_rewrite_zip(src, tmp_path / "c.pt", compress=True).read_bytes())
    pos = 0
    while True:
        pos = comp.find(b"PK\x01\x02", pos + 1)
        n_len = struct.unpack_from("<H", comp, pos + 28)[0]
        if comp[pos + 46:pos + 46 + n_len].decode() == name:
            break
    struct.pack_into("<I", comp, pos + 24, 0x7FFF0000)
    (tmp_path / "bomb.pt").write_bytes(bytes(comp))
    with pytest.raises(CheckpointError, match="holds 2147418112 bytes"):
        load(tmp_path / "bomb.pt")  # refused before anything is inflated


def test_expanded_view_over_budget_refused(tmp_path):
    from modulekit.checkpoint import _torch

    big = torch.zeros(1).expand(_torch.COPY_BUDGET_FLOOR // 4 + 1)
    with pytest.raises(CheckpointError, match="over the limit"):
        load(_tsave({"x": big}, tmp_path / "e.pt", "zip"))


def test_legacy_huge_numel_refused_before_allocating(tmp_path):
    path = _tsave({"a": torch.zeros(4)}, tmp_path / "l.pt", "legacy")
    raw = path.read_bytes()
    # BININT1 4 -> BININT 2**31-1 in the persistent id's numel: claims ~8 GB
    pid = raw.find(b"cpu")
    i = raw.index(b"K\x04", pid)
    bad = raw[:i] + b"J" + struct.pack("<i", 2**31 - 1) + raw[i + 2:]
    (tmp_path / "h.pt").write_bytes(bad)
    with pytest.raises(CheckpointError, match="more than the file holds"):
        load(tmp_path / "h.pt")


def test_legacy_storage_views_from_old_torch(tmp_path):
    """Old torch wrote storage views as ('storage', type, root, loc, numel, (view, off, n))."""
    import pickle

    from modulekit.checkpoint.torch_legacy import MAGIC_NUMBER, PROTOCOL_VERSION

    class Store:
        def __init__(self, view):
            self.view = view

    class Rebuilt:
        def __init__(self, store, offset, size, stride):
            self.args = (store, offset, size, stride, False, collections.OrderedDict())

        def __reduce__(self):
            return torch._utils._rebuild_tensor_v2, self.args

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            if isinstance(obj, Store):
                return ("storage", torch.FloatStorage, "root", "cpu", 10, obj.view)
            return None

    obj = {"whole": Rebuilt(Store(None), 0, (10,), (1,)),
           "view": Rebuilt(Store(("v1", 2, 5)), 1, (2, 2), (2, 1))}
    out = io.BytesIO()
    for head in (MAGIC_NUMBER, PROTOCOL_VERSION, {"little_endian": True}):
        pickle.dump(head, out, protocol=2)
    Pickler(out, protocol=2).dump(obj)
    pickle.dump(["root"], out, protocol=2)
    values = np.arange(10, dtype=np.float32)
    out.write(struct.pack("<q", 10) + values.tobytes())
    path = tmp_path / "old.pt"
    path.write_bytes(out.getvalue())
    got = load(path)
    ref = torch.load(path, weights_only=True)
    _same(ref["view"], got["view"])
    np.testing.assert_array_equal(got["view"].numpy(), values[3:7].reshape(2, 2))
    np.testing.assert_array_equal(got["whole"].numpy(), values)


def test_save_torch_tensors_and_mmap_false(tmp_path, gen):
    w = torch.nn.Parameter(torch.randn(3, 2, generator=gen).bfloat16())
    state = {"a": w, "b": w, "c": w.detach(), "d": torch.arange(4)}
    save(state, tmp_path / "t.safetensors")
    got = load(tmp_path / "t.safetensors", mmap=False)
    assert got["a"] is got["b"] is got["c"]
    for k in state:
        _same(state[k], got[k])
    for fmt in ("zip", "legacy"):
        path = _tsave(state, tmp_path / f"{fmt}.pt", fmt)
        got = load(path, mmap=False)
        assert got["a"] is got["b"] and type(got["a"]) is Parameter
        for k in state:
            _same(state[k], got[k])
            assert got[k].numpy().flags.writeable


@pytest.mark.parametrize("fmt", ["zip", "legacy"])
@pytest.mark.parametrize("protocol", [3, 4, 5])
def test_torch_other_pickle_protocols(tmp_path, gen, fmt, protocol):
    """FRAME, MEMOIZE, STACK_GLOBAL, SHORT_BINUNICODE... as torch writes with pickle_protocol."""
    w = torch.randn(4, 3, generator=gen)
    state = collections.OrderedDict(w=torch.nn.Parameter(w), t=w.t(), i=torch.arange(3),
                                    b=torch.randn(2).bfloat16())
    path = tmp_path / "p.pt"
    torch.save(state, path, pickle_protocol=protocol,
               _use_new_zipfile_serialization=(fmt == "zip"))
    got = load(path)
    assert type(got["w"]) is Parameter
    for k in state:
        _same(state[k], got[k])
