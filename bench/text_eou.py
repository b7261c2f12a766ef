"""The text end-of-utterance classifier (voice_gateway/turns/text_eou.py): accuracy on text it
was never trained on, and its cost per decision.

Accuracy at P >= 0.5, per source: the share of complete utterances read as complete and of
their word-boundary prefixes read as not (tests/support/text_eou_cases.py): held-apart dialogue
turns of chatterbot-corpus and chitchat-dataset, and the project's real transcripts (LibriVox,
card games, the phone conversation). `sure`: what a policy can act on alone, the share of
prefixes given P < 0.2 and of complete utterances given P > 0.8 (coverage) and how many of
those calls are right (precision). Cost: every held-apart text and question through
`p_complete` one at a time on one thread, after the model is loaded (load_ms apart)."""

from __future__ import annotations

import time

from _common import Timer, emit, parser, summary

from tests.support.text_eou_cases import Case, heldout, real
from voice_gateway.turns import text_eou

LOW, HIGH = 0.2, 0.8


def scores(cases: list[Case]) -> dict[str, object]:
    got = [(text_eou.p_complete(c.text, c.question), c.complete) for c in cases]
    told = [(p, done) for p, done in got if p is not None]
    whole = [p for p, done in told if done]
    cut = [p for p, done in told if not done]
    low = [done for p, done in told if p < LOW]
    high = [done for p, done in told if p > HIGH]
    return {
        "complete": len(whole),
        "prefixes": len(cut),
        "cannot_tell": len(got) - len(told),
        "complete_right": round(sum(p >= 0.5 for p in whole) / max(len(whole), 1), 3),
        "prefix_right": round(sum(p < 0.5 for p in cut) / max(len(cut), 1), 3),
        "sure": {
            "prefix_coverage": round(sum(p < LOW for p in cut) / max(len(cut), 1), 3),
            "prefix_precision": round(low.count(False) / max(len(low), 1), 3),
            "complete_coverage": round(sum(p > HIGH for p in whole) / max(len(whole), 1), 3),
            "complete_precision": round(high.count(True) / max(len(high), 1), 3),
        },
    }


def main() -> None:
    args = parser(__doc__ or "").parse_args()
    with Timer() as load:
        text_eou.load()
    held = heldout()
    found = real()
    accuracy = {"heldout_all": scores(held)}
    for source in ("chatterbot", "chitchat"):
        accuracy[f"heldout_{source}"] = scores([c for c in held if c.source == source])
    for source in ("librivox", "cards", "conversation"):
        part = [c for c in found if c.source == source]
        if part:
            accuracy[source] = scores(part)
    if found:
        accuracy["real_all"] = scores(found)
    timed = held[: 500 if args.quick else len(held)] * (1 if args.quick else 3)
    per_call: list[float] = []
    for c in timed:
        t0 = time.perf_counter()
        text_eou.p_complete(c.text, c.question)
        per_call.append((time.perf_counter() - t0) * 1000)
    emit(
        "text_eou",
        {
            "quick": args.quick,
            "model": "logistic regression, 2**18 hashed ending features (numpy)",
            "weights_bytes": text_eou.WEIGHTS.stat().st_size,
            "load_ms": round(load.ms, 1),
            "per_decision": summary(per_call),
            "accuracy": accuracy,
            "real_transcripts": "found"
            if found
            else "missing: pocketsphinx-testdata, pyannote.audio",
        },
    )


if __name__ == "__main__":
    main()
