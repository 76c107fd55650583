"""Device arrays in and out of compiled functions, without a GPU: argument classification and
errors, the call path through a stand-in executable over simulated device memory, the binding of
caller addresses into launches (driver calls faked), and when CUDA graphs are recorded, replayed
or given up. The same paths on the device: tests/test_device_tensors_gpu.py."""
from __future__ import annotations

import numpy as np
import pytest

import compiler
from backends.cuda import device_run, driver
from backends.cuda.graphs import GraphReplay
from compiler import device_args
from compiler.api import CompiledFunction
from compiler.errors import DTypeError, OptionError, SaturnError, ShapeError, TargetError
from compiler.trace import trace
from ir.interpreter import evaluate


# --- simulated device memory ----------------------------------------------------------------

class Memory:
    """Blocks of bytes at fake device addresses (256-byte aligned), on a given device."""

    def __init__(self):
        self.blocks: dict[int, tuple[np.ndarray, int]] = {}
        self.next = 0x7f0000000000

    def alloc(self, nbytes: int, device: int = 0) -> int:
        ptr = self.next
        self.next += (max(nbytes, 1) + 255) // 256 * 256 + 256
        self.blocks[ptr] = (np.zeros(max(nbytes, 1), np.uint8), device)
        return ptr

    def find(self, ptr: int):
        for base, (buf, dev) in self.blocks.items():
            if base <= ptr < base + len(buf):
                return buf, ptr - base, dev
        raise driver.CUDAFailure("pointer", f"{ptr:#x} is host memory (memory type 1), not device memory")

    def read(self, ptr: int, nbytes: int) -> np.ndarray:
        buf, off, _ = self.find(ptr)
        return buf[off:off + nbytes].copy()

    def write(self, ptr: int, data: np.ndarray) -> None:
        buf, off, _ = self.find(ptr)
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        buf[off:off + len(raw)] = raw


class FakeArray:
    """An object with __cuda_array_interface__ over simulated memory."""

    def __init__(self, mem: Memory, value: np.ndarray, device: int = 0, offset: int = 0, stream=None):
        self.mem, self.dtype = mem, value.dtype
        base = mem.alloc(value.nbytes + offset, device)
        self.ptr = base + offset
        self.shape = value.shape
        mem.write(self.ptr, value)
        self.strides, self.stream = None, stream

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "version": 3,
                "strides": self.strides, "stream": self.stream}

    def numpy(self) -> np.ndarray:
        return self.mem.read(self.ptr, int(np.prod(self.shape)) * self.dtype.itemsize).view(self.dtype).reshape(self.shape)


class FakeCalls:
    """The DeviceCalls interface over simulated memory: `run` evaluates the program with the
    interpreter, reading inputs and writing outputs at the given addresses."""

    def __init__(self, graph, mem: Memory, ordinal: int = 0):
        self.graph, self.mem, self.ordinal = graph, mem, ordinal
        self.runs, self.copies, self.syncs = [], [], []

    def pointer_device(self, ptr):
        return self.mem.find(ptr)[2]

    def new_array(self, shape, dtype, stream):
        return FakeArray(self.mem, np.zeros(shape, dtype), stream=stream)

    def copy(self, dst, src, nbytes, stream):
        self.copies.append((dst, src, nbytes))
        self.mem.write(dst, self.mem.read(src, nbytes))

    def synchronize(self, stream):
        self.syncs.append(stream)

    def run(self, in_ptrs, out_ptrs, out_bytes, stream):
        self.runs.append((list(in_ptrs), list(out_ptrs), stream))
        args = [self.mem.read(p, n.numel * n.dtype.itemsize).view(n.dtype.np).reshape(n.shape)
                for p, n in zip(in_ptrs, self.graph.inputs)]
        for p, value in zip(out_ptrs, evaluate(self.graph, args)):
            self.mem.write(p, value)
        return "plain"

    def wait_idle(self):
        pass

    def set_graphs(self, enabled):
        pass

    def describe(self):
        return "fake device"


class FakeExecutable:
    def __init__(self, calls):
        self.calls, self.source, self.host_calls = calls, "<fake>", 0

    def device_calls(self, graphs):
        return self.calls

    def __call__(self, *args):
        self.host_calls += 1
        return evaluate(self.calls.graph, args)


def _softmax_add(x, b):
    return (x + b).softmax(-1)


SPECS = [compiler.spec((4, 40), "f32", "x"), compiler.spec((40,), "f32", "b")]


@pytest.fixture
def device_fn():
    graph = trace(_softmax_add, *SPECS)
    mem = Memory()
    calls = FakeCalls(graph, mem)
    return CompiledFunction(_softmax_add, SPECS, graph, "cuda", FakeExecutable(calls)), mem, calls


def _values(seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((4, 40)).astype(np.float32), rng.standard_normal(40).astype(np.float32)


def _expected(x, b):
    y = x + b
    e = np.exp(y - y.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# --- classification ------------------------------------------------------------------------

def test_host_data_is_not_a_device_array():
    import torch
    assert device_args.kind_of(np.zeros(3)) is None
    assert device_args.kind_of(torch.zeros(3)) is None          # a CPU tensor
    assert device_args.kind_of(3.0) is None
    assert not device_args.any_device([np.zeros(3), torch.zeros(2)])


def test_cuda_array_interface_and_dlpack_devices_are_recognized():
    mem = Memory()
    assert device_args.kind_of(FakeArray(mem, np.zeros(3, np.float32))) == device_args.CAI

    class DL:
        def __init__(self, device_type):
            self.t = device_type

        def __dlpack_device__(self):
            return (self.t, 0)

    assert device_args.kind_of(DL(2)) == "dlpack"      # kDLCUDA
    assert device_args.kind_of(DL(1)) is None          # kDLCPU: host data


def test_stream_handles_from_ints_and_stream_objects():
    class TorchLike:
        cuda_stream = 77

    class CupyLike:
        ptr = 88

    assert device_args.stream_handle(5) == 5
    assert device_args.stream_handle(TorchLike()) == 77
    assert device_args.stream_handle(CupyLike()) == 88
    with pytest.raises(TypeError):
        device_args.stream_handle("s")
    with pytest.raises(TypeError):
        device_args.stream_handle(True)


# --- the call path -------------------------------------------------------------------------

def test_device_inputs_are_read_in_place_and_results_are_device_arrays(device_fn):
    f, mem, calls = device_fn
    x, b = _values()
    dx, db = FakeArray(mem, x), FakeArray(mem, b)
    y = f(dx, db)
    assert isinstance(y, FakeArray) and y.shape == (4, 40)
    np.testing.assert_allclose(y.numpy(), _expected(x, b), rtol=1e-5, atol=1e-6)
    in_ptrs, out_ptrs, stream = calls.runs[-1]
    assert in_ptrs == [dx.ptr, db.ptr] and out_ptrs == [y.ptr] and stream == 0
    # the input's memory is read on each call: change it in place, the result follows
    mem.write(dx.ptr, x * 2)
    np.testing.assert_allclose(f(dx, db).numpy(), _expected(x * 2, b), rtol=1e-5, atol=1e-6)
    assert f.executable.host_calls == 0


def test_results_are_fresh_per_call_so_earlier_ones_stay_intact(device_fn):
    f, mem, _ = device_fn
    x, b = _values()
    dx, db = FakeArray(mem, x), FakeArray(mem, b)
    first = f(dx, db)
    kept = first.numpy().copy()
    mem.write(dx.ptr, x + 1)
    second = f(dx, db)
    assert second.ptr != first.ptr
    np.testing.assert_array_equal(first.numpy(), kept)


def test_stream_comes_from_the_caller(device_fn):
    f, mem, calls = device_fn
    x, b = _values()
    f(FakeArray(mem, x), FakeArray(mem, b), stream=1234)
    assert calls.runs[-1][2] == 1234
    f(FakeArray(mem, x, stream=55), FakeArray(mem, b))              # the interface's own stream
    assert calls.runs[-1][2] == 55
    f(FakeArray(mem, x, stream=55), FakeArray(mem, b, stream=66))   # a second producer: waited for
    assert calls.runs[-1][2] == 55 and 66 in calls.syncs


def test_unaligned_input_is_copied_on_the_device_and_counted(device_fn):
    f, mem, calls = device_fn
    x, b = _values()
    dx = FakeArray(mem, x, offset=4)          # a contiguous view 4 bytes into its block
    y = f(dx, FakeArray(mem, b))
    np.testing.assert_allclose(y.numpy(), _expected(x, b), rtol=1e-5, atol=1e-6)
    assert calls.copies and calls.copies[0][1] == dx.ptr and calls.runs[-1][0][0] != dx.ptr
    assert f._device_stats.copied_inputs == 1
    assert "inputs copied on the device (non-contiguous or unaligned): 1" in f.explain()


@pytest.mark.parametrize("bad, error, words", [
    (lambda mem, x, b: (FakeArray(mem, x[:2]), FakeArray(mem, b)), ShapeError, "input 0 (x) has shape (2, 40)"),
    (lambda mem, x, b: (FakeArray(mem, x), FakeArray(mem, b.astype(np.float16))), DTypeError, "input 1 (b) has dtype f16"),
    (lambda mem, x, b: (FakeArray(mem, x, device=1), FakeArray(mem, b)), SaturnError, "input 0 is on cuda:1"),
    (lambda mem, x, b: (FakeArray(mem, x), b), SaturnError, "input 1 (b) is host data"),
])
def test_bad_device_inputs_name_the_argument(device_fn, bad, error, words):
    f, mem, calls = device_fn
    x, b = _values()
    with pytest.raises(error) as e:
        f(*bad(mem, x, b))
    assert words in str(e.value)
    assert not calls.runs


def test_host_memory_behind_the_interface_is_an_error(device_fn):
    f, mem, _ = device_fn
    x, b = _values()
    fake = FakeArray(mem, x)
    fake.ptr = 0x1000                           # an address no device block holds
    with pytest.raises(SaturnError, match="input 0 .* is not device memory"):
        f(fake, FakeArray(mem, b))


def test_a_mask_is_refused(device_fn):
    f, mem, _ = device_fn
    x, b = _values()

    class Masked(FakeArray):
        @property
        def __cuda_array_interface__(self):
            return dict(super().__cuda_array_interface__, mask=object())

    with pytest.raises(SaturnError, match="mask"):
        f(Masked(mem, x), FakeArray(mem, b))


def test_host_inputs_stay_on_the_host_path(device_fn):
    f, _, calls = device_fn
    x, b = _values()
    y = f(x, b)
    assert isinstance(y, np.ndarray) and f.executable.host_calls == 1 and not calls.runs
    with pytest.raises(OptionError, match="stream= is for calls on device arrays"):
        f(x, b, stream=3)


def test_device_arrays_into_a_cpu_function_are_refused():
    mem = Memory()
    f = compiler.compile(_softmax_add, *SPECS, target="reference")
    x, b = _values()
    with pytest.raises(TargetError, match="compiled for 'reference'"):
        f(FakeArray(mem, x), FakeArray(mem, b))


def test_cuda_graphs_flag_is_checked(device_fn):
    f, _, _ = device_fn
    f.cuda_graphs = False
    assert f.cuda_graphs is False
    with pytest.raises(OptionError):
        f.cuda_graphs = "no"


# --- binding addresses into launches (driver faked) ----------------------------------------

class FakeLaunch:
    log: list = []

    def __init__(self, name, pointers):
        self.name, self.values = name, list(pointers)

    def launch(self, stream):
        FakeLaunch.log.append((self.name, tuple(self.values), stream))


@pytest.fixture
def fake_driver(monkeypatch):
    FakeLaunch.log = []
    events = []

    class FakeModule:
        def __init__(self, binary):
            pass

        def function(self, name, shared):
            return name

    monkeypatch.setattr(driver, "RawModule", FakeModule)
    monkeypatch.setattr(device_run.KernelStep, "make", lambda self, module, ptrs: FakeLaunch(self.name, ptrs))
    monkeypatch.setattr(driver, "new_stream", lambda: 900)
    monkeypatch.setattr(driver, "new_event", lambda: 901)
    monkeypatch.setattr(driver, "record", lambda ev, s: events.append(("record", s)))
    monkeypatch.setattr(driver, "wait", lambda s, ev: events.append(("wait", s)))
    monkeypatch.setattr(driver, "copy_d2d", lambda d, s, n, st: events.append(("copy", d, s, n, st)))
    return events


def _program(outputs=("y",)):
    steps = [device_run.KernelStep("k1", (1, 1, 1), (32, 1, 1), 0, ["t", "x", "w"]),
             device_run.KernelStep("k2", (1, 1, 1), (32, 1, 1), 0, ["y", "t", "x"])]
    return device_run.DeviceProgram(b"", steps, ["x", "w"], list(outputs), {"t": 0x5000})


def test_runner_binds_inputs_outputs_and_keeps_its_intermediates(fake_driver):
    r = device_run.DeviceRunner(_program(), graphs=False)
    r.run([0x100, 0x200], [0x300], [64], stream=7)
    assert FakeLaunch.log == [("k1", (0x5000, 0x100, 0x200), 7), ("k2", (0x300, 0x5000, 0x100), 7)]
    r.run([0x110, 0x200], [0x310], [64], stream=7)
    assert FakeLaunch.log[-2:] == [("k1", (0x5000, 0x110, 0x200), 7), ("k2", (0x310, 0x5000, 0x110), 7)]
    assert ("wait", 7) not in fake_driver                # same stream: no cross-stream wait
    r.run([0x110, 0x200], [0x320], [64], stream=8)
    assert ("wait", 8) in fake_driver                    # another stream waits for the last call


def test_runner_runs_independent_steps_on_its_own_streams(fake_driver, monkeypatch):
    from backends.cuda.lanes import plan_lanes
    streams = iter(range(950, 960))
    monkeypatch.setattr(driver, "new_stream", lambda: next(streams))     # 950: its capture stream
    steps = [device_run.KernelStep("a", (1, 1, 1), (32, 1, 1), 0, ["t", "x"]),
             device_run.KernelStep("b", (1, 1, 1), (32, 1, 1), 0, ["u", "x"]),
             device_run.KernelStep("c", (1, 1, 1), (32, 1, 1), 0, ["y", "t", "u"])]
    lanes = plan_lanes(["t", "u", "y"], [["x"], ["x"], ["t", "u"]])
    r = device_run.DeviceRunner(device_run.DeviceProgram(b"", steps, ["x"], ["y"], {"t": 0x5000, "u": 0x6000},
                                                         lanes=lanes), graphs=False)
    r.run([0x100], [0x300], [64], stream=7)
    assert [(name, s) for name, _, s in FakeLaunch.log] == [("a", 7), ("b", 951), ("c", 7)]
    # the call's start on the caller's stream, the side stream waits for it, records after b,
    # and the caller's stream waits for that before c; then the call's own end event
    assert fake_driver == [("record", 7), ("wait", 951), ("record", 951), ("wait", 7), ("record", 7)]


def test_runner_writes_a_repeated_output_once_and_copies_it(fake_driver):
    r = device_run.DeviceRunner(_program(("y", "y")), graphs=False)
    r.run([0x100, 0x200], [0x300, 0x400], [64, 64], stream=3)
    assert FakeLaunch.log[-1] == ("k2", (0x300, 0x5000, 0x100), 3)
    assert ("copy", 0x400, 0x300, 64, 3) in fake_driver


def test_runner_refuses_an_output_that_is_an_input(fake_driver):
    with pytest.raises(driver.CUDAFailure, match="is an input buffer"):
        device_run.DeviceRunner(_program(("x",)), graphs=False)


def test_runner_checks_the_argument_counts(fake_driver):
    r = device_run.DeviceRunner(_program(), graphs=False)
    with pytest.raises(driver.CUDAFailure, match="expected 2 inputs and 1 outputs"):
        r.run([0x100], [0x300], [64], stream=0)


# --- when graphs are recorded and replayed --------------------------------------------------

class Recorder:
    def __init__(self, fail=False):
        self.fail, self.log, self.destroyed, self.n = fail, [], [], 0

    def plain(self, binding, stream):
        self.log.append(("plain", binding, stream))

    def capture(self, binding):
        if self.fail:
            raise driver.CUDAFailure("capture", "cuStreamBeginCapture failed: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED")
        self.n += 1
        self.log.append(("capture", binding))
        return f"g{self.n}"

    def replay(self, handle, stream):
        self.log.append(("replay", handle, stream))

    def destroy(self, handle):
        self.destroyed.append(handle)


def test_a_binding_is_recorded_when_it_comes_back_then_replayed():
    rec = Recorder()
    g = GraphReplay(rec)
    assert [g.run((1, 2), 0) for _ in range(4)] == ["plain", "capture", "replay", "replay"]
    assert rec.log[1:] == [("capture", (1, 2)), ("replay", "g1", 0), ("replay", "g1", 0), ("replay", "g1", 0)]
    assert g.run((1, 3), 5) == "plain"                   # new addresses: plain until they repeat
    assert "on (1 recorded)" in g.describe() and "2 replayed, 1 recorded, 2 plain" in g.describe()


def test_addresses_that_never_repeat_never_pay_for_a_capture():
    rec = Recorder()
    g = GraphReplay(rec)
    assert {g.run((i,), 0) for i in range(200)} == {"plain"}
    assert not any(e[0] == "capture" for e in rec.log) and len(g.seen) <= g.remember


def test_least_recently_used_graphs_are_destroyed_beyond_the_limit():
    rec = Recorder()
    g = GraphReplay(rec, max_graphs=2)
    for key in [(1,), (1,), (2,), (2,), (1,), (3,), (3,)]:
        g.run(key, 0)
    assert rec.destroyed == ["g2"] and list(g.graphs) == [(1,), (3,)]
    g.clear()
    assert sorted(rec.destroyed) == ["g1", "g2", "g3"]


def test_a_failed_capture_turns_graphs_off_with_the_reason():
    rec = Recorder(fail=True)
    g = GraphReplay(rec)
    assert [g.run((1,), 0) for _ in range(4)] == ["plain"] * 4
    assert [e[0] for e in rec.log] == ["plain"] * 4       # the failed call still ran, plainly
    assert "off: capture failed: CUDAFailure" in g.describe() and "CAPTURE_UNSUPPORTED" in g.describe()


def test_graphs_off_means_plain_launches():
    rec = Recorder()
    g = GraphReplay(rec, enabled=False)
    assert {g.run((1,), 0) for _ in range(3)} == {"plain"}
    assert "off: turned off" in g.describe()


# --- exports -------------------------------------------------------------------------------

def test_explain_and_save_are_exported(tmp_path):
    f = compiler.compile(_softmax_add, *SPECS, budget=0.5, quiet=True, max_schedules=1, cache=str(tmp_path / "c"))
    assert compiler.explain(f) == f.explain() and "target: cpu" in compiler.explain(f)
    path = f.save(tmp_path / "f.saturn")
    g = compiler.load(path)
    x, b = _values()
    np.testing.assert_array_equal(g(x, b), f(x, b))
    assert "saturn torch.compile backend" in str(compiler.explain(None))


def test_torch_backend_target_follows_the_example_inputs():
    from compiler.torch_backend.backend import check_options, region_device

    class CudaLike:
        class device:
            type = "cuda"

    assert check_options({}, [CudaLike()])["target"] == "cuda"
    assert check_options({}, [np.zeros(1)])["target"] == "cpu"
    assert check_options({"target": "cpu"}, [CudaLike()])["target"] == "cpu"
    assert region_device("cuda") == "cuda" and region_device("cpu") == "cpu"


@pytest.mark.parametrize("causal", [False, True])
def test_cuda_attention_overloads_match_torch(causal):
    """The overloads SDPA dispatches to on CUDA, translated, against torch's SDPA on the CPU."""
    import torch
    from compiler.torch_backend.attention import sdpa_efficient_cuda, sdpa_flash_cuda
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 2, 8, 16)).astype(np.float32) for _ in range(3))
    mask = rng.standard_normal((8, 8)).astype(np.float32)
    s = [compiler.spec((1, 2, 8, 16))] * 3
    flash = compiler.compile(lambda a, b, c: sdpa_flash_cuda(a, b, c, is_causal=causal)[0], *s, target="reference")
    eff = compiler.compile(lambda a, b, c, m: sdpa_efficient_cuda(a, b, c, m, False)[0], *s,
                           compiler.spec((8, 8)), target="reference")
    tq, tk, tv = map(torch.from_numpy, (q, k, v))
    want = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal).numpy()
    np.testing.assert_allclose(flash(q, k, v), want, rtol=1e-4, atol=1e-5)
    want_m = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=torch.from_numpy(mask)).numpy()
    np.testing.assert_allclose(eff(q, k, v, mask), want_m, rtol=1e-4, atol=1e-5)


def test_hf_benchmark_table_lists_rows_skips_and_overhead():
    from benchmarks import hf_models_gpu as hf
    result = {"device": "GPU", "saturn_commit": "abc", "torch": "t", "transformers": "x", "budget": 2.0,
              "max_schedules": 2, "repeat": 10, "warmup": 3,
              "rows": [{"model": "gpt2-124M", "batch": 1, "seq": 512, "eager_ms": 2.0, "inductor_ms": 1.0,
                        "saturn_ms": 1.6, "saturn_check": "ok", "inductor_check": "ok", "saturn_regions": 3},
                       {"model": "llama-1.1B", "batch": 8, "seq": 2048, "skipped": "time limit 420 s"}],
              "overhead": {"graphs_us": 9.5, "plain_us": 14.0, "eager_us": 6.0}}
    md = hf.markdown(result)
    assert "| gpt2-124M | 1 | 512 | ok / ok | 2 | 1 | 1.6 | 1.25× | 1.6 |" in md
    assert "skipped: time limit 420 s" in md and "9.5 µs with CUDA graphs" in md


def test_library_steps_get_the_callers_stream_and_bound_pointers(fake_driver):
    seen = []

    class Call:
        def run(self, ptrs, stream):
            seen.append((ptrs, stream.handle))

    steps = [device_run.LibraryStep("gemm", Call(), ["y", "x", "w"])]
    r = device_run.DeviceRunner(device_run.DeviceProgram(b"", steps, ["x", "w"], ["y"], {}), graphs=False)
    r.run([0x100, 0x200], [0x300], [64], stream=42)
    assert seen == [([0x300, 0x100, 0x200], 42)]

    class Failing:
        def run(self, ptrs, stream):
            raise RuntimeError("cublasGemmStridedBatchedEx failed with status 13")

    bad = device_run.DeviceRunner(device_run.DeviceProgram(b"", [device_run.LibraryStep("gemm", Failing(), ["y", "x"])],
                                                           ["x"], ["y"], {}), graphs=False)
    with pytest.raises(driver.CUDAFailure, match="gemm: cublasGemmStridedBatchedEx failed"):
        bad.run([0x100], [0x300], [64], stream=0)


# --- the repeat path (device_args.FastPath) over a stand-in for torch --------------------------

class FakeTorch:
    """The few torch attributes FastPath reads, over simulated device memory."""

    class _C:
        @staticmethod
        def _cuda_getCurrentRawStream(ordinal):
            return 77

    float32, float16, bfloat16, float64, int32, int64, int8, uint8, bool = (
        "float32", "float16", "bfloat16", "float64", "int32", "int64", "int8", "uint8", "bool")

    def __init__(self, mem: Memory):
        self.mem = mem
        fake = self

        class Tensor:
            is_cuda = True

            def __init__(self, value: np.ndarray, device: int = 0, contiguous: bool = True, offset: int = 0):
                self.array = FakeArray(mem, value, device, offset)
                self.dtype = str(value.dtype)
                self.shape, self.device_index, self.contiguous = value.shape, device, contiguous

            def get_device(self):
                return self.device_index

            def is_contiguous(self):
                return self.contiguous

            def data_ptr(self):
                return self.array.ptr

            def numpy(self):
                return self.array.numpy()

        self.Tensor = Tensor
        self.made = []

        def empty(shape, dtype, device):
            t = fake.Tensor(np.zeros(shape, dtype), device[1])
            fake.made.append(t)
            return t
        self.empty = empty

    @staticmethod
    def device(kind, ordinal):
        return (kind, ordinal)


def _fast_setup():
    mem = Memory()
    fn = lambda x, y: (x * y + 1.0, x.sum(-1))          # noqa: E731
    specs = [compiler.spec((3, 5)), compiler.spec((3, 5))]
    graph = trace(fn, *specs)
    calls, torch_ = FakeCalls(graph, mem), FakeTorch(mem)
    return graph, specs, calls, torch_, device_args.FastPath(torch_, specs, graph.outputs, 0)


def test_repeat_path_runs_the_program_on_torch_current_stream():
    graph, specs, calls, torch_, fast = _fast_setup()
    x, y = np.arange(15, dtype=np.float32).reshape(3, 5), np.full((3, 5), 0.5, np.float32)
    stats = device_args.Stats()
    outs = fast(calls, [torch_.Tensor(x), torch_.Tensor(y)], stats)
    want = evaluate(graph, [x, y])
    assert len(outs) == 2 and all(isinstance(o, torch_.Tensor) for o in outs)
    for o, w in zip(outs, want):
        np.testing.assert_array_equal(o.numpy(), w)
    assert calls.runs[-1][2] == 77 and stats.fast_calls == stats.calls == 1 and stats.streams == {77}


@pytest.mark.parametrize("case", ["shape", "dtype", "strided", "unaligned", "device", "host", "count"])
def test_repeat_path_leaves_every_other_call_to_the_full_path(case):
    graph, specs, calls, torch_, fast = _fast_setup()
    x = np.ones((3, 5), np.float32)
    good = torch_.Tensor(x)
    other = {"shape": lambda: torch_.Tensor(np.ones((3, 4), np.float32)),
             "dtype": lambda: torch_.Tensor(x.astype(np.float16)),
             "strided": lambda: torch_.Tensor(x, contiguous=False),
             "unaligned": lambda: torch_.Tensor(x, offset=16),
             "device": lambda: torch_.Tensor(x, device=1),
             "host": lambda: x}
    args = [good] if case == "count" else [good, other[case]()]
    stats = device_args.Stats()
    assert fast(calls, args, stats) is None
    assert calls.runs == [] and stats.calls == 0 and torch_.made == []
