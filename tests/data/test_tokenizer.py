import numpy as np

from pillm.data.tokenizer import decode, encode, gpt2_tokenizer, train_bpe

TEXT = " = Valkyria Chronicles III = \n Senjō no Valkyria 3 : <unk> Chronicles .\n" * 20


def test_gpt2_local_matches_reference_ids(shared_data):
    tok = gpt2_tokenizer("local", str(shared_data))
    assert tok.get_vocab_size() == 50257
    assert tok.encode("Hello world").ids == [15496, 995]


def test_round_trip_gpt2_and_trained_bpe(shared_data):
    for tok in (gpt2_tokenizer("local", str(shared_data)), train_bpe(TEXT, vocab_size=300)):
        ids = encode(tok, TEXT)
        assert ids.dtype == np.uint16
        assert decode(tok, ids) == TEXT


def test_trained_bpe_is_deterministic_and_respects_vocab():
    a, b = train_bpe(TEXT, 300), train_bpe(TEXT, 300)
    assert a.get_vocab_size() <= 300
    assert a.to_str() == b.to_str()


def _corpus(root, texts):
    """A corpus folder as prepare_corpus writes it: split texts and meta.json."""
    import json

    root.mkdir()
    for split, text in texts.items():
        (root / f"{split}.txt").write_text(text, encoding="utf-8")
    meta = {"corpus": "toy", "policy": "local:toy:the toy splits",
            "bytes": {s: len(t.encode()) for s, t in texts.items()}}  # fmt: skip
    (root / "meta.json").write_text(json.dumps(meta))
    return root


def test_eval_tokens_keeps_the_first_tokens_of_valid_and_test_and_says_so(tmp_path):
    """data.eval_tokens: the first N tokens of the validation and test splits (train whole), the
    policy stating it, bytes in proportion to the tokens kept; 0 writes the whole splits."""
    import json

    from pillm.data.corpus import tokenize_corpus

    words = "the cat sat on the mat and the dog sat on the log . "
    texts = {"train": words * 200, "valid": words * 40, "test": words * 60}
    corpus = _corpus(tmp_path / "corpus", texts)
    whole, capped = tmp_path / "whole", tmp_path / "capped"
    tokenize_corpus(str(corpus), "bpe", 300, "local", None, str(whole), eval_tokens=0)
    tokenize_corpus(str(corpus), "bpe", 300, "local", None, str(capped), eval_tokens=50)
    m_whole = json.loads((whole / "meta.json").read_text())
    m_capped = json.loads((capped / "meta.json").read_text())
    assert m_whole["policy"] == "local:toy:the toy splits" and "full_tokens" not in m_whole
    assert m_capped["policy"] == "local:toy:the toy splits; valid/test: first 50 tokens"
    assert m_capped["full_tokens"] == m_whole["tokens"]
    for split in ("train", "valid", "test"):
        a, b = np.load(whole / f"{split}.npy"), np.load(capped / f"{split}.npy")
        n = len(a) if split == "train" else 50
        assert len(a) > 50 and m_capped["tokens"][split] == n
        np.testing.assert_array_equal(b, a[:n])
        share = n / len(a)
        assert m_capped["bytes"][split] == m_whole["bytes"][split] * share
