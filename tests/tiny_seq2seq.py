"""Tiny seeded encoder-decoder models (text and speech) and their drafters, built in memory (no downloads)."""

from __future__ import annotations

import copy

import torch
from transformers import AutoConfig, AutoModelForSeq2SeqLM, WhisperConfig, WhisperForCausalLM
from transformers import WhisperForConditionalGeneration

from tiny_models import BOS, EOS, PAD, VOCAB

#: Text encoder-decoder families, one per way a decoder places its tokens: learned positions counted from the cache
#: (BART, mBART, Marian), sinusoidal ones (Pegasus), a relative bias (T5).
TEXT = ("bart", "mbart", "marian", "pegasus", "t5")


def _sharpen(model):
    # As tiny_models._finish: sharper next-token distributions than random init gives.
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)
    model.eval()
    config = model.generation_config
    config.pad_token_id, config.bos_token_id, config.eos_token_id = PAD, BOS, EOS
    config.forced_bos_token_id = config.forced_eos_token_id = None
    config.max_length = None
    return model


def text(family: str = "bart", seed: int = 0, layers: int = 2, d_model: int = 32, decoder_layers: int | None = None,
         vocab: int = VOCAB):
    """A `family` encoder-decoder LM (transformers' Seq2Seq mapping) with VOCAB tokens, untied head."""
    torch.manual_seed(seed)
    decoder_layers = layers if decoder_layers is None else decoder_layers
    if family == "t5":
        size = dict(d_model=d_model, d_kv=d_model // 4, d_ff=2 * d_model, num_layers=layers,
                    num_decoder_layers=decoder_layers, num_heads=4, relative_attention_num_buckets=8)
    else:
        size = dict(d_model=d_model, encoder_layers=layers, decoder_layers=decoder_layers, encoder_attention_heads=4,
                    decoder_attention_heads=4, encoder_ffn_dim=2 * d_model, decoder_ffn_dim=2 * d_model,
                    max_position_embeddings=256)
    config = AutoConfig.for_model(
        family, vocab_size=vocab, pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS, decoder_start_token_id=EOS
        if family != "t5" else PAD, tie_word_embeddings=False, **size,
    )
    if family == "marian":
        config.decoder_vocab_size = vocab
    model = AutoModelForSeq2SeqLM.from_config(config)
    _discourage_eos(model)
    return _sharpen(model)


def _discourage_eos(model, bias: float = -4.0):
    """EOS made rare, so outputs run long enough for drafts to be rejected part-way (a random decoder otherwise
    often ends at once)."""
    with torch.no_grad():
        head = model.get_output_embeddings()
        if getattr(head, "bias", None) is not None:
            head.bias[EOS] += bias
        elif hasattr(model, "final_logits_bias"):
            model.final_logits_bias[0, EOS] += bias
        else:  # a head without bias: EOS and PAD (T5's start token, which it would repeat) scored 0, rarely the top
            head.weight[[EOS, PAD]] = 0.0


#: Whisper's special tokens in the tiny vocabulary (its generate() reads them from the generation config); the
#: timestamp tokens follow no_timestamps up to the end (<|0.00|> ... <|0.50|>), as Whisper's tokenizer lays them out.
WHISPER_TOKENS = dict(sot=64, en=65, de=66, transcribe=67, translate=68, no_timestamps=69)


def whisper_tokenizer():
    """A WhisperTokenizer over the tiny vocabulary: ids 3-63 are the words `w3` ... `w63`, then WHISPER_TOKENS and
    the timestamps (no merges: decoding is all the tests ask of it)."""
    from transformers import WhisperTokenizer

    t = WHISPER_TOKENS
    special = {"<|endoftext|>": EOS, "<|startoftranscript|>": t["sot"], "<|en|>": t["en"], "<|de|>": t["de"],
               "<|transcribe|>": t["transcribe"], "<|translate|>": t["translate"],
               "<|notimestamps|>": t["no_timestamps"]}
    vocab = {"<pad>": PAD, "<s>": BOS, **{f"w{i}": i for i in range(3, t["sot"])}, **special}
    vocab.update({f"<|{0.02 * (i - t['no_timestamps'] - 1):.2f}|>": i for i in range(t["no_timestamps"] + 1, VOCAB)})
    tokenizer = WhisperTokenizer(vocab=vocab, merges=[], pad_token="<pad>")
    tokenizer.add_special_tokens({"additional_special_tokens": list(special)})
    return tokenizer


def whisper_feature_extractor(frames: int = 32):
    """Log-mel features of 8 bins over `frames` frames of 10 ms (the tiny Whisper's whole input window)."""
    from transformers import WhisperFeatureExtractor

    extractor = WhisperFeatureExtractor(feature_size=8, sampling_rate=16000, hop_length=160, chunk_length=1)
    extractor.n_samples, extractor.nb_max_frames, extractor.chunk_length = 160 * frames, frames, frames / 100
    return extractor


def whisper(seed: int = 0, layers: int = 2, d_model: int = 32, decoder_layers: int | None = None, frames: int = 32):
    """A Whisper over 8 mel bins and `frames` frames (max_source_positions = frames / 2), with a generation config
    that names language, task and timestamp tokens as a multilingual checkpoint's does."""
    torch.manual_seed(seed)
    t = WHISPER_TOKENS
    config = WhisperConfig(
        vocab_size=VOCAB, num_mel_bins=8, d_model=d_model, encoder_layers=layers,
        decoder_layers=layers if decoder_layers is None else decoder_layers, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=2 * d_model, decoder_ffn_dim=2 * d_model,
        max_source_positions=frames // 2, max_target_positions=256, pad_token_id=PAD, bos_token_id=BOS,
        eos_token_id=EOS, decoder_start_token_id=t["sot"], begin_suppress_tokens=None, suppress_tokens=None,
        tie_word_embeddings=False,
    )
    model = WhisperForConditionalGeneration(config)
    _discourage_eos(model)
    model.eval()
    generation = model.generation_config
    generation.pad_token_id, generation.bos_token_id, generation.eos_token_id = PAD, BOS, EOS
    generation.decoder_start_token_id = t["sot"]
    generation.no_timestamps_token_id = t["no_timestamps"]
    generation.lang_to_id = {"<|en|>": t["en"], "<|de|>": t["de"]}
    generation.task_to_id = {"transcribe": t["transcribe"], "translate": t["translate"]}
    generation.is_multilingual = True
    generation.max_initial_timestamp_index = 5
    generation.forced_decoder_ids = None
    generation.suppress_tokens = None
    generation.begin_suppress_tokens = None
    generation.max_length = None
    with torch.no_grad():
        model.proj_out.weight.mul_(8.0)
        for layer in model.model.decoder.layers:  # a random decoder hardly hears its encoder: make the audio matter
            layer.encoder_attn.out_proj.weight.mul_(8.0)
    return model


def audio(batch: int = 1, seed: int = 0, frames: int = 32) -> torch.Tensor:
    """[batch, 8, frames] random log-mel features."""
    return torch.randn(batch, 8, frames, generator=torch.Generator().manual_seed(seed))


def sources(batch: int, seed: int = 0, min_len: int = 4, max_len: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    """Padded random source texts: (input_ids, attention_mask) [batch, max_len]; padding on the right, as
    encoder-decoder tokenizers pad (an encoder attends both ways: the side does not matter to it)."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_len, max_len + 1, (batch,), generator=gen)
    lengths[0] = max_len
    input_ids = torch.full((batch, max_len), PAD, dtype=torch.long)
    mask = torch.zeros(batch, max_len, dtype=torch.long)
    for row, length in enumerate(lengths.tolist()):
        input_ids[row, :length] = torch.randint(9, VOCAB - 20, (length,), generator=gen)
        mask[row, :length] = 1
    return input_ids, mask


def whisper_reader(target: WhisperForConditionalGeneration, layers: int = 1) -> WhisperForCausalLM:
    """distil-whisper's shape: a decoder of the target's first `layers` decoder layers (and its embeddings and
    head), which reads the target's encoder output: no encoder of its own."""
    config = copy.deepcopy(target.config)
    config.decoder_layers = layers
    config.is_encoder_decoder = False
    reader = WhisperForCausalLM(config).eval()
    state = {name.replace("model.decoder.", "model.decoder.", 1): value
             for name, value in target.state_dict().items() if name.startswith("model.decoder.")}
    state["proj_out.weight"] = target.proj_out.weight
    reader.load_state_dict(state, strict=False)
    reader.generation_config = copy.deepcopy(target.generation_config)
    return reader


def shallow(target, layers: int = 1):
    """An encoder-decoder drafter: the target's encoder, embeddings and head, and its first `layers` decoder layers
    (its own encoder pass, over the same input)."""
    drafter = copy.deepcopy(target)
    decoder = drafter.get_decoder()
    stack = decoder.layers if hasattr(decoder, "layers") else decoder.block
    del stack[layers:]
    drafter.config.decoder_layers = layers
    if hasattr(drafter.config, "num_decoder_layers"):
        drafter.config.num_decoder_layers = layers
    return drafter.eval()


def quiet_late_layers(target, first: int = 1, share: float = 0.1):
    """The target with its decoder layers after the `first` ones writing `share` of their output (their output
    projections scaled): a drafter of the first layers (`shallow`, `whisper_reader`) then agrees with it part of the
    time, by construction."""
    decoder = target.get_decoder()
    stack = decoder.layers if hasattr(decoder, "layers") else decoder.block
    with torch.no_grad():
        for layer in list(stack)[first:]:
            for name, param in layer.named_parameters():
                if name.endswith(("out_proj.weight", "fc2.weight", ".o.weight", "wo.weight")):
                    param.mul_(share)
    return target
