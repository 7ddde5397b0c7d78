"""The state guard: module calls (readers) against changes of module state (writers).

A forward must see one state of its model: not a tree half-cast by ``to()``, not weights half
copied by ``load_state_dict()``. Every top-level module call (the outermost ``Module.__call__``
on a thread, :func:`call`) is a *reader*; ``to()``, ``load_state_dict()``, ``initialize()``
(and ``compile()``) are *writers* (:class:`exclusive`). Readers run in parallel with each other
(they only count themselves in); a writer waits until no reader runs and keeps new readers out
while it changes the tree, so a call returns either the old or the new model's answer.

One guard for the process, not one per model: modules are plain objects that may sit in several
trees (a shared embedding, a submodule called on its own while its parent is cast), and a
process-wide guard covers every such overlap with no bookkeeping of parents. The price: while
a writer changes one model, calls of every model wait (writers are rare: a reload, a cast).

Costs on the uncontended path: a thread-local depth test and a counter increment and decrement,
done in C under the GIL (which is the mutex for the counters; the ``threading.Condition`` is only
used to sleep and wake up). Calls nested in a call (children, hooks, a model calling another)
pass straight through. A writer on a thread running a call (a forward hook calling ``to()``)
would wait for itself: it is refused with a ``RuntimeError``. A writer may nest writers and run
module calls itself (``compile()`` runs forwards to capture them).

Readers defer to a waiting writer (so a stream of overlapping forwards cannot starve it) for at
most ``_DEFER_S`` seconds; after that they go in anyway and the writer keeps waiting for the
reader count to reach zero. This bounds the stall, instead of a deadlock, when a forward waits
for a forward in another thread (a thread pool inside a forward) while a writer is pending.
"""

from cpython.ref cimport PyObject

import os
import threading
import time

from modulekit._ext._arena import call as _arena_call

__all__ = [
    "call", "capture", "eager_call", "exclusive", "in_call", "module_call", "set_capture", "state"
]

cdef extern from *:
    """
    /* Module calls running on this thread: 0 outside any; 1 inside a counted (reader) call;
     * 2 inside a call made by the thread that holds the writer side (not counted). */
    #if defined(_MSC_VER)
    static __declspec(thread) int mk_guard_depth = 0;
    #else
    static __thread int mk_guard_depth = 0;
    #endif
    """
    int mk_guard_depth
    object PyObject_Call(object callable, object args, PyObject *kwargs)

#: How long a new reader defers to a writer that waits for the running readers to finish.
_DEFER_S = 0.5

cdef Py_ssize_t _readers = 0      # reader calls running now (all threads)
cdef Py_ssize_t _waiting = 0      # writers waiting to go in
cdef bint _writing = False        # a writer is changing state
cdef unsigned long _writer = 0             # its thread id
cdef Py_ssize_t _write_depth = 0  # its nesting (a writer calling a writer)
cdef object _cond = threading.Condition(threading.Lock())
cdef object _get_ident = threading.get_ident


cdef inline object _dispatch(fn, tuple args, dict kwargs, bint scoped):
    if scoped:
        return _arena_call(fn, args, kwargs)
    return PyObject_Call(fn, args, NULL if kwargs is None else <PyObject *>kwargs)


cdef int _enter_read_slow() except -1:
    """A writer holds or wants the state: wait (or pass, on the writer's own thread).
    Returns the depth to record: 1 (counted) or 2 (the writer's thread, not counted)."""
    global _readers
    if _writing and _writer == _get_ident():
        return 2
    with _cond:
        deadline = time.monotonic() + _DEFER_S
        while True:
            if _writing:
                _cond.wait()
            elif _waiting:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                _cond.wait(left)
            else:
                break
        _readers += 1
    return 1


cdef inline void _exit_read():
    global _readers
    _readers -= 1
    if _readers == 0 and _waiting:
        with _cond:
            _cond.notify_all()


cdef object _capture = None   # the capture in progress (modulekit.compile), or None


def set_capture(cap):
    """Make ``cap`` (a ``modulekit.compile.tracer.Capture``, or None) the capture in progress:
    while one is set, every module call goes to ``cap.call_module(module, args, kwargs)``."""
    global _capture
    _capture = cap


def capture():
    """The capture in progress (see :func:`set_capture`), or None."""
    return _capture


def module_call(self, *args, **kwargs):
    """``Module.__call__``. While a compiled module's forward is being captured
    (:func:`set_capture`), the capture sees every module call first; a compiled module
    (``compile()``) runs its plan. A module with children or hooks runs with the activation
    cache's memory handler current (``modulekit._ext._arena.call``; a no-op when already
    current, in a nested call): its large intermediate arrays reuse the memory of the previous
    call's. A leaf without hooks (Identity, say) skips that. The outermost call on a thread is
    a reader of the module state (:func:`call`)."""
    if _capture is not None:
        return _capture.call_module(self, args, kwargs)
    if self._scoped_call:
        compiled = self._compiled
        if compiled is not None:
            return _call(compiled, (args, kwargs), None, False)
    return _eager(self, args, kwargs)


def eager_call(self, tuple args, dict kwargs):
    """``Module.__call__`` without the capture and the compiled plan: ``forward`` with its
    hooks, under the guard and the activation cache as :func:`module_call` (what a capture
    and a compiled plan call to run a module as eager mode does)."""
    return _eager(self, args, kwargs)


cdef inline object _eager(self, tuple args, dict kwargs):
    if self._scoped_call:
        if self._has_hooks:
            return _call(self._call_with_hooks, (args, kwargs), None, True)
        return _call(self.forward, args, kwargs, True)
    return _call(self.forward, args, kwargs, False)


def call(fn, tuple args, dict kwargs, bint scoped):
    """``fn(*args, **kwargs)`` as a module call: under the activation cache's memory handler
    when ``scoped`` (``modulekit._ext._arena.call``), and, when it is the outermost module call
    on this thread, as a reader of the module state (waiting while a writer changes it)."""
    return _call(fn, args, kwargs, scoped)


cdef object _call(fn, tuple args, dict kwargs, bint scoped):
    global _readers, mk_guard_depth
    if mk_guard_depth:
        return _dispatch(fn, args, kwargs, scoped)
    cdef int depth = 1
    if _writing or _waiting:
        depth = _enter_read_slow()
    else:
        _readers += 1   # no Python code between the test and this: atomic under the GIL
    mk_guard_depth = depth
    try:
        return _dispatch(fn, args, kwargs, scoped)
    finally:
        mk_guard_depth = 0
        if depth == 1:
            _exit_read()


def in_call():
    """True while a module call runs on this thread."""
    return mk_guard_depth != 0


def state():
    """(running reader calls, waiting writers, writing): for tests and debugging."""
    return _readers, _waiting, bool(_writing)


cdef class exclusive:
    """``with exclusive("to()"):`` changes module state with no module call running.

    Waits for the running calls (readers) to finish and keeps new ones waiting until the block
    exits. Re-entrant on the writer's thread; module calls made inside the block run (they
    are not counted). Raises ``RuntimeError`` on a thread that is inside a module call (the
    call could never finish while the block waits for it).
    """

    cdef str what

    def __cinit__(self, str what="this change"):
        self.what = what

    def __enter__(self):
        global _waiting, _writing, _writer, _write_depth
        ident = _get_ident()
        if _writing and _writer == ident:
            _write_depth += 1
            return self
        if mk_guard_depth:
            raise RuntimeError(
                f"{self.what} called during a module call on the same thread (from a forward, "
                "or a forward hook): a model's state cannot change while a forward runs. "
                "Make the change after the call returns (or from another thread, which waits "
                "for the running calls to finish)"
            )
        with _cond:
            _waiting += 1
            try:
                while _writing or _readers:
                    _cond.wait()
            finally:
                _waiting -= 1
            _writing = True
            _writer = ident
            _write_depth = 1
        return self

    def __exit__(self, *exc):
        global _writing, _writer, _write_depth
        _write_depth -= 1
        if _write_depth:
            return False
        with _cond:
            _writing = False
            _writer = 0
            _cond.notify_all()
        return False


def _after_fork_in_child():
    """Only the forking thread survives a fork: forget the others' calls and writers."""
    global _readers, _waiting, _writing, _writer, _write_depth, _cond
    _cond = threading.Condition(threading.Lock())
    if _writing and _writer == _get_ident():
        _readers = 0
    else:
        _writing, _writer, _write_depth = False, 0, 0
        _readers = 1 if mk_guard_depth == 1 else 0
    _waiting = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
