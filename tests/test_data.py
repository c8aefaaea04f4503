"""course_utils.data: the offline image set is deterministic, balanced, learnable, and loads
in DataLoader workers started with `spawn`; load_data picks it when told to."""

from __future__ import annotations

import collections
import io
import time

import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

import course_utils.data as data
from course_utils.data import (
    OFFLINE_CLASSES,
    OfflineImages,
    dataset_source,
    load_data,
    to_tensors,
    train_transform,
)
from course_utils.models import SmallCNN

eval_transform = data.test_transform  # imported under its own name, pytest would collect it


@pytest.fixture
def fresh_cache(monkeypatch):
    """An empty image cache, so an instance renders and encodes its images itself."""
    monkeypatch.setattr(data, "_CACHE", {})


def test_two_instances_render_identical_bytes_and_labels(monkeypatch):
    monkeypatch.setattr(data, "_CACHE", {})
    first = OfflineImages(200, seed=3)
    monkeypatch.setattr(data, "_CACHE", {})  # render again from scratch, not from the cache
    second = OfflineImages(200, seed=3)
    assert first.blobs is not second.blobs
    assert first.blobs == second.blobs
    assert first.targets == second.targets


def test_two_instances_decode_identical_tensors(fresh_cache):
    a = OfflineImages(50, transform=eval_transform())
    b = OfflineImages(50, transform=eval_transform())
    for i in (0, 17, 49):
        assert torch.equal(a[i][0], b[i][0])
        assert a[i][1] == b[i][1]


def test_seed_and_split_change_the_images(fresh_cache):
    base = OfflineImages(50, seed=0)
    assert OfflineImages(50, seed=1).blobs != base.blobs
    assert OfflineImages(50, train=False).blobs != base.blobs


def test_items_are_jpeg_bytes_decoded_on_access(fresh_cache):
    ds = OfflineImages(10)
    assert all(blob[:2] == b"\xff\xd8" for blob in ds.blobs)  # the JPEG start-of-image marker
    img, label = ds[0]
    assert isinstance(img, Image.Image)
    assert img.size == (32, 32) and img.mode == "RGB"
    assert 0 <= label < 10


def test_stored_size_sets_the_encoded_image_size(fresh_cache):
    ds = OfflineImages(4, stored_size=64, transform=train_transform(32, stored_size=64))
    assert Image.open(io.BytesIO(ds.blobs[0])).size == (64, 64)
    assert ds[0][0].shape == (3, 32, 32)


def test_labels_are_balanced_across_the_ten_classes():
    labels = OfflineImages(2000).targets
    counts = collections.Counter(labels)
    assert sorted(counts) == list(range(len(OFFLINE_CLASSES))) == list(range(10))
    assert all(140 <= c <= 260 for c in counts.values()), counts  # 200 expected per class


def test_to_tensors_decodes_images_and_labels():
    ds = OfflineImages(40, transform=eval_transform())
    x, y = to_tensors(ds)
    assert x.shape == (40, 3, 32, 32) and x.dtype == torch.float32
    assert y.shape == (40,) and y.dtype == torch.int64
    assert y.tolist() == ds.targets
    assert torch.equal(x[7], ds[7][0])
    assert abs(x.mean().item()) < 1.5  # normalised, not raw 0..255 or 0..1 pixels


def test_to_tensors_stops_at_the_limit():
    x, y = to_tensors(OfflineImages(40, transform=eval_transform()), limit=8)
    assert x.shape[0] == y.shape[0] == 8


def test_a_small_cnn_learns_the_offline_set_well_above_chance(one_thread):
    """250 AdamW steps of SmallCNN(width=16) on 4000 images reach far above 10% on held-out
    images (about 86% measured); under 30 s on a loaded 2-core machine, single-threaded."""
    start = time.perf_counter()
    torch.manual_seed(0)
    x, y = to_tensors(OfflineImages(4000, transform=eval_transform()))
    x_test, y_test = to_tensors(OfflineImages(500, train=False, transform=eval_transform()))
    model = SmallCNN(width=16)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(250):
        idx = torch.randint(0, len(x), (64,), generator=g)
        loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
    print(
        f"\noffline set: held-out accuracy {accuracy:.1%} after 250 steps, {time.perf_counter() - start:.1f} s"
    )
    assert accuracy > 0.40


def test_dataloader_workers_started_with_spawn_load_the_offline_set():
    """Workers started by `spawn` (macOS, Windows, Python >= 3.14) unpickle the dataset and
    its transform: everything they need is importable from course_utils."""
    ds = OfflineImages(48, transform=train_transform())
    loader = DataLoader(ds, batch_size=16, num_workers=2, multiprocessing_context="spawn")
    batches = list(loader)
    assert len(batches) == 3
    assert all(x.shape == (16, 3, 32, 32) for x, _ in batches)
    assert torch.cat([y for _, y in batches]).tolist() == ds.targets


def test_load_data_uses_the_offline_set_when_told_to():
    splits = load_data(n_train=120, n_test=60)
    assert dataset_source() == "offline"
    assert splits.source == "offline"
    assert splits.classes == OFFLINE_CLASSES
    assert len(splits.train) == 120 and len(splits.test) == 60
    x, y = splits.train[0]
    assert x.shape == (3, 32, 32) and 0 <= y < 10
    text = splits.describe()
    assert "offline" in text and "120 training" in text and "60 test" in text


def test_dataset_source_is_offline_without_cifar_on_disk(monkeypatch, tmp_path):
    monkeypatch.setenv("COURSE_DATASET", "auto")
    monkeypatch.setenv("COURSE_DATA", str(tmp_path))
    assert dataset_source() == "offline"


def test_dataset_source_is_cifar10_when_it_is_on_disk(monkeypatch, tmp_path):
    monkeypatch.setenv("COURSE_DATASET", "auto")
    monkeypatch.setenv("COURSE_DATA", str(tmp_path))
    (tmp_path / "cifar-10-batches-py").mkdir()
    (tmp_path / "cifar-10-batches-py" / "data_batch_1").write_bytes(b"")
    assert dataset_source() == "cifar10"


def test_cifar10_that_cannot_be_downloaded_falls_back_to_the_offline_set(
    monkeypatch, tmp_path, capsys
):
    import urllib.error

    import torchvision.datasets

    from course_utils import data

    def no_network(*args, **kwargs):
        raise urllib.error.URLError("no network")

    monkeypatch.setenv("COURSE_DATASET", "cifar10")
    monkeypatch.setenv("COURSE_DATA", str(tmp_path))
    monkeypatch.setattr(torchvision.datasets, "CIFAR10", no_network)
    splits = data.load_data(64, 32)
    assert splits.source == "offline" and len(splits.train) == 64
    assert "using the offline image set" in capsys.readouterr().err
