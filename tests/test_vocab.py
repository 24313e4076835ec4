"""The SentencePiece vocabulary stage (data_prep.vocab): the same corpus and settings give the same bytes."""

from sentencepiece import sentencepiece_model_pb2

from data_prep.vocab import train_vocab
from ems.text import SPM_FILE, TOKENIZER_FILE


def test_the_same_corpus_gives_the_same_spm_model_bytes_and_no_temporary_path(tiny_pipeline, tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    for out in (first, second):
        train_vocab(tiny_pipeline / "corpus" / "train", out, vocab_size=1000)
    data = (first / SPM_FILE).read_bytes()
    assert data == (second / SPM_FILE).read_bytes()
    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(data)
    # SentencePiece wrote the temporary input file's name and the staging directory's path here
    assert list(model.trainer_spec.input) == [] and not model.trainer_spec.HasField("model_prefix")
    assert len(model.pieces) == 1000
    assert (first / TOKENIZER_FILE).read_bytes() == (second / TOKENIZER_FILE).read_bytes()
