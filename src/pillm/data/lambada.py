"""LAMBADA last-word accuracy and seeded text samples for a trained ``GPT``.

LAMBADA (OpenAI's ``lambada_test.jsonl``, 5,153 passages) asks for the last word of a passage
whose prediction needs the whole passage. Scoring follows GPT-2 / lm-eval: split each passage at
its last space into a context and ``" " + last word``, encode the two separately, and count the
passage correct iff greedy argmax under teacher forcing reproduces every target token.

Sources follow ``pillm.data``: ``local`` reads the offline mirror (checked against its
``SHA256SUMS``), ``hub`` loads ``EleutherAI/lambada_openai`` at ``data.revisions.lambada``
(offline: a DataError naming data.local_dir), ``auto`` reads the mirror, built from the hub when
absent.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from pillm.data.files import hub_call, read_checksums, verify_file
from pillm.data.reading import read_jsonl
from pillm.data.revisions import Revisions, hub_source, local_record
from pillm.data.sources import resolve_source

LAMBADA_REL = "lambada/lambada_test.jsonl"  # mirror-relative, as written in SHA256SUMS


def load_lambada(
    source: str,
    local_dir: str | None,
    max_examples: int = 0,
    revisions: Revisions = None,
    origin: dict | None = None,
) -> list[str]:
    """Return the LAMBADA test passages, in file order.

    ``source="local"`` reads ``<data folder>/lambada/lambada_test.jsonl`` after verifying it
    against the folder's ``SHA256SUMS`` (a mismatch raises ``DataError`` naming the file);
    ``source="hub"`` loads the ``test`` split of ``EleutherAI/lambada_openai`` at
    ``revisions["lambada"]`` (``data.revisions``; None: the committed pins) and raises
    ``DataError`` naming data.local_dir when the hub library is offline. ``max_examples > 0``
    keeps the first N. ``origin``, when given, receives the provenance record
    (``pillm.data.revisions``) under ``"lambada"``.
    """
    source, local_dir = resolve_source(source, local_dir, revisions)
    if source == "local":
        root = Path(local_dir)
        verify_file(root, LAMBADA_REL, read_checksums(root))
        passages = read_jsonl(root / LAMBADA_REL, "text")
        record = local_record(root, "lambada")
    else:
        hub = hub_source("lambada", revisions)
        import datasets  # lazy: slow to import and unused on the local path

        what = f"{hub.repo_id!r} (LAMBADA; <data.local_dir>/{LAMBADA_REL} in the mirror)"
        ds = hub_call(
            what,
            datasets.load_dataset,
            hub.repo_id,
            hub.config,
            split="test",
            revision=hub.revision,
        )
        passages, record = list(ds["text"]), hub.record()
    if origin is not None:
        origin["lambada"] = record
    return passages[:max_examples] if max_examples > 0 else passages


def _encode_example(tok: Tokenizer, passage: str, context: int) -> tuple[list[int], int]:
    """Token sequence (context + target, left-truncated to ``context``) and the target length."""
    ctx_text, sep, last = passage.rpartition(" ")
    if not sep or not last:
        raise ValueError(f"LAMBADA passage has no last word after a space: {passage[-60:]!r}")
    # Encoded separately, as GPT-2/lm-eval do: the target's leading space belongs to it.
    ctx, tgt = tok.encode(ctx_text).ids, tok.encode(" " + last).ids
    if not tgt or len(tgt) >= context:
        raise ValueError(f"target {last!r} is {len(tgt)} tokens; need 1..{context - 1}")
    ctx = ctx[max(0, len(ctx) - (context - len(tgt))) :]  # keep the nearest context tokens
    if not ctx:
        raise ValueError(f"LAMBADA passage has an empty context: {passage[-60:]!r}")
    return ctx + tgt, len(tgt)


@dataclass(frozen=True)
class LambadaBatch:
    """One scoring batch on its device: right-padded inputs and where its targets are read."""

    idx: torch.Tensor  # (B, width) input ids; pad id 0 is never read
    rows: torch.Tensor  # (targets,) batch row of each target token
    pos: torch.Tensor  # (targets,) position whose logits predict it
    target: torch.Tensor  # (targets,) the token
    counts: tuple[int, ...]  # target tokens of each passage, in batch order


@dataclass(frozen=True)
class LambadaSet:
    """The passages encoded and cut into batches once, on the device: a process scoring several
    runs (``lm_extras``: every seed of a variant) pays the tokenizer and the copies once."""

    batches: tuple[LambadaBatch, ...]
    context: int
    n_passages: int

    @classmethod
    def build(
        cls,
        tok: Tokenizer,
        passages: list[str],
        context: int,
        batch_size: int = 32,
        device: str = "cpu",
    ) -> LambadaSet:
        """Each passage's context + target, cut from the left to at most ``context`` tokens, in
        batches of ``batch_size``, longest first (each batch pads little; the order changes no
        passage's score)."""
        if not passages:
            raise ValueError("no LAMBADA passages to score")
        examples = [_encode_example(tok, p, context) for p in passages]
        order = sorted(range(len(examples)), key=lambda i: -len(examples[i][0]))
        dev = torch.device(device)
        batches = []
        for start in range(0, len(order), batch_size):
            batch = [examples[i] for i in order[start : start + batch_size]]
            width = max(len(seq) for seq, _ in batch) - 1
            idx = torch.zeros(len(batch), width, dtype=torch.long)
            for r, (seq, _) in enumerate(batch):
                idx[r, : len(seq) - 1] = torch.tensor(seq[:-1])
            # Logit at position t predicts token t+1, so row r's targets seq[-n:] are read at
            # positions len(seq)-1-n .. len(seq)-2.
            rows = [r for r, (_, n) in enumerate(batch) for _ in range(n)]
            pos = [len(seq) - 1 - n + j for seq, n in batch for j in range(n)]
            target = [t for seq, n in batch for t in seq[-n:]]
            batches.append(
                LambadaBatch(
                    idx.to(dev), torch.tensor(rows, device=dev), torch.tensor(pos, device=dev),
                    torch.tensor(target, device=dev), tuple(n for _, n in batch),
                )
            )  # fmt: skip
        return cls(tuple(batches), context, len(examples))


def lambada_accuracy(
    model: torch.nn.Module,
    tok: Tokenizer,
    passages: list[str],
    device: str = "cpu",
    batch_size: int = 32,
) -> dict[str, float]:
    """``score_lambada`` of ``model`` on ``passages`` encoded for its context (one model; a
    process scoring several builds one ``LambadaSet`` and scores each with it)."""
    return score_lambada(
        model, LambadaSet.build(tok, passages, model.cfg.context, batch_size, device)
    )


def score_lambada(model: torch.nn.Module, lam: LambadaSet) -> dict[str, float]:
    """Last-word accuracy and target NLL of ``model`` (a ``pillm.models.gpt.GPT``: its
    ``hidden`` stream and ``lm_head``) on the prepared passages (on the model's device).

    A passage counts as correct iff argmax reproduces every target token under teacher forcing.
    Returns ``lambada_acc`` (fraction correct), ``lambada_target_nll`` (total target NLL in nats
    over the total number of target tokens of all passages) and ``lambada_n`` (passages scored).
    It is evaluated in eval mode and its previous mode restored. Results do not depend on the
    batch size: rows are right-padded, and causal attention keeps padding from reaching the
    positions that are read.
    """
    if model.cfg.context != lam.context:
        raise ValueError(
            f"the LAMBADA passages were cut for context {lam.context}, the model reads "
            f"{model.cfg.context}: build the LambadaSet with the model's context"
        )
    hits, nlls = [], []
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for b in lam.batches:
                # The head runs on the read rows of the final stream only: the (B, T, V) logits
                # of every position were most of the pass (float32 FLOPs, 0.5 GB a batch for a
                # GPT-2 vocab), read at ~2 % of their rows. A row's logits do not depend on the
                # other rows.
                picked = model.lm_head(model.hidden(b.idx)[b.rows, b.pos])
                logp = F.log_softmax(picked.float(), dim=-1)  # (targets in batch, V)
                hits.append(logp.argmax(-1) == b.target)
                nlls.append(-logp.gather(1, b.target[:, None])[:, 0].double())
    finally:
        model.train(was_training)
    # One copy to the host after the last batch: the GPU runs every batch without waiting for
    # it (the pass used to copy each batch's (targets, V) log-probabilities back and wait).
    hit, nll = torch.cat(hits).cpu(), torch.cat(nlls).cpu()
    n_correct, total_nll, k = 0, 0.0, 0
    for b in lam.batches:
        for n in b.counts:
            n_correct += int(hit[k : k + n].all())
            total_nll += nll[k : k + n].sum().item()
            k += n
    return {
        "lambada_acc": n_correct / lam.n_passages,
        "lambada_target_nll": total_nll / k,
        "lambada_n": float(lam.n_passages),
    }


def generate_samples(
    model: torch.nn.Module,
    tok: Tokenizer,
    prompts: list[str],
    max_new_tokens: int,
    seed: int,
    temperature: float = 0.8,
    top_k: int = 40,
    device: str = "cpu",
) -> list[dict]:
    """Top-k sample ``max_new_tokens`` tokens after each prompt; ``[{"prompt", "continuation"}]``.

    Each prompt is sampled from a ``torch.Generator`` seeded with ``seed`` afresh, so a prompt's
    continuation depends only on (model, prompt, seed, settings), not on the other prompts, and is
    identical across runs on CPU. The model reads at most the last ``model.cfg.context`` tokens.
    ``top_k <= 0`` samples from the full distribution. The model must already be on ``device``;
    its training mode is restored afterwards.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    dev = torch.device(device)
    gen = torch.Generator(device="cpu")  # sampling on CPU keeps one seed meaning one stream
    out = []
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for prompt in prompts:
                ids = tok.encode(prompt).ids
                if not ids:
                    raise ValueError(f"prompt {prompt!r} encodes to no tokens")
                gen.manual_seed(seed)
                seq = torch.tensor([ids], dtype=torch.long, device=dev)
                new: list[int] = []
                for _ in range(max_new_tokens):
                    logits, _ = model(seq[:, -model.cfg.context :])
                    last = logits[0, -1].float().cpu() / temperature
                    if 0 < top_k < last.numel():
                        kth = torch.topk(last, top_k).values[-1]
                        last = last.masked_fill(last < kth, float("-inf"))
                    nxt = int(torch.multinomial(F.softmax(last, dim=-1), 1, generator=gen))
                    new.append(nxt)
                    seq = torch.cat([seq, torch.tensor([[nxt]], device=dev)], dim=1)
                out.append({"prompt": prompt, "continuation": tok.decode(new)})
    finally:
        model.train(was_training)
    return out
