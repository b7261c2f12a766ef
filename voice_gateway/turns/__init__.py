"""Turn-taking: when has the caller finished speaking?

- config.py: `TurnConfig`, every number of it, validated once per call (settings + options.py,
  a call's own options);
- states.py: the VAD state machine (speech start, confirmation, false start, pause), which
  knows no policy; events.py: what it tells the call;
- policy.py: the end-of-turn interface (`EndOfTurn.at_pause`, `Verdict`);
- policies.py: `vad`, `smart` and `auto` as `SilenceRule`, `SmartTurn` and `AutoTurn`, and
  what each does at a pause; decision.py: the `smart` rule step by step;
- the signals they combine: transcript.py (the words), fade.py (the voice's final fade),
  model.py (Smart Turn v3.2, with features.py, window.py and int8.py);
- detector.py: `TurnDetector`, the state machine and the call's policy together."""
