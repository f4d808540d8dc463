"""[augment] context_dropout: a share of each mention batch encoded without its context."""
import numpy as np
import pytest

from spacy_pel.models.encoder import BiEncoder
from spacy_pel.models.pieces import Mention
from spacy_pel.training.config import ConfigError, RetrieverConfig
from spacy_pel.training.context_dropout import drop_context, without_context
from spacy_pel.training.retriever import RetrieverTask, train
from spacy_pel.training.run_config import config_for_run
from spacy_pel.training.stages import Examples

from .test_train import CONFIG, corpus, overrides  # noqa: F401 (fixture)

TEXTS = [("Then atrial flutter began after the dose.", "atrial flutter"), ("Li2CO3 toxicity was seen.", "Li2CO3"),
         ("We gave acetylsalicylic acid twice.", "acetylsalicylic acid"), ("Warfarin then.", "Warfarin")]


def examples(encoder):
    mentions = [Mention(t, t.index(m), t.index(m) + len(m)) for t, m in TEXTS]
    return Examples(encoder.mention_inputs(mentions), [{n} for n in range(len(TEXTS))])


def test_without_context_is_the_mention_input_of_the_mention_alone(tiny_encoder_dir):
    """Dropping the context gives exactly what the encoder makes of the mention's text on its own
    (a cut that kept a context piece or lost a marker fails)."""
    encoder = BiEncoder.from_pretrained(tiny_encoder_dir)
    tok = encoder.tokenizer
    for item, (_, m) in zip(examples(encoder).inputs, TEXTS):
        alone = encoder.mention_inputs([Mention(m, 0, len(m))])[0]
        assert without_context(item, tok.cls_token_id, tok.sep_token_id) == alone
        assert len(item[0]) > len(alone[0])  # the context was there to drop


def test_drop_context_draws_its_share_by_seed_and_step(tiny_encoder_dir):
    encoder = BiEncoder.from_pretrained(tiny_encoder_dir)
    tok = encoder.tokenizer
    ex = examples(encoder)
    big = Examples(ex.inputs * 250, ex.gold * 250)
    args = (tok.cls_token_id, tok.sep_token_id)
    assert drop_context(big, 0.0, 0, 5, *args).inputs == big.inputs
    alone = [without_context(x, *args) for x in big.inputs]
    assert drop_context(big, 1.0, 0, 5, *args).inputs == alone
    out = drop_context(big, 0.3, 0, 5, *args)
    dropped = np.mean([a == b != c for a, b, c in zip(out.inputs, alone, big.inputs)])
    assert 0.25 < dropped < 0.35 and out.gold == big.gold
    assert drop_context(big, 0.3, 0, 5, *args).inputs == out.inputs  # a resumed run draws the same
    assert drop_context(big, 0.3, 0, 6, *args).inputs != out.inputs  # another step, other mentions
    assert drop_context(big, 0.3, 1, 5, *args).inputs != out.inputs  # another seed, other mentions


def test_retriever_mention_batches_drop_context_as_set(corpus, kb_dir, tiny_encoder_dir, tmp_path):  # noqa: F811
    ov = overrides(corpus, kb_dir, tiny_encoder_dir, **{"training.max_steps": 4, "training.batch_size": 4})
    plain = RetrieverTask(config_for_run(RetrieverConfig, CONFIG, tmp_path / "a", ov)[0])
    ov["augment.context_dropout"] = 1.0
    task = RetrieverTask(config_for_run(RetrieverConfig, CONFIG, tmp_path / "b", ov)[0])
    tok = task.encoder.tokenizer
    for a, b in zip(plain.batches(0), task.batches(0)):
        assert list(a.idx) == list(b.idx)
        assert b.examples.inputs == [without_context(x, tok.cls_token_id, tok.sep_token_id) for x in a.examples.inputs]
        assert any(len(x[0]) > len(y[0]) for x, y in zip(a.examples.inputs, b.examples.inputs))


def test_context_dropout_is_a_share(corpus, kb_dir, tiny_encoder_dir, tmp_path):  # noqa: F811
    for bad in (-0.1, 1.5):
        with pytest.raises(ConfigError, match="context_dropout"):
            train(CONFIG, tmp_path / "run", overrides(corpus, kb_dir, tiny_encoder_dir, **{"augment.context_dropout": bad}),
                  progress=False)
