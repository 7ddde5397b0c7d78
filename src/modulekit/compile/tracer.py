"""Capture: run ``forward`` once on traced arrays and record what it does as a :class:`Graph`.

The capture runs the real computation: a :class:`TracedArray` wraps the real ndarray of each
forward input and of every result computed from one, so the capturing call returns the same
values as an eager call (it IS the eager call) and the graph's shapes and dtypes are the ones
observed. What is recorded:

* module calls (``Module.__call__`` asks the capture first: ``_guard.set_capture``):
  a modulekit.nn layer (a class whose ``forward`` is defined in ``modulekit.nn``) is a
  ``call_module`` node, run whole; a module with forward hooks is a ``call_module`` node that
  calls the module with its hooks (they fire, at capture and in the plan, as in eager mode);
  a plain ``Sequential`` is traced child by child (the planner, not the container, fuses
  them); any other module (a user's, a
  model's block) is traced through, its path kept on each node as ``scope``;
* NumPy ufuncs and array functions on traced arrays (``__array_ufunc__``,
  ``__array_function__``), Python operators, ndarray methods, indexing and assignment;
* ``modulekit.nn.functional`` functions and the library helpers marked :func:`traceable`;
* shape reads: ``x.shape[i]`` is a :class:`SymInt`, a shape value read at run time (``dim``
  node), so ``x.reshape(x.shape[0], -1)`` works for any batch size.

What cannot be captured is anything that turns traced data into a Python value: ``bool()``,
``float()``, ``int()``, ``.item()``, ``.tolist()``, iteration, ``repr``, handing a traced
array to code that reads its memory (``np.asarray`` in a C kernel). The capture then notes the
first such place (file and line) and keeps going on the real values, so the call still
returns the eager result; the module runs eagerly for that input signature (or, with
``fullgraph=True``, the call raises :class:`CompileError`). A shape value used as a Python
value (compared, hashed, passed to code that is not traced) is fine but specialises the
capture to the exact input shapes seen.
"""

from __future__ import annotations

import functools
import operator
import os
import sys
import threading

import numpy as np

from modulekit._ext._guard import capture as _capture
from modulekit._ext._guard import set_capture as _set_capture
from modulekit.compile.graph import Graph, Node

__all__ = ["CompileError", "TracedArray", "SymInt", "Capture", "traceable"]

_NP_SCALAR = np.generic
_LOCK = threading.Lock()  # one capture at a time in the process


class CompileError(RuntimeError):
    """A forward that ``compile(fullgraph=True)`` cannot capture, or a compiled module that
    cannot be saved/loaded; the message names the reason and the source line."""


# ------------------------------------------------------------------------------------------
# where in the user's source
_SKIP_DIRS = tuple(
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), d) + os.sep
    for d in ("compile", "nn", "_ext")
) + (os.path.dirname(np.__file__) + os.sep,)
_MODULE_PY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "module.py")


def _where() -> str:
    """``file:line`` of the innermost frame outside modulekit's compile/nn/_ext and NumPy."""
    frame = sys._getframe(1)
    while frame is not None:
        fname = os.path.abspath(frame.f_code.co_filename)
        if not fname.startswith(_SKIP_DIRS) and fname != _MODULE_PY \
                and fname != os.path.abspath(functools.__file__):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"


# ------------------------------------------------------------------------------------------
# traced values
class TracedArray:
    """Stands for an ndarray (or NumPy scalar) during a capture: it holds the real value and
    the graph node that computes it, and records every operation applied to it."""

    __slots__ = ("_value", "_node", "_cap")
    __array_priority__ = 1e9
    __hash__ = None  # as ndarray

    def __init__(self, value, node: Node, cap: Capture) -> None:
        self._value = value
        self._node = node
        self._cap = cap

    # ------------------------------------------------------------ NumPy protocols
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        fn = ufunc if method == "__call__" else getattr(ufunc, method)
        name = f"numpy.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")
        return self._cap.record("call_function", name, fn, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        cap = self._cap
        if func is np.shape and len(args) == 1 and isinstance(args[0], TracedArray):
            return args[0].shape
        if func is np.ndim and len(args) == 1 and isinstance(args[0], TracedArray):
            return args[0].ndim
        mod = func.__module__ or "numpy"
        if not mod.startswith("numpy"):
            mod = "numpy"
        return cap.record("call_function", f"{mod}.{func.__name__}", func, args, kwargs)

    def __array__(self, dtype=None, copy=None):
        self._cap.graph_break("an array's memory was read by code that is not traced (a "
                              "C kernel, np.asarray, a library call)")
        value = np.asarray(self._value)
        return value if dtype is None else value.astype(dtype, copy=False)

    # ------------------------------------------------------------ attributes
    @property
    def shape(self) -> tuple:
        cap, node = self._cap, self._node
        return tuple(
            SymInt(d, cap.graph.add("dim", "shape", args=(node, i), name="size", kind="int"),
                   cap)
            for i, d in enumerate(np.shape(self._value))
        )

    @property
    def size(self):
        return SymInt(np.size(self._value),
                      self._cap.graph.add("dim", "size", args=(self._node, "size"),
                                          name="numel", kind="int"), self._cap)

    @property
    def ndim(self) -> int:
        return np.ndim(self._value)

    @property
    def dtype(self):
        return self._value.dtype

    @property
    def itemsize(self) -> int:
        return self._value.itemsize

    @property
    def T(self):
        return self._cap.record("call_method", "transpose", None, (self,), {})

    @property
    def nbytes(self) -> int:
        self._cap.specialize("nbytes")
        return self._value.nbytes

    @property
    def strides(self):
        self._cap.specialize("strides")
        return self._value.strides

    def __len__(self) -> int:
        self._cap.specialize("len()")
        return len(self._value)

    def __getattr__(self, name: str):
        if name.startswith("__"):  # protocol probes (__array_struct__, ...): not there
            raise AttributeError(name)
        if name in _METHODS:
            cap = self._cap

            def method(*args, **kwargs):
                return cap.record("call_method", name, None, (self,) + args, kwargs)

            return method
        self._cap.graph_break(f"reads ndarray attribute {name!r}")
        return getattr(self._value, name)

    # ------------------------------------------------------------ indexing
    def __getitem__(self, index):
        return self._cap.record("call_method", "__getitem__", None, (self, index), {})

    def __setitem__(self, index, value) -> None:
        self._cap.record("call_method", "__setitem__", None, (self, index, value), {})

    # ------------------------------------------------------------ value reads: not captured
    def _read(self, what: str):
        self._cap.graph_break(f"{what} of a traced array (the result depends on its values)")
        return self._value

    def __bool__(self):
        return bool(self._read("bool()"))

    def __float__(self):
        return float(self._read("float()"))

    def __int__(self):
        return int(self._read("int()"))

    def __index__(self):
        return operator.index(self._read("use as an index"))

    def __complex__(self):
        return complex(self._read("complex()"))

    def __iter__(self):
        return iter(self._read("iteration"))

    def __contains__(self, item):
        return item in self._read("'in'")

    def item(self, *args):
        return self._read(".item()").item(*args)

    def tolist(self):
        return self._read(".tolist()").tolist()

    def tobytes(self, *args, **kwargs):
        return self._read(".tobytes()").tobytes(*args, **kwargs)

    def __repr__(self):
        return repr(self._read("repr()"))

    def __str__(self):
        return str(self._read("str()"))

    def __format__(self, spec):
        return format(self._read("format()"), spec)


class SymInt:
    """A shape value (``x.shape[i]``, ``x.size``, arithmetic on them) during a capture: read
    at run time by the plan. Used as a Python value (compared, hashed, converted, passed to
    code that is not traced) it is its captured value, and the capture is specialised to the
    exact input shapes."""

    __slots__ = ("_value", "_node", "_cap")

    def __init__(self, value: int, node: Node, cap: Capture) -> None:
        self._value = int(value)
        self._node = node
        self._cap = cap

    def _op(self, fn, name, *args):
        return self._cap.record_int(name, fn, args)

    def __add__(self, o):
        return self._op(operator.add, "operator.add", self, o)

    def __radd__(self, o):
        return self._op(operator.add, "operator.add", o, self)

    def __sub__(self, o):
        return self._op(operator.sub, "operator.sub", self, o)

    def __rsub__(self, o):
        return self._op(operator.sub, "operator.sub", o, self)

    def __mul__(self, o):
        return self._op(operator.mul, "operator.mul", self, o)

    def __rmul__(self, o):
        return self._op(operator.mul, "operator.mul", o, self)

    def __floordiv__(self, o):
        return self._op(operator.floordiv, "operator.floordiv", self, o)

    def __rfloordiv__(self, o):
        return self._op(operator.floordiv, "operator.floordiv", o, self)

    def __mod__(self, o):
        return self._op(operator.mod, "operator.mod", self, o)

    def __neg__(self):
        return self._op(operator.neg, "operator.neg", self)

    def _concrete(self, what: str) -> int:
        self._cap.specialize(what)
        return self._value

    def __index__(self):
        return self._concrete("a shape value used as an int")

    def __int__(self):
        return self._concrete("int() of a shape value")

    def __float__(self):
        return float(self._concrete("float() of a shape value"))

    def __truediv__(self, o):
        return self._concrete("a shape value divided") / _concrete(o)

    def __rtruediv__(self, o):
        return _concrete(o) / self._concrete("a shape value divided")

    def __pow__(self, o):
        return self._concrete("a shape value raised to a power") ** _concrete(o)

    def __bool__(self):
        return bool(self._concrete("bool() of a shape value"))

    def __hash__(self):
        return hash(self._concrete("a shape value hashed"))

    def __eq__(self, o):
        return self._concrete("a shape value compared") == _concrete(o)

    def __ne__(self, o):
        return self._concrete("a shape value compared") != _concrete(o)

    def __lt__(self, o):
        return self._concrete("a shape value compared") < _concrete(o)

    def __le__(self, o):
        return self._concrete("a shape value compared") <= _concrete(o)

    def __gt__(self, o):
        return self._concrete("a shape value compared") > _concrete(o)

    def __ge__(self, o):
        return self._concrete("a shape value compared") >= _concrete(o)

    def __repr__(self):
        return repr(self._concrete("repr() of a shape value"))

    __str__ = __repr__

    def __format__(self, spec):
        return format(self._concrete("format() of a shape value"), spec)


def _concrete(value):
    if isinstance(value, SymInt):
        return value._concrete("a shape value used as a Python value")
    if isinstance(value, TracedArray):
        return value._read("a Python value")
    return value


# ndarray methods recorded as call_method nodes (the receiver first)
_METHODS = frozenset(
    "reshape transpose swapaxes squeeze ravel flatten astype copy mean sum max min prod std var "
    "argmax argmin cumsum cumprod clip repeat take round any all dot view fill conj "
    "sort argsort nonzero diagonal trace".split()
)
#: methods without side effects (dead-code elimination may drop them)
PURE_METHODS = _METHODS - {"fill", "sort"} | {"__getitem__"}

# Python operators: recorded as ``operator.<name>`` calls, run with the operator itself, so the
# plan computes what eager ``x + y`` computes (ndarray's operator fast paths included)
_BINARY = ("add sub mul truediv floordiv mod pow matmul and_ or_ xor lshift rshift lt le gt ge "
           "eq ne").split()
_INPLACE = "iadd isub imul itruediv ifloordiv imod ipow imatmul iand ior ixor".split()


def _binary(name: str):
    fn = getattr(operator, name)
    dunder = name.rstrip("_")

    def op(self, other):
        return self._cap.record("call_function", f"operator.{name}", fn, (self, other), {})

    def rop(self, other):
        return self._cap.record("call_function", f"operator.{name}", fn, (other, self), {})

    op.__name__ = f"__{dunder}__"
    rop.__name__ = f"__r{dunder}__"
    return op, rop


for _name in _BINARY:
    _op, _rop = _binary(_name)
    setattr(TracedArray, _op.__name__, _op)
    if _name not in ("lt", "le", "gt", "ge", "eq", "ne"):
        setattr(TracedArray, _rop.__name__, _rop)
for _name in _INPLACE:
    _fn = getattr(operator, _name)

    def _iop(self, other, _fn=_fn, _name=_name):
        return self._cap.record("call_function", f"operator.{_name}", _fn, (self, other), {})

    setattr(TracedArray, f"__{_name}__", _iop)
for _name in ("neg", "pos", "abs", "invert"):
    _fn = getattr(operator, _name)

    def _uop(self, _fn=_fn, _name=_name):
        return self._cap.record("call_function", f"operator.{_name}", _fn, (self,), {})

    setattr(TracedArray, f"__{_name}__", _uop)

#: operator functions without side effects
PURE_OPERATORS = frozenset(f"operator.{n}" for n in _BINARY + ["neg", "pos", "abs", "invert"])


# ------------------------------------------------------------------------------------------
# library functions the capture records as one node
def traceable(fn, name: str | None = None):
    """Mark a library function so that a capture records a call with traced arguments as one
    ``call_function`` node (run whole by the plan) instead of tracing into it; ``name`` is the
    node's target (default: the function's module and qualified name). Costs one global read
    per call outside a capture."""
    if name is None:
        name = f"{fn.__module__}.{fn.__qualname__}"

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        cap = _capture()
        if cap is not None:
            return cap.call_function(name, fn, args, kwargs)
        return fn(*args, **kwargs)

    wrapper.__modulekit_traceable__ = name
    return wrapper


# ------------------------------------------------------------------------------------------
def _is_leaf(module) -> bool:
    """A modulekit.nn layer run whole: its forward is defined in modulekit.nn (containers
    excepted)."""
    from modulekit.nn.modules.container import ModuleDict, ModuleList, Sequential

    cls = type(module)
    if issubclass(cls, (Sequential, ModuleList, ModuleDict)):
        return False
    return (getattr(cls.forward, "__module__", "") or "").startswith("modulekit.nn.")


def _plain_sequential(module) -> bool:
    from modulekit.nn.modules.container import Sequential

    cls = type(module)
    return (isinstance(module, Sequential) and cls.forward is Sequential.forward
            and cls.__call__ is Sequential.__call__)


class Capture:
    """The state of one capture (see the module docstring)."""

    def __init__(self, root, fullgraph: bool = False) -> None:
        self.root = root
        self.fullgraph = fullgraph
        self.graph = Graph()
        self.thread = threading.get_ident()
        self.broken: tuple[str, str] | None = None  # (reason, file:line)
        self.specialized: list[str] = []
        self.opaque = 0
        self.paths: dict[int, str] = {}
        for path, m in root.named_modules():
            self.paths.setdefault(id(m), path)
        self.scope: list[str] = [""]

    # ------------------------------------------------------------ failures
    def graph_break(self, reason: str) -> None:
        where = _where()
        if self.fullgraph and self.broken is None:
            self.broken = (reason, where)
            raise CompileError(
                f"compile(fullgraph=True): {type(self.root).__name__}.forward cannot be "
                f"captured: {reason} at {where}"
            )
        if self.broken is None:
            self.broken = (reason, where)

    def specialize(self, what: str) -> None:
        if not self.specialized:
            self.specialized.append(f"{what} at {_where()}")

    # ------------------------------------------------------------ encoding
    def encode(self, value):
        """``value`` with traced values replaced by their nodes (same structure)."""
        t = type(value)
        if t is TracedArray or t is SymInt:
            return value._node
        if t is tuple:
            return tuple(self.encode(v) for v in value)
        if t is list:
            return [self.encode(v) for v in value]
        if t is dict:
            return {k: self.encode(v) for k, v in value.items()}
        if t is slice:
            return slice(self.encode(value.start), self.encode(value.stop),
                         self.encode(value.step))
        if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
            return tuple(self.encode(v) for v in value)
        return value

    @staticmethod
    def unwrap(value):
        """``value`` with traced values replaced by their real values (same structure)."""
        t = type(value)
        if t is TracedArray or t is SymInt:
            return value._value
        if t is tuple:
            return tuple(Capture.unwrap(v) for v in value)
        if t is list:
            return [Capture.unwrap(v) for v in value]
        if t is dict:
            return {k: Capture.unwrap(v) for k, v in value.items()}
        if t is slice:
            return slice(Capture.unwrap(value.start), Capture.unwrap(value.stop),
                         Capture.unwrap(value.step))
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            return type(value)(*(Capture.unwrap(v) for v in value))
        return value

    def wrap(self, node: Node, result):
        """The traced stand-in of ``result``, computed by ``node``."""
        if isinstance(result, (np.ndarray, _NP_SCALAR)):
            node.meta.setdefault("shape", tuple(np.shape(result)))
            node.meta.setdefault("dtype", str(result.dtype))
            return TracedArray(result, node, self)
        if result is None:
            return None
        if isinstance(result, (tuple, list)):
            node.meta.setdefault("kind", type(result).__name__)
            items = [self.wrap(self.graph.add("getitem", "getitem", args=(node, i),
                                              name=f"{node.name}_{i}"), r)
                     for i, r in enumerate(result)]
            if hasattr(result, "_fields"):
                return type(result)(*items)
            return type(result)(items)
        if type(result) is dict:
            node.meta.setdefault("kind", "dict")
            return {k: self.wrap(self.graph.add("getitem", "getitem", args=(node, k),
                                                name=f"{node.name}_{k}"), r)
                    for k, r in result.items()}
        if isinstance(result, (bool, int, float, complex, str)):
            self.graph_break(f"{node.target} returned a Python {type(result).__name__} "
                             "computed from traced arrays")
            return result
        self.graph_break(f"{node.target} returned a {type(result).__name__}, which the "
                         "capture cannot follow")
        return result

    # ------------------------------------------------------------ recording
    def _meta(self) -> dict:
        return {"scope": self.scope[-1], "where": _where()}

    def record(self, op: str, target: str, fn, args, kwargs):
        """Run ``fn`` (or the method ``target`` of ``args[0]``) on the real values and record
        it as a node; returns the traced result."""
        real_args, real_kwargs = self.unwrap(args), self.unwrap(kwargs)
        if target in ("squeeze", "numpy.squeeze") and len(real_args) < 2 \
                and real_kwargs.get("axis") is None:
            # the result's rank depends on which sizes are 1: keep the plan to these shapes
            self.specialize("squeeze() without an axis")
        if op == "call_method":
            receiver = real_args[0]
            if target == "__getitem__":
                result = receiver[real_args[1]]
            elif target == "__setitem__":
                receiver[real_args[1]] = real_args[2]
                result = None
            else:
                result = getattr(receiver, target)(*real_args[1:], **real_kwargs)
        else:
            result = fn(*real_args, **real_kwargs)
        if self.broken is not None:
            return result
        node = self.graph.add(op, target, fn, self.encode(tuple(args)), self.encode(kwargs),
                              name=target.rsplit(".", 1)[-1].strip("_") or "v", **self._meta())
        return self.wrap(node, result)

    def record_int(self, target: str, fn, args):
        real = fn(*self.unwrap(args))
        if self.broken is not None or not isinstance(real, int):
            return real
        node = self.graph.add("call_function", target, fn, self.encode(tuple(args)), {},
                              name="size", kind="int", **self._meta())
        return SymInt(real, node, self)

    def call_function(self, name: str, fn, args, kwargs):
        """A :func:`traceable` library function called during this capture."""
        if (self.thread != threading.get_ident() or self.opaque or self.broken is not None
                or not _has_traced((args, kwargs))):
            return fn(*self.unwrap(args), **self.unwrap(kwargs))
        # module arguments are referenced by path
        return self.record("call_function", name, fn, args, kwargs)

    def call_module(self, module, args: tuple, kwargs: dict):
        """``Module.__call__`` during this capture."""
        if self.thread != threading.get_ident() or self.opaque:
            compiled = module._compiled
            if compiled is not None and self.thread != threading.get_ident():
                return compiled(args, kwargs)
            return module._eager_call(args, kwargs)
        if self.broken is not None:
            return module._eager_call(self.unwrap(args), self.unwrap(kwargs))
        if module._has_hooks or _is_leaf(module):
            return self._module_node(module, args, kwargs)
        if _plain_sequential(module):
            return self._sequential(module, args, kwargs)
        path = self.paths.get(id(module))
        self.scope.append(path if path is not None else f"<{type(module).__name__}>")
        try:
            return module.forward(*args, **kwargs)
        finally:
            self.scope.pop()

    def trace_root(self, *args, **kwargs):
        """The root's forward (its hooks run around the plan, not in it): a layer is one
        node, a plain Sequential runs as eager runs it, anything else is traced through."""
        root = self.root
        if _is_leaf(root):
            return self._module_node(root, args, kwargs, hooks=False)
        if _plain_sequential(root):
            return self._sequential(root, args, kwargs)
        return root.forward(*args, **kwargs)

    def _module_node(self, module, args, kwargs, hooks=None):
        real_args, real_kwargs = self.unwrap(args), self.unwrap(kwargs)
        if hooks is None:
            hooks = bool(module._has_hooks)
        self.opaque += 1
        try:
            if hooks:
                result = module._eager_call(real_args, real_kwargs)
            else:
                result = module.forward(*real_args, **real_kwargs)
        finally:
            self.opaque -= 1
        path = self.paths.get(id(module))
        node = self.graph.add(
            "call_module", path if path is not None else f"<{type(module).__name__}>", module,
            self.encode(args), self.encode(kwargs),
            name=(path or type(module).__name__.lower()).replace(".", "_"),
            module_type=type(module).__name__, hooks=hooks,
            path=path, **self._meta())
        return self.wrap(node, result)

    def _sequential(self, seq, args, kwargs):
        """A plain Sequential: its children one by one (the planner fuses them), in its
        scope."""
        path = self.paths.get(id(seq))
        self.scope.append(path if path is not None else "<Sequential>")
        try:
            if len(args) != 1 or kwargs:
                return seq.forward(*args, **kwargs)  # raises as eager does
            x = args[0]
            for m in seq._modules.values():
                x = m(x)
            return x
        finally:
            self.scope.pop()


def _has_traced(value) -> bool:
    t = type(value)
    if t is TracedArray or t is SymInt:
        return True
    if isinstance(value, (tuple, list)):
        return any(_has_traced(v) for v in value)
    if t is dict:
        return any(_has_traced(v) for v in value.values())
    if t is slice:
        return _has_traced((value.start, value.stop, value.step))
    return False


def run_capture(root, args: tuple, kwargs: dict, array_positions, input_names, fullgraph):
    """Run ``root.forward`` on traced inputs. Returns ``(result, capture, traced result)``;
    ``capture`` is None when another thread is capturing (the call then ran eagerly)."""
    from modulekit._ext._arena import call as arena_call

    if not _LOCK.acquire(blocking=False):
        return root.forward(*args, **kwargs), None, None
    cap = Capture(root, fullgraph)
    try:
        args, kwargs = list(args), dict(kwargs)
        for (where, key), name in zip(array_positions, input_names):
            container = args if where == "a" else kwargs
            value = container[key]
            node = cap.graph.add("input", name, args=(), name=name)
            container[key] = cap.wrap(node, value)
            node.meta["arg"] = (where, key)
        _set_capture(cap)
        try:
            out = arena_call(cap.trace_root, tuple(args), kwargs)
        finally:
            _set_capture(None)
        return cap.unwrap(out), cap, out
    finally:
        _LOCK.release()
