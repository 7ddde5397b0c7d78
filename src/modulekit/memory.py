"""modulekit's activation memory cache.

A call of a module with children (a model, a ``Sequential``) or with hooks allocates its large
arrays (256 KiB and more) from a cache that keeps the memory of freed arrays mapped for the
next call, instead of NumPy's default handler, which gets fresh pages from the OS each time
(a batch-32 ResNet-18 forward otherwise faults in about 300 MB of zeroed pages per call). The
cache is a NumPy memory handler (NEP 49) made current only for the duration of the outermost
module call, in the calling thread and ``contextvars`` context; NumPy code outside modulekit's
calls keeps NumPy's default handler. Returned arrays are ordinary NumPy arrays that stay valid
as long as they are referenced; their memory goes back to the cache when they are freed.

``MODULEKIT_ARENA=0`` in the environment (read at import) or :func:`set_enabled` turns the cache
off; ``MODULEKIT_ARENA_LIMIT`` (``512M``, ``2G``, bytes) or :func:`set_limit` caps the memory
kept for reuse (default 1 GiB, largest blocks released first); :func:`empty_cache` releases it
now.
"""

from modulekit._ext._arena import (
    empty_cache,
    get_limit,
    is_enabled,
    set_enabled,
    set_limit,
    stats,
)

__all__ = ["empty_cache", "get_limit", "is_enabled", "set_enabled", "set_limit", "stats"]
