"""A damaged data file stops the job with the file named, beyond the checksum: each folder here
carries SHA256SUMS of its own (bad) files, as a user's own data.local_dir may."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from pillm.data.files import DataError
from pillm.data.image_files import read_images_local
from pillm.data.lambada import load_lambada
from pillm.data.sources import load_corpus
from pillm.data.sst2 import load_sst2


def user_folder(root: Path, files: dict[str, bytes]) -> Path:
    """A data folder holding ``files`` and a SHA256SUMS that matches them."""
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    sums = "".join(f"{hashlib.sha256(d).hexdigest()}  ./{rel}\n" for rel, d in files.items())
    (root / "SHA256SUMS").write_text(sums)
    return root


def wikitext(shared_data: Path, **replace: bytes) -> dict[str, bytes]:
    files = {
        f"wikitext-2-v1/{s}.txt": (shared_data / f"wikitext-2-v1/{s}.txt").read_bytes()
        for s in ("validation", "test")
    }
    return files | {f"wikitext-2-v1/{k}.txt": v for k, v in replace.items()}


def test_an_empty_corpus_file_is_named(shared_data, tmp_path):
    folder = user_folder(tmp_path, wikitext(shared_data, test=b""))
    with pytest.raises(DataError, match=r"wikitext-2-v1/test\.txt: the file is empty"):
        load_corpus("wikitext2", "local", str(folder), 0.1)


def test_a_non_utf8_byte_is_named_with_its_line(shared_data, tmp_path):
    text = (shared_data / "wikitext-2-v1/validation.txt").read_bytes()
    bad = text[:500] + b"caf\xe9 au lait\n" + text[500:]
    line = bad[: bad.index(b"\xe9")].count(b"\n") + 1
    folder = user_folder(tmp_path, wikitext(shared_data, validation=bad))
    with pytest.raises(DataError) as err:
        load_corpus("wikitext2", "local", str(folder), 0.1)
    msg = str(err.value)
    assert "wikitext-2-v1/validation.txt: not UTF-8" in msg and "0xe9" in msg
    assert f"(line {line})" in msg and "SHA256SUMS" in msg


def test_a_truncated_parquet_is_named(shared_data, tmp_path):
    whole = (shared_data / "mnist/test.parquet").read_bytes()
    folder = user_folder(tmp_path, {"mnist/test.parquet": whole[: len(whole) // 2]})
    with pytest.raises(DataError, match=r"mnist/test\.parquet: not a readable parquet file"):
        read_images_local("mnist", "test", folder, limit=8)


def test_a_parquet_of_undecodable_images_is_named(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"image": [{"bytes": b"not a png", "path": None}] * 4, "label": [0] * 4})
    pq.write_table(table, tmp_path / "x.parquet")
    folder = user_folder(tmp_path, {"mnist/test.parquet": (tmp_path / "x.parquet").read_bytes()})
    with pytest.raises(DataError, match=r"mnist/test\.parquet: .*cannot identify image"):
        read_images_local("mnist", "test", folder, limit=4)


def test_sst2_and_lambada_files_are_named(shared_data, tmp_path):
    sst2 = {f"sst2/{n}.tsv": (shared_data / f"sst2/{n}.tsv").read_bytes() for n in ("train", "dev", "test")}  # fmt: skip
    sst2["sst2/test.tsv"] = sst2["sst2/test.tsv"].replace(b"\t1\n", b"\t\xff\n", 1)
    with pytest.raises(DataError, match=r"sst2/test\.tsv: not UTF-8"):
        load_sst2("local", str(user_folder(tmp_path / "a", sst2)))
    sst2["sst2/test.tsv"] = sst2["sst2/test.tsv"].replace(b"\t\xff\n", b"\tpositive\n", 1)
    with pytest.raises(DataError, match=r"sst2/test\.tsv: line \d+ has no integer label"):
        load_sst2("local", str(user_folder(tmp_path / "b", sst2)))
    lines = json.dumps({"text": "a passage"}) + "\n" + '{"text": "cut sh'
    folder = user_folder(tmp_path / "c", {"lambada/lambada_test.jsonl": lines.encode()})
    with pytest.raises(DataError, match=r"lambada_test\.jsonl: line 2 is not a JSON object"):
        load_lambada("local", str(folder))


def test_the_mirror_itself_still_reads(shared_data, tmp_path):
    """The checks pass the real files unchanged (the same text, rows and images)."""
    folder = tmp_path / "m"
    shutil.copytree(shared_data / "wikitext-2-v1", folder / "wikitext-2-v1")
    shutil.copy(shared_data / "SHA256SUMS", folder)
    texts, _ = load_corpus("wikitext2", "local", str(folder), 0.1)
    raw = (shared_data / "wikitext-2-v1/test.txt").read_text(encoding="utf-8")
    assert texts["test"] == raw
    assert read_images_local("mnist", "test", shared_data, limit=8).pixels.shape == (8, 784)
