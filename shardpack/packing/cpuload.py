"""How many cores a default run may use: this process's cores, and how busy other processes keep
them.

The CLI samples the machine's CPU time as it starts (note_start(), a few microseconds), so that
it measures others' load over its own start-up (~0.2 s) instead of waiting out a window of its
own before the workers start; a library caller's window is its scan and plan.
"""

from __future__ import annotations

import os
import time

# Jiffies are 10 ms: a shorter window says nothing about the load.
MIN_WINDOW_S = 0.05
# The start-up's sample stands for "now" only this long after it was taken.
START_SAMPLE_MAX_AGE_S = 5.0

Sample = tuple[float, float, float]  # (monotonic time, machine busy s, this process's CPU s)


def machine_cores() -> int:
    """The cores this process may run on (its CPU affinity), the most workers a default run
    plans for."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def sample() -> Sample | None:
    """The time, the machine's busy CPU seconds (/proc/stat) and this process's; None where
    there is no /proc/stat."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = [int(v) for v in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    busy = sum(fields) - fields[3] - fields[4]  # all but idle and iowait
    own = sum(os.times()[:2])
    return time.monotonic(), busy / os.sysconf("SC_CLK_TCK"), own


_started: Sample | None = None  # note_start()'s


def note_start() -> None:
    """Sample the machine now, at a process's start: a window that began before the start-up's
    imports."""
    global _started
    _started = sample()


class CpuWatch:
    """How many cores other processes keep busy: the machine's busy time less this process's
    own, over a window of wall time (the scan and plan; if those were too short, from the
    process's start if recent, else a short wait)."""

    def __init__(self) -> None:
        self.start = sample()

    def others_busy(self) -> float:
        """Cores other processes used since the window began."""
        start, now = self.start, time.monotonic()
        if start is None:
            return 0.0
        recent = _started is not None and now - _started[0] <= START_SAMPLE_MAX_AGE_S
        if now - start[0] < MIN_WINDOW_S and recent:
            start = _started  # the process's own start-up is the window: no wait
        time.sleep(max(0.0, start[0] + MIN_WINDOW_S - now))
        end = sample()
        if end is None:
            return 0.0
        wall, busy, own = (b - a for a, b in zip(start, end, strict=True))
        return max(0.0, (busy - own) / wall)
