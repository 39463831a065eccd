"""Graded questions of chapter 17, "Finding the fault". References come from course_lib.triage: the
flight-recorder dumps of a real four-rank gloo run (``data/triage_dumps.json``, made by
``python -m course_lib.triage.hang_runs data/triage_dumps.json``) read by ``triage.analyze_dumps``,
``triage.goodput.detection_rate_needed`` and ``triage_goodput``, and chapter 12's
``faults.checkpoint_bytes_per_rank``."""
from __future__ import annotations

import json
from pathlib import Path

from course_lib import faults
from course_lib.grading import NO_UNIT, Mistake, Question
from course_lib.triage.analyze import analyze_dumps
from course_lib.triage.goodput import detection_rate_needed, llama3_interruptions_per_day, triage_goodput

DUMPS = Path(__file__).resolve().parents[2] / "data" / "triage_dumps.json"
# Q3: silent corruptions at this rate per GPU-hour, on a Llama-3-sized job for 54 days
SDC = dict(flips_per_gpu_hour=1e-6, n_gpus=16_384, run_hours=54 * 24, max_undetected=0.1)
# Q4/Q5: a 70B model's mixed-precision Adam state (16 bytes a parameter) over 1,024 ranks
MODEL = dict(n_params=70e9, n_ranks=1024, bytes_per_param=16)
PEER_BW, STORAGE_BW = 25e9, 200e9        # bytes/s: one peer link; the storage system's aggregate read
# Q6/Q7: Llama 3's failure rate; a disk restart and a fast one
MTBF_S = 86400 / llama3_interruptions_per_day()
DISK = dict(save_seconds=60.0, diagnose_seconds=1800.0, restart_seconds=600.0)
FAST = dict(save_seconds=2.0, diagnose_seconds=120.0, restart_seconds=60.0)


def verdict():
    d = json.loads(DUMPS.read_text())
    return analyze_dumps(d["dumps"], d["missing"])


def _shard_bytes() -> float:
    return faults.checkpoint_bytes_per_rank(**MODEL)


QUESTIONS = [
    Question(
        "fr_rank", points=2, unit=NO_UNIT,
        prompt="The four dumps in data/triage_dumps.json: which rank never entered the collective its "
               "peers wait in?",
        expected=lambda: verdict().rank, rtol=0,
        mistakes=[Mistake.equals(0, "Rank 0 is where the launcher's error points, but it waits like two others: "
                                    "find the sequence number the waiting ranks share, and the rank whose entry "
                                    "at that number differs.")],
        hint="For each rank take its entry in progress (state 'started'); the lowest seq among them is the "
             "collective the others wait in. Which rank's entry at that seq is another call?",
    ),
    Question(
        "fr_seq", points=2, unit=NO_UNIT,
        prompt="The sequence number (each rank's own count, from 0) of the collective the peers wait in.",
        expected=lambda: verdict().seq, rtol=0,
        mistakes=[Mistake.predicate(lambda a, e: a == e + 1, "One too many: sequence numbers start at 0."),
                  Mistake.predicate(lambda a, e: a == 3, "That is the step, not the sequence number: each step "
                                                         "calls two collectives.")],
        hint="The waiting ranks' entries in state 'started' all carry it.",
    ),
    Question(
        "detection_needed", points=2, unit="fraction",
        prompt="Silent corruptions hit each GPU 1e-6 times an hour. A run on 16,384 GPUs lasts 54 days and "
               "may let at most 0.1 corruptions through undetected (expected). Which share must the "
               "detectors catch?",
        expected=lambda: detection_rate_needed(**SDC), rtol=1e-4,
        mistakes=[Mistake.predicate(lambda a: abs(a - detection_rate_needed(**(SDC | {"n_gpus": 1}))) < 1e-9,
                                    "That is one GPU's share: the job has 16,384 of them, every one can corrupt."),
                  Mistake.predicate(lambda a, e: abs(a - 100 * e) < 1e-6 * 100, "That is a percentage; answer a "
                                                                                "fraction."),
                  Mistake.predicate(lambda a, e: abs(a - (1 - e)) < 1e-9, "That is the share that may pass: "
                                                                         "the detectors must catch 1 − that.")],
        hint="Expected corruptions λ = rate × GPUs × hours; (1 − d) · λ ≤ 0.1.",
    ),
    Question(
        "restore_memory_s", points=1, unit="s",
        prompt="One rank's shard of a 70B model's training state (16 bytes a parameter, 1,024 ranks) "
               "fetched from its peer's memory at 25 GB/s: seconds.",
        expected=lambda: _shard_bytes() / PEER_BW, rtol=1e-3,
        mistakes=[Mistake.ratio(1024, "That is the whole checkpoint: the peer sends one rank's shard."),
                  Mistake.ratio(8, "8× too long: 25 GB/s is bytes per second, not bits."),
                  Mistake.ratio(1 / 8, "Bits: the state is 16 bytes a parameter, not 16 bits.")],
        hint="bytes per rank = 70e9 · 16 / 1024; over 25e9 B/s.",
    ),
    Question(
        "restore_disk_s", points=1, unit="s",
        prompt="The whole checkpoint read back from storage at 200 GB/s (aggregate, every rank reading "
               "its shard at once): seconds.",
        expected=lambda: MODEL["n_params"] * MODEL["bytes_per_param"] / STORAGE_BW, rtol=1e-3,
        mistakes=[Mistake.ratio(1 / 1024, "That is one shard: every rank reads from the same storage, which "
                                          "serves 200 GB/s to all of them together."),
                  Mistake.ratio(1 / 8, "Bits: the state is 16 bytes a parameter.")],
        hint="70e9 · 16 bytes over 200e9 B/s.",
    ),
    Question(
        "goodput_disk", points=2, unit="fraction",
        prompt="Llama 3's failure rate (466 interruptions in 54 days, one job). Checkpoints to storage block "
               "60 s, taken at Young's interval; each failure costs 30 min to diagnose and 10 min to "
               "restart. Goodput (chapter 12's first-order model)?",
        expected=lambda: triage_goodput(MTBF_S, **DISK)["goodput"], rtol=2e-3,
        mistakes=[Mistake.predicate(lambda a: abs(a - triage_goodput(MTBF_S, DISK["save_seconds"], 0.0,
                                                                     DISK["restart_seconds"])["goodput"]) < 2e-3,
                                    "Diagnosis is part of every failure's cost: R = 1800 + 600 s."),
                  Mistake.ratio(100, "That is a percentage; answer a fraction.")],
        hint="M = 54 · 86400 / 466; τ = √(2 · 60 · M); goodput = τ/(τ+δ) · (1 − (R + (τ+δ)/2)/M).",
    ),
    Question(
        "goodput_memory", points=2, unit="fraction",
        prompt="The same job with in-memory checkpoints (a save blocks 2 s), a flight recorder that names "
               "the rank in 2 min and a 1-min restart from peers' memory. Goodput?",
        expected=lambda: triage_goodput(MTBF_S, **FAST)["goodput"], rtol=2e-3,
        mistakes=[Mistake.predicate(lambda a: abs(a - faults.goodput(
                      faults.optimal_checkpoint_interval(DISK["save_seconds"], MTBF_S), FAST["save_seconds"],
                      FAST["diagnose_seconds"] + FAST["restart_seconds"], MTBF_S)) < 2e-3,
                                    "The interval moves with the save: Young's τ = √(2δM) with δ = 2 s."),
                  Mistake.ratio(100, "That is a percentage; answer a fraction.")],
        hint="The same formula with δ = 2 s, R = 120 + 60 s, and τ = √(2 · 2 · M).",
    ),
]
