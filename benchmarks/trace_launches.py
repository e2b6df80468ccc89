"""What ``ampdoctor trace`` adds to each iteration, counted rather than timed: aten ops (a proxy
for kernel launches on an accelerator, where each costs a few microseconds of host time) and
reads of device values by the host (``item``, ``tolist``, ``bool``, ``float``, ``int``: each one
waits for the device there).

    python benchmarks/trace_launches.py [--dtype float16|float32] [--steps N] [--like-accelerator]
    python benchmarks/trace_launches.py --gradients-only [--like-accelerator]

The model is the GPT of ``benchmarks/cuda/nanogpt_train.py`` with the module structure of its
GPU size (8 layers, tied embedding) at a width a CPU trains in milliseconds, trained the way
that script trains it (two micro-steps, ``unscale_``, clipping, GradScaler for float16). It runs
untraced, then traced, each iteration under a ``TorchDispatchMode`` that counts every aten op,
and the table gives the ops and host reads per iteration of each kind: untraced, the traced
op-recording window, traced sampled iterations (the gradient statistics) and traced ordinary
ones, with the tracer's share (traced minus untraced).

On a CPU the scaler's ``found_inf`` lives in host memory, so the tracer reads it for free and
skips the per-gradient inf/NaN check, and the gradient statistics use cache-sized chunks.
``--like-accelerator`` takes the paths CUDA takes instead (``found_inf`` not readable without a
sync, the accelerator's chunk size, the fused inf/NaN check), so the op counts are those of a
CUDA run (its times are not: a CPU runs the fused check tensor by tensor).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from ampdoctor.trace import gradients  # noqa: E402
from ampdoctor.trace import session as session_module  # noqa: E402
from ampdoctor.trace.session import TraceSession  # noqa: E402

_spec = importlib.util.spec_from_file_location("nanogpt_train", ROOT / "benchmarks" / "cuda" / "nanogpt_train.py")
nanogpt = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nanogpt)

HOST_READS = ("item", "tolist", "__bool__", "__float__", "__int__")


class OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()
        self.kernels = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[func.overloadpacket.__name__] += 1
        if not func.is_view and func.overloadpacket.__name__ not in ("detach", "lift_fresh"):
            self.kernels += 1  # an op that runs a kernel on the device (views and detach do not)
        return func(*args, **(kwargs or {}))


class HostReads:
    """Counts calls of the tensor methods that read a device value on the host."""

    def __init__(self) -> None:
        self.count = 0
        self._saved = {}

    def __enter__(self) -> HostReads:
        for name in HOST_READS:
            original = getattr(torch.Tensor, name)
            self._saved[name] = original

            def counting(tensor, *args, _original=original, **kwargs):
                self.count += 1
                return _original(tensor, *args, **kwargs)

            setattr(torch.Tensor, name, counting)
        return self

    def __exit__(self, *exc) -> None:
        for name, original in self._saved.items():
            setattr(torch.Tensor, name, original)


def build(dtype: str, width: int):
    config = nanogpt.GPTConfig(block_size=64, vocab_size=512, n_layer=8, n_head=4, n_embd=width)
    torch.manual_seed(0)
    model = nanogpt.GPT(config)
    data = torch.randint(0, config.vocab_size, (20_000,))
    low = dtype == "float16"
    ctx = torch.autocast("cpu", dtype=torch.float16, enabled=low)

    def batch():
        ix = torch.randint(len(data) - config.block_size, (4,))
        x = torch.stack([data[i : i + config.block_size] for i in ix])
        y = torch.stack([data[i + 1 : i + 1 + config.block_size] for i in ix])
        return x, y

    return model, ctx, batch, low


def run(dtype: str, steps: int, traced: bool, interval: int, width: int) -> list[dict]:
    """Per iteration: aten ops (odd and sampled iterations, under the counting mode, which
    slows them down) and host reads; wall time on the other iterations, which run plainly."""
    model, ctx, batch, low = build(dtype, width)
    session = TraceSession(steps=None, gradient_interval=interval) if traced else None
    rows = []
    if session is not None:
        session.__enter__()
    try:
        scaler = torch.amp.GradScaler("cpu", enabled=low)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        X, Y = batch()
        for step in range(1, steps + 1):
            counting = step % 2 == 1 or step % (2 * interval) == 0
            started = time.perf_counter()
            with OpCounter() if counting else contextlib.nullcontext() as ops, HostReads() as reads:
                for _ in range(2):
                    with ctx:
                        loss = model(X, Y) / 2
                    X, Y = batch()
                    scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
            seconds = time.perf_counter() - started
            row = {"step": step, "reads": reads.count, "seconds": None if counting else seconds}
            if counting:
                row.update(ops=sum(ops.counts.values()), kernels=ops.kernels, top=ops.counts)
            rows.append(row)
    finally:
        if session is not None:
            session.__exit__(None, None, None)
    return rows


def gradient_ops() -> None:
    """The gradient statistics alone on the GPU size of the model (96M parameters, gradients
    filled with noise): ops of a sampled iteration's statistics and of an ordinary iteration's
    inf/NaN check, at the chunk size in force."""
    config, _ = nanogpt.SIZES["gpu"]
    model = nanogpt.GPT(config)
    for param in model.parameters():
        param.grad = torch.randn_like(param) * 1e-4
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sizes = sum(p.numel() for p in model.parameters()) / 1e6
    for full in (True, False):
        session = TraceSession(steps=None)
        monitor = gradients.GradientMonitor(session._registry, session)
        with OpCounter() as ops:
            monitor.capture(optimizer, "AdamW#1", torch.tensor(65536.0), False, full=full)
        what = "sampled: statistics" if full else "ordinary: inf/NaN check"
        top = ", ".join(f"{name} {count}" for name, count in ops.counts.most_common(6))
        print(f"{sizes:.1f}M parameters, {what}: {sum(ops.counts.values())} ops, {ops.kernels} not views ({top})")


def kind_of(step: int, window: int, interval: int) -> str:
    if step <= max(window, 1):
        return "window"
    return "sampled" if step % interval == 0 else "ordinary"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=["float16", "float32"], default="float16")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--interval", type=int, default=session_module.DEFAULT_GRADIENT_INTERVAL)
    parser.add_argument("--width", type=int, default=64, help="n_embd (small: the host-side cost shows)")
    parser.add_argument("--like-accelerator", action="store_true")
    parser.add_argument("--gradients-only", action="store_true", help="the gradient statistics of the GPU size")
    parser.add_argument("--top", type=int, default=0, help="list the N ops the tracer adds most often")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.like_accelerator:
        session_module.found_no_inf = lambda scaler, optimizer: False
        gradients.chunk_elements = lambda device: gradients.ACCELERATOR_GRADIENT_CHUNK
        gradients._FUSED_CHECK_DEVICES = frozenset({"cpu", "cuda"})
    if args.gradients_only:
        gradient_ops()
        return
    window = session_module.DEFAULT_RECORD_OPS_STEPS
    plain = run(args.dtype, args.steps, traced=False, interval=args.interval, width=args.width)
    traced = run(args.dtype, args.steps, traced=True, interval=args.interval, width=args.width)

    def medians(rows):
        ops = [r["ops"] for r in rows if "ops" in r]
        kernels = [r["kernels"] for r in rows if "ops" in r]
        times = [r["seconds"] for r in rows if r["seconds"] is not None]
        return (
            statistics.median(ops) if ops else float("nan"),
            statistics.median(kernels) if kernels else float("nan"),
            statistics.median(r["reads"] for r in rows),
            statistics.median(times) * 1e3 if times else float("nan"),
        )

    base_ops, base_kernels, base_reads, base_ms = medians(plain[1:])
    print(
        f"{args.dtype}{' (like an accelerator)' if args.like_accelerator else ''}, n_embd {args.width}: per iteration"
    )
    print(
        f"{'iterations':<22}{'aten ops':>10}{'tracer ops':>12}{'not views':>11}{'tracer':>8}"
        f"{'host reads':>12}{'tracer':>8}{'ms (CPU)':>10}"
    )
    print(
        f"{'untraced':<22}{base_ops:>10.0f}{'':>12}{base_kernels:>11.0f}{'':>8}{base_reads:>12.0f}{'':>8}{base_ms:>10.2f}"
    )
    for kind in ("window", "sampled", "ordinary"):
        rows = [r for r in traced if kind_of(r["step"], window, args.interval) == kind]
        if not rows:
            continue
        ops, kernels, reads, ms = medians(rows)
        label = f"traced, {kind} ({len(rows)})"
        print(
            f"{label:<22}{ops:>10.0f}{ops - base_ops:>+12.0f}{kernels:>11.0f}{kernels - base_kernels:>+8.0f}"
            f"{reads:>12.0f}{reads - base_reads:>+8.0f}{ms:>10.2f}"
        )
        if args.top and kind != "window":
            added = [r for r in rows if "top" in r][-1]["top"] - [r for r in plain if "top" in r][-1]["top"]
            print("    " + ", ".join(f"{name} {count}" for name, count in added.most_common(args.top)))


if __name__ == "__main__":
    main()
