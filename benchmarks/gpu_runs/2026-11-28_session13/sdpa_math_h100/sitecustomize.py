# Experiment only: SDPA may use neither flash nor memory-efficient attention (cuDNN's is left to
# runtime.deterministic, which turns it off in strict mode): strict runs get the math path.
import sys

import torch

torch.backends.cuda.enable_flash_sdp(False)
torch.backends.cuda.enable_mem_efficient_sdp(False)
print("sitecustomize: flash and memory-efficient SDPA off", file=sys.stderr)
