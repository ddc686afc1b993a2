"""The recurrent step's GEMV alone: is it bound by the core's arithmetic, its caches' bandwidth, or latency?

    python benchmarks/bench_rnn_gemv.py [--hidden 256] [--rows 128,256,512,1024,2048]

Builds lstm_classifier's kernels (hetgen/models/recurrent.py) for this machine, then a driver that
includes the generated kernel file and times `hg_rnn_gemv` (templates/kernels/_recurrent.j2) on R
panels of `rows` x `hidden` floats, with the calling thread's CPU time (steadier than the wall clock
on a shared machine), the fastest of 30 rounds of 200 calls. Per size: ns per GEMV, GFLOP/s and the
bytes of R read per second. Where the rate drops as R outgrows the core's L2 and holds at the same
bytes per second from there on, the GEMV is bound by how fast R streams in, not by the FMA units
(each multiply-add needs one float of R: one vector load per FMA, so it cannot pass half the
core's FMA peak even from L1). An LSTM step of 256 hidden units reads R's 1024 x 256 floats (1 MiB).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hetgen  # noqa: E402
from hetgen.models import recurrent  # noqa: E402

DRIVER = r"""
#define _POSIX_C_SOURCE 200809L
#include KERNELS
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
    const size_t k = HIDDEN;
    static float h[HIDDEN], out[8192];
    for (size_t i = 0; i < k; ++i)
        h[i] = (float)i / (float)k;
    for (int a = 1; a < argc; ++a) {
        const size_t rows = (size_t)atol(argv[a]);
        float *r = aligned_alloc(64, rows * k * sizeof(float));
        for (size_t i = 0; i < rows * k; ++i)
            r[i] = (float)(i % 7) * 0.01f;
        double best = 1e30;
        for (int round = 0; round < 30; ++round) {
            const double start = cpu_ns();
            for (int i = 0; i < 200; ++i) {
                hg_rnn_gemv(h, r, k, out, out, rows);
                h[0] += out[1] * 1e-30f; /* each call depends on the one before, as steps do */
            }
            const double ns = (cpu_ns() - start) / 200;
            best = ns < best ? ns : best;
        }
        printf("%6zu x %zu (%5zu KiB): %8.0f ns  %6.1f GFLOP/s  %6.1f GB/s of R\n", rows, k,
               rows * k * sizeof(float) / 1024, best, 2.0 * rows * k / best, rows * k * sizeof(float) / best);
        free(r);
    }
    return 0;
}
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=256, help="columns of R (the GEMV's k)")
    parser.add_argument("--rows", default="128,256,512,1024,2048", help="rows of R to time (gates * hidden)")
    args = parser.parse_args()
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        parser.error("a C compiler (cc) is needed")
    with tempfile.TemporaryDirectory(prefix="hetgen-bench-gemv-") as tmp:
        folder = Path(tmp)
        onnx.save(recurrent.lstm_classifier(seq=8, inputs=16, hidden=args.hidden), folder / "lstm.onnx")
        out = hetgen.compile("host", folder / "lstm.onnx", out=folder / "out", native_only=True)
        (kernels,) = [path for path in (out / "host" / "kernels").glob("*.c") if "hg_rnn_gemv" in path.read_text()]
        (folder / "driver.c").write_text(DRIVER)
        exe = folder / "driver"
        command = [compiler, "-std=c11", "-O3", "-march=native", "-fno-math-errno", f'-DKERNELS="{kernels}"']
        command += [f"-DHIDDEN={args.hidden}", "-I", str(out / "host"), "-I", str(out / "runtime")]
        runtime = [str(out / "runtime" / name) for name in ("hg_gemm.c", "hg_threads.c")]
        command += [str(folder / "driver.c"), *runtime, "-lm", "-pthread", "-o", str(exe)]
        subprocess.run(command, check=True)
        subprocess.run([str(exe), *args.rows.split(",")], check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
