"""The lower stage: a placed graph becomes per-target programs over planned memory.

Entry point: `lower(graph, platform, placement) -> Lowered`. Units (operators with fused
activations, `fuse.py`) are scheduled across controllers and devices (`schedule.py`), each target's
memory is planned by liveness (`memory.py`), and symbolic steps are resolved to buffer references
(`resolve.py`), giving the programs of `program.py`.
"""

from __future__ import annotations

import dataclasses

from hetgen.errors import HetgenError, InternalError, ModelError, PlacementError
from hetgen.ir import Graph
from hetgen.lower.banks import (
    BankArena,
    bank_reserves,
    check_weights_bank,
    example_buffers_bank,
    group_traffic,
    plan_banks,
)
from hetgen.lower.blocked_layout import block_layout
from hetgen.lower.memory import ALIGNMENT, Interval, MemoryPlan, check_sizes, plan_memory
from hetgen.lower.prepack import apply_prepacked
from hetgen.lower.program import (
    BufferRef,
    GroupEstimate,
    KernelUnit,
    Lowered,
    Program,
    ProgramRole,
    Region,
    TensorSpec,
    WeightEntry,
    Weights,
)
from hetgen.lower.resolve import Resolver, counted_link, device_model
from hetgen.lower.shared_arena import plan_shared, shared_arena_device
from hetgen.lower.tiled import TiledUnit, cascade_steps, tile_functions, tiled_steps
from hetgen.lower.verify import verified
from hetgen.lower.views import plan_with_views
from hetgen.lower.workspace import plan_workspaces, simulated_devices
from hetgen.names import target_prefix, unique_c_identifiers
from hetgen.partition.cascades import cascade_units
from hetgen.partition.choices import Choices, banked, placement_makespan_of, stale
from hetgen.partition.placement import Placement
from hetgen.platform.baremetal import is_bare_metal
from hetgen.platform.model import Platform, Role, Runtime, Target
from hetgen.platform.threads import has_pool, program_threads
from hetgen.spec import KernelTable
from hetgen.spec.cascade_program import CascadeProgram, Kind, cascade_program
from hetgen.spec.invocation import one_unit_per_invocation
from hetgen.spec.schedule import SCall, Scheduler, SCopyOut, Sym, UnitInfo
from hetgen.spec.tiling import TilePlan, Unfit, tensor_names

__all__ = ["lower", "Lowered", "Program"]


def refused(choices: Choices, graph: Graph) -> None:
    """Report every unit the kernel table could not lower, in one message."""
    if choices.refused:
        where = f"{graph.source}: " if graph.source else ""
        raise ModelError(
            f"{where}the model uses operators hetgen cannot generate code for:\n  " + "\n  ".join(choices.refused)
        )


def tensor_specs(names: tuple[str, ...], graph: Graph) -> tuple[TensorSpec, ...]:
    c_names = unique_c_identifiers(names, "tensor")
    return tuple(TensorSpec(name, c_name, graph.types[name]) for name, c_name in zip(names, c_names))


def pack_weights(names: list[str], graph: Graph) -> Weights:
    entries, chunks, offset = [], [], 0
    for name in names:
        data = graph.constants[name].tobytes()
        entries.append(WeightEntry(name, offset, len(data)))
        padded = len(data) + (-len(data)) % ALIGNMENT
        chunks.append(data + b"\0" * (padded - len(data)))
        offset += padded
    return Weights(tuple(entries), b"".join(chunks))


def target_prefixes(platform: Platform) -> dict[Target, str]:
    """Each target's C prefix; refused when two targets' prefixes meet."""
    prefixes: dict[Target, str] = {}
    for target in platform.targets():
        prefix = target_prefix(platform.name, target.path)
        clash = next((other for other, named in prefixes.items() if named.lower() == prefix.lower()), None)
        if clash is not None:
            raise HetgenError(
                f"{platform.file}: targets {clash.path_str} and {target.path_str} would both be named {prefix} in C; "
                "rename one of them"
            )
        prefixes[target] = prefix
    return prefixes


def lower(graph: Graph, platform: Platform, placement: Placement) -> Lowered:
    """Lower the placed graph, its kernels and tilings taken from the kernel table the placement was
    priced with; accelerators cut their work into invocations by the rule the cost model prices
    (hetgen/spec/invocation.py)."""
    if placement.kernels is None or not isinstance(placement.choices, Choices):
        raise InternalError(
            "lowering needs a placement from partition.place(), which carries its kernel table and choices"
        )
    why = stale(placement.choices, placement)
    if why is not None:
        raise InternalError(
            f"the placement's kernel choices were made for other groups ({why}); "
            "a placement edited after place() needs partition.choices.with_choices"
        )
    isolated = frozenset(t for t in platform.targets() if one_unit_per_invocation(t))
    return verified(_lower(graph, platform, placement, isolated, placement.kernels))


def plan_target(target, schedule, units_on_target, kernels, graph, is_root, views=()) -> tuple[MemoryPlan, Weights]:
    """One target's arena (by liveness over the schedule) and weights; refused past its capacity.
    `views`: the operators on it that are views (hetgen/lower/views.py plans their buffers)."""
    keep_out = set(graph.inputs) | set(graph.outputs) if is_root else set()  # the caller's buffers
    on_chip_weights = target.role is Role.ACCELERATOR  # accelerators load weights into local memory
    intervals = [
        Interval(tensor, graph.types[tensor].nbytes, min(times), max(times))
        for tensor, times in sorted(schedule.events.get(target, {}).items())
        if tensor not in keep_out and (on_chip_weights or tensor not in graph.constants)
    ]
    intervals += [
        Interval(f"scratch:{index}", kernels[index].scratch_bytes, index, index)
        for index, _ in units_on_target
        if kernels[index].scratch_bytes
    ]
    arenas: tuple[BankArena, ...] = ()
    if views and target.memories:
        raise InternalError(f"{target.path_str}: views in an arena planned over memory banks")
    if is_root and target.memories:
        events = schedule.events.get(target, {})
        accesses = {tensor: len(times) for tensor, times in events.items()}
        plan, arenas = plan_banks(target, intervals, accesses, bank_reserves(target, graph))
        _check_bank_runtime(target, arenas)
    else:
        plan = plan_with_views(intervals, views, {name: graph.types[name].nbytes for name in _viewed(views)})
    used: list[str] = []
    for _, info in units_on_target:
        used += [name for name in info.inputs if name in graph.constants and name not in used]
    if is_root:
        used += [name for name in graph.outputs if name in graph.constants and name not in used]
    capacity = target.memory_bytes
    if capacity is not None and plan.arena_size > capacity:
        raise PlacementError(
            f"{target.path_str}: the work placed here needs {plan.arena_size} bytes of local memory "
            f"(liveness lower bound {plan.lower_bound}); the device has {capacity} bytes. "
            "Give it more memory (e.g. sram_kib) or pin the large layers elsewhere"
        )
    touched = set(schedule.events.get(target, {})) | (keep_out & set(graph.types))
    check_sizes(
        target, plan, sum(graph.types[name].nbytes for name in used), {t: graph.types[t].nbytes for t in touched}
    )
    weights = pack_weights(used, graph)
    if arenas and not is_bare_metal(target):
        check_weights_bank(target, weights.size, arenas, bank_reserves(target, graph))
    return plan, weights, arenas


def _viewed(views) -> set[str]:
    """Every buffer `views` name: their outputs and their ranges."""
    return {name for view in views for name in (view.holder, *(part for part, _ in view.parts))}


def _check_bank_runtime(target: Target, arenas) -> None:
    """Spilled buffers live in static storage of their own bank, which straight-line C names
    directly; the graph and vm runtimes resolve one arena only."""
    used = [arena.bank.name for arena in arenas[1:] if arena.buffers]
    if used and target.runtime is not Runtime.AOT:
        runtime = (target.runtime or Runtime.GRAPH).value
        raise PlacementError(
            f"{target.path_str}: the arena spills from bank '{arenas[0].bank.name}' to {', '.join(map(repr, used))}, "
            f"which runtime '{runtime}' cannot address (it resolves one arena); use runtime: aot, "
            "or give the first arena bank room for the whole arena"
        )


def plan_tiled_target(target, schedule, plans: list[TilePlan], graph) -> tuple[MemoryPlan, int, int]:
    """A tiled accelerator's memory: its SRAM (the largest unit's tile buffers, units run one at a
    time) at offset 0, the emulating kernels' workspace, then its activations planned by liveness.
    Weights stay in the weight store; tiles DMA their slices. Returns (plan, SRAM, workspace)."""
    sram = max((plan.sram_bytes for plan in plans), default=0)
    sram = (sram + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
    scratch = max((plan.scratch_bytes for plan in plans), default=0)
    scratch = (scratch + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
    intervals = [
        Interval(tensor, graph.types[tensor].nbytes, min(times), max(times))
        for tensor, times in sorted(schedule.events.get(target, {}).items())
        if tensor not in graph.constants
    ]
    activations = plan_memory(intervals)
    if sram > (target.memory_bytes or 0):
        raise PlacementError(
            f"{target.path_str}: tile buffers need {sram} bytes of SRAM; the device has {target.memory_bytes}"
        )
    base = sram + scratch
    shifted = tuple((name, offset + base, nbytes) for name, offset, nbytes in activations.buffers)
    plan = MemoryPlan(
        shifted, base + activations.arena_size, base + activations.total_bytes, base + activations.lower_bound
    )
    return plan, sram, scratch


def tiled_units(units, infos, kernels: KernelTable, tiled_targets) -> dict[int, TilePlan]:
    """The tile plan of each unit placed on a tiled accelerator: the plan placement priced."""
    plans: dict[int, TilePlan] = {}
    for index, (unit, info) in enumerate(zip(units, infos)):
        if info.target not in tiled_targets:
            continue
        plan = kernels.tile_plan(info.target.path_str, unit.names)
        if isinstance(plan, Unfit):
            raise PlacementError(
                f"{info.target.path_str}: {unit.head.label} was placed here but {plan.reason}; pin it elsewhere "
                "or give the device more memory"
            )
        plans[index] = plan
    return plans


def _lower(
    graph: Graph, platform: Platform, placement: Placement, isolated: frozenset[Target], kernel_table: KernelTable
) -> Lowered:
    source_graph = graph  # the graph the placement priced (its cascades' units are read from it)
    root = platform.root.controller()
    choices: Choices = placement.choices
    refused(choices, graph)
    placed_graph = graph
    # the units, kernels and layouts the kernel choice stage recorded (hetgen/partition/choices.py)
    units = tuple(c.unit for c in choices.units)
    kernels = tuple(c.kernel for c in choices.units)
    assignment = {c.unit.head.name: c.target for c in choices.units}
    offers = {index: c.offers for index, c in enumerate(choices.units) if c.offers}
    graph, unit_inputs = apply_prepacked(graph, units, [c.inputs for c in choices.units], offers, choices.packed)
    blocks = {index: c.blocked for index, c in enumerate(choices.units) if c.blocked is not None}
    blocked = block_layout(graph, units, kernels, unit_inputs, assignment, blocks)  # NCHWc runs
    graph, units, kernels, unit_inputs, assignment = (
        blocked.graph,
        blocked.units,
        blocked.kernels,
        blocked.unit_inputs,
        blocked.assignment,
    )
    by_path = {t.path_str: t for t in platform.targets()}  # the placement and fusion name targets by path
    infos = [UnitInfo(by_path[assignment[u.head.name]], inputs, u.outputs) for u, inputs in zip(units, unit_inputs)]
    cascades = cascade_runs(placement, source_graph, platform, units, infos, isolated)
    joined = frozenset(index for members, _ in cascades.values() for index in members[1:])
    schedule = Scheduler(
        infos, root, set(graph.constants), set(graph.outputs), set(graph.inputs), isolated, joined=joined
    ).run()

    executing = [t for t in platform.targets() if t == root or t in schedule.entries]
    tile_plans = tiled_units(units, infos, kernel_table, isolated)
    cascaded = {index for members, _ in cascades.values() for index in members}
    plans: dict[Target, MemoryPlan] = {}
    weights: dict[Target, Weights] = {}
    sram_sizes: dict[Target, int] = {}
    scratch_sizes: dict[Target, int] = {}
    bank_arenas: dict[Target, tuple] = {}
    for target in executing:
        on_target = [(index, info) for index, info in enumerate(infos) if info.target == target]
        if target in isolated:
            sized = [tile_plans[i] for i, _ in on_target if i not in cascaded]
            sized += [program for first, (_, program) in cascades.items() if infos[first].target == target]
            plans[target], sram_sizes[target], scratch_sizes[target] = plan_tiled_target(target, schedule, sized, graph)
            used = list(dict.fromkeys(n for _, info in on_target for n in info.inputs if n in graph.constants))
            weights[target] = pack_weights(used, graph)
            continue
        views = tuple(view for view in choices.views if view.target == target.path_str)
        plans[target], weights[target], bank_arenas[target] = plan_target(
            target, schedule, on_target, kernels, graph, target == root, views
        )
    # an accelerator whose arena is in the root's RAM: one arena for both (hetgen/lower/shared_arena.py)
    shared = shared_arena_device(root, schedule, isolated)
    if shared is not None:
        base = sram_sizes[shared] + scratch_sizes[shared]
        plans[root], plans[shared] = plan_shared(root, shared, schedule, graph, kernels, base)

    bank_traffic: tuple = ()
    if bank_arenas.get(root):
        # each lowered unit's group, a reorder in the group of the unit it serves (blocked_layout.py)
        unit_groups = [
            placement.group_of(c.unit.head.name).name for c in choices.units for _ in range(len(c.reorders) + 1)
        ]
        traffic = group_traffic(root, unit_groups, infos, kernels, graph, plans[root], bank_arenas[root])
        placement, per_bank = banked(
            placement, platform, traffic, placement_makespan_of(placed_graph, platform, placement.cascades)
        )
        bank_traffic = tuple((name, nbytes, accesses) for name, (nbytes, accesses) in per_bank.items())

    prefixes = target_prefixes(platform)
    functions = {}
    tiled: dict[int, TiledUnit] = {}
    for index, (unit, kernel) in enumerate(zip(units, kernels)):
        fn = f"{prefixes[infos[index].target]}_k_{unit.head.name}"
        label = " + ".join(node.label for node in unit.nodes)
        names = tuple(node.name for node in unit.nodes)
        functions[index] = KernelUnit(fn, names, label, kernel)
        if index in tile_plans and index not in cascaded:
            plan = tile_plans[index]
            tiled[index] = TiledUnit(plan, tile_functions(plan, fn, names, label))
    cascade_functions = {
        first: cascade_kernel_units(program, [functions[i] for i in members])
        for first, (members, program) in cascades.items()
    }
    written_at_root = {name for info in infos if info.target == root for name in info.outputs if name}
    written_at_root |= {
        step.dst.tensor for entry in schedule.entries.get(root, []) for step in entry if isinstance(step, SCopyOut)
    }
    resolver = Resolver(graph, plans, weights, root, functions, written_at_root, kernel_table)

    estimates: dict[str, float] = {}  # by target path, as the placement names them
    for group in placement.groups:
        estimates[group.target] = estimates.get(group.target, 0.0) + group.cost_us
    composites = {t.host: t for t in platform.targets() if t.host is not None}
    programs = []
    for target in executing:
        if target in isolated:
            run = (tiled, cascades, cascade_functions, _crossing_on(placement, target))
            entries = [
                tuple(_tiled_entry(resolver, target, entry, run, unit_inputs, units, sram_sizes[target]))
                for entry in schedule.entries.get(target, [[]])
            ]
            program_units = tuple(
                f
                for i, info in enumerate(infos)
                if info.target == target
                for f in (tiled[i].functions if i in tiled else cascade_functions.get(i, ()))
            )
        else:
            scheduled = schedule.entries.get(target, [[]])
            entries = [tuple(resolver.step(target, step) for step in entry) for entry in scheduled]
            program_units = tuple(functions[i] for i, info in enumerate(infos) if info.target == target)
        if target == root:
            entries[0] += tuple(resolver.output_copies())
            role = ProgramRole.ROOT
        else:
            role = ProgramRole.ACCELERATOR if target.role is Role.ACCELERATOR else ProgramRole.COPROCESSOR
        programs.append(
            Program(
                target=target,
                role=role,
                runtime=target.runtime or Runtime.GRAPH,
                units=program_units,
                entries=tuple(entries),
                memory=plans[target],
                weights=weights[target],
                inputs=tensor_specs(graph.inputs, graph) if role is ProgramRole.ROOT else (),
                outputs=tensor_specs(graph.outputs, graph) if role is ProgramRole.ROOT else (),
                devices=tuple(device.path_str for device in schedule.devices.get(target, ())),
                device_model=device_model(target, plans[target].arena_size)
                if role is ProgramRole.ACCELERATOR
                else None,
                counted_link=counted_link(composites[target]) if target in composites else None,
                estimated_us=estimates.get(target.path_str, 0.0),
                sram_size=sram_sizes.get(target, 0),
                emulation_scratch=scratch_sizes.get(target, 0),
                pool=has_pool(platform.root, target),
                banks=bank_arenas.get(target, ()),
                buffers_bank=example_buffers_bank(target, graph) if role is ProgramRole.ROOT else None,
                bank_traffic=bank_traffic if role is ProgramRole.ROOT else (),
                threads=program_threads(platform, target),
                arena_in=shared.path_str if shared is not None and target == root else "",
                arena_base=sram_sizes[shared] + scratch_sizes[shared] if shared is not None and target == root else 0,
            )
        )
    layouts = plan_workspaces(programs)
    programs = [dataclasses.replace(p, workspace=layouts[p.target.path_str]) for p in programs]
    return Lowered(
        platform.name,
        graph.name,
        tuple(programs),
        simulated_devices(programs, layouts),
        placement_estimates(placement),
        placement.total_us,
        placement,
    )


def _crossing_on(placement: Placement, target: Target) -> frozenset[str]:
    """The tensors `target`'s groups share with other targets where its device keeps them in DRAM in
    the controller's layout (`Group.crossing`, as the placement priced them; none elsewhere): their
    DMAs are marked `Work.linear`."""
    return frozenset(name for group in placement.groups if group.target == target.path_str for name in group.crossing)


def _tiled_entry(resolver, target, entry, run, unit_inputs, units, sram_size) -> list:
    """A tiled accelerator's sub-program: each kernel call becomes its unit's tile commands; a
    cascade's first unit's call becomes the cascade's command list, its other units' calls nothing.
    DMAs of the tensors in `crossing` (run's last) are marked as the controller's linear tensors."""
    tiled, cascades, cascade_functions, crossing = run
    steps = []

    def linear_of(unit: int) -> dict[str, int]:
        positions = tensor_names(units[unit].nodes, units[unit].inputs)
        types = resolver.graph.types
        return {position: types[name].dtype.itemsize for position, name in positions.items() if name in crossing}

    def tensor_ref_of(unit: int):
        renamed = dict(zip(units[unit].inputs, unit_inputs[unit]))
        positions = tensor_names(units[unit].nodes, units[unit].inputs)  # a plan names tensors by position

        def tensor_ref(position):
            name = positions[position]
            if name in resolver.graph.constants:  # tiles DMA weights straight from the weight store
                return BufferRef(Region.WEIGHTS, resolver.weights[target].offset(name), name)
            return resolver.ref(Sym(target, renamed.get(name, name)))

        return tensor_ref

    for step in entry:
        if not isinstance(step, SCall):
            steps.append(resolver.step(target, step))
        elif step.unit in cascades:
            members, program = cascades[step.unit]
            refs = [tensor_ref_of(unit) for unit in members]
            linear = [linear_of(unit) for unit in members]
            steps += cascade_steps(program, cascade_functions[step.unit], refs, sram_size, sram_size, linear)
        elif step.unit in tiled:
            steps += tiled_steps(tiled[step.unit], tensor_ref_of(step.unit), sram_size, sram_size, linear_of(step.unit))
    return steps


def cascade_runs(placement: Placement, graph: Graph, platform: Platform, units, infos, isolated) -> dict:
    """Each claimed cascade (`Placement.cascades`) by its first unit's index: its units' indices
    (consecutive, on one tiled accelerator) and its command list, which must be what was priced."""
    index_of = {unit.head.name: index for index, unit in enumerate(units)}
    runs: dict[int, tuple[tuple[int, ...], CascadeProgram]] = {}
    for cascade in placement.cascades:
        members = tuple(index_of.get(name, -1) for name in cascade.units)
        where = f"cascade {' + '.join(cascade.groups)}"
        if -1 in members or list(members) != list(range(members[0], members[0] + len(members))):
            raise InternalError(f"{where}: its units are not consecutive kernel units of the program")
        if any(infos[i].target != infos[members[0]].target or infos[i].target not in isolated for i in members):
            raise InternalError(f"{where}: its units are not on one tiled accelerator")
        ops, layers, _ = cascade_units(cascade, placement, graph, platform)
        program = cascade_program(ops, layers, cascade.stripe)
        if (program.sram_bytes, program.dma_bytes, program.moved(Kind.MOVE)) != (
            cascade.sram_bytes,
            cascade.dma_bytes,
            cascade.move_bytes,
        ):
            raise InternalError(f"{where}: its command list is not the cascade that was priced")
        runs[members[0]] = (members, program)
    return runs


def cascade_kernel_units(program: CascadeProgram, layer_functions: list[KernelUnit]) -> tuple[KernelUnit, ...]:
    """The generated function of each of a cascade's row-tile kernels: named after its layer's unit."""
    return tuple(
        KernelUnit(
            f"{layer_functions[layer].fn}_c{index}",
            layer_functions[layer].nodes,
            f"{layer_functions[layer].label} (cascade row tile {index})",
            tile.kernel,
        )
        for index, (tile, layer) in enumerate(zip(program.kernels, program.kernel_layers))
    )


def placement_estimates(placement: Placement) -> tuple[GroupEstimate, ...]:
    """The cost model's figure for each group and transfer, kept for `hetgen bench` to compare."""
    # a cascade's groups run as one invocation and are priced as one (its first group's cost): one
    # estimate holds them all, named by its groups, so bench sets its simulated time beside its price
    by_name = {g.name: g for g in placement.groups}
    cascade_of = {c.groups[0]: c for c in placement.cascades}
    inside = {name for c in placement.cascades for name in c.groups[1:]}
    groups = []
    for g in placement.groups:
        if g.name in inside:
            continue
        cascade = cascade_of.get(g.name)
        if cascade is None:
            groups.append(GroupEstimate(g.name, g.target, tuple(g.nodes), g.label, g.cost_us))
            continue
        members = [by_name[name] for name in cascade.groups]
        nodes = tuple(node for member in members for node in member.nodes)
        label = "cascade: " + " + ".join(member.label for member in members)
        cost = sum(member.cost_us for member in members)
        groups.append(GroupEstimate("+".join(cascade.groups), g.target, nodes, label, cost))
    transfers = [
        GroupEstimate(f"{t.tensor} -> {t.dst}", t.dst, (), "transfer", t.cost_us, t.tensor, t.src, _transfer_parts(t))
        for t in placement.transfers
    ]
    return tuple(groups + transfers)


def _transfer_parts(transfer) -> tuple[tuple[str, str, float], ...]:
    """A copy's cost split by who pays it (hetgen/partition/cost.py: Hop): each link it crosses, and
    each accelerator whose DMA moves it."""
    links = tuple(
        ("link", link.below, link.latency_us + transfer.bytes / (link.bandwidth_gbps * 1e3)) for link in transfer.links
    )
    return links + tuple(("dma", dma.target, transfer.bytes / (dma.bandwidth_gbps * 1e3)) for dma in transfer.dma)
