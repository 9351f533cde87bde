"""The TinyVLM toy vision-language model: tokens, splicing, training, resuming."""

from __future__ import annotations

import pytest
import torch

from rml_fast.models.digits_vlm import (
    PROMPTS,
    VOCAB,
    TinyVLM,
    TinyVLMConfig,
    decode,
    digits_vlm_images,
    encode,
    train_digits_vlm,
)


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_vocabulary_round_trip():
    assert len(VOCAB) == 32 and len(set(VOCAB)) == 32
    for p in PROMPTS:
        assert decode(encode(p), stop_at_eos=False) == p
    assert decode(encode("seven <eos> ok")) == "seven <eos>"
    with pytest.raises(ValueError, match="text"):
        encode("what is a cat ?")


def test_splice_places_image_rows_and_keeps_token_rows():
    vlm = TinyVLM(seed=1)
    x = torch.rand(2, 1, 16, 16, generator=torch.Generator().manual_seed(0))
    ids = vlm.input_ids(PROMPTS[0], "three <eos>", batch=2)
    e = vlm.image_embeds(x)
    emb = vlm.splice(ids, e)
    n = vlm.cfg.n_tokens
    assert torch.equal(emb[:, 1 : 1 + n], e)
    assert torch.equal(emb[:, 1 + n :], vlm.lm.W_E[ids[:, 1 + n :]])
    # each image token depends on its own patch only (vision encoder is per patch)
    x2 = x.clone()
    x2[:, :, :4, :4] += 0.5
    moved = (vlm.image_embeds(x2) - e).abs().sum(-1)
    assert bool((moved[:, 0] > 0).all()) and bool((moved[:, 1:] == 0).all())
    with pytest.raises(ValueError, match="image"):
        vlm.splice(ids[:, :-5], e[:, :3])


def test_causal_answer_does_not_see_the_future():
    vlm = TinyVLM(seed=2)
    x = torch.rand(1, 1, 16, 16, generator=torch.Generator().manual_seed(1))
    a = vlm(x, vlm.input_ids(PROMPTS[0], "three <eos>"))
    b = vlm(x, vlm.input_ids(PROMPTS[0], "five <eos>"))
    torch.testing.assert_close(a[:, :-2], b[:, :-2])


def test_bad_input():
    vlm = TinyVLM()
    with pytest.raises(ValueError, match="pixels"):
        vlm.image_embeds(torch.zeros(2, 3, 16, 16))
    with pytest.raises(TypeError, match="pixels"):
        vlm.image_embeds(torch.zeros(2, 1, 16, 16, dtype=torch.int64))
    with pytest.raises(ValueError, match="patch"):
        TinyVLMConfig(patch=3)
    with pytest.raises(ValueError, match="token_dropout"):
        train_digits_vlm(steps=1, token_dropout=1.0)


def test_resume_gives_the_uninterrupted_result(tmp_path):
    kw = dict(steps=6, batch_size=8, checkpoint_every=2)
    full = train_digits_vlm(**kw, checkpoint=tmp_path / "a.pt")
    part = train_digits_vlm(**kw, checkpoint=tmp_path / "b.pt", stop_after=3)
    assert len(part.losses) == 3
    resumed = train_digits_vlm(**kw, checkpoint=tmp_path / "b.pt")
    assert len(resumed.losses) == 6
    torch.testing.assert_close(resumed.losses, full.losses, rtol=1e-5, atol=1e-6)
    for (k, v), w in zip(full.model.state_dict().items(), resumed.model.state_dict().values(), strict=True):
        torch.testing.assert_close(v, w, rtol=1e-5, atol=1e-6, msg=k)
    with pytest.raises(ValueError, match="checkpoint"):
        train_digits_vlm(steps=6, batch_size=4, checkpoint=tmp_path / "a.pt")


def test_training_is_seeded_and_learns():
    a = train_digits_vlm(steps=40, batch_size=16, seed=3)
    b = train_digits_vlm(steps=40, batch_size=16, seed=3)
    assert a.losses == b.losses
    first, last = sum(a.losses[:5]) / 5, sum(a.losses[-5:]) / 5
    assert last < 0.8 * first
    x, _ = digits_vlm_images()
    assert a.model.predict_digit(x[:4]).shape == (4,)
