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
