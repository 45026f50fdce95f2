"""Run one command as a whole process and measure it: wall time, CPU time, memory.

What each figure means:
- wall_s: from just before fork/exec to the reaping of the process (start-up included).
- cpu_s: user + system time of the process and every descendant it waited for (wait4).
- maxrss_mb: the kernel's exact peak resident set of the largest single process among the
  process and the descendants it reaped (wait4's ru_maxrss); isolated per command because
  wait4 reports on that one child only.
- tree_pss_mb: the peak, over samples every SAMPLE_S, of the summed proportional set size
  (PSS, /proc/PID/smaps_rollup) of the process and all its live descendants. PSS splits
  shared pages (libraries, copy-on-write memory of forked workers) between the processes
  that share them, so the sum is what the tree really costs; a peak shorter than SAMPLE_S
  can be missed.
- parent_rss_mb / worker_rss_mb: the peak RSS (sampled) of the top process, and of the
  largest of its descendants.
- worker_private_mb: the peak private memory (USS: Private_Clean + Private_Dirty, sampled) of
  the largest descendant: what a worker holds alone. A forked worker's RSS starts at its
  parent's (the page tables are copied), so RSS counts the parent's listing in every worker;
  its private memory counts only the pages it wrote to.
- other_cores: CPU that everything else on the machine used during the run, in cores
  (busy time from /proc/stat, less this run's cpu_s, over wall_s): how noisy the run was.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
from dataclasses import asdict, dataclass

# Sampling period of the memory poller. Reading a process's smaps_rollup walks its page tables:
# ~0.5 ms of CPU for a worker. Every 50 ms, a 2-worker run of 3,000 photos (4.4 s) took ~4%
# longer than unmeasured (medians of 4, alternating); every 0.2 s the cost is a quarter of that,
# and a run's peak still lies in a sample unless it lasts under 0.2 s.
SAMPLE_S = 0.2


@dataclass(frozen=True)
class Measurement:
    """One measured run of one command."""

    argv: tuple[str, ...]
    returncode: int
    wall_s: float
    cpu_s: float
    maxrss_mb: float
    tree_pss_mb: float
    parent_rss_mb: float
    worker_rss_mb: float
    worker_private_mb: float
    processes: int  # distinct processes seen in the tree
    other_cores: float
    stdout: str
    stderr: str

    def to_json(self) -> dict:
        out = asdict(self)
        out["argv"] = list(self.argv)
        del out["stdout"], out["stderr"]
        return out


def _busy_s() -> float:
    """Seconds of CPU the whole machine has spent busy since boot (all cores summed)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    busy = sum(fields[:8]) - idle  # user..steal; guest time is already inside user
    return busy / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids.extend(int(k) for k in f.read().split())
        except OSError:
            continue
    return kids


def _memory_kb(pid: int) -> tuple[int, int, int] | None:
    """(RSS, PSS, private) in KiB of one process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            text = f.read()
    except OSError:
        return None
    fields = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in ("Rss", "Pss", "Private_Clean", "Private_Dirty"):
            fields[name] = int(rest.split()[0])
    private = fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)
    return fields.get("Rss", 0), fields.get("Pss", 0), private


class _TreePoller(threading.Thread):
    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.stop = threading.Event()
        self.tree_pss = 0
        self.peak_rss: dict[int, int] = {}
        self.peak_private: dict[int, int] = {}

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(SAMPLE_S)

    def sample(self) -> None:
        total, pending = 0, [self.root]
        while pending:
            pid = pending.pop()
            memory = _memory_kb(pid)
            if memory is None:
                continue
            rss, pss, private = memory
            total += pss
            self.peak_rss[pid] = max(self.peak_rss.get(pid, 0), rss)
            self.peak_private[pid] = max(self.peak_private.get(pid, 0), private)
            pending.extend(_children(pid))
        self.tree_pss = max(self.tree_pss, total)


def run_measured(
    argv: list[str], cwd: str | None = None, env: dict | None = None, timeout: float = 1800
) -> Measurement:
    """Run argv to completion and measure it (see the module docstring)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        busy = _busy_s()
        start = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=err)
        poller = _TreePoller(proc.pid)
        poller.start()
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        busy = _busy_s() - busy
        killer.cancel()
        poller.stop.set()
        poller.join()
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
    workers = [rss for pid, rss in poller.peak_rss.items() if pid != proc.pid]
    private = [kb for pid, kb in poller.peak_private.items() if pid != proc.pid]
    cpu = usage.ru_utime + usage.ru_stime
    return Measurement(
        argv=tuple(argv),
        returncode=proc.returncode,
        wall_s=wall,
        cpu_s=cpu,
        maxrss_mb=usage.ru_maxrss / 1024,
        tree_pss_mb=poller.tree_pss / 1024,
        parent_rss_mb=poller.peak_rss.get(proc.pid, 0) / 1024,
        worker_rss_mb=max(workers, default=0) / 1024,
        worker_private_mb=max(private, default=0) / 1024,
        processes=len(poller.peak_rss),
        other_cores=max(0.0, busy - cpu) / wall if wall > 0 else 0.0,
        stdout=stdout,
        stderr=stderr,
    )
