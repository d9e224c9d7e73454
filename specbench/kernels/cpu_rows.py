"""Our float32 product for a few rows on the CPU (`cpu_rows.c`), compiled on first use with the machine's C compiler
and loaded with ctypes.

Why: on the CPUs of experiments/cpu/ the library products (MKL's, oneDNN's) cost about what they cost for one row
only at one or two rows; from three rows on they re-pack the weight or take kernels far from what memory allows
(SmolLM2-135M's products in forward order, streaming from memory, on an Intel Xeon with AVX512-BF16 and no AMX:
F.linear 26.6 ms a pass at 1 row, 48.6 at 4, 51.4 at 6; experiments/cpu/intel-noamx-run2/products_sweep.txt). A verify of K+1 tokens or a tree's rows is such a
product. This one streams a packed copy of each weight once for all the input rows (with a software prefetch), and
sums each output in one fixed order whatever the row count or the thread count, so a row gets the bits it gets alone:
SmolLM2-135M's products cost 0.97-0.98x F.linear's 1-row cost at 2-8 rows on that Xeon, where F.linear's own cost
1.83x at 4 rows and 1.93x at 6 (experiments/cpu/intel-noamx-run2/products_sweep.txt).

The decoder's "auto" product forms time it beside the others (`decoder._time_forms`): at 1 row it runs where it
times fastest, from 2 rows on unless another form times faster by more than `decoder.ROWS_MARGIN`. Where no C compiler is found, or the library does not build or load, `available()` is False, the
reason is in `unavailable_reason()`, and the other forms run as before. The build goes to the cache directory
(`specbench._cache.cache_dir() / "kernels"`), one file per source, flags, compiler and CPU.

Threads: the loop over output columns is an OpenMP loop. The library is linked without an OpenMP runtime of its own,
so it runs on the one torch has loaded (torch.set_num_threads applies); where torch's is not visible, it does not
load.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from specbench._cache import cache_dir

SOURCE = Path(__file__).with_name("cpu_rows.c")
# -ffp-contract=fast: each step a fused multiply-add where the CPU has one (the kernels' bits are checked alike by
# tests/kernels/test_cpu_rows.py); -march=native: the build is for this CPU (its flags are in the file's key)
COMPILE_FLAGS = ("-O3", "-march=native", "-ffp-contract=fast", "-fopenmp", "-fPIC")
ENABLED = True  # False: `available()` says no, so "auto" never times this form

_lib: ctypes.CDLL | None = None
_reason: str | None = None  # why it is unavailable, once tried


def available() -> bool:
    """Whether the product can run here (built and loaded on the first call; later calls are a lookup)."""
    return ENABLED and _load() is not None


def unavailable_reason() -> str | None:
    """Why `available()` is False (None when it is True, or not asked yet)."""
    return "switched off (specbench.kernels.cpu_rows.ENABLED)" if not ENABLED else _reason


BLOCK = 16  # output columns side by side in the packed layout


def pack(weight: torch.Tensor) -> torch.Tensor:
    """An [N, K] float32 weight as the product reads it: [ceil(N / 16), K, 16], columns n..n+15 side by side for
    each k, the last block padded with zero rows. A copy (as much memory again), made once per weight by its user."""
    if weight.dtype != torch.float32 or weight.dim() != 2:
        raise ValueError(f"cpu_rows.pack takes a 2-d float32 weight, got {weight.dtype} {tuple(weight.shape)}")
    n, k = weight.shape
    w = weight.detach()
    if n % BLOCK:
        w = torch.cat([w, w.new_zeros(BLOCK - n % BLOCK, k)])
    return w.view(-1, BLOCK, k).transpose(1, 2).contiguous()


def linear(x: torch.Tensor, packed: torch.Tensor, n: int) -> torch.Tensor:
    """x [..., K] @ weight.T in float32 on the CPU for the weight [n, K] that `pack` made `packed` of, each row's
    result independent of the others (see above). It runs once per product of a forward, so its checks are kept to
    what a few attribute reads cost (a few us a call)."""
    lib = _lib if _lib is not None else _load()
    if lib is None:
        raise RuntimeError(f"specbench's CPU row product is unavailable: {_reason}")
    shape = x.shape
    k = shape[-1]
    if x.dtype != torch.float32 or packed.dtype != torch.float32 or not x.is_cpu:
        raise ValueError(f"cpu_rows.linear takes float32 CPU tensors, got x {x.dtype} on {x.device}, "
                         f"packed weight {packed.dtype}")
    if packed.shape != (-(-n // BLOCK), k, BLOCK) or not packed.is_contiguous():
        raise ValueError(f"cpu_rows.linear: x has inner size {k}, packed weight {tuple(packed.shape)} for {n} "
                         f"columns; want a contiguous [{-(-n // BLOCK)}, {k}, {BLOCK}] from pack()")
    if not x.is_contiguous():
        x = x.contiguous()
    out = torch.empty(shape[:-1] + (n,), dtype=torch.float32)
    lib.specbench_rows_gemm(x.data_ptr(), packed.data_ptr(), out.data_ptr(), math.prod(shape[:-1]), n, k)
    return out


def _load() -> ctypes.CDLL | None:
    global _lib, _reason
    if _lib is not None or _reason is not None:
        return _lib
    try:
        lib = ctypes.CDLL(str(_build()))
        _entry(lib)
        _lib = lib
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        _reason = str(e).strip()[-500:] or type(e).__name__
    return _lib


def _compiler() -> str:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    raise RuntimeError("no C compiler found (tried $CC, cc, gcc, clang)")


def _build() -> Path:
    """The library for this source, flags, compiler and CPU, compiled once into the cache directory (written to a
    temporary name and moved in whole, so a second process never loads half a file)."""
    cc = _compiler()
    version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
    key = hashlib.sha256("\n".join([SOURCE.read_text(), " ".join(COMPILE_FLAGS), *version, platform.machine(),
                                    _cpu_flags()]).encode()).hexdigest()[:16]
    out = cache_dir() / "kernels" / f"cpu_rows-{key}.so"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".build-") as tmp:
        os.replace(compile_to(Path(tmp) / out.name, cc=cc), out)
    return out


def compile_to(lib: Path, source: Path = SOURCE, march: str = "native", defines: tuple[str, ...] = (),
               cc: str | None = None) -> Path:
    """Compiles `source` with COMPILE_FLAGS (for -march=`march`, with -D`defines`) into the shared library `lib`, its
    object file beside it; a RuntimeError with the compiler's message if a step fails. `_build` uses it for this CPU;
    the tests and experiments/cpu/ build variants with it (`entry` loads one)."""
    cc = cc or _compiler()
    flags = [f"-march={march}" if f == "-march=native" else f for f in COMPILE_FLAGS]
    obj = lib.with_suffix(".o")
    # compiled with OpenMP, linked without a runtime: the loop runs on the one torch has loaded
    for cmd in ([cc, *flags, *(f"-D{d}" for d in defines), "-c", str(source), "-o", str(obj)],
                [cc, "-shared", str(obj), "-o", str(lib)]):
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.strip()[-400:]}")
    return lib


def entry(lib_path: Path):
    """specbench_rows_gemm(x, packed, y, M, N, K) of a library `compile_to` made, with its argument types set."""
    return _entry(ctypes.CDLL(str(lib_path)))


def _entry(lib: ctypes.CDLL):
    fn = lib.specbench_rows_gemm
    fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 3
    fn.restype = None
    return fn


def _cpu_flags() -> str:
    """The CPU's model and feature flags (what -march=native compiles for), or '' where /proc/cpuinfo is absent."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return ""
    return "\n".join(sorted({ln for ln in lines if ln.startswith(("model name", "flags"))}))
