"""Which files ``ampdoctor lint`` looks at."""

from __future__ import annotations

from pathlib import Path

from ampdoctor.lint.discovery import Discovery, GitIgnore, _read_line, _Rule, _to_regex

AMP = "import torch\nwith torch.autocast('cuda'):\n    pass\n"


def make(root: Path, *names: str) -> None:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(AMP, encoding="utf-8")


def found(root: Path, **kwargs) -> list[str]:
    discovery = Discovery(root, **kwargs)
    return sorted(p.relative_to(root).as_posix() for p in discovery.files([root]))


def test_default_excluded_folders_and_suffixes(tmp_path):
    make(
        tmp_path,
        "train.py",
        "stubs.pyi",
        "nb.ipynb",
        "notes.txt",
        ".venv/lib/x.py",
        "venv/x.py",
        "build/x.py",
        "dist/x.py",
        "__pycache__/x.py",
        "node_modules/x.py",
        "lib/site-packages/x.py",
        ".git/hooks/x.py",
        "pkg/model.py",
    )
    assert found(tmp_path) == ["nb.ipynb", "pkg/model.py", "stubs.pyi", "train.py"]


def test_gitignore_rules(tmp_path):
    make(
        tmp_path,
        "train.py",
        "generated/a.py",
        "logs/run.py",
        "keep/important.py",
        "keep/other.py",
        "deep/x/cache_tmp.py",
        "src/out/x.py",
    )
    (tmp_path / ".gitignore").write_text(
        "# comment\ngenerated/\n/logs\nkeep/*\n!keep/important.py\n*_tmp.py\nsrc/**/x.py\n", encoding="utf-8"
    )
    assert found(tmp_path) == ["keep/important.py", "train.py"]
    assert len(found(tmp_path, respect_gitignore=False)) == 7


def test_nested_gitignore_overrides(tmp_path):
    make(tmp_path, "a/skip.py", "a/keep.py")
    (tmp_path / ".gitignore").write_text("*.py\n", encoding="utf-8")
    (tmp_path / "a" / ".gitignore").write_text("!keep.py\n", encoding="utf-8")
    assert found(tmp_path) == ["a/keep.py"]


def test_exclude_globs(tmp_path):
    make(tmp_path, "train.py", "third_party/lib.py", "tests/test_x.py")
    assert found(tmp_path, exclude=("third_party", "tests/*")) == ["train.py"]


def test_explicit_files_are_linted_even_if_gitignored(tmp_path):
    make(tmp_path, "scratch.py")
    (tmp_path / ".gitignore").write_text("scratch.py\n", encoding="utf-8")
    discovery = Discovery(tmp_path)
    assert list(discovery.files([tmp_path / "scratch.py"])) == [tmp_path / "scratch.py"]
    assert list(discovery.files([tmp_path])) == []


def test_duplicates_are_linted_once(tmp_path):
    make(tmp_path, "train.py")
    discovery = Discovery(tmp_path)
    assert len(list(discovery.files([tmp_path, tmp_path / "train.py"]))) == 1


def test_gitignore_pattern_semantics(tmp_path):
    (tmp_path / ".gitignore").write_text("a?c.py\n[xy].py\ndocs/**/gen\n", encoding="utf-8")
    ignore = GitIgnore.load(tmp_path)
    assert ignore.decision("abc.py", False) is True
    assert ignore.decision("sub/x.py", False) is True
    assert ignore.decision("z.py", False) is None
    assert ignore.decision("docs/a/b/gen", True) is True


def test_an_explicitly_named_folder_inside_an_ignored_one_is_walked(tmp_path):
    make(tmp_path, ".venv/lib/site-packages/pkg/train.py", ".venv/lib/site-packages/pkg/gen/skip.py")
    (tmp_path / ".gitignore").write_text(".venv/\ngen/\n", encoding="utf-8")
    named = tmp_path / ".venv" / "lib" / "site-packages" / "pkg"
    discovery = Discovery(tmp_path)
    assert [p.relative_to(named).as_posix() for p in discovery.files([named])] == ["train.py"]
    assert list(discovery.files([tmp_path])) == []


def test_a_folder_of_links_to_files_names_each_file_once(tmp_path):
    """Links resolve to their targets: a file reached through a link and by its own path is
    linted once, under the spelling met first."""
    make(tmp_path, "pkg/train.py", "pkg/model.py")
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "train.py").symlink_to(tmp_path / "pkg" / "train.py")
    (tmp_path / "links" / "alias.py").symlink_to(tmp_path / "pkg" / "model.py")
    discovery = Discovery(tmp_path)
    names = [Path(p).relative_to(tmp_path).as_posix() for p in discovery.files([tmp_path / "links", tmp_path / "pkg"])]
    assert sorted(names) == ["links/alias.py", "links/train.py"]
    names = [Path(p).relative_to(tmp_path).as_posix() for p in discovery.files([tmp_path])]
    assert sorted(names) == ["links/alias.py", "links/train.py"]


def test_plain_last_parts_are_compared_as_strings_and_only_the_others_compiled(tmp_path):
    # ``build/``, ``*.pyc``, ``.coverage.*``, ``/a/b/name``, ``!keep.py`` and ``**/x`` end with a
    # plain part; ``*.py[cod]``, ``data/*``, ``a/**`` and ``*x*`` do not.
    lines = ["build/", "*.pyc", ".coverage.*", "/a/b/name", "!keep.py", "**/x", "*.py[cod]", "data/*", "a/**", "*x*"]
    (tmp_path / ".gitignore").write_text("\n".join(lines) + "\n", encoding="utf-8")
    ignore = GitIgnore.load(tmp_path)
    assert ignore is not None
    assert sorted(ignore._tails.names) == ["build", "keep.py", "name", "x"]
    assert ignore._tails.ends == (".pyc",) and ignore._tails.starts == (".coverage.",)
    assert len(ignore._others) == 4
    assert not ignore._compiled  # not until a path needs it
    assert ignore.decision("src/build", True) is True
    assert ignore.decision("keep.py", False) is False  # re-included
    assert ignore.decision("deep/mod.pyc", False) is True
    assert ignore.decision(".coverage.host", False) is True
    assert ignore.decision("train.py", False) is None
    assert ignore._compiled  # the others were asked about train.py
    assert ignore.decision("data/set.py", False) is True
    assert ignore.decision("mod.pyo", False) is True
    assert ignore.decision("fix.py", False) is True  # ``*x*``


def test_a_path_is_tried_only_against_the_rules_whose_plain_last_part_it_fits(tmp_path):
    # ``out/`` lets ``src/out`` through the first test; of the plain rules only ``out/`` is tried
    # (and compiled), the rules without a plain last part are tried as before.
    lines = ["out/", "*.log", "build/", ".cache.*", "!keep.py", "data/*"]
    (tmp_path / ".gitignore").write_text("\n".join(lines) + "\n", encoding="utf-8")
    ignore = GitIgnore.load(tmp_path)
    assert ignore is not None
    assert ignore.decision("src/out", True) is True
    by_line = {rule.line: rule for rule in ignore.rules}
    # (last line first: ``data/*``, without a plain last part, was tried before ``out/``, the
    # plain rules between them passed over)
    tried = [line for line, rule in by_line.items() if rule._itself is not False or rule._regex is not None]
    assert tried == ["data/*", "out/"]
    assert ignore.decision("data/out", True) is True  # ``data/*`` decides: the last line wins
    assert all(by_line[line]._itself is False for line in ("*.log", "build/", ".cache.*", "!keep.py"))
    # the decisions are those of every rule tried in turn
    assert ignore.decision("a/run.log", False) is True
    assert ignore.decision(".cache.x", False) is True
    assert ignore.decision("keep.py", False) is False
    assert ignore.decision("keep.py.log", False) is True
    assert ignore.decision("src/build", False) is None  # a file: ``build/`` names folders


def test_a_pattern_naming_a_folder_does_not_match_what_is_inside_through_it(tmp_path):
    # the first test looks at the path's last part: ``build/`` is the folder, not its files
    (tmp_path / ".gitignore").write_text("build/\n*.log\n", encoding="utf-8")
    ignore = GitIgnore.load(tmp_path)
    assert ignore is not None
    assert ignore.decision("build/setup.py", False) is None
    assert ignore.decision("build", True) is True
    assert ignore.decision("build", False) is None  # a file named build: directory-only pattern


# Lines pathspec reads in every way: plain ones (translated when first needed) and the others.
LINES = [
    "build/", "*.pyc", ".coverage.*", "!keep.py", "/a/b/name", "**/x", " #not-a-comment", "!#x",
    "trailing.py   ", "tab.py\t", "# a comment", "   ", "/", "!", "!/", "*.py[cod]", "a[z-a]/b",
    "\\#x", "space\\ ", "foo\\", "a/**/", "data/*", "**", "*",
]  # fmt: skip


def test_a_plain_line_is_translated_when_first_needed_as_pathspec_translates_it():
    for line in LINES:
        regex, include = _to_regex(line)
        read = _read_line(line)
        assert read[0] == line
        if read[1] is not None or read[2] is None:  # translated at once
            assert read[1:] == (regex, include), line
            continue
        rule = _Rule(line, None, read[2])
        assert rule._text is None
        # a line pathspec drops (include None) matches nothing either way
        assert rule.text == (regex or "(?!)") and (include is None or rule.ignored == include), line
    lazy = [line for line in LINES if _read_line(line)[1] is None and _read_line(line)[2] is not None]
    assert lazy == ["build/", "*.pyc", ".coverage.*", "!keep.py", "/a/b/name", "**/x", " #not-a-comment", "!#x",
                    "trailing.py   ", "tab.py\t"]  # fmt: skip


def test_plain_lines_are_not_translated_until_a_path_fits_them(tmp_path):
    (tmp_path / ".gitignore").write_text("build/\n*.log\ndata/*\n", encoding="utf-8")
    ignore = GitIgnore.load(tmp_path)
    assert ignore is not None
    by_line = {rule.line: rule for rule in ignore.rules}
    assert by_line["build/"]._text is None and by_line["*.log"]._text is None
    assert by_line["data/*"]._text is not None  # not plain: translated when read
    assert ignore.decision("src/build", True) is True
    assert by_line["build/"]._text is not None and by_line["*.log"]._text is None
    assert ignore.decision("x/run.log", False) is True
    assert ignore.decision("data/set.py", False) is True
    assert ignore.decision("train.py", False) is None
