"""Host memory the process may still use: the smaller of what the kernel reports available (``MemAvailable``) and
what the process's control group leaves under its limit (cgroup v2 ``memory.max``, or v1 ``memory.limit_in_bytes``).

Used to refuse, before allocating, problems whose arrays cannot fit on the CPU (the solver's memory estimates) and
files that declare sizes beyond memory (the SDPA reader). Returns None where none of these sources can be read, and
the callers then do not refuse.
"""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["available_bytes"]

_UNLIMITED = 1 << 60  # cgroup v1 writes a huge number for "no limit"


def available_bytes() -> int | None:
    """Bytes this process may still allocate on the host, or None when unknown."""
    sources = [value for value in (_meminfo_available(), _cgroup_room()) if value is not None]
    return min(sources) if sources else _physical_memory()


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as file:
            for line in file:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_room() -> int | None:
    """The cgroup's limit minus its current usage (the v2 or v1 files), or None without a limit."""
    for limit_file, usage_file in (("memory.max", "memory.current"),
                                   ("memory.limit_in_bytes", "memory.usage_in_bytes")):
        for folder in _cgroup_folders():
            limit, usage = _read_int(folder / limit_file), _read_int(folder / usage_file)
            if limit is not None and usage is not None and limit < _UNLIMITED:
                return max(limit - usage, 0)
    return None


def _cgroup_folders() -> list[Path]:
    """The process's own cgroup folder (v2: ``0::/path``; v1: the memory controller's line), then the root."""
    folders = []
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers in ("", "memory") or "memory" in controllers.split(","):
                base = Path("/sys/fs/cgroup") if controllers == "" else Path("/sys/fs/cgroup/memory")
                folders.append(base / path.lstrip("/"))
    except (OSError, ValueError):
        pass
    return folders + [Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/memory")]


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max" (v2 without limit) is not a number


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
