"""The `shardpack` command and `python -m shardpack`.

The machine's CPU time is sampled here, before the CLI's imports, so that the start-up (~0.2 s)
is the window in which pack measures how busy other processes keep the cores
(packing/cpuload), with no wait of its own; `import shardpack` does no such work.
"""

from shardpack.packing import cpuload

cpuload.note_start()

from shardpack.cli import main  # noqa: E402  (after the sample: the start-up is its window)

__all__ = ["main"]

if __name__ == "__main__":  # worker processes that re-import the main module must not run it
    main()
