"""Preemption on the real embedded stack: latencies and lost work over many preemptions.

    python bench/preemption.py [--preemptions 20] [--low-images 48] [--imgsz 64]
                               [--wake poll,events] [--min-runtime 0]

Settings that differ from the defaults: the minimum runtime is 0 s (default 300 s) unless
`--min-runtime` is given; `--min-runtime 300` measures with the default, where an urgent job
waits until the victim's segment has run 300 s (the rule is not waived for urgent work).

`YOLOQ_BENCH_GPUS` sets the private stack's slots (default `1xCPU:8`; empty: the worker's
NVML inventory of the real GPUs, as bench/gpu_check.sh runs it).

`--wake poll,events` runs the whole bench once per mode, each on its own private stack
(`YOLOQ_WAKE=poll`: the worker and the runner's segment watch wake only at their 1 s polls;
`events`: Prefect's event stream wakes them, the poll stays as the fallback), and prints
the two distributions side by side with their ratio (poll / events).

A long low-tier job holds the only slot (one declared CPU slot; epochs of a
second or two, a segment that would run to the end unless preempted). Then, N
times: submit an urgent 1-epoch job, wait until it has completed and the low job
is training again (one new checkpoint since it resumed), repeat. Per preemption,
from Prefect's records:

- submit -> queued:     urgent parent run created -> its segment run created
- submit -> asked:      urgent parent run created -> victim's `yoloq.preempt_asked_at` label
- asked -> exited:      that label -> the victim segment's end time (its final state)
- exited -> urgent running: victim's end -> the urgent segment's start time (Running)
- submit -> urgent running: urgent parent run created -> urgent segment's start time
- urgent done -> low running: urgent parent's end -> the low job's next segment's start
- redone GPU-s:         training lost and done again: 0 for a victim that stopped at
                        an epoch boundary and resumed from that epoch; for a killed one,
                        its end minus its last checkpoint, plus any epochs it resumed behind.

The machine has 2 cores, possibly shared with other work: expect noise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.wake_modes import parse_wakes, run_per_wake
from yoloq.domain.contract import (CHECKPOINT_AT_LABEL, EPOCH_LABEL, PREEMPT_ASKED_AT_LABEL, PREEMPTED,
                                   start_epoch)

TRAIN_ARGS = {"seed": 0, "deterministic": True, "workers": 0, "plots": False}
LOW_EPOCHS = 10000  # never reached: the low job is stopped with the stack

@dataclass(frozen=True)
class Preemption:
    urgent_job: str
    victim: str                  # victim segment's flow run name
    victim_state: str            # "Preempted", or how else it ended
    submit_to_queued_s: float    # the urgent segment exists (parent started, analysed, queued)
    submit_to_asked_s: float
    asked_to_exited_s: float
    submit_to_urgent_running_s: float
    exited_to_urgent_running_s: float
    urgent_done_to_low_running_s: float
    redone_gpu_s: float
    stopped_at_epoch: int
    resumed_from_epoch: int


def write_spec(path: Path, **fields: Any) -> Path:
    import yaml

    spec = {"team": "bench", "model": "yolov8n.yaml", "batch": 8, "train_args": TRAIN_ARGS,
            **{k: str(v) if isinstance(v, Path) else v for k, v in fields.items()}}
    path.write_text(yaml.safe_dump(spec))
    return path


def submit(spec_path: Path) -> str:
    """What `yoloq submit` does, in this process. Returns the job id."""
    from yoloq.analysis import analyse
    from yoloq.commands.submit import submit_job
    from yoloq.domain.spec import load_spec

    spec = load_spec(spec_path)
    result = submit_job(spec, analysis=analyse(spec))
    return result["job_id"]


def parent_run_id(client: Any, job_id: str) -> Any:
    from yoloq.records.jobs import parent_run

    return parent_run(client, job_id).id


def ts(value: Any) -> float:
    return value.timestamp()


# -- following runs ----------------------------------------------------------------------

def wait_for(what: str, probe, timeout_s: float = 900, every_s: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(every_s)
    raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def training_segment(client: Any, job_id: str, after: float = 0.0) -> Any:
    """The job's Running segment that started after `after` and has checkpointed since."""
    from yoloq.records.jobs import segments_of

    for seg in segments_of(client, job_id):
        if not (seg.state and seg.state.is_running() and seg.start_time):
            continue
        first = start_epoch(seg)
        epoch = int((seg.labels or {}).get(EPOCH_LABEL, first))
        if ts(seg.start_time) > after and epoch > first:
            return seg
    return None


def final_run(client: Any, flow_run_id: str) -> Any:
    run = client.read_flow_run(flow_run_id)
    return run if run.state and run.state.is_final() else None


def one_preemption(client: Any, urgent_spec: Path, low_job: str) -> Preemption:
    from yoloq.records.jobs import segments_of

    victim_before = training_segment(client, low_job)
    urgent_job = submit(urgent_spec)
    urgent_parent_id = parent_run_id(client, urgent_job)
    parent = wait_for(f"urgent job {urgent_job}", lambda: final_run(client, urgent_parent_id))
    if not parent.state.is_completed():
        raise RuntimeError(f"urgent job {urgent_job} ended {parent.state.name}: {parent.state.message}")
    resumed = wait_for(f"{low_job} training again",
                       lambda: training_segment(client, low_job, after=ts(parent.end_time)))
    victim = client.read_flow_run(victim_before.id)
    [urgent_segment] = segments_of(client, urgent_job)
    return measure(parent, urgent_segment, victim, resumed)


def measure(urgent_parent: Any, urgent_segment: Any, victim: Any, resumed: Any) -> Preemption:
    labels = victim.labels or {}
    submitted = ts(urgent_parent.created)
    asked = float(labels[PREEMPT_ASKED_AT_LABEL])
    stopped_at = int(labels.get(EPOCH_LABEL, 0))
    resumed_from = start_epoch(resumed)
    return Preemption(
        urgent_job=urgent_parent.name, victim=victim.name, victim_state=victim.state.name,
        submit_to_queued_s=ts(urgent_segment.created) - submitted,
        submit_to_asked_s=asked - submitted,
        asked_to_exited_s=ts(victim.end_time) - asked,
        submit_to_urgent_running_s=ts(urgent_segment.start_time) - submitted,
        exited_to_urgent_running_s=ts(urgent_segment.start_time) - ts(victim.end_time),
        urgent_done_to_low_running_s=ts(resumed.start_time) - ts(urgent_parent.end_time),
        redone_gpu_s=redone_gpu_s(victim, stopped_at, resumed_from),
        stopped_at_epoch=stopped_at, resumed_from_epoch=resumed_from)


def redone_gpu_s(victim: Any, stopped_at: int, resumed_from: int) -> float:
    """Training time that is lost and must be done again (one slot, so GPU-seconds)."""
    labels = victim.labels or {}
    checkpoint_at = float(labels.get(CHECKPOINT_AT_LABEL) or ts(victim.start_time))
    lost = 0.0
    if victim.state.name != PREEMPTED:  # killed mid-epoch: the partial epoch is lost
        lost += max(0.0, ts(victim.end_time) - checkpoint_at)
    behind = stopped_at - resumed_from
    if behind > 0:  # resumed from an older checkpoint than the last one it reported
        per_epoch = (checkpoint_at - ts(victim.start_time)) / max(1, stopped_at - start_epoch(victim))
        lost += behind * per_epoch
    return lost


# -- report ------------------------------------------------------------------------------

def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


METRICS = (("submit -> urgent queued", "submit_to_queued_s"),
           ("submit -> victim asked", "submit_to_asked_s"),
           ("asked -> victim exited", "asked_to_exited_s"),
           ("victim exited -> urgent run.", "exited_to_urgent_running_s"),
           ("submit -> urgent running", "submit_to_urgent_running_s"),
           ("urgent done -> low running", "urgent_done_to_low_running_s"),
           ("redone GPU-s", "redone_gpu_s"))


def report(rows: list[Preemption]) -> None:
    print(f"\n{'#':>3} {'urgent job':22} {'victim':10} {'sub->ask':>9} {'ask->exit':>9} "
          f"{'sub->run':>9} {'low back':>9} {'redone':>7} {'epoch':>11}")
    for n, r in enumerate(rows, start=1):
        print(f"{n:3d} {r.urgent_job:22} {r.victim_state:10} {r.submit_to_asked_s:9.2f} "
              f"{r.asked_to_exited_s:9.2f} {r.submit_to_urgent_running_s:9.2f} "
              f"{r.urgent_done_to_low_running_s:9.2f} {r.redone_gpu_s:7.2f} "
              f"{r.stopped_at_epoch:5d}->{r.resumed_from_epoch:<5d}")
    print(f"\ndistribution over {len(rows)} preemptions (seconds)")
    print(f"{'':28}{'p50':>8}{'p95':>8}{'max':>8}")
    for label, attr in METRICS:
        values = [getattr(r, attr) for r in rows]
        print(f"{label:28}{percentile(values, .5):8.2f}{percentile(values, .95):8.2f}{max(values):8.2f}")
    cooperative = sum(r.victim_state == "Preempted" for r in rows)
    exact = sum(r.stopped_at_epoch == r.resumed_from_epoch for r in rows)
    print(f"victims stopped at an epoch boundary: {cooperative}/{len(rows)}; "
          f"resumed from the epoch they stopped at: {exact}/{len(rows)}")
    running = [r.submit_to_urgent_running_s for r in rows]
    redone = [r.redone_gpu_s for r in rows]
    print(f"preemption (n={len(rows)}): submit->urgent running p50 {percentile(running, .5):.1f} s, "
          f"p95 {percentile(running, .95):.1f} s; redone GPU-s p50 {percentile(redone, .5):.1f}, "
          f"max {max(redone):.1f}")


def compare(by_mode: dict[str, list[Preemption]]) -> None:
    """p50 and p95 of every metric per wake mode, with the ratio first mode / last mode."""
    modes = list(by_mode)
    print(f"\nside by side ({', '.join(f'{m}: n={len(by_mode[m])}' for m in modes)}), seconds")
    head = "".join(f"{m + ' p50':>13}{m + ' p95':>13}" for m in modes)
    print(f"{'':28}{head}{'ratio p50':>11}{'ratio p95':>11}")
    for label, attr in METRICS:
        cells, stats = "", []
        for m in modes:
            values = [getattr(r, attr) for r in by_mode[m]]
            stats.append((percentile(values, .5), percentile(values, .95)))
            cells += f"{stats[-1][0]:13.2f}{stats[-1][1]:13.2f}"
        ratio = [f"{a / b:11.2f}" if b > 0 else f"{'-':>11}" for a, b in zip(stats[0], stats[-1])]
        print(f"{label:28}{cells}{''.join(ratio)}")
    first, last = ([r.submit_to_urgent_running_s for r in by_mode[m]] for m in (modes[0], modes[-1]))
    print(f"submit -> urgent running p95: {modes[0]} {percentile(first, .95):.1f} s, {modes[-1]} "
          f"{percentile(last, .95):.1f} s, ratio {percentile(first, .95) / percentile(last, .95):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preemptions", type=int, default=20)
    parser.add_argument("--low-images", type=int, default=48,
                        help="training images of the low job (sets its epoch length)")
    parser.add_argument("--imgsz", type=int, default=64)
    parser.add_argument("--keep", action="store_true", help="keep the state folder")
    parser.add_argument("--wake", default=None,
                        help="comma-separated wake modes to compare: poll, events")
    parser.add_argument("--min-runtime", type=float, default=0.0,
                        help="the stack's minimum runtime before preemption, s (default here 0; "
                             "yoloq's default 300)")
    parser.add_argument("--json", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    modes = parse_wakes(args.wake)
    if len(modes) > 1:
        if by_mode := run_per_wake(__file__, modes):
            compare({m: [Preemption(**row) for row in rows] for m, rows in by_mode.items()})
        return
    if modes:
        os.environ["YOLOQ_WAKE"] = modes[0]

    root = Path(tempfile.mkdtemp(prefix="yoloq-bench-preemption-"))
    from yoloq.datasets.synth import synth_dataset

    low_data = synth_dataset(root / "low", train=args.low_images, val=8, imgsz=args.imgsz, seed=1)
    urgent_data = synth_dataset(root / "urgent", train=8, val=4, imgsz=args.imgsz, seed=0)
    low_spec = write_spec(root / "low.yaml", name="low-long", priority="low", data=low_data,
                          epochs=LOW_EPOCHS, segment_epochs=LOW_EPOCHS, imgsz=args.imgsz)
    urgent_spec = write_spec(root / "urgent.yaml", name="urgent", team="oncall", priority="urgent",
                             data=urgent_data, epochs=1, segment_epochs=1, imgsz=args.imgsz)
    rows: list[Preemption] = []
    try:
        from yoloq.ops.stack import private_stack

        print(f"settings: minimum runtime {args.min_runtime:g} s (yoloq's default 300 s), "
              f"wake {os.environ.get('YOLOQ_WAKE', 'events')}", flush=True)
        with private_stack(root / "home", os.environ.get("YOLOQ_BENCH_GPUS", "1xCPU:8"),
                           min_runtime_s=args.min_runtime):
            rows = run_preemptions(low_spec, urgent_spec, args.preemptions)
    finally:
        if rows:
            report(rows)
        if rows and args.json:
            Path(args.json).write_text(json.dumps([r.__dict__ for r in rows]))
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def run_preemptions(low_spec: Path, urgent_spec: Path, count: int) -> list[Preemption]:
    from prefect.client.orchestration import get_client

    rows: list[Preemption] = []
    with get_client(sync_client=True) as client:
        low_job = submit(low_spec)
        wait_for(f"{low_job} training", lambda: training_segment(client, low_job))
        for n in range(count):
            rows.append(one_preemption(client, urgent_spec, low_job))
            r = rows[-1]
            print(f"preemption {n + 1}/{count}: submit->asked {r.submit_to_asked_s:.1f} s, "
                  f"asked->exited {r.asked_to_exited_s:.1f} s, submit->urgent running "
                  f"{r.submit_to_urgent_running_s:.1f} s, redone {r.redone_gpu_s:.1f} GPU-s "
                  f"({r.victim_state}, epoch {r.stopped_at_epoch}->{r.resumed_from_epoch})",
                  flush=True)
    return rows


if __name__ == "__main__":
    main()
