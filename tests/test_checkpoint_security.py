"""Hostile pickles: every one is refused with CheckpointError before anything runs.

Each payload would create a sentinel file if any of its code ran (a control test proves the
payloads are live with the plain ``pickle`` module); after each refused load the sentinel
must not exist and no module named by the pickle may have been imported.
"""

import builtins
import json
import os
import pickle
import struct
import subprocess
import sys
import zipfile

import pytest

from modulekit.checkpoint import CheckpointError, load
from modulekit.checkpoint.torch_legacy import MAGIC_NUMBER, PROTOCOL_VERSION

torch = pytest.importorskip("torch")


class _Reducer:
    def __init__(self, func, args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def _payloads(sentinel):
    s = str(sentinel)
    return {
        "os.system": _Reducer(os.system, (f"touch {s}",)),
        "builtins.eval": _Reducer(builtins.eval, (f"open({s!r}, 'w')",)),
        "builtins.exec": _Reducer(builtins.exec, (f"open({s!r}, 'w').close()",)),
        "subprocess.Popen": _Reducer(subprocess.Popen, (["touch", s],)),
        "builtins.open": _Reducer(builtins.open, (s, "w")),
    }


@pytest.fixture
def sentinel(tmp_path):
    path = tmp_path / "PWNED"
    yield path
    assert not path.exists(), "a payload ran"


def _global(module, name):
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _body(obj, proto=2):
    """The opcodes of ``obj`` without PROTO and STOP, to splice into a hand-built pickle."""
    raw = pickle.dumps(obj, protocol=proto)
    return raw[2:-1] if proto == 2 else raw[11:-1]


def _hand_built(sentinel, evil_module):
    s = str(sentinel)
    popen_args = _body((["touch", s],))
    return {
        # arbitrary module: importing it would create the sentinel
        "GLOBAL arbitrary module": b"\x80\x02" + _global(evil_module, "run") + b")R.",
        # protocol 4 STACK_GLOBAL
        "STACK_GLOBAL os.system": b"\x80\x04\x8c\x02os\x8c\x06system\x93"
                                  + _body((f"touch {s}",)) + b"R.",
        "NEWOBJ subprocess.Popen": b"\x80\x02" + _global("subprocess", "Popen") + popen_args
                                   + b"\x81.",
        "NEWOBJ_EX subprocess.Popen": b"\x80\x04" + _global("subprocess", "Popen") + popen_args
                                      + b"}\x92.",
        "NEWOBJ on allowed OrderedDict with args": b"\x80\x02"
        + _global("collections", "OrderedDict") + _body(([("a", 1)],)) + b"\x81.",
        "INST os.system": b"(ios\nsystem\n" + b"X" + struct.pack("<I", len(s) + 6)
                          + f"touch {s}".encode() + b"\x85.",
        "OBJ": b"\x80\x02(" + _global("subprocess", "Popen") + _body(["touch", s]) + b"o.",
        "EXT1": b"\x80\x02\x82\x01)R.",
        "BUILD on a list": b"\x80\x02]}b.",
        "BUILD on an allowed function": b"\x80\x02" + _global("torch._utils",
                                                              "_rebuild_tensor_v2") + b"}b.",
        "REDUCE on a storage type": b"\x80\x02" + _global("torch", "FloatStorage") + b")R.",
        "REDUCE on a string": b"\x80\x02X\x02\x00\x00\x00osX\x00\x00\x00\x00\x85R.",
        "_rebuild_from_type_v2 of a non-rebuild": b"\x80\x02"
        + _global("torch._tensor", "_rebuild_from_type_v2") + b"(" + _global("torch", "Size")
        + _global("torch", "Tensor") + b")}tR.",
        "rebuild with a forged storage": b"\x80\x02" + _global("torch._utils",
                                                               "_rebuild_tensor_v2")
        + b"(}K\x00K\x01\x85K\x01\x85\x89NtR.",
        "persistent id that is not a tuple": b"\x80\x02X\x01\x00\x00\x00xQ.",
        "builtins.getattr": b"\x80\x02" + _global("builtins", "getattr") + b")R.",
        "copyreg._reconstructor": b"\x80\x02" + _global("copyreg", "_reconstructor") + b")R.",
        "__builtin__.eval (py2 name)": b"\x80\x02" + _global("__builtin__", "eval")
                                       + _body((f"open({s!r}, 'w')",)) + b"R.",
    }


@pytest.fixture
def evil_module(tmp_path, monkeypatch):
    name = "mk_evil_module_for_tests"
    (tmp_path / f"{name}.py").write_text(
        f"open({str(tmp_path / 'PWNED')!r}, 'w').close()\ndef run():\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    assert name not in sys.modules


def test_payloads_are_live_with_plain_pickle(tmp_path):
    """Control: the plain unpickler runs the os.system payload (so the sentinel works)."""
    target = tmp_path / "control"
    pickle.loads(pickle.dumps(_payloads(target)["os.system"], protocol=2))
    assert target.exists()


def _legacy_container(obj_pickle):
    return (pickle.dumps(MAGIC_NUMBER, 2) + pickle.dumps(PROTOCOL_VERSION, 2)
            + pickle.dumps({"protocol_version": PROTOCOL_VERSION, "little_endian": True}, 2)
            + obj_pickle + pickle.dumps([], 2))


def _zip_container(tmp_path, data_pkl):
    """A valid torch.save archive with its data.pkl replaced."""
    src = tmp_path / "valid.pt"
    torch.save({"w": torch.ones(3)}, src)
    out = tmp_path / "evil.pt"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(out, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename.endswith("/data.pkl"):
                data = data_pkl
            zout.writestr(info.filename, data)
    return out


@pytest.mark.parametrize("fmt", ["zip", "legacy"])
@pytest.mark.parametrize("name", list(_payloads("x")))
def test_torch_save_with_payload_inside_valid_checkpoint(tmp_path, sentinel, fmt, name):
    """Real torch.save of a state dict with one hostile object among real tensors."""
    payload = _payloads(sentinel)[name]
    path = tmp_path / "evil.pt"
    torch.save({"w": torch.ones(4), "nested": {"x": payload}}, path,
               _use_new_zipfile_serialization=(fmt == "zip"))
    with pytest.raises(CheckpointError, match="not in the allowlist"):
        load(path)


@pytest.mark.parametrize("container", ["zip", "legacy", "bare"])
@pytest.mark.parametrize("name", list(_hand_built("x", "m")))
def test_hand_built_hostile_pickles(tmp_path, sentinel, evil_module, container, name):
    blob = _hand_built(sentinel, evil_module)[name]
    if container == "zip":
        path = _zip_container(tmp_path, blob)
    else:
        path = tmp_path / "evil.bin"
        path.write_bytes(_legacy_container(blob) if container == "legacy" else blob)
    with pytest.raises(CheckpointError) as info:
        load(path)
    assert str(path) in str(info.value)
    if blob[0] == 0x80 or container != "bare":  # (a bare protocol-0 pickle is no format)
        assert "pickle byte" in str(info.value)


def test_memo_index_bomb_and_deep_nesting(tmp_path):
    # LONG_BINPUT with index 2**32-1: the C unpickler would size its memo table to it
    path = _zip_container(tmp_path, b"\x80\x02}r\xff\xff\xff\xff.")
    assert load(path) == {}
    # a tuple nested 200000 deep used as a dict key: hashing it would overflow the C stack
    deep = b"\x80\x02}N" + b"\x85" * 200_000 + b"Ns."
    with pytest.raises(CheckpointError, match="nested more than"):
        load(_zip_container(tmp_path, deep))
    # lists nested deeply (fine to build) are flattened without a crash
    deep_list = b"\x80\x02}X\x01\x00\x00\x00a" + b"]" * 50_000 + b"a" * 49_999 + b"s."
    with pytest.raises(CheckpointError, match="nested too deeply"):
        load(_zip_container(tmp_path, deep_list))


def test_huge_lengths_do_not_allocate(tmp_path):
    # BINUNICODE8 / BINBYTES8 claiming 2**62 bytes: refused as truncated, nothing allocated
    for op in (b"\x8d", b"\x8e", b"\x96"):
        blob = b"\x80\x04" + op + struct.pack("<Q", 1 << 62) + b"."
        with pytest.raises(CheckpointError, match="truncated"):
            load(_zip_container(tmp_path, blob))
    # LONG4 of 2 GB
    with pytest.raises(CheckpointError, match="LONG4"):
        load(_zip_container(tmp_path, b"\x80\x02\x8b\xff\xff\xff\x7f."))


def test_colliding_keys_refused(tmp_path):
    # ints that all hash to 0 would make building the dict quadratic
    big = (1 << 61) - 1
    items = b"".join(b"\x8a\x09" + (k * big).to_bytes(9, "little", signed=True) + b"N"
                     for k in range(1, 50))
    with pytest.raises(CheckpointError, match="dict keys"):
        load(_zip_container(tmp_path, b"\x80\x02}(" + items + b"u."))
    with pytest.raises(CheckpointError, match="dict keys"):
        load(_zip_container(tmp_path, b"\x80\x02}G?\xf0\x00\x00\x00\x00\x00\x00Ns."))
    with pytest.raises(CheckpointError, match="dict keys"):
        load(_zip_container(tmp_path, b"\x80\x02}K\x01K\x02\x86Ns."))


def test_absurd_shapes_refused(tmp_path):
    """A tensor whose pickle claims an empty shape with absurd dimensions."""
    src = tmp_path / "valid.pt"
    torch.save({"w": torch.ones(3)}, src)
    with zipfile.ZipFile(src) as z:
        pkl = z.read(next(n for n in z.namelist() if n.endswith("/data.pkl")))
    # size (3,) -> (0, 2**62, 2**62); stride (1,) -> (1, 1, 1)
    size = b"K\x03\x85"
    assert pkl.count(size) == 1
    huge = b"\x8a\x08" + (1 << 62).to_bytes(8, "little")
    pkl = pkl.replace(size, b"(K\x00" + huge + huge + b"t", 1)
    stride = b"K\x01\x85"
    assert pkl.count(stride) == 1
    pkl = pkl.replace(stride, b"K\x01K\x01K\x01\x87", 1)
    with pytest.raises(CheckpointError, match="empty tensor shape"):
        load(_zip_container(tmp_path, pkl))


# ---------------------------------------------------------------------------------------------
# Leniencies the reliability campaign found (issue #18): each is refused as CheckpointError.


def _safetensors(path, header, data=b"\x00\x00\x80\x3f"):
    raw = json.dumps(header).encode()  # ensure_ascii: a lone surrogate stays a \ud800 escape
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


_ONE_F32 = {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}


def test_safetensors_controls_load(tmp_path):
    # the hand-built files below differ from this valid one in one field each
    meta = {"modulekit.aliases": json.dumps({"v": "w"})}
    state = load(_safetensors(tmp_path / "ok.safetensors", {"w": _ONE_F32, "__metadata__": meta}))
    assert list(state) == ["w", "v"] and state["v"] is state["w"]


def test_frame_length_is_checked(tmp_path):
    ok = pickle.dumps({"note": "no tensors"}, protocol=4)
    assert ok[2:3] == b"\x95"  # protocol 4 frames its opcodes
    assert load(_zip_container(tmp_path, ok)) == {}
    (n,) = struct.unpack("<Q", ok[3:11])
    for claimed in (n + 1, 1 << 62):
        blob = ok[:3] + struct.pack("<Q", claimed) + ok[11:]
        with pytest.raises(CheckpointError, match="FRAME of .* runs past the end"):
            load(_zip_container(tmp_path, blob))


def test_alias_named_metadata_refused(tmp_path):
    meta = {"modulekit.aliases": json.dumps({"__metadata__": "w"})}
    path = _safetensors(tmp_path / "a.safetensors", {"w": _ONE_F32, "__metadata__": meta})
    with pytest.raises(CheckpointError, match="alias '__metadata__' is reserved"):
        load(path)


def test_lone_surrogate_keys_refused(tmp_path):
    path = _safetensors(tmp_path / "s.safetensors", {"\ud800": _ONE_F32})
    assert b"\\ud800" in path.read_bytes()
    with pytest.raises(CheckpointError, match="lone surrogate"):
        load(path)
    meta = {"modulekit.aliases": json.dumps({"w\udfff": "w"})}
    path = _safetensors(tmp_path / "a.safetensors", {"w": _ONE_F32, "__metadata__": meta})
    with pytest.raises(CheckpointError, match="lone surrogate"):
        load(path)
    header = {"w": _ONE_F32, "__metadata__": {"k": "\udc80"}}
    path = _safetensors(tmp_path / "m.safetensors", header)
    with pytest.raises(CheckpointError, match="lone surrogate"):
        load(path, metadata=True)
    # a torch pickle's key, written with surrogatepass (BINUNICODE "w" -> "\ud800")
    src = tmp_path / "valid.pt"
    torch.save({"w": torch.ones(3)}, src)
    with zipfile.ZipFile(src) as z:
        pkl = z.read(next(n for n in z.namelist() if n.endswith("/data.pkl")))
    key = b"X\x01\x00\x00\x00w"
    assert pkl.count(key) == 1
    pkl = pkl.replace(key, b"X\x03\x00\x00\x00" + "\ud800".encode("utf-8", "surrogatepass"))
    with pytest.raises(CheckpointError, match="lone surrogate"):
        load(_zip_container(tmp_path, pkl))


def test_empty_zip_refused(tmp_path):
    path = tmp_path / "empty.zip"
    zipfile.ZipFile(path, "w").close()
    assert path.stat().st_size == 22  # the end record alone
    with pytest.raises(CheckpointError, match="holds no records: not a checkpoint"):
        load(path)


def _npz_with_end_record(tmp_path, patch):
    import numpy as np

    path = tmp_path / "x.npz"
    np.savez(path, w=np.ones(3, np.float32))
    raw = bytearray(path.read_bytes())
    eocd = raw.rindex(b"PK\x05\x06")
    fields = list(struct.unpack("<HHHHII", raw[eocd + 4:eocd + 20]))
    assert load(path)["w"].shape == (3,)  # the control loads
    patch(fields)
    raw[eocd + 4:eocd + 20] = struct.pack("<HHHHII", *fields)
    path.write_bytes(bytes(raw))
    return path


@pytest.mark.parametrize("field, value, match", [
    (0, 1, "bogus end-of-central-directory"),   # this disk's number
    (1, 3, "bogus end-of-central-directory"),   # the directory's disk
    (2, 2, "bogus end-of-central-directory"),   # entries on this disk != total
    (5, -1, "does not end at the end records"),  # directory offset moved back: a gap
])
def test_bogus_end_record_refused(tmp_path, field, value, match):
    def patch(fields):
        fields[field] = value if value >= 0 else fields[field] + value

    with pytest.raises(CheckpointError, match=match):
        load(_npz_with_end_record(tmp_path, patch))
