"""Checkpoints are data: loading one never runs code, and anything but a pillm tensor file is
refused with a message naming it; the pipeline's own checkpoints come back bit for bit."""

import io
import pickle
import zipfile

import pytest
import torch

from pillm.core.tensor_files import TensorFileError, load_tensor_file, save_tensor_file
from pillm.models.checkpoint import load_checkpoint, save_checkpoint
from pillm.models.gpt import GPT, GPTConfig, attach_pil


class Payload:
    """Unpickling this would create the file ``marker``: the test's stand-in for any code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def tiny() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=50, context=16, n_layer=2, d_model=16, n_head=2))


@pytest.mark.parametrize("where", ["top", "inside_state_dict", "legacy_pickle"])
@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_a_pickle_payload_is_refused_before_it_runs(tmp_path, where):
    marker = tmp_path / "pwned"
    path = tmp_path / "model.pt"
    if where == "top":
        torch.save(Payload(marker), path)
    elif where == "inside_state_dict":  # a checkpoint that looks like ours, one entry poisoned
        good = tiny().state_dict()
        torch.save({"format": "pillm-tensors/1", "kind": "pillm.gpt", "meta": "{}",
                    "state_dict": {**good, "x": Payload(marker)}}, path)  # fmt: skip
    else:  # torch's pre-zip format: a bare pickle stream
        path.write_bytes(pickle.dumps({"state_dict": Payload(marker)}))
    with pytest.raises(TensorFileError, match=str(path)) as err:
        load_checkpoint(path)
    assert "refused" in str(err.value) or "not a readable" in str(err.value)
    assert not marker.exists()


def test_files_that_are_not_checkpoints_name_the_file(tmp_path):
    model = tiny()
    cases = {
        "empty.pt": b"",
        "text.pt": b"hello",
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
    full = tmp_path / "full.pt"
    save_checkpoint(full, model, {})
    (tmp_path / "truncated.pt").write_bytes(full.read_bytes()[: full.stat().st_size // 2])
    torch.save(model.state_dict(), tmp_path / "bare_state.pt")  # plain data, not our layout
    save_tensor_file(tmp_path / "other_kind.pt", "pillm.feature_cnn", {}, {})
    for name in [*cases, "truncated.pt", "bare_state.pt", "other_kind.pt", "missing.pt"]:
        with pytest.raises(TensorFileError, match=str(tmp_path / name)):
            load_checkpoint(tmp_path / name)


def test_metadata_is_json_only(tmp_path):
    with pytest.raises(TypeError):
        save_tensor_file(tmp_path / "m.pt", "k", {}, {"obj": object()})
    with pytest.raises(TypeError, match="not tensors"):
        save_tensor_file(tmp_path / "m.pt", "k", {"w": [1.0]}, {})
    buf = io.BytesIO()  # a meta entry that is not JSON text
    torch.save({"format": "pillm-tensors/1", "kind": "k", "meta": {"a": 1}, "state_dict": {}}, buf)
    (tmp_path / "m.pt").write_bytes(buf.getvalue())
    with pytest.raises(TensorFileError, match="meta"):
        load_tensor_file(tmp_path / "m.pt", "k")


def test_checkpoint_round_trip_is_bit_identical(tmp_path):
    """The tensors come back byte for byte, the tied embedding stays tied, and a PIL-solved
    model rebuilds its seeded features: the same outputs as before saving."""
    model = tiny()
    attach_pil(model, "bi", seed=5)
    for block in model.blocks:
        block.mlp.w_out.normal_()
    save_checkpoint(tmp_path / "m.pt", model, {"pil_features": "bi", "pil_seed": 5,
                                               "config": {"lr": 3e-3, "nan": float("nan")}})  # fmt: skip
    loaded = load_checkpoint(tmp_path / "m.pt")
    before, after = model.state_dict(), loaded.state_dict()
    assert before.keys() == after.keys()
    for k in before:
        assert before[k].dtype == after[k].dtype
        assert torch.equal(before[k].view(torch.uint8), after[k].view(torch.uint8)), k
    assert loaded.lm_head.weight.data_ptr() == loaded.wte.weight.data_ptr()
    x = torch.randint(0, 50, (1, 16))
    assert torch.equal(loaded(x)[0], model.eval()(x)[0])
    meta = load_tensor_file(tmp_path / "m.pt", "pillm.gpt").meta
    assert meta["model_args"] == model.cfg.to_dict() and meta["config"]["lr"] == 3e-3
    assert zipfile.is_zipfile(tmp_path / "m.pt")  # torch's own container, readable by torch.load


def test_the_sample_quality_classifier_is_a_tensor_file_too(tmp_path):
    """classifier.pt (the generative wing's feature classifier): same round trip, same refusal."""
    from pillm.generative.classifier import KIND, load_classifier
    from pillm.generative.sample_quality import FeatureCNN

    torch.manual_seed(0)
    model = FeatureCNN((1, 28, 28), feat_dim=8).eval()
    path = tmp_path / "classifier.pt"
    save_tensor_file(path, KIND, model.state_dict(), {"shape": [1, 28, 28], "cfg": {"feat_dim": 8}})
    x = torch.rand(3, 784) * 2 - 1
    assert torch.equal(load_classifier(str(path), "cpu")(x), model(x))
    marker = tmp_path / "pwned"
    torch.save({"state": Payload(marker), "shape": (1, 28, 28), "cfg": {"feat_dim": 8}}, path)
    with pytest.raises(TensorFileError, match=str(path)):
        load_classifier(str(path), "cpu")
    assert not marker.exists()
