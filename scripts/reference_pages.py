"""Reference pages that cannot drift: the command line from its argument parsers, the gRPC API
from the proto files' comments, written into the docs when MkDocs builds them.

A page asks for a generated part with a placeholder line, ``<!-- generated: cli -->`` or
``<!-- generated: grpc-api -->``; mkdocs.yml names this file under ``hooks:``, and MkDocs calls
:func:`on_page_markdown` for every page. Prose that cannot be derived stays in the page around the
placeholder; everything that can (commands, options, defaults, help; services, RPCs, messages,
fields, enums and their comments) comes from the code at every build.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PROTO_ROOT = ROOT / "proto"
HORIZON_PROTOS = ("horizon/v1/horizon.proto",)
PLACEHOLDER = re.compile(r"^<!-- generated: (?P<name>[\w-]+) -->$", re.MULTILINE)
CLIENT_ENVIRONMENT = ("HORIZON_TARGET", "HORIZON_TOKEN")
"""Read by the parser for its defaults: left out while it is built, so the page shows the
defaults every user gets, not the builder's."""


# ------------------------------------------------------------------------------------------
# The command line
# ------------------------------------------------------------------------------------------


def delegated_parsers() -> dict[str, Callable[[], argparse.ArgumentParser]]:
    """``horizon ingest``, ``horizon compact`` and ``horizon table`` hand their arguments to their
    own parsers."""
    from horizon_broker.compaction.cli import build_parser as compact_parser
    from horizon_broker.ingest.cli import build_parser as ingest_parser
    from horizon_broker.ingest.table_cli import build_parser as table_parser

    return {"ingest": ingest_parser, "compact": compact_parser, "table": table_parser}


@contextmanager
def _without_client_environment() -> Iterator[None]:
    saved = {name: os.environ.pop(name) for name in CLIENT_ENVIRONMENT if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def cli_reference() -> str:
    """Every ``horizon`` command with its usage, description, arguments, defaults and help."""
    from horizon_broker.cli import build_parser

    with _without_client_environment():
        parser = build_parser()
        delegated = {name: build() for name, build in delegated_parsers().items()}
    lines = [_paragraph(parser.description), "", "```text", parser.format_usage().strip(), "```"]
    (subcommands,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    summaries = {choice.dest: choice.help or "" for choice in subcommands._choices_actions}
    lines += ["", "| command | what it does |", "| --- | --- |"]
    lines += [
        f"| [`horizon {name}`](#horizon-{name}) | {_cell(summaries[name])} |"
        for name in subcommands.choices
    ]
    for name, command in subcommands.choices.items():
        lines += ["", f"## `horizon {name}` {{#horizon-{name}}}", "", _cell(summaries[name]) + "."]
        shown = delegated.get(name, command)
        if shown.description and shown is not command:
            lines += ["", _paragraph(shown.description)]
        if not any(a.option_strings or a.dest for a in _arguments(shown)):
            lines += ["", "Its arguments go to the program it runs (see above)."]
            continue
        lines += ["", "```text", shown.format_usage().strip(), "```", ""]
        lines += _argument_table(shown)
    return "\n".join(lines) + "\n"


def _arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]


def _argument_table(parser: argparse.ArgumentParser) -> list[str]:
    rows = ["| argument | default | help |", "| --- | --- | --- |"]
    for action in _arguments(parser):
        rows.append(f"| {_argument_name(action)} | {_default(action)} | {_help(action)} |")
    return rows


def _argument_name(action: argparse.Action) -> str:
    if not action.option_strings:
        name = action.metavar or action.dest
        return f"`{name}`" + (" (any number)" if action.nargs in ("*", "+") else "")
    takes_value = action.nargs != 0
    value = f" {action.metavar or action.dest.upper()}" if takes_value else ""
    return ", ".join(f"`{option}{value}`" for option in action.option_strings)


def _default(action: argparse.Action) -> str:
    unset = action.default is None or action.default is False or action.default in ("", [])
    if unset or action.default == argparse.SUPPRESS or not action.option_strings:
        return ""
    return f"`{action.default}`"


def _help(action: argparse.Action) -> str:
    text = action.help or ""
    if "%(" in text:
        text = text % {**vars(action), "prog": ""}
    if action.choices is not None:
        text += f" (one of: {', '.join(f'`{choice}`' for choice in action.choices)})"
    if action.nargs == 0 and action.option_strings:
        text = text or "a flag"
    return _cell(text)


def _paragraph(text: str | None) -> str:
    """A docstring or comment as Markdown: reST's double backquotes become code spans, and an
    angle bracket outside them is text, not an HTML tag (``"not cached: <why>"``)."""
    spans = (text or "").strip().replace("``", "`").split("`")
    return "`".join(
        span if inside else span.replace("<", "&lt;").replace(">", "&gt;")
        for inside, span in zip(itertools.cycle((False, True)), spans)
    )


def _cell(text: str) -> str:
    return _paragraph(" ".join(text.split())).replace("|", "\\|")


# ------------------------------------------------------------------------------------------
# The gRPC API
# ------------------------------------------------------------------------------------------

# FileDescriptorProto field numbers, the paths of SourceCodeInfo locations.
_MESSAGE, _ENUM, _SERVICE = 4, 5, 6
_FIELD, _NESTED, _NESTED_ENUM, _ENUM_VALUE, _METHOD, _SYNTAX = 2, 3, 4, 2, 2, 12


def proto_files(proto_root: Path = PROTO_ROOT, names: tuple[str, ...] = HORIZON_PROTOS) -> Any:
    """The files' descriptors with their comments (protoc's ``--include_source_info``)."""
    from google.protobuf import descriptor_pb2
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "set.pb"
        command = ["protoc", f"-I{proto_root}", "--include_source_info", "--include_imports"]
        code = protoc.main([*command, f"--descriptor_set_out={out}", *names])
        if code != 0:
            raise RuntimeError(f"protoc failed ({code}) on {names} under {proto_root}")
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    return [file for file in files if file.name in names]


def _comments(file: Any) -> dict[tuple[int, ...], str]:
    found = {}
    for location in file.source_code_info.location:
        text = "\n".join(
            part.strip("\n")
            for part in (location.leading_comments, location.trailing_comments)
            if part.strip()
        )
        if text:
            found[tuple(location.path)] = _unindent(text)
    return found


def _unindent(comment: str) -> str:
    return "\n".join(line[1:] if line.startswith(" ") else line for line in comment.splitlines())


def grpc_reference(files: Any = None) -> str:
    """Every service, RPC, message, field, enum and value of the proto files, with comments."""
    files = proto_files() if files is None else files
    lines: list[str] = []
    for file in files:
        comments = _comments(file)
        header = _file_comment(file)
        lines += [f"## `{file.name}` (package `{file.package}`)", ""]
        if header:
            lines += ["```text", header, "```", ""]
        for index, service in enumerate(file.service):
            lines += _service(service, (_SERVICE, index), comments, file.package)
        for index, message in enumerate(file.message_type):
            lines += _message(message, (_MESSAGE, index), comments, file.package)
        for index, enum in enumerate(file.enum_type):
            lines += _enum(enum, (_ENUM, index), comments, file.package)
    return "\n".join(lines) + "\n"


def _file_comment(file: Any) -> str:
    """The comment block above ``syntax``: the file's own introduction."""
    for location in file.source_code_info.location:
        if list(location.path) == [_SYNTAX]:
            blocks = [*location.leading_detached_comments, location.leading_comments]
            return _unindent("\n\n".join(b.strip("\n") for b in blocks if b.strip()))
    return ""


def _anchor(full_name: str) -> str:
    return full_name.replace(".", "-").lower()


def _type_link(type_name: str, package: str) -> str:
    name = type_name.lstrip(".")
    if name.startswith(package + "."):
        return f"[`{name.removeprefix(package + '.')}`](#{_anchor(name)})"
    return f"`{name}`"


def _service(service: Any, path: tuple[int, ...], comments: Mapping, package: str) -> list[str]:
    full = f"{package}.{service.name}"
    lines = [f"### service `{service.name}` {{#{_anchor(full)}}}", ""]
    if path in comments:
        lines += [_paragraph(comments[path]), ""]
    for index, method in enumerate(service.method):
        stream = "stream " if method.server_streaming else ""
        request = _type_link(method.input_type, package)
        response = _type_link(method.output_type, package)
        lines += [f"#### `{method.name}` {{#{_anchor(full + '.' + method.name)}}}", ""]
        lines += [f"`rpc {method.name}` ({request}) returns ({stream}{response})", ""]
        comment = comments.get((*path, _METHOD, index))
        if comment:
            lines += [_paragraph(comment), ""]
    return lines


_LABELS = {3: "repeated "}
_SCALARS = {
    1: "double",
    2: "float",
    3: "int64",
    4: "uint64",
    5: "int32",
    8: "bool",
    9: "string",
    12: "bytes",
    13: "uint32",
    17: "sint32",
    18: "sint64",
}


def _field_type(field: Any, package: str) -> str:
    label = _LABELS.get(field.label, "")
    if field.proto3_optional:
        label = "optional "
    if field.type_name:
        return label + _type_link(field.type_name, package)
    return f"{label}`{_SCALARS.get(field.type, str(field.type))}`"


def _message(message: Any, path: tuple[int, ...], comments: Mapping, package: str) -> list[str]:
    full = f"{package}.{message.name}"
    lines = [f"### message `{message.name}` {{#{_anchor(full)}}}", ""]
    if path in comments:
        lines += [_paragraph(comments[path]), ""]
    real_oneofs = {
        index: oneof.name
        for index, oneof in enumerate(message.oneof_decl)
        if not any(f.proto3_optional and f.oneof_index == index for f in message.field)
    }
    if message.field:
        lines += ["| field | type | number | description |", "| --- | --- | --- | --- |"]
    for index, field in enumerate(message.field):
        comment = _cell(comments.get((*path, _FIELD, index), ""))
        if field.HasField("oneof_index") and field.oneof_index in real_oneofs:
            comment = f"one of `{real_oneofs[field.oneof_index]}`. {comment}".strip()
        kind = _field_type(field, package)
        lines.append(f"| `{field.name}` | {kind} | {field.number} | {comment} |")
    if not message.field:
        lines.append("No fields.")
    lines.append("")
    for index, nested in enumerate(message.nested_type):
        lines += _message(nested, (*path, _NESTED, index), comments, full)
    for index, enum in enumerate(message.enum_type):
        lines += _enum(enum, (*path, _NESTED_ENUM, index), comments, full)
    return lines


def _enum(enum: Any, path: tuple[int, ...], comments: Mapping, package: str) -> list[str]:
    full = f"{package}.{enum.name}"
    lines = [f"### enum `{enum.name}` {{#{_anchor(full)}}}", ""]
    if path in comments:
        lines += [_paragraph(comments[path]), ""]
    lines += ["| value | number | description |", "| --- | --- | --- |"]
    for index, value in enumerate(enum.value):
        comment = _cell(comments.get((*path, _ENUM_VALUE, index), ""))
        lines.append(f"| `{value.name}` | {value.number} | {comment} |")
    return [*lines, ""]


# ------------------------------------------------------------------------------------------
# The MkDocs hook
# ------------------------------------------------------------------------------------------

GENERATORS: dict[str, Callable[[], str]] = {"cli": cli_reference, "grpc-api": grpc_reference}


def fill_placeholders(markdown: str, where: str) -> str:
    """``markdown`` with each placeholder replaced by its generated part; an unknown one fails."""

    def generated(found: re.Match[str]) -> str:
        name = found["name"]
        if name not in GENERATORS:
            raise ValueError(f"{where}: no generator for <!-- generated: {name} -->")
        return GENERATORS[name]().rstrip("\n")

    return PLACEHOLDER.sub(generated, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs hook: fill the page's placeholders (pages without one are left as they are)."""
    return fill_placeholders(markdown, page.file.src_uri)
