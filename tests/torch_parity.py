"""Parity of ``modulekit.nn`` with PyTorch's own module test database.

PyTorch keeps, for every ``torch.nn`` class it tests, a function that builds sample
constructor arguments and forward inputs (``torch.testing._internal.common_modules.module_db``).
This module runs every sample of every class there through the ``modulekit.nn`` class of the
same name, in eval mode, with the torch module's weights (as torch initialised them, and once
more randomised), and compares the outputs (rtol 1e-4, atol 1e-5; integer outputs exactly).

Each sample ends as one of

``match``     the outputs agree;
``mismatch``  modulekit ran and returned other values, shapes or dtypes (a bug);
``refused``   modulekit raised an error for this constructor or input (see
              :data:`REFUSALS`: a refusal is accepted only where it is documented);
``missing``   modulekit.nn has no class of that name.

Run ``python tests/torch_parity.py`` for the table; ``tests/test_torch_module_db.py`` holds the
assertions.
"""

from __future__ import annotations

import re
import sys
import warnings
from collections import Counter

import numpy as np

RTOL, ATOL = 1e-4, 1e-5

#: Refusals a user would accept: ``{class name: [regex the error message must match, ...]}``.
#: Every entry is also stated in docs/api.md's list of what each layer refuses.
REFUSALS: dict[str, list[str]] = {
    "FractionalMaxPool2d": [r"random"],
    "FractionalMaxPool3d": [r"random"],
}


def module_db():
    from torch.testing._internal.common_modules import module_db as db

    return db


def class_names() -> list[str]:
    return sorted({info.module_cls.__name__ for info in module_db()})


def _to_numpy(value):
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy().copy()
    if isinstance(value, torch.nn.utils.rnn.PackedSequence):
        from modulekit.nn.utils.rnn import PackedSequence

        return PackedSequence(*(None if v is None else _to_numpy(v) for v in value))
    if isinstance(value, torch.nn.Module):
        return _module_to_mk(value)
    name = getattr(value, "__name__", None)
    if callable(value) and name and getattr(torch.nn.functional, name, None) is value:
        from modulekit.nn import functional as F

        return getattr(F, name)
    if isinstance(value, torch.dtype):
        return str(value).replace("torch.", "")
    if isinstance(value, torch.device):
        return "cpu"
    if isinstance(value, tuple):
        return tuple(_to_numpy(v) for v in value)
    if isinstance(value, list):
        return [_to_numpy(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_numpy(v) for k, v in value.items()}
    return value


def _module_to_mk(tm):
    """The modulekit twin of a torch module passed to a constructor (a Transformer's layer),
    built from the torch module's own settings; its weights come with the outer state dict."""
    import modulekit.nn as mnn

    name = type(tm).__name__
    if name in ("TransformerEncoderLayer", "TransformerDecoderLayer"):
        act = tm.activation
        act = getattr(act, "__name__", None) or type(act).__name__.lower()
        kwargs = dict(d_model=tm.self_attn.embed_dim, nhead=tm.self_attn.num_heads,
                      dim_feedforward=tm.linear1.out_features, dropout=tm.dropout.p,
                      activation=act, layer_norm_eps=tm.norm1.eps,
                      batch_first=tm.self_attn.batch_first, norm_first=tm.norm_first,
                      bias=tm.linear1.bias is not None)
        return getattr(mnn, name)(**kwargs)
    if name in ("LayerNorm",):
        return mnn.LayerNorm(tm.normalized_shape, eps=tm.eps,
                             elementwise_affine=tm.elementwise_affine)
    raise TypeError(f"the parity run cannot build a modulekit twin of torch's {name}")


def _flatten(value) -> list:
    """The arrays of an output structure, in order (a PackedSequence as its fields)."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value.detach().cpu().numpy()]
    if isinstance(value, np.ndarray):
        return [value]
    if isinstance(value, (np.generic, float, int)) and not isinstance(value, bool):
        return [np.asarray(value)]
    if value is None:
        return [None]
    if isinstance(value, (tuple, list)):  # PackedSequence is a tuple in both libraries
        out = []
        for v in value:
            out += _flatten(v)
        return out
    if hasattr(value, "numpy"):  # a modulekit Tensor
        return [np.asarray(value.numpy())]
    raise TypeError(f"cannot compare an output of type {type(value).__name__}")


def _randomize(module, seed: int) -> None:
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in list(module.named_parameters()) + list(module.named_buffers()):
            if not t.is_floating_point():
                continue
            r = torch.randn(t.shape, generator=g, dtype=t.dtype)
            if name.endswith("running_var"):
                r = r.abs() + 0.5
            t.copy_(r)


def _same(want, got) -> str | None:
    """None when ``got`` matches ``want`` (torch), else what differs."""
    w, g = _flatten(want), _flatten(got)
    if len(w) != len(g):
        return f"{len(g)} outputs, torch has {len(w)}"
    for i, (a, b) in enumerate(zip(w, g)):
        if a is None or b is None:
            if (a is None) != (b is None):
                return f"output {i}: None against an array"
            continue
        b = np.asarray(b)
        if a.shape != b.shape:
            return f"output {i}: shape {b.shape}, torch {a.shape}"
        if a.dtype.kind in "biu":
            if not np.array_equal(a, b):
                return f"output {i}: integer values differ"
            continue
        if a.dtype != b.dtype:
            return f"output {i}: dtype {b.dtype}, torch {a.dtype}"
        if not np.allclose(b, a, rtol=RTOL, atol=ATOL, equal_nan=True):
            err = np.nanmax(np.abs(b.astype(np.float64) - a.astype(np.float64)))
            return f"output {i}: max abs diff {err:.3g}"
    return None


def run_class(name: str, dtypes=("float32",)) -> list[tuple[str, str, str]]:
    """Every sample of class ``name``: ``[(sample description, outcome, detail)]``."""
    import torch

    import modulekit.nn as mnn

    infos = [i for i in module_db() if i.module_cls.__name__ == name]
    mk_cls = getattr(mnn, name, None)
    results = []
    for info in infos:
        for dtype in dtypes:
            tdtype = getattr(torch, dtype)
            torch.manual_seed(0)
            samples = info.module_inputs_func(info, device="cpu", dtype=tdtype,
                                              requires_grad=False, training=False)
            for k, sample in enumerate(samples):
                desc = f"{info.name}[{dtype}]#{k} {sample.desc or ''}".strip()
                if mk_cls is None:
                    results.append((desc, "missing", f"modulekit.nn has no {name}"))
                    continue
                cargs = sample.constructor_input.args
                ckw = sample.constructor_input.kwargs
                fargs = sample.forward_input.args
                fkw = sample.forward_input.kwargs
                for weights in ("torch", "random"):
                    results.append((f"{desc} ({weights} weights)",)
                                   + _run_one(name, info, mk_cls, cargs, ckw, fargs, fkw,
                                              tdtype, weights))
    return results


def _run_one(name, info, mk_cls, cargs, ckw, fargs, fkw, tdtype, weights):
    import torch

    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tm = info.module_cls(*cargs, **ckw).to(tdtype).eval()
            if weights == "random":
                if getattr(tm, "has_uninitialized_params", lambda: False)():
                    tm(*fargs, **fkw)  # a lazy module: its first call creates what to randomise
                _randomize(tm, 1)
            torch.manual_seed(0)
            want = tm(*fargs, **fkw)
    except Exception as exc:  # noqa: BLE001 - a sample torch itself refuses is not ours
        return "skipped", f"torch raises {type(exc).__name__}: {exc}"
    state = {k: v.detach().numpy().copy() for k, v in tm.state_dict().items()}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = mk_cls(*_to_numpy(cargs), **_to_numpy(ckw))
            if state:
                m.load_state_dict(state)
            m.eval()
            got = m(*_to_numpy(fargs), **_to_numpy(fkw))
    except Exception as exc:  # noqa: BLE001 - recorded as a refusal, judged by the caller
        msg = f"{type(exc).__name__}: {exc}"
        return "refused", msg
    diff = _same(want, got)
    return ("match", "") if diff is None else ("mismatch", diff)


def accepted_refusal(name: str, detail: str) -> bool:
    return any(re.search(p, detail) for p in REFUSALS.get(name, ()))


def main(argv=None) -> int:
    names = (argv or sys.argv[1:]) or class_names()
    totals: Counter = Counter()
    for name in names:
        results = run_class(name)
        count = Counter(outcome for _, outcome, _ in results)
        totals.update(count)
        line = ", ".join(f"{k} {v}" for k, v in sorted(count.items()))
        print(f"{name:28s} {line}")
        shown: Counter = Counter()
        for desc, outcome, detail in results:
            if outcome == "mismatch" or (outcome == "refused"
                                         and not accepted_refusal(name, detail)):
                shown[detail[:60]] += 1
                if shown[detail[:60]] == 1:
                    print(f"    {outcome}: {desc}: {detail[:160]}")
    print("total:", ", ".join(f"{k} {v}" for k, v in sorted(totals.items())))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, "src")
    raise SystemExit(main())
