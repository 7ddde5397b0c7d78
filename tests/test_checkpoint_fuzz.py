"""Fuzz the checkpoint readers: 10,000 mutated small files (bit flips, truncations, byte edits,
safetensors header edits, torch pickle record edits with valid CRCs). Each load must either
return tensors or raise CheckpointError: no other exception, no crash, no hang."""

import io
import json
import os
import struct
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modulekit import Tensor
from modulekit.checkpoint import CheckpointError, load, save

torch = pytest.importorskip("torch")

def fuzz(n):
    return settings(max_examples=n, deadline=None, database=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz")
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(3, 4, generator=gen)
    state = {"w": torch.nn.Parameter(w), "row": w[1], "t": w.t(), "h": torch.randn(2).half(),
             "bf": torch.randn(2).bfloat16(), "i": torch.arange(3), "m": torch.tensor([True]),
             "x": torch.zeros(2).expand(2, 2)}
    out = {}
    for fmt in ("zip", "legacy"):
        buf = io.BytesIO()
        torch.save(state, buf, _use_new_zipfile_serialization=(fmt == "zip"))
        out[fmt] = buf.getvalue()
    arr = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.int8([1, -1]),
           "c": np.array([True, False]), "d": np.float16([0.5])}
    save({**arr, "tied": arr["a"], "e": Tensor(np.ones(2, np.float32), dtype="bfloat16")},
         d / "s.safetensors", metadata={"k": "v"})
    out["safetensors"] = (d / "s.safetensors").read_bytes()
    for name, fn in (("npz", np.savez), ("npz_c", np.savez_compressed)):
        b = io.BytesIO()
        fn(b, **arr)
        out[name] = b.getvalue()
    out["target"] = d / "target.bin"
    return out


def _write(path, blob):
    # rewrite in place: open(..., "wb") truncates, which ext4 follows with a flush (ms each)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        os.pwrite(fd, blob, 0)
        os.ftruncate(fd, len(blob))
    finally:
        os.close(fd)


def _check(path, blob, use_mmap):
    _write(path, blob)
    try:
        got = load(path, mmap=use_mmap)
    except CheckpointError:
        return
    assert isinstance(got, dict)
    for key, value in got.items():
        assert isinstance(key, str) and isinstance(value, Tensor)
        np.asarray(value.numpy()).sum()  # touch the data


_mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 1 << 16), st.integers(0, 7)),
    st.tuples(st.just("set"), st.integers(0, 1 << 16), st.integers(0, 255)),
    st.tuples(st.just("int"), st.integers(0, 1 << 16),
              st.sampled_from([0, 1, 7, 8, 63, 64, 255, 0x7F, 0x80, 0xFFFF, 0x7FFFFFFF,
                               0xFFFFFFFF, (1 << 63) - 1, (1 << 64) - 1, 100_000_001])),
    st.tuples(st.just("cut"), st.integers(0, 1 << 16), st.just(0)),
    st.tuples(st.just("del"), st.integers(0, 1 << 16), st.integers(1, 16)),
    st.tuples(st.just("ins"), st.integers(0, 1 << 16), st.binary(min_size=1, max_size=8)),
)


def _mutate(blob, mutations):
    b = bytearray(blob)
    for kind, pos, arg in mutations:
        if not b:
            break
        pos %= len(b)
        if kind == "flip":
            b[pos] ^= 1 << arg
        elif kind == "set":
            b[pos] = arg
        elif kind == "int":
            width = 8 if arg > 0xFFFFFFFF else 4
            if pos + width <= len(b):
                b[pos:pos + width] = arg.to_bytes(width, "little")
        elif kind == "cut":
            del b[pos:]
        elif kind == "del":
            del b[pos:pos + arg]
        else:
            b[pos:pos] = arg
    return bytes(b)


_mutations = st.lists(_mutation, min_size=1, max_size=4)


@fuzz(2500)
@given(m=_mutations, use_mmap=st.booleans())
def test_fuzz_safetensors_bytes(files, m, use_mmap):
    _check(files["target"], _mutate(files["safetensors"], m), use_mmap)


_json_value = st.one_of(
    st.integers(-3, 3), st.integers(0, 1 << 70), st.sampled_from([None, True, 1.5, "F32", "BF16",
                                                                  "I16", "X", [], {}]),
    st.lists(st.integers(-2, 40), max_size=4),
)


@fuzz(1500)
@given(edits=st.lists(st.tuples(st.integers(0, 50), st.sampled_from(
    ["dtype", "shape", "data_offsets", "extra", "__delete__"]), _json_value),
    min_size=1, max_size=3))
def test_fuzz_safetensors_header_edits(files, edits):
    raw = files["safetensors"]
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    keys = sorted(header)
    for index, field, value in edits:
        key = keys[index % len(keys)]
        if key == "__metadata__":
            header[key] = {"modulekit.aliases": json.dumps({"x": value})} if index % 2 else value
        elif field == "__delete__":
            header.pop(key, None)
            keys = sorted(header) or ["k"]
        else:
            header.setdefault(key, {})
            if isinstance(header[key], dict):
                header[key][field] = value
    h = json.dumps(header).encode()
    _check(files["target"], struct.pack("<Q", len(h)) + h + raw[8 + n:], False)


@fuzz(2000)
@given(m=_mutations, use_mmap=st.booleans())
def test_fuzz_torch_zip_bytes(files, m, use_mmap):
    _check(files["target"], _mutate(files["zip"], m), use_mmap)


def _rezip(blob, record_suffix, mutations):
    """Rebuild the archive with one record mutated (valid CRC, so the parser sees it)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(blob)) as zin, zipfile.ZipFile(out, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename.endswith(record_suffix):
                data = _mutate(data, mutations)
            zout.writestr(info.filename, data)
    return out.getvalue()


@fuzz(1500)
@given(m=_mutations, record=st.sampled_from(["/data.pkl"] * 4 + ["/byteorder", "/data/0"]))
def test_fuzz_torch_zip_records(files, m, record):
    _check(files["target"], _rezip(files["zip"], record, m), True)


@fuzz(2000)
@given(m=_mutations, use_mmap=st.booleans())
def test_fuzz_torch_legacy_bytes(files, m, use_mmap):
    _check(files["target"], _mutate(files["legacy"], m), use_mmap)


@fuzz(500)
@given(m=_mutations, which=st.sampled_from(["npz", "npz_c", "record"]))
def test_fuzz_npz(files, m, which):
    if which == "record":  # the .npy header and data with a valid CRC
        blob = _rezip(files["npz"], "a.npy", m)
    else:
        blob = _mutate(files[which], m)
    _check(files["target"], blob, True)
