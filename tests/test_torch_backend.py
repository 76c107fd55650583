"""torch.compile(backend="saturn"): translation of ATen ops, regions and fallbacks, zero-copy
CPU tensors, autograd, and Hugging Face GPT-2 / Llama models built from tiny random configs,
each checked against PyTorch eager."""
from __future__ import annotations

import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from tolerances import assert_close

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
FAST = {"budget": 0.5, "max_schedules": 1, "quiet": True}   # a short search: these tests check results, not speed
REFERENCE = {"target": "reference"}                # the interpreter: exact meaning, no search


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("saturn-cache")


@pytest.fixture(autouse=True)
def fresh_dynamo(monkeypatch, cache_dir):
    monkeypatch.setenv("SATURN_CACHE_DIR", str(cache_dir))
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def saturn(model, **options):
    return torch.compile(model, backend="saturn", options={**FAST, **options})


def explain(compiled):
    from compiler.torch_backend import explain as explain_
    return explain_(compiled)


def check(got, want, scale=1.0):
    dtype = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
             torch.int32: "i32", torch.bool: "bool"}[want.dtype]
    assert got.dtype == want.dtype and got.shape == want.shape
    assert_close(got.float().numpy() if dtype in ("f16", "bf16") else got.numpy(),
                 want.float().numpy() if dtype in ("f16", "bf16") else want.numpy(), dtype, scale)


# --- registration and imports ----------------------------------------------------------------

def test_backend_is_registered_by_entry_point():
    assert "saturn" in torch._dynamo.list_backends()
    from compiler.torch_backend import saturn_backend
    assert torch._dynamo.lookup_backend("saturn") is saturn_backend


def test_register_names_the_same_backend_and_is_idempotent():
    from compiler.torch_backend import register, saturn_backend
    register()
    register()
    assert torch._dynamo.lookup_backend("saturn") is saturn_backend


def test_compiler_imports_without_torch():
    code = "import sys, compiler, compiler.torch_backend; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_unknown_option_is_an_error():
    f = torch.compile(lambda x: x * 2, backend="saturn", options={"budgt": 1})
    with pytest.raises(Exception, match="unknown option.*'budgt'"):
        f(torch.ones(3))


def test_inductor_mode_is_refused():
    f = torch.compile(lambda x: x * 2, backend="saturn", mode="max-autotune")
    with pytest.raises(Exception, match="Inductor preset"):
        f(torch.ones(3))


def test_inference_mode_runs_in_saturn():
    torch.manual_seed(0)
    model = MLP().eval()
    compiled = torch.compile(model, backend="saturn", options=REFERENCE)
    x = torch.randn(4, 32)
    with torch.inference_mode():
        got = compiled(x)
    with torch.no_grad():
        check(got, model(x), scale=10)
    assert [r.status for r in explain(compiled).regions] == ["saturn"]


# --- ATen translations against PyTorch (reference target: no search) -------------------------

def _attention_gqa(q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


OPS = {  # name -> (function, input shapes)
    "arith": (lambda x, y: (x - y * 2) / (y.abs() + 1) + x ** 2 - torch.rsqrt(y * y + 1), [(3, 5), (5,)]),
    "unary": (lambda x: torch.tanh(x) + torch.sigmoid(x) + torch.erf(x) + torch.nn.functional.silu(x)
              + torch.nn.functional.gelu(x, approximate="tanh") + torch.exp(-x * x), [(4, 7)]),
    "compare_where": (lambda x, y: torch.where(x > y, x, y.clamp(-0.5, 0.5)).masked_fill(x < -1, 3.0), [(6, 3), (6, 3)]),
    "reductions": (lambda x: (x.sum(-1, keepdim=True) + x.mean(0) + x.amax(1, keepdim=True)
                              + x.var(-1, keepdim=True) + torch.logsumexp(x, -1, keepdim=True)), [(5, 8)]),
    "movement": (lambda x: torch.cat([x.transpose(0, 1)[1:3], x.permute(1, 0)[:2] * 2], 0).reshape(-1, 2)
                 .unsqueeze(0).expand(3, -1, -1), [(4, 5)]),
    "logic_remainder": (lambda x, y: torch.where(torch.logical_or(x > 0, y < 0).all(-1, keepdim=True),
                                                  torch.remainder(x, 0.7), torch.fmod(y, 0.3))
                        + sum(torch.unbind(x, 1)).unsqueeze(1) * (x != y).any(0).float(), [(4, 5), (4, 5)]),
    "bool_masks": (lambda x, y: torch.where((x > 0) & ~(y > 0) | (x < y) ^ (y > 1), x, x.new_ones((4, 5)) * 2)
                   + x.new_zeros((5,)) + x.new_full((1, 5), 0.5), [(4, 5), (4, 5)]),
    "split_stack": (lambda x: torch.stack(list(torch.split(x, 2, dim=1)), 0).sum(0), [(3, 6)]),
    "pad_repeat": (lambda x: torch.nn.functional.pad(x, (1, -1, 2, 0), value=1.5).repeat(2, 1), [(3, 4)]),
    "softmax_norms": (lambda x, w: torch.softmax(x, -1) + torch.log_softmax(x, 0)
                      + torch.nn.functional.layer_norm(x, (6,), w, w) + torch.nn.functional.rms_norm(x, (6,), w),
                      [(4, 6), (6,)]),
    "matmuls": (lambda a, b, c: torch.addmm(c, a, b, beta=0.5, alpha=2.0) + (a @ b) + torch.bmm(
        a.unsqueeze(0), b.unsqueeze(0))[0], [(3, 4), (4, 5), (5,)]),
    "attention_causal_rect": (lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
                              [(1, 2, 5, 4), (1, 2, 7, 4), (1, 2, 7, 3)]),
    "attention_gqa": (_attention_gqa, [(2, 4, 6, 8), (2, 2, 6, 8), (2, 2, 6, 8)]),
    "angles": (lambda y, x: torch.atan2(y, x) + torch.hypot(y, x) + torch.atan(y) + torch.tan(x * 0.3)
               + torch.nan_to_num(y / (x > 0).float(), posinf=5.0, neginf=-5.0), [(3, 6), (3, 6)]),
    "hyperbolic": (lambda x, y: torch.sinh(x) + torch.cosh(y) + torch.asinh(x * 5) + torch.atanh(y.clamp(-0.9, 0.9))
                   + torch.log10(x.abs() + 1) + torch.logaddexp(x, y) + torch.xlogy(x, y.abs())
                   + torch.lerp(x, y, 0.7) + torch.asin(y.clamp(-1, 1)) + torch.acos(x.clamp(-1, 1))
                   + torch.acosh(x.abs() + 1), [(3, 6), (3, 6)]),
    "order_statistics": (lambda x: torch.logcumsumexp(x, 1) + torch.median(x, 1, keepdim=True).values
                         + torch.kthvalue(x, 2, 1, keepdim=True)[0] + torch.median(x)
                         + torch.median(x, 0).indices.float(), [(5, 5)]),
    "triangles": (lambda x: torch.tril(x, -1) + torch.triu(x, 2) * 3, [(2, 5, 7)]),
    "gamma": (lambda x, y: torch.lgamma(x * 4) + torch.digamma(y.abs() + 0.1) + torch.lgamma(y.abs() * 50),
              [(3, 6), (3, 6)]),
    "attention_mask": (lambda q, k, v, m: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m),
                       [(1, 3, 4, 8), (1, 3, 6, 8), (1, 3, 6, 8), (4, 6)]),
}


@pytest.mark.parametrize("name", list(OPS))
def test_aten_translation_matches_torch(name):
    fn, shapes = OPS[name]
    gen = torch.Generator().manual_seed(1)
    args = [torch.randn(s, generator=gen) for s in shapes]
    with torch.no_grad():
        want = fn(*args)
        compiled = torch.compile(fn, backend="saturn", options=REFERENCE)
        got = compiled(*args)
    check(got, want, scale=10)
    report = explain(compiled)
    assert report.regions and all(r.status == "saturn" for r in report.regions), str(report)
    assert not report.fallbacks, str(report)


@pytest.mark.parametrize("diagonal", [-3, -1, 0, 1, 2, 9])
def test_lower_triangle_matches_numpy(diagonal):
    import compiler
    from compiler.torch_backend.attention import lower_triangle
    from ir.interpreter import evaluate
    for rows, cols in [(1, 1), (1, 5), (5, 1), (4, 4), (3, 8), (8, 3)]:
        g = compiler.trace(lambda x: lower_triangle(rows, cols, diagonal).where(x, 0.0), compiler.spec((rows, cols)))
        got = evaluate(g, [np.ones((rows, cols), np.float32)])[0]
        np.testing.assert_array_equal(got, np.tril(np.ones((rows, cols), np.float32), diagonal), err_msg=f"{rows}x{cols}")


# --- modules through the CPU backend ---------------------------------------------------------

class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down, self.norm = torch.nn.Linear(32, 64), torch.nn.Linear(64, 16), torch.nn.LayerNorm(64)

    def forward(self, x):
        return self.down(self.norm(torch.nn.functional.gelu(self.up(x)))).softmax(-1)


class SmallCNN(torch.nn.Module):
    """A convolution, then batch norm, ReLU, a residual and a head."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8)
        self.head = torch.nn.Linear(8 * 6 * 6, 10)

    def forward(self, x):
        h = self.conv(x)
        h = torch.relu(self.bn(h)) + h
        return self.head(h.flatten(1))


class CumsumModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.cumsum(self.proj(x), dim=-1).relu()


class ErfinvModel(torch.nn.Module):
    """erfinv has no Saturn translation."""
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.erfinv(self.proj(x).tanh() * 0.5).relu()


class IndexingModel(torch.nn.Module):
    """Positions and lookups: a computed causal mask, int32 token ids, argmax-free cumsum."""
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(11, 8)

    def forward(self, ids, x):
        h = self.emb(ids) + x
        s = h @ h.transpose(-1, -2)
        s = s.masked_fill(torch.ones(6, 6).tril() == 0, float("-inf")).softmax(-1)
        w = torch.arange(0.0, 8.0, 1.0)
        return torch.cumsum(s @ h, dim=-1) * w + torch.index_select(h, 1, ids[0] % 6).triu() + h[:, ids[0] % 6]


def _run(model, *inputs, **options):
    torch.manual_seed(0)
    model = model.eval()
    compiled = saturn(model, **options)
    with torch.no_grad():
        want = model(*inputs)
        got = compiled(*inputs)
    return compiled, got, want


def test_mlp_matches_eager():
    compiled, got, want = _run(MLP(), torch.randn(8, 32))
    check(got, want, scale=10)
    report = explain(compiled)
    assert len(report.regions) == 1 and report.regions[0].status == "saturn"
    assert not report.fallbacks
    text = str(report)
    assert "addmm.default x2" in text and "Saturn: compiled" in text and "1 call" in text


def test_cnn_runs_in_saturn():
    compiled, got, want = _run(SmallCNN(), torch.randn(2, 3, 6, 6))
    check(got, want, scale=10)
    report = explain(compiled)
    assert not report.fallbacks, str(report)
    ran = set().union(*(r.ops for r in report.regions if r.status == "saturn"))
    assert {"aten.convolution.default", "aten.addmm.default", "aten.relu.default"} <= ran


def test_missing_op_falls_back_and_is_reported():
    compiled, got, want = _run(ErfinvModel(), torch.randn(4, 8))
    check(got, want, scale=10)
    report = explain(compiled)
    assert ("aten.erfinv.default", "no Saturn translation for this op") in report.fallbacks
    assert "erfinv.default x1: no Saturn translation" in str(report)
    assert any(r.status == "saturn" and "aten.relu.default" in r.ops for r in report.regions)


def test_cumsum_runs_in_saturn():
    compiled, got, want = _run(CumsumModel(), torch.randn(4, 8))
    check(got, want, scale=10)
    report = explain(compiled)
    assert not report.fallbacks, str(report)
    assert any(r.status == "saturn" and "aten.cumsum.default" in r.ops for r in report.regions)


def test_indexing_ops_run_in_saturn():
    """embedding (int32 ids), tril, arange, cumsum, index_select, triu, x[:, idx]: all in Saturn."""
    ids = torch.tensor([[1, 4, 0, 10, 3, 3]], dtype=torch.int32)
    compiled, got, want = _run(IndexingModel(), ids, torch.randn(1, 6, 8))
    check(got, want, scale=10)
    report = explain(compiled)
    ran = set().union(*(r.ops for r in report.regions if r.status == "saturn"))
    assert {"aten.embedding.default", "aten.tril.default", "aten.arange.start_step", "aten.cumsum.default",
            "aten.index_select.default", "aten.triu.default", "aten.index.Tensor"} <= ran, str(report)


def test_cpu_tensors_are_not_copied(monkeypatch):
    from compiler.torch_backend import region
    seen = {}
    real_forward = region.SaturnRegion.forward

    def spy(self, *args):
        seen["args"] = args
        out = real_forward(self, *args)
        seen["out"] = out
        return out
    real_call = None

    def spy_compiled(self, *arrays):
        seen["arrays"] = arrays
        outs = real_call(self, *arrays)
        seen["results"] = outs
        return outs
    from compiler.api import CompiledFunction
    real_call = CompiledFunction.__call__
    monkeypatch.setattr(region.SaturnRegion, "forward", spy)
    monkeypatch.setattr(CompiledFunction, "__call__", spy_compiled)
    model = MLP().eval()
    compiled, got, want = _run(model, torch.randn(8, 32))
    check(got, want, scale=10)
    # every argument of the region is a view of the tensor's own memory
    for t, a in zip(seen["args"], seen["arrays"]):
        assert a.__array_interface__["data"][0] == t.data_ptr()
    assert model.up.weight.data_ptr() in {a.__array_interface__["data"][0] for a in seen["arrays"]}
    # and the result handed back to PyTorch is Saturn's output array itself
    results = seen["results"] if isinstance(seen["results"], tuple) else (seen["results"],)
    assert seen["out"].data_ptr() == results[0].__array_interface__["data"][0]


def test_bf16_module_matches_eager_and_shares_memory():
    model = MLP().to(torch.bfloat16)
    compiled, got, want = _run(model, torch.randn(8, 32).to(torch.bfloat16))
    check(got, want, scale=2)
    assert all(r.status == "saturn" for r in explain(compiled).regions)


def test_autograd_runs_in_eager_with_a_warning():
    torch.manual_seed(0)
    model = MLP()
    compiled = saturn(model)
    x = torch.randn(8, 32)
    with pytest.warns(UserWarning, match="autograd is on"):
        got = compiled(x)
    got.sum().backward()                     # gradients flow: it really is eager PyTorch
    assert model.up.weight.grad is not None
    check(got.detach(), model(x).detach())
    report = explain(compiled)
    assert report.graphs and "autograd" in report.graphs[0].whole_graph and not report.regions


@pytest.mark.parametrize("dynamic", [False, None])
def test_a_new_shape_compiles_again_or_runs_dynamic_in_eager(dynamic):
    torch.manual_seed(0)
    model = MLP().eval()
    compiled = torch.compile(model, backend="saturn", options=REFERENCE, dynamic=dynamic)
    with torch.no_grad():
        for batch in (8, 5):
            x = torch.randn(batch, 32)
            check(compiled(x), model(x), scale=10)
    graphs = explain(compiled).graphs
    assert len(graphs) == 2 and graphs[0].regions
    if dynamic is False:     # every shape a static graph of its own, compiled by Saturn
        assert graphs[1].regions and graphs[1].regions[0].inputs[2] == "f32[5, 32]"
    else:                    # Dynamo's default recompiles with symbolic sizes: PyTorch runs it
        assert "dynamic shapes" in graphs[1].whole_graph and not graphs[1].regions


# --- Hugging Face models from tiny configs (random weights, no download) ----------------------

def _gpt2(layers):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_layer=layers, n_embd=64, n_head=4, vocab_size=100, n_positions=32,
                                  bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg)


def _llama(layers):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(num_hidden_layers=layers, hidden_size=64, intermediate_size=128,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=100,
                                   max_position_embeddings=32, bos_token_id=0, eos_token_id=0)
    return transformers.LlamaForCausalLM(cfg)


def _check_lm(model):
    torch.manual_seed(0)
    ids = torch.randint(0, 100, (2, 16))
    compiled, got, want = _run(model, ids)
    check(got.logits, want.logits, scale=10)
    report = explain(compiled)
    assert report.regions and all(r.status == "saturn" for r in report.regions), str(report)
    # everything ran in Saturn, the token/position lookups of int64 ids included
    assert not report.fell_back(), str(report)
    assert "aten.embedding.default" in set().union(*(r.ops for r in report.regions))
    return report


def test_gpt2_matches_eager():
    report = _check_lm(_gpt2(layers=2))
    ran = set().union(*(r.ops for r in report.regions))
    assert {"aten.native_layer_norm.default", "aten.addmm.default", "aten.tanh.default",
            "aten._scaled_dot_product_flash_attention_for_cpu.default"} <= ran


def test_llama_gqa_matches_eager():
    report = _check_lm(_llama(layers=1))
    ran = set().union(*(r.ops for r in report.regions))
    assert {"aten.rsqrt.default", "aten.silu.default", "aten.mm.default",
            "aten._scaled_dot_product_flash_attention_for_cpu.default"} <= ran


@pytest.mark.slow
def test_llama_two_layers_matches_eager():
    _check_lm(_llama(layers=2))


# --- the README's torch.compile example --------------------------------------------------------

def test_readme_torch_example_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    code = next(b for b in blocks if 'backend="saturn"' in b)
    scope: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)   # no autograd fallback warning: it ran in Saturn
        exec(compile(code, "README.md", "exec"), scope)
    check(scope["y"], scope["model"](scope["x"]).detach(), scale=10)
    assert "Saturn: compiled" in capsys.readouterr().out


def test_scatter_ops_run_in_saturn():
    """aten scatter.src / scatter.value / scatter_add lower to the frontend's compositions
    (no fallback) and match eager."""

    class M(torch.nn.Module):
        def forward(self, x, i, s):
            return x.scatter(1, i, s) + x.scatter_add(0, i, s) + x.scatter(1, i, 2.5)

    m = M()
    g = torch.Generator().manual_seed(0)
    x, s = torch.randn(4, 5, generator=g), torch.randn(4, 3, generator=g)
    i = torch.randint(0, 4, (4, 3), generator=g)
    with torch.no_grad():
        want = m(x, i, s)
        c = torch.compile(m, backend="saturn")
        got = c(x, i, s)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)
    report = explain(c)
    assert not report.fallbacks and "scatter.src" in str(report), str(report)


def test_gpt2_bench_module_runs_whole_in_saturn():
    """The bench's GPT-2 module (benchmarks/modules/gpt2_tiny.py: 2 layers, padding token in the
    vocabulary, use_cache=False): its attention masks index with two tensors at once
    (aten.index.Tensor), which used to fall back to PyTorch and split the model."""
    pytest.importorskip("transformers")
    import importlib.util
    spec = importlib.util.spec_from_file_location("gpt2_tiny", ROOT / "benchmarks" / "modules" / "gpt2_tiny.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    compiled, got, want = _run(mod.Model(*mod.get_init_inputs()), *mod.get_inputs())
    check(got, want, scale=10)
    report = explain(compiled)
    assert not report.fell_back(), str(report)
    assert "aten.index.Tensor" in set().union(*(r.ops for r in report.regions))


def test_gpt2_of_four_layers_compiles_layer_by_layer():
    """Four layers, cut at the layer boundaries (regions=True: this model is small enough to be
    searched whole by default); the repeated layer is searched once (compiler/regions.py) and
    the logits match eager."""
    torch.manual_seed(0)
    ids = torch.randint(0, 100, (2, 16))
    compiled, got, want = _run(_gpt2(layers=4), ids, regions=True)
    check(got.logits, want.logits, scale=10)
    report = explain(compiled)
    chosen = report.regions[0].chosen
    assert "distinct" in chosen and "regions" in chosen, str(report)
    compiled = report.regions[0].compiled
    assert len(compiled.report.outcomes) < compiled.report.count     # a layer searched once, used again


def test_searchsorted_and_bucketize_run_in_saturn():
    class M(torch.nn.Module):
        def forward(self, s, v):
            return torch.searchsorted(s, v) + torch.bucketize(v, s[0], right=True) * 100

    s, _ = torch.sort(torch.randn(3, 9))
    v = torch.randn(3, 4)
    v[0, 0] = s[0, 3]                                   # a tie: left and right differ
    compiled, got, want = _run(M(), s, v)
    assert torch.equal(got, want) and got.dtype == torch.int64
    assert not explain(compiled).fell_back()


def test_sort_topk_argsort_run_in_saturn_up_to_a_length():
    class M(torch.nn.Module):
        def forward(self, x):
            v, i = torch.sort(x, dim=-1, descending=True)
            t, j = torch.topk(x, 3)
            return v + t.sum(-1, keepdim=True), i + torch.argsort(x, stable=True) * 100 + j.sum(-1, keepdim=True)

    x = torch.randn(4, 16)
    compiled, got, want = _run(M(), x)
    check(got[0], want[0], scale=4)
    assert torch.equal(got[1], want[1])
    assert not explain(compiled).fell_back()
    torch._dynamo.reset()                                # a new static graph, not a dynamic recompile
    long = torch.randn(2, 2000)                          # past SORT_MAX: PyTorch sorts it
    compiled, got, want = _run(M(), long)
    assert torch.equal(got[1], want[1])
    assert {"aten.sort.default", "aten.topk.default"} <= explain(compiled).fell_back()
