"""What a long generation says while it works: stage names and counts on stderr.

On a terminal, one line is rewritten in place ("hetgen: placing 5,000 nodes... 3.1 s") and cleared
when the pipeline is done, so the final report stands alone. Elsewhere (CI logs, tests that read
stderr, ninja's regenerate rule) nothing is printed for a quick stage; a stage still running after
`slow_s` prints its line once, and its time when it ends, so a 15-minute run is never silent.

Every stage's wall and CPU seconds are kept (`times`, `cpu_times`) whether or not anything is
printed: benchmarks/bench_scale.py reads them from the hidden `--stage-times FILE` option.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TextIO

SLOW_S = 5.0  # a stage that takes longer than this is reported even where stderr is not a terminal


def counted(count: int, noun: str) -> str:
    """`5,000 nodes`, `1 kernel`."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


@dataclass
class Progress:
    """Stage reports for one run. `stream` None: silent (the library's default)."""

    stream: TextIO | None = None
    tty: bool = False
    slow_s: float = SLOW_S
    times: dict[str, float] = field(default_factory=dict)  # wall seconds per stage
    cpu_times: dict[str, float] = field(default_factory=dict)  # the process's CPU seconds per stage
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _shown: bool = field(default=False, repr=False)  # a terminal line is on screen

    @classmethod
    def for_stderr(cls) -> Progress:
        return cls(sys.stderr, tty=sys.stderr.isatty())

    @contextmanager
    def stage(self, key: str, text: str) -> Iterator[None]:
        """Time the block as stage `key` ("placement"); `text` says what it does ("placing 5,000 nodes")."""
        start, start_cpu = time.perf_counter(), time.process_time()
        reported = threading.Event()
        timer = None
        if self.stream is not None:
            if self.tty:
                self._line(f"{text}...")
            else:
                timer = threading.Timer(self.slow_s, self._slow, (text, reported))
                timer.daemon = True
                timer.start()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            self.times[key] = self.times.get(key, 0.0) + elapsed
            self.cpu_times[key] = self.cpu_times.get(key, 0.0) + time.process_time() - start_cpu
            if timer is not None:
                timer.cancel()
            with self._lock:
                if reported.is_set():
                    self._print(f"hetgen: {text}: done in {elapsed:.1f} s\n")

    def step(self, text: str, done: int, total: int) -> None:
        """A stage's advance (`rendering kernels`, 300 of 812): terminals only, and not for every call."""
        if self.stream is not None and self.tty and (done == total or done % max(1, total // 100) == 0):
            self._line(f"{text}... {done:,}/{total:,}")

    def done(self) -> None:
        """Clear the terminal line (the pipeline's own report follows)."""
        with self._lock:
            if self._shown and self.stream is not None:
                self._print("\r\033[K")
                self._shown = False

    def _line(self, text: str) -> None:
        with self._lock:
            self._print(f"\r\033[Khetgen: {text}")
            self._shown = True

    def _slow(self, text: str, reported: threading.Event) -> None:
        with self._lock:
            reported.set()
            self._print(f"hetgen: {text}...\n")

    def _print(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed or broken stderr must not fail the generation
            pass


SILENT = Progress()
