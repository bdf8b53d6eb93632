"""pillm.core.adamw.AdamW: torch's AdamW, bit for bit, without importing torch._dynamo."""

import subprocess
import sys
from pathlib import Path

import torch

from pillm.core.adamw import AdamW

SRC = Path(__file__).resolve().parents[2] / "src"


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16),
                               torch.nn.GELU(), torch.nn.Linear(16, 3))  # fmt: skip


def _groups(model: torch.nn.Module) -> list[dict]:
    params = list(model.parameters())
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]  # fmt: skip


def _train(opt_class, foreach: bool) -> tuple[torch.nn.Module, dict]:
    model = _model(0)
    opt = opt_class(_groups(model), lr=3e-3, betas=(0.9, 0.95), foreach=foreach)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 8)
    x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
    for _ in range(6):
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        sched.step()
    return model, opt.state_dict()


def test_same_weights_and_state_as_torch_adamw_bit_for_bit():
    for foreach in (False, True):
        ours, our_state = _train(AdamW, foreach)
        torchs, torch_state = _train(torch.optim.AdamW, foreach)
        for a, b in zip(ours.parameters(), torchs.parameters(), strict=True):
            assert torch.equal(a, b)
        for k, s in torch_state["state"].items():
            assert all(torch.equal(s[n], our_state["state"][k][n]) for n in s)
        assert our_state["param_groups"] == torch_state["param_groups"]


def test_the_state_loads_back():
    model, state = _train(AdamW, False)
    opt = AdamW(_groups(model), lr=1.0)
    opt.load_state_dict(state)
    assert opt.state_dict()["param_groups"] == state["param_groups"]


def test_training_never_imports_dynamo():
    """The point of the class: a CPU job that trains skips torch._dynamo's import."""
    code = (
        "import sys, torch\nfrom pillm.core.adamw import AdamW\n"
        "m = torch.nn.Linear(4, 2)\nopt = AdamW(m.parameters(), lr=0.1)\n"
        "m(torch.randn(3, 4)).sum().backward()\nopt.step()\nopt.zero_grad()\nopt.state_dict()\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"


def test_no_module_builds_torchs_own_adamw():
    """Every optimizer of the pipeline is this one, else its job pays the import again."""
    direct = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
              if "torch.optim.AdamW(" in p.read_text()]  # fmt: skip
    assert direct == []
