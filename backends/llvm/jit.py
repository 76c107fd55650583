"""LLVM IR text -> machine code in this process: verify, optimize at O3 for the host CPU, cache
object files on disk by source hash, load them with MCJIT and hand back function addresses.

A cached object is checked before it is loaded (backends/checked.py: its key, size and
SHA-256); a damaged or foreign one is compiled again and overwritten.

A second, smaller entry per (kernel program, schedule) names its object and how each kernel is
called (`load(..., index=)` / `load_indexed`), so a warm build loads the object without rendering the
LLVM IR again (0.7 of a 12-layer model's 1.1 s warm compile). Its key holds the program's text,
the renderer's own source files and everything the object's key holds."""
from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

import llvmlite
import llvmlite.binding as llvm

from backends import checked
from backends.base import cache_root

OBJECT_MAGIC = b"SATURN-LLVM-OBJECT\n"
INDEX_MAGIC = b"SATURN-LLVM-INDEX\n"

_lock = threading.Lock()        # one compile-and-load at a time (LLVM's pass pipeline is not shared-safe)
_init_lock = threading.Lock()
_state: dict = {}


def _init():
    """The host target, set up once: filled in one step, so neither a second thread nor an
    interrupt halfway through can leave a partial state behind."""
    if not _state:
        with _init_lock:
            if not _state:
                llvm.initialize_native_target()
                llvm.initialize_native_asmprinter()
                s = {"target": llvm.Target.from_default_triple(), "cpu": llvm.get_host_cpu_name(),
                     "features": llvm.get_host_cpu_features().flatten(), "triple": llvm.get_process_triple()}
                s["tm"] = _new_target_machine(s)
                _state.update(s)
    return _state


def _new_target_machine(s=None):
    s = s or _state
    return s["target"].create_target_machine(cpu=s["cpu"], features=s["features"], opt=3, codemodel="jitdefault")


def host_description() -> str:
    s = _init()
    return f"{s['cpu']} ({s['triple']})"


def target_info() -> tuple[str, str, str]:
    """(triple, datalayout, cpu name) for modules built for this machine."""
    s = _init()
    return s["triple"], str(s["tm"].target_data), s["cpu"]


def cache_dir() -> Path:
    return cache_root() / "llvm"


def _key(ir_text: str, unroll: bool) -> str:
    s = _init()
    h = hashlib.sha256()
    for part in (ir_text, s["cpu"], s["features"], llvmlite.__version__, f"unroll={unroll}", "v2"):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _optimized(ir_text: str, unroll: bool | None = None):
    """(target state, the module after the O3 pipeline); `unroll` None keeps LLVM's default."""
    s = _init()
    mod = llvm.parse_assembly(ir_text)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    if unroll is not None:
        pto.loop_unrolling = unroll
    pb = llvm.create_pass_builder(s["tm"], pto)
    pb.getModulePassManager().run(mod, pb)
    return s, mod


def _compile_object(ir_text: str, unroll: bool) -> bytes:
    # the unroller roughly doubles compile time for a few percent at run time (the vectorizer
    # interleaves on its own, and the matmul tile is unrolled by hand): a schedule choice
    s, mod = _optimized(ir_text, unroll)
    mod.verify()
    return s["tm"].emit_object(mod)


def optimized_ir(ir_text: str, unroll: bool | None = None) -> str:
    """The module after the O3 pipeline (for inspection and tests; `unroll=False` as `load` compiles
    by default)."""
    return str(_optimized(ir_text, unroll)[1])


def assembly(ir_text: str) -> str:
    s, mod = _optimized(ir_text)
    return s["tm"].emit_assembly(mod)


def load(ir_text: str, names, use_cache: bool = True, unroll: bool = False,
         index: tuple[str, dict[str, list]] | None = None):
    """Compile (or fetch from the disk cache) and load a module; `names`: the kernels to find
    (a list, or {name: the function it calls}); `index` (an index key and each kernel's call
    info) also files the object under that key for `load_indexed`.

    Returns ({name: address}, cache hit, engine); the code lives as long as the engine object.
    """
    with _lock:
        s = _init()
        key = _key(ir_text, unroll)
        path = cache_dir() / f"{key[:40]}.o"
        obj, hit = None, False
        if use_cache:
            try:
                obj, hit = checked.read(path, OBJECT_MAGIC, key), True
            except (OSError, checked.InvalidEntry):   # missing, unreadable, damaged or foreign
                obj = None
        if obj is None:
            obj = _compile_object(ir_text, unroll)
            if use_cache:
                try:
                    checked.write(path, OBJECT_MAGIC, key, obj)
                except OSError as e:
                    checked.warn_write_failure("CPU object", path.parent, e)
        if use_cache and index is not None:
            _remember(index[0], key, index[1], names if isinstance(names, dict) else None)
        addrs, engine = _load_object(obj, names)
        return addrs, hit, engine


def _load_object(obj: bytes, names) -> tuple[dict[str, int], object]:
    """Load `obj`; each name's address (`names`: a list, or {name: the function it calls})."""
    s = _init()
    empty = llvm.parse_assembly(f'target triple = "{s["triple"]}"\n')
    engine = llvm.create_mcjit_compiler(empty, _new_target_machine())  # the engine owns it
    engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    engine.finalize_object()
    symbols = names if isinstance(names, dict) else {n: n for n in names}
    addrs = {n: engine.get_function_address(f) for n, f in symbols.items()}
    missing = [n for n, a in addrs.items() if not a]
    if missing:
        raise RuntimeError(f"compiled module lacks functions {missing}")
    return addrs, engine


_FINGERPRINT: list[str] = []


def _renderer_fingerprint() -> str:
    """sha256 of the code that turns a kernel program into LLVM IR (this package and ir/)."""
    if not _FINGERPRINT:
        h = hashlib.sha256()
        here = Path(__file__).resolve().parent
        for path in sorted(list(here.glob("*.py")) + list((here.parents[1] / "ir").glob("*.py"))):
            h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        _FINGERPRINT.append(h.hexdigest())
    return _FINGERPRINT[0]


def program_key(program_text: str, unroll: bool) -> str:
    """The index key of a kernel program under a schedule (`program_text` names both)."""
    return _key("\0".join((program_text, _renderer_fingerprint(), "index-v1")), unroll)


def _remember(pkey: str, okey: str, infos: dict[str, list], symbols: dict[str, str] | None = None) -> None:
    """Index the object `okey` (already cached) under `pkey`, with each kernel's call info (and
    the function each calls, where it is another kernel's)."""
    payload = json.dumps({"object": okey, "infos": infos, "symbols": symbols or {}}, sort_keys=True).encode()
    try:
        checked.write(cache_dir() / f"{pkey[:40]}.idx", INDEX_MAGIC, pkey, payload)
    except OSError as e:
        checked.warn_write_failure("CPU object index", cache_dir(), e)


def load_indexed(pkey: str) -> tuple[dict[str, int], object, dict[str, list]] | None:
    """(addresses, engine, call infos) of the object indexed under `pkey`, or None when the
    index entry or its object is missing, damaged or foreign (the caller renders and compiles)."""
    with _lock:
        try:
            entry = json.loads(checked.read(cache_dir() / f"{pkey[:40]}.idx", INDEX_MAGIC, pkey))
            okey, infos, symbols = entry["object"], entry["infos"], entry.get("symbols", {})
            obj = checked.read(cache_dir() / f"{okey[:40]}.o", OBJECT_MAGIC, okey)
        except (OSError, ValueError, KeyError, TypeError, checked.InvalidEntry):
            return None
        try:
            addrs, engine = _load_object(obj, {n: symbols.get(n, n) for n in infos})
        except RuntimeError:
            return None
        return addrs, engine, infos
