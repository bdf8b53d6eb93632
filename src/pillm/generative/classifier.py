"""The feature classifier sample quality is measured in: the ``gen-classifier`` job that trains
it on a dataset (with the real-vs-real floor of every metric), and scoring samples in its
features (sample_quality.py: Fréchet distance, KID and 1-NN accuracy in *those* features, not
Inception's)."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

import torch

from pillm.core.log import say
from pillm.core.records import provenance, tidy_records, write_json
from pillm.core.runtime import resolve_device
from pillm.core.tensor_files import load_tensor_file, save_tensor_file
from pillm.generative.config import ClassifierJobConfig
from pillm.generative.sample_quality import (
    FeatureCNN,
    extract_features,
    sample_quality,
    train_feature_classifier,
)
from pillm.generative.splits import load_split, run_identity

KIND = "pillm.feature_cnn"  # what classifier.pt holds (pillm.core.tensor_files)


def classifier_job(dataset: str, cfg: dict, images: str, device: str, out_dir: str) -> None:
    """Train the feature CNN that sample quality is measured in; record its accuracy and the
    real-vs-real floor of every metric (held-out train images against test images).

    ``cfg``: the generative keys it uses (a dict, checked here once into ClassifierJobConfig)."""
    gen = ClassifierJobConfig.from_dict(cfg, "generative")
    device = resolve_device(device)
    c = gen.classifier
    t0 = time.perf_counter()
    train = load_split(images, "train", c.n_train, gen.seed)
    test = load_split(images, "test", gen.n_eval, gen.seed)
    say(f"{dataset}: training the feature classifier ({len(train)} images, {c.epochs} epochs)")
    model, acc = train_feature_classifier(
        train.x, train.labels, test.x, test.labels, train.shape,
        epochs=c.epochs, batch_size=c.batch_size, lr=c.lr, feat_dim=c.feat_dim,
        seed=gen.seed, device=device,
    )  # fmt: skip
    seconds = time.perf_counter() - t0
    # Floor of every metric: real train images the classifier never saw, against the test set.
    say(f"{dataset}: test accuracy {acc:.4g}; the real-against-real floor of each metric")
    real = load_split(images, "train", 0, gen.seed)
    unseen = torch.ones(len(real), dtype=torch.bool)
    unseen[train.index] = False
    pool = real.x[unseen] if int(unseen.sum()) >= gen.n_eval else real.x
    g = torch.Generator().manual_seed(gen.seed + 1)
    floor_x = pool[torch.randperm(pool.shape[0], generator=g)[: gen.n_eval]]
    q = quality(model, features(model, test.x, device), floor_x, gen.kid_subsets,
                gen.kid_subset_size, gen.seed, device)  # fmt: skip
    out = Path(out_dir)
    save_tensor_file(out / "classifier.pt", KIND, model.state_dict(),
                     {"shape": list(train.shape), "cfg": asdict(c)})  # fmt: skip
    metrics = {"test_accuracy": acc, "train_seconds": seconds, **q}
    identity = run_identity(
        dataset, "classifier", gen.seed, f"{len(train)} train images, {len(test)} test"
    )
    write_json(out / "classifier.json", tidy_records(identity, metrics, provenance(device, train.meta)))


def load_classifier(path: str, device: str) -> FeatureCNN:
    """The feature classifier of ``classifier.pt`` (a tensor file: never executed; anything
    else is refused with a message naming the file)."""
    ckpt = load_tensor_file(path, KIND)
    model = FeatureCNN(tuple(ckpt.meta["shape"]), feat_dim=ckpt.meta["cfg"]["feat_dim"])
    model.load_state_dict(ckpt.tensors)
    return model.to(device).eval()


def features(classifier: FeatureCNN, x: torch.Tensor, device: str) -> torch.Tensor:
    """Classifier features (float64) on ``device``; inputs clamped to the data range [-1, 1]."""
    return extract_features(classifier.features, x.clamp(-1, 1)).to(device)


def quality(
    classifier: FeatureCNN, feats_real: torch.Tensor, fake: torch.Tensor, kid_subsets: int,
    kid_subset_size: int, seed: int, device: str,
) -> dict:  # fmt: skip
    """Sample-quality metrics of ``fake`` against precomputed real features, on ``device``."""
    return sample_quality(
        feats_real, features(classifier, fake, device), kid_subsets, kid_subset_size, seed=seed
    )
