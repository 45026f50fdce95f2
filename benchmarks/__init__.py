"""shardpack's benchmark harness: workloads, contenders timed as whole processes, report.

Run it with `python -m benchmarks.run` (or `make bench`); see benchmarks/README.md.
This package never imports TensorFlow itself: only the baseline contender scripts do, in
their own processes.
"""
