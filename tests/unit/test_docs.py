"""The docs hold together: every relative link of README.md and docs/*.md resolves (its file, and its #anchor when it
names one), and the README's "where it lives" table names every module of the core package and every room of the
repository, and only paths that exist. They read as a user needs them (issue #56): docs/ has a page per task, each
opening with its commands; docs/README.md lists those pages before the reference pages; no paragraph runs over 8
lines; each entry of docs/known-limits.md fits in 3 lines; the README stays a front door of at most 200 lines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`]+)`")
FENCE = re.compile(r"^(```|~~~)")
WHERE_IT_LIVES = "## Where it lives"
ROOM_PARENTS = ("kafkalake_dev", "lambdas", "spark_jobs")
"""Top-level folders whose sub-packages are rooms of their own (kafkalake_dev/cli, lambdas/maintainer, ...)."""
TOP_ROOMS = ("infra", "bench", "tests")
TASK_PAGES = (
    "onboard-a-topic.md",
    "deploy-an-environment.md",
    "erase-a-person.md",
    "rotate-the-pseudonym-key.md",
    "investigate-a-run.md",
    "add-a-consumer.md",
    "current-state.md",
)
"""The how-to pages a user follows, in the order docs/README.md lists them."""
COMMAND_FENCE = re.compile(r"^(```|~~~)(bash|console|shell|sh)$")
LIST_ITEM = re.compile(r"^\s*([-*+]|\d+[.)])\s")
LATER_NUMBER = re.compile(r"^\s*([02-9]|\d{2,})[.)]\s")
"""A number that cannot start a list inside a paragraph (Markdown lets only ``1.`` interrupt one): ``3) rounds``."""
LONGEST_PARAGRAPH = 8
LONGEST_LIMIT = 3
README_LINES = 200


def prose(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in prose(path.read_text()):
        if match := re.match(r"#{1,6} (.+)", line):
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def relative_links(path: Path) -> list[str]:
    links = [m for line in prose(path.read_text()) for m in LINK.findall(CODE.sub("", line))]
    return [link for link in links if not re.match(r"[a-z]+:", link)]


def broken_links(path: Path) -> list[str]:
    broken = []
    for link in relative_links(path):
        target, _, anchor = link.partition("#")
        resolved = (path.parent / target).resolve() if target else path
        if not resolved.exists():
            broken.append(f"{link}: no such file")
        elif anchor and (resolved.suffix != ".md" or anchor not in anchors(resolved)):
            broken.append(f"{link}: no such heading")
    return broken


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_relative_link_resolves_to_a_file_and_heading(path: Path) -> None:
    assert broken_links(path) == []


def test_the_readme_links_every_docs_page() -> None:
    linked = {(REPO_ROOT / link.partition("#")[0]).resolve() for link in relative_links(REPO_ROOT / "README.md")}
    assert set(DOCS[1:]) - linked == set(), "a docs page nobody reaches from the README"


def test_a_broken_link_or_anchor_is_found(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text("# Title\n\n## Two words, and more\n\n```\n## not a heading\n```\n")
    page = tmp_path / "a.md"
    page.write_text(
        "[ok](b.md) [ok](b.md#two-words-and-more) [web](https://example.com) [self](#here)\n\n## Here\n"
        "[gone](c.md) [bad anchor](b.md#not-a-heading) `[in code](c.md)`\n\n```\n[fenced](d.md)\n```\n"
    )
    problems = broken_links(page)
    assert len(problems) == 2, problems
    assert problems == ["c.md: no such file", "b.md#not-a-heading: no such heading"]


def where_it_lives() -> list[tuple[str, list[str]]]:
    """The README table's rows: (behaviour, the paths its last cell names)."""
    text = (REPO_ROOT / "README.md").read_text()
    assert WHERE_IT_LIVES in text, f"the README lost its {WHERE_IT_LIVES!r} table"
    section = text.split(WHERE_IT_LIVES, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")][2:]  # after the header and its rule
    cells = [row.strip("|").rsplit("|", 1) for row in rows]
    return [(behaviour, CODE.findall(paths)) for behaviour, paths in cells]


def test_every_path_the_where_it_lives_table_names_exists() -> None:
    missing = []
    for behaviour, paths in where_it_lives():
        assert paths, f"a row names no path: {behaviour}"
        missing += [p for p in paths if not (REPO_ROOT / p).exists()]
        folders = [REPO_ROOT / p for p in paths if p.endswith("/")] or [(REPO_ROOT / p).parent for p in paths]
        for name in CODE.findall(behaviour):
            if name.endswith(".py") and not any((folder / name).exists() for folder in folders):
                missing.append(f"{name} (in the row of {', '.join(paths)})")
    assert not missing, f"the README's where-it-lives table names what does not exist: {missing}"


def test_the_where_it_lives_table_names_every_core_module_and_every_room() -> None:
    named = {p.rstrip("/") for _, paths in where_it_lives() for p in paths}
    core = sorted(str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "kafkalake").rglob("*.py"))
    unnamed = [m for m in core if not m.endswith("__init__.py") and m not in named]
    assert not unnamed, f"core modules the README's where-it-lives table leaves out: {unnamed}"
    rooms = [*TOP_ROOMS] + [
        str(init.parent.relative_to(REPO_ROOT))
        for parent in ROOM_PARENTS
        for init in sorted((REPO_ROOT / parent).glob("*/__init__.py"))
    ]
    assert rooms, "no rooms found"
    unnamed = [r for r in rooms if not any(n == r or n.startswith(f"{r}/") for n in named)]
    assert not unnamed, f"rooms the README's where-it-lives table leaves out: {unnamed}"


def test_every_docs_page_the_code_points_at_exists() -> None:
    sources = [
        p
        for room in ("kafkalake", "kafkalake_dev", "lambdas", "spark_jobs", "infra", "bench", "tests")
        for p in (REPO_ROOT / room).rglob("*.py")
    ]
    named = {m for path in sources for m in re.findall(r"docs/[\w-]+\.md", path.read_text())}
    assert named, "no code points at a docs page"
    assert sorted(n for n in named if not (REPO_ROOT / n).exists()) == []


def blocks(text: str) -> list[tuple[str, int, int]]:
    """The page's runs of lines as (kind, first line number, number of lines), kind ``paragraph`` or ``item``.

    The rule: a paragraph is a run of consecutive non-blank lines outside fenced code blocks that are not headings,
    table rows, HTML comments (the generated sections' markers) or list items. A list item is a line opening with
    ``-``, ``*``, ``+`` or a number with ``.`` or ``)`` (inside a paragraph, only ``1.``, as in Markdown) together with
    the indented lines that continue it (also after a blank line); a line that is not indented ends it, and is a
    paragraph's. A line counts once however long it is (a generated line is one line). Fenced blocks, tables and
    headings are neither."""
    found: list[tuple[str, int, int]] = []
    kind, start, count, fenced = "", 0, 0, False

    def close() -> None:
        nonlocal kind, count
        if count:
            found.append((kind, start, count))
        kind, count = "", 0

    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if FENCE.match(stripped):
            fenced = not fenced
            close()
        elif fenced:
            continue
        elif not stripped:
            if kind == "paragraph":
                close()
        elif LIST_ITEM.match(line) and not (kind == "paragraph" and LATER_NUMBER.match(line)):
            close()
            kind, start, count = "item", number, 1
        elif kind == "item" and line[0].isspace():
            count += 1
        elif stripped.startswith(("#", "|", "<!--")):
            close()
        elif kind == "paragraph":
            count += 1
        else:
            close()
            kind, start, count = "paragraph", number, 1
    close()
    return found


def long_blocks(path: Path, kind: str, limit: int) -> list[str]:
    found = blocks(path.read_text())
    return [f"line {start}: {count} lines" for k, start, count in found if k == kind and count > limit]


def test_paragraphs_and_list_items_are_told_apart() -> None:
    text = (
        "# Title\n\none\ntwo\n\n- item\n  more\n\n  still the item\nafter the item\n"
        "| a | b |\n<!-- marker -->\nthree\n3) not an item\n```\nfenced\n\nfenced\n```\n1. numbered\n"
    )
    assert blocks(text) == [
        ("paragraph", 3, 2),
        ("item", 6, 3),
        ("paragraph", 10, 1),
        ("paragraph", 13, 2),
        ("item", 20, 1),
    ]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_no_paragraph_runs_over_8_lines(path: Path) -> None:
    """Split it, or make it a list or a table."""
    assert long_blocks(path, "paragraph", LONGEST_PARAGRAPH) == []


def test_each_known_limit_fits_in_3_lines() -> None:
    """One limit per entry: what is bounded, its consequence and its workaround, with a link for the detail."""
    page = REPO_ROOT / "docs" / "known-limits.md"
    assert [k for k, _, _ in blocks(page.read_text())].count("item") >= 10, "known-limits.md lists its limits"
    assert long_blocks(page, "item", LONGEST_LIMIT) == []


@pytest.mark.parametrize("name", TASK_PAGES)
def test_each_task_page_opens_with_its_commands(name: str) -> None:
    page = REPO_ROOT / "docs" / name
    assert page.exists(), f"docs/{name}: no such task page"
    lines = [line for line in page.read_text().splitlines() if line.strip()]
    assert lines[0].startswith("# "), f"docs/{name} opens with its title"
    first = next(line for line in lines if not line.startswith("#"))
    assert COMMAND_FENCE.match(first), f"docs/{name}: the first thing after the title is {first!r}, not a command block"
    assert not FENCE.match(lines[lines.index(first) + 1].strip()), f"docs/{name}: its command block is empty"


def test_the_docs_index_lists_the_task_pages_first_then_every_reference_page() -> None:
    index = REPO_ROOT / "docs" / "README.md"
    assert index.exists(), "docs/README.md: no index of the docs"
    linked = [Path(link.partition("#")[0]).name for link in relative_links(index)]
    pages = {p.name for p in (REPO_ROOT / "docs").glob("*.md")} - {"README.md"}
    assert pages - set(linked) == set(), "docs pages the index does not list"
    tasks = [linked.index(name) for name in TASK_PAGES]
    assert tasks == sorted(tasks), "the index lists the task pages in their order"
    references = [linked.index(name) for name in pages - set(TASK_PAGES)]
    assert max(tasks) < min(references), "the index lists the task pages before the reference pages"


def test_the_readme_is_a_front_door() -> None:
    lines = (REPO_ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_LINES, f"README.md has {len(lines)} lines; move detail into docs/"
    linked = {Path(link.partition("#")[0]).name for link in relative_links(REPO_ROOT / "README.md")}
    assert set(TASK_PAGES) <= linked, "the README links every task page"
