"""voice_gateway/turns/window.py: Smart Turn's graph cut to narrower windows. The real model
file on real recorded speech (skipped, saying why, without them); a graph of another shape is
refused with one warning and the model keeps its 8 s window."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.support.real_speech import MISSING, clips, speech_span
from tests.unit.test_end_of_turn import QUIET, SPEECH, EnergyVAD, Scripted
from voice_gateway.turns.config import TurnConfig
from voice_gateway.turns.detector import TurnDetector
from voice_gateway.turns.features import N_FRAMES, columns_of, window_features
from voice_gateway.turns.int8 import for_this_cpu
from voice_gateway.turns.model import MODEL_PACKAGE, SmartTurnModel, find_model
from voice_gateway.turns.policies import SmartTurn
from voice_gateway.turns.window import CONTEXT, WIDTHS, cut_model, cut_models, window_for

model_path = find_model()
needs_model = pytest.mark.skipif(
    model_path is None, reason=f"Smart Turn model missing: pip install --no-deps {MODEL_PACKAGE}"
)
real = clips()


def test_the_window_holds_the_utterance_and_three_seconds_before_it() -> None:
    assert CONTEXT == 300 and WIDTHS == (400, 500, 600, 700)
    columns = (0, 100, 101, 200, 300, 301, 400, 401, 800)
    assert [window_for(c) for c in columns] == [400, 400, 500, 500, 600, 700, 700, 800, 800]


def utterance(pcm: np.ndarray) -> bytes:
    _, last = speech_span(pcm)
    return pcm[: (last + 10) * 320].tobytes()  # up to 200 ms into the final pause


@needs_model
@pytest.mark.skipif(not real, reason=MISSING)
def test_cut_models_score_real_speech_as_the_full_window_does() -> None:
    """Cut to 800 columns the graph is the original (the same output to the bit); cut to the
    utterance, every clip's verdict at 0.5 is the 8 s window's, within 0.2."""
    assert model_path is not None
    full = SmartTurnModel(model_path, workers=1)
    same = SmartTurnModel(model_path, workers=1)
    import onnxruntime

    same.sessions[N_FRAMES] = onnxruntime.InferenceSession(
        cut_model(model_path, N_FRAMES, for_this_cpu(model_path, full.unsigned)),
        providers=["CPUExecutionProvider"],
    )
    cut = SmartTurnModel(model_path, workers=1, windows=True)
    assert sorted(cut.sessions) == [*WIDTHS, N_FRAMES] and sorted(full.sessions) == [N_FRAMES]
    assert (cut.width(100), cut.width(401), cut.width(None)) == (400, 800, 800)
    assert full.width(100) == N_FRAMES  # without cuts every run is on the 8 s window
    widths = set()
    for clip in real:
        pcm = utterance(clip.pcm)
        p = full.probability(pcm)
        assert same.probability(pcm) == p
        assert cut.score(window_features(pcm, N_FRAMES)) == p  # the 8 s session is the original
        q = cut.probability(pcm)
        widths.add(window_for(columns_of(pcm)))
        assert (q >= 0.5) == (p >= 0.5) and abs(q - p) < 0.2, (clip.name, p, q)
    assert {500, 600, 700} <= widths  # short clips did run on narrow windows
    for m in (full, same, cut):
        m.close()


@needs_model
def test_a_width_that_is_not_a_window_is_refused() -> None:
    assert model_path is not None
    for width in (301, 0, 802):
        with pytest.raises(ValueError, match="even number"):
            cut_model(model_path, width)


def test_another_graph_keeps_the_8_s_window_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    x = helper.make_tensor_value_info("input_features", TensorProto.FLOAT, [1, 80, N_FRAMES])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 80, N_FRAMES])
    graph = helper.make_graph(
        [helper.make_node("Identity", ["input_features"], ["logits"])], "g", [x], [y]
    )
    path = tmp_path / "other.onnx"
    onnx.save(helper.make_model(graph), str(path))
    with caplog.at_level(logging.WARNING, logger="voice_gateway.turns.window"):
        assert cut_models(path) == {}
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "full 8 s window" in warnings[0].getMessage()


def test_a_pause_asks_the_model_with_the_utterances_length() -> None:
    """SmartTurn gives the model the utterance's audio, from which the window is chosen: 300 ms
    of pre-roll, 1 s of speech and the 200 ms pause the model judges -> ~150 columns of 10 ms."""
    model = Scripted(0.9)
    widths: list[int | None] = []
    scripted_probability = model.probability

    def probability(pcm16: bytes) -> float:
        widths.append(columns_of(pcm16))
        return scripted_probability(pcm16)

    model.probability = probability  # type: ignore[method-assign]
    config = TurnConfig(use_text=False, fade_db=0.0, model_deadline=False)  # the voice alone
    det = TurnDetector(EnergyVAD(), config, SmartTurn(model, config))
    for frame in [QUIET] * 15 + [SPEECH] * 50 + [QUIET] * 30:
        det.feed(frame)
    assert len(widths) == 1 and 130 <= widths[0] <= 160, widths
    model.close()
