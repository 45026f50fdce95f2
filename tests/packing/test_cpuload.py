"""The CPU watch (packing/cpuload.py): what other processes keep busy, sampled from the
command's start-up where it can be. Real processes spinning a core; apart from
test_packer.py, which loads TensorFlow, so that they run beside it."""

from __future__ import annotations


def test_cpu_watch_counts_other_processes_not_this_one():
    import subprocess
    import sys

    from shardpack.packing.cpuload import CpuWatch

    watch = CpuWatch()
    # A real process spinning a core for 0.4 s: other processes only add to what is seen.
    subprocess.run([sys.executable, "-c", "import time\nt = time.process_time()\n"
                    "while time.process_time() - t < 0.4: pass"], check=True)  # fmt: skip
    assert watch.others_busy() >= 0.5


def test_importing_shardpack_samples_nothing_the_command_does():
    import subprocess
    import sys

    probe = ("import sys, shardpack, shardpack.packing.cpuload as c; "
             "assert c._started is None; import shardpack.__main__; assert c._started")  # fmt: skip
    subprocess.run([sys.executable, "-c", probe], check=True)


def test_cpu_watch_takes_the_start_up_as_its_window_instead_of_waiting(monkeypatch):
    import subprocess
    import sys
    import time

    from shardpack.packing import cpuload

    # The CLI's start-up: shardpack imported, then ~0.2 s of imports and parsing, while another
    # process keeps a core busy. A scan and plan shorter than the window then cost no wait.
    monkeypatch.setattr(cpuload, "_started", None)
    cpuload.note_start()
    subprocess.run([sys.executable, "-c", "import time\nt = time.process_time()\n"
                    "while time.process_time() - t < 0.3: pass"], check=True)  # fmt: skip
    watch = cpuload.CpuWatch()
    began = time.monotonic()
    assert watch.others_busy() >= 0.5
    assert time.monotonic() - began < cpuload.MIN_WINDOW_S / 2
    # a start long ago says nothing about now: the window is waited out
    started = cpuload._started
    stale = (started[0] - cpuload.START_SAMPLE_MAX_AGE_S - 1, *started[1:])
    monkeypatch.setattr(cpuload, "_started", stale)
    watch = cpuload.CpuWatch()
    began = time.monotonic()
    watch.others_busy()
    assert time.monotonic() - began >= cpuload.MIN_WINDOW_S * 0.9
