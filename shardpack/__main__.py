"""The `shardpack` command and `python -m shardpack`.

The machine's CPU time is sampled here, before the CLI's imports, so that the start-up (~0.2 s)
is the window in which pack measures how busy other processes keep the cores
(packing/cpuload), with no wait of its own; `import shardpack` does no such work.
"""

import gc
import os

# numpy's OpenBLAS starts a thread for each other core at import, and they spin waiting for
# work: ~0.1 s of CPU a run. A pack's matrix products are small and its workers already take
# the cores. A value the user set wins; only the command sets it, not `import shardpack`.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from shardpack.packing import cpuload
from shardpack.packing.collector import long_lived

cpuload.note_start()

# The collector held off while the CLI imports, and what they made frozen (collector.long_lived):
# ~35 collections (~6 ms) found next to nothing, as the modules and classes live for the run.
try:
    with long_lived():
        from shardpack import cli  # after the sample: the start-up is its window
except KeyboardInterrupt:  # Ctrl-C as the command starts, nothing touched: as cli.main's
    raise SystemExit(130) from None

__all__ = ["main"]


def main() -> None:
    """The command (cli.main, which ends in SystemExit), then Python's exit, which runs what
    is registered to run at exit and flushes stdout, without the cyclic collector walking
    every object left (numpy's, typer's, a pack's plan) on the way out: most of the time a
    process took to end once its last line was printed. Objects are still freed one by one."""
    try:
        cli.main()
    finally:
        gc.freeze()


if __name__ == "__main__":  # worker processes that re-import the main module must not run it
    main()
