"""Write the summary of a ``run.sh`` run: one block per step (command, exit status, wall time),
the losses of each traced run compared bit for bit with its plain run, the headline of each
ampdoctor report (from its JSON) and the start of its text report.

    python summarize.py LOGS_DIR SUMMARY_PATH

LOGS_DIR holds ``env.txt``, ``steps.tsv`` (one line per step: name, reference step, expected exit
status, exit status, wall seconds, limit seconds, JSON path, command) and each step's
``NAME.out``/``NAME.err``. Standard library only, so that it runs before anything is imported.
"""

import json
import re
import sys
from pathlib import Path

# What the scripts print per iteration, micro-batch or step: ``... loss REPR hex HEX``, ``... weights hex HEX``.
HEX_LINE = re.compile(r"^(?P<label>(?:step|micro|batch) \d+ (?:loss \S+ |weights ))hex (?P<hex>\S+)")
REPORT_START = re.compile(r"^ampdoctor trace .*: \d+ iteration")
TEXT_LINES = 60
TAIL_LINES = 25


def hex_values(path: Path) -> list[tuple[str, str]]:
    """(label, hex) per printed value, in order; the label names the step without the value."""
    values = []
    for line in read_lines(path):
        match = HEX_LINE.match(line.strip())
        if match:
            label = re.sub(r" loss \S+ $", " loss", match["label"]).strip()
            values.append((label, match["hex"]))
    return values


def read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()
    except OSError:
        return []


def compare_losses(run: Path, reference: Path) -> str:
    ours, theirs = hex_values(run), hex_values(reference)
    if not ours or not theirs:
        return f"losses: not compared ({len(ours)} printed here, {len(theirs)} in the plain run)"
    common = min(len(ours), len(theirs))
    for index in range(common):
        if ours[index] != theirs[index]:
            return (
                f"losses: DIFFER at value {index + 1} of {common} compared "
                f"({ours[index][0]} {float.fromhex(ours[index][1])!r} vs {theirs[index][0]} "
                f"{float.fromhex(theirs[index][1])!r} in the plain run)"
            )
    return f"losses: {common} of {common} values equal bit for bit ({len(ours)} printed here, {len(theirs)} in the plain run)"


def short(text: object, limit: int = 220) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def headline(report: dict) -> list[str]:
    uses = report.get("uses") or {}
    lines = [
        f"report: steps {report.get('steps')} stopped={report.get('stopped')} completed={report.get('completed')} "
        f"autocast={uses.get('autocast')} grad_scaler={uses.get('grad_scaler')} "
        f"scaler_steps={uses.get('scaler_steps')} optimizer_steps={uses.get('optimizer_steps')} "
        f"backward_calls={uses.get('backward_calls')}",
    ]
    if report.get("error"):
        lines.append(f"  error: {short(report['error'])}")
    scale = [value for value in report.get("scale") or [] if value is not None]
    if scale:
        lines.append(f"  loss scale first {scale[0]} last {scale[-1]}; skipped iterations {report.get('skipped')}")
    for note in report.get("notes") or []:
        lines.append(f"  note: {short(note)}")
    findings = report.get("findings") or []
    for finding in findings:
        where = f" {Path(finding['path']).name}:{finding.get('line')}" if finding.get("path") else ""
        lines.append(f"  {finding.get('code')} {finding.get('severity')}{where}: {short(finding.get('message'))}")
    if not findings:
        lines.append("  no runtime findings")
    static = report.get("static_findings") or []
    if static:
        codes = ", ".join(f"{item.get('code')} line {item.get('line')}" for item in static)
        lines.append(f"  lint: {codes}")
    lines += compare_headline(report.get("compare"))
    return lines


def compare_headline(compare: dict) -> list[str]:
    if not compare:
        return []
    lines = [
        f"compare: status={compare.get('status')} speedup={compare.get('speedup')} "
        f"measurable={compare.get('measurable')} memory_change={compare.get('memory_change')} "
        f"paying_off={compare.get('paying_off')} device_busy_share={compare.get('device_busy_share')}"
    ]
    if compare.get("explanation"):
        lines.append(f"  explanation: {short(compare['explanation'])}")
    for role, run in (compare.get("runs") or {}).items():
        if run:
            median = run.get("median_seconds")
            median_text = f"{median * 1e3:.2f} ms" if isinstance(median, (int, float)) else str(median)
            lines.append(
                f"  {role}: median {median_text} over {len(run.get('timed_steps') or [])} timed, "
                f"spread {run.get('spread')}, peak memory {run.get('peak_memory_bytes')} "
                f"({run.get('memory_method')}), matmul dtypes {run.get('matmul_dtypes')}"
            )
    for item in compare.get("hardware") or []:
        lines.append(f"  hardware: {short(item)}")
    for cause in compare.get("causes") or []:
        lines.append(f"  cause: {short(cause)}")
    profile = compare.get("profile") or {}
    if profile.get("top_ops"):
        ops = ", ".join(f"{op.get('op')} {op.get('share', 0):.0%}" for op in profile["top_ops"])
        lines.append(f"  top ops (mixed run): {ops}")
    return lines


def report_text(path: Path) -> list[str]:
    lines = read_lines(path)
    for index, line in enumerate(lines):
        if REPORT_START.match(line):
            return lines[index : index + TEXT_LINES]
    return []


def step_block(logs: Path, fields: list[str]) -> list[str]:
    name, reference, expected, rc, wall, limit, json_path, command = fields
    if rc == "skipped":
        return [f"== {name}: SKIPPED (time budget spent)", f"   $ {command}", ""]
    verdict = "ok" if rc == expected else f"UNEXPECTED (expected {expected})"
    timed_out = "  TIMED OUT" if rc in ("124", "137") else ""
    lines = [
        f"== {name}: exit {rc} {verdict}, wall {float(wall):.1f} s (limit {limit} s){timed_out}",
        f"   $ {command}",
    ]
    out, err = logs / f"{name}.out", logs / f"{name}.err"
    for line in read_lines(out):
        if line.startswith(("median ", "parameters ")):
            lines.append(f"   {line}")
    if reference != "-":
        lines.append("   " + compare_losses(out, logs / f"{reference}.out"))
    if json_path != "-":
        try:
            report = json.loads(Path(json_path).read_text())
        except (OSError, ValueError) as error:
            lines.append(f"   report: none ({short(error)})")
        else:
            lines += ["   " + line for line in headline(report)]
    warnings = sorted({line.strip() for line in read_lines(err) if "determinis" in line})
    lines += [f"   determinism: {short(line)}" for line in warnings[:5]]
    text = report_text(out) or report_text(err)
    if text:
        lines.append("   --- report text (start)")
        lines += ["   | " + line for line in text]
    if rc != expected or (not text and json_path != "-"):
        lines.append(f"   --- stderr (last {TAIL_LINES} lines)")
        lines += ["   ! " + line for line in read_lines(err)[-TAIL_LINES:]]
        lines.append(f"   --- stdout (last {TAIL_LINES} lines)")
        lines += ["   > " + line for line in read_lines(out)[-TAIL_LINES:]]
    return lines + [""]


def main() -> None:
    logs, summary = Path(sys.argv[1]), Path(sys.argv[2])
    lines = read_lines(logs / "env.txt") + [""]
    for row in read_lines(logs / "steps.tsv"):
        fields = row.split("\t")
        if len(fields) == 8:
            lines += step_block(logs, fields)
    partial = summary.with_name(summary.name + ".tmp")
    partial.write_text("\n".join(lines) + "\n")
    partial.replace(summary)


if __name__ == "__main__":
    main()
