"""Warm compile caches survive the move into another evaluation's private folder."""

import json

from triton.runtime.cache import FileCacheManager

from kscience.evaluate.sandbox import compile_cache


def _store_entry(root, first_workdir, children):
    """What `keep` leaves after an evaluation in `first_workdir`: a Triton group naming its files
    by absolute path inside that (since deleted) folder."""
    kernel = root / "entry" / "triton" / "HASH"
    kernel.mkdir(parents=True)
    old = compile_cache.private_dirs(first_workdir)["TRITON_CACHE_DIR"]
    for name in children:
        (kernel / name).write_bytes(b"compiled")
    group = {"child_paths": {name: f"{old}/HASH/{name}" for name in children}}
    (kernel / "__grp__k.json").write_text(json.dumps(group))
    return kernel


def test_a_seeded_triton_group_names_the_files_of_the_new_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("KSCIENCE_CACHE", str(tmp_path / "store"))
    root = compile_cache.store_root()
    _store_entry(root, tmp_path / "first", ["k.cubin", "k.json"])
    workdir = tmp_path / "second"
    assert compile_cache.seed(workdir, "entry")
    triton_dir = compile_cache.private_dirs(workdir)["TRITON_CACHE_DIR"]
    monkeypatch.setenv("TRITON_CACHE_DIR", triton_dir)
    found = FileCacheManager("HASH").get_group("k.json")  # how Triton itself looks for a compiled kernel
    assert found == {"k.cubin": f"{triton_dir}/HASH/k.cubin", "k.json": f"{triton_dir}/HASH/k.json"}


def test_a_group_that_names_a_file_outside_its_folder_is_dropped(tmp_path, monkeypatch):
    monkeypatch.setenv("KSCIENCE_CACHE", str(tmp_path / "store"))
    kernel = _store_entry(compile_cache.store_root(), tmp_path / "first", ["k.cubin"])
    (kernel / "__grp__k.json").write_text(json.dumps({"child_paths": {"k.cubin": "/etc/.."}}))
    (kernel / "__grp__bad.json").write_text("{not json")
    workdir = tmp_path / "second"
    assert compile_cache.seed(workdir, "entry")
    copied = workdir / ".compile-cache" / "triton" / "HASH"
    assert not (copied / "__grp__k.json").exists() and not (copied / "__grp__bad.json").exists()
    assert (copied / "k.cubin").exists()  # the files stay; Triton compiles the kernel afresh
