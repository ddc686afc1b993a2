"""Latency and energy per inference of the latency-optimal and the energy-optimal placement.

    python benchmarks/bench_objectives.py                       # every shipped platform x example model
    python benchmarks/bench_objectives.py --platforms soc,dual --models resnet_tiny
    python benchmarks/bench_objectives.py --simulate soc:resnet_tiny   # also build both and simulate them

For each case both placements are priced as explain prices them (hetgen/partition/energy.py: the
kinds' and links' energy figures, static power over the makespan); the energy placement's energy
must not exceed the latency placement's (checked: a violation exits 1). Where the energy
placement is also faster, the latency search missed a faster placement (it is exact only where
`explain` says so, issue #23 item 2): marked LATENCY SEARCH MISSED. Where the two differ the groups that moved are listed with the
energy parts that changed (compute, copies, links, static), which say why. Platforms without energy
figures are listed and skipped. `--simulate P:M` builds both placements natively (the energy one
records its figures in hetgen.json) and prints the simulated latency and energy beside the estimate
(`hetgen bench`'s replay: hetgen/runtime/devices.py).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from hetgen.errors import HetgenError  # noqa: E402
from hetgen.frontend import import_model  # noqa: E402
from hetgen.partition import place  # noqa: E402
from hetgen.partition.energy import energy_problem  # noqa: E402
from hetgen.platform import load_platform  # noqa: E402


def _pick(names: list[str], wanted: str | None) -> list[str]:
    if not wanted:
        return names
    prefixes = wanted.split(",")
    return [n for n in names if any(n.startswith(p) for p in prefixes)]


def _parts(report) -> dict[str, float]:
    return {
        "compute": sum(d.compute_nj for d in report.devices),
        "copies": sum(d.copy_nj for d in report.devices) + report.link_nj,
        "static": report.static_nj,
    }


def compare(platform, graph) -> tuple[str, bool]:
    """The case's line, and whether the energy placement's energy is at most the latency one's."""
    latency = place(graph, platform, objective="latency")
    energy = place(graph, platform, objective="energy")
    le, ee = latency.energy.total_nj, energy.energy.total_nj
    ok = ee <= le * (1 + 1e-9)
    missed = energy.total_us < latency.total_us * (1 - 1e-9)
    where = {n: g.target for g in latency.groups for n in g.nodes}
    moved = sorted({f"{n}: {where[n]} -> {g.target}" for g in energy.groups for n in g.nodes if where[n] != g.target})
    line = (
        f"{latency.total_us:10.1f} {le / 1000:10.3f} | {energy.total_us:10.1f} {ee / 1000:10.3f} | "
        f"{(1 - ee / le) * 100 if le else 0.0:6.2f} % {(energy.total_us / latency.total_us - 1) * 100:7.2f} %"
    )
    if not moved and abs(le - ee) <= 1e-9 * le:
        return line + "  same placement", ok
    parts_l, parts_e = _parts(latency.energy), _parts(energy.energy)
    why = ", ".join(f"{k} {(parts_e[k] - parts_l[k]) / 1000:+.3f} uJ" for k in parts_l)
    shown = "; ".join(moved[:3]) + (f"; ... {len(moved) - 3} more" if len(moved) > 3 else "")
    # the latency search is not exact under its makespan on these graphs (issue #23 item 2): the
    # energy search's wider refinement (every move of one group, priced at the makespan) found a
    # faster placement too
    latency_note = "  LATENCY SEARCH MISSED: the energy placement is faster" if missed else ""
    return f"{line}  moved {len(moved)} nodes ({shown}); {why}{latency_note}", ok


def simulate(platform_name: str, model_name: str) -> None:
    import hetgen
    from hetgen.runtime.devices import simulation_report

    platform = load_platform(ROOT / "platforms" / f"{platform_name}.yaml")
    model = ROOT / "examples" / f"{model_name}.onnx"
    with tempfile.TemporaryDirectory() as tmp:
        for objective in ("latency", "energy"):
            out = hetgen.compile(platform, str(model), out=Path(tmp) / objective, native_only=True, objective=objective)
            report = simulation_report(out)
            graph = import_model(str(model))
            estimate = place(graph, platform, objective=objective)
            energy = report.energy
            simulated = f"simulated {energy.simulated_nj / 1000:.3f} uJ" if energy is not None else "(not recorded)"
            print(
                f"  {platform_name} {model_name} {objective:>7}: latency estimate {report.estimate_us:.1f} us,"
                f" simulated {report.with_estimates_us:.1f} us; energy estimate {estimate.energy.total_nj / 1000:.3f} uJ,"
                f" {simulated}"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platforms", help="comma-separated name prefixes (default: every shipped platform)")
    parser.add_argument("--models", help="comma-separated name prefixes (default: every example model)")
    parser.add_argument("--simulate", action="append", default=[], metavar="PLATFORM:MODEL")
    args = parser.parse_args()
    platforms = _pick(sorted(p.stem for p in (ROOT / "platforms").glob("*.yaml")), args.platforms)
    models = _pick(sorted(p.stem for p in (ROOT / "examples").glob("*.onnx")), args.models)
    print(f"{'case':<40} {'latency placement':>21} | {'energy placement':>21} | energy saved, latency cost")
    print(f"{'':<40} {'us':>10} {'uJ':>10} | {'us':>10} {'uJ':>10} |")
    failures = 0
    for name in platforms:
        platform = load_platform(ROOT / "platforms" / f"{name}.yaml")
        problem = energy_problem(platform)
        if problem is not None:
            print(f"{name:<40} skipped: {problem.split(': ', 1)[1].split(' (declare')[0]}")
            continue
        for model in models:
            try:
                graph = import_model(str(ROOT / "examples" / f"{model}.onnx"))
                line, ok = compare(platform, graph)
            except HetgenError as error:
                line, ok = f"not placed: {str(error).splitlines()[0]}", True
            failures += not ok
            print(f"{name + ' ' + model:<40} {line}" + ("" if ok else "  VIOLATION"))
    for case in args.simulate:
        platform_name, model_name = case.split(":")
        simulate(platform_name, model_name)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
