"""Prefilter, cache and parallelism are optimisations: results must be identical without them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ampdoctor.config import Settings
from ampdoctor.lint import LintRequest, engine, known_codes, lint_paths

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "lint"


def _real_files() -> list[Path]:
    """A deterministic sample of real code: the installed torch package when present."""
    torch_spec = __import__("importlib.util").util.find_spec("torch")
    if torch_spec is None or not torch_spec.submodule_search_locations:
        return []
    root = Path(list(torch_spec.submodule_search_locations)[0])
    # Small and medium files keep this test quick; together they still cover real idioms.
    files = [p for p in sorted(root.rglob("*.py")) if p.stat().st_size < 40_000]
    amp = [p for p in files if "autocast" in p.read_text(encoding="utf-8", errors="replace")][:15]
    others = files[:: max(1, len(files) // 15)][:15]
    return sorted(set(amp + others))


def _copy_tree(files: list[Path], target: Path) -> Path:
    for index, path in enumerate(files):
        shutil.copy(path, target / f"f{index:03d}_{path.name}")
    return target


def _run(paths: list[Path], root: Path, **options):
    settings = Settings(root=root)
    request = LintRequest(settings=settings, codes=settings.enabled_codes(known_codes()), **options)
    run = lint_paths(paths, request, cwd=root)
    return sorted((f.location.path, f.location.line, f.location.column, f.code, f.message) for f in run.findings)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    shutil.copytree(FIXTURES, root / "fixtures")
    real = _real_files()
    if real:
        (root / "real").mkdir()
        _copy_tree(real, root / "real")
    return root


@pytest.mark.slow
def test_prefilter_parallel_and_cache_do_not_change_results(corpus: Path, monkeypatch):
    monkeypatch.setattr("ampdoctor.lint.PARALLEL_THRESHOLD", 2)
    baseline = _run([corpus], corpus, prefilter=False, jobs=1)
    assert baseline, "the corpus contains planted mistakes"
    assert _run([corpus], corpus, prefilter=True, jobs=1) == baseline
    assert _run([corpus], corpus, prefilter=True, jobs=2) == baseline
    assert _run([corpus], corpus, prefilter=False, jobs=2) == baseline
    cold = _run([corpus], corpus, use_cache=True, jobs=2)
    assert (corpus / ".ampdoctor_cache" / ".gitignore").read_text().strip().endswith("*")
    warm = _run([corpus], corpus, use_cache=True, jobs=1)
    assert cold == warm == baseline


def test_warm_cache_does_not_lint_again(tmp_path: Path, monkeypatch):
    shutil.copy(FIXTURES / "buggy_no_update.py", tmp_path / "train.py")
    first = _run([tmp_path], tmp_path, use_cache=True)

    linted = []
    real_lint_file = engine.lint_file

    def record(path, *args, **kwargs):
        linted.append(path.name)
        return real_lint_file(path, *args, **kwargs)

    monkeypatch.setattr(engine, "lint_file", record)
    assert _run([tmp_path], tmp_path, use_cache=True) == first
    assert linted == []
    # A changed file is linted again.
    (tmp_path / "train.py").write_text((tmp_path / "train.py").read_text() + "\n# edited\n")
    _run([tmp_path], tmp_path, use_cache=True)
    assert linted == ["train.py"]


def test_cache_is_keyed_by_selected_rules(tmp_path: Path):
    shutil.copy(FIXTURES / "buggy_no_update.py", tmp_path / "train.py")
    everything = _run([tmp_path], tmp_path, use_cache=True)
    settings = Settings(root=tmp_path, select=("AMP1",))
    request = LintRequest(settings=settings, codes=settings.enabled_codes(known_codes()), use_cache=True)
    only_amp1 = lint_paths([tmp_path], request, cwd=tmp_path).findings
    assert {f.code for f in only_amp1} == {"AMP101", "AMP102", "AMP103"} & {c for _, _, _, c, _ in everything}


def test_corrupt_cache_is_ignored(tmp_path: Path):
    shutil.copy(FIXTURES / "buggy_no_update.py", tmp_path / "train.py")
    first = _run([tmp_path], tmp_path, use_cache=True)
    for file in (tmp_path / ".ampdoctor_cache").glob("lint-*.json"):
        file.write_text("{not json")
    assert _run([tmp_path], tmp_path, use_cache=True) == first


def test_a_tensor_type_named_by_a_string_is_seen_with_the_prefilter(tmp_path):
    (tmp_path / "train.py").write_text(
        "import torch\n\nmodel = torch.nn.Linear(4, 4)\nmodel.type('torch.cuda.HalfTensor')\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n",
        encoding="utf-8",
    )
    baseline = _run([tmp_path], tmp_path, prefilter=False, jobs=1)
    assert [finding[3] for finding in baseline] == ["AMP303"]
    assert _run([tmp_path], tmp_path, prefilter=True, jobs=1) == baseline


def test_a_cold_cached_run_searches_each_file_for_tokens_once(tmp_path: Path, monkeypatch):
    for name in ("buggy_no_update.py", "clean_nanogpt_style.py"):
        shutil.copy(FIXTURES / name, tmp_path / name)
    (tmp_path / "unrelated.py").write_text("x = 1\n", encoding="utf-8")
    searched: list[int] = []
    real = engine.passes_prefilter

    def counting(data, spec, seen=None):
        searched.append(len(data))
        return real(data, spec, seen)

    monkeypatch.setattr(engine, "passes_prefilter", counting)
    findings = _run([tmp_path], tmp_path, use_cache=True, jobs=1)
    assert len(searched) == 3  # the cache's check is not repeated by the engine
    assert findings == _run([tmp_path], tmp_path, prefilter=False, jobs=1)


def test_a_cold_cached_run_of_a_tree_is_recorded_from_the_workers(tmp_path: Path, monkeypatch):
    """The files the cache does not know are read, keyed and screened in the workers; the cache
    records what they found, and the next run neither reads nor lints a file again."""
    import json
    import os

    shutil.copy(FIXTURES / "buggy_no_update.py", tmp_path / "train.py")
    for index in range(60):
        (tmp_path / f"plain_{index}.py").write_text(f"value = {index}\n", encoding="utf-8")
    past = 1_600_000_000
    for path in tmp_path.iterdir():
        os.utime(path, (past, past))  # older than the cache: no entry is racy
    screened_by = tmp_path.parent / f"{tmp_path.name}-screens"
    real = engine.passes_prefilter

    def recording(data, spec, seen=None):
        with open(screened_by, "a", encoding="utf-8") as log:  # the workers are other processes
            log.write(f"{os.getpid()}\n")
        return real(data, spec, seen)

    monkeypatch.setattr(engine, "passes_prefilter", recording)
    first = _run([tmp_path], tmp_path, use_cache=True, jobs=2)
    screens = screened_by.read_text(encoding="utf-8").split()
    assert len(screens) == 61 and str(os.getpid()) not in screens  # each file once, none here
    monkeypatch.setattr(engine, "passes_prefilter", real)
    assert first == _run([tmp_path], tmp_path, jobs=1)
    assert {code for _, _, _, code, _ in first} >= {"AMP101", "AMP201"}
    (cache_file,) = (tmp_path / ".ampdoctor_cache").glob("lint-*.json")
    entries = json.loads(cache_file.read_text(encoding="utf-8"))["files"]
    assert sorted(entries) == sorted(path.name for path in tmp_path.glob("*.py"))
    assert all(entries[f"plain_{index}.py"].get("skip") for index in range(60))
    assert "key" in entries["train.py"] and entries["train.py"]["findings"]

    def no_lint(*args, **kwargs):
        raise AssertionError("linted again")

    monkeypatch.setattr(engine, "lint_file", no_lint)
    monkeypatch.setattr(engine, "read_regular", no_lint)
    assert _run([tmp_path], tmp_path, use_cache=True, jobs=2) == first


def test_workers_started_early_are_let_go_when_few_files_need_linting(tmp_path: Path):
    import os

    from ampdoctor.lint import _early_pool, _Job, _run

    shutil.copy(FIXTURES / "buggy_no_update.py", tmp_path / "train.py")
    settings = Settings(root=tmp_path)
    request = LintRequest(settings=settings, codes=settings.enabled_codes(known_codes()), jobs=2)
    pool = _early_pool(request)
    assert pool is not None
    (result,) = _run([_Job(str(tmp_path / "train.py"), "train.py", ())], request, pool)
    assert {f.code for f in result.findings} >= {"AMP101", "AMP201"}
    with pytest.raises(RuntimeError):  # shut down: the file was linted here
        pool.submit(os.getpid)
    single = LintRequest(settings=settings, codes=settings.enabled_codes(known_codes()), jobs=1)
    assert _early_pool(single) is None


def test_the_workers_batches_hold_every_file_once_with_the_large_ones_alone(tmp_path: Path):
    from ampdoctor.lint import _batches, _Job

    (tmp_path / "huge.py").write_text("x = 1\n" * 20_000, encoding="utf-8")
    (tmp_path / "large.py").write_text("x = 1\n" * 10_000, encoding="utf-8")
    for index in range(300):
        (tmp_path / f"small_{index}.py").write_text("y = 2\n" * 10, encoding="utf-8")
    jobs = [_Job(path, path.name, ()) for path in sorted(tmp_path.iterdir())]
    batches = _batches(jobs, 2)
    assert sorted(job.display for batch in batches for job in batch) == sorted(job.display for job in jobs)
    assert [job.display for job in batches[0]] == ["huge.py"]
    assert [job.display for job in batches[1]] == ["large.py"]
    assert all(len(batch) <= 64 for batch in batches)
    sizes = [job.path.stat().st_size for batch in batches for job in batch]
    assert sizes == sorted(sizes, reverse=True)  # largest first


def test_only_files_with_findings_keep_their_text_and_a_finding_the_project_adds_is_shown_in_it(
    tmp_path: Path, monkeypatch
):
    """The workers send back the text of a file only where it has findings (the report quotes
    it); the project pass reads a file again where it adds the first finding."""
    from click.testing import CliRunner

    from ampdoctor.cli import main

    monkeypatch.setattr("ampdoctor.lint.PARALLEL_THRESHOLD", 2)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n', encoding="utf-8")
    (tmp_path / "engine.py").write_text(
        "def step(loss, optimizer, scaler=None):\n"
        "    if scaler is not None:\n"
        "        scaler.scale(loss).backward()\n"
        "        scaler.step(optimizer)\n"
        "        scaler.update()\n"
        "    else:\n"
        "        loss.backward()\n"
        "        optimizer.step()\n",
        encoding="utf-8",
    )
    # Alone, nothing here is a mistake; no call hands ``train`` a scaler, so the project pass
    # finds its float16 region unscaled (AMP210).
    train = (
        "import torch\n"
        "import engine\n\n\n"
        "def train(model, loader, optimizer, scaler=None):\n"
        "    for x, y in loader:\n"
        '        with torch.autocast("cuda", dtype=torch.float16):\n'
        "            loss = model(x, y)\n"
        "        engine.step(loss, optimizer, scaler=scaler)\n\n\n"
        "def main(model, loader, optimizer):\n"
        "    train(model, loader, optimizer)\n"
    )
    (tmp_path / "train.py").write_text(train, encoding="utf-8")
    (tmp_path / "bad.py").write_text(
        'import torch\n\n\ndef f(model, x):\n    with torch.autocast("cuda"):\n        model(x).sum().backward()\n',
        encoding="utf-8",
    )
    for name in ("a", "b", "c"):  # enough files for the workers
        (tmp_path / f"{name}.py").write_text("x = 1\n", encoding="utf-8")

    def results(project: bool):
        settings = Settings(root=tmp_path, project=project)
        request = LintRequest(settings=settings, codes=settings.enabled_codes(known_codes()), jobs=2)
        return {r.path: r for r in lint_paths([tmp_path], request, cwd=tmp_path).results}

    alone = results(False)
    assert [f.code for f in alone["bad.py"].findings] == ["AMP101"]
    assert alone["bad.py"].source is not None
    assert not alone["train.py"].findings and alone["train.py"].parsed
    assert alone["train.py"].source is None and alone["engine.py"].source is None

    linked = results(True)
    assert [f.code for f in linked["train.py"].findings] == ["AMP210"]
    assert linked["train.py"].source == train
    monkeypatch.chdir(tmp_path)
    output = CliRunner().invoke(main, ["lint", "--no-cache", "-j", "2", "."], catch_exceptions=False).output
    assert 'with torch.autocast("cuda", dtype=torch.float16):' in output
    assert "model(x).sum().backward()" in output
