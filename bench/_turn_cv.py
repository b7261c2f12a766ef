"""End-of-turn rules compared on cached per-pause scores (bench/_turn_scores.py), in sample and
leave-one-clip-out: for each of the 13 clips, the rule's thresholds are chosen on the other 12
(fewest cut-offs at 500 ms pauses among the settings whose finished-clip delay p50 is under
300 ms; ties: fewest cut-offs over all pause lengths, then the lower p50, then p95) and the
held-out clip's samples are scored with them. espeak-ng samples are never used for tuning.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from typing import Any

import numpy as np
from _turn_scores import MAX_MS, Pause, Rule, Sample, evaluate, text_at_ms

from voice_gateway.turns.config import TurnConfig
from voice_gateway.turns.text_eou import p_complete
from voice_gateway.turns.transcript import text_complete

AUTO_SENTENCE_MS = TurnConfig().auto_sentence_ms
WORDS = TurnConfig()  # `words`' bands: words_hold_below, words_done_from


def graded(fast_db: float, fast_p: float, veto_ms: float, sentence_ms: float = MAX_MS) -> Rule:
    """The graded wait: (1) a voice faded by `fast_db` and Smart Turn at `fast_p` or more end
    the turn at 200 ms, unless the transcript, when it arrives within `veto_ms` more, says the
    words run on; (2) a finished sentence in the transcript ends it at `sentence_ms`;
    (3) otherwise the maximum wait. Run-on words always wait."""

    def rule(p: Pause) -> float:
        t_at = text_at_ms(p)
        tx = text_complete(p.text) if p.text is not None else None
        drop = 0.0 if p.drop_db is None else p.drop_db
        if drop <= fast_db and p.p >= fast_p:
            if t_at <= 200.0 + veto_ms:
                if tx is not False:
                    return max(200.0, t_at)
            else:
                return 200.0 + veto_ms
        if tx is True:
            return max(sentence_ms, t_at)
        return MAX_MS

    return rule


def by_words(p: Pause, fast_db: float, within_ms: float = 200.0) -> bool | None:
    """Step 0 (turns/decision.py): a faded voice whose transcript is there at `within_ms` of
    silence (200: at the decision; more: the model deferred) and says either way -> its
    verdict; None: the model is asked (or, unfaded, nothing ends it early)."""
    if (0.0 if p.drop_db is None else p.drop_db) > fast_db or p.text is None:
        return None
    return text_complete(p.text) if text_at_ms(p) <= within_ms else None


def text_first(
    fast_db: float,
    fast_p: float,
    sentence_ms: float = MAX_MS,
    veto_ms: float = 0.0,
    defer_ms: float = 0.0,
) -> Rule:
    """As `graded(fast_db, fast_p, veto_ms)`, with step 0 first: with the voice faded, a
    transcript that says either way decides when it comes, unless the model's "done" ended the
    turn before it (after `veto_ms`). `defer_ms`: the model is asked only when the transcript
    cannot tell, or has not come this long after 200 ms (`SmartTurn.defer_model`); its verdict
    then comes a frame later. `model_asked` counts the pauses that run it.
    `text_first(-21, 0.5, veto_ms=400, defer_ms=400)` is `smart`'s defaults."""
    then = graded(fast_db, fast_p, veto_ms, sentence_ms)
    wait = max(veto_ms, defer_ms)

    def rule(p: Pause) -> float:
        faded = (0.0 if p.drop_db is None else p.drop_db) <= fast_db
        t_at = text_at_ms(p)
        words = text_complete(p.text) if faded and p.text is not None else None
        if words is not None and (t_at <= 200.0 + wait or p.p < fast_p):
            return max(200.0, t_at) if words else MAX_MS
        ms = then(p)
        if defer_ms and faded and ms < MAX_MS:
            asked = min(t_at, 200.0 + defer_ms) if p.text is not None else 200.0 + defer_ms
            return max(ms, asked + 20.0)
        return ms

    return rule


def model_asked(
    samples: list[Sample], fast_db: float, skip_on_text: bool, defer_ms: float = 0.0
) -> int:
    """Recorded pauses with a voice faded by `fast_db` (the model's) that would run the model."""
    faded = [p for s in samples for p in s.pauses if (p.drop_db or 0.0) <= fast_db]
    within = 200.0 + defer_ms
    return sum(1 for p in faded if not (skip_on_text and by_words(p, fast_db, within) is not None))


def middle(kind: str, wait_ms: float, fast: Rule | None = None) -> Rule:
    """A middle step after `fast` (default: the -21 dB / 0.5 rule): when some signals agree
    (`kind`: "model" = P ≥ 0.5, "sentence" = a finished sentence, "model|sentence",
    "model&sentence"), end at `wait_ms`; run-on words still wait the maximum."""
    first = fast or graded(-21, 0.5, 0)

    def rule(p: Pause) -> float:
        if (ms := first(p)) < MAX_MS:
            return ms
        tx = text_complete(p.text) if p.text is not None else None
        model, sentence = p.p >= 0.5, tx is True
        agree = {
            "model": model,
            "sentence": sentence,
            "model|sentence": model or sentence,
            "model&sentence": model and sentence,
        }[kind]
        if tx is False or not agree:
            return MAX_MS
        return max(wait_ms, text_at_ms(p)) if kind != "model" else wait_ms

    return rule


def within(cap_ms: float, sentence_ms: float, fast: Rule | None = None) -> Rule:
    """`auto` (turns/smart.py `unsure_ms`): the defaults' early ends (`fast`), a finished
    sentence at `sentence_ms`, words that run on the maximum wait, anything else the silence
    rule's `cap_ms`. `within(400, 340)` is `auto`'s defaults."""
    first = fast or text_first(-21, 0.5, veto_ms=400, defer_ms=400)

    def rule(p: Pause) -> float:
        tx = text_complete(p.text) if p.text is not None else None
        if tx is False:
            return MAX_MS
        if (ms := first(p)) < MAX_MS:
            return ms
        if sentence_ms and tx is True:
            return min(cap_ms, max(sentence_ms, text_at_ms(p)))
        return cap_ms

    return rule


def words(
    low: float = WORDS.words_hold_below,
    high: float = WORDS.words_done_from,
    fast_db: float = -21,
    doubt: Rule | float | None = None,
) -> Rule:
    """`words` (turns/policies.py WordsTurn): `auto` until the transcript comes, then its text
    classifier's P(complete): under `low` the maximum wait; from `high` on a voice faded by
    `fast_db` the turn ends then; anything else (doubt) `doubt`'s rule (default `auto`; a
    number: that silence once the words came); no P: `auto`. The thresholds come from
    held-apart text (turns/text_eou.py), never from these clips."""
    auto = within(400.0, AUTO_SENTENCE_MS)

    def rule(p: Pause) -> float:
        ms, t_at = auto(p), text_at_ms(p)
        pc = p_complete(p.text) if p.text is not None else None
        if pc is None or ms < t_at:  # no reading, or `auto` ended the turn before the words
            return ms
        if pc < low:
            return MAX_MS
        if pc >= high and (0.0 if p.drop_db is None else p.drop_db) <= fast_db:
            return max(200.0, t_at)
        if isinstance(doubt, float):
            return max(doubt, t_at)
        return ms if doubt is None else doubt(p)

    return rule


def compare(groups: dict[str, list[Sample]]) -> dict[str, Any]:
    """The named policies side by side, at their defaults (none tuned on these clips):
    cut-off rate per inserted pause, finished-turn delay p50/p95, per group of samples."""
    rules: dict[str, Rule] = {
        "vad": lambda p: 400.0,
        "smart": text_first(-21, 0.5, veto_ms=400, defer_ms=400),
        "auto": within(400.0, AUTO_SENTENCE_MS),
        "words": words(),
        "words_hold_0.1": words(low=0.1),
        "words_hold_0.3": words(low=0.3),
        "words_done_0.5": words(high=0.5),
        "words_doubt_silence_rule": words(doubt=400.0),
        "words_doubt_as_smart": words(doubt=text_first(-21, 0.5, veto_ms=400, defer_ms=400)),
    }
    out: dict[str, Any] = {}
    for name, rule in rules.items():
        for group, samples in groups.items():
            r = evaluate(samples, rule)
            out.setdefault(name, {})[group] = {
                "cutoff_rate": r["cutoff_rate"],
                "delay_p50_ms": r["delay_p50_ms"],
                "delay_p95_ms": r["delay_p95_ms"],
                "finished_cut_early": r["finished_cut_early"],
            }
    return out


def logistic(train: list[Sample], fast_at: float, sentence_ms: float = MAX_MS) -> Rule:
    """A logistic model of 'finished' over (fade dB, logit of Smart Turn) fitted on the
    training clips' pauses (a finished clip's final pause: 1; every other pause: 0); P at or
    above `fast_at` ends the turn at 200 ms; the transcript's finished sentence at `sentence_ms`."""
    x, y = [], []
    for s in train:
        for p in s.pauses:
            x.append(_feats(p))
            y.append(1.0 if s.pause_ms == 0 and p.length_ms == math.inf else 0.0)
    w = _fit(np.array(x), np.array(y))

    def rule(p: Pause) -> float:
        prob = 1 / (1 + math.exp(-float(np.dot(w, _feats(p)))))
        tx = text_complete(p.text) if p.text is not None else None
        if prob >= fast_at:
            return 200.0
        if tx is True:
            return max(sentence_ms, text_at_ms(p))
        return MAX_MS

    return rule


def _feats(p: Pause) -> list[float]:
    q = min(max(p.p, 1e-3), 1 - 1e-3)
    return [1.0, 0.0 if p.drop_db is None else p.drop_db / 10.0, math.log(q / (1 - q))]


def _fit(x: np.ndarray, y: np.ndarray, l2: float = 0.1, steps: int = 500) -> np.ndarray:
    w = np.zeros(x.shape[1])
    for _ in range(steps):  # Newton's method, a small ridge
        pr = 1 / (1 + np.exp(-x @ w))
        g = x.T @ (pr - y) + l2 * w
        h = (x * (pr * (1 - pr))[:, None]).T @ x + l2 * np.eye(len(w))
        w -= np.linalg.solve(h, g)
    return w


LOGISTIC_AT = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7)
GRID: dict[str, tuple[float, ...]] = {
    "fast_db": (-12, -14, -15, -16, -17, -18, -19, -20, -21, -22, -24),
    "fast_p": (0.0, 0.3, 0.5, 0.7),
    "veto_ms": (0, 100, 250),
}


def _key(r: dict[str, Any]) -> tuple[float, ...]:
    ok = r["delay_p50_ms"] is not None and r["delay_p50_ms"] < 300
    p50, p95 = r["delay_p50_ms"] or 1e9, r["delay_p95_ms"] or 1e9
    return (not ok, r["cuts"].get("500", 0), sum(r["cuts"].values()), p50, p95)


def loco(samples: list[Sample], family: str, sentence_ms: float) -> dict[str, Any]:
    """Leave-one-clip-out over the real clips."""
    rules: dict[str, Rule] = {}
    chosen: dict[str, Any] = {}
    for name in sorted({s.clip for s in samples}):
        train = [s for s in samples if s.clip != name]
        if family == "graded":
            best = min(
                (dict(zip(GRID, v, strict=True)) for v in itertools.product(*GRID.values())),
                key=lambda prm: _key(evaluate(train, graded(**prm, sentence_ms=sentence_ms))),
            )
            rules[name] = graded(**best, sentence_ms=sentence_ms)
        elif family in ("text_first", "deferred"):
            # step 0, then the graded rule: no text wait, or the defaults' 400 ms veto and the
            # model deferred as long
            wait = 400.0 if family == "deferred" else 0.0
            grid = itertools.product(GRID["fast_db"], GRID["fast_p"])
            best = dict(
                zip(
                    ("fast_db", "fast_p"),
                    min(
                        grid,
                        key=lambda v: _key(
                            evaluate(train, text_first(*v, sentence_ms, wait, wait))
                        ),
                    ),
                    strict=True,
                )
            )
            rules[name] = text_first(best["fast_db"], best["fast_p"], sentence_ms, wait, wait)
        else:
            at = min(LOGISTIC_AT, key=lambda a: _key(evaluate(train, logistic(train, a))))
            best = {"fast_at": at}
            rules[name] = logistic(train, at, sentence_ms)
        chosen[name] = best
    out = _evaluate_per_clip(samples, rules)
    out["chosen"] = chosen
    return out


def _evaluate_per_clip(held: list[Sample], rules: dict[str, Rule]) -> dict[str, Any]:
    parts = [evaluate([s for s in held if s.clip == c], r) for c, r in rules.items()]
    delays = [d for p in parts for d in p["delays"]]
    cuts: dict[str, int] = {}
    for p in parts:
        for k, v in p["cuts"].items():
            cuts[k] = cuts.get(k, 0) + v
    n = {k: sum(1 for s in held if s.pause_ms == int(k)) for k in cuts}
    return {
        "delay_p50_ms": float(np.percentile(delays, 50)),
        "delay_p95_ms": float(np.percentile(delays, 95)),
        "finished_cut_early": sum(p["finished_cut_early"] for p in parts),
        "cutoff_rate": {k: round(v / n[k], 3) for k, v in cuts.items()},
        "cuts": cuts,
    }


def _brief(r: dict[str, Any]) -> dict[str, Any]:
    keep = ("delay_p50_ms", "delay_p95_ms", "ready_p50_ms", "ready_p95_ms", "finished_cut_early")
    keep = (*keep, "cutoff_rate", "cuts", "chosen")
    return {k: (round(v, 1) if isinstance(v, float) else v) for k, v in r.items() if k in keep}


SENTENCE_MS = (600.0, 800.0, 1000.0, 1200.0)


def window_effect(real: list[Sample]) -> dict[str, Any] | None:
    """Smart Turn on the window cut to the utterance (`p`) against its 8 s window (`p_full`),
    same pauses and transcripts: verdicts at 0.5 that differ, finished faded pauses called done,
    and the default rules with each (None: the scores were recorded without cuts)."""
    pauses = [p for s in real for p in s.pauses]
    if not pauses or any(p.p_full is None for p in pauses):
        return None
    full = [
        Sample(s.clip, s.pause_ms, s.last, [replace(p, p=p.p_full) for p in s.pauses]) for s in real
    ]
    ends = [p for p in pauses if p.length_ms == math.inf and (p.drop_db or 0.0) <= -21]
    out: dict[str, Any] = {
        "pauses": len(pauses),
        "verdicts_differ": sum((p.p >= 0.5) != ((p.p_full or 0.0) >= 0.5) for p in pauses),
        "final_faded_pauses_done": {
            "of": len(ends),
            "cut": sum(p.p >= 0.5 for p in ends),
            "full": sum((p.p_full or 0.0) >= 0.5 for p in ends),
        },
    }
    rules = {
        "fade_-21_text_first_model_0.5": text_first(-21, 0.5),
        "fade_-21_model_0.5": graded(-21, 0.5, 0),
    }
    for name, rule in rules.items():
        out[name] = {"cut": _brief(evaluate(real, rule)), "full": _brief(evaluate(full, rule))}
    return out


def cross_validate(samples: list[Sample]) -> dict[str, Any]:
    """The rules in sample (all 13 clips) and held out, with espeak-ng's delays for each and
    (tuned on neither) the phone conversation's turn ends."""
    real = [s for s in samples if not s.clip.startswith(("espeak", "conversation"))]
    espeak = [s for s in samples if s.clip.startswith("espeak:")]
    talk = [s for s in samples if s.clip.startswith("conversation:")]  # a phone conversation
    paused = [s for s in samples if s.clip.startswith("espeak_paused")]
    decode = [p.decode_ms for s in samples for p in s.pauses if p.decode_ms]
    out: dict[str, Any] = {
        "decode_ms_p50": round(float(np.median(decode)), 1) if decode else None,
        "espeak_drop_db": sorted(
            round(p.drop_db, 1) for s in espeak for p in s.pauses[-1:] if p.drop_db is not None
        ),
        "espeak_p": sorted(round(p.p, 2) for s in espeak for p in s.pauses[-1:]),
        "conversation_drop_db": sorted(
            round(p.drop_db, 1) for s in talk for p in s.pauses[-1:] if p.drop_db is not None
        ),
        "conversation_p": sorted(round(p.p, 2) for s in talk for p in s.pauses[-1:]),
    }
    fixed: dict[str, Rule] = {
        "vad_400": lambda p: 400.0,  # the silence rule (`vad`, VG_ENDPOINT_SILENCE_MS)
        "old_defaults": graded(-14, 0.5, 250),  # smart + transcript + fade -14 dB, wait 250 ms
        "fade_-21_model_0.5": graded(-21, 0.5, 0),
        "fade_-21_model_0.5_wait_250": graded(-21, 0.5, 250),
        "fade_-20_alone": graded(-20, 0.0, 0),
        "fade_-21_text_first_model_0.5": text_first(-21, 0.5),
        "fade_-21_text_first_model_0.5_wait_400": text_first(-21, 0.5, veto_ms=400),
        "defaults:fade_-21_text_first_model_0.5_wait_400_deferred": text_first(
            -21, 0.5, veto_ms=400, defer_ms=400
        ),
        **{f"fade_-21_model_0.5_sentence_{int(ms)}": graded(-21, 0.5, 0, ms) for ms in SENTENCE_MS},
    }
    fixed[f"auto:within_400_sentence_{AUTO_SENTENCE_MS}"] = within(400.0, AUTO_SENTENCE_MS)
    for cap, ms in ((400.0, 0.0), (400.0, 300.0), (500.0, 340.0)):
        fixed[f"within_{int(cap)}_sentence_{int(ms)}"] = within(cap, ms)
    for kind in ("model", "model|sentence", "model&sentence"):
        for ms in (600.0, 800.0, 1000.0):
            fixed[f"fade_-21_model_0.5_then_{kind}_{int(ms)}"] = middle(kind, ms)
    for name, rule in fixed.items():
        r = _brief(evaluate(real, rule))
        r["espeak"] = _brief(evaluate(espeak, rule))
        r["espeak_number_pause_cut"] = evaluate(paused, rule)["cuts"]
        if talk:
            r["conversation"] = _brief(evaluate(talk, rule))
        out[f"in_sample:{name}"] = r
    out["model_asked"] = {
        "fade_-21_model_0.5": model_asked(real, -21, False),
        "fade_-21_text_first_model_0.5": model_asked(real, -21, True),
        "defaults:fade_-21_text_first_model_0.5_deferred_400": model_asked(real, -21, True, 400),
        "pauses": sum(len(s.pauses) for s in real),
    }
    out["window_cut_vs_8s"] = window_effect(real)
    out["policies"] = compare({"real": real, "espeak": espeak, "conversation": talk})
    for ms in (MAX_MS, *SENTENCE_MS):
        for fam in ("graded", "text_first", "deferred", "logistic"):
            out[f"held_out:{fam}_sentence_{int(ms)}"] = _brief(loco(real, fam, ms))
    for k, v in out.items():
        print(k, {a: b for a, b in v.items() if a != "chosen"} if isinstance(v, dict) else v)
    return out
