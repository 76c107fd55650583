"""Convolutional models through torch.compile(backend="saturn"): convolutions (strided, padded,
dilated, grouped, depthwise, transposed, 1d-3d), pooling (max, average, adaptive), batch and
group norm in eval mode, upsampling and the activations CNNs use, each checked against
PyTorch eager, with the report showing that nothing fell back; and ops that still fall back
(pooling indices that are read, an interpolation size Saturn cannot express) reported with
their reason while the result stays right."""
from __future__ import annotations

import pytest

from tolerances import assert_close

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

CPU = {"target": "cpu", "budget": 0, "max_schedules": 1, "quiet": True}   # compiled, no search
REFERENCE = {"target": "reference"}                                      # the interpreter: exact meaning


@pytest.fixture(autouse=True)
def fresh_dynamo(module_cache_dir):
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class SmallCNN(nn.Module):
    """conv - batch norm - ReLU - max pool, twice, then global average pool and a linear head."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(16, classes)

    def forward(self, x):
        return self.head(torch.flatten(self.pool(self.features(x)), 1))


class DepthwiseSeparable(nn.Module):
    """MobileNet's block: a depthwise 3x3 (groups = channels, stride 2), batch norm, ReLU6, a
    pointwise 1x1, batch norm, hardswish."""

    def __init__(self, cin: int = 8, cout: int = 16):
        super().__init__()
        self.dw = nn.Conv2d(cin, cin, 3, stride=2, padding=1, groups=cin, bias=False)
        self.bn1 = nn.BatchNorm2d(cin)
        self.pw = nn.Conv2d(cin, cout, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)

    def forward(self, x):
        return F.hardswish(self.bn2(self.pw(F.relu6(self.bn1(self.dw(x))))))


class DecoderBlock(nn.Module):
    """A transposed convolution (stride 2) with group norm and SiLU, a nearest and a bilinear
    upsampling, a 3x3 convolution and a sigmoid."""

    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(16, 8, 4, stride=2, padding=1)
        self.norm = nn.GroupNorm(2, 8)
        self.out = nn.Conv2d(8, 3, 3, padding=1)

    def forward(self, x):
        x = F.silu(self.norm(self.up(x)))
        x = F.interpolate(x, scale_factor=2, mode="nearest")
        x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        return torch.sigmoid(self.out(x))


class Conv1dModel(nn.Module):
    """A 1d convolution stack over sequences: padded, dilated, strided; GELU, average pool,
    adaptive max pool and a linear head."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(4, 8, 5, padding=2)
        self.c2 = nn.Conv1d(8, 8, 3, dilation=2, padding=2)
        self.c3 = nn.Conv1d(8, 12, 3, stride=2)
        self.bn = nn.BatchNorm1d(8)
        self.head = nn.Linear(12 * 3, 2)

    def forward(self, x):
        x = F.gelu(self.c1(x))
        x = F.avg_pool1d(torch.tanh(self.bn(self.c2(x))), 2)
        x = F.adaptive_max_pool1d(self.c3(x), 3)
        return self.head(x.flatten(1))


def _randomize_norms(model):
    """Running statistics and affine parameters that are not 0 / 1, so eval-mode norms matter."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.3)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
            if isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.GroupNorm)) and m.affine:
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
    return model


def run(model, x, options, scale=10.0):
    """(report, result) of `model` through the backend, checked against eager."""
    from compiler.torch_backend import explain
    torch.manual_seed(0)
    model = model.eval()
    compiled = torch.compile(model, backend="saturn", options=options)
    _randomize_norms(model)
    with torch.no_grad():
        want = model(x)
        got = compiled(x)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert_close(got.numpy(), want.numpy(), "f32", scale)
    return explain(compiled), got


def ran_in_saturn(report) -> set:
    return set().union(*(r.ops for r in report.regions if r.status == "saturn"))


MODELS = [
    (SmallCNN, (2, 3, 16, 16), {"aten.convolution.default", "aten._native_batch_norm_legit_no_training.default",
                                "aten.max_pool2d_with_indices.default", "aten.addmm.default"}),
    (DepthwiseSeparable, (2, 8, 10, 10), {"aten.convolution.default", "aten.hardtanh.default"}),
    (DecoderBlock, (2, 16, 4, 4), {"aten.convolution.default", "aten.native_group_norm.default",
                                   "saturn.interpolate.default", "aten.sigmoid.default"}),
    (Conv1dModel, (2, 4, 24), {"aten.convolution.default", "aten.avg_pool2d.default",
                               "aten.adaptive_max_pool2d.default", "aten.gelu.default"}),
]


@pytest.mark.parametrize("model,shape,ops", MODELS, ids=[m[0].__name__ for m in MODELS])
def test_model_runs_entirely_in_saturn_on_cpu(model, shape, ops):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    report, _ = run(model(), x, CPU)
    assert not report.fallbacks, str(report)
    assert report.regions and all(r.status == "saturn" for r in report.regions), str(report)
    assert ops <= ran_in_saturn(report), str(report)


# --- single layers on the reference target (the translation's meaning, no compile) ------------

LAYERS = [
    nn.Conv2d(3, 4, 3, stride=(2, 1), padding=(1, 2), dilation=(1, 2)),
    nn.Conv2d(4, 6, 3, groups=2, bias=False),
    nn.Conv2d(3, 4, 3, padding="same", dilation=2),
    nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect"),
    nn.Conv2d(3, 4, 3, padding=1, padding_mode="replicate"),
    nn.Conv2d(3, 4, 3, padding=1, padding_mode="circular"),
    nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2, dilation=1),
    nn.ConvTranspose2d(4, 2, 2, stride=2, dilation=2),
    nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True),
    nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    nn.AvgPool2d(2, divisor_override=3),
    nn.AdaptiveAvgPool2d((3, 2)),
    nn.AdaptiveMaxPool2d((2, 3)),
    nn.InstanceNorm2d(4, affine=True),
    nn.PixelShuffle(2),
    nn.PixelUnshuffle(2),
    nn.Unfold((2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
    nn.Sequential(nn.Unfold(3, padding=1), nn.Fold((9, 7), 3, padding=1)),
    nn.Upsample(size=(8, 12), mode="nearest"),
    nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True),   # 4 -> 8: weights by matrix
    nn.Upsample(size=(7, 5), mode="bilinear"),                           # 6 -> 5: not an integer scale
    nn.Upsample(size=(3, 10), mode="bilinear", align_corners=True),
    nn.Sequential(nn.PReLU(), nn.ELU(), nn.LeakyReLU(0.1), nn.Hardsigmoid(), nn.Mish(), nn.LogSigmoid()),
]
LAYER_INPUT = {nn.Conv2d: (2, 3, 9, 8), nn.ConvTranspose2d: (2, 4, 5, 4), nn.InstanceNorm2d: (2, 4, 6, 6),
               nn.PixelShuffle: (2, 8, 3, 4), nn.PixelUnshuffle: (2, 3, 4, 6), nn.Upsample: (2, 3, 4, 6)}


@pytest.mark.parametrize("layer", LAYERS, ids=lambda m: repr(m).split("\n")[0][:60])
def test_layer_translates(layer):
    shape = next((s for t, s in LAYER_INPUT.items() if isinstance(layer, t)), (2, 3, 9, 7))
    if isinstance(layer, nn.Conv2d) and layer.in_channels == 4:
        shape = (2, 4, 9, 8)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    report, _ = run(layer, x, REFERENCE)
    assert not report.fallbacks, str(report)


@pytest.mark.parametrize("align_corners", [False, True])
def test_bilinear_to_any_size_on_cpu(align_corners):
    """Sizes that are no integer scale interpolate by a product with a constant weight matrix."""
    model = nn.Sequential(nn.Conv2d(3, 3, 1), nn.Upsample(size=(7, 9), mode="bilinear", align_corners=align_corners))
    report, _ = run(model, torch.randn(2, 3, 4, 6), CPU)
    assert not report.fallbacks, str(report)


def test_conv3d_pool3d_and_transposed_1d():
    model = nn.Sequential(nn.Conv3d(2, 4, 3, padding=1), nn.BatchNorm3d(4), nn.MaxPool3d(2), nn.AvgPool3d(2),
                          nn.AdaptiveAvgPool3d(1))
    report, _ = run(model, torch.randn(2, 2, 8, 8, 8), REFERENCE)
    assert not report.fallbacks, str(report)
    model = nn.Sequential(nn.ConvTranspose1d(4, 2, 3, stride=2, padding=1, output_padding=1), nn.MaxPool1d(2))
    report, _ = run(model, torch.randn(2, 4, 7), REFERENCE)
    assert not report.fallbacks, str(report)


# --- what still falls back, with its reason -----------------------------------------------------

class PoolIndices(nn.Module):
    """Reads max pooling's indices (int64 in torch; Saturn computes the values only)."""

    def forward(self, x):
        values, indices = F.max_pool2d(x, 2, return_indices=True)
        return values.relu() + (indices % 2).to(x.dtype)


def test_pool_indices_that_are_read_fall_back_with_the_reason():
    report, _ = run(PoolIndices(), torch.randn(1, 2, 4, 4), CPU, scale=1.0)
    reasons = {why for (op, why) in report.fallbacks if op == "aten.max_pool2d_with_indices.default"}
    # (the int64 indices are a Saturn dtype now: the reason is that the translation lacks them)
    assert reasons and all("pooling indices" in why for why in reasons), str(report)
    assert "aten.relu.default" in ran_in_saturn(report), str(report)


def test_pool_indices_not_read_stay_in_saturn():
    class Values(nn.Module):
        def forward(self, x):
            return F.max_pool2d(x, 2, return_indices=True)[0].relu()
    report, _ = run(Values(), torch.randn(1, 2, 4, 4), REFERENCE, scale=1.0)
    assert not report.fallbacks, str(report)


def test_a_used_result_the_translation_lacks_is_reported():
    """A result the translation gives as None (here: forced for the values themselves) keeps the
    node in PyTorch with a reason that says so."""
    from compiler.torch_backend.registry import OPS
    name = "aten.max_pool2d_with_indices.default"
    original = OPS[name]
    OPS[name] = lambda *a, **k: (None, None)
    try:
        report, _ = run(nn.MaxPool2d(2), torch.randn(1, 2, 4, 4), REFERENCE, scale=1.0)
    finally:
        OPS[name] = original
    assert any(op == name and "result 0 is read" in why for op, why in report.fallbacks), str(report)


def test_interpolation_saturn_cannot_express_runs_in_pytorch():
    """A non-integer scale_factor (torch then computes positions from 1 / scale, not from the
    sizes): the interpolate node runs in PyTorch (as F.interpolate), the rest in Saturn."""
    model = nn.Sequential(nn.Conv2d(2, 2, 1), nn.Upsample(scale_factor=1.5, mode="bilinear"), nn.ReLU())
    report, _ = run(model, torch.randn(1, 2, 4, 4), REFERENCE, scale=1.0)
    reasons = [why for (op, why) in report.fallbacks if op == "saturn.interpolate.default"]
    assert len(reasons) == 1 and "scale_factor 1.5" in reasons[0], str(report)
    assert {"aten.convolution.default", "aten.relu.default"} <= ran_in_saturn(report)
    assert "saturn.interpolate.default x1: translation failed" in str(report)


def test_interpolate_with_autograd_keeps_pytorch_semantics():
    """With autograd on the graph runs in eager (and is not rewritten): gradients still flow."""
    model = nn.Sequential(nn.Conv2d(2, 2, 3, padding=1), nn.Upsample(scale_factor=2))
    compiled = torch.compile(model, backend="saturn", options=REFERENCE)
    x = torch.randn(1, 2, 4, 4)
    with pytest.warns(UserWarning, match="autograd is on"):
        compiled(x).sum().backward()
    assert model[0].weight.grad is not None


# --- CUDA tensors (run on a GPU machine: python -m pytest -m gpu tests/test_torch_cnn.py) ---------

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_small_cnn_on_cuda_tensors(dtype):
    from backends.cuda import CUDABackend
    reason = CUDABackend().unavailable_reason()
    if reason:
        pytest.skip(reason)
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    from compiler.torch_backend import explain, register
    register()   # a checkout that is not pip-installed has no entry point
    dt = getattr(torch, dtype)
    torch.manual_seed(0)
    model = _randomize_norms(SmallCNN().eval()).cuda().to(dt)
    x = torch.randn(8, 3, 32, 32, device="cuda", dtype=dt)
    compiled = torch.compile(model, backend="saturn", options={"budget": 5, "max_schedules": 2, "quiet": True})
    with torch.no_grad():
        want = model(x)
        got = compiled(x)
        again = compiled(x)
    assert got.is_cuda and got.dtype == dt and got.shape == want.shape
    tol = 1e-3 if dt == torch.float32 else 3e-2
    torch.testing.assert_close(got.float(), want.float(), rtol=tol, atol=tol)
    torch.testing.assert_close(again.float(), want.float(), rtol=tol, atol=tol)
    report = explain(compiled)
    print(report)
    assert not report.fallbacks, str(report)
    assert report.regions and all(r.status == "saturn" and r.compiled.target == "cuda" for r in report.regions)
    assert sum(r.copied_inputs for r in report.regions) == 0, str(report)
