"""Language server latency: from didOpen to the first publishDiagnostics, on a 1,000-line file.

    python benchmarks/server_bench.py [--runs 5] [--lines 1000]

Each run starts ``ampdoctor server`` as a fresh process, completes the initialize handshake, then
opens a training file built by repeating a realistic training function (each copy with a
clip-before-unscale mistake, AMP201) and times the didOpen until its diagnostics arrive: the
"first" time includes importing the rules. The same text is then opened again under another URI
("again": the rules loaded, the text's own work only). The client is a plain JSON-RPC writer and
reader over the server's pipes. The table reports the median and the range of ``--runs`` runs.
Nothing here is asserted: speed is measured, never tested.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from queue import Empty, Queue

TRAINING_FUNCTION = '''\
def train_epoch_{n}(model, loader, optimizer, scheduler, criterion, scaler, device, max_norm=1.0):
    """One epoch of mixed-precision training; returns the mean loss."""
    model.train()
    total, steps = 0.0, 0
    for step, (inputs, targets) in enumerate(loader):
        inputs = inputs.to(device, non_blocking=True)
        targets = targets.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            outputs = model(inputs)
            loss = criterion(outputs, targets)
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        total += loss.item()
        steps += 1
        if step % 100 == 0:
            print(f"step {{step}}: loss {{loss.item():.4f}}, scale {{scaler.get_scale():.0f}}")
    return total / max(steps, 1)


'''

HEADER = "import torch\n\n\n"


def training_file(lines: int) -> str:
    text, n = HEADER, 0
    while text.count("\n") < lines:
        text += TRAINING_FUNCTION.format(n=n)
        n += 1
    return text


class Client:
    """Just enough of a language client: framed JSON-RPC over a subprocess's pipes."""

    def __init__(self, command: list[str]) -> None:
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.messages: Queue[dict] = Queue()
        self._ids = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        stream = self.process.stdout
        assert stream is not None
        while True:
            length = None
            while True:
                line = stream.readline()
                if not line:
                    return
                line = line.strip()
                if not line:
                    break
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
            if length is None:
                return
            self.messages.put(json.loads(stream.read(length)))

    def send(self, method: str, params: object, request: bool = False) -> int | None:
        message: dict[str, object] = {"jsonrpc": "2.0", "method": method, "params": params}
        if request:
            self._ids += 1
            message["id"] = self._ids
        body = json.dumps(message).encode("utf-8")
        assert self.process.stdin is not None
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.process.stdin.flush()
        return self._ids if request else None

    def wait(self, accept, timeout: float = 120.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            try:
                message = self.messages.get(timeout=max(0.0, deadline - time.monotonic()))
            except Empty:
                raise TimeoutError("no answer from the server") from None
            if accept(message):
                return message

    def request(self, method: str, params: object) -> dict:
        sent = self.send(method, params, request=True)
        return self.wait(lambda m: m.get("id") == sent and "method" not in m)

    def close(self) -> None:
        self.request("shutdown", None)
        self.send("exit", None)
        self.process.wait(timeout=30)


def open_and_time(client: Client, uri: str, text: str) -> tuple[float, int]:
    item = {"uri": uri, "languageId": "python", "version": 1, "text": text}
    start = time.perf_counter()
    client.send("textDocument/didOpen", {"textDocument": item})
    message = client.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics" and m["params"]["uri"] == uri)
    return time.perf_counter() - start, len(message["params"]["diagnostics"])


def one_run(text: str, folder: Path) -> tuple[float, float, int]:
    client = Client([sys.executable, "-m", "ampdoctor", "server"])
    try:
        client.request("initialize", {"processId": None, "rootUri": folder.as_uri(), "capabilities": {}})
        client.send("initialized", {})
        first, found = open_and_time(client, (folder / "train.py").as_uri(), text)
        again, _ = open_and_time(client, (folder / "train_copy.py").as_uri(), text)
    finally:
        client.close()
    return first, again, found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--lines", type=int, default=1000)
    args = parser.parse_args()
    text = training_file(args.lines)
    firsts, agains, found = [], [], 0
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(args.runs):
            first, again, found = one_run(text, Path(folder))
            firsts.append(first)
            agains.append(again)
    print(f"{text.count(chr(10))} lines, {found} diagnostics, {args.runs} runs (fresh server each)")
    for label, times in (("didOpen -> diagnostics, first", firsts), ("didOpen -> diagnostics, again", agains)):
        ms = [t * 1000 for t in times]
        print(f"  {label}: median {statistics.median(ms):.0f} ms (min {min(ms):.0f}, max {max(ms):.0f})")


if __name__ == "__main__":
    main()
