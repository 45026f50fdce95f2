"""python -m shardpack."""

from shardpack.cli import main

if __name__ == "__main__":  # worker processes that re-import the main module must not run it
    main()
