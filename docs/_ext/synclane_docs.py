"""What the docs site generates from the code, and how it shows which code blocks run.

- ``synclane-cli``: the ``airflow synclane`` commands, from the parser Airflow builds of the provider's CLI
  definition (``get_provider_info()["cli"]``), so the page names exactly the commands and options that exist.
- ``synclane-config``: the ``[synclane]`` options, from ``get_provider_info()["config"]``.
- ``synclane-migrations``: every migration of the jobs table, from the files the package ships, with the
  comment that opens each.
- Code blocks: a fence's info string may carry a mark after the language (GitHub and other Markdown readers
  show the language and ignore the rest). ``excerpt`` (shown, not run as written), ``output`` (what a program
  prints) and ``run-by:<test file>`` (a step that test takes) become the block's caption on the site.
  A ``python`` block without a mark runs in ``tests/test_docs.py``; ``tests/test_docs.py`` also checks that
  every other block carries one of these marks.
- The README and the changelog, included whole by pages, have their links rewritten to where they point from
  ``docs/``.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

REPO = Path(__file__).resolve().parents[2]
MIGRATIONS = REPO / "synclane_provider" / "core" / "db" / "migrations"

FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<lang>[\w+-]+)[ \t]+(?P<marks>\S[^\n`]*?)[ \t]*$", re.M
)
"""An opening fence with a mark after its language, e.g. ```` ```bash excerpt ````."""

CAPTIONS = {
    "excerpt": "Excerpt: not run as written",
    "output": "Output",
}
RUN_BY = "run-by:"


def caption(mark: str) -> str | None:
    """The caption a block's mark gives it on the site; ``None`` for a mark that is not one."""
    if mark in CAPTIONS:
        return CAPTIONS[mark]
    if mark.startswith(RUN_BY) and (REPO / mark[len(RUN_BY) :]).is_file():
        return f"A step the tests take: {mark[len(RUN_BY) :]}"
    return None


def _captioned(match: re.Match[str]) -> str:
    text = caption(match["marks"])
    if text is None:
        return match[0]  # left as it is: tests/test_docs.py names the block
    indent, fence = match["indent"], match["fence"]
    return f"{indent}{fence}{{code-block}} {match['lang']}\n{indent}:caption: {text}\n"


def mark_blocks(text: str) -> str:
    return FENCE.sub(_captioned, text)


README_LINK = re.compile(r"\]\((?!https?:|mailto:|#)(?P<target>[^)\s]+)\)")
AT_THE_TOP_INCLUDED = ("README.md", "CHANGELOG.md")
"""Files at the top of the checkout that pages include whole: their links are written from the top."""
AT_THE_TOP = {"CHANGELOG.md": "changelog.md", "CONTRIBUTING.md": "development.md#where-things-are"}


def readme_links(text: str) -> str:
    """The links of a file at the top of the checkout as seen from ``docs/``: ``docs/x.md`` is ``x.md``; a file at the top of the checkout
    that has a page is that page."""

    def moved(match: re.Match[str]) -> str:
        target = match["target"]
        if target.startswith("docs/"):
            target = target[len("docs/") :]
        else:
            path, _, anchor = target.partition("#")
            target = AT_THE_TOP.get(path, f"../{target}")
        return f"]({target})"

    return README_LINK.sub(moved, text)


def on_source_read(app: Sphinx, docname: str, source: list[str]) -> None:
    source[0] = mark_blocks(source[0])


def on_include_read(
    app: Sphinx, relative_path: Path, parent_docname: str, content: list[str]
) -> None:  # pragma: no cover - the signature Sphinx gives
    text = content[0]
    if Path(relative_path).name in AT_THE_TOP_INCLUDED:
        text = readme_links(text)
    content[0] = mark_blocks(text)


class MarkdownDirective(SphinxDirective):
    """A directive whose output is Markdown, parsed as the page's own text."""

    def markdown(self) -> str:
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        container = nodes.container()
        lines = StringList(self.markdown().splitlines(), source=self.get_source_info()[0])
        self.state.nested_parse(lines, self.content_offset, container)
        return container.children


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|").replace("<", "\\<").replace("*", "\\*")


class ConfigOptions(MarkdownDirective):
    def markdown(self) -> str:
        from synclane_provider import get_provider_info

        out: list[str] = []
        for section, spec in get_provider_info()["config"].items():
            out += [f"### `[{section}]`", "", _rst_literals(spec["description"]).strip(), ""]
            out += ["| option | default | example | since | what it is |", "| --- | --- | --- | --- | --- |"]
            for name, option in spec["options"].items():
                default = "—" if option["default"] is None else f"`{option['default']}`"
                example = "—" if option["example"] is None else f"`{option['example']}`"
                env = f"`AIRFLOW__{section.upper()}__{name.upper()}`"
                out.append(
                    f"| `{name}` | {default} | {example} | {option['version_added']} | "
                    f"{_cell(_rst_literals(option['description']))} (environment: {env}) |"
                )
            out.append("")
        return "\n".join(out)


def _rst_literals(text: str) -> str:
    return text.replace("``", "`")


def synclane_parser() -> argparse.ArgumentParser:
    """``airflow synclane`` as Airflow's own parser builds it from the provider's CLI definition."""
    from airflow.cli.cli_parser import _add_command

    from synclane_provider import get_provider_info

    parser = argparse.ArgumentParser(prog="airflow")
    commands = parser.add_subparsers(dest="subcommand")
    for path in get_provider_info()["cli"]:
        module, _, attribute = path.rpartition(".")
        for group in getattr(__import__(module, fromlist=[attribute]), attribute)():
            _add_command(commands, group)
    return parser


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def _help(action: argparse.Action) -> str:
    return str(action.help or "").replace("\\[", "[")


def _usage(prog: str, parser: argparse.ArgumentParser) -> str:
    words = [prog]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if not action.option_strings:
            name = action.metavar or action.dest
            words.append(f"[{name}]" if action.nargs == "?" else name)
            continue
        flag = max(action.option_strings, key=len)
        value = "" if action.nargs == 0 else f" {action.metavar or action.dest.upper()}"
        if action.choices and action.nargs != 0:
            value = " {" + ",".join(str(c) for c in action.choices) + "}"
        text = f"{flag}{value}"
        words.append(text if action.required else f"[{text}]")
    return " ".join(words)


class CliCommands(MarkdownDirective):
    def markdown(self) -> str:
        out: list[str] = []
        for group_name, group in subcommands(synclane_parser()).items():
            out += [f"`airflow {group_name}`: {group.description}", ""]
            for name, command in subcommands(group).items():
                prog = f"airflow {group_name} {name}"
                out += [f"### `{prog}`", "", f"{command.description}.", "", "```text", _usage(prog, command), "```", ""]
                out += ["| argument | values | default | |", "| --- | --- | --- | --- |"]
                for action in command._actions:
                    if isinstance(action, argparse._HelpAction):
                        continue
                    names = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.metavar or action.dest}`"
                    if action.nargs == 0:
                        values = "flag"
                    elif action.choices:
                        values = ", ".join(f"`{c}`" for c in action.choices)
                    else:
                        values = f"`{action.metavar or action.dest.upper()}`" + (
                            " (repeatable)" if isinstance(action, argparse._AppendAction) else ""
                        )
                    if action.required:
                        values += " (required)"
                    default = "" if action.default in (None, False) else f"`{action.default}`"
                    out.append(f"| {names} | {values} | {default} | {_cell(_help(action))} |")
                out.append("")
        return "\n".join(out)


def migrations() -> list[tuple[str, str, str]]:
    """Each migration the package ships: its number, its name and the comment that opens it."""
    found = []
    for path in sorted(MIGRATIONS.glob("[0-9][0-9][0-9][0-9]_*.sql")):
        number, _, name = path.stem.partition("_")
        comment: list[str] = []
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.startswith("--"):
                break
            comment.append(line[2:].strip())
        text = " ".join(" ".join(comment).split())
        text = re.sub(rf"^{number} [^:]*:\s*", "", text)
        found.append((number, name, text))
    return found


class Migrations(MarkdownDirective):
    def markdown(self) -> str:
        out = ["| migration | what it does |", "| --- | --- |"]
        for number, name, text in migrations():
            out.append(f"| `{number}_{name}` | {_cell(text)} |")
        return "\n".join(out)


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("source-read", on_source_read)
    app.connect("include-read", on_include_read)
    app.add_directive("synclane-config", ConfigOptions)
    app.add_directive("synclane-cli", CliCommands)
    app.add_directive("synclane-migrations", Migrations)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
