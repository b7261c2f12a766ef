"""Smart Turn on a window cut to the utterance instead of its fixed 8 s.

The model reads 800 feature columns (8 s, front-padded with silence), and its encoder's cost
grows with them: 38 ms a run at 800 columns, 21 ms at 500, 16 ms at 400 (one thread, an Intel
Xeon with VNNI). A caller's turn is mostly shorter than 2 s, so most of a run went on padding.
`cut_model` rewrites the ONNX graph for a narrower input: the input's width, the sequence
length its reshapes name (the one int64 constant equal to 400, the encoder's positions), and
the positional embeddings, keeping the last ones so that every column of the utterance keeps
the position it has in the 8 s window. What is dropped is the oldest padding; `CONTEXT`
columns (3 s) of it stay ahead of the utterance. Cut to 800 columns, the graph gives the
original's output to the bit (tests/unit/test_end_of_turn_window.py).

Measured on bench/turn_taking.py's corpus (`--cv`, 260 pauses of 13 real
recordings, the same transcripts for both) the verdict at 0.5 differs at 7 pauses, the
finished faded pauses called done are the same 65 of 102, and the default rule's delays and
cut-offs are the same. With 2 s of context instead of 3, 16 of 272 verdicts differed; with 1 s
or none, 21 and 32. In bench/turn_capacity.py (`--speech real:001`, 1.1 s of speech: 500
columns) turn detection costs 30 ms a turn instead of 49, and `smart` held 48 calls instead of
fewer than 32, same session. `VG_TURN_WINDOW=false` keeps the 8 s window."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from voice_gateway.turns.features import N_FRAMES

log = logging.getLogger(__name__)

WIDTHS = (400, 500, 600, 700)  # the cut models' input columns (10 ms each), below 800
CONTEXT = 300  # columns of the front padding kept ahead of the utterance (TurnConfig's default)
POSITIONS_NAME = "inner.encoder.embed_positions.weight"


def window_for(columns: int, context: int = CONTEXT) -> int:
    """The narrowest width that holds `columns` of utterance plus `context` columns of the
    padding (800 at most)."""
    need = columns + context
    return next((w for w in WIDTHS if w >= need), N_FRAMES)


def cut_model(path: Path, width: int, loaded: Any = None) -> bytes:
    """The model's graph rewritten for `width` input columns (ValueError if the graph is not
    the one this was written for). `loaded`: the file's ModelProto, already read (not changed)."""
    import onnx
    from onnx import numpy_helper

    if width % 2 or not 0 < width <= N_FRAMES:
        raise ValueError(f"width {width}: an even number of columns up to {N_FRAMES}")
    model = onnx.ModelProto()
    model.CopyFrom(loaded if loaded is not None else onnx.load(str(path)))
    graph = model.graph
    full = N_FRAMES // 2  # the encoder's positions (its second conv has stride 2)
    dims = graph.input[0].type.tensor_type.shape.dim
    inits = {i.name: i for i in graph.initializer}
    positions = inits.get(POSITIONS_NAME)
    lengths = [
        i
        for i in graph.initializer
        if i.data_type == onnx.TensorProto.INT64
        and list(i.dims) == [1]
        and int(numpy_helper.to_array(i)[0]) == full
    ]
    if len(dims) != 3 or dims[2].dim_value != N_FRAMES or positions is None or len(lengths) != 1:
        raise ValueError("not the Smart Turn v3.2 graph this cut was written for")
    table = numpy_helper.to_array(positions)
    if table.shape[0] != full:
        raise ValueError(f"positional embeddings of {table.shape[0]} rows, not {full}")
    dims[2].dim_value = width
    del graph.value_info[:]  # shapes inferred for 800 columns
    keep = width // 2
    positions.CopyFrom(
        numpy_helper.from_array(np.ascontiguousarray(table[full - keep :]), POSITIONS_NAME)
    )
    lengths[0].CopyFrom(numpy_helper.from_array(np.array([keep], dtype=np.int64), lengths[0].name))
    return bytes(model.SerializeToString())


def cut_models(path: Path, loaded: Any = None) -> dict[int, bytes]:
    """Every width in `WIDTHS`, or none (with one warning) when the graph cannot be cut.
    `loaded`: the model, already read (turns/int8.py may have changed its weights)."""
    try:
        import onnx

        if loaded is None:
            loaded = onnx.load(str(path))  # read and parsed once for every width
        return {w: cut_model(path, w, loaded) for w in WIDTHS}
    except (ImportError, ValueError) as exc:
        log.warning("Smart Turn runs on its full 8 s window: %s", exc)
        return {}
