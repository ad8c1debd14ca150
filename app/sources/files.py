"""The file config source (``--config-dir``): a directory of YAML files, as ConfigEvents.

Owns which files of the directory are config, reading them, and turning each change of a
file into add / update / delete events under the bad-input rules of DESIGN §5:

* a file that is not YAML (or cannot be read) is reported and keeps everything it held; one that
  is not a regular file (a FIFO, socket or device named *.yaml) is reported the same, unopened;
* a rejected object keeps the last good version its file held;
* a key defined twice is taken from the first definition in sorted path order (then document
  order); every later one is rejected with an error naming both places;
* a directory holding more than ``MAX_CONFIG_FILES`` config files is refused whole with one
  error naming it and the bound: none of its changes are read until it is back under the bound,
  so the last good config stays in force;
* a directory below the config dir that cannot be listed is named once, as a rejection, and the
  files below it keep what they held (they are not known to be gone);
* a file is read a block at a time, whatever its size: what is bounded is a document
  (``MAX_DOCUMENT_BYTES``: that one is refused unread) and the documents of a file
  (``MAX_DOCUMENTS``: that file is refused whole and keeps what it held), app/config/loader.py;
* a document is read as istiod's file source reads it: a field Istio does not define is
  ignored, with a warning in the log (``pilotfish validate`` refuses it, as istioctl does);
* while serving, files are parsed and validated in a worker process (app/workers.py), not
  in the thread that scans: pure Python in a thread holds the GIL, and the event loop with it. A
  file whose reading fails there (the worker died, or ran past ``_LOAD_DEADLINE``) is reported
  like an unreadable one and keeps what it held.

``FileSet`` is the pure part (per-file state + LoadResult -> events + new state), tested
without I/O. ``FileSource`` is the thin I/O shell: it lists and reads the directory and
follows it with ``watchfiles.awatch``.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import stat
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath

from watchfiles import awatch
from watchfiles.main import FileChange

from app.config.loader import LoadResult, Rejection, load_mesh_file, read_documents
from app.config.objects import ConfigEvent, ConfigKey, ConfigObject, EventType
from app.errors import ConfigError, SettingsError
from app.workers import WorkerError, WorkerPool

logger = logging.getLogger(__name__)

MESH_FILE = "mesh.yaml"
# a mesh.yaml is one MeshConfig document, read whole: as large as any document may be
MAX_MESH_FILE_BYTES = 3 * 2**20
_READ_BLOCK = 1 << 20  # characters read from a config file at a time
# a directory of one object per file stays far below this (10,000 objects parse in about 1 s);
# past it, listing, stat-ing and reading on every change would stall the watch, so it is refused
MAX_CONFIG_FILES = 10_000
_SUFFIXES = (".yaml", ".yml")
# files read per call of the worker (at most this many bytes of them, or one larger file), and how
# long one call may take (10,000 objects take about 1 s, bench/results/parse_config.json)
_LOAD_BATCH_FILES = 64
_LOAD_BATCH_BYTES = 4 * 2**20
_LOAD_DEADLINE = 120.0

# (st_dev, st_ino, st_mtime_ns, st_size) of the file a path resolves to: a Kubernetes
# ConfigMap mount swaps a hidden ``..data`` symlink, which changes this but no event names
# the file itself.
_Stat = tuple[int, int, int, int]
_UNREADABLE: _Stat = (0, 0, 0, -1)  # a listed file whose stat fails
_UNLISTABLE: _Stat = (0, 0, 0, -2)  # a directory below the config dir that cannot be listed


def is_config_file(name: str) -> bool:
    """A ``*.yaml`` / ``*.yml`` that is not hidden and not an editor's temp or lock file.

    Editor files (``.#x.yaml``, ``x.yaml~``, ``.x.yaml.swp``, ``#x.yaml#``) either start with
    ``.`` / ``#`` or do not end in a YAML suffix.
    """
    return name.endswith(_SUFFIXES) and not name.startswith((".", "#"))


class TooManyFiles(Exception):
    """The walk found more config files (or directories) than it may read."""

    def __init__(self, what: str, bound: int) -> None:
        self.what = what
        self.bound = bound
        super().__init__(f"more than {bound:,} {what}")


def list_config_files(
    config_dir: Path, *, max_files: int | None = None, unlistable: list[tuple[Path, OSError]] | None = None
) -> list[Path]:
    """Every config file below ``config_dir``, hidden directories skipped, in sorted path order.
    Symlinked directories are followed, each directory read once (a symlink loop ends there).
    Raises OSError when a directory cannot be listed (its files are not known to be gone), or
    with ``unlistable`` given, when ``config_dir`` itself cannot: one below it is appended there
    with its error, and the walk goes on. Raises TooManyFiles as soon as more than
    ``max_files`` config files or directories are seen (the walk stops there: a hostile tree
    costs no more than the bound)."""
    found: list[Path] = []
    seen: set[tuple[int, int]] = set()

    def onerror(error: OSError) -> None:
        if unlistable is None or error.filename is None or Path(error.filename) == config_dir:
            raise error  # an unreadable or vanished directory is unknown, not empty
        unlistable.append((Path(error.filename), error))

    for root, dirs, files in os.walk(config_dir, onerror=onerror, followlinks=True):
        st = os.stat(root)
        if (st.st_dev, st.st_ino) in seen:
            dirs[:] = []  # reached again through a symlink: a loop, or a second link to it
            continue
        seen.add((st.st_dev, st.st_ino))
        if max_files is not None and len(seen) > max_files:
            raise TooManyFiles("directories", max_files)
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        found.extend(Path(root) / name for name in files if is_config_file(name))
        if max_files is not None and len(found) > max_files:
            raise TooManyFiles("config files", max_files)
    return sorted(found, key=lambda p: p.parts)


def same_content(a: ConfigObject, b: ConfigObject) -> bool:
    """Equal as config. ``source`` (file and document index) says where it is, not what it is."""
    return a.kind == b.kind and a.api_version == b.api_version and a.meta == b.meta and a.spec == b.spec


def duplicate_error(later: ConfigObject, first: ConfigObject) -> ConfigError:
    reason = f"is also defined in {first.source}, which is in force; this definition is ignored"
    return ConfigError(later.source, later.kind, _display(later.key), "", reason)


def _display(key: ConfigKey) -> str:
    return f"{key.namespace}/{key.name}" if key.namespace else key.name


@dataclass(frozen=True, slots=True)
class FileState:
    """What one file contributes: its objects (last good versions kept) and its current errors."""

    objects: Mapping[ConfigKey, ConfigObject]
    errors: tuple[ConfigError, ...] = ()


def next_file_state(old: FileState | None, result: LoadResult) -> FileState:
    """The state of a file after it was read again and loaded into ``result``."""
    prev: Mapping[ConfigKey, ConfigObject] = old.objects if old is not None else {}
    errors = [r.error for r in result.rejected]
    if not result.parsed:
        return FileState(prev, tuple(errors))
    objects: dict[ConfigKey, ConfigObject] = {}
    for obj in result.objects:
        first = objects.get(obj.key)
        if first is not None:
            errors.append(duplicate_error(obj, first))
        else:
            objects[obj.key] = obj
    for rejection in result.rejected:
        if rejection.key is not None and rejection.key not in objects and rejection.key in prev:
            objects[rejection.key] = prev[rejection.key]
    if any(rejection.key is None for rejection in result.rejected):
        # a document whose identity is unreadable may be one the file held: delete nothing
        for key, obj in prev.items():
            objects.setdefault(key, obj)
    return FileState(objects, tuple(errors))


@dataclass(frozen=True, slots=True)
class Applied:
    events: list[ConfigEvent]
    # errors that were not in the current set before this change: log and count these once
    new_errors: list[ConfigError]


class FileSet:
    """The pure core: the state of every file, and the objects in force across them.

    Paths are opaque strings, ordered by their path components.
    """

    def __init__(self) -> None:
        self._files: dict[str, FileState] = {}
        self._in_force: dict[ConfigKey, ConfigObject] = {}
        self._duplicates: list[ConfigError] = []

    @property
    def paths(self) -> list[str]:
        return list(self._files)

    def objects(self) -> list[ConfigObject]:
        """The objects in force, in file order then document order."""
        return list(self._in_force.values())

    def errors(self) -> list[ConfigError]:
        """The current rejections: per file in path order, then cross-file duplicates."""
        return [e for state in self._files.values() for e in state.errors] + self._duplicates

    def apply(self, changes: Mapping[str, LoadResult | None]) -> Applied:
        """Apply new load results per file (None: the file is gone) and return what changed."""
        if not changes:
            return Applied([], [])
        before = {str(e) for e in self.errors()}
        touched: dict[ConfigKey, None] = {}  # an ordered set
        for path, result in changes.items():
            old = self._files.pop(path, None)
            if old is not None:
                touched.update(dict.fromkeys(old.objects))
            if result is not None:
                new = next_file_state(old, result)
                self._files[path] = new
                touched.update(dict.fromkeys(new.objects))
        self._files = dict(sorted(self._files.items(), key=lambda item: PurePath(item[0]).parts))

        in_force: dict[ConfigKey, ConfigObject] = {}
        self._duplicates = []
        for state in self._files.values():
            for key, obj in state.objects.items():
                first = in_force.setdefault(key, obj)
                if first is not obj:
                    self._duplicates.append(duplicate_error(obj, first))
        previous, self._in_force = self._in_force, in_force

        # only keys a changed file held before or holds now can have changed
        events: list[ConfigEvent] = []
        for key, obj in in_force.items():
            if key not in touched:
                continue
            old_obj = previous.get(key)
            if old_obj is None:
                events.append(ConfigEvent(EventType.ADD, obj))
            elif not same_content(old_obj, obj):
                events.append(ConfigEvent(EventType.UPDATE, obj, old_obj))
        for key in touched:
            gone = previous.get(key)
            if gone is not None and key not in in_force:
                events.append(ConfigEvent(EventType.DELETE, gone))

        new_errors: list[ConfigError] = []
        for error in self.errors():
            if str(error) not in before:
                before.add(str(error))
                new_errors.append(error)
        return Applied(events, new_errors)


@dataclass(frozen=True, slots=True)
class _Scan:
    results: dict[str, LoadResult | None]  # per path read: its load result (None: gone)
    stats: dict[str, _Stat]
    refused: ConfigError | None = None  # the whole directory was refused: nothing was read


class FileSource:
    """Config from a directory of YAML files; ``mesh.yaml`` directly in it is the MeshConfig.

    Call ``load()`` once for the initial ADD events, then iterate ``watch()`` for changes.
    """

    def __init__(
        self,
        config_dir: Path,
        *,
        system_namespace: str = "istio-system",
        debounce_ms: int = 10,
        max_files: int = MAX_CONFIG_FILES,
    ) -> None:
        """``max_files``: the most config files (and directories) the directory may hold."""
        self._dir = Path(config_dir)
        self._system_namespace = system_namespace
        self._debounce_ms = debounce_ms
        self._max_files = max_files
        self._set = FileSet()
        self._stats: dict[str, _Stat] = {}
        self._rejection_count = 0
        self._refused: ConfigError | None = None  # the directory is over the bound
        self._pool: WorkerPool | None = None  # reads files while watching; started with watch()
        self._closed = False

    @property
    def config_dir(self) -> Path:
        return self._dir

    @property
    def rejection_count(self) -> int:
        """How many rejections were ever reported; only grows."""
        return self._rejection_count

    def rejections(self) -> list[ConfigError]:
        """The current rejections; one goes away when its file is fixed or removed."""
        errors = self._set.errors()
        return [*errors, self._refused] if self._refused is not None else errors

    def objects(self) -> list[ConfigObject]:
        """The objects in force now."""
        return self._set.objects()

    def load(self) -> list[ConfigEvent]:
        """Read the whole directory (blocking); the first call yields one ADD per object."""
        return self._apply(self._scan(self._stats, None))

    async def start(self) -> list[ConfigEvent]:
        return self.load()

    async def close(self) -> None:
        """Stop the worker reading files; ``watch()`` stops with the task iterating it."""
        self._closed = True
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    async def watch(self) -> AsyncGenerator[list[ConfigEvent], None]:
        """Yield the events of each batch of file changes (never an empty list).

        It starts by re-reading everything once the watcher is up, so a change made between
        ``load()`` and the watcher starting is not lost (re-reading unchanged files yields
        nothing). Stop it by cancelling the task iterating it, or by closing the iterator.
        """
        stop = asyncio.Event()
        # the push debouncer (PILOT_DEBOUNCE_AFTER) merges bursts of changes anyway: a file write
        # reaches it after ``debounce_ms`` quiet, not watchfiles' default 50 ms (a second debounce
        # stacked on the first, 50 ms of every file-driven push's latency)
        changes = awatch(self._dir, debounce=self._debounce_ms, step=self._debounce_ms, stop_event=stop)
        pending = asyncio.ensure_future(_next_batch(changes))
        try:
            await asyncio.sleep(0)  # awatch creates its watcher on the first step of that task
            changed: set[str] | None = None  # None: re-read every file
            while True:
                events = await self._refresh(changed)
                if events:
                    yield events
                await asyncio.wait([pending])
                batch = pending.result()
                if batch is None:
                    return
                pending = asyncio.ensure_future(_next_batch(changes))
                changed = {os.path.abspath(path) for _, path in batch}
        finally:
            stop.set()  # the watcher thread sees it within one watchfiles step (``debounce_ms``)
            await asyncio.wait([pending])
            if not pending.cancelled():
                pending.exception()  # retrieved: it was raised above or is not of interest now
            await changes.aclose()

    async def _refresh(self, changed: set[str] | None) -> list[ConfigEvent]:
        if self._pool is None and not self._closed:
            self._pool = WorkerPool(1, name="config-files", preload=("app.sources.files",))
        scan = await asyncio.to_thread(self._scan, dict(self._stats), changed, self._pool)
        return self._apply(scan)

    def _apply(self, scan: _Scan) -> list[ConfigEvent]:
        if scan.refused is not None:
            # the stats stay as they were, so every file changed meanwhile is read once it is back
            if self._refused is None or str(self._refused) != str(scan.refused):
                logger.warning("%s", scan.refused)
                self._rejection_count += 1
            self._refused = scan.refused
            return []
        if self._refused is not None:
            logger.info("config dir %s is back under %s config files: read again", self._dir, f"{self._max_files:,}")
            self._refused = None
        self._stats = scan.stats
        for result in scan.results.values():  # Istio kinds istiod would apply, read with their file
            for line in result.unsupported if result is not None else ():
                logger.warning("%s", line)
        applied = self._set.apply(scan.results)
        for error in applied.new_errors:
            logger.warning("%s", error)
        self._rejection_count += len(applied.new_errors)
        for event in applied.events:  # what reading an object ignored (a field Istio does not define)
            obj = event.obj
            fresh = event.old is None or event.old.warnings != obj.warnings
            if event.type is not EventType.DELETE and obj.warnings and fresh:
                for warning in obj.warnings:
                    logger.warning("%s: %s %s: %s", obj.source, obj.kind, _display(obj.key), warning)
        return applied.events

    def _scan(self, known: Mapping[str, _Stat], changed: set[str] | None, pool: WorkerPool | None = None) -> _Scan:
        """Blocking: list the directory; read files that are new, changed, or all (changed=None),
        in ``pool``'s worker when given."""
        if not self._dir.is_dir():
            raise SettingsError(f"config dir {self._dir} is not a directory")
        unlistable: list[tuple[Path, OSError]] = []
        try:
            listed = list_config_files(self._dir, max_files=self._max_files, unlistable=unlistable)
        except OSError as e:
            raise SettingsError(f"config dir {self._dir}: cannot list {e.filename}: {e.strerror}") from e
        except TooManyFiles as e:
            reason = (
                f"holds {e}, the most a config dir may hold: none of its changes are read "
                "until it is back under that; the last good config stays in force"
            )
            return _Scan({}, dict(known), ConfigError(str(self._dir), "", "", "", reason))
        stats: dict[str, _Stat] = {}
        unreadable: dict[str, LoadResult] = {}
        for file in listed:
            try:
                st = file.stat()
            except OSError as e:
                if not os.path.lexists(file):
                    continue  # gone since the listing
                # a symlink loop or a dangling link: named, and its last good objects kept
                error = ConfigError(str(file), "", "", "", f"cannot read file: {e.strerror or e}")
                unreadable[str(file)] = LoadResult(rejected=[Rejection(None, error)], parsed=False)
                stats[str(file)] = _UNREADABLE
                continue
            stats[str(file)] = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
        # a directory that cannot be listed is one rejection; what is below it is not known to be
        # gone, nor to have changed: it keeps what it held, and its files are not read
        hidden = tuple(str(directory) + os.sep for directory, _ in unlistable)
        kept = {path: st for path, st in known.items() if path.startswith(hidden)} if hidden else {}
        for directory, failure in unlistable:
            path = str(directory)
            kept[path] = _UNLISTABLE
            if known.get(path) != _UNLISTABLE:
                reason = (
                    f"cannot list directory: {failure.strerror or failure}; "
                    "the files below it keep their last good config"
                )
                rejection = Rejection(None, ConfigError(path, "", "", "", reason))
                unreadable[path] = LoadResult(rejected=[rejection], parsed=False)
        results: dict[str, LoadResult | None] = {path: None for path in known if path not in stats and path not in kept}
        results.update(
            (path, result) for path, result in unreadable.items() if known.get(path) not in (_UNREADABLE, _UNLISTABLE)
        )
        to_read = [
            path
            for path, file_stat in stats.items()
            if path not in unreadable
            and (changed is None or known.get(path) != file_stat or os.path.abspath(path) in changed)
        ]
        for path, result in self._load_files(to_read, stats, pool):
            results[path] = result
            if result is None:
                del stats[path]
        if not self._dir.is_dir():  # gone during the scan: what it missed is unknown, not deleted
            raise SettingsError(f"config dir {self._dir} is not a directory")
        return _Scan(results, {**stats, **kept})

    def _load_file(self, path: Path) -> LoadResult | None:
        mesh = self._is_mesh(path)
        return load_config_file(path, mesh=mesh, system_namespace=self._system_namespace, strict=False)

    def _is_mesh(self, path: Path) -> bool:
        return path.name == MESH_FILE and path.parent == self._dir

    def _load_files(
        self, paths: list[str], stats: Mapping[str, _Stat], pool: WorkerPool | None
    ) -> list[tuple[str, LoadResult | None]]:
        """Each file read: here, or in ``pool``'s worker a batch at a time."""
        if pool is None:
            return [(path, self._load_file(Path(path))) for path in paths]
        out: list[tuple[str, LoadResult | None]] = []
        batch: list[str] = []
        size = 0
        for path in paths:
            if batch and (len(batch) == _LOAD_BATCH_FILES or size + stats[path][3] > _LOAD_BATCH_BYTES):
                out.extend(self._load_batch(pool, batch))
                batch, size = [], 0
            batch.append(path)
            size += max(stats[path][3], 0)
        if batch:
            out.extend(self._load_batch(pool, batch))
        return out

    def _load_batch(self, pool: WorkerPool, paths: list[str]) -> list[tuple[str, LoadResult | None]]:
        files = [(path, self._is_mesh(Path(path))) for path in paths]
        deadline = time.monotonic() + _LOAD_DEADLINE
        try:
            results = pool.submit(load_config_files, files, self._system_namespace, False, deadline=deadline).result()
        except WorkerError as e:
            if len(paths) > 1:  # one of them failed it: each again, alone
                return [item for path in paths for item in self._load_batch(pool, [path])]
            error = ConfigError(paths[0], "", "", "", f"could not be read: {e}")
            return [(paths[0], LoadResult(rejected=[Rejection(None, error)], parsed=False))]
        return list(zip(paths, results, strict=True))


def load_config_files(
    files: list[tuple[str, bool]], system_namespace: str = "istio-system", strict: bool = True
) -> list[LoadResult | None]:
    """``load_config_file`` of each (path, mesh): what a worker process runs for a batch."""
    return [
        load_config_file(Path(path), mesh=mesh, system_namespace=system_namespace, strict=strict)
        for path, mesh in files
    ]


def load_config_file(
    path: Path, *, mesh: bool, system_namespace: str = "istio-system", strict: bool = True
) -> LoadResult | None:
    """One config file as every file reader takes it (the file source, ``--mesh-config``,
    ``pilotfish validate``): read a block at a time (its documents bounded, not its size), a
    read error reported against it, MeshConfig YAML when ``mesh``; None if it no longer exists.
    ``strict`` as ``pilotfish validate`` reads it (istioctl validate), else as the file
    source (istiod's file source): see ``load_documents``."""
    try:
        with _open_regular_file(path) as f:
            if mesh:
                text = f.read(MAX_MESH_FILE_BYTES + 1)
                if len(text) > MAX_MESH_FILE_BYTES:
                    raise _Refused(f"more than the {MAX_MESH_FILE_BYTES // 2**20} MiB a mesh config may hold")
                return load_mesh_file(text, str(path))
            blocks = iter(lambda: f.read(_READ_BLOCK), "")
            return read_documents(blocks, str(path), system_namespace=system_namespace, strict=strict)
    except FileNotFoundError:
        return None
    except _Refused as e:
        return LoadResult(rejected=[Rejection(None, ConfigError(str(path), "", "", "", str(e)))], parsed=False)
    except (OSError, UnicodeDecodeError) as e:
        error = ConfigError(str(path), "", "", "", f"cannot read file: {e}")
        return LoadResult(rejected=[Rejection(None, error)], parsed=False)


class _Refused(Exception):
    """A file that is not read: the reason."""


_NOT_REGULAR = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a directory"),
)


def _open_regular_file(path: Path) -> io.TextIOWrapper:
    """A regular file opened for its UTF-8 text; raises _Refused for any other (a FIFO, socket
    or device named *.yaml is never opened: opening or reading a FIFO waits for a writer, which
    would stall the whole source), OSError; reading raises OSError, UnicodeDecodeError."""
    _check_readable(path.stat())
    # O_NONBLOCK: a file swapped for a FIFO since the stat still opens at once, and the fstat
    # refuses it before any read
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    f = os.fdopen(fd, encoding="utf-8")
    try:
        _check_readable(os.fstat(f.fileno()))
    except BaseException:
        f.close()
        raise
    return f


def _check_readable(st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        what = next((name for test, name in _NOT_REGULAR if test(st.st_mode)), "not a file")
        raise _Refused(f"not a regular file ({what}): not read")


async def _next_batch(changes: AsyncIterator[set[FileChange]]) -> set[FileChange] | None:
    return await anext(changes, None)
