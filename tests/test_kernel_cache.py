"""The prebuilt GPU kernels: seeding CuPy's kernel cache from an archive (no GPU needed: files only)."""
import logging
import zipfile
from importlib.resources import files

from cvxpy_culorads.backends.kernel_cache import archive_name, cache_directory, seed_kernel_cache


def _archive(path, entries):
    with zipfile.ZipFile(path, "w") as out:
        for name, data in entries.items():
            out.writestr(name, data)
    return path


def test_seeding_copies_the_missing_entries_and_keeps_the_present_ones(tmp_path):
    archive = _archive(tmp_path / "a.zip", {"k1.cubin": b"one", "k2.cubin": b"two"})
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "k1.cubin").write_bytes(b"compiled here")
    assert seed_kernel_cache(archive, cache) == 1
    assert (cache / "k1.cubin").read_bytes() == b"compiled here"
    assert (cache / "k2.cubin").read_bytes() == b"two"
    assert seed_kernel_cache(archive, cache) == 0
    assert sorted(p.name for p in cache.iterdir()) == ["k1.cubin", "k2.cubin"]  # no temporary files left


def test_entries_outside_the_cache_folder_are_never_written(tmp_path):
    archive = _archive(tmp_path / "a.zip", {"../escape.cubin": b"x", "sub/k.cubin": b"y", "k.cubin": b"z"})
    cache = tmp_path / "cache"
    assert seed_kernel_cache(archive, cache) == 1
    assert not (tmp_path / "escape.cubin").exists() and not (cache / "sub").exists()


def test_a_missing_archive_or_an_unwritable_cache_leaves_compilation_to_cupy(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="cvxpy_culorads")
    assert seed_kernel_cache(tmp_path / "absent.zip", tmp_path / "cache") == 0
    assert "first solve compiles them" in caplog.text
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    archive = _archive(tmp_path / "a.zip", {"k.cubin": b"z"})
    assert seed_kernel_cache(archive, blocker / "cache") == 0  # a file where the folder should be
    assert seed_kernel_cache(archive, None) == 0  # CuPy keeps kernels in memory only


def test_cache_directory_follows_cupys_environment(tmp_path):
    assert cache_directory({"CUPY_CACHE_DIR": str(tmp_path)}) == tmp_path
    assert cache_directory({"CUPY_CACHE_IN_MEMORY": "1", "CUPY_CACHE_DIR": str(tmp_path)}) is None
    assert cache_directory({}).parts[-2:] == (".cupy", "kernel_cache")


def test_every_shipped_archive_is_named_for_its_versions_and_holds_cache_entries():
    folder = files("cvxpy_culorads.backends.cuda") / "prebuilt"
    archives = [path for path in folder.iterdir() if path.name.endswith(".zip")] if folder.is_dir() else []
    for path in archives:
        cupy_version, nvrtc, arch = path.name.removesuffix(".zip").removeprefix("cupy-").split("_", 2)
        major, minor = nvrtc.removeprefix("nvrtc-").split(".")
        assert path.name == archive_name(cupy_version, (int(major), int(minor)), arch)
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
        assert names and all(name.endswith(".cubin") and "/" not in name for name in names)
