"""SAFFU's AdamW update (``adamw_step``) of the ``src`` tree given: five steps at the paper shape
(4,098 inputs, 50,257 types, 20 non-zeros a row, batch 1,024, Zipf-drawn inputs so that the
frequent ones are cut into partial rows), printing the sha256 of the weights and both moments.
Run once per tree in one call: equal digests mean equal bits.

    python update_bits.py old/src    # f8a4f3e: the update and a separate merge launch
    python update_bits.py src        # one launch
"""

import hashlib
import sys

sys.path.insert(0, sys.argv[1])

import torch  # noqa: E402

from pillm.saffu.segment_sum import AdamWScalars, adamw_step  # noqa: E402

g = torch.Generator(device="cpu").manual_seed(0)
n_in, vocab, b, k = 4098, 50257, 1024, 20
p = 1.0 / torch.arange(1, n_in + 1, dtype=torch.float64)
idx = torch.multinomial(p, b * k, replacement=True, generator=g).view(b, k).cuda()
wts = torch.rand(b, k, generator=g)
wts = (wts / wts.sum(1, keepdim=True)).cuda()
w = (torch.randn(n_in, vocab, generator=g) * 0.02).cuda()
m, v = torch.zeros_like(w), torch.zeros_like(w)
for t in range(1, 6):
    grad = (torch.randn(b, vocab, generator=g) / b).cuda()
    adamw_step(idx, wts, grad, w, m, v, AdamWScalars.at(1e-3 * t, (0.9, 0.99), 1e-8, 0.1, t))
torch.cuda.synchronize()
longest = int(torch.bincount(idx.flatten(), minlength=n_in).max())
digest = hashlib.sha256()
for x in (w, m, v):
    digest.update(x.cpu().numpy().tobytes())
print(f"{sys.argv[1]}: longest input {longest} entries; sha256(w, m, v) {digest.hexdigest()}")
