"""A local folder as Storage: temporary names renamed into place, flock, no link followed.

What is read as SRC follows links to regular files only (srcfiles); what is in OUT is never
followed at all (atomic).
"""

from __future__ import annotations

import errno
import fcntl
import functools
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress

from shardpack.errors import OutputError, os_error_fix, printable
from shardpack.layout import JOURNAL_NAME, LOCK_NAME
from shardpack.storage.atomic import (
    create_temp,
    open_regular,
    remove_files,
    remove_temp_files,
    replace_with,
    write_atomic,
)
from shardpack.storage.base import (
    Blob,
    Entry,
    Files,
    Folder,
    Handover,
    JournalWriter,
    NextFiles,
    Sink,
    Storage,
)
from shardpack.storage.readahead import ReadAhead
from shardpack.storage.srcfiles import not_regular, read_regular, read_regular_stat


class LocalStorage(Storage):
    how_to_share = "mount the same paths on every worker, or use an object store URL"
    _listings: _Listings | None = None  # listing_once's, shared with the children made in it

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_listings"}  # a scan's alone

    def __repr__(self) -> str:
        return f"LocalStorage({self.root!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LocalStorage) and other.root == self.root

    def __hash__(self) -> int:
        return hash(self.root)

    def path(self, name: str = "") -> str:
        return os.path.join(self.root, name) if name else self.root

    def child(self, name: str) -> LocalStorage:
        child = LocalStorage(self.path(name))
        if self._listings is not None:
            child._listings = self._listings
        return child

    def local_path(self, name: str = "") -> str:
        return self.path(name)

    def tf_path(self, name: str = "") -> str:
        return self.path(name)

    def lexists(self, name: str = "") -> bool:
        return os.path.lexists(self.path(name))

    def link_target(self, name: str = "") -> str | None:
        path = self.path(name)
        return os.path.realpath(path) if os.path.islink(path) else None

    def stamp(self, name: str) -> tuple[int, int] | None:
        try:  # links followed, as the read follows them (to a regular file only)
            st = os.stat(self.path(name))
        except (OSError, ValueError):  # gone, or a name the disk cannot hold: the read says
            return None
        return (st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else None

    def identity(self, name: str) -> tuple[int, int, int, int] | None:
        try:
            st = os.stat(self.path(name), follow_symlinks=False)
        except (OSError, ValueError):
            return None  # loading reports why
        if not stat.S_ISREG(st.st_mode):
            return None
        return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns

    def make_folder(self, name: str) -> Storage:
        path = self.path(name)
        if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
            raise OutputError(f"{path}: is a link or a file, not a folder; remove it")
        folder = self.child(name)
        folder.make_root()
        return folder

    def link_or_copy(self, name: str, to: str) -> None:
        target = self.path(to)
        try:
            if os.path.lexists(target):
                os.unlink(target)  # a link there goes, not what it points to
            os.link(self.path(name), target, follow_symlinks=False)
        except OSError:  # a disk without hard links
            super().link_or_copy(name, to)

    def kind(self, name: str = "") -> str | None:
        path = self.path(name)
        if os.path.isdir(path):
            return "dir"
        return "file" if os.path.exists(path) else None

    def listdir(self, name: str = "") -> list[Entry]:
        entries = []
        for e in sorted(os.scandir(self.path(name)), key=lambda e: e.name):
            is_dir = e.is_dir(follow_symlinks=False)
            size = e.stat(follow_symlinks=False).st_size if e.is_file(follow_symlinks=False) else 0
            entries.append(Entry(e.name, is_dir, size))
        return entries

    def entry_names(self, name: str = "") -> Iterator[tuple[str, bool]]:
        listed = self._held()
        if listed is None:
            with os.scandir(self.path(name)) as listing:
                for e in listing:
                    yield e.name, e.is_dir(follow_symlinks=False)
            return
        folder, subfolders = _listing(listed, self.path(name), keep=True)
        if folder.error is not None:
            raise folder.error
        yield from ((entry, False) for entry in folder.files)
        yield from ((entry, False) for entry, _ in folder.others)
        yield from ((entry, not subfolders[entry].is_symlink()) for entry in folder.folders)

    @contextmanager
    def listing_once(self) -> Iterator[None]:
        if self._held() is not None:  # inside another block: its listings
            yield
            return
        listings = self._listings = _Listings()
        try:
            yield
        finally:
            folders, listings.folders = listings.folders, None  # its children's too
            folders.clear()  # a walk still going lists anew
            del self._listings

    def _held(self) -> dict[str, _Kept] | None:
        """The listings of the listing_once block this store is in; None outside one."""
        return None if self._listings is None else self._listings.folders

    def walk(self, name: str = "") -> Iterator[Entry]:
        for entry in self.listdir(name):
            if entry.is_dir:
                for below in self.walk(f"{name}/{entry.name}" if name else entry.name):
                    yield Entry(f"{entry.name}/{below.name}", False, below.size)
            else:
                yield entry

    def walk_folders(self, name: str = "") -> Iterator[Folder]:
        top = self.path(name)
        try:
            claimed = {_folder_id(os.stat(top)): ""}  # (device, inode) -> where it was met
        except OSError as e:
            yield Folder("", [], {}, [], [], e)
            return
        pending, listed = [""], self._held()
        while pending:
            rel = pending.pop()
            path = os.path.join(top, rel) if rel else top
            if listed is None:
                folder, subfolders = _list_folder(path, rel)
            elif rel:  # taken out: the walk is the last to ask
                folder, subfolders = _listing(listed, path, keep=False)
                folder = folder._replace(name=rel)
            else:  # kept, its folders the caller's to prune
                folder, subfolders = _listing(listed, path, keep=True)
                folder = folder._replace(folders=[*folder.folders])
            yield folder  # the caller may prune folder.folders now
            walked = set()  # claimed all before any is walked, folders before links to one
            for sub in sorted(folder.folders, key=lambda name: subfolders[name].is_symlink()):
                below = f"{rel}/{sub}" if rel else sub
                try:
                    first = claimed.setdefault(_folder_id(subfolders[sub].stat()), below)
                except OSError as e:  # gone since it was listed
                    yield Folder(below, [], {}, [], [], e)
                    continue
                if first != below:
                    yield Folder(below, [], {}, [], [], same_as=first)
                else:
                    walked.add(sub)
            pending.extend(f"{rel}/{sub}" if rel else sub for sub in reversed(folder.folders)
                           if sub in walked)  # fmt: skip

    def parent(self) -> LocalStorage | None:
        above = os.path.dirname(self.root)
        return None if above == self.root else LocalStorage(above)

    def size(self, name: str) -> int:
        return os.stat(self.path(name)).st_size

    def sizes(self, names: Iterable[str]) -> list[int | None]:
        # each asked of its folder's open fd: the kernel walks one name, not the whole path
        # (a listing's 10,000 stats: a third less time, benchmarks/README.md "Fifth round").
        # One folder's fd open at a time (a listing's names come folder by folder): a tree of
        # thousands of class folders must not take as many fds
        found: list[int | None] = []
        folder, fd = None, None
        try:
            for name in names:
                head, _, tail = name.rpartition("/")
                if head != folder:
                    if fd is not None:
                        os.close(fd)
                    folder, fd = head, _open_folder(self.path(head))
                try:  # a folder not opened: its file asked by its whole path, as size() does
                    st = os.stat(self.path(name)) if fd is None else os.stat(tail, dir_fd=fd)
                    found.append(st.st_size)
                except OSError:
                    found.append(None)
        finally:
            if fd is not None:
                os.close(fd)
        return found

    def read(self, name: str, limit: int) -> bytes:
        path, fd = self._at(name)
        return read_regular(path, limit, fd)

    def read_stamped(self, name: str, limit: int) -> tuple[bytes, tuple[int, int] | None]:
        path, fd = self._at(name)
        data, st = read_regular_stat(path, limit, fd)
        return data, (st.st_size, st.st_mtime_ns)

    def _at(self, name: str) -> tuple[str, int | None]:
        """Where os.open finds the file `name`: (a path, the fd of the folder it is relative
        to, or None)."""
        return self.path(name), None

    @contextmanager
    def reading(
        self, files: Files, limit: int, key: object = None, then: NextFiles | None = None
    ) -> Iterator[Storage]:
        reads = _FolderReads(self.root, ReadAhead(files, self.path, limit))
        try:
            yield reads
        finally:
            reads.close()

    def open(self, name: str) -> Blob:
        return _FileBlob(self.path(name))

    def make_root(self) -> bool:
        if os.path.exists(self.root) and not os.path.isdir(self.root):
            raise OutputError(f"{self.root}: is a file; pass a folder for the output (it is "
                              "created)")  # fmt: skip
        created = not os.path.exists(self.root)
        try:
            os.makedirs(self.root, exist_ok=True)
        except OSError as e:
            fix = os_error_fix(e)
            raise OutputError(f"{self.root}: cannot create ({e.strerror}); {fix}") from None
        return created

    def create(self, name: str, by_path: bool = False) -> Sink:
        return FileSink(self.path(name))

    def complete(self, handed: Handover) -> None:
        fd = open_regular(handed.temp)  # the same file: fsync makes its data durable
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(handed.temp, handed.final)

    def put(self, name: str, data: bytes) -> None:
        write_atomic(self.path(name), data)

    def put_parts(self, name: str, parts: Iterable[bytes]) -> None:
        sink = self.create(name)
        try:
            for part in parts:
                sink.write(part)
            sink.commit()
        except BaseException:
            sink.discard()
            raise

    def remove(self, names: Iterable[str]) -> None:
        remove_files(self.path(n) for n in names)

    def remove_partial(self, finals: Iterable[str]) -> list[str]:
        return remove_temp_files(self.root, {*finals, JOURNAL_NAME})

    def lock(self, created: bool = False):
        return _locked(self.root, created)

    def read_journal(self, cap: int, most: int) -> Iterable[bytes]:
        path = self.path(JOURNAL_NAME)
        try:
            fd = open_regular(path)
        except FileNotFoundError:
            return
        except OSError as e:
            raise OutputError(
                f"{path}: not shardpack's journal ({e.strerror}: a link, a folder or a special "
                "file); remove it"
            ) from None
        with open(fd, "rb") as f:  # a line at a time: millions of short lines are no list
            left, lines = cap, most + 1
            while left > 0 and lines > 0 and (line := f.readline(left)):
                left, lines = left - len(line), lines - 1
                yield line.rstrip(b"\r\n")

    def journal(self, head: list[bytes]) -> JournalWriter:
        return _FileJournal(self.path(JOURNAL_NAME), head)

    def remove_journal(self) -> None:
        self.remove([JOURNAL_NAME])

    def scratch_folder(self) -> str:
        return self.root

    def progress_folder(self) -> str | None:
        return self.root


class _FolderReads(LocalStorage):
    """The folder, reading each file relative to an fd of its own folder, opened at its first
    file and held until the reading ends: the kernel walks one name a file, not SRC's whole
    path, and no path is joined (a passed-through photo: benchmarks/README.md, "Eleventh
    round"). Past _HELD_FOLDERS folders, and where one cannot be opened, a file is read by its
    whole path, as LocalStorage reads it (which says why). Where the disk is what the reads
    wait on, the files next are asked of it ahead (readahead)."""

    def __init__(self, root: str, ahead: ReadAhead) -> None:
        super().__init__(root)
        self._folders: dict[str, int | None] = {}  # folder -> its fd (None: by whole path)
        self._ahead = ahead

    def _at(self, name: str) -> tuple[str, int | None]:
        self._ahead.read()
        head, _, tail = name.rpartition("/")
        try:
            fd = self._folders[head]
        except KeyError:
            held = len(self._folders) < _HELD_FOLDERS
            fd = self._folders[head] = _open_folder(self.path(head)) if held else None
        return (self.path(name), None) if fd is None or not tail else (tail, fd)

    def close(self) -> None:
        self._ahead.close()
        folders, self._folders = self._folders, {}
        for fd in folders.values():
            if fd is not None:
                os.close(fd)


# Folders a reading holds open at once: a shard of a tree of thousands of class folders must
# not take as many fds (a process's soft limit is often 1,024).
_HELD_FOLDERS = 256


def _open_folder(path: str) -> int | None:
    """An fd of the folder at `path` (links followed, as a listing's walk does) to ask names
    in; None where it cannot be opened."""
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None


_Listed = tuple[Folder, dict[str, os.DirEntry]]  # _list_folder's
# What a block keeps of a folder: its Folder without its files, their names as one string
# ("\0" apart: no name holds one), its subfolders' entries. Held as a str each until the walk
# came, a 200,000-file tree's names left the pack's peak 5 MB higher (their freed pools).
_Kept = tuple[Folder, str, dict[str, os.DirEntry]]


class _Listings:
    """What a listing_once block has listed: each folder by its path (None once it ended)."""

    def __init__(self) -> None:
        self.folders: dict[str, _Kept] | None = {}


def _listing(listed: dict[str, _Kept], path: str, keep: bool) -> _Listed:
    """_list_folder's of the folder at `path` (named ""), from `listed` where it is there,
    else listed now; kept in `listed` (`keep`) or taken out of it."""
    kept = listed.get(path) if keep else listed.pop(path, None)
    if kept is None:
        folder, subfolders = _list_folder(path, "")
        if keep:
            listed[path] = (folder._replace(files=[]), "\0".join(folder.files), subfolders)
        return folder, subfolders
    folder, names, subfolders = kept
    return folder._replace(files=names.split("\0") if names else []), subfolders


def _folder_id(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _list_folder(path: str, rel: str) -> tuple[Folder, dict[str, os.DirEntry]]:
    """One folder's Folder, and its subfolders' entries (to stat once each). A regular file is
    told by its entry's type, with no syscall: per file, this is a large listing's hot loop."""
    try:
        with os.scandir(path) as listing:
            entries = list(listing)
    except OSError as e:
        return Folder(rel, [], {}, [], [], e), {}
    files: list[str] = []
    sizes: dict[str, int] = {}
    folders: dict[str, os.DirEntry] = {}
    others: list[tuple[str, str]] = []
    for entry in entries:
        if entry.is_file(follow_symlinks=False):
            files.append(entry.name)
        elif entry.is_dir(follow_symlinks=False):
            folders[entry.name] = entry
        else:  # a link, a special file, or a file system without d_type: stat it
            try:
                st = entry.stat()
            except OSError:  # a dangling link: listed, so that its read says why
                files.append(entry.name)
                sizes[entry.name] = 0
                continue
            if stat.S_ISREG(st.st_mode):
                files.append(entry.name)
                sizes[entry.name] = st.st_size
            elif stat.S_ISDIR(st.st_mode):
                folders[entry.name] = entry
            else:
                others.append((entry.name, not_regular(st.st_mode)))
    files.sort()
    return Folder(rel, files, sizes, sorted(folders), sorted(others)), folders


class _FileBlob(Blob):
    def __init__(self, path: str) -> None:
        self.name = path
        self.fd = open_regular(path)
        self.size = os.fstat(self.fd).st_size

    def fileno(self) -> int:
        return self.fd

    def pread(self, size: int, offset: int) -> bytes:
        return os.pread(self.fd, size, offset)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


# The most buffers one writev takes (IOV_MAX on Linux and macOS).
_IOV_MAX = 1024
# A sink hands the disk what it has written each time this much more is written: the kernel
# would start only after 30 s or at a tenth of memory dirty, so a shard's whole write waited
# in the fsync of its commit, a core idle meanwhile (benchmarks/README.md, "Fifth round").
# Each hand-over costs the writer the kernel's start of that writeback (on a VM, a trap to
# the host each time): so, few and large ("Eleventh round").
_WRITE_BACK_BYTES = 16 << 20
_SYNC_FILE_RANGE_WRITE = 2  # linux/fs.h: start writing the range out, wait for none of it


@functools.cache
def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """Linux's sync_file_range (Python's os has none); None elsewhere."""
    import ctypes

    try:
        call = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    call.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    return call


class FileSink(Sink):
    """A hidden temporary file beside the final name, fsynced and renamed on commit."""

    def __init__(self, path: str) -> None:
        self.final = path
        self.fd, self.name = create_temp(path)
        self._file = open(self.fd, "wb", buffering=1 << 20, closefd=False)  # noqa: SIM115
        self._handed = 0  # the bytes before this offset are on their way to the disk

    def write(self, data: bytes) -> int:
        return self._file.write(data)

    def write_parts(self, parts: list[bytes]) -> None:
        # os.writev: the parts go to the kernel as they are, not copied into the buffer first,
        # and the GIL is released for the whole syscall (a shard's bytes thread, HashingFile)
        self._file.flush()
        if not hasattr(os, "writev"):  # Windows
            super().write_parts(parts)
            return
        for start in range(0, len(parts), _IOV_MAX):
            batch = parts[start : start + _IOV_MAX]
            done, total = os.writev(self.fd, batch), sum(map(len, batch))
            if done < total:  # a short write (a disk filling up): the rest one write at a time
                rest = memoryview(b"".join(batch))[done:]
                while rest:
                    rest = rest[os.write(self.fd, rest) :]
        self._write_back()

    def _write_back(self) -> None:
        """Start the disk writing what was written since the last call, once that is at least
        _WRITE_BACK_BYTES: commit's fsync then waits for the last few MiB alone."""
        end = os.lseek(self.fd, 0, os.SEEK_CUR)
        if end - self._handed >= _WRITE_BACK_BYTES and (call := _sync_file_range()) is not None:
            call(self.fd, self._handed, end - self._handed, _SYNC_FILE_RANGE_WRITE)
            self._handed = end

    def flush(self) -> None:
        """Hand what is buffered to the file (for a reader of it by name)."""
        self._file.flush()

    def commit(self) -> None:
        try:
            self._file.flush()
            os.fsync(self.fd)  # durable before the rename makes it final
            os.replace(self.name, self.final)
        except BaseException:
            self.discard()
            raise
        self._close()

    def hand_over(self) -> Handover:
        try:
            self._file.flush()
        except BaseException:
            self.discard()
            raise
        self._close()
        return Handover(self.name, self.final)

    def discard(self) -> None:
        with suppress(OSError):
            self._file.close()  # a full disk fails the flush: the file goes anyway
        self._close()
        remove_files([self.name])

    def _close(self) -> None:
        if self.fd >= 0:
            with suppress(OSError):
                self._file.close()
            os.close(self.fd)
            self.fd = -1


class _FileJournal(JournalWriter):
    """One file, written whole (under a temporary name) when the first line is added, then
    kept open and appended to, never opened by name again."""

    def __init__(self, path: str, head: list[bytes]) -> None:
        self.name, self.head, self._file = path, head, None

    def add(self, line: bytes) -> None:
        if self._file is None:
            self._replace([*self.head, line])
            return
        self._file.write(line + b"\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def begin(self) -> None:
        if self._file is None:
            self._replace(self.head)

    def _replace(self, lines: list[bytes]) -> None:
        data = b"".join(h + b"\n" for h in lines)
        self._file = open(replace_with(self.name, data), "ab")  # noqa: SIM115 (close())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


@contextmanager
def _locked(out: str, created: bool) -> Iterator[None]:
    """An exclusive flock on OUT/.shardpack.lock for the block.

    The kernel holds the lock, so it ends with its process however that ends. The lock file is
    removed at the end while still locked; a run that locked a file since removed locks again,
    so two runs never hold different files. An OUT this run `created` is removed too when the
    block fails and left it empty.
    """
    path = os.path.join(out, LOCK_NAME)
    while True:
        fd = _open_lock(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = printable(os.pread(fd, 32, 0).decode(errors="replace").strip()) or "?"
            os.close(fd)
            raise OutputError(
                f"{out}: another shardpack run (pid {owner}) is writing here; wait for it to "
                "finish, or choose another output folder"
            ) from None
        if _is_file_at(fd, path):
            break
        os.close(fd)  # the run before us removed this file as it finished: lock the new one
    failed = True
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)  # for the message above, nothing more
        yield
        failed = False
    finally:
        if _is_file_at(fd, path):
            with suppress(OSError):
                os.unlink(path)
        os.close(fd)
        if created and failed:
            with suppress(OSError):  # not empty: finished shards stay for --resume
                os.rmdir(out)


def _open_lock(path: str) -> int:
    try:
        fd = open_regular(path, os.O_RDWR | os.O_CREAT)
    except OSError as e:
        hint = (
            "it is a link or not a plain file, not shardpack's: remove it"
            if e.errno in (errno.ELOOP, errno.EINVAL, errno.EISDIR)
            else os_error_fix(e)
        )
        raise OutputError(f"{path}: cannot open the lock file ({e.strerror}); {hint}") from None
    if os.fstat(fd).st_nlink != 1:  # a hard link: the pid written below would land elsewhere
        os.close(fd)
        raise OutputError(f"{path}: has other names (a hard link), not shardpack's lock file: "
                          "remove it")  # fmt: skip
    return fd


def _is_file_at(fd: int, path: str) -> bool:
    """Whether `path` (not followed) is still the file open as `fd`."""
    try:
        here, ours = os.lstat(path), os.fstat(fd)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (ours.st_dev, ours.st_ino)
