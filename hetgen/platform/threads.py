"""Each controller's worker pool: whether its program has one, and of how many threads.

A controller sets its own `threads:` (hetgen/platform/targets.py); `options: {threads: N}` is the
default of the controllers that have a pool and set none. Codegen writes each program's count into
its own hg_threads_config.h (hetgen/codegen/project.py), and the cost model prices the program's
kernels with the same count (hetgen/partition/cost.py `pool_threads`): one function, here, decides.
"""

from __future__ import annotations

from hetgen.platform.baremetal import is_bare_metal
from hetgen.platform.model import Platform, Role, Target


def has_pool(root: Target, target: Target) -> bool:
    """Whether `target`'s program has a worker pool: it is a controller on an OS, and no controller
    above it is bare metal (a bare-metal controller links what it drives into its own image, which
    has no pthreads). An accelerator's kernels run on no pool of their own: 1 thread."""
    if target.role is not Role.CONTROLLER or is_bare_metal(target):
        return False
    return not any(is_bare_metal(t) for t in controllers_above(root, target))


def pool_owner(root: Target, target: Target) -> Target:
    """The controller whose program's pool runs `target`'s kernels: its own for the root and for a
    co-processor the root drives over the transport (both on an OS: hetgen/codegen/remote.py
    `remote_devices`, each a program of its own); a deeper co-processor is linked into the program
    of the controller that drives it (hetgen/build/board.py `_in_process`), whose pool it calls."""
    above = controllers_above(root, target)
    if not above or (len(above) == 1 and not is_bare_metal(above[0]) and not is_bare_metal(target)):
        return target
    return pool_owner(root, above[-1])


def program_threads(platform: Platform, target: Target) -> int:
    """The thread count `target`'s kernels are generated with (its program's HG_THREADS_DEFAULT)
    and priced at: its pool owner's `threads:`, else `options.threads`, where it has a pool; 1
    elsewhere."""
    if not has_pool(platform.root, target):
        return 1
    owner = pool_owner(platform.root, target)
    return owner.threads if owner.threads is not None else int(platform.options.get("threads", 1))


def controllers_above(root: Target, target: Target) -> list[Target]:
    """The controllers that drive `target`, from the root down (a composite's host for its devices)."""

    def visit(node: Target, above: list[Target]) -> list[Target] | None:
        if node.path == target.path:
            return above
        driver = node if node.role is Role.CONTROLLER else node.host
        below = [*above, driver] if driver is not None else above
        children = [(node.host, above)] if node.host is not None else []
        children += [(device, below) for device in node.devices]
        for child, chain in children:
            found = visit(child, chain)
            if found is not None:
                return found
        return None

    return visit(root, []) or []
