"""Containers: ``Sequential``, ``ModuleList``, ``ModuleDict`` (torch's APIs and reprs)."""

from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from itertools import chain

from modulekit._ext._gemm import linear_chain
from modulekit._ext._guard import call as _guarded_call
from modulekit._ext._guard import capture as _capture
from modulekit.module import Module, _addindent, _bump_epoch
from modulekit.nn.modules.linear import Linear

__all__ = ["ModuleDict", "ModuleList", "Sequential"]


def _abs_index(idx, size: int) -> int:
    idx = operator.index(idx)
    if not -size <= idx < size:
        raise IndexError(f"index {idx} is out of range")
    return idx % size if size else idx


class _LinearChain:
    """A step of a Sequential's fused plan: two or more consecutive ``Linear`` layers, each
    optionally followed by an activation its kernel applies in the epilogue, run as ONE
    kernel call (:func:`modulekit._ext._gemm.linear_chain`: one OpenMP region for the whole
    chain, a barrier between layers, intermediate results in buffers reused between calls).

    :meth:`run` uses the kernel chain only while it computes exactly what calling the modules
    one by one would: no module of the step has hooks, every Linear still holds the packed
    weights the chain was built from, every activation still stands for the same epilogue,
    and the input is a 2-D ndarray of the chain's compute dtype (these checks run in C:
    ``PackedChain._forward_watched``). Otherwise the modules run one by one. After a re-pack
    (``load_state_dict``, ``to(dtype)``) the chain is rebuilt from the new weights on the
    next call."""

    __slots__ = ("modules", "linears", "acts", "packs", "epilogues", "chain", "owner", "children")

    def __init__(self, pairs, owner=None, children=()) -> None:
        # pairs: ((linear, activation or None), ...); owner: the Sequential when the chain
        # is its whole forward (its hooks and children are then watched too)
        self.owner, self.children = owner, tuple(children)
        self.linears = tuple(lin for lin, _ in pairs)
        self.acts = tuple(act for _, act in pairs)
        self.modules = tuple(m for pair in pairs for m in pair if m is not None)
        self._build()

    def _build(self) -> None:
        """(Re)build the kernel chain from the layers' current packed weights; leaves
        ``chain`` None when they cannot chain (a layer unpacked, mixed compute dtypes)."""
        packs = tuple(lin._packed for lin in self.linears)
        epilogues = tuple(act._epilogue if act is not None else None for act in self.acts)
        self.packs, self.epilogues, self.chain = packs, epilogues, None
        if any(p is None for p in packs) or len({p.compute_dtype for p in packs}) != 1:
            return
        try:
            chain = linear_chain(packs, [ep if ep is not None else "none" for ep in epilogues])
        except ValueError:  # mismatched widths: the per-layer path raises the real error
            return
        chain._watch(self.owner, self.children, self.modules, self.linears, self.acts)
        self.chain = chain

    def _stale(self) -> bool:
        """True when a layer was re-packed or an activation changed since the last build."""
        return (any(lin._packed is not p for lin, p in zip(self.linears, self.packs))
                or any(act is not None and act._epilogue != ep
                       for act, ep in zip(self.acts, self.epilogues)))

    def run(self, input):
        chain = self.chain
        if chain is not None:
            out = chain._forward_watched(input)
            if out is not None:
                return out
        if self._stale():
            self._build()
            if self.chain is not None:
                out = self.chain._forward_watched(input)
                if out is not None:
                    return out
        for module in self.modules:
            input = module(input)
        return input

    def __getstate__(self):
        # the kernel chain is rebuilt on the first call after unpickling
        return {k: getattr(self, k) for k in ("modules", "linears", "acts", "owner", "children")}

    def __setstate__(self, state) -> None:
        for k, v in state.items():
            setattr(self, k, v)
        self.packs = (None,) * len(self.linears)
        self.epilogues = (None,) * len(self.acts)
        self.chain = None


def _chain_link(step) -> bool:
    """True when a fused-plan step is a plain Linear, alone or with an epilogue activation."""
    lead = step[0]
    return (isinstance(lead, Linear) and type(lead).forward is Linear.forward
            and type(lead)._forward_fused is Linear._forward_fused
            and lead._packed is not None and len(step) <= 2)


class _IndexedContainer(Module):
    """Shared by Sequential and ModuleList: children filed under "0", "1", ..."""

    def _renumber(self) -> None:
        _bump_epoch()
        modules = list(self._modules.values())
        self._modules.clear()
        self._modules.update((str(i), m) for i, m in enumerate(modules))

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __dir__(self) -> list[str]:
        return [key for key in super().__dir__() if not key.isdigit()]

    def __delitem__(self, idx) -> None:
        keys = list(self._modules)
        if isinstance(idx, slice):
            for key in keys[idx]:
                del self._modules[key]
        else:
            del self._modules[keys[_abs_index(idx, len(keys))]]
        self._renumber()

    def __setitem__(self, idx, module: Module) -> None:
        keys = list(self._modules)
        setattr(self, keys[_abs_index(idx, len(keys))], module)

    def append(self, module: Module):
        """Append ``module`` at the end; return self."""
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules: Iterable[Module]):
        """Append every module of ``modules``; return self."""
        if not isinstance(modules, Iterable):
            raise TypeError(
                f"{type(self).__name__}.extend should be called with an iterable, but got "
                f"{type(modules).__name__}"
            )
        for module in list(modules):
            self.append(module)
        return self

    def insert(self, index: int, module: Module):
        """Insert ``module`` before position ``index`` (negative counts from the end)."""
        if not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        n = len(self._modules)
        index = operator.index(index)
        if not -n <= index <= n:
            raise IndexError(f"Index out of range: {index}")
        if index < 0:
            index += n
        _bump_epoch()
        modules = list(self._modules.values())
        modules.insert(index, module)
        self._modules.clear()
        self._modules.update((str(i), m) for i, m in enumerate(modules))
        self.__dict__["_scoped_call"] = True   # see Module.__call__
        return self

    def pop(self, key) -> Module:
        """Remove and return the module at ``key`` (an index or a slice)."""
        value = self[key]
        del self[key]
        return value


class Sequential(_IndexedContainer):
    """A chain of modules: ``forward`` feeds its input to the first and each output to the
    next. Built from positional modules (named "0", "1", ...) or one ``OrderedDict``."""

    def __init__(self, *args: Module) -> None:
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for key, module in args[0].items():
                self.add_module(key, module)
        else:
            for idx, module in enumerate(args):
                self.add_module(str(idx), module)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(OrderedDict(list(self._modules.items())[idx]))
        values = list(self._modules.values())
        return values[_abs_index(idx, len(values))]

    def __add__(self, other: Sequential) -> Sequential:
        if not isinstance(other, Sequential):
            raise ValueError(
                "add operator supports only objects of Sequential class, but "
                f"{type(other)} is given."
            )
        result = Sequential()
        for layer in chain(self, other):
            result.append(layer)
        return result

    def __iadd__(self, other: Sequential) -> Sequential:
        if not isinstance(other, Sequential):
            raise ValueError(
                "add operator supports only objects of Sequential class, but "
                f"{type(other)} is given."
            )
        return self.extend(other)

    def __mul__(self, other: int) -> Sequential:
        if not isinstance(other, int) or isinstance(other, bool):
            raise TypeError(f"unsupported operand type(s) for *: {type(self)} and {type(other)}")
        if other <= 0:
            raise ValueError(f"Non-positive multiplication factor {other} for {type(self)}")
        result = Sequential()
        for _ in range(other):
            result.extend(self)
        return result

    __rmul__ = __mul__

    #: (children when planned, steps): each step a tuple of consecutive children run as one
    #: call, ``steps[i][0]._forward_fused(steps[i][1:], x)`` when it has more than one, or a
    #: ``_LinearChain`` (consecutive Linear(+activation) layers as one kernel call); third,
    #: the chain when it is the whole plan (``__call__`` then calls it directly), else None.
    _fused_plan = None

    def _fuse(self) -> None:
        """Plan fused calls: a child that can absorb the children after it (a Linear and a
        following activation) runs them as one kernel call, and a run of two or more such
        Linear steps runs as one chained kernel call (``_LinearChain``). Built by
        ``initialize()``; used while the children are unchanged, and per step only while
        none of its modules has hooks (hooks then see every call, unfused)."""
        children = tuple(self._modules.values())
        steps, i = [], 0
        while i < len(children):
            lead = children[i]
            n = lead._fusable(list(children[i + 1:])) if lead is not None else 0
            steps.append(children[i:i + 1 + n])
            i += 1 + n
        # runs of two or more Linear(+activation) steps become one kernel chain
        planned, i = [], 0
        while i < len(steps):
            j = i
            while j < len(steps) and _chain_link(steps[j]):
                j += 1
            if j - i >= 2:
                chain = _LinearChain([(s[0], s[1] if len(s) > 1 else None)
                                      for s in steps[i:j]])
                if chain.chain is not None:
                    planned.append(chain)
                    i = j
                    continue
            planned.append(steps[i])
            i += 1
        fused = any(type(step) is _LinearChain or len(step) > 1 for step in planned)
        # the whole Sequential one chain: __call__ goes straight to it
        whole = None
        if (len(planned) == 1 and type(planned[0]) is _LinearChain
                and type(self).forward is Sequential.forward):
            whole = _LinearChain(tuple(zip(planned[0].linears, planned[0].acts)), self,
                                 children)
            planned = [whole]
        self.__dict__["_fused_plan"] = (children, tuple(planned), whole) if fused else None

    def __call__(self, *args, **kwargs):
        # Module.__call__, short-cut for a Sequential that is one chain of Linear layers
        # (an MLP): at batch 1 its whole kernel call takes a few microseconds
        # (the chain checks this module's hooks and children itself), under the state
        # guard as every module call
        plan = self._fused_plan
        if (plan is not None and len(args) == 1 and not kwargs and _capture() is None
                and self._compiled is None):
            whole = plan[2]
            chain = None if whole is None else whole.chain
            if chain is not None:
                out = _guarded_call(chain._forward_watched, args, None, False)
                if out is not None:
                    return out
        return Module.__call__(self, *args, **kwargs)

    def forward(self, input):
        plan = self._fused_plan
        if plan is not None and plan[0] == tuple(self._modules.values()):
            for step in plan[1]:
                if type(step) is _LinearChain:
                    input = step.run(input)
                elif len(step) == 1:
                    input = step[0](input)
                elif any(m._has_hooks for m in step):
                    for module in step:
                        input = module(input)
                else:
                    input = step[0]._forward_fused(step[1:], input)
            return input
        for module in self._modules.values():
            input = module(input)
        return input


class ModuleList(_IndexedContainer):
    """A list of modules, registered as children "0", "1", ... (no ``forward``)."""

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(list(self._modules.values())[idx])
        return self._modules[str(_abs_index(idx, len(self._modules)))]

    def __iadd__(self, modules: Iterable[Module]) -> ModuleList:
        return self.extend(modules)

    def __add__(self, other: Iterable[Module]) -> ModuleList:
        result = ModuleList()
        for module in chain(self, other):
            result.append(module)
        return result

    def __repr__(self) -> str:
        reprs = [repr(item) for item in self]
        if not reprs:
            return self._get_name() + "()"
        blocks: list[list] = []  # [start, end, repr]
        for i, r in enumerate(reprs):
            if blocks and blocks[-1][2] == r:
                blocks[-1][1] = i
            else:
                blocks.append([i, i, r])
        lines = []
        for start, end, r in blocks:
            if start == end:
                line = f"({start}): {r}"
            else:
                line = f"({start}-{end}): {end - start + 1} x {r}"
            lines.append(_addindent(line, 2))
        return self._get_name() + "(\n  " + "\n  ".join(lines) + "\n)"


class ModuleDict(Module):
    """An ordered dict of modules, registered as children under their keys."""

    def __init__(self, modules: Mapping[str, Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        _bump_epoch()
        del self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __contains__(self, key) -> bool:
        return key in self._modules

    def clear(self) -> None:
        """Remove every entry."""
        _bump_epoch()
        self._modules.clear()

    def pop(self, key: str) -> Module:
        """Remove ``key`` and return its module."""
        value = self[key]
        del self[key]
        return value

    def keys(self):
        """The keys, in insertion order."""
        return self._modules.keys()

    def items(self):
        """The (key, module) pairs, in insertion order."""
        return self._modules.items()

    def values(self):
        """The modules, in insertion order."""
        return self._modules.values()

    def update(self, modules) -> None:
        """Add the entries of a mapping, or of an iterable of (key, module) pairs, in order."""
        if not isinstance(modules, Iterable):
            raise TypeError(
                "ModuleDict.update should be called with an iterable of key/value pairs, but "
                f"got {type(modules).__name__}"
            )
        if isinstance(modules, (Mapping, ModuleDict)):
            for key, module in modules.items():
                self[key] = module
            return
        for j, pair in enumerate(modules):
            if not isinstance(pair, Iterable):
                raise TypeError(
                    f"ModuleDict update sequence element #{j} should be Iterable; is "
                    f"{type(pair).__name__}"
                )
            pair = tuple(pair)
            if len(pair) != 2:
                raise ValueError(
                    f"ModuleDict update sequence element #{j} has length {len(pair)}; 2 is required"
                )
            self[pair[0]] = pair[1]
