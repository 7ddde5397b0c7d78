"""Handles returned by the ``Module.register_*_hook`` methods."""

from __future__ import annotations

import itertools
import weakref

__all__ = ["RemovableHandle"]


class RemovableHandle:
    """A handle that removes one registered hook.

    ``handle.remove()`` takes the hook out of every registry it was filed in (removing twice is
    harmless); ``with handle: ...`` removes it when the block ends. The handle holds the owning
    module weakly, so it never keeps a module alive.

    Parameters
    ----------
    owner : object
        The object holding the registries (a :class:`~modulekit.Module`).
    *registries : str
        Names of the owner's attributes (dicts keyed by hook id, or sets of hook ids) the hook
        id was filed in.
    """

    __slots__ = ("id", "_owner", "_registries")
    _next_id = itertools.count()

    def __init__(self, owner, *registries: str) -> None:
        self.id = next(RemovableHandle._next_id)
        self._owner = weakref.ref(owner)
        self._registries = registries

    def remove(self) -> None:
        """Remove the hook; a no-op when it is already gone or its owner was collected."""
        owner = self._owner()
        if owner is None:
            return
        for name in self._registries:
            registry = owner.__dict__.get(name)
            if isinstance(registry, dict):
                registry.pop(self.id, None)
            elif registry is not None:
                registry.discard(self.id)
        refresh = getattr(owner, "_refresh_hooks_flag", None)
        if refresh is not None:
            refresh()

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc_info) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"<RemovableHandle id={self.id}>"
