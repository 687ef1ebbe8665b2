"""The ``promptweave`` command line: ``render``, ``show`` and ``demo``.

``promptweave render`` turns a dataset (JSONL, JSON, CSV or Parquet) and an OpenCompass/AISBench
dataset config into one JSON line per test row -- the exact prompt the reference would send to
the model, the in-context example indices and a SHA-256 of the prompt -- so that prompts can be
diffed, hashed and audited. ``promptweave show`` prints the first rows for a person: in-context
examples, role boundaries, the generation point and significant whitespace made visible.
``promptweave demo`` runs ``show`` on the dataset and configs shipped in ``promptweave/demo``.

Expected failures (bad input, bad config, a template error) end with a one-line ``error: ...``
on stderr and exit status 2; ``PROMPTWEAVE_TRACEBACK=1`` shows the traceback of unexpected ones.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import importlib
import json
import os
import stat
import sys
import tempfile
import threading
import time
import unicodedata
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import IO, Any, BinaryIO, Final, TypeVar

import click

from promptweave.errors import PromptRenderError, add_note

__all__ = ["CliError", "cli", "main", "read_ice_indices", "read_rows"]

EXIT_INPUT = 2
"""Exit status of usage and input errors (bad data, config, template, option combination)."""

TRACEBACK_ENV = "PROMPTWEAVE_TRACEBACK"
DATA_FORMATS: Mapping[str, str] = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".csv": "csv",
    ".tsv": "tsv",
    ".parquet": "parquet",
    ".pq": "parquet",
}
Row = dict[str, Any]
_T = TypeVar("_T")


class CliError(click.ClickException):
    """An expected failure: printed as one ``error: ...`` line, exit status 2."""

    exit_code = EXIT_INPUT

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.message}", file=file, err=file is None)


class _Failure(CliError):
    """A failure that is not the input's fault (an exception promptweave does not expect, an
    output file that cannot be written): one line too, but exit status 1."""

    exit_code = 1


def _note(message: str) -> None:
    click.echo(message, err=True)


def _describe(exc: BaseException) -> str:
    """The message of an exception plus its notes (e.g. ``while rendering test row 3``)."""
    message = str(exc) or type(exc).__name__
    if not isinstance(exc, PromptRenderError):
        message = f"{type(exc).__name__}: {message}"
    notes = getattr(exc, "__notes__", None) or []
    return f"{message} ({'; '.join(notes)})" if notes else message


@contextlib.contextmanager
def _errors_as_cli(what: str | None = None) -> Iterator[None]:
    """promptweave errors (template, config, role, ...) become one-line input errors (status 2);
    any other exception a one-line failure (status 1), or its traceback when
    ``PROMPTWEAVE_TRACEBACK=1``."""
    prefix = f"{what}: " if what else ""
    try:
        yield
    except (CliError, click.exceptions.Exit, click.Abort):
        raise
    except PromptRenderError as exc:
        raise CliError(prefix + _describe(exc)) from exc
    except Exception as exc:
        if os.environ.get(TRACEBACK_ENV) == "1":
            raise
        raise _Failure(
            f"{prefix}{_describe(exc)} (set {TRACEBACK_ENV}=1 to see the traceback)"
        ) from exc


# ============================================================================ reading data


def read_rows(
    path: str,
    progress: Callable[[int], None] | None = None,
    columns: Sequence[str] | None = None,
) -> list[Row]:
    """The rows of a ``.jsonl``/``.ndjson``, ``.json`` (a list of rows or an object of column
    lists), ``.csv``/``.tsv`` (values as str) or ``.parquet`` file; ``progress(n)`` is told
    of rows read from JSONL and CSV files. ``columns`` names the columns of a CSV/TSV file
    without a header row (such as MMLU's ``input,A,B,C,D,target`` files); other formats do
    not use it.

    Raises:
        CliError: the file is missing, unreadable or malformed (the message names file and line).
    """
    p = Path(path)
    if not p.exists():
        raise CliError(f"{path}: no such file")
    if p.is_dir():
        raise CliError(f"{path}: is a directory, expected a data file")
    fmt = DATA_FORMATS.get(p.suffix.lower())
    if fmt is None:
        known = ", ".join(sorted(DATA_FORMATS))
        raise CliError(f"{path}: unknown data format {p.suffix or '(no extension)'!r}; use {known}")
    try:
        if fmt == "jsonl":
            return _read_jsonl(p, path, progress)
        if fmt == "json":
            return _read_json(p, path)
        if fmt in ("csv", "tsv"):
            return _read_csv(p, path, "\t" if fmt == "tsv" else ",", progress, columns)
        return _read_parquet(p, path)
    except OSError as exc:
        raise CliError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def _json_type(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return names.get(type(value), "a number")


def _jsonl_lines(f: Iterable[bytes]) -> Iterator[tuple[int, bytes]]:
    """The lines of a binary file as text mode reads them (universal newlines: a lone ``\r``
    ends a line too, as in ``for line in open(path)``, which OpenCompass's JSONL loaders use),
    each with the offset in the file of its first byte."""
    at = 0
    for raw in f:
        for line in raw.splitlines(keepends=True) if b"\r" in raw else (raw,):
            yield at, line
            at += len(line)


def _jsonl_values(f: Iterable[bytes], name: str) -> Iterator[tuple[int, Any]]:
    """The JSON value of each line of a JSONL file, with its line number: UTF-8 (a BOM
    before the first line dropped); a line of JSON's white space is skipped, one of other
    white space (such as U+00A0) is invalid JSON. Errors name the file and line (and, for a
    byte that is not UTF-8, its offset in the file)."""
    for lineno, (at, raw) in enumerate(_jsonl_lines(f), 1):
        encoding = "utf-8-sig" if lineno == 1 else "utf-8"
        text = _decode(raw, encoding, f"{name}:{lineno}", offset=at)
        if text.strip(_JSON_WHITESPACE):
            yield lineno, _json_loads(text, name, lineno)


def _read_jsonl(p: Path, name: str, progress: Callable[[int], None] | None) -> list[Row]:
    rows: list[Row] = []
    with p.open("rb") as f:
        for lineno, value in _jsonl_values(f, name):
            if not isinstance(value, dict):
                raise CliError(
                    f"{name}:{lineno}: expected a JSON object per line, got {_json_type(value)}"
                )
            rows.append(value)
            if progress is not None and not lineno % 1024:
                progress(1024)
    return rows


_BOM = b"\xef\xbb\xbf"

#: the white space JSON allows between tokens
_JSON_WHITESPACE = " \t\r\n"


def _decode(
    raw: bytes, encoding: str, where: str, whole_file: bool = False, offset: int = 0
) -> str:
    """``raw`` decoded; the error names ``where`` (with the line of the bad byte when ``raw``
    is the ``whole_file``) and the bad byte's offset in the file (``raw`` starts at
    ``offset``)."""
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as exc:
        # (the utf-8-sig codec counts from after a BOM)
        start = offset + exc.start + (3 if encoding == "utf-8-sig" and raw.startswith(_BOM) else 0)
        if whole_file:
            line = raw.count(b"\n", 0, start) + 1
            where = f"{where}:{line}"
        raise CliError(f"{where}: not UTF-8 text ({exc.reason} at byte {start})") from exc


def _json_loads(text: str, name: str, lineno: int | None = None) -> Any:
    """``json.loads``; errors name the file and the line (``lineno``: of a JSONL line)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        line = lineno if lineno is not None else exc.lineno
        raise CliError(f"{name}:{line}: invalid JSON: {exc.msg} (column {exc.colno})") from exc
    except RecursionError as exc:
        where = name if lineno is None else f"{name}:{lineno}"
        raise CliError(f"{where}: invalid JSON: nested too deeply") from exc
    except ValueError as exc:  # an integer literal beyond Python's int-string digit limit
        where = name if lineno is None else f"{name}:{lineno}"
        raise CliError(f"{where}: cannot read the JSON: {exc}") from exc


def _read_json(p: Path, name: str) -> list[Row]:
    text = _decode(p.read_bytes(), "utf-8-sig", name, whole_file=True)
    try:
        value = _json_loads(text, name)
    except CliError as exc:
        first = text.lstrip().split("\n", 1)[0]
        if "Extra data" in str(exc) and first.startswith("{"):
            with contextlib.suppress(ValueError, RecursionError):
                if isinstance(json.loads(first), dict):
                    raise CliError(
                        f"{exc} -- the file holds one JSON object per line: name it .jsonl"
                    ) from exc
        raise
    if isinstance(value, list):
        for i, row in enumerate(value):
            if not isinstance(row, dict):
                raise CliError(f"{name}: row {i} is {_json_type(row)}, expected an object")
        return value
    if isinstance(value, dict):
        lengths: dict[str, int] = {}
        for column, values in value.items():
            if not isinstance(values, list):
                raise CliError(
                    f"{name}: expected a list of rows or an object of column lists; "
                    f"column {column!r} is {_json_type(values)}"
                )
            lengths[column] = len(values)
        if len(set(lengths.values())) > 1:
            raise CliError(f"{name}: the columns have different lengths: {lengths}")
        n = next(iter(lengths.values()), 0)
        return [{c: value[c][i] for c in value} for i in range(n)]
    raise CliError(
        f"{name}: expected a list of rows or an object of column lists, got {_json_type(value)}"
    )


def uniform_columns(rows: list[Row]) -> list[Row]:
    """The rows as a table with one set of columns, as the frameworks' datasets hold them (a
    HuggingFace ``Dataset``, Arrow types): every column any row has, in the order they first
    appear, a row's missing values ``None``, and each column of one Arrow type
    (:func:`_arrow_column`: a column of ints and floats holds floats, a column of dicts has
    every key any of them has). Rows that already share their columns, in one order, and need
    no value changed are kept as they are."""
    if not rows:
        return rows
    first = list(rows[0])
    same = all(list(row) == first for row in rows)
    names: dict[str, None] = dict.fromkeys(first)
    if not same:
        for row in rows:
            names.update(dict.fromkeys(row))
    changed: dict[str, list[Any]] = {}
    for name in names:
        values = [row.get(name) for row in rows]
        try:
            typed = _arrow_column(values)
        except _NotArrow:  # (the reference's loader fails on it; left as it is)
            continue
        if typed is not values:
            changed[name] = typed
    if same and not changed:
        return rows
    out = [{name: row.get(name) for name in names} for row in rows]
    for name, values in changed.items():
        for row, value in zip(out, values, strict=True):
            row[name] = value
    return out


#: the value types whose column, alone or with None, Arrow holds unchanged
_KEPT_AS_THEY_ARE = frozenset({str, float, bool})


class _NotArrow(Exception):
    """The values have no one Arrow type (a str and an int in one column, ...)."""


#: the Arrow kind of a value of these types (ints and floats: ``_kind``)
_KINDS: Final = {bool: "bool", str: "str", list: "list", dict: "dict"}


def _kind(value: object) -> str:
    if type(value) is float:
        return "number"
    if type(value) is int:
        if not -(2**63) <= value < 2**63:
            raise _NotArrow  # past 64 bits: Arrow refuses it
        return "number"
    kind = _KINDS.get(type(value))
    if kind is None:
        raise _NotArrow
    return kind


def _arrow_column(values: list[Any]) -> list[Any]:
    """``values`` as Arrow types one column of them when the data is loaded into a HuggingFace
    ``Dataset`` (``Dataset.from_list`` / the JSON loader): the same list object when nothing
    changes. Ints and floats make one ``double`` column (``10`` prints ``10.0``); the lists'
    items are one column; dicts are one struct of every key any of them has, in the order the
    keys first appear, a missing one ``None``, each field one column. Raises
    :class:`_NotArrow` for values of different kinds (the loader fails on them)."""
    # the usual column, all str (or all float, all bool), None or not, is kept as it is: one
    # pass over its types instead of one call per value
    types = set(map(type, values))
    types.discard(type(None))
    if len(types) == 1 and types <= _KEPT_AS_THEY_ARE:
        return values
    present = [v for v in values if v is not None]
    kinds = {_kind(v) for v in present}
    if len(kinds) != 1:
        if kinds:
            raise _NotArrow
        return values  # all None
    (kind,) = kinds
    if kind == "number":
        if all(type(v) is int for v in present):
            return values
        return [float(v) if type(v) is int else v for v in values]
    if kind == "list":
        items = [x for v in present for x in v]
        typed = _arrow_column(items)
        if typed is items:
            return values
        out: list[Any] = []
        at = 0
        for v in values:
            if v is None:
                out.append(None)
                continue
            out.append(typed[at : at + len(v)])
            at += len(v)
        return out
    if kind == "dict":
        keys: dict[Any, None] = {}
        for v in present:
            keys.update(dict.fromkeys(v))
        fields = {k: _arrow_column([v.get(k) for v in present]) for k in keys}
        rebuilt = iter([{k: fields[k][i] for k in keys} for i in range(len(present))])
        return [None if v is None else next(rebuilt) for v in values]
    return values


def _read_csv(
    p: Path,
    name: str,
    delimiter: str,
    progress: Callable[[int], None] | None,
    columns: Sequence[str] | None = None,
) -> list[Row]:
    rows: list[Row] = []
    # no field is too long (the csv module refuses fields over 128 Ki characters by default;
    # pandas and HuggingFace datasets read them)
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    # opened as the frameworks' CSV loaders open their files: in text mode, whose universal
    # newlines make a line break inside a quoted field "\n" whatever the file's line endings;
    # a file with a header row as `CustomDataset` reads it (`utf-8-sig`: a BOM is dropped), a
    # header-less one as MMLU-style loaders read theirs (`utf-8`: a BOM stays in the first cell)
    encoding = "utf-8" if columns is not None else "utf-8-sig"
    with p.open(encoding=encoding) as f:
        reader = csv.reader(f, delimiter=delimiter)
        try:
            header = list(columns) if columns is not None else next(reader, None)
            if header is None:
                return rows
            twice = sorted({c for c in header if header.count(c) > 1})
            if twice:
                names = ", ".join(repr(c) for c in twice)
                where = "--columns names" if columns is not None else f"{name}:1: the header names"
                raise CliError(f"{where} a column more than once: {names}")
            last = reader.line_num
            for record in reader:
                start, last = last + 1, reader.line_num
                if not record:
                    continue
                if len(record) != len(header):
                    what = "--columns names" if columns is not None else "the header has"
                    hint = ""
                    if last > start:  # a quoted field over several lines: maybe a quote left open
                        hint = (
                            f" (the row starts at line {start}: a quoted field runs over "
                            f"{last - start + 1} lines; is a quote left open?)"
                        )
                    raise CliError(
                        f"{name}:{reader.line_num}: {len(record)} fields, {what} "
                        f"{len(header)}{hint}"
                    )
                rows.append(dict(zip(header, record, strict=True)))
                if progress is not None and not len(rows) % 1024:
                    progress(1024)
        except csv.Error as exc:
            raise CliError(f"{name}:{reader.line_num}: invalid CSV: {exc}") from exc
        except UnicodeDecodeError as exc:
            raise CliError(_utf8_error(p, name, exc)) from exc
    return rows


def _utf8_error(p: Path, name: str, exc: UnicodeDecodeError) -> str:
    """``file:line: not UTF-8 text (... at byte N)`` for a text file read in chunks, whose
    decoding error only knows its place in the chunk: the file's bytes are decoded again to
    find the first bad byte."""
    try:
        raw = p.read_bytes()
        raw.decode("utf-8-sig")
    except UnicodeDecodeError as whole:
        bom = 3 if raw.startswith(b"\xef\xbb\xbf") else 0
        start = whole.start + bom
        line = raw.count(b"\n", 0, start) + 1
        return f"{name}:{line}: not UTF-8 text ({whole.reason} at byte {start})"
    except OSError:
        pass
    return f"{name}: not UTF-8 text ({exc.reason})"


def _read_parquet(p: Path, name: str) -> list[Row]:
    try:
        pq = importlib.import_module("pyarrow.parquet")
    except ImportError as exc:
        raise CliError(f"{name}: reading Parquet needs pyarrow (pip install pyarrow)") from exc
    try:
        table = pq.read_table(p)
    except (ValueError, TypeError) as exc:  # pyarrow.ArrowInvalid is a ValueError
        raise CliError(f"{name}: invalid Parquet file: {exc}") from exc
    rows: list[Row] = table.to_pylist()
    return rows


def read_ice_indices(path: str) -> list[list[int]]:
    """In-context example indices computed elsewhere, one list of train-row indices per test row:
    a ``.json`` array of arrays, or a ``.jsonl`` file with one array per line -- or one object
    with an ``"ice_indices"`` array, such as a line of ``promptweave render``'s own output.

    Raises:
        CliError: the file is missing or malformed (the message names file and line).
    """
    p = Path(path)
    if not p.is_file():
        raise CliError(f"{path}: no such file" if not p.exists() else f"{path}: not a file")
    suffix = p.suffix.lower()
    if DATA_FORMATS.get(suffix) not in ("json", "jsonl"):
        raise CliError(f"{path}: index lists must be a .json or .jsonl file")
    lists: list[list[int]] = []
    try:
        if DATA_FORMATS[suffix] == "json":
            value = _json_loads(_decode(p.read_bytes(), "utf-8-sig", path, whole_file=True), path)
            if not isinstance(value, list):
                got = _json_type(value)
                raise CliError(f"{path}: expected an array of index arrays, got {got}")
            for row, item in enumerate(value):
                lists.append(_index_list(item, f"{path}: item {row}"))
            return lists
        with p.open("rb") as f:
            for lineno, value in _jsonl_values(f, path):
                if isinstance(value, dict) and "ice_indices" in value:
                    value = value["ice_indices"]
                lists.append(_index_list(value, f"{path}:{lineno}"))
    except OSError as exc:
        raise CliError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return lists


def _index_list(value: Any, where: str) -> list[int]:
    if not isinstance(value, list):
        raise CliError(
            f"{where}: expected an array of train-row indices (or an object with "
            f'"ice_indices"), got {_json_type(value)}'
        )
    for idx in value:
        if not isinstance(idx, int) or isinstance(idx, bool) or idx < 0:
            raise CliError(
                f"{where}: train-row indices are integers >= 0, got {json.dumps(idx)[:40]}"
            )
    return value


# ============================================================================ configs


@dataclass
class _Job:
    """Everything a command needs to render: the renderer and the rows."""

    renderer: Any
    test: list[Row]
    train: list[Row]
    dataset: str
    model: str
    api: bool
    counter: Callable[[str], int] | None = None
    notes: list[str] = field(default_factory=list)
    #: the rows are a dataset's loaded data: prepared as the reference's BaseDataset and
    #: DatasetReader prepare them (subdivision/idx, n repetitions, train_range/test_range)
    loaded: bool = True
    #: the train rows came from --train (else they are the test rows)
    own_train: bool = True
    #: --ice-indices: the in-context example indices of every test row, computed elsewhere
    ice_indices: list[list[int]] | None = None
    #: the model's max_seq_len when its tokens cannot be counted here, and a byte margin
    unapplied_limit: tuple[int, int] | None = None
    #: the model class cuts its input to max_seq_len tokens when it tokenizes it
    truncation: _Truncation | None = None
    #: --request-messages: write the request messages of AISBench's chat service models
    request_messages: bool = False
    #: the model is one of AISBench's chat service models (its class name)
    request_class: str | None = None

    def rows_rendered(self, limit: int | None) -> int:
        """How many test rows a render covers (after the preparation), then ``limit``."""
        from promptweave.retrievers import prepared_test_size

        r = self.renderer
        n = len(self.test)
        if self.loaded:
            n = prepared_test_size(
                n,
                n=r.n,
                test_range=r.test_range,
                flavor=r.flavor,
                test_split=r.test_split,
                # one split (no --train, or the reader reads both from one): None
                train_total=(
                    len(self.train) if self.own_train and r.train_split != r.test_split else None
                ),
                train_range=r.train_range,
            )
        return n if limit is None else min(limit, n)

    def describe_rows(self) -> str:
        """``'5 test rows, 12 train rows'``, with what selects and repeats them."""
        r = self.renderer
        parts = []
        # loaded data whose reader reads both splits from one: the examples come from the test
        # rows (prepare_loaded warns that a --train file is unused)
        same = self.loaded and self.own_train and r.train_split == r.test_split
        for split, rows in (("test", self.test), ("train", self.train)):
            size = getattr(r, f"{split}_range") if self.loaded else None
            if split == "train" and same:
                text = f"train rows: the test rows (train_split == test_split == {r.test_split!r})"
            else:
                text = f"{len(rows):,} {split} rows"
            if size is not None:
                text += f" ({split}_range {size!r})"
            parts.append(text)
        if self.loaded and r.n != 1:
            parts.append(f"each {r.n} times")
        return ", ".join(parts)


def _load_config(path: str) -> Any:
    from promptweave.config import load_config

    if not Path(path).exists():
        raise CliError(f"{path}: no such file")
    with _errors_as_cli():
        return load_config(path)


def _dataset_name(ds: Mapping[str, Any], i: int) -> str:
    abbr = ds.get("abbr")
    return str(abbr) if abbr else f"#{i}"


def _select_dataset(cfg: Any, selector: str | None, path: str) -> tuple[dict[str, Any], str]:
    # the reference's choice (an eval config's `datasets`, a dataset config's `*_datasets`),
    # else every dataset config found in the file
    datasets: list[dict[str, Any]] = cfg.run_datasets() or cfg.datasets()
    if not datasets:
        raise CliError(f"{path}: no dataset config in it (a dict with infer_cfg and reader_cfg)")
    names = [_dataset_name(ds, i) for i, ds in enumerate(datasets)]
    if selector is None:
        if len(datasets) > 1:
            _note(
                f"note: {path} has {len(datasets)} datasets ({', '.join(names)}); using the "
                f"first, {names[0]} (choose one with --dataset)"
            )
        return datasets[0], names[0]
    for i, ds in enumerate(datasets):
        if ds.get("abbr") == selector:
            return ds, names[i]
    try:
        index = int(selector)
    except ValueError:
        index = None
    if index is not None and -len(datasets) <= index < len(datasets):
        return datasets[index], names[index]
    raise CliError(
        f"--dataset {selector}: no such dataset in {path}; it has "
        + ", ".join(f"[{i}] {n}" for i, n in enumerate(names))
    )


def _first_model(cfg: Any, path: str, *, required: bool) -> tuple[dict[str, Any], str] | None:
    """The first model config of ``cfg`` and a name for it."""
    models: list[dict[str, Any]] = cfg.run_models() or cfg.models()
    if not models:
        if required:
            raise CliError(f"{path}: no model config in it (a `models` list or a meta_template)")
        return None
    abbr = models[0].get("abbr") or "#0"
    if len(models) > 1:
        _note(f"note: {path} has {len(models)} models; using the first, {abbr}")
    return models[0], f"{abbr} ({path})"


def _read_meta_template(path: str) -> Any:
    p = Path(path)
    if not p.exists():
        raise CliError(f"{path}: no such file")
    if p.suffix.lower() == ".py":
        cfg = _load_config(path)
        if "meta_template" in cfg:
            return cfg["meta_template"]
        found = _first_model(cfg, path, required=False)
        if found is not None:  # a model config: its model's meta template, as --model
            return found[0].get("meta_template")
        raise CliError(f"{path}: defines no meta_template (and no model config)")
    try:
        text = p.read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise CliError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise CliError(_utf8_error(p, path, exc)) from exc
    value = _json_loads(text, path)
    if isinstance(value, dict) and "meta_template" in value and "round" not in value:
        value = value["meta_template"]  # a model config written as JSON
    if value is not None and not isinstance(value, dict):
        raise CliError(f"{path}: a meta template must be a JSON object, got {_json_type(value)}")
    return value


def _meta_template(
    model: str | None, meta_template: str | None, dataset_cfg: Any, dataset_path: str
) -> tuple[Any, str, dict[str, Any] | None]:
    """The meta template, a name for the model and the model config it came from (if any)."""
    if model is not None and meta_template is not None:
        raise CliError("use either --model or --meta-template, not both")
    if model is not None:
        found = _first_model(_load_config(model), model, required=True)
        assert found is not None
        return found[0].get("meta_template"), found[1], found[0]
    if meta_template is not None:
        return _read_meta_template(meta_template), meta_template, None
    found = _first_model(dataset_cfg, dataset_path, required=False)
    if found is not None:
        _note(f"note: using the model config {found[1]}")
        return found[0].get("meta_template"), found[1], found[0]
    return None, "none", None


def _model_prompting(
    model_cfg: dict[str, Any],
    name: str,
    flavor: str,
    api: bool,
    chat: str | None,
    *,
    find_chat: bool = True,
) -> tuple[Any, bool, Any, str | None]:
    """The meta template, the parser (``api``), the :class:`~promptweave.config.ModelPrompting`
    and the chat template to render with: the model's class decides the first two (``--api``
    forces the API parser); a chat-template model without ``--chat-template`` uses the chat
    template of its tokenizer when that is on this machine (a model directory, or the
    HuggingFace cache; generation prompts only: ``find_chat``). Notes tell a person what was
    decided."""
    from promptweave.config import model_prompting

    p = model_prompting(model_cfg, flavor)
    cls = p.model_class or "no type"
    if not p.known:
        if not api:
            _note(
                f"note: model class {cls} of {name} is not one promptweave knows: rendering with "
                "its meta_template for a string model (--api for an API model)"
            )
        return p.meta_template, api, p, chat
    if p.fastchat_template and p.chat_template:
        if chat is not None:
            raise CliError(
                f"{name} formats its conversations with the FastChat template "
                f"{p.fastchat_template!r}, not a chat template: drop --chat-template"
            )
        if find_chat:
            _note(
                f"note: {cls} formats the messages with the FastChat template "
                f"{p.fastchat_template!r} (its fastchat_template)"
            )
    elif p.chat_template and chat is None and p.tokenizer is not None and find_chat:
        chat = _local_chat_template(p.tokenizer)
        if chat is not None:
            _note(f"note: using the chat template of {cls}'s tokenizer ({chat})")
    if p.api and not api and chat is None and not (p.fastchat_template and find_chat):
        kind = "a chat-template model" if p.chat_template else "an API model"
        _note(
            f"note: {name} is {kind} ({cls}): prompts are parsed with APITemplateParser, as it "
            "parses them (a dialogue prompt becomes a message list)"
        )
    if p.chat_template and chat is None and not p.fastchat_template:
        where = f" {p.tokenizer!r} is not on this machine;" if p.tokenizer and find_chat else ""
        _note(
            f"note: {cls} renders these messages with its tokenizer's chat template;{where} "
            "--chat-template (its tokenizer_config.json or model directory) gives the final text"
        )
    if p.meta_template is not model_cfg.get("meta_template"):
        what = (
            "ignores the config's meta template"
            if p.meta_template is None
            else "uses its default meta template (the config has none)"
        )
        _note(f"note: {cls} {what}")
    return p.meta_template, api or p.api, p, chat


#: a tokenizer makes at most one token per UTF-8 byte, plus at most this many special tokens:
#: a text shorter than a token limit by this many bytes cannot exceed it
_SPECIAL_TOKENS_MARGIN: Final = 16


def _seq_len_fitting(
    p: Any, flavor: str, max_seq_len: int | None, tok: Any, chat: Any
) -> tuple[int | None, Any, tuple[int, int] | None]:
    """The ``max_seq_len`` and token counter to render with: ``--max-seq-len``, else (in the
    OpenCompass flavour) the model config's, as OpenCompass's inferencers take it; tokens
    counted as the model's class counts them -- the API models' estimate, or a tokenizer
    (``--tokenizer``, else the model's own when it is on this machine), through the chat
    template for chat-template models. Where the count cannot be had, the model's limit is
    not applied (an explicit --max-seq-len is then an error) and returned with a byte margin,
    for :func:`_warn_unapplied_limit` to tell a person if a prompt could exceed it."""
    from promptweave._flavor import OPENCOMPASS
    from promptweave.tokens import api_token_len, as_token_counter, chat_token_counter

    given = max_seq_len is not None
    if not given and (p is None or p.max_seq_len is None or flavor != OPENCOMPASS):
        return None, tok, None
    limit = max_seq_len if max_seq_len is not None else p.max_seq_len
    kind = p.token_count if p is not None else "tokenizer"
    if kind == "words" and tok is None:
        counter: Any = api_token_len
        how = "tokens estimated as OpenCompass's API models estimate them"
    else:
        source = "--tokenizer"
        if tok is None and p is not None and p.tokenizer is not None and kind is not None:
            tok = _local_tokenizer(p.tokenizer)
            source = f"the model's tokenizer ({p.tokenizer})"
        if tok is None or (kind == "chat" and chat is None):
            why = "its chat template and tokenizer" if kind == "chat" else "a tokenizer"
            if given:
                raise CliError(f"--max-seq-len needs {why} to count tokens (--tokenizer)")
            # a chat template adds its own text around the prompt
            return None, None, (limit, 512 if kind == "chat" else _SPECIAL_TOKENS_MARGIN)
        if kind == "chat" and chat is not None:
            counter = chat_token_counter(chat, tok)
            how = f"tokens of the chat template's text, by {source}"
        else:
            counter = as_token_counter(tok)
            how = f"tokens counted by {source}"
    if not given:
        _note(
            f"note: in-context examples are dropped from prompts longer than the model's "
            f"max_seq_len ({limit:,}), as OpenCompass does ({how})"
        )
    return limit, counter, None


def _row_inputs(result: Any, prompt: Any) -> list[Any]:
    """The model inputs of one rendered row: one per label in ppl mode, one per request of a
    multi-turn row, else the prompt itself."""
    if result.mode == "ppl":
        return list(prompt.values())
    if result.infer_mode is not None:
        return list(prompt)
    return [prompt]


def _warn_unapplied_limit(job: _Job, result: Any) -> None:
    """A note when the model's max_seq_len could not be applied and some prompt may be longer
    (more UTF-8 bytes than the limit allows tokens, less a margin): OpenCompass would have
    dropped in-context examples from it. Prompts that short cannot exceed it."""
    if job.unapplied_limit is None:
        return
    limit, margin = job.unapplied_limit

    # what OpenCompass counts: str() of each model input (its PromptList joins the prompts)
    longer = sum(
        any(
            len(str(x).encode("utf-8", "surrogatepass")) + margin > limit
            for x in _row_inputs(result, p)
        )
        for p, ice in zip(result.prompts, result.ice_indices, strict=True)
        if ice
    )
    if longer:
        _note(
            f"note: the model's max_seq_len ({limit:,}) is not applied -- counting its tokens "
            f"needs its tokenizer (--tokenizer) -- and {longer:,} prompt"
            f"{'s' if longer != 1 else ''} may be longer: OpenCompass would drop in-context "
            "examples from those"
        )


@dataclass(frozen=True)
class _Truncation:
    """A model class that cuts its input to ``limit`` tokens, from the left, when it tokenizes
    it for generation (``counter`` counts those tokens, as ``source`` says)."""

    model_class: str
    limit: int
    counter: Callable[[str], int]
    source: str


#: OpenCompass's (and AISBench's) model classes whose ``generate`` tokenizes the final text with
#: ``truncation=True, max_length=max_seq_len`` (their tokenizer's ``truncation_side`` is
#: ``'left'``): whether special tokens are added there (the chat template's text: not; a
#: FastChat template's: yes)
_TRUNCATING_MODELS: Final = {"HuggingFacewithChatTemplate": False, "HuggingFaceBaseModel": True}


def _tokenizer_truncation(
    p: Any, model_cfg: Any, gen: bool, tok: Any, chat: Any, api: bool, max_seq_len: int | None
) -> _Truncation | None:
    """How the model class cuts long prompts when it tokenizes them, when the prompts written
    are the text it tokenizes and its tokens can be counted here (``--tokenizer``, else the
    model's own tokenizer on this machine); ``None`` otherwise. Its limit is ``--max-seq-len``
    (``max_seq_len``), else the config's ``max_seq_len``, else (as the class takes it) the
    model's ``config.json`` on this machine: ``max_position_embeddings``, ``seq_length`` or
    ``model_max_length``; a limit that is not a positive int is not applied."""
    from promptweave.tokens import text_token_counter

    if p is None or not gen or not isinstance(model_cfg, Mapping):
        return None
    special = _TRUNCATING_MODELS.get(p.model_class)
    if special is None:
        return None
    if p.model_class == "HuggingFacewithChatTemplate":
        if p.fastchat_template:
            special = True
        elif chat is None:
            return None  # message lists are written, not the text the class tokenizes
    elif api:
        return None
    given = max_seq_len if max_seq_len is not None else model_cfg.get("max_seq_len")
    limit = given if isinstance(given, int) and not isinstance(given, bool) else None
    if limit is None and given is None and isinstance(model_cfg.get("path"), str):
        limit = _config_max_length(model_cfg["path"])
    if limit is None or limit <= 0:
        return None
    source = "--tokenizer"
    if tok is None and p.tokenizer is not None:
        tok = _local_tokenizer(p.tokenizer)
        source = f"the model's tokenizer ({p.tokenizer})"
    if tok is None:
        return None
    return _Truncation(p.model_class, limit, text_token_counter(tok, special), source)


def _config_max_length(spec: str) -> int | None:
    """The model's length limit in its ``config.json`` on this machine, as OpenCompass's
    HuggingFace classes read it when the config has no ``max_seq_len``."""
    found = _local_model_file(spec, ("config.json",))
    if found is None:
        return None
    try:
        config = json.loads(found.read_text("utf-8"))
    except (OSError, ValueError, RecursionError):  # (unreadable, not JSON, nested too deep)
        return None
    if not isinstance(config, dict):
        return None
    for key in ("max_position_embeddings", "seq_length", "model_max_length"):
        value = config.get(key)
        if key in config:
            ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
            return value if ok else None
    return None


def _warn_truncated(job: _Job, result: Any) -> None:
    """A note when some prompts are longer than the model class lets its input be: it cuts
    them when it tokenizes them (from the left: their beginning is lost), after the prompts
    written here are made."""
    t = job.truncation
    if t is None or result.mode != "gen" or getattr(result, "infer_mode", None) is not None:
        return
    longer: list[int] = []
    for i, prompt in enumerate(result.prompts):
        if not isinstance(prompt, str):
            continue
        size = len(prompt.encode("utf-8", "surrogatepass"))
        if size + _SPECIAL_TOKENS_MARGIN <= t.limit:
            continue
        try:
            count = t.counter(prompt)
        except Exception:  # a text the tokenizer cannot take (a lone surrogate): not counted
            continue
        if count > t.limit:
            longer.append(result.test_indices[i])
    if longer:
        n = len(longer)
        _note(
            f"note: {n:,} prompt{'s are' if n != 1 else ' is'} longer than {t.model_class}'s "
            f"max_seq_len ({t.limit:,} tokens, counted by {t.source}; first: test row "
            f"{longer[0]}): the class cuts its input to that many tokens from the left when it "
            f"tokenizes it, so the model does not see the beginning of "
            f"{'those prompts' if n != 1 else 'that prompt'}; "
            f"{'they are' if n != 1 else 'it is'} written whole here"
        )


def _warn_unsendable(job: _Job, result: Any) -> None:
    """A note when AISBench's chat service model cannot send some of the model inputs written
    (an item that is not a message: a meta template's ``begin`` string), on which the reference
    fails; ``--request-messages`` makes that an error."""
    if job.request_class is None or job.request_messages:
        return
    from promptweave.chat_models import ais_sendable

    def bad(x: Any) -> bool:
        return isinstance(x, list) and not all(ais_sendable(m) for m in x)

    rows = [
        result.test_indices[i]
        for i, p in enumerate(result.prompts)
        if any(bad(x) for x in _row_inputs(result, p))
    ]
    if rows:
        n = len(rows)
        _note(
            f"note: {n:,} model input{'s hold' if n != 1 else ' holds'} an item that is not a "
            f"message (first: test row {rows[0]}; a meta template's 'begin' string): "
            f"AISBench's {job.request_class} cannot send {'them' if n != 1 else 'it'} (it "
            "fails with TypeError)"
        )


def _local_model_file(spec: str, names: Sequence[str]) -> Path | None:
    """The first of ``names`` in the model directory ``spec``, or in the local HuggingFace
    cache of the hub name ``spec``; ``None`` if there is none (never downloads)."""
    path = Path(spec).expanduser()
    try:
        if path.is_dir():
            return next((path / n for n in names if (path / n).is_file()), None)
    except OSError:  # not a path this system can have (too long, ...): not on this machine
        return None
    if path.is_absolute() or spec.count("/") > 1:
        return None
    try:
        hub = importlib.import_module("huggingface_hub")
    except ImportError:
        return None
    for n in names:
        try:
            found = hub.try_to_load_from_cache(spec, n)
        except Exception:  # not a valid repository id
            return None
        if isinstance(found, str):
            return Path(found)
    return None


def _local_tokenizer(spec: str) -> Any:
    """A ``tokenizers.Tokenizer`` from the ``tokenizer.json`` of the model ``spec`` when it is
    on this machine (see :func:`_local_model_file`), else ``None``."""
    found = _local_model_file(spec, ("tokenizer.json",))
    if found is None:
        return None
    try:
        return importlib.import_module("tokenizers").Tokenizer.from_file(str(found))
    except Exception:  # no tokenizers package, or not a tokenizer file
        return None


def _local_chat_template(spec: str) -> str | None:
    """The directory of the model ``spec`` when it is on this machine with a chat template (see
    :func:`_local_model_file`), else ``None``."""
    found = _local_model_file(spec, ("tokenizer_config.json", "chat_template.jinja"))
    return None if found is None else str(found.parent)


def _load_tokenizer(spec: str) -> Any:
    """A ``tokenizers.Tokenizer`` (file, directory with ``tokenizer.json`` or hub name) or a
    tiktoken encoding (``tiktoken:cl100k_base``)."""
    if spec.startswith("tiktoken:"):
        try:
            tiktoken = importlib.import_module("tiktoken")
        except ImportError as exc:
            raise CliError(f"--tokenizer {spec}: needs tiktoken (pip install tiktoken)") from exc
        try:
            return tiktoken.get_encoding(spec.removeprefix("tiktoken:"))
        except Exception as exc:
            raise CliError(f"--tokenizer {spec}: {_describe(exc)}") from exc
    try:
        tokenizers = importlib.import_module("tokenizers")
    except ImportError as exc:
        raise CliError(f"--tokenizer {spec}: needs tokenizers (pip install tokenizers)") from exc
    p = Path(spec)
    if p.is_dir():
        p = p / "tokenizer.json"
    if p.suffix == ".json" and not p.is_file():  # a file name, not a hub name
        raise CliError(f"--tokenizer {spec}: no such file {str(p)!r}")
    try:
        if p.is_file():
            return tokenizers.Tokenizer.from_file(str(p))
        return tokenizers.Tokenizer.from_pretrained(spec)
    except Exception as exc:
        raise CliError(f"--tokenizer {spec}: cannot load: {_describe(exc)}") from exc


def _prepare(
    config: str,
    *,
    data: str,
    train: str | None,
    dataset: str | None,
    model: str | None,
    meta_template: str | None,
    api: bool,
    flavor: str | None,
    mode: str | None,
    tokenizer: str | None = None,
    max_seq_len: int | None = None,
    infer_mode: str | None = None,
    chat_template: str | None = None,
    progress: _Progress | None = None,
    rows_as_given: bool = False,
    ice_indices: str | None = None,
    columns: str | None = None,
    source_order: bool = False,
    request_messages: bool = False,
) -> _Job:
    from promptweave.config import as_dumped
    from promptweave.dataset import DatasetRenderer
    from promptweave.tokens import as_token_counter

    cfg = _load_config(config)
    ds, name = _select_dataset(cfg, dataset, config)
    meta, model_name, model_cfg = _meta_template(model, meta_template, cfg, config)
    if not source_order:
        # what the framework's run renders from: the config written out and read back, every
        # dict's keys sorted (a label dict's labels, a raw message's keys)
        ds, meta = as_dumped(ds), as_dumped(meta)
        model_cfg = as_dumped(model_cfg) if model_cfg is not None else None
    prompting = None
    gen = False
    if model_cfg is not None:
        infer = ds.get("infer_cfg") if isinstance(ds.get("infer_cfg"), Mapping) else {}
        inferencer = infer.get("inferencer") if isinstance(infer, Mapping) else None
        gen = (mode or DatasetRenderer._mode_of(inferencer or {})) == "gen"
        meta, api, prompting, chat_template = _model_prompting(
            model_cfg, model_name, flavor or cfg.flavor, api, chat_template, find_chat=gen
        )
    phase = progress.phase if progress is not None else None
    names = None
    if columns is not None:
        names = [c.strip() for c in columns.split(",")]
        if not all(names):
            raise CliError(f"--columns {columns!r}: an empty column name")
        files = [f for f in (data, train) if f is not None]
        if not any(DATA_FORMATS.get(Path(f).suffix.lower()) in ("csv", "tsv") for f in files):
            raise CliError("--columns names the columns of .csv/.tsv files; none is given")
    test_rows = read_rows(data, phase(f"reading {data}") if phase else None, names)
    train_rows = None
    if train is not None:
        train_rows = read_rows(train, phase(f"reading {train}") if phase else None, names)
    if not rows_as_given:
        # loaded data is a table, as HuggingFace's JSON loader makes one of the file
        test_rows = uniform_columns(test_rows)
        train_rows = uniform_columns(train_rows) if train_rows is not None else None
    tok = _load_tokenizer(tokenizer) if tokenizer is not None else None
    chat = None
    if chat_template is not None:
        from promptweave.chat_template import ChatTemplate

        with _errors_as_cli(f"chat template {chat_template}"):
            chat = ChatTemplate.from_file(chat_template)
        model_name = f"{model_name} + chat template {os.path.basename(chat_template)}"
    max_seq_len, counter, unapplied = _seq_len_fitting(
        prompting, flavor or cfg.flavor, max_seq_len, tok, chat
    )
    with _errors_as_cli(f"dataset {name}"):
        # the model config hands the renderer what its class adds to a chat template
        # (chat_template_kwargs, BOS stripping, a FastChat template); the parser, the meta
        # template and max_seq_len are the ones decided above, with their notes
        renderer = DatasetRenderer.from_config(
            ds,
            model_cfg,
            meta_template=meta,
            api=api,
            flavor=flavor or cfg.flavor,
            mode=mode,
            max_seq_len=max_seq_len,
            token_counter=counter if max_seq_len is not None else None,
            infer_mode=infer_mode,
            chat_template=chat,
        )
    if infer_mode is not None and renderer.infer_mode is None:
        _note(
            f"note: --infer-mode {infer_mode} is for multi-turn configs (AISBench's "
            "MultiTurnPromptTemplate, OpenCompass's ChatInferencer); this one sends one request "
            "per row"
        )
    job = _Job(
        renderer,
        test_rows,
        # the reference reads ICE from the test rows when there is no train split; pass them in
        # full so that --limit / -n never shrinks the pool the examples are drawn from
        train_rows if train_rows is not None else test_rows,
        name,
        model_name,
        api and chat is None,
        as_token_counter(tok) if tok is not None else None,
        loaded=not rows_as_given,
        own_train=train_rows is not None,
    )
    job.unapplied_limit = unapplied
    job.truncation = _tokenizer_truncation(prompting, model_cfg, gen, tok, chat, api, max_seq_len)
    from promptweave.chat_models import AIS_CHAT_SERVICE_MODELS

    cls = prompting.model_class if prompting is not None else None
    if cls in AIS_CHAT_SERVICE_MODELS and chat is None and job.api:
        job.request_class = cls
    if request_messages:
        if chat is not None:
            raise CliError(
                "--request-messages writes the messages a chat service model sends; with "
                "--chat-template the prompts are a local model's final text: give one of them"
            )
        if cls not in AIS_CHAT_SERVICE_MODELS or not job.api:
            raise CliError(
                "--request-messages is for AISBench's chat service models ("
                + ", ".join(sorted(AIS_CHAT_SERVICE_MODELS))
                + f") given with --model; {'the model is ' + cls if cls else 'no --model'}"
            )
        job.request_messages = True
    if ice_indices is not None:
        lists = read_ice_indices(ice_indices)
        n = job.rows_rendered(None)
        if len(lists) != n:
            prepared = " (as the reader prepares them)" if job.loaded else ""
            raise CliError(
                f"{ice_indices}: {len(lists):,} index lists, but the dataset has {n:,} test "
                f"rows{prepared}; give one list per test row"
            )
        job.ice_indices = lists
    return job


# ============================================================================ rendering


class _Progress:
    """A one-line progress display on stderr for the phases of a job (reading, rendering,
    writing). It appears only when stderr is a terminal and the job has run for more than
    ``delay`` seconds, and it ticks (elapsed time) while the Rust job renders in one call."""

    def __init__(self, delay: float = 1.0) -> None:
        self.delay = delay
        self.label, self.total, self.done = "", 0, 0
        self.enabled = sys.stderr.isatty()
        self._start = time.monotonic()
        self._stop = threading.Event()
        self._shown = False
        self._thread: threading.Thread | None = None

    def __enter__(self) -> _Progress:
        if self.enabled:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()

    def phase(self, label: str, total: int = 0) -> Callable[[int], None]:
        """Start a phase of ``total`` rows (0: unknown); returns the ``update(n)`` callback."""
        self.label, self.total, self.done = label, total, 0
        return self.update

    def update(self, n: int) -> None:
        self.done += n

    def line(self) -> str:
        elapsed = time.monotonic() - self._start
        if not self.total:
            return f"{self.label}: {self.done:,} rows  {elapsed:.1f} s"
        share = min(self.done / self.total, 1.0)
        bar = "█" * round(share * 24) + "·" * (24 - round(share * 24))
        return f"{self.label}: {bar} {self.done:,}/{self.total:,} rows  {elapsed:.1f} s"

    def _run(self) -> None:
        if self._stop.wait(self.delay):
            return
        while True:
            sys.stderr.write(f"\r{self.line()}\x1b[K")
            sys.stderr.flush()
            self._shown = True
            if self._stop.wait(0.2):
                return


def _render(
    job: _Job,
    progress: _Progress | None,
    *,
    limit: int | None,
    strict: bool,
    zero_shot: bool = False,
) -> Any:
    with _errors_as_cli():
        n = job.rows_rendered(limit)
        ice: list[list[int]] | None = [[] for _ in range(n)] if zero_shot else None
        if ice is None and job.ice_indices is not None:
            ice = job.ice_indices[:n]
        update = progress.phase("rendering", n) if progress is not None else None
        result = job.renderer.render(
            job.test,
            job.train if job.own_train else None,
            ice_indices=ice,
            limit=limit,
            strict=strict,
            progress=update,
            loaded=job.loaded,
        )
        if job.request_messages:
            _as_request_messages(result)
        return result


def _as_request_messages(result: Any) -> None:
    """The model inputs of ``result`` as the request messages AISBench's chat service models
    send (:func:`promptweave.chat_models.ais_request_messages`), in place; an input the class
    cannot send is an error naming the test row."""
    from promptweave.chat_models import ais_request_messages

    def each(prompt: Any) -> Any:
        inputs = [ais_request_messages(x) for x in _row_inputs(result, prompt)]
        if result.mode == "ppl":
            return dict(zip(prompt, inputs, strict=True))
        return inputs if result.infer_mode is not None else inputs[0]

    out = []
    for i, prompt in enumerate(result.prompts):
        try:
            out.append(each(prompt))
        except Exception as exc:
            add_note(exc, f"while making the request messages of test row {result.test_indices[i]}")
            raise
    result.prompts = out


def _notes_after(job: _Job, result: Any) -> None:
    """What a person should know about the prompts rendered (``render`` and ``show``)."""
    _warn_missing(result)
    _warn_unapplied_limit(job, result)
    _warn_truncated(job, result)
    _warn_unsendable(job, result)


def _warn_missing(result: Any) -> None:
    for name, count in sorted(result.missing_columns.items()):
        rows = "row" if count == 1 else "rows"
        _note(f"warning: column {name!r} missing in {count} {rows} (left as '{{{name}}}')")


def _json_default(value: object) -> str:
    return str(value)


_ENCODER = json.JSONEncoder(ensure_ascii=False, default=_json_default)
_ASCII_ENCODER = json.JSONEncoder(default=_json_default)


def _dumps(value: Any) -> str:
    """``json.dumps(value, ensure_ascii=False)`` (one encoder, not one per call)."""
    return _ENCODER.encode(value)


def prompt_sha256(prompt: Any) -> str:
    """SHA-256 (hex) of a prompt: of its UTF-8 bytes for a string, of
    ``json.dumps(messages, ensure_ascii=False)`` for a message list."""
    text = prompt if isinstance(prompt, str) else _dumps(prompt)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _records(
    result: Any, progress: Callable[[int], None] | None = None
) -> Iterator[dict[str, Any]]:
    rows = result.test_indices
    for i, (prompt, ice) in enumerate(zip(result.prompts, result.ice_indices, strict=True)):
        if progress is not None and i and not i % 1024:
            progress(1024)
        row = rows[i]
        if getattr(result, "infer_mode", None) is not None:
            # a multi-turn row: the model input of each request, in request order
            yield {
                "index": row,
                "infer_mode": result.infer_mode,
                "prompts": list(prompt),
                "ice_indices": list(ice),
                "sha256": [prompt_sha256(p) for p in prompt],
            }
        elif result.mode == "ppl":
            by_label = {str(label): p for label, p in prompt.items()}
            yield {
                "index": row,
                "prompts": by_label,
                "ice_indices": list(ice),
                "sha256": {label: prompt_sha256(p) for label, p in by_label.items()},
            }
        else:
            yield {
                "index": row,
                "prompt": prompt,
                "ice_indices": list(ice),
                "sha256": prompt_sha256(prompt),
            }


def _json_line(record: Mapping[str, Any]) -> bytes:
    try:
        return (_dumps(record) + "\n").encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: keep the line valid (escaped) JSON
        return (_ASCII_ENCODER.encode(record) + "\n").encode("ascii")


@contextlib.contextmanager
def atomic_output(path: Path) -> Iterator[BinaryIO]:
    """A binary file that replaces ``path`` only once everything was written and synced.

    The data goes to a temporary file in the same directory, which is fsynced and then moved
    over ``path`` with ``os.replace``; on any error (or ``KeyboardInterrupt``) the temporary file
    is removed and ``path`` is left as it was.
    """
    directory = path.parent
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    except FileNotFoundError as exc:
        missing = not directory.exists()
        raise CliError(
            f"{path}: cannot write: directory {str(directory)!r} does not exist"
            if missing
            else f"{path}: cannot write: {exc.strerror or exc}"
        ) from exc
    except OSError as exc:
        raise CliError(f"{path}: cannot write: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _mode_for(path))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError, AttributeError):  # make the rename durable (POSIX)
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _mode_for(path: Path) -> int:
    """The permissions of the file being replaced, or the default for a new file (0o666 minus
    the umask) -- ``mkstemp`` creates files readable by the owner only."""
    with contextlib.suppress(OSError):
        return path.stat().st_mode & 0o7777
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _write_records(result: Any, out: str | None, progress: _Progress | None = None) -> None:
    update = progress.phase("writing", len(result.prompts)) if progress is not None else None
    if out is None or out == "-":
        stream = sys.stdout.buffer
        try:
            for record in _records(result, update):
                stream.write(_json_line(record))
            stream.flush()
        except BrokenPipeError:  # e.g. `| head`: stop quietly
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise click.exceptions.Exit(1) from None
        return
    path = Path(out)
    try:
        st: os.stat_result | None = path.stat()  # of what a symlink points to
    except OSError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise CliError(f"--out {out}: is a directory")
    if out.endswith(("/", os.sep)):  # (Path drops the slash: it would write a file `X`)
        raise CliError(f"--out {out}: ends with a slash (a directory); give a file name")
    try:
        if st is not None and not stat.S_ISREG(st.st_mode):
            # a pipe, a device (/dev/null, /dev/stdout, `-o >(gzip > x.gz)`): written to, as
            # `> PATH` would; it cannot be replaced atomically (nor should it be replaced)
            with open(path, "wb") as stream:
                for record in _records(result, update):
                    stream.write(_json_line(record))
            return
        if path.is_symlink():
            # replace the file the link points to; the link stays
            path = Path(os.path.realpath(path))
        with atomic_output(path) as f:
            for record in _records(result, update):
                f.write(_json_line(record))
    except OSError as exc:
        raise _Failure(f"{out}: cannot write: {exc.strerror or exc}") from exc


# ============================================================================ show


_STYLE: Mapping[str, Mapping[str, Any]] = {
    "header": {"fg": "cyan", "bold": True},
    "marker": {"fg": "yellow", "dim": True},
    "role": {"fg": "magenta", "bold": True},
    "ws": {"dim": True},
    "gen": {"fg": "green", "bold": True},
}


def _s(text: str, kind: str) -> str:
    return click.style(text, **_STYLE[kind])


def _escape(text: str) -> str:
    """Control and invisible format characters made visible (``\\r`` as ``␍``, U+200B as
    ``⟨U+200B⟩``); tabs and everything printable are kept."""
    if text.isprintable():
        return text
    out: list[str] = []
    for ch in text:
        if ch == "\t" or ch.isprintable():
            out.append(ch)
        elif ch == "\r":
            out.append(_s("␍", "ws"))
        elif unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"):
            out.append(_s(f"⟨U+{ord(ch):04X}⟩", "ws"))
        else:
            out.append(ch)
    return "".join(out)


def _visible(text: str, *, final: bool) -> str:
    """``text`` with trailing whitespace of each line shown (``·`` for a space, ``→`` for a tab)
    and, when ``final``, the trailing newlines shown as ``⏎``."""
    lines = text.split("\n")
    content_end = len(lines)  # lines[content_end:] are the empty lines after the last newline
    while content_end > 0 and lines[content_end - 1] == "":
        content_end -= 1
    out: list[str] = []
    for i, line in enumerate(lines):
        last = i == len(lines) - 1
        body = line.rstrip(" \t") if (not last or final) else line
        tail = line[len(body) :]
        shown = _escape(body) + (
            _s(tail.replace(" ", "·").replace("\t", "→"), "ws") if tail else ""
        )
        if final and not last and i >= content_end - 1:
            shown += _s("⏎", "ws")
        out.append(shown)
    return "\n".join(out)


def _ice_span(full: Sequence[_T], zero: Sequence[_T], *, text: bool) -> tuple[int, int] | None:
    """Where the in-context examples are in ``full``: the one insertion that turns the
    zero-shot rendering ``zero`` into ``full`` (preferring line boundaries), or ``None``."""
    d = len(full) - len(zero)
    if d <= 0:
        return None
    p = 0
    while p < len(zero) and full[p] == zero[p]:
        p += 1
    s = 0
    while s < len(zero) and full[-1 - s] == zero[-1 - s]:
        s += 1
    lo, hi = len(zero) - s, p
    if lo > hi:
        return None
    if not text:
        return lo, lo + d

    def score(b: int) -> int:
        starts = b == 0 or full[b - 1] == "\n"
        ends = full[b + d - 1] == "\n"
        return 2 * starts + ends

    best = max(range(lo, hi + 1), key=lambda b: (score(b), -b))
    return best, best + d


def _content(message: Any) -> Any:
    if isinstance(message, Mapping):
        return message.get("prompt", message.get("content", message))
    return message


def _count(prompt: Any, counter: Callable[[str], int]) -> int:
    if isinstance(prompt, str):
        return counter(prompt)
    if isinstance(prompt, list):
        return sum(counter(str(_content(m))) for m in prompt)
    return counter(str(prompt))


def _ice_marker(ice: Sequence[int]) -> str:
    return _s(f"── in-context examples (k={len(ice)}: {list(ice)}) ──", "marker")


def _end_marker() -> str:
    return _s("── end of examples ──", "marker")


def _format_text(prompt: str, span: tuple[int, int] | None, ice: Sequence[int], end: str) -> str:
    cont = _s("⤸", "ws")  # a line broken for a marker, not by the prompt
    if not prompt:
        return _s("⟨empty prompt⟩", "ws") + end
    if span is None:
        return _visible(prompt, final=True) + end
    b, e = span
    parts: list[str] = []
    head, block, tail = prompt[:b], prompt[b:e], prompt[e:]
    if head:
        parts.append(_visible(head, final=False) + ("" if head.endswith("\n") else cont + "\n"))
    parts.append(_ice_marker(ice) + "\n")
    parts.append(_visible(block, final=False) + ("" if block.endswith("\n") else cont + "\n"))
    parts.append(_end_marker() + "\n")
    parts.append(_visible(tail, final=True) + end)
    return "".join(parts)


def _format_messages(
    messages: Sequence[Any], span: tuple[int, int] | None, ice: Sequence[int], end: str
) -> str:
    lines: list[str] = []
    for i, message in enumerate(messages):
        if span is not None and i == span[0]:
            lines.append(_ice_marker(ice))
        if span is not None and i == span[1]:
            lines.append(_end_marker())
        role = (
            message.get("role", message.get("type", "?")) if isinstance(message, Mapping) else "?"
        )
        content = _content(message)
        tag = f"[{role}]"
        if isinstance(content, str):
            text = _visible(content, final=True)
            if content.endswith("\n"):  # the ⏎ marks end the message; no empty last line
                text = text[: text.rfind("\n")]
        else:
            text = repr(content)
        indent = " " * (len(tag) + 1)
        lines.append(_s(tag, "role") + " " + text.replace("\n", "\n" + indent))
    if span is not None and span[1] == len(messages):
        lines.append(_end_marker())
    lines.append(end.strip("\n") if end else "")
    return "\n".join(line for line in lines if line)


def _format_prompt(
    prompt: Any, zero: Any, ice: Sequence[int], *, generate: bool
) -> tuple[str, tuple[int, int] | None]:
    end = _s("⟨generate⟩", "gen") if generate else _s("⟨end⟩", "ws")
    if isinstance(prompt, str):
        span = _ice_span(prompt, zero, text=True) if ice and isinstance(zero, str) else None
        return _format_text(prompt, span, ice, end), span
    if isinstance(prompt, list):
        span = None
        if ice and isinstance(zero, list):
            span = _ice_span(list(prompt), list(zero), text=False)
        return _format_messages(prompt, span, ice, "\n" + end), span
    return repr(prompt), None


def _tokens(prompt: Any, zero: Any, job: _Job, span: Any) -> str:
    if job.counter is None:
        return ""
    total = _count(prompt, job.counter)
    if span is None:
        return f" · {total:,} tokens"
    return f" · {total:,} tokens ({total - _count(zero, job.counter):,} in examples)"


def _show(job: _Job, *, n: int, strict: bool, title: str | None = None) -> Any:
    result = _render(job, None, limit=n, strict=strict)
    zero = _render(job, None, limit=n, strict=False, zero_shot=True)
    _notes_after(job, result)
    r = job.renderer
    retriever = str(r.retriever_cfg.get("type", "ZeroRetriever"))
    retriever = getattr(r.retriever_cfg.get("type"), "name", retriever)
    if r.flow == "chat":  # ChatInferencer uses no in-context examples
        retriever = f"ChatInferencer ({r.infer_mode})"
    kind = "API model (message lists)" if job.api else "string model"
    echo = click.echo
    echo(_s(title or f"dataset {job.dataset}", "header"))
    echo(
        f"  {r.flavor} · {result.mode} mode · {retriever} · {kind} · meta template: {job.model}"
        f" · {job.describe_rows()}"
    )
    rows = result.test_indices
    for i, prompt in enumerate(result.prompts):
        ice = result.ice_indices[i]
        row = rows[i]
        shots = f"{len(ice)} in-context example{'' if len(ice) == 1 else 's'} {list(ice)}"
        if result.infer_mode is not None:
            n_req = f"{len(prompt)} request{'' if len(prompt) == 1 else 's'} ({result.infer_mode})"
            echo(_s(f"━━ row {row} · {n_req} ━━", "header"))
            for k, p in enumerate(prompt):
                body, span = _format_prompt(p, p, [], generate=True)
                echo(_s(f"── request {k}{_tokens(p, p, job, span)} ──", "header"))
                echo(body)
        elif result.mode == "ppl":
            echo(_s(f"━━ row {row} · {shots} · {len(prompt)} labels ━━", "header"))
            for label, p in prompt.items():
                z = zero.prompts[i].get(label)
                body, span = _format_prompt(p, z, ice, generate=False)
                echo(_s(f"── label {label!r}{_tokens(p, z, job, span)} ──", "header"))
                echo(body)
        else:
            z = zero.prompts[i]
            body, span = _format_prompt(prompt, z, ice, generate=True)
            echo(_s(f"━━ row {row} · {shots}{_tokens(prompt, z, job, span)} ━━", "header"))
            echo(body)
        echo()
    return result


# ============================================================================ commands


def _data_options(f: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.argument("dataset_config", metavar="DATASET_CONFIG"),
        click.option(
            "--data",
            required=True,
            metavar="FILE",
            help="Test rows: .jsonl, .json (list of rows or object of columns), .csv, .tsv or "
            ".parquet.",
        ),
        click.option(
            "--train",
            metavar="FILE",
            help="Rows the in-context examples are drawn from (default: the test rows). "
            "Unused, with a warning, when the config's reader takes both splits from one "
            "(train_split == test_split), as the reference does.",
        ),
        click.option(
            "--columns",
            metavar="NAMES",
            help="The column names of .csv/.tsv files that have no header row, comma-separated "
            "(MMLU's files: input,A,B,C,D,target); every row of the file is then data.",
        ),
        click.option(
            "--ice-indices",
            metavar="FILE",
            help="In-context example indices computed elsewhere (a BM25 or embedding "
            "retriever, ...), one list of train-row indices per test row: a .json array of "
            'arrays, or .jsonl with an array -- or an object with "ice_indices", like the '
            "lines render writes -- per line. Replaces the config's retriever; its "
            "ice_separator / ice_eos_token still apply.",
        ),
        click.option(
            "--dataset",
            "dataset",
            metavar="ABBR|INDEX",
            help="Which dataset of the config, by abbr or index among those the reference "
            "runs from it (an eval config's datasets, else its *_datasets lists in order); "
            "default: the first.",
        ),
        click.option(
            "--model",
            metavar="MODEL_CONFIG",
            help="Model config (.py) whose meta_template to use (default: the first model of "
            "DATASET_CONFIG's models list, if it has one).",
        ),
        click.option(
            "--meta-template",
            metavar="FILE",
            help="Meta template as a .json object or a .py config defining meta_template.",
        ),
        click.option(
            "--api",
            is_flag=True,
            help="Render for an API model: message lists (APITemplateParser). Implied by a "
            "model config whose class parses so (OpenAI, OpenAISDK, AISBench's "
            "VLLMCustomAPIChat, the chat-template models, ...).",
        ),
        click.option(
            "--request-messages",
            is_flag=True,
            help="AISBench's chat service models (VLLMCustomAPIChat and its variants, from "
            "--model): write each model input as the 'messages' of the request the class sends "
            "({content, role: user/assistant/system}), not as the parser's {role, prompt} "
            "messages.",
        ),
        click.option(
            "--chat-template",
            metavar="PATH",
            help="Render for a local chat model: parse with the API parser (--model's "
            "meta_template, else the framework's default chat meta template), convert to chat "
            "messages and apply this HuggingFace chat template (a tokenizer_config.json, a "
            "model directory or a .jinja file) with add_generation_prompt=True, as the "
            "reference's chat-template models do. Prompts are then strings. gen mode only.",
        ),
        click.option(
            "--flavor",
            type=click.Choice(["opencompass", "aisbench"]),
            help="Reference behaviour (default: detected from the config's imports).",
        ),
        click.option(
            "--mode",
            type=click.Choice(["gen", "ppl"]),
            help="Generation or perplexity prompts (default: from the inferencer).",
        ),
        click.option(
            "--infer-mode",
            type=click.Choice(["every_with_gt", "last", "every"]),
            help="AISBench multi-turn (MultiTurnPromptTemplate) and OpenCompass ChatInferencer "
            "configs: which requests of the multi-turn inferencer to render: every_with_gt (one "
            "per answer, gold answers in the history) or last (the whole dialogue); default: "
            "the config's infer_mode. 'every' needs the model's replies and is refused.",
        ),
        click.option(
            "--rows-as-given",
            is_flag=True,
            help="Use the rows of --data / --train as they are. By default they are taken as "
            "the dataset's loaded data: a table (a column some rows lack is None there, as "
            "HuggingFace's JSON loader makes it), prepared as the reference's BaseDataset and "
            "DatasetReader do: subdivision/idx columns, the dataset's n repetitions, "
            "reader_cfg's train_range / test_range.",
        ),
        click.option(
            "--source-order",
            is_flag=True,
            help="Keep the config's dicts in the order the file writes them. By default they "
            "are in the order the framework's run has them: OpenCompass and AISBench write the "
            "config out and read it back before running, which sorts every dict's keys (a "
            "label dict's labels, a raw message's keys).",
        ),
        click.option(
            "--strict",
            is_flag=True,
            help="A column the template uses but a row lacks is an error (default: a warning; "
            "the placeholder stays, as in the reference). In loaded data (the default) only a "
            "column no row has can be missing.",
        ),
        click.option(
            "--tokenizer",
            metavar="NAME_OR_PATH",
            help="Count tokens: a tokenizer.json file or directory, a HuggingFace hub name, or "
            "tiktoken:ENCODING.",
        ),
        click.option(
            "--max-seq-len",
            type=click.IntRange(min=1),
            metavar="N",
            help="Drop in-context examples from the end until the prompt fits N tokens, as the "
            "reference inferencers do (needs --tokenizer, except for the API models that "
            "estimate tokens themselves).",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="promptweave", message="promptweave %(version)s")
def cli() -> None:
    """Render evaluation datasets into the exact prompts OpenCompass 0.5.4 / AISBench 3.1 build.

    DATASET_CONFIG is an OpenCompass or AISBench dataset config file (.py); it is executed to
    read it, as those frameworks do, so only use configs you trust.
    """


@cli.command()
@_data_options
@click.option("--limit", type=click.IntRange(min=0), metavar="N", help="Only the first N rows.")
@click.option(
    "--out",
    "-o",
    metavar="FILE",
    help="Write JSONL here (atomically: complete or not at all); default: stdout.",
)
def render(
    dataset_config: str, limit: int | None, out: str | None, strict: bool, **kw: Any
) -> None:
    """Render every test row; write one JSON object per line.

    Each line is {"index", "prompt" (str, or message list with --api or --request-messages)
    or "prompts" (label -> prompt, ppl mode), "ice_indices", "sha256"}; sha256 is over the
    UTF-8 prompt, or over json.dumps(messages, ensure_ascii=False) for message lists.

    \b
    AISBench multimodal (MMPromptTemplate) rows: "prompt" as above (with --api, the message
    prompt is the list of content parts).
    AISBench multi-turn (MultiTurnPromptTemplate) and OpenCompass ChatInferencer rows:
      {"index", "infer_mode", "prompts": [request 0 input, request 1 input, ...],
       "ice_indices", "sha256": [one per request, as above]}
    one model input per request the inferencer sends for the row (--infer-mode).
    """
    with _Progress() as progress:
        job = _prepare(dataset_config, progress=progress, **kw)
        result = _render(job, progress, limit=limit, strict=strict)
        _write_records(result, out, progress)
    _notes_after(job, result)
    if not result.prompts:
        _note(
            f"note: {job.dataset}: no test rows to render (none in --data, or none left after "
            "test_range or --limit)"
        )
    if out not in (None, "-"):
        _note(f"wrote {len(result.prompts):,} prompts ({result.mode}) to {out}")


@cli.command()
@_data_options
@click.option(
    "-n",
    "n",
    type=click.IntRange(min=0),
    default=3,
    show_default=True,
    help="How many rows to show.",
)
def show(dataset_config: str, n: int, strict: bool, **kw: Any) -> None:
    """Print the first N rendered prompts for a person.

    The in-context examples are framed by marker lines, roles of message lists are tagged
    ([HUMAN] ...), trailing whitespace is shown (· space, → tab, ⏎ final newline) and
    ⟨generate⟩ marks where the model starts generating. Colour only on a terminal.
    """
    _show(_prepare(dataset_config, **kw), n=n, strict=strict)


_DEMO_RUNS: tuple[tuple[str, str | None, bool, int, str, str | None], ...] = (
    (
        "mmlu_demo_gen.py",
        "chatml_model.py",
        False,
        2,
        "2-shot MMLU-style dialogue through a ChatML model (gen)",
        None,
    ),
    (
        "mmlu_demo_gen.py",
        "api_model.py",
        True,
        1,
        "the same through an API model (message lists)",
        None,
    ),
    (
        "mmlu_demo_gen.py",
        None,
        False,
        1,
        "the same through a chat-template model (tokenizer_config.json, rendered in Rust)",
        "chat_tokenizer_config.json",
    ),
    (
        "mmlu_demo_ppl.py",
        "chatml_model.py",
        False,
        1,
        "perplexity prompts, one per option",
        None,
    ),
)


@cli.command()
def demo() -> None:
    """Render the built-in demo (promptweave/demo): an MMLU-style dataset through a ChatML
    model, an API model and perplexity prompts."""
    with resources.as_file(resources.files("promptweave") / "demo") as directory:
        summary: list[str] = []
        for dataset_file, model_file, api, n, title, chat in _DEMO_RUNS:
            job = _prepare(
                str(directory / dataset_file),
                data=str(directory / "test.jsonl"),
                train=str(directory / "train.jsonl"),
                dataset=None,
                model=str(directory / model_file) if model_file else None,
                meta_template=None,
                api=api,
                flavor=None,
                mode=None,
                tokenizer=None,
                chat_template=str(directory / chat) if chat else None,
            )
            job.model = model_file or f"chat template {chat}"
            model_file = model_file or chat or ""
            _show(job, n=n, strict=True, title=f"{title}: {dataset_file} + {model_file}")
            start = time.perf_counter()
            result = _render(job, None, limit=None, strict=True)
            ms = (time.perf_counter() - start) * 1000
            prompts = len(result.prompts) * (len(result.labels) if result.labels else 1)
            summary.append(
                f"  {dataset_file} + {model_file}: {len(result.prompts)} rows -> {prompts} "
                f"prompts in {ms:.1f} ms ({result.rust_rows} rows by the Rust job)"
            )
        click.echo(_s("summary", "header"))
        for line in summary:
            click.echo(line)
        click.echo(
            "\nRender them yourself (the prompts to standard output, or a file with --out):\n"
            f"  cd {directory}\n"
            "  promptweave render mmlu_demo_gen.py --data test.jsonl --train train.jsonl "
            "--model chatml_model.py"
        )


def _warning_note(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """Python warnings (the library's, e.g. an unused train split) as the CLI's own notes."""
    _note(f"warning: {message}")


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``promptweave`` script and of ``python -m promptweave``."""
    color = False if os.environ.get("NO_COLOR") else None
    warnings.showwarning = _warning_note
    cli.main(args=list(argv) if argv is not None else None, color=color)
