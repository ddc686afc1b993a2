"""Prototype measurement (issue #22 item 2): a ResNet block's stride-2 3x3 Conv and its 1x1 stride-2
downsample as one kernel that builds the phase planes once, before the unit is built into hetgen.

    python benchmarks/proto_downsample_unit.py [--model resnet18] [--nc 1024] [--runs 10] [--rounds 4]

The model is generated as hetgen does today; a copy is then fused by hand, pair by pair: where a
3x3 Conv on phase planes (`implicit_planes`, 4 phases) is followed in the program by a 1x1 Conv
on planes that reads the same input, the 3x3's kernel runs a second GEMM right after its own, on
each band (or on its one whole-image plane set), with the 1x1's packed weights, bias and epilogue
and B = the 3x3's phase (1, 1) plane (input rows and columns 0, 2, 4, ... with padding 1 and
stride 2: exactly the downsample's B, `b_ld` = the planes' `wq`); the 1x1's call is dropped. The
fused kernel gets a workspace of its own (the 1x1's output may lie where the 3x3's workspace did).
Both programs must give the same bits (the unit changes where B comes from, not the arithmetic).
Then both are timed as `bench_layers.py` times a model (each kernel call wrapped, CPU time, one
thread), in alternate order over `--rounds`: per pair the 3x3 + 1x1 calls against the fused
call, and all kernels of the run. `--nc` sets the platform's GEMM column block (which also sets
the bands' rows: `nc // out_w`).

This patches generated C by its text: it measures whether the unit pays before the unit is built
(docs/kernels.md, "What is left under 85 %"), it is not how hetgen would emit it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_layers import kernel_calls, profiled_main  # noqa: E402
from bench_models import peak_gflops  # noqa: E402

import hetgen  # noqa: E402
from hetgen.models.suite import BENCH_MODELS  # noqa: E402

CALL = re.compile(
    r"    \{ /\* (Conv '[^']+'[^*]*)\*/\n        void \*const args\[\] = \{ (.*) \};\n        (\w+)\(args\);\n    \}\n"
)
GEMM = re.compile(
    r"hg_sgemm_ex\((\d+)u, rows \* (\d+)u, (\d+)u, &ops, (?:job->)?yg \+ r0 \* \d+u, (\d+)u, 0,\n\s+(\w+)_epilogue, "
    r"(?:job->)?ctx, ([^;]*)\);\n"
)


def kernel_text(out: Path, kernel: str) -> tuple[Path, int, int]:
    """The generated file holding `kernel` and where its text starts and ends."""
    for path in sorted((out / "host" / "kernels").glob("*.c")):
        text = path.read_text()
        start = text.find(f"/* {kernel} computes")
        if start >= 0:
            end = text.find("\n}\n", text.find(f"\nvoid {kernel}(", start)) + 3
            return path, start, end
    raise SystemExit(f"{kernel}: not in {out}")


def pairs(out: Path) -> list[tuple[str, str, str, str]]:
    """(3x3 label, 3x3 kernel, 1x1 label, 1x1 kernel) for each 3x3 on 4 phase planes followed by a
    1x1 on planes reading the same input."""
    calls = CALL.findall((out / "host" / "model.c").read_text())
    found = []
    for (label3, args3, k3), (label1, args1, k1) in zip(calls, calls[1:]):
        if args3.split(", ")[0] != args1.split(", ")[0]:
            continue
        path3, s3, e3 = kernel_text(out, k3)
        path1, s1, e1 = kernel_text(out, k1)
        body3, body1 = path3.read_text()[s3:e3], path1.read_text()[s1:e1]
        if (
            f"{k3}_taps[9]" in body3
            and "phase planes" in body3
            and f"{k1}_taps[1]" in body1
            and all("(r0 * 2u)" in b for b in (body1, body3))
        ):
            found.append((label3.strip(), k3, label1.strip(), k1))
    return found


def fuse(out: Path, k3: str, k1: str) -> None:
    """The 3x3's kernel also computes the 1x1 from its phase (1, 1) plane; the 1x1's call dropped."""
    path3, s3, e3 = kernel_text(out, k3)
    text = path3.read_text()
    body3 = text[s3:e3]
    taps = [int(v) for v in re.search(rf"{k3}_taps\[9\] = {{ ([^}}]*) }}", body3).group(1).split(",")]
    base11 = taps[4]  # tap (1, 1) reads phase (1, 1) at its base
    channel = int(re.search(rf"planes \+ c \* (\d+)u \+ {k3}_taps", body3).group(1))
    wq = int(re.search(r"run_offset\[runs\] = oh \* (\d+)u \+ ow", body3).group(1))
    cin = int(re.search(r"for \(size_t c = 0; c < (\d+)u; \+\+c\)", body3).group(1))
    kc, nc = (int(v) for v in re.search(r"\.kc = (\d+)u,\n\s+\.nc = (\d+)u,", body3).groups())
    path1, s1, e1 = kernel_text(out, k1)
    body1 = path1.read_text()[s1:e1]
    m1, width, k_dim, ldc, _, _ = GEMM.search(body1).groups()
    channel1 = int(re.search(rf"planes \+ c \* (\d+)u \+ {k1}_taps", body1).group(1))
    wq1 = int(re.search(r"run_offset\[runs\] = oh \* (\d+)u \+ ow", body1).group(1))
    clamp = re.search(r"\.clamp = (\w+),", body1).group(1)
    in_place = f"{k1}_rows" in body1
    start = body1.find(f"static void {k1}_pack_b(")
    pack = body1[start : body1.find("\n}\n", start) + 3]
    pack = (
        pack.replace(f"{k1}_pack_b(", f"{k3}_ds_pack_b(")
        .replace(f"c * {channel1}u + {k1}_taps[tap]", f"c * {channel}u + {k3}_ds_taps[tap]")
        .replace(f"oh * {wq1}u + ow", f"oh * {wq}u + ow")
        .replace(f"{k1}_lanes", f"{k3}_lanes")
    )
    epilogue = body1[: body1.find("\n}\n") + 3].split("\n", 1)[1].replace(f"{k1}_epilogue", f"{k3}_ds_epilogue")
    helpers = (
        f"\n{epilogue}\nstatic const uint32_t {k3}_ds_taps[1] = {{ {base11} }};\n"
        f"static const uint32_t {k3}_ds_rows[{cin}] = {{ {', '.join(str(c * channel + base11) for c in range(cin))} }};\n"
        f"void *const *{k3}_ds_args; /* the 1x1's call's arguments, set by model.c */\n{pack}\n"
    )
    gemm = GEMM.search(body3)
    b_rows = f".b = planes, .b_rows = {k3}_ds_rows, .b_width = {width}u, .b_ld = {wq}u," if in_place else ""
    second = f"""    {{
        const float *bias1 = (const float *){k3}_ds_args[2];
        const hg_sgemm_finish finish1 = {{ .bias = bias1, .residual = NULL, .clamp = {clamp}, .lo = 0.0f, .hi = 0.0f }};
        const hg_sgemm_operands ops1 = {{
            .a_panels = (const float *){k3}_ds_args[1], .pack_b = {k3}_ds_pack_b, .b_src = planes,
            {b_rows} .kc = {kc}u, .nc = {nc}u, .finish = &finish1,
        }};
        hg_sgemm_ex({m1}u, rows * {width}u, {k_dim}u, &ops1, (float *){k3}_ds_args[3] + r0 * {width}u, {ldc}u, 0,
                    {k3}_ds_epilogue, bias1, {gemm.group(6)});
    }}
"""
    body3 = body3[: gemm.end()] + second + body3[gemm.end() :]
    anchor = body3.find(f"static void {k3}_planes(")
    body3 = body3[:anchor] + helpers + body3[anchor:]
    path3.write_text(text[:s3] + body3 + text[e3:])
    model_c = out / "host" / "model.c"
    model = model_c.read_text()
    matches = list(CALL.finditer(model))
    calls = {match.group(3): (match.start(), match.end(), match.group(2).split(", ")) for match in matches}
    if sum(match.group(3) in (k3, k1) for match in matches) != 2:
        raise SystemExit("a kernel function called twice: this prototype fuses calls, not functions")
    s_1, e_1, args1 = calls[k1]
    s_3, e_3, args3 = calls[k3]
    workspace = f"{k3}_ds_work"
    size = int(re.search(r"_Static_assert\((\d+)u >=", body3).group(1))
    planes_bytes = int(re.search(r"(\d+)u$", gemm.group(6)).group(1))  # the planes come first in the workspace
    set_args = "".join(f"        {k3}_ds_args_[{i}] = {a};\n" for i, a in enumerate(args1))
    new3 = model[s_3:e_3].replace(", ".join(args3), ", ".join([*args3[:-1], workspace]))
    new3 = new3.replace(
        "        void *const args[]",
        f"        static void *{k3}_ds_args_[5];\n{set_args}        {k3}_ds_args = {k3}_ds_args_;\n        void *const args[]",
    )
    model = model[:s_3] + new3 + model[e_3:s_1] + model[e_1:]
    declare = (
        f"extern void *const *{k3}_ds_args;\n"
        f"static char {workspace}[{size + planes_bytes}] __attribute__((aligned(64))); /* the unit's own workspace */\n"
    )
    first = model.find("void hg_host_k_")
    model_c.write_text(model[:first] + declare + model[first:])


def timed(out: Path, work: Path, inputs: Path, runs: int) -> dict[str, list[int]]:
    """Per kernel function, its CPU ns in each run (bench_layers' wrapper), and the run's total."""
    kernels = kernel_calls(out, "hg_host")
    program = work / "profiled_main"
    if not program.exists():
        profiled_main(out, "hg_host", kernels, work)
    log = work / "layers.log"
    environment = {**os.environ, "HG_THREADS": "1", "HG_LAYER_LOG": str(log), "HG_LAYER_REPEAT": "1"}
    subprocess.run([str(program), str(inputs), str(work / "outputs.bin"), str(runs + 1)], env=environment, check=True)
    names = sorted(set(kernels))
    rows = [tuple(int(v) for v in line.split()) for line in log.read_text().splitlines()][len(kernels) :]
    per_run: dict[str, list[int]] = {}
    for run in range(0, len(rows), len(kernels)):
        chunk = rows[run : run + len(kernels)]
        for name in names:
            per_run.setdefault(name, []).append(sum(ns for index, ns, _ in chunk if names[index] == name))
        per_run.setdefault("", []).append(sum(ns for _, ns, _ in chunk))
    return per_run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--nc", type=int, default=1024, help="the GEMM's column block (and so the bands' rows)")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    peak = peak_gflops()
    with tempfile.TemporaryDirectory(prefix="hetgen-proto-ds-") as tmp:
        root = Path(tmp)
        onnx.save(BENCH_MODELS[args.model](), root / "model.onnx")
        platform = root / "host.yaml"
        platform.write_text(
            f"name: host\ntarget: {{kind: native, runtime: aot}}\noptions: {{tuning: {{mc: 128, kc: 256, nc: {args.nc}}}}}\n"
        )
        separate = hetgen.compile(platform, root / "model.onnx", out=root / "separate", native_only=True)
        found = pairs(separate)
        if not found:
            raise SystemExit(f"{args.model}: no 3x3 stride-2 Conv on phase planes beside a 1x1 downsample")
        fused = root / "fused"
        shutil.copytree(separate, fused, ignore=shutil.ignore_patterns("obj", "bin", "lib"))
        (fused / "build.ninja").write_text((separate / "build.ninja").read_text().replace(str(separate), str(fused)))
        for _, k3, _, k1 in found:
            fuse(fused, k3, k1)
        subprocess.run(["ninja", "-C", str(fused)], check=True, capture_output=True)
        inputs = root / "inputs.bin"
        manifest = json.loads((separate / "hetgen.json").read_text())
        rng = np.random.default_rng(0)
        with inputs.open("wb") as stream:
            for tensor in manifest["inputs"]:
                rng.standard_normal(tensor["shape"]).astype(tensor["dtype"]).tofile(stream)
        builds = {"separate": separate, "fused": fused}
        works = {name: root / f"{name}-work" for name in builds}
        times: dict[str, dict[str, list[int]]] = {name: {} for name in builds}
        for round_ in range(args.rounds):
            for name in builds if round_ % 2 == 0 else reversed(list(builds)):
                works[name].mkdir(exist_ok=True)
                for kernel, ns in timed(builds[name], works[name], inputs, args.runs).items():
                    times[name].setdefault(kernel, []).extend(ns)
        same = (works["separate"] / "outputs.bin").read_bytes() == (works["fused"] / "outputs.bin").read_bytes()
        print(f"{args.model}, nc {args.nc}: peak {peak:.1f} GFLOP/s; outputs the same bits: {same}")
        print(f"{'unit':44} {'sep ms':>7} {'fused ms':>8} {'ratio':>6} {'best':>6} {'sep %':>6} {'fused %':>7}")
        for label3, k3, label1, k1 in found:
            sep = [a + b for a, b in zip(times["separate"][k3], times["separate"][k1])]
            one = times["fused"][k3]
            flops = unit_flops(separate, k3, k1)
            ms_sep, ms_one = statistics.median(sep) / 1e6, statistics.median(one) / 1e6
            print(
                f"{label3 + ' + ' + label1:44} {ms_sep:7.3f} {ms_one:8.3f} {ms_one / ms_sep:6.3f} "
                f"{min(one) / min(sep):6.3f} {100 * flops / ms_sep / 1e6 / peak:5.0f}% {100 * flops / ms_one / 1e6 / peak:6.0f}%"
            )
        whole = [statistics.median(times[name][""]) / 1e6 for name in builds]
        print(f"{'all kernels':44} {whole[0]:7.2f} {whole[1]:8.2f} {whole[1] / whole[0]:6.3f}")
        return 0 if same else 1


def unit_flops(out: Path, k3: str, k1: str) -> int:
    """2 x the multiply-adds of both GEMMs (m x n x k of each kernel's comment)."""
    total = 0
    for kernel in (k3, k1):
        path, start, end = kernel_text(out, kernel)
        m, k, n = re.search(r"\[(\d+) x (\d+)\] weights.*? times \[\d+ x (\d+)\]", path.read_text()[start:end]).groups()
        total += 2 * int(m) * int(n) * int(k)
    return total


if __name__ == "__main__":
    raise SystemExit(main())
