"""Prebuilt GPU kernels: the first solve on a fresh machine reads compiled kernels instead of compiling them.

CuPy compiles every kernel a solve uses (ours, from ``backends/cuda/``, and the element-wise and reduction kernels
CuPy generates for array expressions, about a hundred for one MaxCut solve) with NVRTC on first use, and keeps the
binaries in its on-disk cache (``CUPY_CACHE_DIR``, by default ``~/.cupy/kernel_cache``): some 45 s on a fresh machine,
half a second once the cache holds them. The package ships those cache entries, compiled by
``tools/prebuild_kernels.py`` for the GPU architectures it supports, one archive per CuPy version, NVRTC version and
architecture (``backends/cuda/prebuilt/cupy-14.2.0_nvrtc-13.2_sm_90.zip``). :func:`seed_kernel_cache` copies the
entries of the matching archive that the cache lacks into it, once per process, before the first kernel is needed;
CuPy then finds them as if it had compiled them. An entry's name is CuPy's key of the source, options, architecture
and versions it was compiled with, so an entry that does not match this machine is never read, and where no archive
matches, nothing changes: the kernels are compiled on first use as before, and the log says so once.
"""
from __future__ import annotations

import logging
import os
import tempfile
import zipfile
from importlib.resources import as_file, files
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # importlib.resources.abc is Python >= 3.11
    from importlib.resources.abc import Traversable

__all__ = ["archive_name", "cache_directory", "prebuilt_archive", "seed_kernel_cache"]

LOGGER = logging.getLogger("cvxpy_culorads.backends")
PREBUILT_PACKAGE = "cvxpy_culorads.backends.cuda"
PREBUILT_FOLDER = "prebuilt"


def archive_name(cupy_version: str, nvrtc_version: tuple[int, int], arch: str) -> str:
    """The file name of the archive of entries compiled with these versions for ``arch`` (``"sm_90"``)."""
    return f"cupy-{cupy_version}_nvrtc-{nvrtc_version[0]}.{nvrtc_version[1]}_{arch}.zip"


def prebuilt_archive(name: str) -> Traversable:
    """The package's archive ``name`` (which may not exist: no archive was built for that combination)."""
    return files(PREBUILT_PACKAGE) / PREBUILT_FOLDER / name


def cache_directory(environ=os.environ) -> Path | None:
    """CuPy's on-disk kernel cache, or None where CuPy keeps its kernels in memory only (``CUPY_CACHE_IN_MEMORY``)."""
    if environ.get("CUPY_CACHE_IN_MEMORY", "0").lower() in ("1", "true", "yes", "on"):
        return None
    return Path(environ.get("CUPY_CACHE_DIR", os.path.expanduser("~/.cupy/kernel_cache")))


def seed_kernel_cache(source: Traversable, cache: Path | None) -> int:
    """Copy the entries of the archive ``source`` (:func:`prebuilt_archive`) that ``cache`` lacks into it; the
    number copied. Never raises: without the archive, or where the cache cannot be written, the kernels are compiled
    on first use as CuPy always does, and the log says why."""
    if cache is None or not source.is_file():
        LOGGER.info("no prebuilt GPU kernels %s: the first solve compiles them (tens of seconds, once per machine; "
                    "later solves read CuPy's kernel cache)", source.name.removesuffix(".zip"))
        return 0
    try:
        cache.mkdir(parents=True, exist_ok=True)
        copied = 0
        with as_file(source) as path, zipfile.ZipFile(path) as archive:
            for entry in archive.namelist():
                target = cache / entry
                if entry != target.name or target.exists():  # a flat archive of CuPy's file names only
                    continue
                _write_atomically(target, archive.read(entry))
                copied += 1
        return copied
    except (OSError, zipfile.BadZipFile) as error:
        LOGGER.info("prebuilt GPU kernels not copied into %s (%s): the first solve compiles them", cache, error)
        return 0


def _write_atomically(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` through a temporary file in the same folder, so that a process reading the
    cache at the same time never sees half an entry."""
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as handle:
        handle.write(data)
    os.replace(handle.name, target)
