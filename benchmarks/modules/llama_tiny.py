"""A 2-layer Llama (width 64, 4 query heads over 2 key/value heads, vocabulary 100) with random
weights: `saturn bench --module`."""
import torch
import transformers


class Model(torch.nn.Module):
    def __init__(self, layers, width, heads, kv_heads, vocab, seq):
        super().__init__()
        cfg = transformers.LlamaConfig(num_hidden_layers=layers, hidden_size=width, intermediate_size=2 * width,
                                       num_attention_heads=heads, num_key_value_heads=kv_heads, vocab_size=vocab,
                                       max_position_embeddings=seq, bos_token_id=0, eos_token_id=0)
        self.lm = transformers.LlamaForCausalLM(cfg)

    def forward(self, ids):
        return self.lm(ids, use_cache=False).logits


def get_inputs():
    return [torch.randint(0, 100, (2, 64))]


def get_init_inputs():
    return [2, 64, 4, 2, 100, 64]
