"""Training-loop stability: loss spikes, rollback and skip, and precision guard-rails (chapter 6).

Pretraining runs for weeks, and a run that is healthy at step 10 000 can still blow up at step
50 000. This package holds the pieces the chapter measures on the course's tiny GPT:

- :mod:`~course_lib.stability.scaler` — dynamic loss scaling for FP16 (the rule
  ``torch.amp.GradScaler`` uses) and what a value becomes when cast to FP16 or BF16.
- :mod:`~course_lib.stability.checkpoint` — checkpoints that survive a crash mid-write: temp file,
  fsync, atomic rename, and a SHA-256 checksum verified on load.
- :mod:`~course_lib.stability.loop` — a training loop whose state is explicit (model, optimizer,
  RNG, loss scaler and the data loader's position), with FP32/BF16/FP16 working precision and
  three ways to induce a spike (a corrupted data window, an LR jump, no warmup).
- :mod:`~course_lib.stability.spikes` — a loss-spike detector and the controller that rolls back
  to a healthy checkpoint and skips the offending data, PaLM-style.
- :mod:`~course_lib.stability.ablation` — the cached runs the book plots (spike zoo, guarded run,
  gradient-underflow probe, precision × warmup × clipping grid) and the command that regenerates
  them: ``python -m course_lib.stability.ablation --out data/stability_ablation.json``.

Import the module you need: ``from course_lib.stability import loop, spikes``.
"""
