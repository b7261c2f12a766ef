"""The recorded phone conversation bench/turn_taking.py --cv plays as `conversation`
(tests/support/real_speech.py): the pyannote.audio wheel's sample, joined into speaker turns."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tests.support.real_speech import conversation, ended_turns
from voice_gateway.turns.fade import drop_db


@pytest.fixture(scope="module")
def talk() -> tuple[np.ndarray, list]:
    found = conversation()
    if found is None:
        pytest.skip("pyannote.audio is not installed (scripts/_setup.sh installs it with dev)")
    return found


def test_the_turns_alternate_and_lie_inside_the_recording(talk: tuple[np.ndarray, list]) -> None:
    pcm, turns = talk
    assert pcm.dtype == np.int16 and len(pcm) == 30 * 16000
    assert len(turns) == 9  # 13 transcript segments, runs of one speaker joined
    assert all(a.speaker != b.speaker for a, b in itertools.pairwise(turns))
    assert all(0 < t.start_s < t.end_s <= 30 for t in turns)
    assert turns[4].text.endswith("This is Diane in New Jersey.")
    assert turns[0].text == "Hello?" and turns[1].text == "Hello?"


def test_a_telephone_band_recording_whose_sentences_do_not_fade(
    talk: tuple[np.ndarray, list],
) -> None:
    """Why `auto` does not wait on the voice's "not done" (docs/turn_taking.md): of the turns
    of a telephone conversation that end in a gap (their decay is in the recording), 3 of 4
    end above the -21 dB fade `smart` asks for a "done", "This is Diane in New Jersey." far
    above it."""
    pcm, _ = talk
    spectrum = np.abs(np.fft.rfft(pcm.astype(np.float64)))
    hz = np.fft.rfftfreq(len(pcm), 1 / 16000)
    assert spectrum[hz > 4000].sum() < 0.01 * spectrum.sum()  # a phone line's band
    fades = [(turn.text, drop_db(said.tobytes())) for turn, said in ended_turns()]
    assert len(fades) == 4, fades
    assert sum(db is not None and db > -21 for _, db in fades) >= 3, fades
    diane = [db for text, db in fades if text.endswith("This is Diane in New Jersey.")]
    assert diane and diane[0] is not None and diane[0] > -15, fades
