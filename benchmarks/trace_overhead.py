"""Overhead of ``ampdoctor trace`` on a small transformer trained with autocast + GradScaler.

    python benchmarks/trace_overhead.py [--steps N] [--repeats R] [--device cpu|cuda]

One process measures iteration times, alternating untraced and traced blocks R times (A/B
interleaved, so drift of the machine hits both sides alike):

- untraced: N iterations of the training step, no session;
- traced, recording window: the first K iterations inside a ``TraceSession`` (op census on);
- traced, steady state: the N iterations after the window, same session.

The session measures the per-parameter gradient shares and max |g| on every iteration of the
window and then on every ``--gradient-interval``-th iteration (the session's default unless
given), and only checks the others for inf/NaN gradients. Those sampled iterations are slower
than the rest, so the table gives, beside the median ratio that the targets are about, the ratio
of the means, which spreads their cost over all iterations.

Peak memory is measured in separate child processes (one untraced, one traced, alternated R
times), each reading its own peak resident set size at the end, so the two peaks are
independent. The table reports medians and the traced/untraced ratios against the targets.
Times are wall-clock per iteration; on CUDA each iteration ends with a device synchronize on
both sides.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from ampdoctor.trace.session import (  # noqa: E402
    DEFAULT_GRADIENT_INTERVAL,
    DEFAULT_RECORD_OPS_STEPS,
    TraceSession,
)

TARGETS = {"steady": 1.10, "window": 2.5, "rss": 1.10}


# -- the model -------------------------------------------------------------------------------


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention and a GELU MLP."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(width, dim=-1)
        q, k, v = (t.view(batch, seq, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        attended = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, seq, width))
        return x + self.mlp(self.norm2(x))


class TinyTransformer(nn.Module):
    def __init__(self, vocab: int, d_model: int, heads: int, layers: int, seq: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.position = nn.Embedding(seq, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.embed(tokens) + self.position(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


class Trainer:
    """The model, optimizer and data of one benchmark process; ``step`` is one iteration."""

    def __init__(self, args: argparse.Namespace) -> None:
        torch.manual_seed(0)
        self.device = torch.device(args.device)
        self.dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}[args.dtype]
        self.model = TinyTransformer(args.vocab, args.d_model, args.heads, args.layers, args.seq).to(self.device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        generator = torch.Generator().manual_seed(1)
        self.batches = [
            torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=generator).to(self.device)
            for _ in range(4)
        ]
        self.vocab = args.vocab
        self.index = 0
        self.scale = 2.0**16
        self.scaler = None

    def new_scaler(self) -> None:
        """A GradScaler made now (inside a session: the traced class), carrying the loss scale
        reached so far so both sides train in the same regime."""
        if self.scaler is not None:
            self.scale = self.scaler.get_scale()
        self.scaler = torch.amp.GradScaler(self.device.type, init_scale=self.scale)

    def step(self) -> None:
        tokens = self.batches[self.index % len(self.batches)]
        self.index += 1
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autocast(self.device.type, dtype=self.dtype):
            logits = self.model(tokens[:, :-1])
            loss = nn.functional.cross_entropy(logits.reshape(-1, self.vocab).float(), tokens[:, 1:].reshape(-1))
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.scaler.step(self.optimizer)
        self.scaler.update()


def timed_steps(trainer: Trainer, count: int, cpu_times: Optional[list[float]] = None) -> list[float]:
    """Wall time of each of ``count`` iterations; their process CPU times go to ``cpu_times``."""
    times = []
    for _ in range(count):
        start, start_cpu = time.perf_counter(), time.process_time()
        trainer.step()
        if trainer.device.type == "cuda":
            torch.cuda.synchronize(trainer.device)
        times.append(time.perf_counter() - start)
        if cpu_times is not None:
            cpu_times.append(time.process_time() - start_cpu)
    return times


# -- timing ----------------------------------------------------------------------------------


def measure_times(args: argparse.Namespace) -> dict[str, list[list[float]]]:
    """Per repeat, the iteration times of each kind (interleaved A/B blocks); the keys ending
    in ``_cpu`` hold process CPU times, less disturbed by other work on a shared machine."""
    trainer = Trainer(args)
    trainer.new_scaler()
    timed_steps(trainer, args.warmup)
    kinds = ("untraced", "window", "steady")
    runs: dict[str, list[list[float]]] = {key: [] for kind in kinds for key in (kind, f"{kind}_cpu")}

    def block(kind: str, count: int) -> None:
        cpu: list[float] = []
        runs[kind].append(timed_steps(trainer, count, cpu))
        runs[f"{kind}_cpu"].append(cpu)

    for repeat in range(args.repeats):
        # Alternate which side goes first, so neither always runs on a just-warmed cache.
        order = ("untraced", "traced") if repeat % 2 == 0 else ("traced", "untraced")
        for side in order:
            gc.collect()
            if side == "untraced":
                trainer.new_scaler()
                block("untraced", args.steps)
            else:
                with new_session(args) as session:
                    trainer.new_scaler()
                    block("window", args.record_steps)
                    block("steady", args.steps)
                check_session(session, args)
    return runs


def new_session(args: argparse.Namespace) -> TraceSession:
    return TraceSession(steps=None, record_ops_steps=args.record_steps, gradient_interval=args.gradient_interval)


def sampled_steps(args: argparse.Namespace) -> int:
    """How many of the traced iterations get the full gradient statistics."""
    total = args.record_steps + args.steps
    first = max(args.record_steps, 1)
    return sum(1 for step in range(1, total + 1) if step <= first or step % args.gradient_interval == 0)


def check_session(session: TraceSession, args: argparse.Namespace) -> None:
    """The traced blocks must really have been traced, every instrument working."""
    observations = session.observations
    problems = []
    total = args.record_steps + args.steps
    if observations.steps != total:
        problems.append(f"{observations.steps} iterations traced, expected {total}")
    if observations.op_steps != args.record_steps:
        problems.append(f"op census over {observations.op_steps} iterations, expected {args.record_steps}")
    if not observations.gradients or not observations.activations:
        problems.append("no gradient or activation statistics")
    for stats in observations.gradients.values():
        if (stats.iterations, stats.sampled_iterations) != (total, sampled_steps(args)):
            problems.append(
                f"gradient {stats.name}: {stats.iterations} iterations, {stats.sampled_iterations} sampled; "
                f"expected {total}, {sampled_steps(args)}"
            )
            break
    problems += observations.instrument_errors
    if problems:
        raise SystemExit("trace_overhead: the traced run is not measuring what it should: " + "; ".join(problems))


# -- memory ----------------------------------------------------------------------------------


def peak_rss_kib() -> int:
    """This process's peak resident set size in KiB (VmHWM; ru_maxrss where /proc is absent)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak


def memory_child(args: argparse.Namespace) -> None:
    """Entry point of a memory child: train warmup + K + N iterations, print the peak."""
    trainer = Trainer(args)
    total = args.warmup + args.record_steps + args.steps
    if args.memory_child == "traced":
        with new_session(args):
            trainer.new_scaler()
            timed_steps(trainer, total)
    else:
        trainer.new_scaler()
        timed_steps(trainer, total)
    print(json.dumps({"peak_rss_kib": peak_rss_kib()}))


def measure_memory(args: argparse.Namespace) -> dict[str, list[int]]:
    peaks: dict[str, list[int]] = {"untraced": [], "traced": []}
    base = [sys.executable, str(Path(__file__).resolve()), *child_options(args)]
    for repeat in range(args.repeats):
        order = ("untraced", "traced") if repeat % 2 == 0 else ("traced", "untraced")
        for side in order:
            out = subprocess.run([*base, "--memory-child", side], check=True, capture_output=True, text=True)
            peaks[side].append(json.loads(out.stdout.strip().splitlines()[-1])["peak_rss_kib"])
    return peaks


def child_options(args: argparse.Namespace) -> list[str]:
    names = (
        "steps",
        "warmup",
        "record_steps",
        "gradient_interval",
        "device",
        "dtype",
        "threads",
        "d_model",
        "heads",
        "layers",
        "seq",
        "batch",
        "vocab",
    )
    options = []
    for name in names:
        options += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    return options


# -- report ----------------------------------------------------------------------------------


def median_of_medians(runs: list[list[float]]) -> float:
    return statistics.median(statistics.median(run) for run in runs)


def paired_ratio(traced: list[list[float]], untraced: list[list[float]], within=statistics.median) -> float:
    """Median over repeats of (median traced / median untraced) within the repeat (``within``:
    the statistic taken within a repeat, the median unless given)."""
    return statistics.median(within(t) / within(u) for t, u in zip(traced, untraced))


def table(args: argparse.Namespace, runs, peaks) -> str:
    untraced = median_of_medians(runs["untraced"])
    steady = median_of_medians(runs["steady"])
    window = median_of_medians(runs["window"])

    def cpu(kind: str) -> str:
        return f"{median_of_medians(runs[kind + '_cpu']) * 1e3:.1f} ms"

    def cpu_ratio(kind: str) -> str:
        return f"{paired_ratio(runs[kind + '_cpu'], runs['untraced_cpu']):.3f}"

    def mean_ratio(kind: str) -> str:
        return f"{paired_ratio(runs[kind], runs['untraced'], statistics.mean):.3f}"

    rows = [
        ("untraced iteration", f"{untraced * 1e3:.1f} ms", "1.00", "1.00", cpu("untraced"), "1.00", ""),
        (
            "traced, steady state",
            f"{steady * 1e3:.1f} ms",
            f"{paired_ratio(runs['steady'], runs['untraced']):.3f}",
            mean_ratio("steady"),
            cpu("steady"),
            cpu_ratio("steady"),
            f"< {TARGETS['steady']:.2f}",
        ),
        (
            f"traced, recording window (K={args.record_steps})",
            f"{window * 1e3:.1f} ms",
            f"{paired_ratio(runs['window'], runs['untraced']):.3f}",
            mean_ratio("window"),
            cpu("window"),
            cpu_ratio("window"),
            f"< {TARGETS['window']:.2f}",
        ),
    ]
    if peaks is not None:
        base, traced = statistics.median(peaks["untraced"]), statistics.median(peaks["traced"])
        rows += [
            ("peak RSS untraced", f"{base / 1024:.1f} MiB", "1.00", "", "", "", ""),
            (
                "peak RSS traced",
                f"{traced / 1024:.1f} MiB",
                f"{traced / base:.3f}",
                "",
                "",
                "",
                f"< {TARGETS['rss']:.2f}",
            ),
        ]
    params = sum(
        p.numel() for p in TinyTransformer(args.vocab, args.d_model, args.heads, args.layers, args.seq).parameters()
    )
    lines = [
        f"Small transformer: {args.layers} layers, d_model {args.d_model}, {args.heads} heads, seq {args.seq}, "
        f"batch {args.batch}, vocab {args.vocab} ({params / 1e6:.2f} M parameters), {args.dtype} autocast + "
        f"GradScaler, AdamW, grad clipping; device {args.device}, {torch.get_num_threads()} threads. "
        f"Gradient shares on the {args.record_steps} window iterations, then every {args.gradient_interval} "
        f"iteration(s) ({sampled_steps(args)} of {args.record_steps + args.steps} per traced block); the "
        "inf/NaN check on all.",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"torch {torch.__version__}. Medians of {args.steps} iterations x {args.repeats} interleaved A/B "
        f"repeats (window: {args.record_steps} x {args.repeats}); ratios are medians of per-repeat ratios. "
        "Wall time is what the targets are about; process CPU time is less disturbed by other "
        "processes on a shared machine. Peak RSS: medians over one child process per side and repeat.",
        "",
        "| measure | median (wall) | traced / untraced | mean traced / mean untraced | median (CPU) "
        "| traced / untraced (CPU) | target (median) |",
        "|---|---|---|---|---|---|---|",
        *["| " + " | ".join(row) + " |" for row in rows],
    ]
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="iterations per block (default 20)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved A/B repeats (default 5)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed iterations first (default 5)")
    parser.add_argument(
        "--record-steps",
        type=int,
        default=DEFAULT_RECORD_OPS_STEPS,
        help="iterations of the op-recording window K (default: the session's)",
    )
    parser.add_argument(
        "--gradient-interval",
        type=int,
        default=DEFAULT_GRADIENT_INTERVAL,
        help="the session's gradient_interval (default: the session's)",
    )
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch.set_num_threads for every process (default 1: steadier on a shared machine)",
    )
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory children")
    parser.add_argument("--memory-child", choices=("untraced", "traced"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.repeats < 1 or args.record_steps < 1 or args.gradient_interval < 1:
        parser.error("--steps, --repeats, --record-steps and --gradient-interval must be at least 1")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.memory_child:
        memory_child(args)
        return
    runs = measure_times(args)
    peaks = None if args.no_memory else measure_memory(args)
    print(table(args, runs, peaks))


if __name__ == "__main__":
    main()
