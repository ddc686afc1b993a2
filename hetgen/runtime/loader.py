"""Load a built project through cffi and run it on numpy arrays."""

from __future__ import annotations

import os
import tempfile
import threading
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import cffi
import numpy as np

from hetgen.bounded import is_shape_output, trimmed
from hetgen.build.ninja_file import library_path
from hetgen.codegen.manifest import Manifest, TensorEntry, read_manifest
from hetgen.codegen.project import STATS_FIELDS
from hetgen.errors import HetgenError
from hetgen.runtime.sanitizers import check_runtime_loaded


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype

    def __str__(self) -> str:
        return f"{self.name}: {self.dtype}[{'x'.join(map(str, self.shape))}]"


class Model:
    """A built model: `run({input name: ndarray}) -> {output name: ndarray}`.

    `run` is safe from several threads: each thread runs on a workspace of its own (allocated on its
    first run), so concurrent runs share nothing mutable in the library.

    The library is unloaded by `close()` (or leaving a `with` block), or when the model is
    collected, or at interpreter exit, whichever comes first: its worker pool is stopped and joined
    first (templates/runtime/hg_threads.c), so no worker runs its code once it is unmapped.
    """

    def __init__(self, out_dir: Path):
        self.path = out_dir
        self.manifest: Manifest = read_manifest(out_dir)
        self.prefix = self.manifest.prefix
        self.inputs = tuple(tensor_info(t) for t in self.manifest.inputs)
        self.outputs = tuple(tensor_info(t) for t in self.manifest.outputs)
        self._output_names = tuple(info.name for info in self.outputs)
        self._bounded = any(is_shape_output(name) for name in self._output_names)  # outputs to trim
        library = out_dir / library_path(self.prefix)
        check_runtime_loaded(out_dir, self.manifest)  # dlopen would abort the whole process
        if not library.is_file():
            raise HetgenError(f"{library}: the library is not built; run `ninja -C {out_dir}`")
        self._ffi = cffi.FFI()
        self._ffi.cdef(
            f"typedef struct {{ uint64_t {', '.join(STATS_FIELDS)}; }} hg_device_stats;"
            f"int {self.prefix}_init(void);"
            f"int {self.prefix}_run(const void *const *inputs, void *const *outputs, void *workspace);"
            f"int {self.prefix}_device_stats(const void *workspace, uint32_t device, hg_device_stats *stats);"
        )
        self.workspace_size = self.manifest.workspace_size
        self.workspace_align = self.manifest.workspace_align
        self._thread = threading.local()
        self._lib = _load_private_copy(self._ffi, library)
        self._library = _LoadedLibrary(self._ffi, self._lib, str(library))
        # not a method of self: the finalizer must not keep the model alive
        self._unload = weakref.finalize(self, self._library.close)
        self._run = getattr(self._lib, f"{self.prefix}_run")
        status = getattr(self._lib, f"{self.prefix}_init")()
        if status != 0:
            self.close()
            raise HetgenError(f"{library}: {self.prefix}_init failed with status {status}")

    def close(self) -> None:
        """Stops the library's worker pool and unloads the library, once runs in flight on other
        threads have ended. The model cannot run afterwards; functions taken with `function()` must
        not be called any more. Closing again does nothing."""
        self._unload()

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        ins = ", ".join(map(str, self.inputs))
        outs = ", ".join(map(str, self.outputs))
        return f"<hetgen model {self.manifest.model} on {self.manifest.platform}: ({ins}) -> ({outs})>"

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        arrays = checked_inputs(self.inputs, feeds)
        results = [np.empty(info.shape, dtype=info.dtype) for info in self.outputs]
        self.run_into(arrays, results)
        named = dict(zip(self._output_names, results))
        return trimmed(named) if self._bounded else named  # hetgen/bounded.py

    def function(self, declaration: str, name: str):
        """Another C function of the library, e.g. a simulated device's counters (valid until `close()`)."""
        with self._library.in_use():
            # override: the loader itself declares some (hg_threads_shutdown, looked up at load)
            self._ffi.cdef(declaration, override=True)
            return getattr(self._lib, name)

    def run_into(self, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        """Run on prepared contiguous arrays without allocating (used by benchmarks).

        This thread keeps the arrays of its last run (and their addresses in the call's pointer
        tables) until its next run: a run on the same arrays again, the usual loop,
        does not take their addresses anew, which was most of a small model's call (LeNet-5 runs
        in tens of microseconds)."""
        call = self._thread_call()
        call.point(self.inputs, inputs, call.in_ptrs, call.in_held, self._ffi)
        call.point(self.outputs, outputs, call.out_ptrs, call.out_held, self._ffi)
        library = self._library
        library.enter()
        try:
            status = self._run(call.in_ptrs, call.out_ptrs, call.workspace)
        finally:
            library.leave()
        if status != 0:
            raise HetgenError(f"{self.prefix}_run failed with status {status}")

    def run_frames(self, frames: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """Run `frames` (one feed dict each) pipelined across devices through the root's
        `_run_frames` (objective throughput: hetgen/spec/frames.py), each frame in flight in a
        workspace of its own; afterwards `device_stats` and `device_counters` read the last frame's."""
        depth = self.manifest.frame_depth
        if not depth:
            raise HetgenError(
                f"{self.path}: not built to run frames pipelined; generate it with --objective throughput"
            )
        arrays = [checked_inputs(self.inputs, feeds) for feeds in frames]
        results = [[np.empty(info.shape, dtype=info.dtype) for info in self.outputs] for _ in frames]
        ffi = self._ffi
        in_ptrs = ffi.new("void *[]", [ffi.from_buffer(a) for frame in arrays for a in frame] or [ffi.NULL])
        out_ptrs = ffi.new("void *[]", [ffi.from_buffer(a) for frame in results for a in frame] or [ffi.NULL])
        size, align = self.workspace_size, self.workspace_align
        storage = np.empty(depth * size + align, dtype=np.uint8)
        start = -storage.ctypes.data % align
        blocks = storage[start : start + depth * size]
        with self._library.in_use():
            run = self.function(
                f"int {self.prefix}_run_frames(const void *const *, void *const *, uint32_t, void *);",
                f"{self.prefix}_run_frames",
            )
            status = run(in_ptrs, out_ptrs, len(frames), ffi.from_buffer(blocks))
        if status != 0:
            raise HetgenError(f"{self.prefix}_run_frames failed with status {status}")
        if frames:  # the last frame's workspace becomes this thread's: its counters are read there
            last = (len(frames) - 1) % depth
            ffi.memmove(self._workspace(), ffi.from_buffer(blocks[last * size : (last + 1) * size]), size)
        return [trimmed({info.name: array for info, array in zip(self.outputs, frame)}) for frame in results]

    def device_stats(self, device: int) -> dict[str, int]:
        """Simulated device `device`'s counters over this thread's last run (the manifest's `stats_device`)."""
        stats = self._ffi.new("hg_device_stats *")
        with self._library.in_use():
            status = getattr(self._lib, f"{self.prefix}_device_stats")(self._workspace(), device, stats)
        if status != 0:
            raise HetgenError(f"{self.prefix}_device_stats({device}) failed with status {status}")
        return {what: int(getattr(stats, what)) for what in STATS_FIELDS}

    def device_counters(self, offset: int, count: int) -> list[int]:
        """`count` uint64 counters at byte `offset` of this thread's workspace, as its last run left
        them: a simulated device's per-command cycles (the manifest's `counters_offset`)."""
        if offset < 0 or offset + 8 * count > self.workspace_size:
            raise HetgenError(f"{self.path}: counters at {offset} (+{8 * count} bytes) lie outside the workspace")
        raw = bytes(self._ffi.buffer(self._workspace())[offset : offset + 8 * count])
        return [int(v) for v in np.frombuffer(raw, dtype=np.uint64)]

    def _workspace(self):
        """This thread's workspace: WORKSPACE_SIZE bytes at a WORKSPACE_ALIGN-aligned address."""
        return self._thread_call().workspace

    def _thread_call(self) -> _ThreadCall:
        call = getattr(self._thread, "call", None)
        if call is None:
            storage = np.empty(self.workspace_size + self.workspace_align, dtype=np.uint8)
            start = -storage.ctypes.data % self.workspace_align
            block = storage[start : start + self.workspace_size]
            call = self._thread.call = _ThreadCall(self._ffi, len(self.inputs), len(self.outputs), block)
        return call


class _ThreadCall:
    """One thread's arguments to `<prefix>_run`, made on its first run: its workspace, the input
    and output pointer tables, and the arrays whose addresses the tables hold. Holding the arrays
    keeps each address valid (a numpy array's data never moves while it is referenced) and lets a
    run on the same arrays skip cffi's `from_buffer`."""

    def __init__(self, ffi: cffi.FFI, inputs: int, outputs: int, block: np.ndarray):
        self.storage = block  # keeps the memory alive as long as the pointer
        self.workspace = ffi.from_buffer(block)
        self.in_ptrs = ffi.new("void *[]", max(inputs, 1))
        self.out_ptrs = ffi.new("void *[]", max(outputs, 1))
        self.in_held: list[np.ndarray | None] = [None] * inputs
        self.out_held: list[np.ndarray | None] = [None] * outputs

    @staticmethod
    def point(infos, arrays, pointers, held: list, ffi: cffi.FFI) -> None:
        """Checks `arrays` against `infos` and points `pointers` at them (a plain loop: a generator
        here cost a microsecond a run)."""
        if len(arrays) != len(infos):
            _refuse(infos, arrays)
        for index, info in enumerate(infos):
            array = arrays[index]
            if array.dtype != info.dtype or array.shape != info.shape or not array.flags.c_contiguous:
                _refuse(infos, arrays)
            if held[index] is not array:
                pointers[index] = ffi.from_buffer(array)
                held[index] = array


def _refuse(infos, arrays) -> None:
    wanted = ", ".join(map(str, infos))
    given = ", ".join(f"{a.dtype}[{'x'.join(map(str, a.shape))}]" for a in arrays)
    raise HetgenError(f"run_into() needs contiguous arrays ({wanted}); given ({given})")


def checked_inputs(infos: tuple[TensorInfo, ...], feeds: dict) -> list[np.ndarray]:
    """One checked array per input, in the model's order (see `checked_input`); names must match."""
    if len(feeds) != len(infos) or any(t.name not in feeds for t in infos):
        missing = [t.name for t in infos if t.name not in feeds]
        unknown = sorted(set(feeds) - {t.name for t in infos})
        raise HetgenError(f"run() needs inputs {[t.name for t in infos]}; missing {missing}, unknown {unknown}")
    return [checked_input(info, feeds[info.name]) for info in infos]


def checked_input(info: TensorInfo, value) -> np.ndarray:
    """`value` as a contiguous array of the input's dtype and shape, or a HetgenError.

    Like onnxruntime: an ndarray must have the input's dtype exactly and its shape exactly (a value
    of one element may stand for any shape of one element); plain Python values (scalars, lists)
    are converted when no kind is lost (int to float yes, float to int no).
    """
    if (
        type(value) is np.ndarray
        and value.dtype == info.dtype
        and value.shape == info.shape
        and value.flags.c_contiguous
    ):
        return value  # the common case, checked in a few hundred nanoseconds (a small model runs in tens of µs)
    expected = "x".join(map(str, info.shape)) or "scalar"
    if isinstance(value, np.ndarray) or hasattr(value, "dtype"):
        array = np.asarray(value)
        if array.dtype != info.dtype:
            raise HetgenError(
                f"input {info.name!r} has dtype {array.dtype}; the model expects {info.dtype}[{expected}] "
                f"(convert it with .astype(np.{info.dtype}))"
            )
    else:
        array = np.asarray(value)
        if not np.can_cast(array.dtype, info.dtype, casting="same_kind"):
            raise HetgenError(f"input {info.name!r} holds {array.dtype} values; the model expects {info.dtype}")
        array = array.astype(info.dtype)
    if array.shape != info.shape:
        if array.size == 1 and int(np.prod(info.shape)) == 1:
            array = array.reshape(info.shape)
        else:
            given = "x".join(map(str, array.shape)) or "scalar"
            raise HetgenError(f"input {info.name!r} has shape {given}; the model was built for {expected}")
    # Not np.ascontiguousarray: it turns a 0-d array into a 1-d one.
    return np.require(array, requirements="C")


class _LoadedLibrary:
    """A dlopened library and its unloading, apart from the model so that the model's finalizer
    can hold it. Unloading waits for calls in flight, then stops the worker pool (if the library
    links one) and joins its workers, then dlcloses: cffi would otherwise dlclose when the library's
    object is collected, while the pool's workers (spinning, or asleep) still run its code."""

    def __init__(self, ffi: cffi.FFI, lib, path: str):
        self._ffi = ffi
        self._lib = lib
        self._path = path
        # a plain lock for the counting (entered twice per run), a condition on it for close()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._calls = 0
        self._closed = False
        # Looked up now, not in close(): close may run as a garbage-collection finalizer in the middle
        # of another cdef, and cffi's C parser lock is not reentrant (pytest hung there, forever).
        self._shutdown = _pool_shutdown(ffi, lib)

    def enter(self) -> None:
        """A call begins: the library stays loaded until `leave`; a HetgenError once it is closed."""
        with self._lock:
            if self._closed:
                raise HetgenError(f"{self._path}: the model was closed; load it again to run it")
            self._calls += 1

    def leave(self) -> None:
        with self._lock:
            self._calls -= 1
            if self._closed and not self._calls:
                self._idle.notify_all()

    @contextmanager
    def in_use(self):
        """Keeps the library loaded for the block; a HetgenError once it is closed."""
        self.enter()
        try:
            yield
        finally:
            self.leave()

    def close(self) -> None:
        with self._idle:
            if self._closed:
                return
            self._closed = True
            self._idle.wait_for(lambda: self._calls == 0)
        if self._shutdown is not None:
            self._shutdown()
        self._ffi.dlclose(self._lib)


def _pool_shutdown(ffi: cffi.FFI, lib):
    """The library's `hg_threads_shutdown` (templates/runtime/hg_threads.c), or None where it links
    no worker pool."""
    try:
        ffi.cdef("void hg_threads_shutdown(void);", override=True)
        return lib.hg_threads_shutdown  # the lookup (dlsym) raises when it is absent
    except (AttributeError, cffi.FFIError):
        return None


def _load_private_copy(ffi: cffi.FFI, library: Path):
    """dlopen caches by path: a rebuilt library at the same path would silently be the old one.
    Load a private copy instead, and unlink it at once (the mapping outlives the file)."""
    handle, copy = tempfile.mkstemp(prefix=f"{library.stem}-", suffix=".so")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(library.read_bytes())
        return ffi.dlopen(copy)
    finally:
        os.unlink(copy)


def tensor_info(entry: TensorEntry) -> TensorInfo:
    """A manifest (hetgen.json) input or output entry."""
    return TensorInfo(entry.name, entry.shape, np.dtype(entry.dtype))


def load(out_dir: str | Path) -> Model:
    return Model(Path(out_dir))
