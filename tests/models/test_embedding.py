"""The token embedding's fixed-point backward (pillm.models.embedding)."""

import pytest
import torch
import torch.nn.functional as F

from pillm.core.runtime import deterministic
from pillm.models import embedding as emb
from pillm.models.embedding import _FixedPointEmbedding, embed, embedding_grad
from tests.triton_interpreter import run_interpreter_check


def _batch(device="cpu", vocab=97, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (8, 64), generator=g)
    ids[:, ::2] = 5  # one id repeated hundreds of times, as a frequent token is
    grad = torch.randn(8, 64, d, generator=g) * torch.logspace(-6, 1, d)  # entries of all sizes
    return ids.to(device), grad.to(device), vocab


def test_fixed_point_sum_matches_exact_sums_and_ignores_order():
    """The gradient equals float64 sums to float32 precision (the serial float32 sum of
    F.embedding's backward is no closer), and permuting the rows changes no bit: the sum is
    exact integer addition, so the order atomics land in cannot matter."""
    ids, grad, vocab = _batch()
    ours = embedding_grad(grad, ids, vocab)
    exact = torch.zeros(vocab, grad.shape[-1], dtype=torch.float64)
    exact.index_add_(0, ids.reshape(-1), grad.reshape(-1, grad.shape[-1]).double())
    top = grad.abs().max().item()
    # float32 rounding of the exact sum, plus the fixed-point step (2**-47 of the top entry here)
    assert torch.allclose(ours.double(), exact, rtol=2**-23, atol=1e-12 * top)
    w = torch.zeros(vocab, grad.shape[-1], requires_grad=True)
    F.embedding(ids, w).backward(grad)
    assert (w.grad.double() - exact).abs().max() >= (ours.double() - exact).abs().max()
    perm = torch.randperm(ids.numel(), generator=torch.Generator().manual_seed(1))
    shuffled = embedding_grad(grad.reshape(-1, grad.shape[-1])[perm], ids.reshape(-1)[perm], vocab)
    assert torch.equal(ours, shuffled)
    assert torch.equal(ours[ids.unique()].ne(0).any(1), torch.ones(len(ids.unique()), dtype=bool))
    absent = torch.ones(vocab, dtype=bool)
    absent[ids.unique()] = False
    assert ours[absent].abs().max() == 0  # ids not in the batch get no gradient


def test_non_finite_gradients_stay_non_finite():
    """A NaN or inf among the rows makes the sum NaN (no finite garbage from the int cast)."""
    ids, grad, vocab = _batch()
    grad[0, 0, 0] = float("inf")
    assert embedding_grad(grad, ids, vocab).isnan().all()


def test_embedding_function_gives_the_fixed_point_gradient_and_compiles():
    """The autograd function: F.embedding forward, the op's gradient backward; the custom op
    traces under torch.compile (its fake shape), as the compiled training step needs."""
    ids, grad, vocab = _batch()
    w = torch.randn(vocab, grad.shape[-1], requires_grad=True)
    out = _FixedPointEmbedding.apply(w, ids)
    assert torch.equal(out, F.embedding(ids, w))
    out.backward(grad)
    assert torch.equal(w.grad, embedding_grad(grad, ids, vocab))
    w2 = w.detach().clone().requires_grad_()
    compiled = torch.compile(lambda w, i: _FixedPointEmbedding.apply(w, i), backend="aot_eager")
    compiled(w2, ids).backward(grad)
    assert torch.equal(w2.grad, w.grad)


def test_embed_is_plain_embedding_on_cpu():
    """CPU training (and nondeterministic CUDA) keeps F.embedding: CPU results stay as before."""
    ids, grad, vocab = _batch()
    w = torch.randn(vocab, grad.shape[-1], requires_grad=True)
    with deterministic(True, strict=True):
        out = embed(w, ids)
    assert out.grad_fn.name() == "EmbeddingBackward0"


@pytest.mark.gpu
def test_deterministic_embedding_on_cuda():
    """Strict deterministic mode on CUDA: the fixed-point path, equal gradients on a rerun and
    close to F.embedding's (float32) gradient."""
    ids, grad, vocab = _batch("cuda", vocab=50257, d=256)
    grads = []
    for _ in range(2):
        w = torch.zeros(vocab, 256, device="cuda", requires_grad=True)
        with deterministic(True, strict=True):
            out = embed(w, ids)
            assert out.grad_fn.name() != "EmbeddingBackward0"
            out.backward(grad)
        grads.append(w.grad)
    assert torch.equal(grads[0], grads[1])
    w = torch.zeros(vocab, 256, device="cuda", requires_grad=True)
    F.embedding(ids, w).backward(grad)
    assert torch.allclose(grads[0], w.grad, rtol=0, atol=1e-6 * grad.abs().max().item())


def _ties(device="cpu", vocab=7, d=16):
    """Rows whose fixed-point values are exact halves (±0.5 ... ±3.5): rounding ties, which
    must go to the even integer as torch.round's do. The largest entry is 1, so the scale is
    2**bits exactly (512 rows: bits = 53)."""
    n = 512
    bits = 62 - 9
    halves = torch.tensor([-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5])
    grad = halves[torch.arange(n * d) % 8].reshape(n, d) * 2.0**-bits
    grad[0, 0] = 1.0
    ids = torch.arange(n) % vocab
    return ids.to(device), grad.to(device), vocab


def _torch_sums(grad, ids, vocab):
    """embedding_grad by its torch operations (the kernels' reference), wherever it runs."""
    kernels = emb.uses_kernels
    emb.uses_kernels = lambda device: False
    try:
        return embedding_grad(grad, ids, vocab)
    finally:
        emb.uses_kernels = kernels


def _interpreter_check() -> None:
    """Under TRITON_INTERPRET=1: the kernels give the torch path's float32 sums bit for bit
    (a padded width too, and a non-finite gradient)."""
    assert emb.uses_kernels(torch.device("cpu")), "the interpreter did not engage"
    for vocab, d in ((97, 16), (61, 20)):
        ids, grad, vocab = _batch(vocab=vocab, d=d)
        ours = embedding_grad(grad, ids, vocab)
        assert torch.equal(ours, _torch_sums(grad, ids, vocab)), (vocab, d)
        assert ours.abs().max() > 0
    ids, grad, vocab = _ties()
    assert torch.equal(embedding_grad(grad, ids, vocab), _torch_sums(grad, ids, vocab))
    grad[0, 0] = float("nan")
    assert embedding_grad(grad, ids, vocab).isnan().all()
    print("interpreter ok")


def test_fixed_point_kernels_match_the_torch_sums_in_the_interpreter():
    run_interpreter_check("tests.models.test_embedding")


@pytest.mark.gpu
def test_fixed_point_kernels_match_the_torch_sums_on_cuda():
    """At the paper's shape (32,768 rows of width 256, vocabulary 50,257, one id in every
    second position) the kernels' sums equal the torch path's bit for bit."""
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 50257, (256, 128), generator=g)
    ids[:, ::2] = 11
    grad = torch.randn(256, 128, 256, generator=g) * torch.logspace(-6, 1, 256)
    ids, grad = ids.cuda(), grad.cuda()
    assert torch.equal(embedding_grad(grad, ids, 50257), _torch_sums(grad, ids, 50257))
    ids, grad, vocab = _ties("cuda")
    assert torch.equal(embedding_grad(grad, ids, vocab), _torch_sums(grad, ids, vocab))


def test_gpt_token_embedding_keeps_the_module_contract():
    """GPT.wte is an nn.Embedding (same state-dict key, init, forward hooks: the probe reads
    the ids through one) whose forward is embed."""
    from pillm.models.embedding import TokenEmbedding
    from pillm.models.gpt import GPT, GPTConfig

    model = GPT(GPTConfig(vocab_size=40, context=8, n_layer=1, d_model=16, n_head=2))
    assert isinstance(model.wte, TokenEmbedding) and isinstance(model.wte, torch.nn.Embedding)
    assert "wte.weight" in model.state_dict() and model.lm_head.weight is model.wte.weight
    seen = []
    model.wte.register_forward_hook(lambda mod, args, out: seen.append(args[0]))
    ids = torch.randint(0, 40, (2, 8))
    model(ids)
    assert len(seen) == 1 and torch.equal(seen[0], ids)
