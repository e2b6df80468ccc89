"""AMP402's fix: apex AMP migrated to torch.amp by a libcst codemod (ampdoctor/lint/apex/migration.py).

Every migration is checked the same way: the result is the expected text, parses, lints without
an AMP2xx (GradScaler protocol) or AMP402 finding, and a second run changes nothing.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import libcst as cst
import pytest
from click.testing import CliRunner
from helpers import all_options, expected_pairs, found_pairs, lint_text, strip_markers

from ampdoctor.cli import main
from ampdoctor.lint.engine import fix_source

APEX = Path(__file__).resolve().parent.parent / "fixtures" / "lint" / "apex"
MIGRATED = APEX / "migrated"


def migrate(source: str) -> str:
    new, _fixed, _findings, _suppressed, parsed = fix_source(
        source, "train.py", all_options(fix=True, unsafe_fixes=True)
    )
    assert parsed
    return new


def assert_sound(migrated: str) -> None:
    """Parses, lints clean of the protocol rules and of apex, and is a fixed point."""
    ast.parse(migrated)
    cst.parse_module(migrated)
    left = [
        (f.code, f.location.line, f.message)
        for f in lint_text(migrated)
        if f.code.startswith("AMP2") or f.code == "AMP402"
    ]
    assert left == []
    assert migrate(migrated) == migrated, "a second migration changed the text again"


def _apex_references(source: str) -> list[str]:
    """apex in code (imports, names); comments and docstrings may still mention it."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "apex"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "apex":
            found.append(node.module)
        elif isinstance(node, ast.Name) and node.id in ("apex", "amp"):
            found.append(node.id)
    return found


def dedent(source: str) -> str:
    return textwrap.dedent(source).lstrip("\n")


# --------------------------------------------------------------------------------------
# Realistic scripts: before (fixtures/lint/apex/) and after (fixtures/lint/apex/migrated/)
# --------------------------------------------------------------------------------------

MIGRATABLE = sorted(p.name for p in MIGRATED.glob("*.py"))


def script(name: str) -> str:
    """A script of fixtures/lint/apex without its ``# expect:`` markers."""
    return strip_markers((APEX / name).read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", sorted(APEX.glob("*.py")), ids=lambda p: p.name)
def test_apex_script_reports_exactly_the_marked_calls(path: Path):
    source = path.read_text(encoding="utf-8")
    assert found_pairs(source, str(path)) == expected_pairs(source)


def test_every_migratable_script_has_its_expected_result():
    assert MIGRATABLE == [
        "distributed_syncbn.py",
        "glue_fp16_flag.py",
        "imagenet_o2_static_scale.py",
        "loss_from_helper.py",
        "train_two_models_o1.py",
        "trainer_class.py",
    ]


@pytest.mark.parametrize("name", MIGRATABLE)
def test_script_migrates_to_the_expected_text(name: str):
    before = script(name)
    after = migrate(before)
    assert after == (MIGRATED / name).read_text(encoding="utf-8")
    assert not _apex_references(after)
    assert_sound(after)


@pytest.mark.parametrize("name", ["unsupported_o3.py", "unsupported_fp16_optimizer.py"])
def test_unsupported_scripts_are_left_alone_and_say_why(name: str):
    source = script(name)
    assert migrate(source) == source
    findings = [f for f in lint_text(source) if f.code == "AMP402"]
    assert findings and all(f.fix is None for f in findings)
    assert all("not migrated automatically" in f.message for f in findings)


# --------------------------------------------------------------------------------------
# One construct at a time
# --------------------------------------------------------------------------------------


def test_single_model_o1_with_clipping_and_checkpoint():
    before = dedent("""
        import torch
        from apex import amp

        def train(model, optimizer, loader):
            model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
            for x, y in loader:
                out = model(x)
                loss = torch.nn.functional.mse_loss(out, y)
                optimizer.zero_grad()
                with amp.scale_loss(loss, optimizer) as scaled_loss:
                    scaled_loss.backward()
                torch.nn.utils.clip_grad_norm_(amp.master_params(optimizer), 1.0)
                optimizer.step()
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "amp": amp.state_dict()}, "c.pt")
    """)
    after = migrate(before)
    assert after == dedent("""
        import torch

        def train(model, optimizer, loader):
            scaler = torch.amp.GradScaler("cuda")
            for x, y in loader:
                with torch.autocast("cuda", dtype=torch.float16):
                    out = model(x)
                    loss = torch.nn.functional.mse_loss(out, y)
                optimizer.zero_grad()
                scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(optimizer)
                scaler.update()
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "amp": scaler.state_dict()}, "c.pt")
    """)
    assert_sound(after)


def test_lists_of_models_and_optimizers_with_num_losses_and_loss_id():
    before = dedent("""
        import torch
        from apex import amp

        def train(gen, disc, g_opt, d_opt, batches):
            [gen, disc], [g_opt, d_opt] = amp.initialize([gen, disc], [g_opt, d_opt], opt_level="O1", num_losses=2)
            for real, noise in batches:
                fake = gen(noise)
                d_loss = disc(real).mean() - disc(fake.detach()).mean()
                d_opt.zero_grad()
                with amp.scale_loss(d_loss, d_opt, loss_id=0) as scaled:
                    scaled.backward()
                d_opt.step()
                g_loss = -disc(fake).mean()
                g_opt.zero_grad()
                with amp.scale_loss(g_loss, g_opt, loss_id=1) as scaled:
                    scaled.backward()
                g_opt.step()
    """)
    after = migrate(before)
    assert after == dedent("""
        import torch

        def train(gen, disc, g_opt, d_opt, batches):
            scaler = torch.amp.GradScaler("cuda")
            for real, noise in batches:
                with torch.autocast("cuda", dtype=torch.float16):
                    fake = gen(noise)
                    d_loss = disc(real).mean() - disc(fake.detach()).mean()
                d_opt.zero_grad()
                scaler.scale(d_loss).backward()
                scaler.step(d_opt)
                with torch.autocast("cuda", dtype=torch.float16):
                    g_loss = -disc(fake).mean()
                g_opt.zero_grad()
                scaler.scale(g_loss).backward()
                scaler.step(g_opt)
                scaler.update()
    """)
    assert after.count("scaler.update()") == 1  # once per iteration, after both optimizers
    assert_sound(after)


def test_delay_unscale_under_accumulation_steps_and_updates_once_per_optimizer_step():
    before = dedent("""
        import torch
        from apex import amp

        def train(model, optimizer, loader, accumulation):
            model, optimizer = amp.initialize(model, optimizer)
            for i, (x, y) in enumerate(loader):
                loss = torch.nn.functional.mse_loss(model(x), y) / accumulation
                boundary = (i + 1) % accumulation == 0
                with amp.scale_loss(loss, optimizer, delay_unscale=not boundary) as scaled_loss:
                    scaled_loss.backward()
                if boundary:
                    optimizer.step()
                    optimizer.zero_grad()
    """)
    after = migrate(before)
    assert "delay_unscale" not in after
    assert dedent("""
                scaler.scale(loss).backward()
                if boundary:
                    scaler.step(optimizer)
                    scaler.update()
                    optimizer.zero_grad()
    """) in dedent(after.split("boundary = (i + 1) % accumulation == 0\n")[1])
    assert_sound(after)


def test_o2_keeps_a_note_and_static_loss_scale_becomes_a_fixed_init_scale():
    before = dedent("""
        import torch
        from apex import amp

        model, optimizer = amp.initialize(model, optimizer, opt_level="O2", master_weights=True, loss_scale=512)
        for x, y in loader:
            loss = criterion(model(x), y)
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
            optimizer.step()
    """)
    after = migrate(before)
    assert 'scaler = torch.amp.GradScaler("cuda", init_scale=512, growth_interval=2**31 - 1)' in after
    assert "# apex O2 cast the model to float16 and kept float32 master weights" in after
    assert "# a static loss scale: the scale starts at 512 and never grows" in after
    assert "master_weights" not in after
    assert_sound(after)


def test_dynamic_loss_scale_is_the_default_scaler():
    before = dedent("""
        import torch
        from apex import amp

        model, optimizer = amp.initialize(model, optimizer, opt_level="O1", loss_scale="dynamic")
        for x, y in loader:
            loss = criterion(model(x), y)
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
            optimizer.step()
    """)
    after = migrate(before)
    assert 'scaler = torch.amp.GradScaler("cuda")\n' in after
    assert_sound(after)


@pytest.mark.parametrize("level, reason", [("O3", "purely in float16"), ("O0", "float32 without mixed precision")])
def test_o3_and_o0_are_reported_unsupported_with_the_reason(level: str, reason: str):
    source = dedent(f'''
        from apex import amp

        model, optimizer = amp.initialize(model, optimizer, opt_level="{level}")
    ''')
    [finding] = [f for f in lint_text(source) if f.code == "AMP402"]
    assert finding.fix is None
    assert "not migrated automatically" in finding.message and reason in finding.message
    assert migrate(source) == source


def test_renamed_targets_are_rebound_and_optional_apex_import_goes():
    before = dedent("""
        import torch
        try:
            from apex import amp
        except ImportError:
            amp = None

        def fit(model, optimizer, batches):
            net, opt = amp.initialize(model, optimizer, opt_level="O1")
            for x, y in batches:
                loss = torch.nn.functional.mse_loss(net(x), y)
                with amp.scale_loss(loss, opt) as scaled_loss:
                    scaled_loss.backward()
                opt.step()
    """)
    after = migrate(before)
    assert "try:" not in after and "amp = None" not in after
    assert '    net, opt = model, optimizer\n    scaler = torch.amp.GradScaler("cuda")\n' in after
    assert "scaler.step(opt)" in after
    assert_sound(after)


def test_loss_not_computed_from_the_model_leaves_a_todo_and_the_finding_says_so():
    before = dedent("""
        import torch
        from apex import amp

        def fit(model, optimizer, batches, closure):
            model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
            for batch in batches:
                loss = closure(batch)
                with amp.scale_loss(loss, optimizer) as scaled_loss:
                    scaled_loss.backward()
                optimizer.step()
    """)
    scale_finding = next(f for f in lint_text(before) if f.code == "AMP402" and f.location.line == 8)
    assert "TODO(ampdoctor)" in scale_finding.message
    after = migrate(before)
    lines = after.splitlines()
    todo = next(i for i, line in enumerate(lines) if "# TODO(ampdoctor)" in line)
    # At the exact place: right above the statement that computes the loss.
    assert lines[todo].startswith("        # TODO(ampdoctor): put the forward pass that computes `loss`")
    after_comment = next(line for line in lines[todo:] if not line.lstrip().startswith("#"))
    assert after_comment == "        loss = closure(batch)"
    assert "torch.autocast" not in after.replace('torch.autocast("cuda", dtype=torch.float16):`', "")
    assert_sound(after)


def test_non_literal_opt_level_is_migrated_as_o1_with_a_todo():
    before = dedent("""
        import torch
        from apex import amp

        def train(model, optimizer, loader, args):
            model, optimizer = amp.initialize(model, optimizer, opt_level=args.opt_level)
            for x, y in loader:
                loss = model(x, labels=y).loss
                with amp.scale_loss(loss, optimizer) as scaled_loss:
                    scaled_loss.backward()
                optimizer.step()
    """)
    finding = next(f for f in lint_text(before) if f.code == "AMP402" and f.location.line == 5)
    assert "opt_level came from `args.opt_level`" in finding.message
    after = migrate(before)
    assert "    # TODO(ampdoctor): opt_level came from `args.opt_level`; migrated as O1" in after
    assert_sound(after)


def test_a_scale_loss_body_that_does_more_than_backward_keeps_its_statements():
    before = dedent("""
        import torch
        from apex import amp

        model, optimizer = amp.initialize(model, optimizer)
        for x, y in loader:
            loss = criterion(model(x), y)
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
                log(scaled_loss.item())
            optimizer.step()
    """)
    after = migrate(before)
    assert "    scaled_loss = scaler.scale(loss)\n    scaled_loss.backward()\n    log(scaled_loss.item())\n" in after
    assert_sound(after)


def test_scaler_lives_on_self_in_a_class_and_is_handed_to_the_functions_that_use_it():
    in_class = migrate(script("trainer_class.py"))
    assert 'self.scaler = torch.amp.GradScaler("cuda", enabled=fp16)' in in_class
    assert "enabled=self.scaler.is_enabled()" in in_class  # autocast switched with the scaler
    across = migrate(script("train_two_models_o1.py"))
    assert "global" not in across
    assert "def save_checkpoint(path, encoder, decoder, enc_opt, dec_opt, step, *, scaler):" in across
    assert "save_checkpoint(args.checkpoint, encoder, decoder, enc_opt, dec_opt, step + 1, scaler=scaler)" in across
    assert '"amp": scaler.state_dict()' in across and 'scaler.load_state_dict(checkpoint["amp"])' in across


def test_a_name_already_taken_gives_the_scaler_another_name_and_torch_is_imported():
    before = dedent("""
        from apex import amp

        scaler = "minmax"
        model, optimizer = amp.initialize(model, optimizer)
        for x, y in loader:
            loss = criterion(model(x), y)
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
            optimizer.step()
    """)
    after = migrate(before)
    assert after.startswith("import torch\n")
    assert 'grad_scaler = torch.amp.GradScaler("cuda")' in after and 'scaler = "minmax"' in after
    assert "grad_scaler.step(optimizer)" in after
    assert_sound(after)


def test_apex_parallel_maps_to_torch_and_an_unmatched_keyword_blocks_with_a_message():
    after = migrate(script("distributed_syncbn.py"))
    assert "from torch.nn.parallel import DistributedDataParallel as DDP" in after
    assert "model = DDP(model)" in after and "delay_allreduce" not in after
    assert "torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)" in after
    spelled_out = dedent("""
        import apex

        model = apex.parallel.DistributedDataParallel(model)
    """)
    assert migrate(spelled_out) == "import torch\n\nmodel = torch.nn.parallel.DistributedDataParallel(model)\n"
    assert_sound(migrate(spelled_out))
    blocked = dedent("""
        from apex.parallel import DistributedDataParallel

        model = DistributedDataParallel(model, message_size=10000000)
    """)
    [finding] = [f for f in lint_text(blocked) if f.code == "AMP402"]
    assert "`message_size=` has no equivalent" in finding.message and finding.fix is None


def test_fp16_utils_findings_say_precisely_why_they_are_not_migrated():
    findings = [f for f in lint_text(script("unsupported_fp16_optimizer.py")) if f.code == "AMP402"]
    by_name = {f.message.split("`")[1]: f.message for f in findings}
    assert "float32 master copies and its own loss scaler" in by_name["apex.fp16_utils.FP16_Optimizer"]
    assert "casts the model to float16" in by_name["apex.fp16_utils.network_to_half"]


def test_only_one_finding_carries_the_module_rewrite_and_it_is_unsafe():
    findings = list(lint_text(script("train_two_models_o1.py")))
    fixes = [f.fix for f in findings if f.fix is not None]
    assert len(fixes) == 1 and not fixes[0].is_safe
    # Safe fixes alone leave the module as it is.
    source = script("train_two_models_o1.py")
    assert fix_source(source, "train.py", all_options(fix=True))[0] == source


# --------------------------------------------------------------------------------------
# Through the command line
# --------------------------------------------------------------------------------------


def _lint(args):
    return CliRunner().invoke(main, ["lint", "--isolated", "--no-cache", *args], catch_exceptions=False)


def test_diff_shows_the_migration_and_writes_nothing(tmp_path: Path):
    target = tmp_path / "train.py"
    target.write_text(script("train_two_models_o1.py"), encoding="utf-8")
    before = target.read_text(encoding="utf-8")
    result = _lint(["--diff", "--unsafe-fixes", str(target)])
    assert result.exit_code == 1
    assert "-from apex import amp\n" in result.output
    assert '+    scaler = torch.amp.GradScaler("cuda")\n' in result.output
    assert '+        with torch.autocast("cuda", dtype=torch.float16):\n' in result.output
    assert target.read_text(encoding="utf-8") == before
    safe_only = _lint(["--diff", str(target)])
    assert "-from apex import amp" not in safe_only.output


def test_json_output_reports_the_unsafe_rewrite_without_computing_it(tmp_path: Path):
    target = tmp_path / "train.py"
    target.write_text(script("trainer_class.py"), encoding="utf-8")
    items = json.loads(_lint(["--output-format", "json", str(target)]).output)
    fixes = [item["fix"] for item in items if item["fix"] is not None]
    assert fixes == [
        {
            "description": "Migrate the module from apex to torch.amp (autocast and GradScaler)",
            "applicability": "unsafe",
            "edits": [],
        }
    ]


def test_linting_an_apex_script_does_not_import_libcst(tmp_path: Path):
    target = tmp_path / "train.py"
    target.write_text(script("train_two_models_o1.py"), encoding="utf-8")
    code = (
        "import json, sys\nfrom click.testing import CliRunner\nfrom ampdoctor.cli import main\n"
        f"r = CliRunner().invoke(main, ['lint', '--isolated', '--no-cache', {str(target)!r}])\n"
        "assert r.exit_code == 1, r.output\nprint(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    modules = set(json.loads(out.splitlines()[-1]))
    assert "ampdoctor.lint.apex.plan" in modules  # the plan was made, on the ast
    assert not {m for m in modules if m.split(".")[0] == "libcst"}
    assert "ampdoctor.lint.apex.migration" not in modules


_LOSS = re.compile(r"^step (\d+) loss ([-+0-9.eEinfa]+)$", re.M)


@pytest.mark.slow
def test_migrated_two_model_script_trains_on_cpu(tmp_path: Path):
    """The end-to-end case: --fix --unsafe-fixes, lint clean, then run with torch.amp on CPU."""
    pytest.importorskip("torch")  # the trace extra; linting and fixing need no torch
    target = tmp_path / "train.py"
    target.write_text(script("train_two_models_o1.py"), encoding="utf-8")
    assert _lint(["--fix", "--unsafe-fixes", str(target)]).exit_code == 0  # every finding fixed
    migrated = target.read_text(encoding="utf-8")
    assert _lint([str(target)]).exit_code == 0
    assert _lint(["--fix", "--unsafe-fixes", str(target)]).exit_code == 0
    assert target.read_text(encoding="utf-8") == migrated  # idempotent on disk too
    ast.parse(migrated)

    on_cpu = tmp_path / "train_cpu.py"
    on_cpu.write_text(migrated.replace('"cuda"', '"cpu"'), encoding="utf-8")
    checkpoint = tmp_path / "checkpoint.pt"
    run = subprocess.run(
        [sys.executable, str(on_cpu), "--steps", "100", "--checkpoint", str(checkpoint)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    losses = [float(value) for _, value in _LOSS.findall(run.stdout)]
    assert len(losses) == 10
    assert all(loss == loss and abs(loss) != float("inf") for loss in losses)
    assert losses[-1] < losses[0] / 2, losses
    assert checkpoint.is_file()
    # Resuming loads the models, the optimizers and the scaler's state from the checkpoint.
    resumed = subprocess.run(
        [sys.executable, str(on_cpu), "--steps", "10", "--checkpoint", str(checkpoint)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith("step 100 ")


def test_amp_behind_a_flag_becomes_a_switched_scaler_and_the_flagged_branches_merge():
    after = migrate(script("glue_fp16_flag.py"))
    assert 'scaler = torch.amp.GradScaler("cuda", enabled=args.fp16)' in after
    assert "enabled=scaler.is_enabled()" in after
    assert "if args.fp16" not in after  # a disabled scaler scales by 1: one code path does both
    assert "# TODO(ampdoctor): opt_level came from `args.fp16_opt_level`" in after
    assert "                scaler.step(optimizer)\n                scaler.update()\n" in after
    assert_sound(after)


def test_a_flagged_backward_whose_loss_cannot_be_placed_gets_one_todo_named_by_its_finding():
    before = dedent("""
        import torch
        from apex import amp

        def main(args, model, optimizer):
            if args.fp16:
                model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
            for batch in loader:
                loss = closure(batch)
                if args.fp16:
                    with amp.scale_loss(loss, optimizer) as scaled_loss:
                        scaled_loss.backward()
                else:
                    loss.backward()
                optimizer.step()
    """)
    finding = next(f for f in lint_text(before) if f.code == "AMP402" and f.location.line == 10)
    assert "TODO(ampdoctor)" in finding.message
    after = migrate(before)
    assert after.count("# TODO(ampdoctor)") == 1
    assert "        # TODO(ampdoctor): put the forward pass that computes `loss`" in after
    assert "        scaler.scale(loss).backward()\n" in after and "loss.backward()\n" not in after.replace(
        "scaler.scale(loss).backward()", ""
    )
    assert_sound(after)


def test_master_params_read_outside_a_clip_gets_a_todo_about_scaled_gradients():
    before = dedent("""
        import torch
        from apex import amp

        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
        for x, y in loader:
            loss = criterion(model(x), y)
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
            grad_norm = sum(p.grad.norm() ** 2 for p in amp.master_params(optimizer)) ** 0.5
            optimizer.step()
    """)
    finding = next(f for f in lint_text(before) if f.code == "AMP402" and f.location.line == 9)
    assert "still scaled" in finding.message
    after = migrate(before)
    assert "    # TODO(ampdoctor): the gradients are still scaled here: call `scaler.unscale_(optimizer)`\n" in after
    assert "for p in model.parameters()" in after and "unscale_(optimizer)\n" not in after
    assert_sound(after)


def test_initialize_with_unpacked_options_is_not_migrated():
    source = "from apex import amp\n\nmodel, optimizer = amp.initialize(model, optimizer, **amp_options)\n"
    [finding] = [f for f in lint_text(source) if f.code == "AMP402"]
    assert finding.fix is None and "its opt_level cannot be read" in finding.message


def test_initialize_under_another_kind_of_condition_is_not_migrated():
    source = dedent("""
        from apex import amp

        if args.fp16:
            model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
        else:
            model = model.float()
    """)
    [finding] = [f for f in lint_text(source) if f.code == "AMP402"]
    assert finding.fix is None and "runs under a condition" in finding.message


def test_a_notebook_is_reported_but_never_rewritten(tmp_path: Path):
    """A notebook's module joins its cells; an autocast block could straddle two of them."""
    cells = [
        [
            "import torch\n",
            "from apex import amp\n",
            'model, optimizer = amp.initialize(model, optimizer, opt_level="O1")',
        ],
        ["out = model(x)"],
        [
            "loss = criterion(out, y)\n",
            "with amp.scale_loss(loss, optimizer) as scaled_loss:\n",
            "    scaled_loss.backward()\n",
            "optimizer.step()",
        ],
    ]
    notebook = {
        "cells": [
            {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": c} for c in cells
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    target = tmp_path / "train.ipynb"
    target.write_text(json.dumps(notebook, indent=1), encoding="utf-8")
    before = target.read_bytes()
    result = _lint(["--fix", "--unsafe-fixes", "--output-format", "json", str(target)])
    assert target.read_bytes() == before
    items = json.loads(result.output)
    assert [item["code"] for item in items] == ["AMP402", "AMP402"]
    assert all(item["fix"] is None for item in items)


_APEX_TAIL = """

from apex import amp

apex_model, apex_optimizer = amp.initialize(apex_model, apex_optimizer, opt_level="O1")
for apex_x, apex_y in apex_loader:
    apex_loss = apex_criterion(apex_model(apex_x), apex_y)
    with amp.scale_loss(apex_loss, apex_optimizer) as apex_scaled:
        apex_scaled.backward()
    apex_optimizer.step()
"""


_FIXTURES = sorted((APEX.parent).glob("*.py"))


def _has_its_own_amp(path: Path) -> bool:
    """A fixture that trains with a GradScaler (or calls amp.initialize) itself: apex added to it
    is a second AMP path, which the migration leaves to a person."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if type(node) is ast.Call:
            callee = ast.unparse(node.func)
            last = callee.rsplit(".", 1)[-1]
            if last == "GradScaler" or callee.endswith("amp.initialize"):
                return True
            if last in ("scale", "step", "update") and "scaler" in callee.rsplit(".", 1)[0].lower():
                return True
    return False


def test_both_kinds_of_fixture_are_there():
    kinds = [_has_its_own_amp(p) for p in _FIXTURES]
    assert kinds.count(True) >= 5 and kinds.count(False) >= 5


@pytest.mark.slow
@pytest.mark.parametrize("path", _FIXTURES, ids=lambda p: p.name)
def test_migration_of_apex_code_added_to_any_fixture_reparses_and_is_stable(path: Path):
    """Whatever else a module holds (classes, closures, other AMP code), the migration of the
    apex part leaves code that parses, and a second run changes nothing; a module with its own
    AMP path beside apex is not migrated, and each apex finding says so, without a fix."""
    source = strip_markers(path.read_text(encoding="utf-8")) + _APEX_TAIL
    after, _fixed, findings, _suppressed, _parsed = fix_source(
        source, "train.py", all_options(fix=True, unsafe_fixes=True)
    )
    ast.parse(after)
    assert migrate(after) == after
    apex = [f for f in findings if f.code == "AMP402"]
    if _has_its_own_amp(path):
        assert "amp.initialize" in after and "amp.scale_loss" in after
        assert apex and all(f.fix is None and "not migrated automatically" in f.message for f in apex)
    elif "autocast" in source.split(_APEX_TAIL)[0]:
        # autocast of its own: migrated, or withheld where the new scaler would be a mistake
        # there (a float16 scaler in a module whose regions are bfloat16 is AMP209)
        migrated = "amp.initialize" not in after and "amp.scale_loss" not in after
        assert migrated or (apex and all(f.fix is None for f in apex))
    else:
        assert "amp.initialize" not in after and "amp.scale_loss" not in after


_APEX_USE = 'from apex import amp\nmodel, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n'


@pytest.mark.parametrize(
    "path,reported",
    [
        ("train.py", True),
        ("src/engine/trainer.py", True),
        ("src/apexify.py", True),  # "apex" inside a longer word says nothing
        ("benchmarks/benchmark_nvidia_apex.py", False),
        ("src/backends/apex_backend.py", False),
        ("tests/test_trainer.py", False),
        ("test/amp_utils.py", False),
        ("test_amp.py", False),
    ],
)
def test_amp402_leaves_modules_whose_purpose_is_apex(path: str, reported: bool):
    """A benchmark of apex, an apex backend or a test exercises apex on purpose: no migration
    is due there."""
    found = [f for f in lint_text(_APEX_USE, path=path) if f.code == "AMP402"]
    assert bool(found) is reported


# --------------------------------------------------------------------------------------
# Where the scaler lives: no global in a function, every step migrated, or nothing at all
# --------------------------------------------------------------------------------------


def _blocked_because(source: str) -> str:
    """The module is left as it is, and each AMP402 finding says why, without a fix."""
    source = dedent(source)
    assert migrate(source) == source
    findings = [f for f in lint_text(source) if f.code == "AMP402"]
    assert findings and all(f.fix is None and "not migrated automatically" in f.message for f in findings)
    return findings[0].message


def test_a_loss_scaled_in_a_helper_outside_the_class_blocks_the_migration():
    # the StyleGAN2 shape: amp.initialize in a model class's __init__, scale_loss in a module
    # helper, the optimizers stepped by a trainer through the model
    reason = _blocked_because("""
        from apex import amp

        def loss_backward(loss, optimizer):
            with amp.scale_loss(loss, optimizer) as scaled:
                scaled.backward()

        class GAN:
            def __init__(self, G, D, G_opt, D_opt):
                (self.G, self.D), (self.G_opt, self.D_opt) = amp.initialize(
                    [G, D], [G_opt, D_opt], opt_level="O1"
                )
                self.D_opt.step()
    """)
    assert "`amp.scale_loss` on line 4 runs outside the class `GAN`" in reason


def test_an_amp_optimizer_stepped_under_another_name_blocks_the_migration():
    reason = _blocked_because("""
        from apex import amp

        class GAN:
            def __init__(self, G, G_opt):
                self.G, self.G_opt = amp.initialize(G, G_opt, opt_level="O1")

        class Trainer:
            def step(self, loss):
                with amp.scale_loss(loss, self.GAN.G_opt) as scaled:
                    scaled.backward()
                self.GAN.G_opt.step()
    """)
    assert "`self.GAN.G_opt.step()` on line 11" in reason and "under another name" in reason


def test_no_step_of_an_amp_optimizer_in_the_module_blocks_the_migration():
    reason = _blocked_because("""
        from apex import amp

        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
        for x in loader:
            loss = model(x).sum()
            with amp.scale_loss(loss, optimizer) as scaled:
                scaled.backward()
            engine.run_step()
    """)
    assert "no optimizer that amp.initialize returned is stepped" in reason


def test_a_loss_scaled_at_module_level_after_an_initialize_in_a_function_blocks_the_migration():
    # the scaler would be a local of ``setup``; the module-level loop that scales the loss has
    # no name to hand it to (this once crashed the rule: a module frame has no ``name``)
    reason = _blocked_because("""
        from apex import amp

        def setup(model, optimizer):
            model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
            return model, optimizer

        model, optimizer = setup(model, optimizer)
        for x in loader:
            loss = model(x).sum()
            with amp.scale_loss(loss, optimizer) as scaled:
                scaled.backward()
            optimizer.step()
    """)
    assert "`amp.scale_loss` on line 10 runs outside `setup`, which calls amp.initialize" in reason


@pytest.mark.parametrize(
    "caller, why",
    [
        # called before the scaler exists
        ("    save(model)\n    model, optimizer = amp.initialize(model, optimizer)\n", "does not exist yet"),
        # handed around as a value
        ("    model, optimizer = amp.initialize(model, optimizer)\n    hooks.append(save)\n", "other than called"),
    ],
)
def test_a_helper_the_scaler_cannot_be_handed_to_blocks_the_migration(caller, why):
    source = (
        "from apex import amp\n\n"
        "def save(model):\n    torch.save({'amp': amp.state_dict()}, 'ckpt.pt')\n\n"
        "def main(model, optimizer, loader):\n" + caller + "    for x in loader:\n"
        "        loss = model(x).sum()\n"
        "        with amp.scale_loss(loss, optimizer) as scaled:\n            scaled.backward()\n"
        "        optimizer.step()\n"
    )
    assert why in _blocked_because(source)


def test_a_method_home_puts_the_scaler_on_self_whatever_the_targets():
    after = migrate(
        dedent("""
        from apex import amp

        class Runner:
            def fit(self, model, optimizer, loader):
                model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
                for x in loader:
                    loss = model(x).sum()
                    with amp.scale_loss(loss, optimizer) as scaled:
                        scaled.backward()
                    optimizer.step()

            def state_dict(self):
                return {"amp": amp.state_dict()}
    """)
    )
    assert 'self.scaler = torch.amp.GradScaler("cuda")' in after
    assert "self.scaler.scale(loss).backward()" in after and "self.scaler.step(optimizer)" in after
    assert '{"amp": self.scaler.state_dict()}' in after and "global" not in after
    assert_sound(after)


def test_a_module_that_already_trains_with_a_grad_scaler_beside_apex_is_left_alone():
    # a trainer with both paths (the Hugging Face shape): a second scaler, or one assigned
    # under the same name, would break the native path
    reason = _blocked_because("""
        import torch
        from apex import amp

        class Trainer:
            def train(self, model, loader):
                if self.use_apex:
                    model, self.optimizer = amp.initialize(model, self.optimizer, opt_level="O1")
                for x in loader:
                    loss = model(x).sum()
                    if self.use_amp:
                        self.scaler.scale(loss).backward()
                    else:
                        with amp.scale_loss(loss, self.optimizer) as scaled:
                            scaled.backward()
                    if self.use_amp:
                        self.scaler.step(self.optimizer)
                        self.scaler.update()
                    else:
                        self.optimizer.step()
    """)
    assert "already trains with a torch.amp GradScaler (`self.scaler`, line 11)" in reason


def test_imports_that_hold_no_apex_name_keep_their_form():
    after = migrate(
        dedent("""
        from transformers import (
            Trainer,
            set_seed,
        )
        from apex import (
            amp,
            optimizers,
        )

        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
        for x in loader:
            loss = model(x).sum()
            with amp.scale_loss(loss, optimizer) as scaled:
                scaled.backward()
            optimizer.step()
        print(Trainer, set_seed, optimizers)
    """)
    )
    assert "from transformers import (\n    Trainer,\n    set_seed,\n)\n" in after
    assert "from apex import (\n    optimizers,\n)\n" in after
    assert_sound(after)


def test_a_flagged_if_on_one_line_is_left_as_it_is():
    # ``if args.fp16: print(loss)`` holds its statement on the ``if`` line: its arm is not lines
    # that could replace the whole ``if`` (the else arm's backward is scaled elsewhere).
    source = script("glue_fp16_flag.py").replace(
        "            tr_loss += loss.item()\n",
        "            if args.fp16: print(loss)\n            else:\n                loss.backward()\n"
        "            tr_loss += loss.item()\n",
    )
    after = migrate(source)
    assert "if args.fp16: print(loss)\n" in after
    ast.parse(after)
    assert migrate(after) == after


BRANCH_IMPORTS = """\
import torch


def wrap(net, backend):
    if backend == "apex":
        from apex.parallel import DistributedDataParallel
        return DistributedDataParallel(net, delay_allreduce=True)  # expect: AMP402
    else:
        from torch.nn.parallel.distributed import DistributedDataParallel
        return DistributedDataParallel(net, device_ids=[torch.cuda.current_device()])


def plain(net):
    from torch.nn.parallel import DistributedDataParallel
    return DistributedDataParallel(net)
"""


def test_an_import_in_a_branch_decides_the_calls_of_that_branch():
    # The same name imported from apex in one branch and from torch in the other: only the apex
    # branch's call is apex's, and torch's ``device_ids=`` does not block the migration.
    assert found_pairs(BRANCH_IMPORTS) == expected_pairs(BRANCH_IMPORTS)
    [report] = [f for f in lint_text(BRANCH_IMPORTS) if f.code == "AMP402"]
    assert "has no equivalent" not in report.message
