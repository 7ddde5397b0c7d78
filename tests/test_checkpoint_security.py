"""Hostile pickles: every one is refused with CheckpointError before anything runs.

Each payload would create a sentinel file if any of its code ran (a control test proves the
payloads are live with the plain ``pickle`` module); after each refused load the sentinel
must not exist and no module named by the pickle may have been imported.
"""

import builtins
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
