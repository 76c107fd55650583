"""GPT-2 small's shapes (12 layers, width 768, 12 heads, vocabulary 50257; 124M parameters) with
random weights, one sequence of 64 tokens: `saturn bench --module`. Saturn compiles it region
by region (its layers repeat; docs/search.md, "Regions")."""
import torch
import transformers


class Model(torch.nn.Module):
    def __init__(self, layers, width, heads, vocab, positions):
        super().__init__()
        cfg = transformers.GPT2Config(n_layer=layers, n_embd=width, n_head=heads, vocab_size=vocab,
                                      n_positions=positions)
        self.lm = transformers.GPT2LMHeadModel(cfg)

    def forward(self, ids):
        return self.lm(ids, use_cache=False).logits


def get_inputs():
    return [torch.randint(0, 50257, (1, 64))]


def get_init_inputs():
    return [12, 768, 12, 50257, 1024]
