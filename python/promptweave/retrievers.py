"""Dataset rows and in-context-example retrievers (spec 04 §1-4).

Mirrors ``opencompass.openicl.icl_retriever`` (OpenCompass 0.5.4) and, through the subclasses in
:mod:`promptweave.aisbench`, ``ais_bench.benchmark.openicl.icl_retriever`` (AISBench 3.1):

* :class:`Dataset` -- the ``train``/``test`` rows (plain ``list[dict]``, columns in order) plus
  the reader's ``input_columns``/``output_column``; it stands in for a reference ``BaseDataset``.
* the retrievers choose in-context-example (ICE) indices into ``train`` for every ``test`` row
  (:meth:`~BaseRetriever.retrieve`), render them (:meth:`~BaseRetriever.generate_ice`) and
  assemble the prompt of a test row (:meth:`~BaseRetriever.generate_prompt_for_generate_task`,
  :meth:`~BaseRetriever.generate_label_prompt`), with the reference's template-combination
  rules and quirks (the eos token appended even without ICE, separators dropped for dialogue
  ICE, set-ordered labels, ...).

``RandomRetriever`` reproduces numpy's legacy global RNG (``np.random.seed`` then
``np.random.choice(n, k, replace=False)`` per test row) with a pure-Python MT19937, so numpy is
not required; when numpy is installed, large draws use a private ``numpy.random.RandomState``
(same algorithm, same indices). numpy's global RNG is never touched -- unlike the references,
which leave it seeded (OpenCompass) or re-seed it from OS entropy (AISBench).

Model-based retrievers (BM25, TopK, VoteK, DPP, MDL) need their models; compute their index
lists elsewhere and use :class:`IndexListRetriever`.

Errors are :mod:`promptweave.errors` families that also derive from the builtin the reference
raises (``AssertionError``, ``NotImplementedError``, ``ValueError``, ...); in the AISBench
flavour they carry the reference's error code (``[ICLR-PARAM-004]`` ...).
"""

from __future__ import annotations

import builtins
import importlib
import operator
import random
import re
import secrets
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from promptweave._flavor import AISBENCH, OPENCOMPASS
from promptweave.errors import (
    PromptRenderError,
    PromptTypeError,
    RetrieverError,
    SameSplitWarning,
    TemplateError,
    add_note,
    make_error,
)
from promptweave.prompt import PromptList
from promptweave.prompt_template import PromptTemplate

__all__ = [
    "NUMPY_DRAWS_THRESHOLD",
    "BaseRetriever",
    "Dataset",
    "FixKRetriever",
    "IndexListRetriever",
    "RandomRetriever",
    "SlidingWindowRetriever",
    "ZeroRetriever",
    "partial_indices",
    "prepare_loaded",
    "prepared_test_size",
    "random_indices",
]

#: ``RandomRetriever`` draws (train size x test rows) above which numpy, when installed, is used.
NUMPY_DRAWS_THRESHOLD = 200_000

Row = dict[Any, Any]


def _code(flavor: str, code: str) -> str | None:
    return code if flavor == AISBENCH else None


# ================================================================================ dataset rows


def _pandas_rows(df: Any) -> list[Row]:
    """A DataFrame's rows as ``datasets.Dataset.from_pandas`` gives them to the reference:
    through pyarrow, so a missing value (NaN, ``pd.NA``, the ``nan`` of pandas' string dtype)
    is ``None``, not the string ``'nan'``."""
    try:
        pa: Any = importlib.import_module("pyarrow")
    except ImportError:
        pa = None
    if pa is not None:
        try:
            return list(pa.Table.from_pandas(df, preserve_index=False).to_pylist())
        except (pa.ArrowException, TypeError, ValueError):
            pass  # columns pyarrow cannot type: the values as pandas holds them

    def missing(v: Any) -> bool:
        na = type(v).__name__ in ("NAType", "NaTType")
        return v is None or na or (isinstance(v, float) and v != v)

    return [{k: None if missing(v) else v for k, v in r.items()} for r in df.to_dict("records")]


def _rows_of(data: Any, split: str) -> list[Row]:
    """Rows (plain dicts, columns in order) of a list of dicts, a dict of columns, a pandas
    DataFrame, a pyarrow Table, a HuggingFace ``datasets.Dataset`` or any iterable of dicts.
    A list of plain dicts is used as it is (not copied)."""
    if type(data) is list and set(map(type, data)) <= {dict}:
        return data
    if isinstance(data, Mapping):
        return _rows_of_columns(data, split)
    records: Any
    if hasattr(data, "to_pylist"):  # pyarrow Table / RecordBatch
        records = data.to_pylist()
    elif hasattr(data, "to_list") and hasattr(data, "column_names"):  # datasets.Dataset
        records = data.to_list()
    elif hasattr(data, "to_dict") and hasattr(data, "columns"):  # pandas DataFrame
        records = _pandas_rows(data)
    elif hasattr(data, "to_dicts"):  # polars DataFrame
        records = data.to_dicts()
    else:
        records = data
    if isinstance(records, (str, bytes)) or not isinstance(records, Iterable):
        raise make_error(
            PromptTypeError,
            f"{split} rows must be a list of dicts, a dict of columns or a table, "
            f"got {type(data).__name__}",
            compat=TypeError,
            path=split,
        )
    rows: list[Row] = []
    for i, row in enumerate(records):
        if not isinstance(row, Mapping):
            raise make_error(
                PromptTypeError,
                f"{split} row {i} must be a dict, got {type(row).__name__}",
                compat=TypeError,
                path=f"{split}[{i}]",
            )
        rows.append(dict(row))
    return rows


def _rows_of_columns(columns: Mapping[Any, Any], split: str) -> list[Row]:
    lengths = set()
    values: dict[Any, list[Any]] = {}
    for name, column in columns.items():
        if isinstance(column, (str, bytes, Mapping)) or not hasattr(column, "__len__"):
            raise make_error(
                PromptTypeError,
                f"{split} column {name!r} must be a list of values, got {type(column).__name__}",
                compat=TypeError,
                path=f"{split}[{name!r}]",
            )
        values[name] = list(column)
        lengths.add(len(values[name]))
    if len(lengths) > 1:
        sizes = {name: len(col) for name, col in values.items()}
        raise make_error(
            RetrieverError, f"{split} columns have different lengths: {sizes}", path=split
        )
    n = lengths.pop() if lengths else 0
    return [{name: col[i] for name, col in values.items()} for i in range(n)]


# A split's range as a slice expression: ``'[0:64]'``, ``'[:100]'``, ``'[100:200:2]'`` (spaces
# allowed, as Python allows them in ``index_list[0 : 64]``).
_RANGE_SLICE = re.compile(r"\s*\[\s*([+-]?\d+)?\s*:\s*([+-]?\d+)?\s*(?::\s*([+-]?\d+)?\s*)?\]\s*\Z")


def partial_indices(
    total: int, size: Any, split: str = "test", flavor: str = OPENCOMPASS
) -> list[int]:
    """The rows of a split of ``total`` rows that the reference ``DatasetReader`` keeps for the
    reader config's ``{split}_range`` ``size`` (``load_partial_dataset``), in their order:

    * ``None``: every row;
    * an int or float: every row when ``size >= total`` or ``size <= 0``; else ``size`` rows
      (a float in (0, 1) is a fraction: ``int(size * total)`` rows) drawn by shuffling the
      row numbers with ``random.Random(size)`` and taking the first ``size`` of them -- the
      same rows in the same (shuffled) order;
    * a str: ``index_list{size}`` with ``index_list`` the row numbers, as the reference
      evaluates it: a slice such as ``'[0:64]'`` or ``'[:100]'`` is taken without evaluating
      anything; another expression (``'[:2]+[4]'``) is evaluated (it is part of the config,
      which is code too), and must give row numbers as ``Dataset.select`` takes them. Where
      that fails, OpenCompass raises (the same builtin family here, a
      :class:`~promptweave.errors.RetrieverError`), and AISBench warns and keeps every row.

    Raises a ``TypeError`` (:class:`~promptweave.errors.PromptTypeError`) for another type or
    a float that is not a fraction (the reference fails slicing with it).
    """
    name = f"reader_cfg {split}_range"
    index_list = list(range(total))
    if size is None:
        return index_list
    if isinstance(size, (int, float)):
        if size >= total or size <= 0:
            return index_list
        if 0 < size < 1:
            size = int(size * total)
        if isinstance(size, float):
            raise make_error(
                PromptTypeError,
                f"{name}={size!r}: a float range must be a fraction in (0, 1) "
                "(the reference cannot slice with it)",
                compat=TypeError,
            )
        random.Random(size).shuffle(index_list)
        return index_list[:size]
    if isinstance(size, str):
        m = _RANGE_SLICE.match(size)
        if m is not None:
            start, stop, step = (None if g is None else int(g) for g in m.groups())
            if step != 0:
                return index_list[start:stop:step]
        try:
            return _evaluated_range(size, index_list)
        except Exception as exc:
            if flavor == AISBENCH:  # its reader catches everything and keeps the whole split
                warnings.warn(
                    f"Cannot parse size string: {size}, use entire dataset instead "
                    f"({name}: {type(exc).__name__}: {exc})",
                    UserWarning,
                    stacklevel=2,
                )
                return index_list
            raise make_error(
                RetrieverError,
                f"{name}={size!r}: the reference evaluates index_list{size}, which fails: "
                f"{type(exc).__name__}: {exc}",
                compat=type(exc),
            ) from exc
    expected = "['NoneType', 'int', 'float', 'str']"
    raise make_error(
        PromptTypeError,
        f"{name}: expected an object in {expected} type, got {type(size).__name__}: {size!r}",
        compat=TypeError,
        code=_code(flavor, "UTILS-TYPE-001"),
    )


def _evaluated_range(size: str, index_list: list[int]) -> list[int]:
    """``dataset.select(eval(f'index_list{size}'))``'s row numbers: the expression evaluated
    with ``index_list`` (and the builtins) in scope, then checked as ``Dataset.select`` checks
    its indices (an iterable of ints within the split)."""
    picked = eval("index_list" + size, {"__builtins__": builtins}, {"index_list": index_list})
    total = len(index_list)
    if total == 0:
        return []  # (select on a dataset without rows checks nothing)
    out: list[int] = []
    for item in picked:  # (not iterable: TypeError, as select raises)
        if isinstance(item, float):
            raise IndexError("only integers are valid indices")
        i = operator.index(item)  # TypeError for a str, a list, ...
        if i < 0:
            raise OverflowError("can't convert negative value to unsigned int")
        if i >= total:
            raise IndexError(f"Index {i} out of range for dataset of size {total}.")
        out.append(i)
    return out


def _keep(
    rows: list[Row], size: Any, split: str, flavor: str
) -> tuple[list[Row], list[int] | None]:
    """The rows of ``split`` that its range ``size`` keeps, and their positions (``None``,
    and the rows as they are, without a range)."""
    if size is None:
        return rows, None
    kept = partial_indices(len(rows), size, split, flavor)
    return [rows[i] for i in kept], kept


def prepare_loaded(
    test: Sequence[Row],
    train: Sequence[Row] | None = None,
    *,
    abbr: str = "dataset",
    n: int = 1,
    train_range: Any = None,
    test_range: Any = None,
    flavor: str = OPENCOMPASS,
    train_split: str = "train",
    test_split: str = "test",
) -> tuple[list[Row], list[Row], list[int]]:
    """The rows the reference's templates see, from the rows a dataset's ``load()`` returned:
    ``test`` and ``train`` (``train=None``: one split, a ``Dataset``, serving as both).

    What the framework's ``BaseDataset`` and ``DatasetReader`` do to them, in its order (spec 04
    §1):

    * OpenCompass: a ``subdivision`` column (``abbr``; for two splits ``f'{abbr}_{split}'``, the
      split's name in the loaded data: the reader config's ``train_split``/``test_split``) and
      an ``idx`` column (the row's position in its split) are added, each split is repeated
      ``n`` times whole (``a, b, a, b``), then each split keeps the rows of its range
      (:func:`partial_indices`);
    * AISBench: each split keeps the rows of its range first, then gets ``subdivision``
      (``f'{abbr}_{split}'``) and ``idx`` (the position in the kept rows), then each row is
      repeated ``n`` times in place (``a, a, b, b``).

    Both: the reader replaces its ``'train'`` split by the kept train rows before it reads the
    test split, so a ``test_split`` named ``'train'`` takes the test rows from those (the rows
    of ``train_split``, after ``train_range``), not from ``test``.

    Returns ``(test rows, train rows, test positions)``: the positions are those of the test
    rows in ``test`` (in ``train`` when the test rows come from there). Rows are new dicts (a
    column already named ``subdivision`` or ``idx`` is overwritten in its place, as
    ``datasets.Dataset.map`` does); a repeated row is the same dict object each time.
    """
    if isinstance(n, bool) or not isinstance(n, int):
        raise make_error(
            PromptTypeError,
            f"n (the dataset's repetition count) must be an int, got {type(n).__name__}: {n!r}",
            compat=TypeError,
        )
    if n < 1:
        raise make_error(
            RetrieverError, f"n (the dataset's repetition count) must be >= 1, got {n}"
        )
    if train is not None and train_split == test_split:
        # the loaded data has one split of that name: the reader takes both from it
        warnings.warn(
            f"the reader config takes the in-context examples from the test rows' own split "
            f"(train_split and test_split are both {test_split!r}), as the reference's "
            f"DatasetReader does: the {len(train)} train rows given are not used",
            SameSplitWarning,
            stacklevel=3,
        )
        train = test
    single = train is None
    train_rows = list(test if train is None else train)
    test_rows = list(test)

    loaded_names = {"train": train_split, "test": test_split}

    def columns(rows: Sequence[Row], split: str) -> list[Row]:
        if flavor == OPENCOMPASS:
            name = abbr if single else f"{abbr}_{loaded_names[split]}"
        else:
            name = f"{abbr}_{split}"
        return [{**row, "subdivision": name, "idx": i} for i, row in enumerate(rows)]

    # The reader replaces its 'train' split by the kept train rows before it reads the test
    # split: a test split named 'train' is read from those (spec 04 §1).
    aliased = test_split == "train"
    if flavor == OPENCOMPASS:
        test_positions = list(range(len(test_rows))) * n
        train_positions = test_positions if single else list(range(len(train_rows))) * n
        test_rows = columns(test_rows, "test")
        train_rows = test_rows if single else columns(train_rows, "train")
        test_rows, train_rows = test_rows * n, train_rows * n
        train_rows, train_kept = _keep(train_rows, train_range, "train", flavor)
        if aliased:
            test_rows = train_rows
            test_positions = _select(train_positions, train_kept)
        test_rows, kept = _keep(test_rows, test_range, "test", flavor)
        return test_rows, train_rows, _select(test_positions, kept)
    train_positions = list(range(len(train_rows)))
    train_rows, train_kept = _keep(train_rows, train_range, "train", flavor)
    test_positions = list(range(len(test_rows)))
    if aliased:
        test_rows, test_positions = train_rows, _select(train_positions, train_kept)
    test_rows, kept = _keep(test_rows, test_range, "test", flavor)
    positions = _select(test_positions, kept)
    test_rows, train_rows = columns(test_rows, "test"), columns(train_rows, "train")
    return (
        [row for row in test_rows for _ in range(n)],
        [row for row in train_rows for _ in range(n)],
        [p for p in positions for _ in range(n)],
    )


def _select(positions: list[int], kept: list[int] | None) -> list[int]:
    return positions if kept is None else [positions[i] for i in kept]


def prepared_test_size(
    total: int,
    *,
    n: int = 1,
    test_range: Any = None,
    flavor: str = OPENCOMPASS,
    test_split: str = "test",
    train_total: int | None = None,
    train_range: Any = None,
) -> int:
    """How many test rows :func:`prepare_loaded` gives for ``total`` loaded test rows
    (``train_total``: the loaded train rows, ``None`` for one split)."""
    if test_split == "train":  # read from the kept train rows
        total = total if train_total is None else train_total
        if flavor == OPENCOMPASS:
            total = len(partial_indices(total * n, train_range, "train", flavor))
            return len(partial_indices(total, test_range, "test", flavor))
        total = len(partial_indices(total, train_range, "train", flavor))
        return len(partial_indices(total, test_range, "test", flavor)) * n
    if flavor == OPENCOMPASS:
        return len(partial_indices(total * n, test_range, "test", flavor))
    return len(partial_indices(total, test_range, "test", flavor)) * n


class Dataset:
    """The rows a retriever works on: ``test`` rows to build prompts for and ``train`` rows to
    draw in-context examples from (it stands in for the reference ``BaseDataset``/``reader``).

    Args:
        test: the test rows -- a list of dicts, a dict of column lists, a pandas DataFrame, a
            pyarrow Table, a HuggingFace ``datasets.Dataset`` or any iterable of dicts.
        train: the train rows (same forms); defaults to the test rows, as the reference's
            ``DatasetReader`` does for a single ``Dataset``.
        input_columns: the input columns (a str is split on whitespace); defaults to every
            column of the first row except ``output_column``.
        output_column: the answer column (a falsy value becomes ``None``, as in the reference).
        flavor: ``'opencompass'`` or ``'aisbench'`` (error codes of the argument checks);
            defaults to the class's (``promptweave.aisbench.Dataset``: ``'aisbench'``).
        train_range, test_range: the reader config's ranges: only these rows of each split are
            kept, in this order, as the reference ``DatasetReader`` keeps them (see
            :func:`partial_indices`); without ``train``, both come from the whole ``test``.
            ``test_indices`` gives the kept test rows' positions in ``test``.

    Rows are kept as given (copied into plain dicts): templates see every column, in order
    (spec 04 §1). To match the reference byte for byte feed the HuggingFace-typed rows (Arrow
    typing turns ``1`` into ``1.0`` in a float column, fills struct keys with ``None``, ...),
    including the ``subdivision``/``idx`` columns a ``BaseDataset`` appends.
    """

    _flavor: ClassVar[str] = OPENCOMPASS
    #: the test rows' positions in the test split given (they differ under a ``test_range``)
    test_indices: Sequence[int]

    def __init__(
        self,
        test: Any,
        train: Any = None,
        input_columns: Sequence[str] | str | None = None,
        output_column: str | None = None,
        flavor: str | None = None,
        *,
        train_range: Any = None,
        test_range: Any = None,
    ) -> None:
        flavor = self._flavor_of(flavor)
        test_rows = _rows_of(test, "test")
        train_rows = list(test_rows) if train is None else _rows_of(train, "train")
        # the train split first, as the reference reader takes them
        train_rows, _ = _keep(train_rows, train_range, "train", flavor)
        test_rows, kept = _keep(test_rows, test_range, "test", flavor)
        self._set(flavor, test_rows, train_rows, input_columns, output_column)
        if kept is not None:
            self.test_indices = kept

    @classmethod
    def _flavor_of(cls, flavor: str | None) -> str:
        """``flavor``, checked (``None``: the class's)."""
        flavor = cls._flavor if flavor is None else flavor
        if flavor not in (OPENCOMPASS, AISBENCH):
            raise make_error(
                RetrieverError, f"flavor must be {OPENCOMPASS!r} or {AISBENCH!r}, got {flavor!r}"
            )
        return flavor

    def _set(
        self,
        flavor: str,
        test: list[Row],
        train: list[Row],
        input_columns: Sequence[str] | str | None,
        output_column: str | None,
    ) -> None:
        self.flavor = flavor
        self.test: list[Row] = test
        self.train: list[Row] = train
        # a list, not a range: with this allocation at the start of every render the W4
        # benchmark's rounds measured out of glibc's trim-and-fault regime (3 of 3 runs:
        # 264-299x), without it in it (2 of 2: 117-123x); the heap-layout effect is not
        # understood, see benches/README
        self.test_indices = list(range(len(test)))
        self.output_column: str | None = self._check_output_column(output_column)
        self.input_columns: list[str] = self._check_input_columns(input_columns)

    @classmethod
    def _of_rows(
        cls,
        test: list[Row],
        train: list[Row],
        input_columns: Sequence[str] | str | None = None,
        output_column: str | None = None,
        flavor: str | None = None,
    ) -> Dataset:
        """Over rows ``_rows_of`` already gave (plain dicts, kept as they are: not checked a
        second time, which costs a pass over every row)."""
        self = cls.__new__(cls)
        self._set(
            cls._flavor if flavor is None else flavor, test, train, input_columns, output_column
        )
        return self

    @classmethod
    def from_rows(
        cls,
        rows: Any,
        input_columns: Sequence[str] | str | None = None,
        output_column: str | None = None,
        flavor: str | None = None,
    ) -> Dataset:
        """One split used as both train and test (a reference ``Dataset`` given to a reader)."""
        return cls(rows, None, input_columns, output_column, flavor)

    @classmethod
    def from_splits(
        cls,
        splits: Mapping[str, Any],
        input_columns: Sequence[str] | str | None = None,
        output_column: str | None = None,
        flavor: str | None = None,
        train_split: str = "train",
        test_split: str = "test",
    ) -> Dataset:
        """From a mapping of split name to rows (e.g. a ``datasets.DatasetDict``)."""
        for name in (train_split, test_split):
            if name not in splits:
                raise make_error(
                    RetrieverError,
                    f"split {name!r} not found; the splits are {list(splits)}",
                    compat=KeyError,
                )
        return cls(splits[test_split], splits[train_split], input_columns, output_column, flavor)

    @classmethod
    def from_loaded(
        cls,
        test: Any,
        train: Any = None,
        input_columns: Sequence[str] | str | None = None,
        output_column: str | None = None,
        flavor: str | None = None,
        *,
        abbr: str = "dataset",
        n: int = 1,
        train_range: Any = None,
        test_range: Any = None,
        train_split: str = "train",
        test_split: str = "test",
    ) -> Dataset:
        """From the rows a dataset's ``load()`` returned (``train=None``: one split for both),
        prepared as the framework's ``BaseDataset`` and ``DatasetReader`` prepare them:
        ``subdivision``/``idx`` columns, ``n``-fold repetition and the ranges
        (:func:`prepare_loaded`)."""
        flavor = cls._flavor_of(flavor)
        test_rows = _rows_of(test, "test")
        train_rows = None if train is None else _rows_of(train, "train")
        test_rows, train_rows, positions = prepare_loaded(
            test_rows,
            train_rows,
            abbr=abbr,
            n=n,
            train_range=train_range,
            test_range=test_range,
            flavor=flavor,
            train_split=train_split,
            test_split=test_split,
        )
        # the prepared rows are new dicts already: not copied again
        self = cls._of_rows(test_rows, train_rows, input_columns, output_column, flavor)
        self.test_indices = positions
        return self

    @classmethod
    def coerce(cls, dataset: Any, flavor: str | None = None) -> Dataset:
        """``dataset`` itself, or a :class:`Dataset` over a reference-like dataset object (one
        with ``train``, ``test`` and a ``reader`` holding ``input_columns``/``output_column``)."""
        if isinstance(dataset, Dataset):
            return dataset
        reader = getattr(dataset, "reader", None)
        if reader is not None and hasattr(dataset, "train") and hasattr(dataset, "test"):
            return cls(
                dataset.test,
                dataset.train,
                getattr(reader, "input_columns", None),
                getattr(reader, "output_column", None),
                flavor,
            )
        raise make_error(
            PromptTypeError,
            "a retriever needs a promptweave.retrievers.Dataset (or an object with train, test "
            f"and reader attributes), got {type(dataset).__name__}",
            compat=TypeError,
        )

    # ------------------------------------------------------------------ checks
    def _type_error(self, message: str, code: str) -> PromptRenderError:
        return make_error(PromptTypeError, message, compat=TypeError, code=_code(self.flavor, code))

    def _check_output_column(self, output_column: Any) -> str | None:
        if not output_column:
            return None
        if not isinstance(output_column, str):
            raise self._type_error(
                f"output_column: expected a str, got {type(output_column).__name__}: "
                f"{output_column!r}",
                "UTILS-TYPE-004",
            )
        return output_column

    def _check_input_columns(self, input_columns: Any) -> list[str]:
        if input_columns is None:
            first = self.test[0] if self.test else self.train[0] if self.train else {}
            return [c for c in first if c != self.output_column]
        if isinstance(input_columns, str):
            return input_columns.split()
        if isinstance(input_columns, (list, tuple)) and all(
            isinstance(c, str) for c in input_columns
        ):
            return list(input_columns)
        raise self._type_error(
            f"input_columns: expected a list of str or a str, got {type(input_columns).__name__}: "
            f"{input_columns!r}",
            "UTILS-TYPE-001",
        )

    # ------------------------------------------------------------------ reader API
    @property
    def reader(self) -> Dataset:
        """The dataset itself: ``dataset.reader.output_column`` works as with a ``BaseDataset``."""
        return self

    def generate_input_field_prompt(self, entry: Mapping[Any, Any]) -> str:
        """The input-column text of ``entry`` (the BM25/TopK corpus text, spec 04 §1)."""
        return " ".join(str(entry[c]) for c in self.input_columns)

    def generate_output_field_prompt(self, entry: Mapping[Any, Any]) -> str:
        """``str(entry[output_column])``."""
        return str(entry[self.output_column])

    def generate_input_field_corpus(self, split: str = "train") -> list[str]:
        """:meth:`generate_input_field_prompt` of every row of ``split`` (train or test)."""
        return [self.generate_input_field_prompt(row) for row in self._split(split)]

    def generate_output_field_corpus(self, split: str = "train") -> list[str]:
        """:meth:`generate_output_field_prompt` of every row of ``split``."""
        return [self.generate_output_field_prompt(row) for row in self._split(split)]

    def _split(self, split: str) -> list[Row]:
        if split == "train":
            return self.train
        if split == "test":
            return self.test
        raise make_error(RetrieverError, f"split must be 'train' or 'test', got {split!r}")

    def __repr__(self) -> str:
        return (
            f"Dataset(test={len(self.test)} rows, train={len(self.train)} rows, "
            f"input_columns={self.input_columns!r}, output_column={self.output_column!r})"
        )


# ============================================================ numpy-compatible random indices


_N, _M = 624, 397
_MASK32 = 0xFFFFFFFF
_UPPER, _LOWER, _MATRIX_A = 0x80000000, 0x7FFFFFFF, 0x9908B0DF


class _MT19937:
    """MT19937 seeded like numpy's legacy ``RandomState.seed`` (32-bit outputs only)."""

    def __init__(self, key: list[int]) -> None:
        self._key = key
        self._buf: list[int] = []
        self._pos = 0

    @classmethod
    def from_int(cls, seed: int) -> _MT19937:
        """``init_genrand(seed)``."""
        key = [0] * _N
        key[0] = seed & _MASK32
        for i in range(1, _N):
            prev = key[i - 1]
            key[i] = (1812433253 * (prev ^ (prev >> 30)) + i) & _MASK32
        return cls(key)

    @classmethod
    def from_array(cls, init_key: list[int]) -> _MT19937:
        """``init_by_array(init_key)``."""
        mt = cls.from_int(19650218)._key
        i, j = 1, 0
        for _ in range(max(_N, len(init_key))):
            prev = mt[i - 1]
            mt[i] = ((mt[i] ^ ((prev ^ (prev >> 30)) * 1664525)) + init_key[j] + j) & _MASK32
            i += 1
            j += 1
            if i >= _N:
                mt[0] = mt[_N - 1]
                i = 1
            if j >= len(init_key):
                j = 0
        for _ in range(_N - 1):
            prev = mt[i - 1]
            mt[i] = ((mt[i] ^ ((prev ^ (prev >> 30)) * 1566083941)) - i) & _MASK32
            i += 1
            if i >= _N:
                mt[0] = mt[_N - 1]
                i = 1
        mt[0] = 0x80000000
        return cls(mt)

    @classmethod
    def from_entropy(cls) -> _MT19937:
        """numpy's ``seed(None)`` layout (non-reproducible)."""
        return cls([0x80000000] + [secrets.randbits(32) for _ in range(_N - 1)])

    def _refill(self) -> None:
        """Twist the state and temper the next 624 outputs."""
        old = self._key
        new = [0] * _N
        for kk in range(_N - 1):
            y = (old[kk] & _UPPER) | (old[kk + 1] & _LOWER)
            src = old[kk + _M] if kk + _M < _N else new[kk + _M - _N]
            new[kk] = src ^ (y >> 1) ^ (_MATRIX_A if y & 1 else 0)
        y = (old[_N - 1] & _UPPER) | (new[0] & _LOWER)
        new[_N - 1] = new[_M - 1] ^ (y >> 1) ^ (_MATRIX_A if y & 1 else 0)
        self._key = new
        out = []
        for y in new:
            y ^= y >> 11
            y ^= (y << 7) & 0x9D2C5680
            y ^= (y << 15) & 0xEFC60000
            out.append(y ^ (y >> 18))
        self._buf = out
        self._pos = 0

    def permutation_prefix(self, n: int, k: int) -> list[int]:
        """``RandomState.permutation(n)[:k]``: Fisher-Yates from the end, each ``j`` in
        ``[0, i]`` drawn by masking 32-bit outputs with the smallest all-ones mask ``>= i`` and
        rejecting values ``> i``."""
        a = list(range(n))
        buf, pos, size = self._buf, self._pos, len(self._buf)
        i = n - 1
        while i > 0:
            mask = (1 << i.bit_length()) - 1
            band_floor = mask >> 1
            while i > band_floor:  # every i of this bit length shares the mask
                while True:
                    if pos == size:
                        self._refill()
                        buf, pos, size = self._buf, 0, len(self._buf)
                    j = buf[pos] & mask
                    pos += 1
                    if j <= i:
                        break
                a[i], a[j] = a[j], a[i]
                i -= 1
        self._pos = pos
        return a[:k]


def _legacy_seed(seed: Any) -> int | list[int] | None:
    """Validate a seed like numpy's legacy seeding: an int in ``[0, 2**32)``, a non-empty 1-d
    sequence of such ints, or ``None`` (OS entropy)."""
    if seed is None:
        return None
    if hasattr(seed, "tolist") and not isinstance(seed, (int, list)):  # numpy scalars / arrays
        seed = seed.tolist()
    range_error = make_error(
        RetrieverError, f"seed must be between 0 and 2**32 - 1, got {seed!r}", compat=ValueError
    )
    if not isinstance(seed, (list, tuple, str, bytes, float)):
        try:
            value = operator.index(seed)
        except TypeError:
            pass
        else:
            if not 0 <= value <= _MASK32:
                raise range_error
            return value
    if isinstance(seed, (list, tuple)):
        if not seed:
            raise make_error(RetrieverError, "seed must be non-empty", compat=ValueError)
        if any(isinstance(v, (list, tuple)) for v in seed):
            raise make_error(RetrieverError, "seed array must be 1-d", compat=ValueError)
        try:
            values = [operator.index(v) for v in seed]
        except TypeError:
            pass
        else:
            if any(not 0 <= v <= _MASK32 for v in values):
                raise range_error
            return values
    raise make_error(
        PromptTypeError,
        f"seed must be an int in [0, 2**32 - 1], a sequence of them or None, "
        f"got {type(seed).__name__}: {seed!r}",
        compat=TypeError,
    )


def _check_sample_size(n: int, k: Any) -> int:
    """``np.random.choice(n, k, replace=False)``'s argument checks, in numpy's order."""
    if isinstance(k, bool) or not hasattr(k, "__index__"):
        raise make_error(
            PromptTypeError,
            f"ice_num must be an int, got {type(k).__name__}: {k!r}",
            compat=TypeError,
        )
    size = operator.index(k)
    if not -(2**63) <= size < 2**64:
        # numpy cannot take it as a C integer
        raise make_error(
            RetrieverError,
            f"ice_num={size} does not fit a 64-bit integer (numpy: Python int too large to "
            "convert to C long)",
            compat=OverflowError,
        )
    if n <= 0 and size != 0:
        raise make_error(
            RetrieverError,
            f"cannot sample {size} in-context examples from an empty train set "
            "(numpy: a must be greater than 0 unless no samples are taken)",
            compat=ValueError,
        )
    if size > n:
        raise make_error(
            RetrieverError,
            f"ice_num={size} is larger than the {n} train rows: cannot take a larger sample than "
            "population when 'replace=False'",
            compat=ValueError,
        )
    if size < 0:
        raise make_error(
            RetrieverError, f"ice_num must not be negative, got {size}", compat=ValueError
        )
    return size


def random_indices(
    seed: Any, n_train: int, ice_num: Any, n_test: int, *, backend: str = "auto"
) -> list[list[int]]:
    """The indices of the reference ``RandomRetriever.retrieve()``: ``np.random.seed(seed)``,
    then ``np.random.choice(n_train, ice_num, replace=False).tolist()`` for each of the
    ``n_test`` rows, in order -- without touching numpy's global RNG.

    ``backend``: ``'python'`` (pure-Python MT19937), ``'numpy'`` (a private
    ``numpy.random.RandomState``) or ``'auto'`` (numpy, when installed, for more than
    :data:`NUMPY_DRAWS_THRESHOLD` draws).
    """
    if backend not in ("auto", "python", "numpy"):
        raise make_error(
            RetrieverError, f"backend must be 'auto', 'python' or 'numpy', got {backend!r}"
        )
    key = _legacy_seed(seed)
    if n_test <= 0:
        return []
    k = _check_sample_size(n_train, ice_num)
    use_numpy = backend == "numpy" or (
        backend == "auto" and n_train * n_test > NUMPY_DRAWS_THRESHOLD and _numpy_available()
    )
    if use_numpy:
        import numpy  # optional accelerator, same algorithm

        state = numpy.random.RandomState(key)
        return [state.choice(n_train, k, replace=False).tolist() for _ in range(n_test)]
    if key is None:
        rng = _MT19937.from_entropy()
    elif isinstance(key, int):
        rng = _MT19937.from_int(key)
    else:
        rng = _MT19937.from_array(key)
    return [rng.permutation_prefix(n_train, k) for _ in range(n_test)]


def _numpy_available() -> bool:
    try:
        importlib.import_module("numpy")
    except ImportError:
        return False
    return True


# =================================================================================== retrievers


def _index_error(split: str, idx: Any, size: int, exc: Exception) -> PromptRenderError:
    if isinstance(exc, IndexError):
        return make_error(
            RetrieverError,
            f"{split} index {idx!r} is out of range of the {size} {split} rows",
            compat=IndexError,
        )
    return make_error(
        PromptTypeError,
        f"{split} index must be an int, got {type(idx).__name__}: {idx!r}",
        compat=TypeError,
    )


def _row_at(rows: Sequence[Row], split: str, idx: Any) -> Row:
    """Row ``idx`` of the ``split`` rows, indexed as the reference's dataset indexes them."""
    try:
        if isinstance(idx, bool):  # a HuggingFace dataset refuses a bool index
            raise TypeError(idx)
        row: Row = rows[idx]
    except (IndexError, TypeError) as exc:
        raise _index_error(split, idx, len(rows), exc) from None
    return row


def _note_ice(exc: BaseException, idx: Any) -> None:
    """An exception raised rendering an example (the template's, or a value's own ``str()``)
    says which train row's in-context example it came from. (A try block, not a context
    manager: this is on the per-row path, and a ``try`` costs nothing until it raises.)"""
    add_note(exc, f"while rendering the in-context example of train row {idx!r}")


class _RetrieverCore:
    """What both flavours share: the dataset, the ICE separator/eos, and the reference's
    ``generate_ice`` / prompt-assembly / label algorithms with the templates as arguments."""

    _flavor: ClassVar[str] = OPENCOMPASS

    def __init__(
        self,
        dataset: Any,
        ice_separator: Any = "\n",
        ice_eos_token: Any = "\n",
        ice_num: Any = 1,
    ) -> None:
        self.dataset = Dataset.coerce(dataset, self._flavor)
        self.ice_separator = ice_separator
        self.ice_eos_token = ice_eos_token
        self.ice_num = ice_num
        self.is_main_process = True

    # ------------------------------------------------------------------ reference attributes
    @property
    def dataset_reader(self) -> Dataset:
        """The :class:`Dataset` (``input_columns``/``output_column``), as the reader."""
        return self.dataset

    @property
    def index_ds(self) -> list[Row]:
        """The train rows (the ICE pool)."""
        return self.dataset.train

    @property
    def test_ds(self) -> list[Row]:
        """The test rows."""
        return self.dataset.test

    def _code(self, code: str) -> str | None:
        return _code(self._flavor, code)

    # ------------------------------------------------------------------ rows
    def _train_row(self, idx: Any) -> Row:
        return _row_at(self.index_ds, "train", idx)

    def _test_row(self, idx: Any) -> Row:
        return _row_at(self.test_ds, "test", idx)

    def _answer(self, row: Row, idx: Any) -> Any:
        column = self.dataset.output_column
        try:
            return row[column]
        except KeyError:
            raise make_error(
                RetrieverError,
                f"train row {idx!r} has no output column {column!r}: an in-context example is "
                "rendered with its own answer",
                compat=KeyError,
            ) from None

    # ------------------------------------------------------------------ retrieval
    def retrieve(self) -> Any:
        """The ICE indices (into the train rows) for every test row."""
        raise make_error(
            RetrieverError,
            f"{type(self).__name__} does not implement retrieve()",
            compat=NotImplementedError,
            code=self._code("ICLR-UNK-001"),
        )

    # ------------------------------------------------------------------ ICE
    def _generate_ice(self, idx_list: Sequence[Any], ice_template: Any) -> Any:
        """Spec 04 §3."""
        if ice_template is None and len(idx_list) > 0:
            raise make_error(
                RetrieverError,
                "You have not specified ice_template while retrieving examples from train set! "
                "Please either specify ice_template or use `ZeroRetriever`.",
                compat=AssertionError,
                code=self._code("ICLR-PARAM-002"),
            )
        prompt_type = getattr(ice_template, "prompt_type", None)
        if self._flavor == OPENCOMPASS and prompt_type == "raw_messages":
            messages: list[Any] = []
            for idx in idx_list:
                row = self._train_row(idx)
                try:
                    messages.extend(ice_template.generate_ice_item(row, self._answer(row, idx)))
                except Exception as exc:
                    _note_ice(exc, idx)
                    raise
            return messages
        if prompt_type == "meta":  # dialogue ICE: separator and eos are dropped
            separator: Any = ""
            eos: Any = ""
        else:
            separator, eos = self.ice_separator, self.ice_eos_token
        items = []
        for idx in idx_list:
            row = self._train_row(idx)
            try:
                items.append(ice_template.generate_ice_item(row, self._answer(row, idx)))
            except Exception as exc:
                _note_ice(exc, idx)
                raise
        if items and isinstance(items[0], PromptList):
            # The reference's exact accumulation: `[] += PromptList` makes the accumulator a
            # PromptList (PromptList.__radd__), a falsy separator adds nothing, a non-empty one is
            # a string item, and the eos is appended as an item even when it is ''.
            acc: Any = []
            for ice in items:
                acc += ice + separator
            acc.append(eos)
            return acc
        try:
            return separator.join(items) + eos
        except (TypeError, AttributeError) as exc:  # non-str items / a None separator or eos
            kinds = sorted({type(x).__name__ for x in items})
            raise make_error(
                PromptTypeError,
                f"cannot join in-context examples of types {kinds} with separator "
                f"{separator!r} and eos {eos!r}: string ICE needs str examples and separators",
                compat=type(exc),
            ) from None

    # ------------------------------------------------------------------ prompts
    def _pick_template(self, ice_template: Any, prompt_template: Any) -> Any:
        """Spec 04 §4.1: the template the prompt is rendered from."""
        if prompt_template is not None and ice_template is not None:
            if prompt_template.ice_token is None:
                raise self._no_ice_token("prompt_template")
            return prompt_template
        if ice_template is not None:
            if ice_template.ice_token is None:
                raise self._no_ice_token("ice_template")
            return ice_template
        if prompt_template is not None:
            return prompt_template
        raise make_error(
            TemplateError,
            "Leaving prompt as empty is not supported: give a prompt_template (or an "
            "ice_template with an ice_token)",
            compat=NotImplementedError,
            code=self._code("ICLR-IMPL-003"),
        )

    def _no_ice_token(self, which: str) -> PromptRenderError:
        role = (
            "the prompt is rendered from the prompt_template, which must place the in-context "
            "examples"
            if which == "prompt_template"
            else "without a prompt_template the ice_template renders the prompt and must place "
            "the in-context examples"
        )
        return make_error(
            TemplateError,
            f"ice_token of {which} is not provided: {role} (set its ice_token, e.g. '</E>')",
            compat=NotImplementedError,
            code=self._code("ICLR-IMPL-002"),
        )

    def _generate_prompt(
        self,
        row: Row,
        ice: Any,
        gen_field_replace_token: Any,
        ice_template: Any,
        prompt_template: Any,
    ) -> Any:
        template = self._pick_template(ice_template, prompt_template)
        return template.generate_item(
            row,
            output_field=self.dataset.output_column,
            output_field_replace_token=gen_field_replace_token,
            ice_field_replace_token=ice,
        )

    def _generate_label_prompt(
        self,
        idx: Any,
        ice: Any,
        label: Any,
        ice_template: Any,
        prompt_template: Any,
        remain_sep: bool | None,
    ) -> Any:
        template = self._pick_template(ice_template, prompt_template)
        return template.generate_label_prompt_item(self._test_row(idx), ice, label, remain_sep)

    # ------------------------------------------------------------------ labels
    def _get_labels(self, ice_template: Any, prompt_template: Any, ordered: bool) -> list[Any]:
        """Spec 04 §4.2."""
        if prompt_template is not None and isinstance(prompt_template.template, dict):
            return list(prompt_template.template.keys())
        if (
            ice_template is not None
            and ice_template.ice_token is not None
            and isinstance(ice_template.template, dict)
        ):
            return list(ice_template.template.keys())
        column = self.dataset.output_column
        if column is None:
            raise make_error(
                RetrieverError,
                "cannot derive the labels: no template is a label dict and the dataset has no "
                "output_column",
                compat=TypeError,
            )
        try:
            values = [row[column] for row in self.test_ds]
        except KeyError:
            raise make_error(
                RetrieverError,
                f"cannot derive the labels: a test row has no output column {column!r}",
                compat=KeyError,
            ) from None
        try:
            # compat: `list(set(...))`, like the reference -- for str labels the order depends on
            # the hash seed (PYTHONHASHSEED), so it is NOT reproducible across processes;
            # `ordered=True` gives first-seen order instead.
            return list(dict.fromkeys(values)) if ordered else list(set(values))
        except TypeError:
            raise make_error(
                PromptTypeError,
                f"cannot derive the labels: the values of output column {column!r} are not "
                "hashable",
                compat=TypeError,
            ) from None


# ------------------------------------------------------------------ retrieval strategies


def _fixk_indices(fix_id_list: Any, n_train: int, n_test: int, flavor: str) -> list[Any]:
    for idx in fix_id_list:
        err = None
        if flavor == AISBENCH:
            if idx >= n_train or idx < 0:
                err = make_error(
                    RetrieverError,
                    f"Fix-K retriever index {idx} is out of range of [0, {n_train})",
                    compat=AssertionError,
                    code="ICLR-PARAM-004",
                )
        elif not idx < n_train:  # OpenCompass lets negative ids through (Python indexing)
            err = make_error(
                RetrieverError,
                f"Index {idx} is out of range of {n_train}",
                compat=AssertionError,
            )
        if err is not None:
            # (the reference's message; what it is about)
            add_note(err, f"FixKRetriever's fix_id_list {fix_id_list!r}, {n_train} train rows")
            raise err
    bad = [idx for idx in fix_id_list if isinstance(idx, bool)]
    if bad and n_test:
        # the reference's dataset refuses a bool index when the examples are read
        raise _index_error("train", bad[0], n_train, TypeError(bad[0]))
    # the same list object for every test row, as in the reference
    return [fix_id_list for _ in range(n_test)]


def _sliding_indices(k: Any, n_train: int, n_test: int) -> list[list[int]]:
    try:
        k = operator.index(k)
    except TypeError:
        raise make_error(
            PromptTypeError,
            f"k must be an int, got {type(k).__name__}: {k!r}",
            compat=TypeError,
        ) from None
    out = []
    for t in range(n_test):
        if t < k:  # the first rows: all previous ones, padded in front with the last train rows
            previous = list(range(max(0, t - k), t))
            pad = k - len(previous)
            out.append(list(range(n_train - pad, n_train)) + previous)
        else:
            out.append(list(range(t - k, t)))
    return out


def _checked_index_lists(ice_indices: Any, n_train: int, n_test: int) -> list[list[int]]:
    if isinstance(ice_indices, (str, bytes, Mapping)) or not isinstance(ice_indices, Iterable):
        raise make_error(
            PromptTypeError,
            f"ice_indices must be a list of index lists, got {type(ice_indices).__name__}",
            compat=TypeError,
        )
    if hasattr(ice_indices, "tolist"):  # a 2-d numpy array (e.g. faiss search results)
        ice_indices = ice_indices.tolist()
    lists = list(ice_indices)
    if len(lists) != n_test:
        raise make_error(
            RetrieverError,
            f"ice_indices has {len(lists)} index lists but the dataset has {n_test} test rows",
        )
    out = []
    for row, indices in enumerate(lists):
        if hasattr(indices, "tolist"):
            indices = indices.tolist()
        if isinstance(indices, (str, bytes, Mapping)) or not isinstance(indices, Iterable):
            raise make_error(
                PromptTypeError,
                f"ice_indices[{row}] must be a list of ints, got {type(indices).__name__}",
                compat=TypeError,
                path=f"ice_indices[{row}]",
            )
        checked = []
        for pos, idx in enumerate(indices):
            path = f"ice_indices[{row}][{pos}]"
            if isinstance(idx, bool) or not hasattr(idx, "__index__"):
                raise make_error(
                    PromptTypeError,
                    f"{path} must be an int, got {type(idx).__name__}: {idx!r}",
                    compat=TypeError,
                    path=path,
                )
            value = operator.index(idx)
            if not 0 <= value < n_train:
                raise make_error(
                    RetrieverError,
                    f"{path} = {value} is out of range of [0, {n_train}) (the train rows)",
                    path=path,
                )
            checked.append(value)
        out.append(checked)
    return out


# ------------------------------------------------------------------ OpenCompass API


class BaseRetriever(_RetrieverCore):
    """``BaseRetriever`` (OpenCompass): templates are passed to every method.

    Args:
        dataset: a :class:`Dataset` (or a reference-like dataset with ``train``/``test``/
            ``reader``).
        ice_separator: between string in-context examples (ignored for dialogue ICE).
        ice_eos_token: appended after the in-context examples -- even when there are none.
        ice_num: the number of in-context examples (used by ``RandomRetriever``).
    """

    def __init__(
        self,
        dataset: Any,
        ice_separator: str | None = "\n",
        ice_eos_token: str | None = "\n",
        ice_num: int | None = 1,
    ) -> None:
        super().__init__(dataset, ice_separator, ice_eos_token, ice_num)

    def get_labels(
        self,
        ice_template: Any = None,
        prompt_template: Any = None,
        *,
        ordered: bool = False,
    ) -> list[Any]:
        """The PPL label set: the label-dict keys of ``prompt_template`` (any dict template,
        dialogue included), else of an ``ice_template`` with an ``ice_token``, else the distinct
        values of the output column in ``list(set(...))`` order -- for str labels that order
        depends on the hash seed and is not reproducible across processes (``ordered=True``:
        first-seen order)."""
        return self._get_labels(ice_template, prompt_template, ordered)

    def generate_ice(self, idx_list: Sequence[Any], ice_template: Any = None) -> Any:
        """The in-context examples ``idx_list`` (train indices) rendered with ``ice_template``:
        a str, a ``PromptList`` (dialogue/label-dict ICE) or a message list (raw messages)."""
        return self._generate_ice(idx_list, ice_template)

    def generate_label_prompt(
        self,
        idx: int,
        ice: Any,
        label: Any,
        ice_template: Any = None,
        prompt_template: Any = None,
        remain_sep: bool | None = False,
    ) -> Any:
        """The perplexity prompt of test row ``idx`` for ``label`` with ``ice`` spliced in."""
        return self._generate_label_prompt(
            idx, ice, label, ice_template, prompt_template, remain_sep
        )

    def generate_prompt_for_generate_task(
        self,
        idx: int,
        ice: Any,
        gen_field_replace_token: Any = "",
        ice_template: Any = None,
        prompt_template: Any = None,
    ) -> Any:
        """The generation prompt of test row ``idx`` (its answer masked) with ``ice`` spliced
        in."""
        return self._generate_prompt(
            self._test_row(idx), ice, gen_field_replace_token, ice_template, prompt_template
        )

    def generate_prompt_and_label_for_generate_task(
        self,
        idx: int,
        ice: Any,
        gen_field_replace_token: Any = "",
        ice_template: Any = None,
        prompt_template: Any = None,
    ) -> tuple[Any, Any]:
        """``(generation prompt, test_row['label'])``."""
        row = self._test_row(idx)
        prompt = self._generate_prompt(
            row, ice, gen_field_replace_token, ice_template, prompt_template
        )
        try:
            return prompt, row["label"]
        except KeyError:
            raise make_error(
                RetrieverError, f"test row {idx!r} has no 'label' column", compat=KeyError
            ) from None

    def generate_prompt_for_adv_generate_task(
        self,
        idx: int,
        ice: Any,
        extra_prompt: Mapping[Any, Any] | None = None,
        gen_field_replace_token: Any = "",
        ice_template: Any = None,
        prompt_template: Any = None,
    ) -> Any:
        """The generation prompt of ``{**test_row, **extra_prompt}``."""
        row = {**self._test_row(idx), **(extra_prompt or {})}
        return self._generate_prompt(
            row, ice, gen_field_replace_token, ice_template, prompt_template
        )


class ZeroRetriever(BaseRetriever):
    """No in-context examples: ``[[], ...]``; separator ``''`` and ``ice_num`` 0."""

    def __init__(self, dataset: Any, ice_eos_token: str | None = "") -> None:
        super().__init__(dataset, "", ice_eos_token, 0)

    def retrieve(self, id_list: list[int] | None = None) -> list[list[int]]:
        """``[]`` for every test row (``id_list`` is ignored, with a warning, as in the
        reference)."""
        if id_list is not None:
            warnings.warn("id_list is not empty, but will be ignored.", UserWarning, stacklevel=2)
        return [[] for _ in range(len(self.test_ds))]


class FixKRetriever(BaseRetriever):
    """The same ``fix_id_list`` (train indices) for every test row. Checked at
    :meth:`retrieve`: OpenCompass asserts ``id < len(train)`` and lets negative ids through
    (they index from the end); AISBench rejects them."""

    def __init__(
        self,
        dataset: Any,
        fix_id_list: list[int],
        ice_separator: str | None = "\n",
        ice_eos_token: str | None = "\n",
        ice_num: int | None = 1,
    ) -> None:
        super().__init__(dataset, ice_separator, ice_eos_token, ice_num)
        self.fix_id_list = fix_id_list

    def retrieve(self) -> list[list[int]]:
        """``fix_id_list`` (the same object) for every test row."""
        return _fixk_indices(self.fix_id_list, len(self.index_ds), len(self.test_ds), self._flavor)


class RandomRetriever(BaseRetriever):
    """``ice_num`` random train indices per test row, exactly as the reference draws them with
    numpy's legacy global RNG (see :func:`random_indices`); numpy's global state is untouched."""

    def __init__(
        self,
        dataset: Any,
        ice_separator: str | None = "\n",
        ice_eos_token: str | None = "\n",
        ice_num: int | None = 1,
        seed: int | None = 43,
    ) -> None:
        super().__init__(dataset, ice_separator, ice_eos_token, ice_num)
        self.seed = seed

    def retrieve(self) -> list[list[int]]:
        """``np.random.seed(seed)``; per test row ``np.random.choice(len(train), ice_num,
        replace=False).tolist()``."""
        return random_indices(self.seed, len(self.index_ds), self.ice_num, len(self.test_ds))


class SlidingWindowRetriever(BaseRetriever):
    """(OpenCompass only.) For test position ``t``: the ``k`` previous positions ``[t-k, t)``,
    the first rows padded in front with the last train indices (positions are test positions
    used as train indices, unchecked, as in the reference)."""

    def __init__(
        self,
        dataset: Any,
        k: int,
        ice_separator: str | None = "\n",
        ice_eos_token: str | None = "\n",
        ice_num: int | None = 1,
    ) -> None:
        super().__init__(dataset, ice_separator, ice_eos_token, ice_num)
        self.k = k

    def retrieve(self) -> list[list[int]]:
        """The sliding windows (spec 04 §2)."""
        return _sliding_indices(self.k, len(self.index_ds), len(self.test_ds))


class IndexListRetriever(BaseRetriever):
    """Explicit per-test-row ICE index lists computed elsewhere (BM25, TopK, DPP, ... results).

    ``ice_indices`` must hold one list of train indices (ints in ``[0, len(train))``) per test
    row; a 2-d numpy array works too. ``ice_num`` defaults to the longest list's length.
    """

    def __init__(
        self,
        dataset: Any,
        ice_indices: Any,
        ice_separator: str | None = "\n",
        ice_eos_token: str | None = "\n",
        ice_num: int | None = None,
    ) -> None:
        super().__init__(dataset, ice_separator, ice_eos_token, ice_num)
        self.ice_indices = _checked_index_lists(ice_indices, len(self.index_ds), len(self.test_ds))
        if ice_num is None:
            self.ice_num = max((len(x) for x in self.ice_indices), default=0)

    def retrieve(self) -> list[list[int]]:
        """A copy of the index lists."""
        return [list(x) for x in self.ice_indices]


# ------------------------------------------------------------------ AISBench API
# Private bases of the public ``promptweave.aisbench`` retrievers (which set the flavour and its
# template classes): the templates are configs given to the constructor and the methods take no
# template arguments.


class _AISBaseRetriever(_RetrieverCore):
    """``BaseRetriever`` (AISBench): ``ice_template``/``prompt_template`` configs (``dict(type=
    PromptTemplate, template=..., ice_token=...)``) or template objects, built once."""

    _flavor: ClassVar[str] = AISBENCH
    _prompt_template: ClassVar[type[PromptTemplate]] = PromptTemplate

    def __init__(
        self,
        dataset: Any,
        ice_template: Any = None,
        prompt_template: Any = None,
        ice_separator: str | None = "\n",
        ice_eos_token: str | None = "\n",
        ice_num: int | None = 1,
    ) -> None:
        super().__init__(dataset, ice_separator, ice_eos_token, ice_num)
        self.ice_template: Any = self._build_template(ice_template, "ice_template")
        self.prompt_template: Any = self._build_template(prompt_template, "prompt_template")

    @classmethod
    def _build_template(cls, cfg: Any, name: str) -> Any:
        """A template from a config dict, like ``ICL_PROMPT_TEMPLATES.build(cfg)``.

        ``type`` may be a class or callable, a name in the flavour's module (``'PromptTemplate'``,
        also as a dotted path) or missing (``PromptTemplate``); a class of the reference framework
        is replaced by the promptweave class of the same name. A template object is used as is.
        """
        if cfg is None:
            return None
        if not isinstance(cfg, Mapping):
            if hasattr(cfg, "generate_item"):
                return cfg
            raise make_error(
                PromptTypeError,
                f"{name} must be a template config dict or a template, got {type(cfg).__name__}",
                compat=TypeError,
                path=name,
            )
        args = dict(cfg)
        factory = cls._template_factory(args.pop("type", None), name)
        return factory(**args)

    @classmethod
    def _template_factory(cls, kind: Any, name: str) -> Callable[..., Any]:
        if kind is None:
            return cls._prompt_template
        namespace = importlib.import_module(cls.__module__)
        if isinstance(kind, str):
            short = kind.rsplit(".", 1)[-1]  # a registry name or a dotted import path
            found = (
                cls._prompt_template
                if short == "PromptTemplate"
                else getattr(namespace, short, None)
            )
            if not callable(found):
                raise make_error(
                    PromptTypeError,
                    f"{name}: unknown template type {kind!r}",
                    compat=KeyError,
                    path=f"{name}['type']",
                )
            return found
        if not callable(kind):
            raise make_error(
                PromptTypeError,
                f"{name}: template type must be a class or a name, got {type(kind).__name__}",
                compat=TypeError,
                path=f"{name}['type']",
            )
        module = getattr(kind, "__module__", "") or ""
        if isinstance(kind, type) and not module.startswith("promptweave"):
            if kind.__name__ == "PromptTemplate":
                return cls._prompt_template
            ours = getattr(namespace, kind.__name__, None)
            if callable(ours):
                return ours  # type: ignore[no-any-return]
        return kind  # type: ignore[no-any-return]

    def get_gold_ans(self) -> list[Any] | None:
        """The output column of the test rows (``None`` without an output column)."""
        column = self.dataset.output_column
        if not column:
            return None
        return [row[column] for row in self.test_ds]

    def get_labels(self, *, ordered: bool = False) -> list[Any]:
        """As OpenCompass's, with the retriever's templates (see
        :meth:`BaseRetriever.get_labels`)."""
        return self._get_labels(self.ice_template, self.prompt_template, ordered)

    def generate_ice(self, idx_list: Sequence[Any]) -> Any:
        """The in-context examples ``idx_list`` rendered with the retriever's ``ice_template``."""
        return self._generate_ice(idx_list, self.ice_template)

    def generate_label_prompt(
        self, idx: int, ice: Any, label: Any, remain_sep: bool | None = False
    ) -> Any:
        """The perplexity prompt of test row ``idx`` for ``label``."""
        return self._generate_label_prompt(
            idx, ice, label, self.ice_template, self.prompt_template, remain_sep
        )

    def generate_prompt_for_generate_task(
        self, idx: int, ice: Any, gen_field_replace_token: Any = ""
    ) -> Any:
        """The generation prompt of test row ``idx``."""
        return self._generate_prompt(
            self._test_row(idx),
            ice,
            gen_field_replace_token,
            self.ice_template,
            self.prompt_template,
        )


class _AISZeroRetriever(_AISBaseRetriever):
    def __init__(
        self,
        dataset: Any,
        ice_template: Any = None,
        prompt_template: Any = None,
        ice_separator: str | None = "",
        ice_eos_token: str | None = "",
    ) -> None:
        super().__init__(dataset, ice_template, prompt_template, ice_separator, ice_eos_token, 0)

    def retrieve(self) -> list[list[int]]:
        return [[] for _ in range(len(self.test_ds))]


class _AISFixKRetriever(_AISBaseRetriever):
    def __init__(
        self,
        dataset: Any,
        fix_id_list: list[int],
        ice_template: Any = None,
        prompt_template: Any = None,
        ice_separator: str | None = "\n",
        ice_eos_token: str | None = "\n",
        ice_num: int | None = 1,
    ) -> None:
        super().__init__(
            dataset, ice_template, prompt_template, ice_separator, ice_eos_token, ice_num
        )
        self.fix_id_list = fix_id_list

    def retrieve(self) -> list[list[int]]:
        return _fixk_indices(self.fix_id_list, len(self.index_ds), len(self.test_ds), self._flavor)


class _AISRandomRetriever(_AISBaseRetriever):
    def __init__(
        self,
        dataset: Any,
        ice_template: Any = None,
        prompt_template: Any = None,
        ice_separator: str | None = "\n",
        ice_eos_token: str | None = "\n",
        ice_num: int | None = 1,
        seed: int | None = 43,
    ) -> None:
        super().__init__(
            dataset, ice_template, prompt_template, ice_separator, ice_eos_token, ice_num
        )
        self.seed = seed

    def retrieve(self) -> list[list[int]]:
        return random_indices(self.seed, len(self.index_ds), self.ice_num, len(self.test_ds))


class _AISIndexListRetriever(_AISBaseRetriever):
    def __init__(
        self,
        dataset: Any,
        ice_indices: Any,
        ice_template: Any = None,
        prompt_template: Any = None,
        ice_separator: str | None = "\n",
        ice_eos_token: str | None = "\n",
        ice_num: int | None = None,
    ) -> None:
        super().__init__(
            dataset, ice_template, prompt_template, ice_separator, ice_eos_token, ice_num
        )
        self.ice_indices = _checked_index_lists(ice_indices, len(self.index_ds), len(self.test_ds))
        if ice_num is None:
            self.ice_num = max((len(x) for x in self.ice_indices), default=0)

    def retrieve(self) -> list[list[int]]:
        return [list(x) for x in self.ice_indices]
