import io
import shutil
import time

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image

from pillm.data.files import DataError
from pillm.data.images import (
    decode_images,
    from_hf_dataset,
    load_images,
    load_images_hub,
    make_grid,
    save_image_grid,
    subset_rows,
)

torch.set_num_threads(1)

MNIST_TRAIN_FIRST_LABELS = [5, 0, 4, 1, 9, 2, 1, 3, 1, 4]  # the published order


def _parquet_column(path, column, n=None):
    values = pq.read_table(path, columns=[column]).column(column).to_pylist()
    return values if n is None else values[:n]


def test_mnist_first_rows_are_28x28_digits_with_the_parquet_labels(shared_data):
    d = load_images("mnist", "train", "local", shared_data, limit=10, subset_seed=None)
    assert d.x.shape == (10, 784) and d.x.dtype == torch.float32
    assert d.shape == (1, 28, 28)
    assert d.labels.tolist() == MNIST_TRAIN_FIRST_LABELS
    assert d.labels.tolist() == _parquet_column(shared_data / "mnist/train.parquet", "label", 10)
    assert d.index.tolist() == list(range(10))
    img = d.x.reshape(10, 28, 28)
    assert float(d.x.min()) == -1.0 and float(d.x.max()) == 1.0
    assert (img[:, :3, :3] == -1).all()  # black background in the corners
    assert (img[:, 8:20, 8:20].amax(dim=(1, 2)) > 0.9).all()  # ink in the centre
    assert d.meta["sha256"].startswith("16abb5324fb4")


def test_mnist_pixels_are_the_png_bytes_scaled_to_minus_one_one(shared_data):
    d = load_images("mnist", "test", "local", shared_data, limit=3, subset_seed=None)
    blob = _parquet_column(shared_data / "mnist/test.parquet", "image", 1)[0]["bytes"]
    png = np.asarray(Image.open(io.BytesIO(blob)), dtype=np.float32)
    assert torch.equal(d.x[0], torch.from_numpy(png.reshape(-1) / 127.5 - 1.0))


def test_cifar10_is_flattened_channel_first(shared_data):
    d = load_images("cifar10", "test", "local", shared_data, limit=2, subset_seed=None)
    assert d.x.shape == (2, 3072) and d.shape == (3, 32, 32)
    blob = _parquet_column(shared_data / "cifar10/test.parquet", "img", 1)[0]["bytes"]
    rgb = np.asarray(Image.open(io.BytesIO(blob)).convert("RGB"), dtype=np.float32)  # (H, W, C)
    expected = torch.from_numpy(rgb.transpose(2, 0, 1) / 127.5 - 1.0)
    assert torch.equal(d.x[0].reshape(3, 32, 32), expected)


def test_decoding_in_worker_processes_gives_the_same_images(shared_data):
    one = load_images("cifar10", "test", "local", shared_data, limit=203, subset_seed=1)
    three = load_images("cifar10", "test", "local", shared_data, 203, 1, workers=3)
    assert torch.equal(three.x, one.x) and torch.equal(three.labels, one.labels)


def test_a_wrong_size_is_reported_with_the_image_number_from_any_worker():
    blobs = []
    for size in [(4, 4)] * 9 + [(5, 4)] + [(4, 4)] * 2:
        buf = io.BytesIO()
        Image.new("L", size).save(buf, format="PNG")
        blobs.append(buf.getvalue())
    with pytest.raises(DataError, match=r"image 9 has size \(4, 5\)"):
        decode_images(blobs, (1, 4, 4), workers=3)


def test_random_subset_is_seeded_and_covers_classes_of_a_label_sorted_file(shared_data):
    # The mirror's CIFAR-10 train file is sorted by label: the first 200 rows are all airplanes.
    d = load_images("cifar10", "train", "local", shared_data, limit=200, subset_seed=0)
    labels = _parquet_column(shared_data / "cifar10/train.parquet", "label")
    assert d.labels.tolist() == [labels[i] for i in d.index.tolist()]
    assert len(set(d.labels.tolist())) == 10
    assert (d.index.diff() > 0).all()  # file order kept
    assert np.array_equal(subset_rows(50_000, 200, 0), d.index.numpy())
    assert not np.array_equal(subset_rows(50_000, 200, 1), d.index.numpy())


def test_checksum_mismatch_names_the_file(shared_data, tmp_path):
    (tmp_path / "mnist").mkdir()
    shutil.copy(shared_data / "SHA256SUMS", tmp_path)
    shutil.copy(shared_data / "mnist/test.parquet", tmp_path / "mnist")
    load_images("mnist", "test", "local", tmp_path, limit=1)  # the intact copy loads
    with open(tmp_path / "mnist/test.parquet", "r+b") as fh:
        fh.seek(1000)
        byte = fh.read(1)
        fh.seek(1000)
        fh.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(DataError, match=r"checksum mismatch for .*mnist/test\.parquet"):
        load_images("mnist", "test", "local", tmp_path, limit=1)


def test_missing_file_and_bad_arguments_say_what_to_fix(shared_data, tmp_path):
    shutil.copy(shared_data / "SHA256SUMS", tmp_path)
    with pytest.raises(DataError, match=r"missing data file .*mnist/train\.parquet"):
        load_images("mnist", "train", "local", tmp_path)
    with pytest.raises(DataError, match="data.local_dir"):
        load_images("mnist", "train", "local", tmp_path / "nowhere")
    with pytest.raises(DataError, match="unknown image dataset 'svhn'"):
        load_images("svhn", "train", "local", shared_data)
    with pytest.raises(DataError, match="split must be one of"):
        load_images("mnist", "validation", "local", shared_data)


def test_offline_hub_fails_fast_pointing_at_the_local_mirror(monkeypatch):
    import datasets
    from huggingface_hub.errors import OfflineModeIsEnabled

    def offline(*a, **k):
        raise OfflineModeIsEnabled("stand-in: the hub library reports offline mode")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    t0 = time.perf_counter()
    with pytest.raises(DataError, match=r"mnist/\{train,test\}\.parquet.*data.local_dir"):
        load_images_hub("mnist", "train", limit=10)
    assert time.perf_counter() - t0 < 10


def test_hub_path_decodes_a_datasets_table_exactly_as_the_local_path(shared_data, tmp_path):
    datasets = pytest.importorskip("datasets")
    ds = datasets.load_dataset(
        "parquet",
        data_files={"test": str(shared_data / "mnist/test.parquet")},
        split="test",
        cache_dir=str(tmp_path),
    ).cast_column("image", datasets.Image())  # as the hub serves it: decoded images
    via_hub = from_hf_dataset(ds, "mnist", limit=50, subset_seed=3)
    local = load_images("mnist", "test", "local", shared_data, limit=50, subset_seed=3)
    assert torch.equal(via_hub.index, local.index)
    assert torch.equal(via_hub.labels, local.labels)
    assert torch.equal(via_hub.x, local.x)


def test_make_grid_places_images_row_major_with_white_padding():
    x = torch.stack([torch.full((4,), v) for v in (-1.0, 0.0, 1.0)])  # three 1x2x2 images
    grid = make_grid(x, (1, 2, 2), nrow=2, pad=1)
    assert grid.shape == (2 * 3 + 1, 2 * 3 + 1, 1) and grid.dtype == np.uint8
    assert (grid[1:3, 1:3] == 0).all()  # image 0: row 0, col 0
    assert (grid[1:3, 4:6] == 128).all()  # image 1: row 0, col 1 (0 -> 127.5 -> 128)
    assert (grid[4:6, 1:3] == 255).all()  # image 2: row 1, col 0
    assert (grid[0] == 255).all() and (grid[:, 3] == 255).all()  # padding
    assert (grid[4:6, 4:6] == 255).all()  # the empty cell


def test_save_image_grid_writes_a_readable_png_atomically(tmp_path):
    x = torch.rand(10, 3 * 8 * 8) * 2 - 1
    out = save_image_grid(x, (3, 8, 8), tmp_path / "figs" / "samples.png", title="samples")
    with Image.open(out) as im:
        assert im.format == "PNG" and im.width > 50 and im.height > 50
    assert sorted(p.name for p in out.parent.iterdir()) == ["samples.png"]


def test_the_image_decode_job_imports_no_torch():
    """gen-images starts the generative part of the DAG and every generative job waits for it:
    its module (and the command line) must not pay for importing torch."""
    import subprocess
    import sys

    code = ("import sys, pillm.cli, pillm.data.image_files; "
            "assert 'torch' not in sys.modules, 'torch was imported'")  # fmt: skip
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    # the command as the rule runs it, --threads included (the data section is left empty, so
    # it stops at its config check, after the flags are handled)
    code = ("import sys, pillm.cli; "
            "rc = pillm.cli.main(['gen-images', '--dataset', 'mnist', '--data', '{}', "
            "'--out', 'x.npz', '--threads', '2']); "
            "assert rc == 2, rc; assert 'torch' not in sys.modules, 'torch was imported'")  # fmt: skip
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
