import math
import shutil

import pytest
import torch
from tokenizers import Tokenizer, pre_tokenizers
from tokenizers.models import WordLevel

from pillm.data.files import DataError
from pillm.data.lambada import (
    LambadaSet,
    _encode_example,
    generate_samples,
    lambada_accuracy,
    load_lambada,
    score_lambada,
)
from pillm.models.gpt import GPT, GPTConfig

V = 32  # w0..w30 and [UNK]
MARGIN = 20.0  # logit of the forced next token; all others 0


def toy_tokenizer() -> Tokenizer:
    """One token per word w0..w30 (id = number); '-' splits a word into two tokens."""
    vocab = {f"w{i}": i for i in range(31)} | {"[UNK]": 31}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split("-", behavior="removed")]
    )
    return tok


def tiny_gpt(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=V, context=32, n_layer=1, d_model=32, n_head=2))


class NextPlusOne(torch.nn.Module):
    """A real GPT (its length check included) whose logits are forced to 'next = current + 1':
    its final stream is those logits and its head the identity."""

    def __init__(self):
        super().__init__()
        self.gpt = tiny_gpt()
        self.cfg = self.gpt.cfg
        self.lm_head = torch.nn.Identity()
        self.max_len = 0

    def hidden(self, idx):
        stream = self.gpt.hidden(idx)  # asserts T <= context
        self.max_len = max(self.max_len, idx.shape[1])
        forced = MARGIN * torch.nn.functional.one_hot((idx + 1) % V, V).float()
        return forced + 0 * stream.sum(-1, keepdim=True)


# NLL of a token the forced model predicts / does not predict.
NLL_HIT = math.log1p((V - 1) * math.exp(-MARGIN))
NLL_MISS = math.log(math.exp(MARGIN) + V - 1)


def test_accuracy_and_nll_are_exact():
    passages = [
        "w1 w2 w3 w4",  # right
        "w5 w6 w7-w8",  # right, two target tokens
        "w5 w6 w7-w9",  # first target token right, second wrong: wrong
        "w1 w2 w3 w10",  # wrong
        "w9 w10",  # right, one-token context
    ]
    model = NextPlusOne().train()
    out = lambada_accuracy(model, toy_tokenizer(), passages, batch_size=2)
    assert out["lambada_acc"] == 3 / 5
    assert out["lambada_n"] == 5
    # 7 target tokens: 5 predicted, 2 not.
    assert math.isclose(out["lambada_target_nll"], (5 * NLL_HIT + 2 * NLL_MISS) / 7, rel_tol=1e-5)
    assert model.training  # previous mode restored


def test_left_truncation_keeps_the_end_and_fits_the_context():
    words = [f"w{i % 20}" for i in range(40)]  # 40 tokens > context 32; ends "w18 w19"
    wrong = words[:-1] + ["w3"]
    model = NextPlusOne()
    out = lambada_accuracy(model, toy_tokenizer(), [" ".join(words), " ".join(wrong)])
    assert out["lambada_acc"] == 1 / 2
    assert model.max_len == 31  # context + target = 32 tokens; the model reads all but the last


def test_padding_does_not_change_the_result():
    rng = torch.Generator().manual_seed(1)
    passages = []
    for _ in range(13):
        n = int(torch.randint(2, 45, (1,), generator=rng))
        ids = torch.randint(0, 31, (n,), generator=rng).tolist()
        passages.append(" ".join(f"w{i}" for i in ids))
    model, tok = tiny_gpt(seed=3), toy_tokenizer()
    one = lambada_accuracy(model, tok, passages, batch_size=1)
    many = lambada_accuracy(model, tok, passages, batch_size=8)
    assert one["lambada_acc"] == many["lambada_acc"]
    assert one["lambada_n"] == many["lambada_n"] == 13
    assert math.isclose(one["lambada_target_nll"], many["lambada_target_nll"], rel_tol=1e-6)


def test_real_mirror_loads(shared_data):
    passages = load_lambada("local", str(shared_data))
    assert len(passages) == 5153
    assert all(isinstance(p, str) and " " in p for p in passages)
    assert load_lambada("local", str(shared_data), max_examples=3) == passages[:3]
    origin: dict = {}  # where it came from, for the LM extras' run records
    load_lambada("local", str(shared_data), max_examples=3, origin=origin)
    assert origin["lambada"]["repo"] == "EleutherAI/lambada_openai"
    assert origin["lambada"]["revision"] is None and len(origin["lambada"]["sha256sums"]) == 64


def test_tampered_copy_is_rejected(shared_data, tmp_path):
    shutil.copy(shared_data / "SHA256SUMS", tmp_path / "SHA256SUMS")
    (tmp_path / "lambada").mkdir()
    copy = tmp_path / "lambada" / "lambada_test.jsonl"
    shutil.copy(shared_data / "lambada" / "lambada_test.jsonl", copy)
    copy.chmod(0o644)  # the mirror is read-only
    with open(copy, "ab") as fh:
        fh.write(b"\n")
    with pytest.raises(DataError, match="lambada_test.jsonl"):
        load_lambada("local", str(tmp_path))


def test_hub_offline_points_at_local(monkeypatch):
    import datasets
    from huggingface_hub.errors import OfflineModeIsEnabled

    def offline(*a, **k):
        raise OfflineModeIsEnabled("stand-in: the hub library reports offline mode")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataError, match="data.source: local"):
        load_lambada("hub", "unused")


def test_generate_samples_is_seeded():
    model, tok = tiny_gpt(seed=5), toy_tokenizer()
    prompts = ["w1 w2 w3", "w7"]
    a = generate_samples(model, tok, prompts, max_new_tokens=40, seed=11)
    b = generate_samples(model, tok, prompts, max_new_tokens=40, seed=11)
    c = generate_samples(model, tok, prompts, max_new_tokens=40, seed=12)
    assert a == b
    assert a != c
    assert [s["prompt"] for s in a] == prompts
    for s in a:
        assert isinstance(s["continuation"], str)
        assert len(s["continuation"].split()) == 40  # one word per token; past the context too
    # A prompt's sample does not depend on the other prompts.
    assert generate_samples(model, tok, prompts[1:], 40, seed=11) == a[1:]


def test_head_on_the_read_rows_equals_the_full_forward():
    """The head runs on the rows the targets are read at only; on CPU that is the full
    forward's result bit for bit."""

    class FullLogits(torch.nn.Module):  # the head on every position, then those rows
        def __init__(self, gpt):
            super().__init__()
            self.gpt, self.cfg, self.lm_head = gpt, gpt.cfg, torch.nn.Identity()

        def hidden(self, idx):
            return self.gpt(idx)[0]

    rng = torch.Generator().manual_seed(2)
    passages = [" ".join(f"w{i}" for i in torch.randint(0, 31, (n,), generator=rng).tolist())
                for n in (5, 9, 17, 33, 40)]  # fmt: skip
    model, tok = tiny_gpt(seed=4), toy_tokenizer()
    assert lambada_accuracy(model, tok, passages, batch_size=3) == lambada_accuracy(
        FullLogits(model), tok, passages, batch_size=3
    )


def _per_batch_reference(model, tok, passages, batch_size):
    """The pass as it was before LambadaSet (2026-11-28): each batch's log-probabilities copied
    to the host, argmax and NLL read there."""
    examples = [_encode_example(tok, p, model.cfg.context) for p in passages]
    order = sorted(range(len(examples)), key=lambda i: -len(examples[i][0]))
    n_correct, total_nll, n_target = 0, 0.0, 0
    model.eval()
    with torch.no_grad():
        for start in range(0, len(order), batch_size):
            batch = [examples[i] for i in order[start : start + batch_size]]
            idx = torch.zeros(len(batch), max(len(q) for q, _ in batch) - 1, dtype=torch.long)
            for r, (seq, _) in enumerate(batch):
                idx[r, : len(seq) - 1] = torch.tensor(seq[:-1])
            rows = [r for r, (_, n) in enumerate(batch) for _ in range(n)]
            pos = [len(seq) - 1 - n + j for seq, n in batch for j in range(n)]
            target = torch.tensor([t for seq, n in batch for t in seq[-n:]])
            logp = torch.log_softmax(
                model.lm_head(model.hidden(idx)[torch.tensor(rows), torch.tensor(pos)]).float(), -1
            )
            hit, nll = logp.argmax(-1) == target, -logp.gather(1, target[:, None])[:, 0].double()
            k = 0
            for _, n in batch:
                n_correct += int(hit[k : k + n].all())
                total_nll += nll[k : k + n].sum().item()
                k += n
            n_target += len(target)
    return {"lambada_acc": n_correct / len(examples),
            "lambada_target_nll": total_nll / n_target, "lambada_n": float(len(examples))}  # fmt: skip


def test_one_set_scores_several_models_as_the_per_batch_pass_did():
    """Encoded once and read back once per model: every model's result equals, bit for bit, the
    earlier pass that copied each batch back; a set cut for another context is refused."""
    rng = torch.Generator().manual_seed(5)
    passages = [" ".join(f"w{i}" for i in torch.randint(0, 31, (n,), generator=rng).tolist())
                for n in (3, 6, 9, 12, 20, 28, 40, 7)]  # fmt: skip
    tok = toy_tokenizer()
    models = [tiny_gpt(seed=s) for s in (1, 2, 3)]
    lam = LambadaSet.build(tok, passages, context=32, batch_size=3)
    for model in models:
        ref = _per_batch_reference(model, tok, passages, batch_size=3)
        assert score_lambada(model, lam) == ref
        assert ref["lambada_target_nll"] > 0 and ref["lambada_n"] == len(passages)
    short = LambadaSet.build(tok, passages, context=16, batch_size=3)
    with pytest.raises(ValueError, match="context 16, the model reads 32"):
        score_lambada(models[0], short)
    with pytest.raises(ValueError, match="no LAMBADA passages"):
        LambadaSet.build(tok, [], context=32)
