"""Timing on this machine: the GEMM at candidate cache blocks, the core's FMA peak, a copy's bandwidth.

Each candidate compiles templates/tune/hg_tune_bench.c with the very runtime/hg_gemm.c that generated
projects link, under the native build's own flags (hetgen/build/toolchain.py) plus
-DHG_SGEMM_MC/KC/NC, and is loaded with ctypes. Every figure is the best of repeats after a warm-up:
on a shared machine other processes only ever make a run slower, so the fastest run is the one
closest to what the code itself costs (a median still moves with the load).
"""

from __future__ import annotations

import ctypes
import subprocess
from dataclasses import dataclass
from pathlib import Path

from hetgen.build import BuildOptions
from hetgen.build.toolchain import native_toolchain
from hetgen.errors import HetgenError
from hetgen.ops._gemm_plan import GemmBlocks
from hetgen.platform.model import Target
from hetgen.templates_dir import templates_dir


@dataclass(frozen=True)
class GemmShape:
    """One product the GEMM is timed on; `a_packed`: the weights are A (a convolution), else B (a matmul)."""

    m: int
    n: int
    k: int
    a_packed: bool

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k


class Bench:
    """The compiled harness for one candidate; `folder` keeps its library (one per candidate)."""

    def __init__(self, target: Target, blocks: GemmBlocks, folder: Path):
        runtime, source = templates_dir() / "runtime", templates_dir() / "tune" / "hg_tune_bench.c"
        library = folder / f"bench_{blocks.mc}_{blocks.kc}_{blocks.nc}.so"
        flags = native_toolchain(target, BuildOptions()).cflags
        defines = [f"-DHG_SGEMM_MC={blocks.mc}", f"-DHG_SGEMM_KC={blocks.kc}", f"-DHG_SGEMM_NC={blocks.nc}"]
        command = ["cc", *flags, *defines, "-shared", "-I", str(runtime), str(source), str(runtime / "hg_gemm.c")]
        result = subprocess.run([*command, "-o", str(library)], capture_output=True, text=True)
        if result.returncode != 0:
            raise HetgenError(f"hetgen tune: the benchmark kernel did not compile:\n{result.stderr[-2000:]}")
        self.lib = ctypes.CDLL(str(library))
        self.lib.hg_tune_gemm.argtypes = [ctypes.c_size_t] * 3 + [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        self.lib.hg_tune_fma.restype = ctypes.c_double
        self.lib.hg_tune_fma.argtypes = [ctypes.c_long]
        self.lib.hg_tune_copy.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]

    def gemm_seconds(self, shape: GemmShape, repeats: int) -> float:
        times = (ctypes.c_double * repeats)()
        if self.lib.hg_tune_gemm(shape.m, shape.n, shape.k, int(shape.a_packed), repeats, times) != 0:
            raise HetgenError(f"hetgen tune: out of memory for a {shape.m} x {shape.n} x {shape.k} product")
        return min(times)

    def peak_gflops(self, runs: int = 200) -> float:
        """The best of many short FMA loops (under a millisecond, shorter than a scheduler slice):
        other processes on a shared machine can only make it look slower."""
        self.lib.hg_tune_fma(1000)  # wake the clock up
        import time

        best = 0.0
        for _ in range(runs):
            start = time.perf_counter()
            flops = self.lib.hg_tune_fma(100_000)
            best = max(best, flops / (time.perf_counter() - start) / 1e9)
        return best

    def copy_gbps(self, nbytes: int = 64 << 20, repeats: int = 7) -> float:
        """Bytes read plus bytes written per second by memcpy over buffers larger than the caches."""
        times = (ctypes.c_double * repeats)()
        if self.lib.hg_tune_copy(nbytes, repeats, times) != 0:
            raise HetgenError(f"hetgen tune: cannot allocate {nbytes >> 20} MiB for the bandwidth measurement")
        return 2 * nbytes / min(times) / 1e9
