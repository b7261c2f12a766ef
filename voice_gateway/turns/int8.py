"""Smart Turn's int8 weights made unsigned where the processor's int8 kernels saturate.

The model is quantized with uint8 activations and int8 weights (QDQ). onnxruntime fuses that
into u8×s8 integer kernels, and on x86 processors without VNNI those multiply pairs of bytes
into 16-bit sums that saturate (`vpmaddubsw`; onnxruntime's quantization docs name the
problem). Measured on an AMD EPYC (Zen 3, AVX2, no VNNI): on the 13 real recordings of
bench/turn_taking.py, against the same graph run in float (onnxruntime's basic optimizations
only, no integer kernels: 2x slower), two mid-sentence clips scored 0.44 instead of 0.10-0.11,
and one finished clip on the window cut to its length 0.10 instead of 0.82. An Intel Xeon
with VNNI (whose instruction adds in 32 bits) had none of it.

The weights' values stay the same when stored unsigned: w + 128 with the zero point + 128.
onnxruntime then runs u8×u8 kernels, which widen before they add: the float run's verdict on
every clip, ~10 % slower than the saturating kernels (that machine, one thread, alternating
runs, p50: 49 against 44 ms a run on the 4 s window, 112 against 92 ms on the 8 s one) and
faster than the graph run unfused in float (`session.disable_quant_qdq`: 56 and 137 ms). On
processors with VNNI, and off x86, the file is used as it is (`needs_unsigned`)."""

from __future__ import annotations

import logging
import platform
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

VNNI = ("avx512_vnni", "avx_vnni", "amx_int8")  # /proc/cpuinfo flags: 32-bit int8 dot products


def needs_unsigned(flags: str | None = None, machine: str | None = None) -> bool:
    """True on an x86 processor without VNNI (`flags`: /proc/cpuinfo's, read if None)."""
    machine = (machine or platform.machine()).lower()
    if machine not in ("x86_64", "amd64", "i686", "x86"):
        return False
    if flags is None:
        try:
            with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
                flags = next((line for line in f if line.startswith("flags")), "")
        except OSError:
            return False
    have = set(flags.split(":", 1)[-1].split())
    return not have & set(VNNI)


def unsigned_weights(model: Any) -> int:
    """Store every int8 weight (a DequantizeLinear's initializer) and its zero points as uint8,
    in place; the number of tensors changed."""
    import onnx
    from onnx import numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    changed: set[str] = set()
    for node in model.graph.node:
        if node.op_type != "DequantizeLinear" or len(node.input) < 3:
            continue
        weight, zero = inits.get(node.input[0]), inits.get(node.input[2])
        if weight is None or zero is None or weight.data_type != onnx.TensorProto.INT8:
            continue
        for tensor in (weight, zero):
            if tensor.name in changed:
                continue
            values = numpy_helper.to_array(tensor).astype(np.int16) + 128
            tensor.CopyFrom(numpy_helper.from_array(values.astype(np.uint8), tensor.name))
            changed.add(tensor.name)
    return len(changed)


def for_this_cpu(path: Path, unsigned: bool | None = None) -> Any | None:
    """The model with unsigned weights when this processor needs them (`unsigned` None: ask
    `needs_unsigned`), else None: the file as it is."""
    if not (needs_unsigned() if unsigned is None else unsigned):
        return None
    try:
        import onnx
    except ImportError:
        log.warning("onnx is missing: Smart Turn runs with int8 kernels that saturate here")
        return None
    model = onnx.load(str(path))
    changed = unsigned_weights(model)
    log.info("Smart Turn: %d int8 weight tensors stored unsigned (no VNNI here)", changed)
    return model
