"""A 2-layer GPT-2 (width 64, 4 heads, vocabulary 100) with random weights: `saturn bench --module`."""
import torch
import transformers


class Model(torch.nn.Module):
    def __init__(self, layers, width, heads, vocab, seq):
        super().__init__()
        cfg = transformers.GPT2Config(n_layer=layers, n_embd=width, n_head=heads, vocab_size=vocab,
                                      n_positions=seq, bos_token_id=0, eos_token_id=0)
        self.lm = transformers.GPT2LMHeadModel(cfg)

    def forward(self, ids):
        return self.lm(ids, use_cache=False).logits


def get_inputs():
    return [torch.randint(0, 100, (2, 64))]


def get_init_inputs():
    return [2, 64, 4, 100, 64]
