"""The words' end-of-utterance signal for the `words` policy: the speculative transcript at a
pause (and the agent's last question, when the call knows it) read by the text classifier
(turns/text_eou.py), in three bands of its P(complete):
- under `words_hold_below` [0.2]: False, the words are clearly unfinished ("I'd like to move my
  appointment to"; on held-apart text P < 0.2 is right 97-98 % of the time);
- from `words_done_from` [0.8]: True, the words read as a whole utterance (right only about
  half the time on prefixes alone: the policy asks the voice too);
- between: None, doubt; and None when the classifier cannot tell (empty, garbage, a decoder
  loop, not English).
A pause's verdict is computed once per transcript (`WordsSignal.read` runs at every frame)."""

from __future__ import annotations

from dataclasses import dataclass

from voice_gateway.turns.config import TurnConfig
from voice_gateway.turns.text_eou import p_complete


@dataclass(frozen=True, slots=True)
class WordsReading:
    p: float | None  # the classifier's P(complete); None: it cannot tell
    complete: bool | None  # the band: False unfinished, True complete, None doubt or no P


class WordsSignal:
    """One call's reader of the words (the last reading kept: a pause's text and question
    stay the same over its frames)."""

    def __init__(self, config: TurnConfig) -> None:
        self.below = config.words_hold_below
        self.done_from = max(config.words_done_from, self.below)  # never under the hold band
        self._last: tuple[str, str | None, WordsReading] | None = None

    def read(self, text: str, question: str | None = None) -> WordsReading:
        if self._last is not None and self._last[:2] == (text, question):
            return self._last[2]
        p = p_complete(text, question)
        reading = WordsReading(p, self.band(p))
        self._last = (text, question, reading)
        return reading

    def band(self, p: float | None) -> bool | None:
        if p is None:
            return None
        if p < self.below:
            return False
        return True if p >= self.done_from else None
