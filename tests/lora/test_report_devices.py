"""The LoRA section's sentence on where the jobs ran (``LoraReport.devices_sentence``): one
device named once when both models' jobs ran on it, each model's device otherwise."""

from __future__ import annotations

import polars as pl

from pillm.lora.report import LoraReport


def devices(*groups: tuple[str, str]) -> str:
    rows = [{"model": f"{g}-s0", "method": "lora", "model_group": g, "model_label": g,
             "device_name": d, "accuracy": 0.5, "identical_rerun": 1.0}
            for g, d in groups]  # fmt: skip
    rep = LoraReport(pl.DataFrame(rows), pl.DataFrame({"model": []}), {})
    return rep.devices_sentence()


def test_one_shared_device_is_named_once():
    assert devices(("pillm", "NVIDIA H200"), ("minilm", "NVIDIA H200")) == (
        "Both models' jobs ran on NVIDIA H200"
    )


def test_two_devices_are_named_per_model_in_display_order():
    assert devices(("minilm", "CPU"), ("pillm", "NVIDIA H200")) == (
        "The \\pillm{} jobs ran on NVIDIA H200 and the MiniLM jobs on CPU"
    )


def test_a_model_without_jobs_is_left_out():
    assert devices(("minilm", "CPU")) == "The MiniLM jobs ran on CPU"
