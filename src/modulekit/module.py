"""``Module``: the base class of every modulekit layer and model.

A Module keeps its state in plain dicts on the instance (``_parameters``, ``_buffers``,
``_modules`` and the set ``_non_persistent_buffers``), registered by attribute assignment as in
PyTorch. Traversal, hooks, ``repr`` and ``state_dict`` names follow ``torch.nn.Module``;
``load_state_dict``, ``to`` and ``initialize`` are all-or-nothing (a refusal, or running out of
memory part-way, leaves the tree unchanged), and run as writers of the state guard
(``modulekit/_ext/_guard.pyx``): never while a module call runs, whose outermost call is a reader.

The packing protocol
--------------------
A layer with bound weights may convert them once into a packed, kernel-ready form. It overrides:

``_pack()``
    Build the packed form from the registered tensors and release them (remove them from
    ``_parameters``: :meth:`Module.state_dict` no longer lists them). Build first, then only
    rebind attributes and delete registry entries (``initialize`` undoes a failed pack of the
    tree by restoring every module's dicts). Idempotent; hold
    ``self._pack_lock`` (created by ``Module.__init__`` for every class overriding ``_pack``)
    so concurrent first forwards pack once.
``_packed_keys() -> dict[str, tuple[tuple[int, ...], DataType]]``
    The local names consumed by packing with their shapes and dtypes; empty when not packed.
``_packed_values() -> dict[str, numpy.ndarray]``
    The packed tensors' values unpacked, as NEW C-contiguous arrays keyed, ordered, shaped and
    typed as ``_packed_keys`` says; changes nothing (``state_dict(include_packed=True)``).
``_unpack()``
    Restore the registered tensors (new Parameter objects over ``_packed_values()``) from the
    packed form. It may only rebind attributes and write ``self._parameters`` /
    ``self._buffers`` entries (pickling runs it on a shallow copy of the module).
``_repack(values, dtype=None)``
    Re-pack from ``values`` (local name -> ndarray of the shape given by ``_packed_keys``; names
    left out keep their current packed value), storing in ``dtype`` when given. It must build
    a NEW packed object and rebind it, never mutate the old one (``load_state_dict`` and
    ``to`` roll a failure back by restoring the old binding).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from modulekit import _shared
from modulekit._ext._gemm import warm_threads as _warm_threads
from modulekit._ext._guard import eager_call as _guard_eager_call
from modulekit._ext._guard import exclusive as _exclusive
from modulekit._ext._guard import module_call as _module_call
from modulekit._ext._tensor import Parameter, Tensor
from modulekit._state_dict import (
    LoadResult,
    StateDictError,
    StateDictMixin,
    StateDictTypeError,
    _as_array,
    _restore,
    _snapshot,
    _value_description,
)
from modulekit.device import Device, as_device
from modulekit.dtypes import DataType, as_dtype
from modulekit.hooks import RemovableHandle

__all__ = ["Module", "LoadResult", "StateDictError", "StateDictTypeError"]

#: Per-thread state of ``initialize(example)``'s warm-up call (``hooks_off``: skip hooks).
_warm_up = threading.local()

#: The structure epoch: a process-wide count of changes that can alter what some module's
#: forward computes beyond its input, bumped by every attribute assignment or deletion on a
#: Module (children, parameters, buffers, flags such as ``training``), by registering a
#: child/parameter/buffer, by adding or removing a forward hook, by ``train``/``eval``,
#: ``load_state_dict``, ``to`` (and the casts) and ``initialize``, and by the containers'
#: own edits (``del``, ``insert``, ``clear``). A model that plans its forward (MobileNetV2)
#: keeps the plan while the epoch is the one it planned at: one integer compared per call,
#: instead of re-checking every module. Not covered: writes into the registries' dicts or
#: into a tensor's memory behind the Module API (``m._modules[k] = ...``,
#: ``bn.running_mean.numpy()[:] = ...``), as for the folded Conv+BN kernels.
_epoch = 0


def _bump_epoch() -> None:
    """Advance the structure epoch (see ``_epoch``): plans made before are stale."""
    global _epoch
    _epoch += 1


def structure_epoch() -> int:
    """The current structure epoch (see ``_epoch``)."""
    return _epoch


# torch device families: a string naming one of these is a device (and refused unless "cpu").
_DEVICE_TYPES = frozenset(
    "cpu cuda mps xpu ipu mtia hpu xla meta vulkan hip maia lazy ve fpga ort mkldnn opengl "
    "opencl ideep privateuseone".split()
)

# TorchScript-only attributes of torch.jit.ScriptModule (seed 003): modulekit has no graphs.
_TORCHSCRIPT_ATTRS = frozenset(("code", "code_with_constants", "graph", "inlined_graph"))

_NO_AUTOGRAD = (
    "modulekit is an inference library and has no autograd: there is no backward pass, no "
    "gradients and nothing to hook on them"
)


def _insert_hook(registry: dict, key: int, hook, prepend: bool) -> None:
    if prepend:
        items = list(registry.items())
        registry.clear()
        registry[key] = hook
        registry.update(items)
    else:
        registry[key] = hook


def _addindent(text: str, spaces: int) -> str:
    lines = text.split("\n")
    if len(lines) == 1:
        return text
    pad = " " * spaces
    return lines[0] + "\n" + "\n".join(pad + line if line.strip() else "" for line in lines[1:])


def _join(prefix: str, name: str) -> str:
    return prefix + ("." if prefix else "") + name


class Module(StateDictMixin):
    """Base class for neural-network modules.

    Subclass it, register children/parameters by attribute assignment in ``__init__`` (after
    ``super().__init__()``), and define :meth:`forward`. Call the module itself (``m(x)``).

    Attributes
    ----------
    training : bool
        The training flag; :meth:`train` / :meth:`eval` set it on the whole tree.
    """

    training: bool
    _version: int = 1
    _has_hooks: bool = False
    # True once the module has hooks or a child: __call__ then runs it under the activation
    # cache (see __call__); a leaf without hooks keeps the bare path.
    _scoped_call: bool = False
    # The compiled call (modulekit.compile.CompiledCall) once compile() ran, else None.
    _compiled = None

    # ------------------------------------------------------------------ construction
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Initialize the registries. Takes no arguments."""
        if args or kwargs:
            raise TypeError(
                f"{type(self).__name__}.__init__() got unexpected arguments: Module.__init__ "
                f"takes none (got {len(args)} positional and keyword(s) {sorted(kwargs)})"
            )
        d = self.__dict__
        d["training"] = True
        d["_parameters"] = {}
        d["_buffers"] = {}
        d["_non_persistent_buffers"] = set()
        d["_modules"] = {}
        self._init_hook_registries(d)
        if type(self)._pack is not Module._pack:
            d["_pack_lock"] = threading.Lock()

    @staticmethod
    def _init_hook_registries(d: dict) -> None:
        d["_forward_pre_hooks"] = {}
        d["_forward_pre_hooks_with_kwargs"] = set()
        d["_forward_hooks"] = {}
        d["_forward_hooks_with_kwargs"] = set()
        d["_forward_hooks_always_called"] = set()
        d["_state_dict_pre_hooks"] = {}
        d["_state_dict_hooks"] = {}
        d["_load_state_dict_pre_hooks"] = {}
        d["_load_state_dict_post_hooks"] = {}
        d["_has_hooks"] = False

    def _not_initialized(self, what: str, name: str) -> AttributeError:
        cls = type(self).__name__
        return AttributeError(
            f"cannot assign {what} '{name}' to {cls} before Module.__init__() was called: "
            f"call super().__init__() first in {cls}.__init__"
        )

    def _check_new_name(self, kind: str, name, registry: str) -> None:
        if not isinstance(name, str):
            raise TypeError(f"{kind} name should be a string, got {type(name).__name__}")
        if "." in name:
            raise KeyError(f'{kind} name can\'t contain ".", got: {name!r}')
        if name == "":
            raise KeyError(f'{kind} name can\'t be empty string ""')
        if name not in self.__dict__[registry] and hasattr(self, name):
            raise KeyError(f"attribute '{name}' already exists")

    def register_buffer(self, name: str, tensor, persistent: bool = True) -> None:
        """File ``tensor`` as a buffer: module state that is not a learned parameter.

        Parameters
        ----------
        name : str
            Attribute name of the buffer.
        tensor : Tensor, array-like or None
            The buffer. An array-like is copied into a new :class:`Tensor`; ``None`` registers
            an empty slot skipped by :meth:`state_dict` and :meth:`to`.
        persistent : bool
            Persistent buffers appear in :meth:`state_dict`; ``persistent=False`` keeps one out.
        """
        if "_buffers" not in self.__dict__:
            raise self._not_initialized("buffer", name)
        self._check_new_name("buffer", name, "_buffers")
        if tensor is not None and not isinstance(tensor, Tensor):
            value = tensor
            try:
                tensor = None if _as_array(value) is None else Tensor(value)
            except TypeError:  # a dtype with no modulekit DataType (uint16, ...)
                tensor = None
            if tensor is None:
                raise TypeError(
                    f"cannot assign {_value_description(value)} as buffer '{name}' "
                    "(a modulekit Tensor, an array of real numbers of a modulekit data type, "
                    "or None expected)"
                )
        _bump_epoch()
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers.discard(name)
        else:
            self._non_persistent_buffers.add(name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """File ``param`` under ``name`` (what Parameter assignment does); ``None`` allowed."""
        if "_parameters" not in self.__dict__:
            raise self._not_initialized("parameter", name)
        self._check_new_name("parameter", name, "_parameters")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(
                f"cannot assign '{type(param).__name__}' object to parameter '{name}' "
                "(modulekit.Parameter or None required)"
            )
        _bump_epoch()
        self._parameters[name] = param

    def add_module(self, name: str, module: Module | None) -> None:
        """File ``module`` as a child named ``name`` (what Module assignment does)."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        if "_modules" not in self.__dict__:
            raise self._not_initialized("child module", name)
        self._check_new_name("module", name, "_modules")
        _bump_epoch()
        self._modules[name] = module
        self.__dict__["_scoped_call"] = True

    def register_module(self, name: str, module: Module | None) -> None:
        """Alias of :meth:`add_module`."""
        self.add_module(name, module)

    # ------------------------------------------------------------------ attributes
    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        if "_parameters" in d:
            for registry in ("_parameters", "_buffers", "_modules"):
                entries = d[registry]
                if name in entries:
                    return entries[name]
            if not name.startswith("_") and name in self._packed_keys():
                raise AttributeError(
                    f"'{type(self).__name__}.{name}' was packed into the kernel layout "
                    "(initialize() or the first forward) and its source tensor released; "
                    "load new values with load_state_dict(), or cast with to()"
                )
        if name in _TORCHSCRIPT_ATTRS:
            compiled = d.get("_compiled")
            if compiled is not None:
                return getattr(compiled, name)
            raise AttributeError(
                f"'{type(self).__name__}' has no attribute '{name}': it describes a compiled "
                "module's captured forward; call compile() and then the module once (or "
                "initialize(example_input)) first"
            )
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name: str, value: Any) -> None:
        _bump_epoch()
        d = self.__dict__
        params = d.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise self._not_initialized("parameter", name)
            self._remove_name(name, params_too=False)
            self.register_parameter(name, value)
            return
        if params is not None and name in params:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                    "(modulekit.Parameter or None expected)"
                )
            self.register_parameter(name, value)
            return
        modules = d.get("_modules")
        if isinstance(value, Module):
            if modules is None:
                raise self._not_initialized("child module", name)
            self._remove_name(name, modules_too=False)
            modules[name] = value
            d["_scoped_call"] = True   # see __call__
            return
        if modules is not None and name in modules:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{type(value).__name__}' as child module '{name}' "
                    "(Module or None expected)"
                )
            modules[name] = value
            return
        buffers = d.get("_buffers")
        if buffers is not None and name in buffers:
            self.register_buffer(name, value, name not in self._non_persistent_buffers)
            return
        object.__setattr__(self, name, value)

    def _remove_name(self, name: str, params_too: bool = True, modules_too: bool = True):
        d = self.__dict__
        d.pop(name, None)
        d["_buffers"].pop(name, None)
        d["_non_persistent_buffers"].discard(name)
        if params_too:
            d["_parameters"].pop(name, None)
        if modules_too:
            d["_modules"].pop(name, None)

    def __delattr__(self, name: str) -> None:
        _bump_epoch()
        d = self.__dict__
        if "_parameters" in d:
            if name in d["_parameters"]:
                del d["_parameters"][name]
                return
            if name in d["_buffers"]:
                del d["_buffers"][name]
                d["_non_persistent_buffers"].discard(name)
                return
            if name in d["_modules"]:
                del d["_modules"][name]
                return
        object.__delattr__(self, name)

    def __dir__(self) -> list[str]:
        keys = set(dir(type(self)))
        keys.update(self.__dict__)
        for registry in ("_parameters", "_modules", "_buffers"):
            keys.update(self.__dict__.get(registry, ()))
        return sorted(k for k in keys if not k[:1].isdigit())

    # ------------------------------------------------------------------ pickling
    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        if "_pack_lock" in state and self._packed_keys():
            # Pickle the raw weights, not the packed form: build them on a shallow copy so
            # this (live, maybe serving) module stays packed.
            twin = object.__new__(type(self))
            twin.__dict__.update(state)
            twin.__dict__["_parameters"] = dict(self._parameters)
            twin.__dict__["_buffers"] = dict(self._buffers)
            twin.__dict__["_pack_lock"] = threading.Lock()
            twin._unpack()
            state = twin.__dict__
        state.pop("_pack_lock", None)
        if state.pop("_compiled", None) is not None:
            state["_scoped_call"] = bool(state["_has_hooks"] or state.get("_modules"))
        return state

    def __setstate__(self, state: dict) -> None:
        _bump_epoch()
        d = self.__dict__
        self._init_hook_registries(d)
        d.update(state)
        d.pop("_compiled", None)  # a compiled plan is not pickled: compile() again
        d["_scoped_call"] = bool(d["_has_hooks"] or d.get("_modules"))
        if type(self)._pack is not Module._pack:
            d["_pack_lock"] = threading.Lock()

    # ------------------------------------------------------------------ calling
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Subclasses define the computation here; call the module itself (``m(x)``), not
        ``forward`` directly, so that hooks run."""
        raise NotImplementedError(
            f'Module [{type(self).__name__}] is missing the required "forward" function'
        )

    # Calling a module (``m(x)``): under a capture (``modulekit.compile``) the capture sees the
    # call first; a compiled module runs its plan; otherwise forward with its hooks, under the
    # state guard (the outermost call on a thread is a reader: to() / load_state_dict() /
    # initialize() never change the tree under it) and, for a module with children or hooks,
    # the activation cache. In C (modulekit/_ext/_guard.pyx): the per-call cost of every layer.
    __call__ = _module_call
    # ``__call__`` without the capture and the compiled plan: hooks and ``forward``
    _eager_call = _guard_eager_call

    def _refresh_hooks_flag(self) -> None:
        _bump_epoch()  # a forward hook was added or removed
        d = self.__dict__
        d["_has_hooks"] = bool(d["_forward_pre_hooks"] or d["_forward_hooks"])
        d["_scoped_call"] = bool(d["_has_hooks"] or d["_modules"] or d.get("_compiled"))

    def _call_with_hooks(self, args: tuple, kwargs: dict, forward: Callable | None = None) -> Any:
        if forward is None:
            forward = self.forward
        if _warm_up.__dict__.get("hooks_off"):  # initialize(example)'s call: no hooks
            return forward(*args, **kwargs)
        result = None
        called = set()
        try:
            for hook_id, hook in tuple(self._forward_pre_hooks.items()):
                if hook_id in self._forward_pre_hooks_with_kwargs:
                    out = hook(self, args, kwargs)
                    if out is not None:
                        if isinstance(out, tuple) and len(out) == 2:
                            args, kwargs = out
                        else:
                            raise RuntimeError(
                                "forward pre-hook must return None or a tuple of "
                                f"(new_args, new_kwargs), but got {out!r}."
                            )
                else:
                    out = hook(self, args)
                    if out is not None:
                        args = out if isinstance(out, tuple) else (out,)
            result = forward(*args, **kwargs)
            for hook_id, hook in tuple(self._forward_hooks.items()):
                called.add(hook_id)
                result = self._run_forward_hook(hook_id, hook, args, kwargs, result)
            return result
        except Exception:
            for hook_id, hook in tuple(self._forward_hooks.items()):
                if hook_id not in self._forward_hooks_always_called or hook_id in called:
                    continue
                try:
                    result = self._run_forward_hook(hook_id, hook, args, kwargs, result)
                except Exception as exc:
                    warnings.warn(
                        "module forward hook with always_call=True raised an exception that "
                        f"was silenced as another error was raised in forward: {exc}",
                        stacklevel=2,
                    )
            raise

    def _run_forward_hook(self, hook_id: int, hook: Callable, args, kwargs, result):
        if hook_id in self._forward_hooks_with_kwargs:
            out = hook(self, args, kwargs, result)
        else:
            out = hook(self, args, result)
        return result if out is None else out

    def register_forward_pre_hook(
        self, hook: Callable, *, prepend: bool = False, with_kwargs: bool = False
    ) -> RemovableHandle:
        """Register ``hook`` to run before every :meth:`forward`.

        ``hook(module, args) -> None or new args`` (a single non-tuple value is wrapped in a
        tuple); with ``with_kwargs=True``: ``hook(module, args, kwargs) -> None or
        (new_args, new_kwargs)``. ``prepend=True`` runs it before the hooks already there.
        Returns a :class:`~modulekit.hooks.RemovableHandle`.
        """
        handle = RemovableHandle(self, "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs")
        _insert_hook(self._forward_pre_hooks, handle.id, hook, prepend)
        if with_kwargs:
            self._forward_pre_hooks_with_kwargs.add(handle.id)
        self._refresh_hooks_flag()
        return handle

    def register_forward_hook(
        self,
        hook: Callable,
        *,
        prepend: bool = False,
        with_kwargs: bool = False,
        always_call: bool = False,
    ) -> RemovableHandle:
        """Register ``hook`` to run after every :meth:`forward`.

        ``hook(module, args, output) -> None or new output``; with ``with_kwargs=True``:
        ``hook(module, args, kwargs, output)``. ``always_call=True`` runs it even when forward
        (or an earlier hook) raises; the exception then propagates. Returns a
        :class:`~modulekit.hooks.RemovableHandle`.
        """
        handle = RemovableHandle(
            self,
            "_forward_hooks",
            "_forward_hooks_with_kwargs",
            "_forward_hooks_always_called",
        )
        _insert_hook(self._forward_hooks, handle.id, hook, prepend)
        if with_kwargs:
            self._forward_hooks_with_kwargs.add(handle.id)
        if always_call:
            self._forward_hooks_always_called.add(handle.id)
        self._refresh_hooks_flag()
        return handle

    def register_backward_hook(self, hook: Callable) -> RemovableHandle:
        """Refused: modulekit has no autograd."""
        raise NotImplementedError(f"register_backward_hook: {_NO_AUTOGRAD}")

    def register_full_backward_hook(self, hook: Callable, prepend: bool = False):
        """Refused: modulekit has no autograd."""
        raise NotImplementedError(f"register_full_backward_hook: {_NO_AUTOGRAD}")

    def register_full_backward_pre_hook(self, hook: Callable, prepend: bool = False):
        """Refused: modulekit has no autograd."""
        raise NotImplementedError(f"register_full_backward_pre_hook: {_NO_AUTOGRAD}")

    # ------------------------------------------------------------------ traversal
    def named_modules(
        self,
        memo: set | None = None,
        prefix: str = "",
        remove_duplicate: bool = True,
        *,
        _memo: set | None = None,
    ) -> Iterator[tuple[str, Module]]:
        """(dotted name, module) pairs over the whole tree, self first, depth-first.

        A module reachable twice is yielded once (first path wins) unless
        ``remove_duplicate=False``. Signature as torch's; a string first argument is taken as
        ``prefix`` (the ``named_modules(prefix, _memo)`` order of the specification).
        """
        if isinstance(memo, str):
            memo, prefix = _memo, memo
        elif memo is None:
            memo = _memo
        if memo is None:
            memo = set()
        return self._named_modules(memo, prefix, remove_duplicate)

    def _named_modules(self, memo, prefix, remove_duplicate):
        if self in memo:
            return
        if remove_duplicate:
            memo.add(self)
        yield prefix, self
        for name, module in self._modules.items():
            if module is not None:
                yield from module._named_modules(memo, _join(prefix, name), remove_duplicate)

    def modules(self) -> Iterator[Module]:
        """Every module of the tree, self first; a shared module is yielded once."""
        for _, module in self.named_modules():
            yield module

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """(name, child) pairs of the direct children; a child filed twice is yielded once."""
        memo = set()
        for name, module in self._modules.items():
            if module is not None and module not in memo:
                memo.add(module)
                yield name, module

    def children(self) -> Iterator[Module]:
        """The direct children."""
        for _, module in self.named_children():
            yield module

    def _named_members(self, registry: str, prefix, recurse, remove_duplicate):
        if isinstance(prefix, bool):  # the specification's positional ``named_x(recurse)``
            prefix, recurse = "", prefix
        if recurse:
            modules = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate)
        else:
            modules = ((prefix, self),)
        memo = set()
        for module_prefix, module in modules:
            entries = module.__dict__[registry]
            for name, value in entries.items():
                if value is None or value in memo:
                    continue
                if remove_duplicate:
                    memo.add(value)
                yield _join(module_prefix, name), value

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Parameter]]:
        """(dotted name, parameter) pairs; a Parameter shared between two attributes yields
        once (first name wins) unless ``remove_duplicate=False``. Packed weights are not
        listed (the layer released them)."""
        return self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        """The parameters of the tree (or of this module only with ``recurse=False``)."""
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    def named_buffers(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Tensor]]:
        """(dotted name, buffer) pairs, persistent or not; shared buffers yield once."""
        return self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        """The buffers of the tree (or of this module only with ``recurse=False``)."""
        for _, buf in self.named_buffers(recurse=recurse):
            yield buf

    def apply(self, fn: Callable[[Module], None]) -> Module:
        """Run ``fn`` over every module in the tree (children first, then self); return self."""
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    def train(self, mode: bool = True) -> Module:
        """Set the training flag of the whole tree to ``mode``; return self."""
        if not isinstance(mode, bool):
            raise ValueError(f"training mode is expected to be boolean, got {mode!r}")
        self.training = mode
        for module in self.children():
            module.train(mode)
        return self

    def eval(self) -> Module:
        """Equivalent to ``train(False)``; return self."""
        return self.train(False)

    # ------------------------------------------------------------------ lookup by path
    def get_submodule(self, target: str) -> Module:
        """Return the submodule at dotted path ``target`` (``""`` is self).

        Raises ``AttributeError`` when a step does not exist or is not a Module.
        """
        if target == "":
            return self
        module = self
        for item in target.split("."):
            if not hasattr(module, item):
                raise AttributeError(f"{module._get_name()} has no attribute `{item}`")
            module = getattr(module, item)
            if not isinstance(module, Module):
                raise AttributeError(f"`{item}` is not a Module")
        return module

    def set_submodule(self, target: str, module: Module, strict: bool = False) -> None:
        """Set the submodule at dotted path ``target`` to ``module``.

        The parent must exist; with ``strict=True`` the submodule itself must exist too.
        Raises ``ValueError`` for an empty target or a non-Module, ``AttributeError`` for an
        invalid path or when the current attribute is not a Module.
        """
        if target == "":
            raise ValueError("Cannot set the submodule without a target name!")
        if not isinstance(module, Module):
            raise ValueError(f"`module` is not a Module, found {type(module).__name__}")
        parent_path, _, name = target.rpartition(".")
        parent = self.get_submodule(parent_path)
        if hasattr(parent, name):
            if not isinstance(getattr(parent, name), Module):
                raise AttributeError(f"`{name}` is not a Module")
        elif strict:
            raise AttributeError(f"{parent._get_name()} has no attribute `{name}`")
        setattr(parent, name, module)

    def get_parameter(self, target: str) -> Parameter:
        """Return the parameter at dotted path ``target``; ``AttributeError`` otherwise."""
        module_path, _, name = target.rpartition(".")
        module = self.get_submodule(module_path)
        if not hasattr(module, name):
            raise AttributeError(f"{module._get_name()} has no attribute `{name}`")
        param = getattr(module, name)
        if not isinstance(param, Parameter):
            raise AttributeError(f"`{name}` is not a Parameter")
        return param

    def get_buffer(self, target: str) -> Tensor:
        """Return the buffer at dotted path ``target``; ``AttributeError`` otherwise."""
        module_path, _, name = target.rpartition(".")
        module = self.get_submodule(module_path)
        if not hasattr(module, name):
            raise AttributeError(f"{module._get_name()} has no attribute `{name}`")
        if name not in module._buffers:
            raise AttributeError(f"`{name}` is not a buffer")
        return module._buffers[name]

    # ------------------------------------------------------------------ dtype and device
    def to(self, *args: Any, **kwargs: Any) -> Module:
        """Move the tree to a device or cast its floating tensors to a dtype, in place.

        Accepts ``to(target)`` with a :class:`Device`, a device string (``"cpu"``), a
        :class:`DataType`, a dtype name, a NumPy dtype, a torch dtype/device or a Tensor (its
        dtype); ``to(device, dtype)``; and keywords ``device=``, ``dtype=``,
        ``non_blocking=`` (ignored). "cpu" is the only device: any other raises ``ValueError``.
        A floating dtype casts floating parameters and buffers in place (the objects keep
        their identity) and re-packs packed layers; integer buffers are left alone; a
        non-floating dtype raises ``TypeError``. Everything is validated before anything
        changes. Returns self.
        """
        _device, dtype = _parse_to_args(args, kwargs)
        if dtype is not None:
            self._cast_floating(dtype)
        return self

    def _cast_floating(self, dtype: DataType) -> None:
        # All or nothing, and never under a running forward (the state guard): first every
        # allocation (the cast copies, the re-packed kernel objects), then the commit, which
        # cannot fail (rebinding arrays, narrowing casts done in a tensor's own memory).
        with _exclusive("to()"):
            tensors, packed, pending = {}, [], []
            for module in self.modules():
                if type(module)._cast_pending is not Module._cast_pending:
                    pending.append(module)  # (a lazy layer: the dtype of its future tensors)
                for registry in (module._parameters, module._buffers):
                    for tensor in registry.values():
                        if tensor is not None and tensor.dtype.is_floating:
                            tensors[id(tensor)] = tensor  # a tensor tied twice casts once
                if module._packed_keys():
                    packed.append(module)
            saved = [_snapshot(module) for module in packed]
            _bump_epoch()  # (before the commit, which allocates nothing, not even an int)
            try:
                plans = [(tensor, _cast_plan(tensor, dtype)) for tensor in tensors.values()]
                for module in packed:
                    # builds a NEW packed object and rebinds it: undone by _restore
                    module._repack({}, dtype)
            except BaseException:
                _restore(saved)
                raise
            for tensor, arr in plans:
                tensor._cast_commit_(dtype, arr)
            for module in pending:
                module._cast_pending(dtype)

    def half(self) -> Module:
        """Cast floating parameters and buffers to float16 (``to(modulekit.float16)``)."""
        return self.to(as_dtype("float16"))

    def float(self) -> Module:
        """Cast floating parameters and buffers to float32."""
        return self.to(as_dtype("float32"))

    def double(self) -> Module:
        """Cast floating parameters and buffers to float64."""
        return self.to(as_dtype("float64"))

    def bfloat16(self) -> Module:
        """Cast floating parameters and buffers to bfloat16."""
        return self.to(as_dtype("bfloat16"))

    def type(self, dst_type) -> Module:
        """Cast to ``dst_type`` (a floating dtype in any form :meth:`to` accepts)."""
        dtype = _resolve_dtype(dst_type)
        if dtype is None:
            raise TypeError(f"type() expects a floating data type, got {dst_type!r}")
        return self.to(dtype)

    def cpu(self) -> Module:
        """The tree is on the CPU already: returns self."""
        return self

    def _no_device(self, name: str, device) -> ValueError:
        return ValueError(
            f"{type(self).__name__}.{name}({'' if device is None else repr(device)}): "
            "modulekit runs on the CPU only (the only device is 'cpu')"
        )

    def cuda(self, device=None) -> Module:
        """Refused: modulekit runs on the CPU only."""
        raise self._no_device("cuda", device)

    def ipu(self, device=None) -> Module:
        """Refused: modulekit runs on the CPU only."""
        raise self._no_device("ipu", device)

    def xpu(self, device=None) -> Module:
        """Refused: modulekit runs on the CPU only."""
        raise self._no_device("xpu", device)

    def mtia(self, device=None) -> Module:
        """Refused: modulekit runs on the CPU only."""
        raise self._no_device("mtia", device)

    def to_empty(self, *, device, recurse: bool = True) -> Module:
        """Give the tensors storage on ``device`` without copying their values.

        On the CPU, the only device, every tensor already owns storage of its shape and dtype:
        it is kept (same objects, contents to be treated as uninitialised, as in torch).
        ``device`` must be the CPU (``ValueError`` otherwise). Returns self.
        """
        if not isinstance(recurse, bool):
            raise TypeError(f"recurse must be a bool, got {type(recurse).__name__}")
        as_device(device)
        return self

    def share_memory(self) -> Module:
        """Move the tree's weights into shared memory, so that processes hold one copy.

        Packs every layer first (:meth:`initialize`), then copies every parameter, buffer and
        packed weight buffer into POSIX shared memory (``/dev/shm`` on Linux); the Tensor and
        Parameter objects stay the same objects. Pickling the model afterwards (to a
        ``multiprocessing`` spawn/forkserver worker, a Dask worker process, ...) sends
        handles to the segments, not bytes: the receiving process maps the same memory and
        does not re-pack; after ``fork`` the pages are shared anyway. The segments belong to
        this process: they are removed when its model is gone or it exits, and a pickle
        unpickled after that raises ``FileNotFoundError``.

        Afterwards, writes in place stay shared (``load_state_dict`` copies into the shared
        tensors, and every process mapping them sees the new values; a packed layer re-packs
        into a new segment, seen by processes that receive the model after that); a cast to
        another dtype (``to(dtype)``) moves the tensors to private memory (call
        ``share_memory()`` again). Either everything is moved or, on failure (a full
        ``/dev/shm``: ``OSError``), nothing. Returns self.
        """
        with _exclusive("share_memory()"):  # a running forward sees the old or new tree
            self.initialize()
            # every segment first, then the bindings: a failure leaves the tree as it was
            tensors: dict[int, tuple[Tensor, np.ndarray]] = {}
            packs = []
            memo: dict = {}
            for module in self.modules():
                for registry in (module._parameters, module._buffers):
                    for tensor in registry.values():
                        if tensor is not None and id(tensor) not in tensors:
                            tensors[id(tensor)] = (
                                tensor, _shared.copy_to_shared(tensor.numpy())
                            )
                share = getattr(module, "_shared_packed", None)
                if share is not None:
                    packed = share(memo)
                    if packed is not None:
                        packs.append((module, packed))
            _bump_epoch()
            for tensor, array in tensors.values():
                tensor._set_array_(array)
            for module, packed in packs:
                module._set_shared_packed(packed)
            for module in self.modules():
                module._fuse()  # plans over kernels (the stacked query/key/value) adopt the new
            del tensors, packs, memo
        _shared.trim_heap()  # the freed private copies back to the system
        return self

    # ------------------------------------------------------------------ autograd / TorchScript
    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """``requires_grad_(False)`` is the state already (no autograd) and returns self;
        ``True`` is refused."""
        if requires_grad:
            raise NotImplementedError(f"requires_grad_(True): {_NO_AUTOGRAD}")
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """No-op: there are no gradients (no autograd), so all of them are already None."""

    def compile(self, *args: Any, **kwargs: Any) -> None:
        """Compile ``__call__`` in place (seed 003's ``compile``, torch's ``Module.compile``).

        The next call (or ``initialize(example_input)``) captures ``forward`` on its inputs
        into a graph and later calls with the same input signature run it as a plan; a forward
        that cannot be captured runs eagerly with a warning that says why. Options:
        ``fullgraph=False`` (True: a forward that cannot be captured raises instead),
        ``dynamic=True`` (False: every input shape is captured on its own),
        ``cache_size_limit=8`` (signatures kept, least recently used dropped), ``backend``
        and ``mode`` (accepted and ignored, as torch options). See ``modulekit.compile``.
        Returns None, as torch's.
        """
        from modulekit.compile import compile_module

        with _exclusive("compile()"):  # a running forward sees the module before or after
            compile_module(self, *args, **kwargs)

    def save(self, f, **kwargs: Any) -> None:
        """Write the compiled module (its captured graph and weights, no pickle) to ``f`` (a
        path or a binary file object) for :func:`modulekit.load_module`; an uncompiled
        module, or one not yet called since compile(), is refused."""
        compiled = self.__dict__.get("_compiled")
        if compiled is None:
            raise NotImplementedError(
                "save: only a compiled module can be saved as a graph (module.compile(), then "
                "one call); save the weights with modulekit.save(module.state_dict(), path) "
                "and rebuild the module in Python"
            )
        compiled.save(f, **kwargs)

    def _cast_pending(self, dtype: DataType) -> None:
        """Record ``dtype`` for tensors not created yet (a lazy layer's parameters); called by
        ``to(dtype)`` in its commit, so it must not fail. Only modules that override it are
        called."""

    # ------------------------------------------------------------------ packing protocol
    def _pack(self) -> None:
        """Pack bound weights into the kernel layout (layers override; no-op here)."""

    def _packed_keys(self) -> dict[str, tuple[tuple[int, ...], DataType]]:
        """Local names consumed by packing with their shapes and dtypes (empty: not packed)."""
        return {}

    def _packed_values(self) -> dict[str, np.ndarray]:
        """The packed tensors' values as new arrays, by local name (empty here)."""
        return {}

    def _unpack(self) -> None:
        """Restore the registered tensors from the packed form (no-op here)."""

    def _repack(self, values: dict[str, np.ndarray], dtype: DataType | None = None) -> None:
        """Re-pack from ``values`` and/or into storage ``dtype`` (no-op here)."""

    # ------------------------------------------------------------------ fusion protocol
    #: The kernel epilogue an activation module stands for, as ``(name, alpha, beta)`` with a
    #: name from ``modulekit._ext._gemm.ACTIVATIONS``; None for modules that are not one.
    _epilogue: tuple[str, float, float] | None = None

    def _fusable(self, following: list[Module]) -> int:
        """How many of the modules ``following`` this one (in a Sequential) can absorb into
        one fused call; 0 for none (the default)."""
        return 0

    def _forward_fused(self, following: tuple[Module, ...], input: Any) -> Any:
        """Compute ``following[-1](...following[0](self(input)))`` as one fused call; only
        called with the modules :meth:`_fusable` accepted."""
        raise NotImplementedError(f"{type(self).__name__} fuses nothing")

    def _fuse(self) -> None:
        """Plan fused calls over this module's children (containers override; no-op here)."""

    def initialize(self, *example_args: Any, **example_kwargs: Any) -> Module:
        """Do now the one-off work a first forward would do. Returns self.

        Without arguments, everything that needs no input: every module packs its bound
        weights (children first) instead of on its first forward, containers and models plan
        their fused calls (a Linear followed by a supported activation runs as one kernel
        call with the activation in its epilogue; eval-mode Conv2d + BatchNorm2d pairs of
        the CNN models are folded; BERT stacks each layer's query/key/value weights), and the
        kernels' thread pool is started.

        Some preparation depends on the input's shape and cannot be done without one: a 3x3
        stride-1 ``Conv2d`` picks its algorithm (Winograd F(2x2) or F(4x4), in one of two
        GEMM orientations, or the implicit GEMM) from the input's size and the thread count,
        and builds that algorithm's transformed weights on the first call that uses it; the
        activation memory of a model is sized on its first call. Pass an example input, the
        way ``forward`` takes it (``initialize(x)``, ``initialize(input_ids, attention_mask=m)``),
        and ``initialize`` also runs it through the module's normal call path once, so the
        next call with inputs of that shape finds everything built. The example's output is
        discarded; the call runs with the current ``train()``/``eval()`` mode (call ``eval()``
        first for serving). Forward hooks and pre-hooks are NOT called during that warm-up
        call (the path taken is the one a call with the hooks takes, only the hooks
        themselves are skipped); a compiled module would capture its forward on it.
        """
        seen = set()

        def visit(module: Module) -> None:
            seen.add(module)
            for child in module._modules.values():
                if child is not None and child not in seen:
                    visit(child)
            module._pack()
            module._fuse()

        with _exclusive("initialize()"):
            # packing rebinds (new kernel objects, the source tensors released) and fusing
            # plans: a failure part-way restores every module's registries and attributes
            saved = [_snapshot(module) for module in self.modules()]
            _bump_epoch()
            try:
                visit(self)
            except BaseException:
                _restore(saved)
                raise
            finally:
                _bump_epoch()
        _warm_threads()
        if example_args or example_kwargs:
            quiet = _warm_up.__dict__
            before = quiet.get("hooks_off", False)
            quiet["hooks_off"] = True
            try:
                self(*example_args, **example_kwargs)
            finally:
                quiet["hooks_off"] = before
        return self

    # ------------------------------------------------------------------ repr
    def _get_name(self) -> str:
        return type(self).__name__

    def extra_repr(self) -> str:
        """One line of per-class detail for :meth:`__repr__` (a layer prints its geometry)."""
        return ""

    def __repr__(self) -> str:
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [
            f"({name}): {_addindent(repr(module), 2)}" for name, module in self._modules.items()
        ]
        lines = extra_lines + child_lines
        main = self._get_name() + "("
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                main += extra_lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"


def _cast_plan(tensor: Tensor, dtype: DataType):
    """The allocating half of casting ``tensor`` (``Tensor._cast_plan``): where ``to()`` runs
    out of memory, if it does (tests make it fail here)."""
    return tensor._cast_plan(dtype)


def _resolve_dtype(value) -> DataType | None:
    """A DataType for ``value`` if it names one (DataType, name, NumPy or torch dtype), else
    None."""
    if isinstance(value, DataType):
        return value
    if type(value).__name__ == "dtype" and type(value).__module__.startswith("torch"):
        value = str(value)
    if isinstance(value, Tensor):
        return value.dtype
    if isinstance(value, str) or isinstance(value, (np.dtype, type)):
        try:
            return as_dtype(value)
        except TypeError:
            return None
    return None


def _resolve_device(value) -> Device | None:
    """The CPU Device if ``value`` names a device (raising ValueError for any device but the
    CPU), else None."""
    if isinstance(value, Device):
        return value
    if type(value).__name__ == "device" and type(value).__module__.startswith("torch"):
        return as_device(value)
    if isinstance(value, str) and value.split(":")[0].strip().lower() in _DEVICE_TYPES:
        return as_device(value)
    if isinstance(value, int) and not isinstance(value, bool):
        raise ValueError(
            f"device ordinal {value} names an accelerator: modulekit runs on the CPU only "
            "(the only device is 'cpu')"
        )
    return None


def _parse_to_args(args: tuple, kwargs: dict) -> tuple[Device | None, DataType | None]:
    unknown = set(kwargs) - {"device", "dtype", "non_blocking", "copy"}
    if unknown:
        raise TypeError(f"to() got unexpected keyword argument(s) {sorted(unknown)}")
    if len(args) > 2:
        raise TypeError(f"to() takes at most 2 positional arguments, got {len(args)}")
    device = dtype = None
    for arg in args:
        found_device = _resolve_device(arg)
        found_dtype = None if found_device is not None else _resolve_dtype(arg)
        if found_device is None and found_dtype is None:
            raise TypeError(
                f"to() cannot interpret {arg!r} (type {type(arg).__name__}): expected a device "
                "('cpu' or a modulekit.Device) or a data type (a modulekit.DataType, a name "
                "such as 'float16', or a NumPy dtype)"
            )
        if found_device is not None:
            if device is not None:
                raise TypeError("to() got two devices")
            device = found_device
        else:
            if dtype is not None:
                raise TypeError("to() got two data types")
            dtype = found_dtype
    if kwargs.get("device") is not None:
        if device is not None:
            raise TypeError("to() got a device both positionally and as device=")
        device = _resolve_device(kwargs["device"])
        if device is None:
            raise TypeError(f"to(device=...) expects a device, got {kwargs['device']!r}")
    if kwargs.get("dtype") is not None:
        if dtype is not None:
            raise TypeError("to() got a data type both positionally and as dtype=")
        dtype = _resolve_dtype(kwargs["dtype"])
        if dtype is None:
            raise TypeError(
                f"to(dtype=...) expects a data type (a modulekit.DataType, a name such as "
                f"'float16', or a NumPy dtype), got {kwargs['dtype']!r}"
            )
    if dtype is not None and not dtype.is_floating:
        raise TypeError(
            f"Module.to only accepts floating point dtypes, but got desired dtype={dtype.name}"
        )
    return device, dtype
