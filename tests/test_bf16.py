"""bfloat16 compute: the float32 matmul precision policy and the bfloat16 GEMM kernels.

Oracle: torch. Under "medium" a Linear computes ``act(bf16(x) @ bf16(W).T + b)`` with float32
accumulation, so it is compared with torch's float64 product of the bfloat16-rounded operands
within a float32 accumulation bound (``_ACC_TOL`` times ``|bf16(x)| @ |bf16(W)|.T + |b|``,
per element); against float32 (torch's float32 Linear) the documented bound is bfloat16's
rounding of both operands (``_BF16_TOL`` times the same magnitude); against torch's own bfloat16
Linear (oneDNN, output rounded to bfloat16) the bound is that plus torch's output rounding.
Every test that runs a kernel runs on every bfloat16 path this machine has (``bf16_path``).
"""

import os
import pickle
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

import modulekit
from modulekit import nn
from modulekit._ext import _gemm, _isa

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
BF16_PATHS = _isa.available_bf16()[1:]  # "avx512bf16", "amx" where the machine has them

# float32 accumulation of K products (relative to the sum of magnitudes): K * 2^-24 would be
# the worst case of a sequential sum; the kernels sum in blocks, 2e-6 covers K <= 4096 with
# room and still fails for a kernel that drops or rounds a product to bfloat16.
_ACC_TOL = 2e-6
# bfloat16 rounding of both operands: each product is off by at most 2 * 2^-8 relatively
_BF16_TOL = 2 * 2.0**-8 + 1e-5

pytestmark = pytest.mark.skipif(not BF16_PATHS, reason="no bfloat16 compute path on this CPU")


@pytest.fixture(params=BF16_PATHS)
def bf16_path(request):
    """Run the test once per bfloat16 path (AVX-512 level), restoring the defaults after."""
    prev_isa = _isa.set_isa("avx512")
    prev = _isa.set_bf16(request.param)
    try:
        yield request.param
    finally:
        _isa.set_bf16(prev)
        _isa.set_isa(prev_isa)


@pytest.fixture(autouse=True)
def _default_precision():
    """Every test starts and ends at the process-wide default ("highest")."""
    modulekit.set_float32_matmul_precision("highest")
    yield
    modulekit.set_float32_matmul_precision("highest")


def _bf16_round(a):
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).to(torch.bfloat16)


def _reference(x, w, b, act="none"):
    """(y, scale): torch's float64 ``act(bf16(x) @ bf16(w).T + b)`` and the per-element
    magnitude ``|bf16(x)| @ |bf16(w)|.T + |b|`` the tolerances scale with."""
    xb, wb = _bf16_round(x).double(), _bf16_round(w).double()
    bt = torch.zeros(w.shape[0], dtype=torch.float64) if b is None else torch.from_numpy(b).double()
    y = xb @ wb.T + bt
    scale = xb.abs() @ wb.abs().T + bt.abs()
    y = {
        "none": lambda t: t,
        "relu": torch.relu,
        "relu6": lambda t: torch.clamp(t, 0, 6),
        "gelu": torch.nn.functional.gelu,
        "gelu_tanh": lambda t: torch.nn.functional.gelu(t, approximate="tanh"),
        "silu": torch.nn.functional.silu,
        "sigmoid": torch.sigmoid,
        "tanh": torch.tanh,
    }[act](y)
    return y.numpy(), scale.numpy()


def _check(y, ref, scale, tol, what=""):
    assert y.dtype == np.float32
    err = np.abs(y.astype(np.float64) - ref)
    bound = tol * scale + 1e-30
    worst = np.unravel_index(np.argmax(err / bound), err.shape) if err.size else None
    assert np.all(err <= bound), (
        f"{what}: error {err[worst]:.3g} > bound {bound[worst]:.3g} at {worst}"
    )


def _data(rng, m, k, n, bias=True):
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = (rng.standard_normal((n, k)) / np.sqrt(max(k, 1))).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32) if bias else None
    return x, w, b


# ---------------------------------------------------------------- the precision policy
def test_default_is_highest():
    assert modulekit.get_float32_matmul_precision() == "highest"


@pytest.mark.parametrize("name", ["highest", "high", "medium"])
def test_set_get(name):
    modulekit.set_float32_matmul_precision(name)
    assert modulekit.get_float32_matmul_precision() == name


@pytest.mark.parametrize("bad", ["Medium", "low", "", "bf16", "highest "])
def test_bad_precision_name_is_refused_and_changes_nothing(bad):
    modulekit.set_float32_matmul_precision("medium")
    with pytest.raises(ValueError, match=r"unknown precision .*'highest', 'high' or 'medium'"):
        modulekit.set_float32_matmul_precision(bad)
    with pytest.raises(ValueError, match="float32_matmul_precision: unknown precision"):
        modulekit.float32_matmul_precision(bad)
    assert modulekit.get_float32_matmul_precision() == "medium"


@pytest.mark.parametrize("bad", [None, 2, b"medium", torch.float32])
def test_non_str_precision_is_refused(bad):
    with pytest.raises(TypeError, match="precision must be a str"):
        modulekit.set_float32_matmul_precision(bad)
    with pytest.raises(TypeError, match="precision must be a str"):
        modulekit.float32_matmul_precision(bad)
    assert modulekit.get_float32_matmul_precision() == "highest"


def test_context_manager_nests_and_restores():
    modulekit.set_float32_matmul_precision("high")
    with modulekit.float32_matmul_precision("medium") as ctx:
        assert repr(ctx) == "float32_matmul_precision('medium')"
        assert modulekit.get_float32_matmul_precision() == "medium"
        with modulekit.float32_matmul_precision("highest"):
            assert modulekit.get_float32_matmul_precision() == "highest"
        assert modulekit.get_float32_matmul_precision() == "medium"
        # the process-wide value changes under the block, which still wins in this thread
        modulekit.set_float32_matmul_precision("highest")
        assert modulekit.get_float32_matmul_precision() == "medium"
    assert modulekit.get_float32_matmul_precision() == "highest"


def test_context_manager_restores_after_an_exception():
    with pytest.raises(RuntimeError, match="boom"):
        with modulekit.float32_matmul_precision("medium"):
            raise RuntimeError("boom")
    assert modulekit.get_float32_matmul_precision() == "highest"


def test_context_manager_is_per_thread_and_reusable():
    seen = {}
    inside = threading.Event()
    release = threading.Event()

    def other():
        inside.wait(10)
        seen["other"] = modulekit.get_float32_matmul_precision()
        release.set()

    t = threading.Thread(target=other)
    t.start()
    ctx = modulekit.float32_matmul_precision("medium")
    with ctx:
        inside.set()
        release.wait(10)
        seen["self"] = modulekit.get_float32_matmul_precision()
    t.join()
    assert seen == {"other": "highest", "self": "medium"}
    with ctx:  # the same object again
        assert modulekit.get_float32_matmul_precision() == "medium"
    assert modulekit.get_float32_matmul_precision() == "highest"


def test_global_setting_reaches_other_threads():
    modulekit.set_float32_matmul_precision("medium")
    seen = []
    t = threading.Thread(target=lambda: seen.append(modulekit.get_float32_matmul_precision()))
    t.start()
    t.join()
    assert seen == ["medium"]


# ---------------------------------------------------------------- bf16 path selection
def test_bf16_path_selection():
    assert _isa.detected_bf16() in _isa.BF16_NAMES
    assert _isa.available_bf16()[-1] == _isa.detected_bf16()
    # the default: AMX where granted; AVX512-BF16 only where it beats float32 FMAs (AMD)
    assert _isa.default_bf16() in _isa.available_bf16()
    assert (_isa.default_bf16() == "amx") == (_isa.detected_bf16() == "amx")
    assert _isa.amx_status() in ("granted", "refused", "unsupported")
    # AMX is offered exactly when the OS granted the tile state
    assert ("amx" in _isa.available_bf16()) == (_isa.amx_status() == "granted")
    with pytest.raises(ValueError, match="unknown bfloat16 path 'avx2'"):
        _isa.set_bf16("avx2")
    prev = _isa.set_bf16("none")
    try:
        assert _isa.get_bf16() == "none"
    finally:
        _isa.set_bf16(prev)


def test_amx_refused_falls_back_cleanly():
    """A kernel that refuses the AMX tile state (simulated by the test hook): no AMX path,
    a clear refusal when asked for it, and "medium" still computes correctly."""
    if _isa.detected_bf16() != "amx":
        pytest.skip("no AMX here: nothing to refuse")
    code = """
import numpy as np
import modulekit
from modulekit._ext import _gemm, _isa
assert _isa.amx_status() == "refused", _isa.amx_status()
assert _isa.detected_bf16() == "avx512bf16" and "amx" not in _isa.available_bf16()
assert _isa.default_bf16() in ("none", "avx512bf16")
try:
    _isa.set_bf16("amx")
except ValueError as exc:
    assert "refused the AMX tile state" in str(exc), exc
else:
    raise AssertionError("set_bf16('amx') was accepted")
rng = np.random.default_rng(0)
x = rng.standard_normal((40, 64)).astype(np.float32)
w = rng.standard_normal((48, 64)).astype(np.float32)
p = _gemm.pack_linear(w)
with modulekit.float32_matmul_precision("medium"):
    y = p.forward(x)
    kernel = p.compute_kernel
assert "amx" not in kernel, kernel
ref = x.astype(np.float64) @ w.T.astype(np.float64)
assert np.abs(y - ref).max() < 2.0**-7 * (np.abs(x) @ np.abs(w).T).max()
print("ok", kernel)
"""
    env = dict(os.environ, MODULEKIT_TEST_AMX_REFUSED="1", PYTHONPATH=SRC)
    env.pop("MODULEKIT_BF16", None)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("ok")


def test_bf16_path_forced_by_environment():
    env = dict(os.environ, MODULEKIT_BF16="none", PYTHONPATH=SRC)
    code = "from modulekit._ext import _isa; print(_isa.get_bf16())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "none", out.stderr
    env["MODULEKIT_BF16"] = "tiles"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode != 0 and "unknown bfloat16 path 'tiles'" in out.stderr


def test_bf16_needs_the_avx512_level(rng):
    """Below the avx512 level there is no bfloat16 path: "medium" computes in float32."""
    x, w, b = _data(rng, 20, 64, 40)
    p = _gemm.pack_linear(w, b)
    prev = _isa.set_isa("avx2")
    try:
        assert _isa.get_bf16() == "none"
        want = p.forward(x)
        with modulekit.float32_matmul_precision("medium"):
            assert p.compute_kernel == p.kernel == "f32-gemm-6x16-avx2"
            np.testing.assert_array_equal(p.forward(x), want)
    finally:
        _isa.set_isa(prev)


def test_bf16_path_none_computes_float32(rng):
    x, w, b = _data(rng, 20, 64, 40)
    p = _gemm.pack_linear(w, b)
    want = p.forward(x)
    prev = _isa.set_bf16("none")
    try:
        with modulekit.float32_matmul_precision("medium"):
            np.testing.assert_array_equal(p.forward(x), want)
            assert p.bf16_nbytes == 0
    finally:
        _isa.set_bf16(prev)


# ---------------------------------------------------------------- kernels against torch
SHAPES = [
    (1, 1, 1),
    (1, 7, 5),
    (3, 5, 7),
    (8, 33, 31),
    (9, 64, 32),
    (31, 31, 65),
    (33, 100, 70),
    (64, 257, 33),
    (130, 96, 97),  # more rows than one 128-row block
    (40, 1100, 64),  # K over AVX512-BF16's 512 block: the accumulators continue from C
    (9, 4500, 40),  # K over AMX's 4096 block
    (5, 0, 6),  # K = 0: the bias alone
]


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("bias", [True, False])
def test_linear_medium_against_torch(bf16_path, rng, m, k, n, bias):
    x, w, b = _data(rng, m, k, n, bias)
    p = _gemm.pack_linear(w, b)
    with modulekit.float32_matmul_precision("medium"):
        y = p.forward(x)
        assert p.compute_kernel.startswith("bf16-gemm-")
        assert bf16_path in p.compute_kernel
    ref, scale = _reference(x, w, b)
    _check(y, ref, scale, _ACC_TOL, f"{bf16_path} {m}x{k}x{n}")
    # and against float32 (torch's float32 Linear) within bfloat16's rounding of the operands
    y32 = torch.nn.functional.linear(
        torch.from_numpy(x), torch.from_numpy(w), None if b is None else torch.from_numpy(b)
    ).double().numpy()
    _check(y, y32, scale, _BF16_TOL, "vs float32")


@pytest.mark.parametrize(
    "act", ["relu", "relu6", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh"]
)
def test_fused_epilogues(bf16_path, rng, act):
    m, k, n = 45, 200, 77
    x, w, b = _data(rng, m, k, n)
    x *= 3  # reach both sides of the clamps
    p = _gemm.pack_linear(w, b)
    with modulekit.float32_matmul_precision("medium"):
        y = p.forward(x, act)
    ref, scale = _reference(x, w, b, act)
    # the activation's slope is at most ~1.1 and its own float32 error is ~1e-6 relative
    _check(y, ref, scale * 1.2 + np.abs(ref), _ACC_TOL, act)


def test_clamp_epilogue(bf16_path, rng):
    x, w, b = _data(rng, 33, 64, 40)
    p = _gemm.pack_linear(w, b)
    with modulekit.float32_matmul_precision("medium"):
        y = p.forward(x, "clamp", -0.5, 0.25)
        plain = p.forward(x)
    np.testing.assert_array_equal(y, np.clip(plain, -0.5, 0.25))


def test_against_torch_bfloat16_linear(bf16_path, rng):
    """torch's own bfloat16 Linear (oneDNN) rounds its output to bfloat16: agree within that."""
    m, k, n = 64, 384, 150
    x, w, b = _data(rng, m, k, n)
    lin = torch.nn.Linear(k, n)
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(w))
        lin.bias.copy_(torch.from_numpy(b))
        want = lin.to(torch.bfloat16)(_bf16_round(x)).double().numpy()
    layer = nn.Linear(k, n)
    layer.load_state_dict({"weight": w, "bias": b.astype(np.float32)})
    with modulekit.float32_matmul_precision("medium"):
        y = layer(x)
    _, scale = _reference(x, w, b)
    # torch's bias is bfloat16 too, and its output rounds to bfloat16 (2^-8 relative)
    bound = _ACC_TOL * scale + 2.0**-8 * (np.abs(want) + np.abs(b)) + 1e-6
    assert np.all(np.abs(y - want) <= bound)


def test_noncontiguous_inputs_and_threads(bf16_path, rng):
    m, k, n = 70, 150, 90
    x, w, b = _data(rng, m, k, n)
    p = _gemm.pack_linear(w, b)
    with modulekit.float32_matmul_precision("medium"):
        want = p.forward(x)
        np.testing.assert_array_equal(p.forward(np.asfortranarray(x)), want)
        big = np.zeros((2 * m, 3 * k), np.float32)
        big[::2, ::3] = x
        np.testing.assert_array_equal(p.forward(big[::2, ::3]), want)
        np.testing.assert_array_equal(p.forward(x[::-1])[::-1], want)
        np.testing.assert_array_equal(p.forward(x.astype(np.float64)), want)
        prev = modulekit.get_num_threads()
        modulekit.set_num_threads(1)
        try:
            np.testing.assert_array_equal(p.forward(x), want)
        finally:
            modulekit.set_num_threads(prev)


def test_large_problem_threads_and_rows(bf16_path, rng):
    """A problem big enough to run threaded (row tiles and panel splits) and over several
    K blocks: bit-identical to one thread, within tolerance of torch."""
    for m, k, n in ((300, 1030, 260), (16, 700, 1200)):
        x, w, b = _data(rng, m, k, n)
        p = _gemm.pack_linear(w, b)
        with modulekit.float32_matmul_precision("medium"):
            y = p.forward(x, "gelu")
            prev = modulekit.get_num_threads()
            modulekit.set_num_threads(1)
            try:
                np.testing.assert_array_equal(p.forward(x, "gelu"), y)
            finally:
                modulekit.set_num_threads(prev)
        ref, scale = _reference(x, w, b, "gelu")
        _check(y, ref, scale * 1.2 + np.abs(ref), _ACC_TOL, f"{m}x{k}x{n}")


def test_paths_share_one_packed_layout(rng):
    """Switching between the bfloat16 paths reads the same buffer (no re-pack); their
    results agree within the accumulation tolerance."""
    if len(BF16_PATHS) < 2:
        pytest.skip("one bfloat16 path only")
    x, w, b = _data(rng, 50, 300, 70)
    p = _gemm.pack_linear(w, b)
    ys = {}
    prev = _isa.set_bf16(BF16_PATHS[0])
    try:
        with modulekit.float32_matmul_precision("medium"):
            for path in BF16_PATHS:
                _isa.set_bf16(path)
                ys[path] = p.forward(x)
                assert path in p.compute_kernel
                assert p.bf16_nbytes > 0
    finally:
        _isa.set_bf16(prev)
    ref, scale = _reference(x, w, b)
    for y in ys.values():
        _check(y, ref, scale, _ACC_TOL)


# ---------------------------------------------------------------- precision switching
def test_switching_precision_keeps_both_buffers(bf16_path, rng):
    x, w, b = _data(rng, 40, 130, 50)
    p = _gemm.pack_linear(w, b)
    y32 = p.forward(x)
    assert p.bf16_nbytes == 0
    assert p.compute_kernel == p.kernel  # "highest": float32
    with modulekit.float32_matmul_precision("medium"):
        y16 = p.forward(x)
    size = p.bf16_nbytes
    assert 0 < size < p.nbytes
    np.testing.assert_array_equal(p.forward(x), y32)  # back to float32, bit for bit
    modulekit.set_float32_matmul_precision("high")  # "high" computes as "highest"
    np.testing.assert_array_equal(p.forward(x), y32)
    modulekit.set_float32_matmul_precision("medium")
    np.testing.assert_array_equal(p.forward(x), y16)
    assert p.bf16_nbytes == size
    assert not np.array_equal(y16, y32)  # bfloat16 compute really ran
    w2, b2 = p.unpack()  # the float32 source is untouched
    np.testing.assert_array_equal(w2, w)
    np.testing.assert_array_equal(b2, b)


def test_module_precision_and_state_changes(bf16_path, rng):
    """nn.Linear under "medium"; load_state_dict re-packs and the bfloat16 copy follows."""
    x, w, b = _data(rng, 12, 48, 24)
    layer = nn.Linear(48, 24)
    layer.load_state_dict({"weight": w, "bias": b})
    layer.initialize()
    with modulekit.float32_matmul_precision("medium"):
        ref, scale = _reference(x, w, b)
        _check(layer(x), ref, scale, _ACC_TOL)
        _check(layer(x[None])[0], ref, scale, _ACC_TOL)  # 3-D input
        w2 = -w
        layer.load_state_dict({"weight": w2, "bias": b})
        ref2, scale2 = _reference(x, w2, b)
        _check(layer(x), ref2, scale2, _ACC_TOL)
    # the packed source is the float32 weight, not the rounded copy
    np.testing.assert_array_equal(layer._packed.unpack()[0], w2)


def test_initialize_under_medium_packs_the_bfloat16_copy(bf16_path, rng):
    x, w, b = _data(rng, 6, 40, 24)
    layer = nn.Linear(40, 24)
    layer.load_state_dict({"weight": w, "bias": b})
    with modulekit.float32_matmul_precision("medium"):
        layer.initialize()
    assert layer._packed.bf16_nbytes > 0
    plain = nn.Linear(40, 24)
    plain.load_state_dict({"weight": w, "bias": b})
    plain.initialize()
    assert plain._packed.bf16_nbytes == 0
    with modulekit.float32_matmul_precision("medium"):
        np.testing.assert_array_equal(layer(x), plain(x))


def test_bfloat16_weights_compute_in_bfloat16_under_medium(bf16_path, rng):
    x, w, b = _data(rng, 20, 96, 40)
    layer = nn.Linear(96, 40)
    layer.load_state_dict({"weight": w, "bias": b})
    layer.to(modulekit.bfloat16)
    wb = np.asarray(layer.weight).astype(np.float32)
    bb = np.asarray(layer.bias).astype(np.float32)
    y_highest = layer(x)  # weights widened to float32, input float32
    xt = torch.from_numpy(x).double()
    want = (xt @ torch.from_numpy(wb).double().T + torch.from_numpy(bb).double()).numpy()
    np.testing.assert_allclose(y_highest, want, rtol=1e-4, atol=1e-5)
    with modulekit.float32_matmul_precision("medium"):
        y = layer(x)
        assert layer._packed.compute_kernel.startswith("bf16-gemm-")
    assert y.dtype == np.float32
    ref, scale = _reference(x, wb, bb)
    _check(y, ref, scale, _ACC_TOL)


def test_float16_and_float64_layers_keep_their_compute(bf16_path, rng):
    x, w, b = _data(rng, 10, 40, 30)
    for dtype in ("float16", "float64"):
        p = _gemm.pack_linear(w, b, dtype)
        want = p.forward(x)
        with modulekit.float32_matmul_precision("medium"):
            assert p.compute_kernel == p.kernel
            np.testing.assert_array_equal(p.forward(x), want)
        assert p.bf16_nbytes == 0


def test_layer_chain_under_medium(bf16_path, rng):
    """A Sequential of Linears run as one chain computes each layer as the layer alone."""
    seq = nn.Sequential(nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 80), nn.GELU(),
                        nn.Linear(80, 10))
    seq.initialize()
    for m in (1, 5, 40):
        x = rng.standard_normal((m, 64)).astype(np.float32)
        with modulekit.float32_matmul_precision("medium"):
            y = seq(x)
            h = seq[0]._packed.forward(x, "relu")
            h = seq[2]._packed.forward(h, "gelu")
            np.testing.assert_array_equal(y, seq[4]._packed.forward(h))
        y32 = seq(x)
        assert not np.array_equal(y, y32)
        np.testing.assert_allclose(y, y32, rtol=0.05, atol=0.05)


def test_concurrent_threads_at_different_precisions(bf16_path, rng):
    x, w, b = _data(rng, 64, 512, 256)
    p = _gemm.pack_linear(w, b)
    want32 = p.forward(x)
    with modulekit.float32_matmul_precision("medium"):
        want16 = p.forward(x)
    errors = []

    def run(medium):
        try:
            for _ in range(20):
                if medium:
                    with modulekit.float32_matmul_precision("medium"):
                        y = p.forward(x)
                    np.testing.assert_array_equal(y, want16)
                else:
                    np.testing.assert_array_equal(p.forward(x), want32)
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i % 2 == 0,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_pickle_and_fresh_packing(bf16_path, rng):
    x, w, b = _data(rng, 9, 70, 33)
    p = _gemm.pack_linear(w, b)
    with modulekit.float32_matmul_precision("medium"):
        y = p.forward(x)
        data = pickle.dumps(p)
    q = pickle.loads(data)
    assert q.bf16_nbytes == 0  # the bfloat16 copy is not pickled: rebuilt on use
    assert len(data) < p.nbytes + 4096
    with modulekit.float32_matmul_precision("medium"):
        np.testing.assert_array_equal(q.forward(x), y)
        assert q.bf16_nbytes == p.bf16_nbytes


# ---------------------------------------------------------------- matmul
@pytest.mark.parametrize(
    "sa,sb",
    [((1, 1), (1, 1)), ((7, 33), (33, 5)), ((70, 130), (130, 90)), ((300, 64), (64, 200)),
     ((3, 17, 40), (3, 40, 9)), ((4, 40, 64), (64, 33)), ((40, 64), (5, 64, 33)),
     ((2, 9, 0), (2, 0, 4))],
)
def test_matmul_medium_against_torch(bf16_path, rng, sa, sb):
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    with modulekit.float32_matmul_precision("medium"):
        y = modulekit.matmul(a, b)
        # non-contiguous operands: the same result
        np.testing.assert_array_equal(
            modulekit.matmul(np.asfortranarray(a), np.swapaxes(np.swapaxes(b, -1, -2).copy(),
                                                               -1, -2)), y)
    at, bt = _bf16_round(a).double(), _bf16_round(b).double()
    ref = torch.matmul(at, bt).numpy()
    scale = torch.matmul(at.abs(), bt.abs()).numpy()
    _check(y, ref, scale, _ACC_TOL, f"matmul {sa} @ {sb}")
    y32 = modulekit.matmul(a, b)  # "highest": float32 again
    np.testing.assert_allclose(y32, np.matmul(a.astype(np.float64), b), rtol=1e-4, atol=1e-4)
    if ref.size and sa[-1] > 8:
        assert not np.array_equal(y, y32)


def test_matmul_float64_ignores_medium(bf16_path, rng):
    a = rng.standard_normal((20, 30))
    b = rng.standard_normal((30, 10))
    with modulekit.float32_matmul_precision("medium"):
        y = modulekit.matmul(a, b)
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, a @ b, rtol=1e-12, atol=1e-12)


def test_compiled_plan_follows_the_precision(bf16_path, rng):
    """A compiled model reads the precision at each call, as eager modules do."""
    import warnings

    def build():
        nn.manual_seed(3)
        return nn.Sequential(nn.Linear(64, 96), nn.GELU(), nn.Linear(96, 32), nn.ReLU(),
                             nn.Linear(32, 8))

    eager, comp = build(), build()
    comp.compile()
    x = rng.standard_normal((17, 64)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the plan must not fall back to eager
        for precision in ("highest", "medium", "highest", "medium"):
            with modulekit.float32_matmul_precision(precision):
                np.testing.assert_array_equal(comp(x), eager(x))
    with modulekit.float32_matmul_precision("medium"):
        y16 = comp(x)
    assert not np.array_equal(y16, comp(x))


def _attention_reference(q, k, v, heads, mask=None):
    """(out, magnitude): float64 attention of the bfloat16-rounded q, scale*k and v with the
    probabilities rounded to bfloat16 before P V (what "medium" computes), and P |V|."""
    B, Lq, E = q.shape
    Lk, Ev = k.shape[1], v.shape[2]
    d, dv = E // heads, Ev // heads
    scale = np.float32(1.0 / np.sqrt(d))
    Q = _bf16_round(q).double().reshape(B, Lq, heads, d).transpose(1, 2)
    K = _bf16_round(k * scale).double().reshape(B, Lk, heads, d).transpose(1, 2)
    V = _bf16_round(v).double().reshape(B, Lk, heads, dv).transpose(1, 2)
    S = Q @ K.transpose(-1, -2)
    if mask is not None:
        S = S + torch.from_numpy(mask).double()
    P = torch.softmax(S, -1).float().to(torch.bfloat16).double()
    out = (P @ V).transpose(1, 2).reshape(B, Lq, Ev).numpy()
    mag = (P @ V.abs()).transpose(1, 2).reshape(B, Lq, Ev).numpy()
    return out, mag


@pytest.mark.parametrize("shape", [(2, 17, 33, 64, 4, 64), (1, 128, 128, 384, 12, 384),
                                   (3, 5, 7, 30, 3, 21), (1, 1, 1, 2, 1, 2),
                                   (2, 40, 9, 36, 4, 44), (2, 45, 50, 130, 2, 96)])
@pytest.mark.parametrize("masked", [False, True])
def test_attention_medium(bf16_path, rng, shape, masked):
    """On every bfloat16 path (AVX512-BF16 blocks, AMX tiles over zero-padded operands) both of
    attention's matmuls multiply bfloat16 roundings (within one bfloat16 rounding of a
    probability, 2^-8 of P |V|, of the emulation: the float32 and float64 softmax may round a
    probability differently)."""
    from modulekit._ext import _ops

    B, Lq, Lk, E, H, Ev = shape
    q = rng.standard_normal((B, Lq, E)).astype(np.float32)
    k = rng.standard_normal((B, Lk, E)).astype(np.float32)
    v = rng.standard_normal((B, Lk, Ev)).astype(np.float32)
    mask = None
    if masked:
        mask = np.where(rng.random((B, 1, Lq, Lk)) < 0.3, -np.inf, 0.0).astype(np.float32)
        mask[..., 0] = 0.0  # every row keeps a key
    ref32, w32 = _ops.attention(q, k, v, H, mask, need_weights=True)
    with modulekit.float32_matmul_precision("medium"):
        out, w = _ops.attention(q, k, v, H, mask, need_weights=True)
        fast = None if masked else _ops.attention(q, k, v, H)[0]  # the unmasked fast entry
    want, mag = _attention_reference(q, k, v, H, mask)
    assert np.all(np.abs(out - want) <= 2.0**-8 * mag + 1e-6), np.max(np.abs(out - want) / mag)
    assert not np.array_equal(out, ref32)
    if fast is not None:
        np.testing.assert_array_equal(fast, out)
    # the returned probabilities are the float32 softmax of the bfloat16 scores
    np.testing.assert_allclose(w, w32, rtol=0.05, atol=2e-3)


def test_attention_highest_and_other_levels_stay_float32(rng):
    from modulekit._ext import _ops

    q, k, v = (rng.standard_normal((2, 9, 32)).astype(np.float32) for _ in range(3))
    ref = _ops.attention(q, k, v, 4)[0]
    prev = _isa.set_isa("avx2")
    try:
        with modulekit.float32_matmul_precision("medium"):
            avx2 = _ops.attention(q, k, v, 4)[0]
    finally:
        _isa.set_isa(prev)
    np.testing.assert_allclose(avx2, ref, rtol=1e-5, atol=1e-6)
    with modulekit.float32_matmul_precision("high"):
        np.testing.assert_array_equal(_ops.attention(q, k, v, 4)[0], ref)
