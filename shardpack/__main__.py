"""python -m shardpack."""

from shardpack.cli import main

main()
