"""The device a tensor lives on: modulekit runs on the CPU only."""

from __future__ import annotations

__all__ = ["Device", "as_device"]


class Device:
    """A compute device. ``Device("cpu")`` is the only one modulekit has.

    Any other name (``"cuda"``, ``"cuda:0"``, ``"mps"``, ...) is refused with a ``ValueError``
    that says modulekit runs on the CPU. ``"cpu:0"`` is accepted as the CPU.
    """

    __slots__ = ()
    _instance: Device | None = None

    def __new__(cls, name="cpu"):
        return as_device(name)

    @property
    def type(self) -> str:
        return "cpu"

    def __repr__(self):
        return "device(type='cpu')"

    def __str__(self):
        return "cpu"

    def __eq__(self, other):
        if isinstance(other, str):
            try:
                return as_device(other) is self
            except (ValueError, TypeError):
                return False
        return other is self

    def __hash__(self):
        return hash("cpu")

    def __reduce__(self):
        return (as_device, ("cpu",))


def as_device(value) -> Device:
    """Resolve ``value`` (a Device or a device name) to the CPU device, or refuse it."""
    if isinstance(value, Device):
        return value
    name = str(value) if type(value).__name__ == "device" else value  # a torch.device
    if not isinstance(name, str):
        raise TypeError(
            f"expected a device name such as 'cpu' or a modulekit.Device, got "
            f"{type(value).__name__}"
        )
    if name.strip().lower() not in ("cpu", "cpu:0"):
        raise ValueError(
            f"device {name!r} is not available: modulekit runs on the CPU only "
            "(the only device is 'cpu')"
        )
    if Device._instance is None:
        Device._instance = object.__new__(Device)
    return Device._instance
