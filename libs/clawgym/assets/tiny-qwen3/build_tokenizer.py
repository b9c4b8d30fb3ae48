"""Regenerates the tiny-qwen3 tokenizer and model config from the committed `corpus.txt`.

Not run at install or test time: the committed `tokenizer.json` is the reference, because BPE
training output depends on its input text and library version. Run it by hand to rebuild:

    .venv/bin/python libs/clawgym/assets/tiny-qwen3/build_tokenizer.py

It writes `tokenizer.json`, `tokenizer_config.json` and `config.json` beside itself. The chat
template (`chat_template.jinja`) is written by hand and only read here.

Design: Qwen2/Qwen3's byte-level BPE (same pre-tokenizer regex, no normaliser beyond NFC), 4096
learned tokens, then the ChatML specials and the Qwen tool/think markers as added tokens. The
markers are added as non-special tokens (as Qwen3 does) so that decoding keeps them in the text
that the tool-call parser reads.
"""

import json
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

HERE = Path(__file__).resolve().parent
BPE_VOCAB = 4096
# Qwen2's pre-tokenizer split (tokenizer.json of Qwen/Qwen2.5-* and Qwen/Qwen3-*).
SPLIT = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MARKERS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]

# Model shape: 4 layers of width 256, grouped-query attention (4 query heads, 2 KV heads).
MODEL = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "hidden_act": "silu",
    # Claude Code's first prompt is ~20k Claude tokens, ~30k of this small vocabulary's (~2.9 chars
    # per token on English/code): 64k positions hold it with room for the conversation to grow.
    "max_position_embeddings": 65536,
    "rms_norm_eps": 1e-6,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
    "attention_bias": False,
    "attention_dropout": 0.0,
    "initializer_range": 0.02,
    "tie_word_embeddings": True,
    "use_cache": True,
}


def build_tokenizer(corpus: str) -> Tokenizer:
    """Trains the byte-level BPE on `corpus` and appends the special and marker tokens."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB,
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus.split("\n\n"), trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in MARKERS])
    return tok


def main() -> None:
    tok = build_tokenizer((HERE / "corpus.txt").read_text())
    tok.save(str(HERE / "tokenizer.json"))
    ids = {t: tok.token_to_id(t) for t in SPECIAL}
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": MODEL["max_position_embeddings"],
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "bos_token": None,
        "unk_token": None,
        "padding_side": "left",
        "clean_up_tokenization_spaces": False,
        "add_bos_token": False,
    }
    (HERE / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
    config = {
        **MODEL,
        "vocab_size": tok.get_vocab_size(),
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"],
    }
    (HERE / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    print(f"vocab {tok.get_vocab_size()}, specials {ids}")


if __name__ == "__main__":
    main()
