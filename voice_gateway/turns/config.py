"""`TurnConfig`: every number of turn-taking, one frozen record per call.

Built once per call from the gateway's settings (`TurnConfig.from_settings`) plus the call's
own options (voice_gateway/turns/options.py), and validated in one place: each field's bounds
live in its metadata here, and the same bounds check a `VG_*` setting at start (settings.py
builds those fields with `setting_field`, so one out of bounds refuses to start, naming the
setting), a call's option (an `invalid_option` error event; the option keeps its default) and
a `TurnConfig` made by hand (ValueError naming the field).

Fields with a `setting` come from `VG_<SETTING>`; fields with an `option` a call may set
(`session.start`, a Twilio stream parameter); the others are measured constants."""

from __future__ import annotations

import math
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, Literal

Detection = Literal["auto", "vad", "smart", "words"]
KNOWN_TURN_DETECTION: tuple[Detection, ...] = ("auto", "vad", "smart", "words")


def _f(
    default: Any,
    doc: str,
    low: float | None = None,
    high: float | None = None,
    *,
    open_range: bool = False,
    setting: str | None = None,
    option: str | None = None,
) -> Any:
    """A field with its bounds (`open_range`: both ends excluded), its `VG_` setting and its
    per-call option, if any, and its description."""
    meta = {"doc": doc, "low": low, "high": high, "open": open_range}
    return field(default=default, metadata={**meta, "setting": setting, "option": option})


@dataclass(frozen=True, slots=True)
class TurnConfig:
    """One call's turn-taking. Times are milliseconds of the input timeline."""

    # -- the policy and the silence rule
    detection: Detection = _f(  # noqa: RUF009 (a dataclass field, as `field` makes)
        "auto",
        "The end-of-turn policy: `vad` the silence rule; `smart` Smart Turn v3.2 with the "
        "speculative transcript and the voice's fade, whose 'not done' waits up to "
        "`max_silence_ms`; `auto` the same signals within the silence rule's time: they end a "
        "turn sooner, and only words that run on hold it past `silence_ms`; `words` `auto` with "
        "the words read by a text end-of-utterance model: clearly unfinished words hold the "
        "turn to `max_silence_ms`, finished words on a faded voice end it at once, else as `auto`.",
        setting="turn_detection",
        option="turn_detection",
    )
    silence_ms: int = _f(
        400,
        "The silence rule: silence that ends a turn (`vad`); the pause at which `smart` and "
        "`auto` stop waiting for the model (its deadline) and at which `auto` ends a turn the "
        "voice alone called unfinished. Under 100 ms webrtcvad's gaps between words end turns.",
        100,
        2000,
        setting="endpoint_silence_ms",
        option="turn_silence_ms",
    )
    max_silence_ms: int = _f(
        1600,
        "`smart` and `auto`: the longest wait on 'not done' (never under `min_silence_ms`).",
        200,
        5000,
        setting="turn_max_silence_ms",
        option="turn_max_silence_ms",
    )
    min_speech_ms: int = _f(
        200,
        "Voiced audio before speech counts (confirmed): shorter speech is a false start that "
        "never barges in nor makes a turn.",
        20,
        2000,
        setting="min_speech_ms",
    )
    # -- the model and the words (`smart`, `auto`)
    min_silence_ms: int = _f(
        200,
        "The pause at which the end-of-turn signals are first judged (the model asked).",
        60,
        2000,
        setting="turn_min_silence_ms",
    )
    threshold: float = _f(
        0.5,
        "Smart Turn's probability from which its verdict is 'done'.",
        0.0,
        1.0,
        open_range=True,
        setting="turn_threshold",
    )
    budget_ms: int = _f(
        300,
        "A model verdict later than this after it was asked falls back to the silence rule.",
        20,
        2000,
        setting="turn_budget_ms",
    )
    queue_share: float = _f(
        0.5,
        "Of `budget_ms`, how long a run may be expected to wait for a busy model worker "
        "(else the pause falls back at once, `busy`).",
        0.0,
        1.0,
    )
    text_wait_ms: int = _f(
        400,
        "How long a 'done' from the voice waits for a transcript being decoded that will be "
        "the turn's (its veto), and, with `defer_model`, how long the model waits for it.",
        0,
        2000,
        setting="turn_text_wait_ms",
    )
    defer_model: bool = _f(
        True,
        "With the voice faded, the model is asked only when the transcript on its way cannot "
        "tell (or has not come within `text_wait_ms`).",
        setting="turn_defer_model",
    )
    fade_db: float = _f(
        -21.0,
        "A 'done' from the model also needs the voice faded this far (dB) at its last sound; "
        "0: the fade is not asked.",
        -60.0,
        0.0,
        setting="turn_fade_db",
    )
    fade_tail_ms: int = _f(
        110,
        "The fade: how much of the last sound is averaged for its level (turns/fade.py).",
        20,
        1000,
    )
    fade_range_db: float = _f(
        30.0, "The fade: audio within this of the loudest 10 ms counts as sound.", 6.0, 60.0
    )
    fade_span_ms: int = _f(
        4000,
        "The fade: the audio measured, up to the pause (its loudest part: the level).",
        500,
        8000,
    )
    sentence_ms: int | None = _f(
        None,
        "A finished sentence in the transcript ends the turn after this silence; 0: never; "
        "unset: 0 for `smart`, `auto_sentence_ms` for `auto`.",
        0,
        5000,
        setting="turn_sentence_ms",
    )
    auto_sentence_ms: int = _f(
        340,
        "`auto`'s sentence wait when `sentence_ms` is unset (bench/turn_taking.py --cv).",
        0,
        5000,
    )
    words_hold_below: float = _f(
        0.2,
        "`words`: the text model's P(complete) under which the words hold the turn up to "
        "`max_silence_ms` (on held-apart text, P < 0.2 is right 97-98 % of the time).",
        0.0,
        1.0,
    )
    words_done_from: float = _f(
        0.8,
        "`words`: the text model's P(complete) from which the words, with a faded voice or "
        "the model's 'done', end the turn at once (never under `words_hold_below`).",
        0.0,
        1.0,
    )
    use_text: bool = _f(True, "The transcript's words are a signal (off: the voice alone).")
    text_first: bool = _f(
        True,
        "With the voice faded, a transcript that says either way decides without the model.",
    )
    model_deadline: bool = _f(
        True,
        "No model run is waited for, or started, past `silence_ms` of silence (off: only "
        "`budget_ms` and `text_wait_ms` bound the wait).",
    )
    model_workers: int = _f(
        2,
        "Smart Turn threads per process (one onnxruntime thread each).",
        1,
        16,
        setting="turn_workers",
    )
    model_context_ms: int = _f(
        3000,
        "Smart Turn on a cut window: the front padding kept ahead of the utterance.",
        0,
        5000,
    )
    model_window: bool = _f(
        True,
        "Smart Turn runs on a window cut to the utterance plus `model_context_ms` of its "
        "padding (voice_gateway/turns/window.py), not on its full 8 s.",
        setting="turn_window",
    )
    # -- the VAD state machine
    frame_ms: int = _f(20, "The length of a frame fed to the VAD (10, 20 or 30 ms).", 10, 30)
    preroll_ms: int = _f(
        300, "Audio before the first voiced frame kept at the utterance's start.", 0, 2000
    )
    false_start_gap_ms: int = _f(
        200,
        "Silence that ends unconfirmed speech as a false start (at most `silence_ms`).",
        20,
        2000,
    )
    pause_ms: int = _f(
        60,
        "Silence inside a confirmed utterance that starts a pause (and its speculative "
        "transcript).",
        20,
        2000,
    )
    trailing_ms: int = _f(
        100,
        "Of the silence rule's pause, what the ended utterance's audio keeps (the rest of "
        "`silence_ms` is cut from its end; whisper likes a little room after the last word).",
        0,
        2000,
    )

    def __post_init__(self) -> None:
        for f in fields(self):
            problem = _problem(f, getattr(self, f.name))
            if problem:
                raise ValueError(f"{f.name} {problem}")

    @classmethod
    def from_settings(cls, settings: object, **call: Any) -> TurnConfig:
        """The gateway's settings (voice_gateway.settings.Settings, read by each field's setting
        name: settings.py builds those fields from this class, so this module does not import
        it back), with `call`'s fields over them (all validated here)."""
        values = {f.name: getattr(settings, s) for f in fields(cls) if (s := f.metadata["setting"])}
        return cls(**{**values, **call})

    @property
    def longest_ms(self) -> int:
        """The longest wait on 'not done': `max_silence_ms`, never under `min_silence_ms`."""
        return max(self.max_silence_ms, self.min_silence_ms)

    @property
    def deadline_ms(self) -> int | None:
        """The silence past which no model run is waited for or started (`model_deadline`):
        `silence_ms`; None when off, or when it would leave the model no time at all."""
        if not self.model_deadline or self.silence_ms <= self.min_silence_ms:
            return None
        return self.silence_ms

    def left_ms(self, waited_ms: float) -> float:
        """How long a decision `waited_ms` after `min_silence_ms` may still take (inf: no
        deadline)."""
        deadline = self.deadline_ms
        return math.inf if deadline is None else deadline - self.min_silence_ms - waited_ms

    @property
    def queue_ms(self) -> float:
        """How long a model run may be expected to wait for a worker."""
        return self.budget_ms * self.queue_share

    @property
    def fade(self) -> float | None:
        """The fade threshold (dB), or None: the fade is not asked."""
        return self.fade_db or None

    @property
    def defers_model(self) -> bool:
        """The model waits for the transcript on its way (`defer_model`, which needs the
        transcript to decide first)."""
        return self.defer_model and self.text_first and self.use_text


def _problem(f: Field[Any], value: Any) -> str:
    """What is wrong with `value` for field `f` ("" if nothing)."""
    low, high = f.metadata["low"], f.metadata["high"]
    if low is None or value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "must be a number"
    inside = low < value < high if f.metadata["open"] else low <= value <= high
    if not inside:
        return f"must be {_range(f)}"
    if isinstance(f.default, int) and not isinstance(f.default, bool) and value != int(value):
        return "must be a whole number"
    return ""


def _range(f: Field[Any]) -> str:
    low, high = f.metadata["low"], f.metadata["high"]
    return f"between {low} and {high}, both excluded" if f.metadata["open"] else f"{low} to {high}"


def field_of(name: str) -> Field[Any]:
    return next(f for f in fields(TurnConfig) if f.name == name)


def setting_field(name: str) -> Any:
    """The pydantic field of the setting behind TurnConfig field `name`: its default, bounds
    and description, so a setting and a call's option are held to the same range."""
    from pydantic import Field as Setting

    f = field_of(name)
    low, high = f.metadata["low"], f.metadata["high"]
    default = None if f.default is MISSING else f.default
    bounds: dict[str, Any] = {}
    if low is not None:
        bounds = {"gt": low, "lt": high} if f.metadata["open"] else {"ge": low, "le": high}
    return Setting(default, description=f.metadata["doc"], **bounds)
