"""One-node ONNX models written by hand, run on onnxruntime's CPU kernels.

onnxruntime is a dependency (Whisper's VAD, Silero); the `onnx` package is not, and these few
protobuf fields (onnx.proto3 field numbers) are all a one-node graph needs. Used for the two
products numpy does slowly here: int8 × uint8 (memory/int8_scan.py) and the encoder's dense
layers, whose small-M float32 GEMMs onnxruntime's kernels run about twice as fast as
OpenBLAS's on one thread (memory/minilm.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

FLOAT, UINT8, INT8, INT32 = 1, 2, 3, 6  # TensorProto.DataType
_TYPES = {np.dtype(np.float32): FLOAT, np.dtype(np.int8): INT8}


def field(number: int, value: int | str | bytes) -> bytes:
    """One protobuf field: a varint for an int, length-delimited for str/bytes."""

    def varint(n: int) -> bytes:
        out = bytearray()
        while n > 0x7F:
            out.append(n & 0x7F | 0x80)
            n >>= 7
        return bytes(out) + bytes([n])

    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    raw = value.encode() if isinstance(value, str) else value
    return varint(number << 3 | 2) + varint(len(raw)) + raw


Tensor = tuple[str, int, list[int | str]]  # name, element type, dims (str: symbolic)


def _value_info(tensor: Tensor) -> bytes:
    """A graph input or output (ValueInfoProto)."""
    name, elem_type, dims = tensor
    shape = b"".join(field(1, field(1 if isinstance(d, int) else 2, d)) for d in dims)
    return field(1, name) + field(2, field(1, field(1, elem_type) + field(2, shape)))


def _initializer(name: str, array: np.ndarray) -> bytes:
    """A constant tensor (TensorProto, raw little-endian data)."""
    arr = np.ascontiguousarray(array)
    dims = b"".join(field(1, d) for d in arr.shape)
    return dims + field(2, _TYPES[arr.dtype]) + field(8, name) + field(9, arr.tobytes())


def session(
    op: str, inputs: list[Tensor], output: Tensor, constants: dict[str, np.ndarray] | None = None
) -> Any:
    """An onnxruntime session of one `op` node (opset 13) whose inputs are the graph inputs
    `inputs` then the `constants` (initializers), in that order. One intra-op thread: no
    thread pool beside BLAS's, and a steady tail on a busy machine. run() is thread-safe."""
    import onnxruntime as ort

    constants = constants or {}
    names = [t[0] for t in inputs] + list(constants)
    node = b"".join(field(1, n) for n in names) + field(2, output[0]) + field(4, op)
    graph = field(1, node) + field(2, op)
    graph += b"".join(field(5, _initializer(k, v)) for k, v in constants.items())
    graph += b"".join(field(11, _value_info(t)) for t in inputs)
    graph += field(12, _value_info(output))
    opset = field(8, field(1, "") + field(2, 13))
    model = field(1, 8) + field(2, "voice-gateway") + opset + field(7, graph)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
