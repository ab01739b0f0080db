"""The memory limit of loading a trace: what a trace will need, estimated from its JSON as it
arrives, against a limit the user can raise.

Loading a trace costs memory in proportion to its JSON and to its number of events, and the
JSON of a small ``.json.gz`` can be hundreds of times larger than the file. The reader feeds
every chunk of JSON to a :class:`MemoryBudget` as it reads or inflates it, and the budget stops
the load with :class:`~traceprof.errors.MemoryLimitError` as soon as the estimate passes the
limit: before the machine runs out, and before a stream that never ends (``/dev/zero``, a FIFO)
has filled it.

The estimate (measured as the peak resident memory of ``traceprof analyze`` above the
interpreter's own, on generated and real traces, 2026):

- about 4.2 bytes per byte of JSON on realistic traces (scripts/gen_large_trace.py, 100 and
  300 MB; real traces measure 1.3 to 2.5), taken as :data:`BYTES_PER_JSON_BYTE`;
- about 490 to 680 bytes per event on traces of minimal events (``{"ph":"X"}``, or with ts, dur,
  name and cat), whatever their size in bytes; events are counted cheaply as the JSON objects in
  the text (a ``{`` each; an event with args counts two), at :data:`BYTES_PER_OBJECT` each.

The estimate is the larger of the two. The limit is ``--max-memory`` (or ``max_memory=`` in
the API), else the ``TRACEPROF_MAX_MEMORY`` environment variable, else
:data:`DEFAULT_FRACTION` of the memory available when the load starts (``MemAvailable`` of
/proc/meminfo, bounded by a cgroup memory limit and the address-space limit ``ulimit -v``).
A job's limit covers all of its traces loaded at once on one machine: resolved once, then
divided among them (:func:`job_memory_share`).
"""

from __future__ import annotations

import os
import re

from traceprof.errors import MemoryLimitError, OptionError

ENV_VAR = "TRACEPROF_MAX_MEMORY"
#: share of the available memory one load may use by default
DEFAULT_FRACTION = 0.8
#: the default when the available memory cannot be read
FALLBACK_LIMIT = 8 * 2**30
#: estimated peak memory per byte of JSON (realistic traces)
BYTES_PER_JSON_BYTE = 4.5
#: estimated peak memory per JSON object (``{``) of the text (traces of tiny events)
BYTES_PER_OBJECT = 700
#: the same two estimates for a trace decoded run by run (traceprof.read.parallel): the text is held
#: one run at a time, so the memory follows the columns kept and the arrays the analysis builds
#: per event. Measured: 0.59 bytes per byte of JSON and about 90 bytes per object on generated
#: traces (1 and 4 GB; two objects per event, many of them flows and memory instants), 310
#: bytes per object on a trace of 3 million minimal CPU ops (one object each, every one of
#: them in every stage); the per-object figure stays closer to the second, which a guard
#: against running out of memory must not underestimate by much
STREAMED_BYTES_PER_JSON_BYTE = 0.6
STREAMED_BYTES_PER_OBJECT = 250

#: the deepest module tree traceprof builds, and the most parts a module table's qualified name
#: may have. A model's modules nest a few to a few tens of levels deep, and Python's default
#: recursion limit (1000 frames, at least three per module call) stops a forward at about 330;
#: a deeper tree is a trace built to be one, whose outputs would grow with its depth squared
#: (every node's path): refused with one line (docs/security.md)
MAX_TREE_DEPTH = 256
#: how deep a module table's input and output descriptions are read (traceprof.capture writes
#: at most 18 levels); deeper parts are read as unknown
MAX_SPEC_DEPTH = 32

_SIZE_RE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgtp]?)(i?)(b?)\s*\Z", re.I)
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


def parse_size(text: str | int) -> int:
    """Bytes from ``8G``, ``500M``, ``1.5GB``, ``12GiB`` or a plain number of bytes. A suffix
    with ``i`` is binary (GiB = 2**30); without it decimal (GB = 10**9). ValueError if not a
    size."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        m = _SIZE_RE.match(str(text))
        if not m:
            raise ValueError(f"not a size: {text!r} (expected e.g. 8G, 500M, 1.5GB)")
        number, prefix, binary, _ = m.groups()
        base = 1024 if binary else 1000
        value = int(float(number) * base ** _POWERS[prefix.lower()])
    if value <= 0:
        raise ValueError(f"not a positive size: {text!r}")
    return value


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _read_int(path: str) -> int | None:
    try:
        with open(path, "rb") as f:
            return int(f.read().strip())
    except (OSError, ValueError):  # "max", missing, not a cgroup v2 system
        return None


def _cgroup_available() -> int | None:
    """Room left under this process's cgroup v2 memory limit, when it has one."""
    try:
        with open("/proc/self/cgroup", "rb") as f:
            line = next((x for x in f if x.startswith(b"0::")), None)
    except OSError:
        return None
    if line is None:
        return None
    group = "/sys/fs/cgroup" + line[3:].strip().decode("utf-8", "replace")
    limit = _read_int(os.path.join(group, "memory.max"))
    if limit is None:
        return None
    used = _read_int(os.path.join(group, "memory.current")) or 0
    return max(limit - used, 0)


def _address_space_available() -> int | None:
    """Room left under ``ulimit -v`` (RLIMIT_AS), when it is set."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, ValueError):
        return None
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        with open("/proc/self/statm", "rb") as f:
            used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        used = 0
    return max(soft - used, 0)


def available_memory() -> int | None:
    """The memory this process can still take: the least of what the machine has available,
    the room under its cgroup limit and under its address-space limit; None if unknown."""
    known = [
        v for v in (_meminfo_available(), _cgroup_available(), _address_space_available()) if v is not None
    ]
    return min(known) if known else None


def default_max_memory() -> int:
    """The default limit: :data:`DEFAULT_FRACTION` of :func:`available_memory`."""
    available = available_memory()
    if available is None:
        return FALLBACK_LIMIT
    return max(int(available * DEFAULT_FRACTION), 1)


def resolve_max_memory(value: int | str | None = None) -> int:
    """The limit in bytes: ``value`` (bytes or a size such as ``"8G"``), else the
    ``TRACEPROF_MAX_MEMORY`` environment variable, else :func:`default_max_memory`."""
    source = "max_memory"
    if value is None:
        value = os.environ.get(ENV_VAR) or None
        source = ENV_VAR
    if value is None:
        return default_max_memory()
    try:
        return parse_size(value)
    except ValueError as e:
        raise OptionError(f"{source}: {e}") from None


def job_memory_share(value: int | str | None, at_once: int) -> int:
    """One trace's limit when ``at_once`` traces of a job load at the same time on this machine:
    the job's limit (:func:`resolve_max_memory`, resolved once here) divided among them, so the
    loads together stay within it."""
    return max(resolve_max_memory(value) // max(at_once, 1), 1)


def shared_limit_error(error: MemoryLimitError, sharing: int) -> MemoryLimitError:
    """``error`` of a trace loaded beside ``sharing - 1`` others, saying that its limit is a
    share of the job's (and how to give it more)."""
    if sharing <= 1:
        return error
    return MemoryLimitError(
        error.path,
        f"{error.problem} (its share of the job's limit, divided among the {sharing} traces "
        "loaded at once: lower --jobs to give each more)",
    )


def describe_size(nbytes: float) -> str:
    """A limit as text: ``12 GB``, ``500 MB`` (decimal units, like ``--max-memory 12G``)."""
    from traceprof import units  # numbers become text in one place

    return units.si(nbytes, "B")


class MemoryBudget:
    """The memory estimate of one trace load, fed with the JSON text as it arrives."""

    __slots__ = (
        "json_bytes",
        "limit",
        "objects",
        "path",
        "per_json_byte",
        "per_object",
        "scale",
    )

    def __init__(self, path: object, max_memory: int | str | None = None, scale: float = 1.0):
        self.path = path
        self.limit = resolve_max_memory(max_memory)
        self.scale = scale  # times the usual estimate (a caller holding two copies: 2)
        self.json_bytes = 0
        self.objects = 0
        self.per_json_byte = BYTES_PER_JSON_BYTE
        self.per_object = BYTES_PER_OBJECT

    def streamed(self) -> None:
        """Estimate for a trace decoded run by run (traceprof.read.parallel) from now on."""
        self.per_json_byte = STREAMED_BYTES_PER_JSON_BYTE
        self.per_object = STREAMED_BYTES_PER_OBJECT

    def estimate(self, json_bytes: int | None = None, objects: int | None = None) -> int:
        json_bytes = self.json_bytes if json_bytes is None else json_bytes
        objects = self.objects if objects is None else objects
        return int(self.scale * max(json_bytes * self.per_json_byte, objects * self.per_object))

    def expect(self, json_bytes: int) -> None:
        """Stop now if JSON of at least ``json_bytes`` bytes cannot fit (a regular file's
        size, a gzip trailer's size), before any of it is read."""
        if self.estimate(json_bytes, 0) > self.limit:
            self._fail(json_bytes, 0)

    def add(self, chunk, objects: int | None = None) -> None:
        """Count one chunk of JSON (bytes-like) and stop if the estimate passes the limit
        (``objects``: its JSON objects when the caller has counted them already)."""
        self.json_bytes += len(chunk)
        self.objects += count_objects(chunk) if objects is None else objects
        if self.estimate() > self.limit:
            self._fail(self.json_bytes, self.objects)

    def _fail(self, json_bytes: int, objects: int) -> None:
        from traceprof import units

        ratio_text = units.approximate(self.estimate(json_bytes, objects) / max(json_bytes, 1))
        raise MemoryLimitError(
            self.path,
            f"needs more than the memory limit of {describe_size(self.limit)} (about "
            f"{ratio_text} bytes per byte of its {describe_size(json_bytes)} of JSON); raise "
            f"it with --max-memory or {ENV_VAR}",
        )


_COUNT_BLOCK = 1 << 20  # small enough for the comparison's temporary to stay in cache


def count_objects(chunk) -> int:
    """The number of ``{`` in a bytes-like chunk (about 1 GB/s at worst, in 1 MB blocks)."""
    import numpy as np  # here: the command line reads the sizes and names above without numpy

    a = np.frombuffer(chunk, np.uint8)
    n = 0
    for i in range(0, len(a), _COUNT_BLOCK):
        n += int(np.count_nonzero(a[i : i + _COUNT_BLOCK] == 0x7B))
    return n
