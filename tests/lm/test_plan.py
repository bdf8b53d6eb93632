"""The LM plan's job arguments read back through the CLI parser: each GPU rule's command line
carries the values the plan derives from the config (seeds, params, folders), one per run."""

import shlex

import pytest
import yaml

from pillm.cli import build_parser
from pillm.core.config import apply_schema
from pillm.lm import plan

from ..conftest import REPO

ROOT = "results/x"


@pytest.fixture(scope="module", params=["config.yaml", "smoke.yaml"])
def cfg(request) -> dict:
    config = yaml.safe_load((REPO / "config" / request.param).read_text())
    return apply_schema(config, REPO / "config/schema.yaml")


def parse(command: str, args: str, variant: str | None = None):
    head = [command, *(["--variant", variant] if variant else [])]
    return build_parser().parse_args([*head, *shlex.split(args), "--device", "cpu"])


def test_run_args_name_the_runs_their_dependencies_and_params(cfg):
    seeds = cfg["lm"]["seeds"]
    args = parse("run-lm", plan.run_args(cfg, "attn_then_pil", ROOT), "attn_then_pil")
    assert args.seeds == seeds
    assert args.tokens_dir == f"{ROOT}/tokens/{cfg['data']['corpus']}"
    assert args.deps == [f"attn_only={ROOT}/lm/attn_only"]
    assert args.params == plan.lm_params(cfg, "attn_then_pil")
    assert args.out_dirs == [f"{ROOT}/lm/attn_then_pil/seed{s}" for s in seeds]
    assert parse("run-lm", plan.run_args(cfg, "baseline", ROOT), "baseline").deps == []


def test_extras_args_name_every_run_of_the_variant(cfg):
    args = parse("lm-extras", plan.extras_args(cfg, "refit", ROOT))
    assert args.run_dirs == [f"{ROOT}/lm/refit/seed{s}" for s in cfg["lm"]["seeds"]]
    assert args.params == plan.extras_params(cfg)


def test_sensitivity_args_give_one_params_set_and_folder_per_run(cfg):
    grid = list(plan.sensitivity_points(cfg))
    args = parse("run-lm", plan.sensitivity_args(cfg, "attn_only", 2, ROOT), "attn_only")
    assert args.seeds == [2] * len(grid)
    assert args.params == [plan.sensitivity_params(cfg, "attn_only", p) for p in grid]
    assert args.out_dirs == [f"{ROOT}/sensitivity/attn_only/{p}/seed2" for p in grid]
    sens = cfg["sensitivity"]
    assert len(args.out_dirs) == len(grid) == len(sens["lrs"]) * len(sens["dropouts"])


def test_sensitivity_jobs_one_per_variant_and_seed_cover_every_run(cfg):
    """The seeds of a variant run as jobs of their own (side by side on a GPU host); together
    the jobs write every run the report reads."""
    outputs = plan.sensitivity_outputs(cfg)["metrics"]
    written = {
        f.replace("{variant,baseline|attn_only|ffn_only}", v).replace("{seed,[0-9]+}", str(s))
        for v in cfg["sensitivity"]["variants"]
        for s in cfg["sensitivity"]["seeds"]
        for f in outputs
    }
    assert written == set(plan.sensitivity_files(cfg, "metrics.json"))


def test_sensitivity_wildcard_allows_the_schemas_variants():
    schema = yaml.safe_load((REPO / "config/schema.yaml").read_text())
    items = schema["properties"]["sensitivity"]["properties"]["variants"]["items"]
    assert list(plan.SENSITIVITY_VARIANTS) == items["enum"]
