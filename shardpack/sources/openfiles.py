"""OpenFiles: the files a worker's loader keeps open across a shard's items (a few, the least
recently used closed first, the rest when the shard's cache is dropped)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar


class _Closable(Protocol):
    def close(self) -> None: ...


T = TypeVar("T", bound=_Closable)


class OpenFiles(Generic[T]):
    """name -> an open thing made by `opener`, at most `keep` at once."""

    def __init__(self, opener: Callable[[str], T], keep: int) -> None:
        self.opener, self.keep = opener, keep
        self._open: OrderedDict[str, T] = OrderedDict()

    def get(self, name: str) -> T:
        """The open file of this name, opened on first use (and again after being closed)."""
        opened = self._open.get(name)
        if opened is None:
            while len(self._open) >= self.keep:
                self._open.popitem(last=False)[1].close()
            opened = self._open[name] = self.opener(name)
        self._open.move_to_end(name)
        return opened

    def close(self) -> None:
        while self._open:
            self._open.popitem()[1].close()

    def __del__(self) -> None:  # the worker drops its cache when the shard is done
        self.close()
