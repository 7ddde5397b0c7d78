"""State dicts: ``Module.state_dict`` and the all-or-nothing ``Module.load_state_dict``.

``StateDictMixin`` holds these methods of :class:`modulekit.Module` (one concept per file);
``LoadResult``, ``StateDictError`` and ``StateDictTypeError`` are what a load reports.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from modulekit._ext._guard import exclusive as _exclusive
from modulekit._ext._tensor import Parameter, Tensor, as_array
from modulekit.dtypes import DataType, is_bfloat16
from modulekit.hooks import RemovableHandle

if TYPE_CHECKING:
    from modulekit.module import Module

__all__ = ["LoadResult", "StateDictError", "StateDictMixin", "StateDictTypeError"]

_EXTRA_STATE_KEY = "_extra_state"


class LoadResult(NamedTuple):
    """What :meth:`Module.load_state_dict` matched: the keys it missed and the keys it did not
    expect (both lists of dotted names)."""

    missing_keys: list[str]
    unexpected_keys: list[str]

    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return (
            f"LoadResult(missing_keys={self.missing_keys!r}, "
            f"unexpected_keys={self.unexpected_keys!r})"
        )

    __str__ = __repr__


class StateDictError(RuntimeError):
    """A refused :meth:`Module.load_state_dict`. Nothing in the module tree was changed.

    Attributes
    ----------
    result : LoadResult
        The key accounting of the refused load.
    errors : list of str
        One message per problem found.
    """

    def __init__(self, message: str, result: LoadResult, errors: list[str]):
        super().__init__(message)
        self.result = result
        self.errors = errors


class StateDictTypeError(StateDictError, TypeError):
    """A refused load where some value was not an array of real numbers."""


def _as_array(value):
    """Return ``value`` as an ndarray (no copy when possible), or ``None`` if it is not an
    array of real numbers. Accepts what :func:`modulekit._ext._tensor.as_array` accepts:
    Tensors, ndarrays, CPU torch tensors (bfloat16 included; torch is never imported by us),
    buffers, ``__array__`` objects and nested sequences of numbers."""
    try:
        arr = as_array(value)
    except (TypeError, ValueError):
        return None
    if arr.dtype.kind in "biuf" or is_bfloat16(arr.dtype):
        return arr
    return None


def _assigned_tensor(value, arr: np.ndarray, as_parameter: bool) -> Tensor:
    """The object ``load_state_dict(assign=True)`` files: ``value`` itself when it already is
    the right kind of Tensor, else a Tensor/Parameter over ``arr`` (no copy when possible)."""
    cls = Parameter if as_parameter else Tensor
    if isinstance(value, Tensor) and tuple(value.shape) == arr.shape:
        if isinstance(value, cls):
            return value
        if as_parameter:
            return Parameter(value)  # shares the Tensor's memory
    if arr.flags.c_contiguous and arr.flags.aligned:
        return cls.from_numpy(arr)
    return cls(arr)


def _snapshot(module: Module) -> tuple:
    """What :func:`_restore` needs to undo rebinding in ``module``: its attribute dict and its
    registries, shallow copies (re-packing and packing build new objects and rebind them)."""
    d = module.__dict__
    return (module, d.copy(), d["_parameters"].copy(), d["_buffers"].copy())


def _restore(snapshots: list[tuple]) -> None:
    """Put back the bindings saved by :func:`_snapshot` (the same dict objects, refilled)."""
    for module, old_dict, old_params, old_buffers in reversed(snapshots):
        module.__dict__.clear()
        module.__dict__.update(old_dict)
        old_dict["_parameters"].clear()
        old_dict["_parameters"].update(old_params)
        old_dict["_buffers"].clear()
        old_dict["_buffers"].update(old_buffers)


def _value_description(value) -> str:
    dtype = getattr(value, "dtype", None)
    return type(value).__name__ + (f" of dtype {dtype}" if dtype is not None else "")


class StateDictMixin:
    """``state_dict``, ``load_state_dict`` and their hooks (mixed into ``Module``)."""

    def get_extra_state(self) -> Any:
        """Return extra (picklable) state for :meth:`state_dict`; override together with
        :meth:`set_extra_state`. The base class has none."""
        raise RuntimeError(
            "Reached a code path in StateDictMixin.get_extra_state() that should never be called: "
            "override get_extra_state() and set_extra_state() together"
        )

    def set_extra_state(self, state: Any) -> None:
        """Restore the extra state found by :meth:`load_state_dict`; override together with
        :meth:`get_extra_state`."""
        raise RuntimeError(
            "Reached a code path in StateDictMixin.set_extra_state() that should never be called: "
            "override get_extra_state() and set_extra_state() together"
        )

    def register_state_dict_pre_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(module, prefix, keep_vars)`` runs before this module's state_dict entries
        are collected."""
        handle = RemovableHandle(self, "_state_dict_pre_hooks")
        self._state_dict_pre_hooks[handle.id] = hook
        return handle

    def register_state_dict_post_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(module, state_dict, prefix, local_metadata)`` runs after this module's
        subtree is collected; it may edit ``state_dict`` in place."""
        handle = RemovableHandle(self, "_state_dict_hooks")
        self._state_dict_hooks[handle.id] = hook
        return handle

    def state_dict(
        self,
        *,
        destination: dict | None = None,
        prefix: str = "",
        keep_vars: bool = False,
        include_packed: bool = False,
    ) -> dict[str, Tensor]:
        """The module tree's named tensors as one flat ``dict[str, Tensor]`` with dotted keys.

        Parameters
        ----------
        destination : dict, optional
            Filled and returned instead of a new dict.
        prefix : str
            Put before every key.
        keep_vars : bool
            Accepted for torch compatibility; no effect (there is no autograd).
        include_packed : bool, default False
            ``False``: parameters and persistent buffers, the LIVE tensors (no copies), keyed
            as torch keys them (a module reachable twice is listed under both paths). Entries
            registered as ``None`` and the weights a layer packed into its kernel layout
            (``initialize()`` or the first forward) are absent: the export reflects what the
            tree currently holds. ``True``: also the packed weights, unpacked into NEW
            Parameters (copies) with exactly the keys, order, shapes and dtypes the same model
            gives before packing, so ``modulekit.save(model.state_dict(include_packed=True),
            path)`` writes a complete checkpoint; the model is not changed (it stays packed).
        """
        if destination is None:
            destination = {}
        local_metadata = {"version": self._version}
        for hook in tuple(self._state_dict_pre_hooks.values()):
            hook(self, prefix, keep_vars)
        if include_packed and self._packed_keys():
            for name, value in self._packed_values().items():
                destination[prefix + name] = Parameter.from_numpy(value)
        for name, param in self._parameters.items():
            if param is not None:
                destination[prefix + name] = param
        for name, buf in self._buffers.items():
            if buf is not None and name not in self._non_persistent_buffers:
                destination[prefix + name] = buf
        if type(self).get_extra_state is not StateDictMixin.get_extra_state:
            destination[prefix + _EXTRA_STATE_KEY] = self.get_extra_state()
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(
                    destination=destination,
                    prefix=prefix + name + ".",
                    keep_vars=keep_vars,
                    include_packed=include_packed,
                )
        for hook in tuple(self._state_dict_hooks.values()):
            hook(self, destination, prefix, local_metadata)
        return destination

    def register_load_state_dict_pre_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(module, state_dict, prefix, local_metadata, strict, missing_keys,
        unexpected_keys, error_msgs)`` runs before this module's keys are matched. It gets a
        shallow copy of the caller's dict and may rewrite it; a message appended to
        ``error_msgs`` refuses the load. What it rebinds on ``module`` (attributes, registered
        tensors, as a lazy layer materialising from the checkpoint's shapes) is put back if
        the load is refused or raises; writes into a tensor's memory are not."""
        handle = RemovableHandle(self, "_load_state_dict_pre_hooks")
        self._load_state_dict_pre_hooks[handle.id] = hook
        return handle

    def register_load_state_dict_post_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(module, incompatible_keys)`` runs after the values are loaded; it may edit
        the two key lists of ``incompatible_keys`` (clearing them avoids the strict error).
        If it raises, the load is rolled back."""
        handle = RemovableHandle(self, "_load_state_dict_post_hooks")
        self._load_state_dict_post_hooks[handle.id] = hook
        return handle

    def load_state_dict(
        self, state: Mapping[str, Any], strict: bool = True, assign: bool = False
    ) -> LoadResult:
        """Bind a flat checkpoint onto the tree by dotted names, all or nothing.

        Parameters
        ----------
        state : mapping of str to array-like
            Values may be modulekit Tensors, NumPy arrays, CPU torch tensors (any dtype,
            bfloat16 included) or anything ``np.asarray`` turns into an array of real
            numbers. A packed layer expects its packed keys as the same layer unpacked does
            (under ``strict`` their absence raises; ``missing_keys`` lists them either way)
            and re-packs from them.
        strict : bool
            Raise when keys are missing or unexpected.
        assign : bool
            ``False`` (default): each value is cast to the receiving tensor's dtype and copied
            INTO it (the Parameter objects a user holds stay the same objects). ``True``: the
            values themselves become the module's tensors, keeping their dtype (as torch): a
            modulekit Tensor/Parameter is used as it is, a C-contiguous array is wrapped
            without a copy (``Parameter.from_numpy``), anything else copied once. Tensors tied
            before (one object under several names) stay tied. Packed layers re-pack in their
            storage dtype either way.

        Returns
        -------
        LoadResult
            The complete accounting (``missing_keys``, ``unexpected_keys``), also with
            ``strict=False``.

        Raises
        ------
        StateDictError
            (a ``RuntimeError``; ``StateDictTypeError``, also a ``TypeError``, when a value is
            not an array of real numbers) on a shape mismatch (even with ``strict=False``), a
            refused value, a message from a pre-hook, or missing/unexpected keys under
            ``strict``; it carries the accounting as ``.result``. Whatever raises (a hook
            too), every tensor in the tree is left bit-identical to before.
        """
        # never under a running forward (the state guard, modulekit/_ext/_guard.pyx)
        with _exclusive("load_state_dict()"):
            return self._load_state_dict(state, strict, assign)

    def _load_state_dict(self, state: Mapping[str, Any], strict: bool, assign: bool):
        hooked: list[tuple] = []  # modules whose pre-hooks ran: undone if the load fails
        try:
            return self._load_checked(state, strict, assign, hooked)
        except BaseException:
            _restore(hooked)  # (after the commit's own undo, when it ran)
            raise

    def _load_checked(self, state: Mapping[str, Any], strict: bool, assign: bool,
                      hooked: list):
        """:meth:`_load_state_dict`'s work; ``hooked`` collects a :func:`_snapshot` of every
        module before its pre-hooks run."""
        if not isinstance(state, Mapping):
            raise TypeError(f"Expected state to be a mapping (dict), got {type(state).__name__}")
        metadata = getattr(state, "_metadata", None)
        state = dict(state)  # pre-hooks rewrite this copy, never the caller's dict
        missing: list[str] = []
        unexpected: list[str] = []
        errors: list[str] = []
        bad_type = False
        consumed: set[str] = set()
        copies: list[tuple] = []  # (registry, name, tensor, array, value, is_parameter)
        repacks: list[tuple[Module, dict]] = []
        extras: list[tuple[Module, Any]] = []
        post_hooks: list[tuple[Module, Callable]] = []

        def take(key: str, shape: tuple, value, assigned: bool = False) -> np.ndarray | None:
            nonlocal bad_type
            consumed.add(key)
            arr = _as_array(value)
            if arr is None:
                bad_type = True
                errors.append(
                    f'While copying the parameter named "{key}", expected a Tensor, an ndarray '
                    f"or an array-like of real numbers from the checkpoint, but received "
                    f"{_value_description(value)}"
                )
                return None
            if len(shape) == 0 and arr.shape == (1,):
                arr = arr.reshape(())
            if tuple(arr.shape) != tuple(shape):
                errors.append(
                    f"size mismatch for {key}: copying a param with shape {tuple(arr.shape)} "
                    f"from checkpoint, the shape in current model is {tuple(shape)}."
                )
                return None
            if assigned and arr.dtype not in DataType._by_numpy and not is_bfloat16(arr.dtype):
                bad_type = True
                errors.append(
                    f'While assigning the parameter named "{key}": dtype {arr.dtype} has no '
                    "modulekit data type (assign=True keeps the checkpoint's dtype)"
                )
                return None
            return arr

        def visit(module: Module, prefix: str) -> None:
            local_metadata = {} if metadata is None else metadata.get(prefix[:-1], {})
            if module._load_state_dict_pre_hooks:
                # a pre-hook may rebind the module's tensors (a lazy layer materialises its
                # parameters from the checkpoint's shapes): a refused load puts them back
                hooked.append(_snapshot(module))
            for hook in tuple(module._load_state_dict_pre_hooks.values()):
                hook(module, state, prefix, local_metadata, strict, missing, unexpected, errors)
            params, buffers = module._parameters, module._buffers
            local = [(params, n, t) for n, t in params.items() if t is not None]
            local += [
                (buffers, n, t)
                for n, t in buffers.items()
                if t is not None and n not in module._non_persistent_buffers
            ]
            for registry, name, tensor in local:
                key = prefix + name
                if key not in state:
                    missing.append(key)
                    continue
                arr = take(key, tensor.shape, state[key], assign)
                if arr is None:
                    continue
                if not assign and not tensor.numpy().flags.writeable:
                    errors.append(
                        f"cannot copy into {key}: the module's tensor is read-only (it was "
                        "assigned from read-only memory); load it with assign=True"
                    )
                    continue
                if not assign:
                    # converted now (the allocation a copy may need happens before anything
                    # is written): the commit's copies are then plain same-dtype copies
                    arr = arr.astype(tensor.numpy().dtype, order="C", copy=False)
                is_param = registry is params
                copies.append((registry, name, tensor, arr, state[key], is_param))
            packed = module._packed_keys()
            if packed:
                values = {}
                for name, (shape, _dtype) in packed.items():
                    key = prefix + name
                    if key not in state:
                        missing.append(key)  # expected, as by the same layer unpacked
                        continue
                    arr = take(key, shape, state[key])
                    if arr is not None:
                        values[name] = arr
                if values:
                    repacks.append((module, values))
            if type(module).set_extra_state is not StateDictMixin.set_extra_state:
                key = prefix + _EXTRA_STATE_KEY
                if key in state:
                    consumed.add(key)
                    extras.append((module, state[key]))
                else:
                    missing.append(key)
            for name, child in module._modules.items():
                if child is not None:
                    visit(child, prefix + name + ".")
            post_hooks.extend((module, h) for h in module._load_state_dict_post_hooks.values())

        visit(self, "")
        unexpected.extend(k for k in state if k not in consumed)
        result = LoadResult(missing, unexpected)
        if errors:
            self._refuse_load(result, errors, strict, bad_type)
        if not post_hooks:
            if strict and (missing or unexpected):
                self._refuse_load(result, [], strict, False)
            self._commit_load(copies, repacks, extras, assign, backup=False)
            return result

        undo = self._commit_load(copies, repacks, extras, assign, backup=True)
        try:
            for module, hook in post_hooks:
                out = hook(module, result)
                if out is not None:
                    raise RuntimeError(
                        "load_state_dict post hooks must return None, got "
                        f"{type(out).__name__} from {hook!r}"
                    )
            if strict and (result.missing_keys or result.unexpected_keys):
                self._refuse_load(result, [], strict, False)
        except BaseException:
            undo()
            raise
        return result

    def _refuse_load(self, result: LoadResult, errors: list, strict: bool, bad_type: bool):
        messages = []
        if strict:
            if result.unexpected_keys:
                keys = ", ".join(f'"{k}"' for k in result.unexpected_keys)
                messages.append(f"Unexpected key(s) in state_dict: {keys}. ")
            if result.missing_keys:
                keys = ", ".join(f'"{k}"' for k in result.missing_keys)
                messages.append(f"Missing key(s) in state_dict: {keys}. ")
        messages += errors
        cls = StateDictTypeError if bad_type else StateDictError
        raise cls(
            f"Error(s) in loading state_dict for {type(self).__name__} (nothing was loaded: "
            "the module is unchanged):\n\t" + "\n\t".join(messages),
            result,
            messages,
        )

    @staticmethod
    def _commit_load(copies, repacks, extras, assign: bool, backup: bool):
        """Write the validated values; return a function undoing the writes when ``backup``
        (or when a write fails half way, which it undoes and re-raises)."""
        from modulekit.module import _bump_epoch  # (module.py imports this file)

        _bump_epoch()  # new tensors or values: what the tree computes may change
        saved_tensors = []
        saved_entries = []
        saved_dicts = []
        saved_extras = []

        def undo():
            _bump_epoch()
            for tensor, old in saved_tensors:
                np.copyto(tensor.numpy(), old)
            for registry, name, old in reversed(saved_entries):
                registry[name] = old
            _restore(saved_dicts)
            for module, old in saved_extras:
                module.set_extra_state(old)

        try:
            for module, value in extras:
                if type(module).get_extra_state is not StateDictMixin.get_extra_state:
                    saved_extras.append((module, module.get_extra_state()))
                module.set_extra_state(value)
            for module, values in repacks:
                saved_dicts.append(_snapshot(module))
                module._repack(values)
            if assign:
                # one new object per (old object, kind): tensors tied before stay tied
                new = {}
                for _registry, _name, tensor, arr, value, is_param in copies:
                    new[tensor, is_param] = _assigned_tensor(value, arr, is_param)
                for registry, name, tensor, _arr, _value, is_param in copies:
                    saved_entries.append((registry, name, registry[name]))
                    registry[name] = new[tensor, is_param]
                return undo
            if backup:
                seen = set()
                for _registry, _name, tensor, _arr, _value, _ in copies:
                    if tensor not in seen:
                        seen.add(tensor)
                        saved_tensors.append((tensor, tensor.numpy().copy()))
            for _registry, _name, tensor, arr, _value, _ in copies:
                tensor.copy_(arr)
        except BaseException:
            undo()
            raise
        return undo
