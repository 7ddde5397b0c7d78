"""An allowlist-only pickle interpreter for PyTorch checkpoints.

Why not ``pickle.Unpickler`` with a restrictive ``find_class``: the C unpickler also resolves
``EXT1/2/4`` opcodes through a process-wide cache without calling ``find_class``, grows its
memo table to whatever index a ``LONG_BINPUT`` names (a 5-byte opcode can make it allocate
gigabytes), and hashes keys of any nesting depth in C (a deep enough tuple overflows the C
stack). So this module interprets the opcodes itself, like ``torch/_weights_only_unpickler.py``
does, and nothing in a pickle can reach a Python object that this module did not put there:

* ``GLOBAL`` / ``STACK_GLOBAL`` resolve ``(module, name)`` through :data:`ALLOWED_GLOBALS`
  only, to inert stand-ins (:class:`Callable` markers, storage and dtype markers). Anything
  else is refused before any code runs; no module is imported.
* ``REDUCE`` / ``NEWOBJ`` / ``NEWOBJ_EX`` call only those stand-ins, each of which validates
  its arguments and builds plain data (tuples, dicts, :class:`TensorRef` records).
* ``BUILD`` is accepted only on ``OrderedDict`` (torch pickles a state dict's ``_metadata``
  that way) and the state is dropped; ``INST``, ``OBJ``, ``EXT*``, out-of-band buffers and
  text persistent ids are refused.
* The memo is a dict, every length is checked against the bytes left, tuples nest at most
  :data:`MAX_DEPTH` deep, and any failure becomes :class:`CheckpointError` naming the byte
  offset of the opcode.

Tensors are not materialised here: rebuild functions return :class:`TensorRef` records
(storage, offset, size, stride); the format readers turn them into arrays afterwards.
"""

from __future__ import annotations

import struct
from collections import OrderedDict

from modulekit.checkpoint._common import CheckpointError, check_shape, fail

__all__ = [
    "ALLOWED_GLOBALS",
    "MAX_DEPTH",
    "StorageType",
    "TensorRef",
    "Unpickler",
]

MAX_DEPTH = 100


class StorageType:
    """Stand-in for ``torch.FloatStorage`` and friends: only a dtype name."""

    __slots__ = ("torch_name", "dtype")

    def __init__(self, torch_name, dtype):
        self.torch_name = torch_name
        self.dtype = dtype  # modulekit dtype name, or torch's name when modulekit lacks it

    def __repr__(self):
        return f"StorageType({self.torch_name})"


class DType:
    """Stand-in for a ``torch.<dtype>`` object."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"torch.{self.name}"


class TensorRef:
    """A tensor as the pickle describes it: a view into a storage.

    ``storage`` is whatever the format's ``persistent_load`` returned for it.
    """

    __slots__ = ("storage", "offset", "size", "stride", "is_parameter", "dtype")

    def __init__(self, storage, offset, size, stride, dtype=None):
        self.storage = storage
        self.offset = offset
        self.size = size
        self.stride = stride
        self.is_parameter = False
        self.dtype = dtype


class Callable:
    """An allowlisted callable: the only kind of object REDUCE/NEWOBJ may call."""

    __slots__ = ("qualname", "func")

    def __init__(self, qualname, func):
        self.qualname = qualname
        self.func = func

    def __repr__(self):
        return f"<allowed {self.qualname}>"


class _Reject(Exception):
    """Raised by a stand-in on bad arguments; becomes CheckpointError with the offset."""


# Python's int hash is n mod (2**61 - 1): bigger ints (and floats, tuples, ...) as keys would let a
# file make every key collide and turn dict building quadratic. str/bytes hashes are salted.
_MAX_KEY_INT = (1 << 61) - 2


def _key(k):
    """Validate one dict key or set element: str, bytes, bool, None or a bounded int."""
    t = type(k)
    if t is str or t is bytes or t is bool or k is None:
        return k
    if t is int and -_MAX_KEY_INT <= k <= _MAX_KEY_INT:
        return k
    raise _Reject(f"dict keys and set elements must be str, bytes, bool, None or ints below "
                  f"2**61, not {t.__name__}")


def _keys(items):
    for k in items:
        _key(k)
    return items


# ---- stand-in implementations ---------------------------------------------------------------

def _ints(value, what):
    if not isinstance(value, tuple) or not all(type(v) is int for v in value):
        raise _Reject(f"{what} must be a tuple of ints, got {type(value).__name__}")
    return value


def _storage_of(storage):
    if getattr(storage, "is_storage", False) is not True:
        raise _Reject(f"tensor storage must come from a persistent id, got "
                      f"{type(storage).__name__}")
    return storage


def _make_ref(storage, offset, size, stride, dtype=None):
    storage = _storage_of(storage)
    if type(offset) is not int or offset < 0:
        raise _Reject("storage offset must be a non-negative int")
    size = _ints(size, "tensor size")
    stride = _ints(stride, "tensor stride")
    if len(size) != len(stride):
        raise _Reject(f"size {size} and stride {stride} differ in length")
    try:
        check_shape(size, "", "")
    except CheckpointError:
        raise _Reject(f"bad tensor size {size[:8]}") from None
    if any(s < 0 for s in stride):
        raise _Reject("negative strides are not allowed")
    return TensorRef(storage, offset, size, stride, dtype)


def _rebuild_tensor(storage, storage_offset, size, stride):
    return _make_ref(storage, storage_offset, size, stride)


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False,
                       backward_hooks=None, metadata=None):
    if type(requires_grad) is not bool:
        raise _Reject("requires_grad must be a bool")
    return _make_ref(storage, storage_offset, size, stride)


def _rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks,
                       dtype, metadata=None):
    if not isinstance(dtype, DType):
        raise _Reject("dtype argument must be a torch dtype")
    if type(requires_grad) is not bool:
        raise _Reject("requires_grad must be a bool")
    return _make_ref(storage, storage_offset, size, stride, dtype.name)


def _as_parameter(data):
    if not isinstance(data, TensorRef):
        raise _Reject(f"a Parameter must wrap a tensor, got {type(data).__name__}")
    data.is_parameter = True
    return data


def _rebuild_parameter(data, requires_grad, backward_hooks):
    return _as_parameter(data)


def _rebuild_parameter_with_state(data, requires_grad, backward_hooks, state):
    if state:
        raise _Reject("Parameters with extra Python attributes are not supported")
    return _as_parameter(data)


def _rebuild_from_type_v2(func, new_type, args, state):
    if not isinstance(func, Callable) or func.qualname not in _TENSOR_REBUILDERS:
        raise _Reject("_rebuild_from_type_v2 must wrap a tensor rebuild function")
    if new_type not in (_TENSOR_TYPE, _PARAMETER_TYPE):
        raise _Reject("tensor subclasses are not supported")
    if not isinstance(args, tuple):
        raise _Reject("_rebuild_from_type_v2 args must be a tuple")
    if state:
        raise _Reject("tensors with extra Python attributes are not supported")
    ref = func.func(*args)
    if new_type is _PARAMETER_TYPE:
        ref.is_parameter = True
    return ref


def _ordered_dict(*args):
    if args:  # torch pickles OrderedDict() and then fills it with SETITEMS
        raise _Reject("OrderedDict is only allowed without arguments")
    return OrderedDict()


def _torch_size(*args):
    if len(args) != 1:
        raise _Reject("torch.Size takes one tuple")
    return _ints(tuple(args[0]) if isinstance(args[0], (list, tuple)) else args[0],
                 "torch.Size")


def _torch_device(*args):
    if not args or len(args) > 2 or not isinstance(args[0], str):
        raise _Reject("torch.device takes a type string and an optional index")
    if len(args) == 2 and args[1] is not None and type(args[1]) is not int:
        raise _Reject("torch.device index must be an int")
    return args[0] if len(args) == 1 or args[1] is None else f"{args[0]}:{args[1]}"


def _codecs_encode(text, encoding="utf-8"):
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise _Reject("_codecs.encode is allowed only as (str, 'latin1') for bytes")
    return text.encode("latin1")


def _set(*args):
    if len(args) > 1 or (args and not isinstance(args[0], (list, tuple))):
        raise _Reject("set takes at most one list")
    return set(_keys(args[0])) if args else set()


def _frozenset(*args):
    if len(args) > 1 or (args and not isinstance(args[0], (list, tuple))):
        raise _Reject("frozenset takes at most one list")
    return frozenset(_keys(args[0])) if args else frozenset()


def _not_callable(*args):
    raise _Reject("this allowlisted class cannot be called")


_TENSOR_TYPE = Callable("torch.Tensor", _not_callable)
_PARAMETER_TYPE = Callable("torch.nn.parameter.Parameter", _not_callable)
_ORDERED_DICT = Callable("collections.OrderedDict", _ordered_dict)

_STORAGE_DTYPES = {
    "FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32",
    "CharStorage": "int8", "ByteStorage": "uint8", "BoolStorage": "bool",
    "UntypedStorage": "uint8",
    # torch has these; modulekit does not: refused by name when a tensor uses one
    "ShortStorage": "int16", "ComplexFloatStorage": "complex64",
    "ComplexDoubleStorage": "complex128", "QInt8Storage": "qint8", "QUInt8Storage": "quint8",
    "QInt32Storage": "qint32", "QUInt4x2Storage": "quint4x2", "QUInt2x4Storage": "quint2x4",
}
_TORCH_DTYPES = {
    "float32": "float32", "float": "float32", "float64": "float64", "double": "float64",
    "float16": "float16", "half": "float16", "bfloat16": "bfloat16", "int64": "int64",
    "long": "int64", "int32": "int32", "int": "int32", "int8": "int8", "uint8": "uint8",
    "bool": "bool",
    "int16": "int16", "short": "int16", "uint16": "uint16", "uint32": "uint32",
    "uint64": "uint64", "complex64": "complex64", "complex128": "complex128",
    "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2",
    "float8_e4m3fnuz": "float8_e4m3fnuz", "float8_e5m2fnuz": "float8_e5m2fnuz",
}

_TENSOR_REBUILDERS = {
    "torch._utils._rebuild_tensor": _rebuild_tensor,
    "torch._utils._rebuild_tensor_v2": _rebuild_tensor_v2,
    "torch._utils._rebuild_tensor_v3": _rebuild_tensor_v3,
}


def _build_allowlist():
    allowed = {}
    for qualname, func in _TENSOR_REBUILDERS.items():
        allowed[tuple(qualname.rsplit(".", 1))] = Callable(qualname, func)
    for qualname, func in {
        "torch._utils._rebuild_parameter": _rebuild_parameter,
        "torch._utils._rebuild_parameter_with_state": _rebuild_parameter_with_state,
        "torch._tensor._rebuild_from_type_v2": _rebuild_from_type_v2,
        "torch.Size": _torch_size,
        "torch.device": _torch_device,
        "_codecs.encode": _codecs_encode,
        "builtins.set": _set,
        "builtins.frozenset": _frozenset,
    }.items():
        allowed[tuple(qualname.rsplit(".", 1))] = Callable(qualname, func)
    allowed[("collections", "OrderedDict")] = _ORDERED_DICT
    allowed[("torch", "Tensor")] = _TENSOR_TYPE
    allowed[("torch._tensor", "Tensor")] = _TENSOR_TYPE
    allowed[("torch.nn.parameter", "Parameter")] = _PARAMETER_TYPE
    for name, dtype in _STORAGE_DTYPES.items():
        allowed[("torch", name)] = StorageType(name, dtype)
    allowed[("torch.storage", "UntypedStorage")] = allowed[("torch", "UntypedStorage")]
    for name, dtype in _TORCH_DTYPES.items():
        allowed[("torch", name)] = DType(dtype)
    return allowed


#: ``(module, name) -> stand-in``: every global a checkpoint pickle may name.
ALLOWED_GLOBALS = _build_allowlist()
# Python 2 pickles name these modules differently.
_MODULE_ALIASES = {"__builtin__": "builtins"}


# ---- the interpreter ------------------------------------------------------------------------

class Unpickler:
    """Interpret one pickle from ``data[start:end]`` allowing only :data:`ALLOWED_GLOBALS`.

    Parameters
    ----------
    data : bytes-like
        The buffer holding the pickle (a memory map or bytes; never copied whole).
    start, end : int
        Where the pickle starts and where the readable region ends.
    path : str
        The file, for error messages.
    what : str
        Which record this is (``"record 'archive/data.pkl'"``), for error messages.
    persistent_load : callable or None
        Called with the persistent id tuple of ``BINPERSID``; it must validate it.
    """

    def __init__(self, data, start, end, path, what, persistent_load=None):
        # bytes index to ints; anything else (a memory map, an ndarray) through a memoryview
        self.data = data if isinstance(data, bytes) else memoryview(data).cast("B")
        self.pos = start
        self.end = end
        self.path = path
        self.what = what
        self.persistent_load = persistent_load
        self._depth = {}

    # -- reading primitives
    def _read(self, n):
        pos = self.pos
        if n < 0 or pos + n > self.end:
            raise _Reject(f"needs {n} bytes, only {self.end - pos} left (truncated pickle)")
        self.pos = pos + n
        return bytes(self.data[pos:pos + n])

    def _readline(self):
        limit = min(self.end, self.pos + 4096)
        chunk = bytes(self.data[self.pos:limit])
        nl = chunk.find(b"\n")
        if nl < 0:
            raise _Reject("unterminated text argument")
        self.pos += nl + 1
        return chunk[:nl]

    def _tuple(self, items):
        depth = 1
        for it in items:
            if type(it) is tuple:
                d = self._depth.get(id(it), 1)
                if d >= depth:
                    depth = d + 1
        if depth > MAX_DEPTH:
            raise _Reject(f"tuples nested more than {MAX_DEPTH} deep")
        t = tuple(items)
        if t:
            self._depth[id(t)] = depth
            self._keep.append(t)
        return t

    def _call(self, func, args):
        if not isinstance(func, Callable):
            raise _Reject(f"refusing to call a {type(func).__name__} object (only allowlisted "
                          "torch rebuild functions and containers may be called)")
        if not isinstance(args, tuple):
            raise _Reject("call arguments must be a tuple")
        try:
            result = func.func(*args)
        except TypeError as exc:
            raise _Reject(f"bad arguments for {func.qualname}: {exc}") from None
        if type(result) is tuple:
            self._depth[id(result)] = 2
            self._keep.append(result)
        return result

    def load(self):
        """Run the pickle to its STOP; return ``(object, end_offset)``."""
        self._keep = []  # keeps tuples alive so their ids in _depth stay theirs
        try:
            result = self._run()
        except CheckpointError:
            raise
        except _Reject as exc:
            raise fail(self.path, f"{self.what}, pickle byte {self._op_pos}", str(exc)) from None
        except RecursionError:
            raise fail(self.path, f"{self.what}, pickle byte {self._op_pos}",
                       "objects nested too deeply") from None
        except (IndexError, KeyError, TypeError, ValueError, AttributeError, struct.error,
                OverflowError, MemoryError, UnicodeDecodeError) as exc:
            raise fail(self.path, f"{self.what}, pickle byte {self._op_pos}",
                       f"malformed pickle ({type(exc).__name__}: {str(exc)[:200]})") from None
        finally:
            self._keep = []
            self._depth = {}
        return result, self.pos

    def _run(self):
        stack = []
        metastack = []
        memo = {}
        read = self._read
        data = self.data
        end = self.end
        self._op_pos = self.pos
        while True:
            pos = self._op_pos = self.pos
            if pos >= end:
                raise _Reject("the pickle ends without STOP (truncated pickle)")
            op = data[pos]
            self.pos = pos + 1
            # -- the most frequent opcodes of a torch state dict first
            if op == 0x71:  # BINPUT
                memo[read(1)[0]] = stack[-1]
            elif op == 0x68:  # BINGET
                stack.append(memo[read(1)[0]])
            elif op == 0x4B:  # BININT1
                stack.append(read(1)[0])
            elif op == 0x28:  # MARK
                metastack.append(stack)
                stack = []
            elif op == 0x52:  # REDUCE
                args = stack.pop()
                stack[-1] = self._call(stack[-1], args)
            elif op == 0x86:  # TUPLE2
                t = self._tuple((stack[-2], stack[-1]))
                del stack[-2:]
                stack.append(t)
            elif op == 0x74:  # TUPLE
                items = stack
                stack = metastack.pop()
                stack.append(self._tuple(items))
            elif op == 0x58:  # BINUNICODE
                (n,) = struct.unpack("<I", read(4))
                stack.append(str(read(n), "utf-8", "surrogatepass"))
            elif op == 0x72:  # LONG_BINPUT
                memo[struct.unpack("<I", read(4))[0]] = stack[-1]
            elif op == 0x6A:  # LONG_BINGET
                stack.append(memo[struct.unpack("<I", read(4))[0]])
            # -- framing and protocol
            elif op == 0x80:  # PROTO
                proto = read(1)[0]
                if proto > 5:
                    raise _Reject(f"unsupported pickle protocol {proto}")
            elif op == 0x95:  # FRAME: a length prefix; the frame's opcodes follow inline
                (n,) = struct.unpack("<Q", read(8))
                left = self.end - self.pos
                if n > left:
                    raise _Reject(f"FRAME of {n} bytes runs past the end of the pickle "
                                  f"({left} bytes left)")
            elif op == 0x2E:  # STOP
                if len(stack) != 1 or metastack:
                    raise _Reject("STOP with an unbalanced stack")
                return stack[0]
            # -- stack manipulation
            elif op == 0x30:  # POP
                if stack:
                    stack.pop()
                else:
                    stack = metastack.pop()
            elif op == 0x31:  # POP_MARK
                stack = metastack.pop()
            elif op == 0x32:  # DUP
                stack.append(stack[-1])
            # -- constants
            elif op == 0x4E:  # NONE
                stack.append(None)
            elif op == 0x88:  # NEWTRUE
                stack.append(True)
            elif op == 0x89:  # NEWFALSE
                stack.append(False)
            elif op == 0x4A:  # BININT
                stack.append(struct.unpack("<i", read(4))[0])
            elif op == 0x4D:  # BININT2
                stack.append(struct.unpack("<H", read(2))[0])
            elif op == 0x8A:  # LONG1
                n = read(1)[0]
                stack.append(int.from_bytes(read(n), "little", signed=True))
            elif op == 0x8B:  # LONG4
                (n,) = struct.unpack("<i", read(4))
                if n < 0 or n > 1024:
                    raise _Reject(f"LONG4 of {n} bytes (at most 1024 accepted)")
                stack.append(int.from_bytes(read(n), "little", signed=True))
            elif op == 0x49:  # INT (text): also the protocol-0 booleans 00/01
                line = self._readline()
                if line == b"00":
                    stack.append(False)
                elif line == b"01":
                    stack.append(True)
                else:
                    stack.append(int(line))
            elif op == 0x4C:  # LONG (text)
                line = self._readline()
                stack.append(int(line[:-1] if line.endswith(b"L") else line))
            elif op == 0x47:  # BINFLOAT
                stack.append(struct.unpack(">d", read(8))[0])
            elif op == 0x46:  # FLOAT (text)
                stack.append(float(self._readline()))
            # -- strings and bytes
            elif op == 0x8C:  # SHORT_BINUNICODE
                n = read(1)[0]
                stack.append(str(read(n), "utf-8", "surrogatepass"))
            elif op == 0x8D:  # BINUNICODE8
                (n,) = struct.unpack("<Q", read(8))
                stack.append(str(read(n), "utf-8", "surrogatepass"))
            elif op == 0x56:  # UNICODE (text)
                stack.append(str(self._readline(), "raw-unicode-escape"))
            elif op == 0x55:  # SHORT_BINSTRING (Python 2 str): decoded as ASCII, like torch
                n = read(1)[0]
                stack.append(read(n).decode("ascii"))
            elif op == 0x54:  # BINSTRING
                (n,) = struct.unpack("<i", read(4))
                stack.append(read(n).decode("ascii"))
            elif op == 0x43:  # SHORT_BINBYTES
                n = read(1)[0]
                stack.append(read(n))
            elif op == 0x42:  # BINBYTES
                (n,) = struct.unpack("<I", read(4))
                stack.append(read(n))
            elif op == 0x8E:  # BINBYTES8
                (n,) = struct.unpack("<Q", read(8))
                stack.append(read(n))
            elif op == 0x96:  # BYTEARRAY8
                (n,) = struct.unpack("<Q", read(8))
                stack.append(bytearray(read(n)))
            # -- containers
            elif op == 0x29:  # EMPTY_TUPLE
                stack.append(())
            elif op == 0x85:  # TUPLE1
                stack[-1] = self._tuple((stack[-1],))
            elif op == 0x87:  # TUPLE3
                t = self._tuple((stack[-3], stack[-2], stack[-1]))
                del stack[-3:]
                stack.append(t)
            elif op == 0x5D:  # EMPTY_LIST
                stack.append([])
            elif op == 0x6C:  # LIST
                items = stack
                stack = metastack.pop()
                stack.append(items)
            elif op == 0x61:  # APPEND
                item = stack.pop()
                target = stack[-1]
                if type(target) is not list:
                    raise _Reject(f"APPEND to a {type(target).__name__}")
                target.append(item)
            elif op == 0x65:  # APPENDS
                items = stack
                stack = metastack.pop()
                target = stack[-1]
                if type(target) is not list:
                    raise _Reject(f"APPENDS to a {type(target).__name__}")
                target.extend(items)
            elif op == 0x7D:  # EMPTY_DICT
                stack.append({})
            elif op == 0x64:  # DICT
                items = stack
                stack = metastack.pop()
                if len(items) % 2:
                    raise _Reject("DICT with an odd number of items")
                stack.append({_key(items[i]): items[i + 1] for i in range(0, len(items), 2)})
            elif op == 0x73:  # SETITEM
                value = stack.pop()
                key = stack.pop()
                target = stack[-1]
                if type(target) not in (dict, OrderedDict):
                    raise _Reject(f"SETITEM on a {type(target).__name__}")
                target[_key(key)] = value
            elif op == 0x75:  # SETITEMS
                items = stack
                stack = metastack.pop()
                target = stack[-1]
                if type(target) not in (dict, OrderedDict):
                    raise _Reject(f"SETITEMS on a {type(target).__name__}")
                if len(items) % 2:
                    raise _Reject("SETITEMS with an odd number of items")
                for i in range(0, len(items), 2):
                    target[_key(items[i])] = items[i + 1]
            elif op == 0x8F:  # EMPTY_SET
                stack.append(set())
            elif op == 0x90:  # ADDITEMS
                items = stack
                stack = metastack.pop()
                target = stack[-1]
                if type(target) is not set:
                    raise _Reject(f"ADDITEMS on a {type(target).__name__}")
                target.update(_keys(items))
            elif op == 0x91:  # FROZENSET
                items = stack
                stack = metastack.pop()
                stack.append(frozenset(_keys(items)))
            # -- memo
            elif op == 0x94:  # MEMOIZE
                memo[len(memo)] = stack[-1]
            elif op == 0x70:  # PUT (text)
                index = int(self._readline())
                if not 0 <= index < 1 << 32:
                    raise _Reject(f"memo index {index} out of range")
                memo[index] = stack[-1]
            elif op == 0x67:  # GET (text)
                stack.append(memo[int(self._readline())])
            # -- the risky ones: globals and calls, allowlist only
            elif op == 0x63:  # GLOBAL
                module = self._readline().decode("utf-8")
                name = self._readline().decode("utf-8")
                stack.append(self._global(module, name))
            elif op == 0x93:  # STACK_GLOBAL
                name = stack.pop()
                module = stack.pop()
                if type(module) is not str or type(name) is not str:
                    raise _Reject("STACK_GLOBAL needs two strings")
                stack.append(self._global(module, name))
            elif op == 0x81:  # NEWOBJ
                args = stack.pop()
                cls = stack.pop()
                stack.append(self._newobj(cls, args, {}))
            elif op == 0x92:  # NEWOBJ_EX
                kwargs = stack.pop()
                args = stack.pop()
                cls = stack.pop()
                stack.append(self._newobj(cls, args, kwargs))
            elif op == 0x62:  # BUILD
                stack.pop()  # the state: dropped
                inst = stack[-1]
                if type(inst) is not OrderedDict:
                    raise _Reject(f"BUILD is only allowed on OrderedDict, not on a "
                                  f"{type(inst).__name__}")
                # torch stores a state dict's `_metadata` attribute this way: not needed.
            elif op == 0x51:  # BINPERSID
                pid = stack.pop()
                if self.persistent_load is None:
                    raise _Reject("persistent ids are not allowed in this record")
                if type(pid) is not tuple:
                    raise _Reject(f"persistent id must be a tuple, got {type(pid).__name__}")
                stack.append(self.persistent_load(pid))
            else:
                names = {0x69: "INST", 0x6F: "OBJ", 0x82: "EXT1", 0x83: "EXT2", 0x84: "EXT4",
                         0x97: "NEXT_BUFFER", 0x98: "READONLY_BUFFER", 0x50: "PERSID",
                         0x53: "STRING"}
                raise _Reject(f"opcode {names.get(op, hex(op))} is not allowed")

    def _global(self, module, name):
        module = _MODULE_ALIASES.get(module, module)
        found = ALLOWED_GLOBALS.get((module, name))
        if found is None:
            shown = f"{module}.{name}"
            raise _Reject(f"global {shown[:200]!r} is not in the allowlist (only torch tensor "
                          "rebuild functions, storage types, dtypes and containers)")
        return found

    def _newobj(self, cls, args, kwargs):
        if cls is _ORDERED_DICT and args == () and not kwargs:
            return OrderedDict()
        raise _Reject(f"NEWOBJ is only allowed for an empty OrderedDict, got "
                      f"{getattr(cls, 'qualname', type(cls).__name__)}")
