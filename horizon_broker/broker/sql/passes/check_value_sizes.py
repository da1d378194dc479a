"""Refuse, before Spark runs anything, a value whose size multiplies past the work budget.

:mod:`~horizon_broker.broker.sql.passes.check_budget` sizes each generator alone (``repeat('q', 90000)`` is
fine, so is ``sequence(1, 90000)``); nesting multiplies them: ``transform(sequence(1, 90000),
x -> repeat('q', 90000))`` is an array of 8.1 billion characters, an ``aggregate`` whose merge
doubles a string reaches 2^40 characters in forty steps, a ``format_string`` width is a string
length of its own. One such value ends the shared JVM for every caller. This pass bounds the
size of every value bottom-up, through lambdas, ``aggregate`` steps, concatenations and format
widths, and refuses the first that breaks a limit, naming it:

- a string longer than ``[limits].max_string_length`` characters;
- an array of more than ``[limits].max_array_elements`` elements, nested arrays flattened;
- a value of more than ``[limits].max_value_size`` characters and elements, all nesting counted.

Sizes are upper bounds. A column counts as one unit: what is stored is bounded by storage, and
only what the query multiplies is the budget's business.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlglot import exp

from horizon_broker.broker.sql.constants import integer_value
from horizon_broker.broker.sql.errors import OverBudget, QueryTooLarge
from horizon_broker.broker.sql.generators import sequence_length
from horizon_broker.broker.sql.model import WorkBudget
from horizon_broker.broker.sql.state import state_of

_ANONYMOUS_AMPLIFIERS = frozenset(
    {"array_repeat", "printf", "format_string", "zip_with", "transform_values", "transform_keys"}
)
_AMPLIFIERS = frozenset(
    {
        exp.Repeat,
        exp.Space,
        exp.Pad,
        exp.Format,
        exp.GenerateSeries,
        exp.ExplodingGenerateSeries,
        exp.Transform,
        exp.Reduce,
        exp.RegexpReplace,
        exp.Replace,
    }
)
"""Nodes that make a value larger than their inputs (the pass runs only on trees that have one)."""
_SCALARS = (
    exp.Predicate,
    exp.Connector,
    exp.Not,
    exp.Length,
    exp.ArraySize,
    exp.Count,
    exp.Exists,
    exp.Boolean,
    exp.Null,
)
"""Expressions whose value is a number or a boolean, whatever their inputs' sizes."""
_FORMAT_SPEC = re.compile(r"%(?:\d+\$)?[-#+ 0,(<]*(\d+)?(?:\.(\d+))?[a-zA-Z%]")
_STEPS_TRACED = 64
"""``aggregate`` steps followed one by one; past them a growth that stayed linear is
extrapolated and any faster growth is refused."""


def makes_values_larger(node: exp.Expr) -> bool:
    """Whether ``node`` can make a value larger than its inputs (cheap: one isinstance)."""
    kind = type(node)  # exact types: a set lookup, on every node of every query
    if kind in _AMPLIFIERS:
        return True
    return kind is exp.Anonymous and node.name.lower() in _ANONYMOUS_AMPLIFIERS


@dataclass(frozen=True, slots=True)
class Size:
    """An upper bound on one value: ``count`` characters of a string, or ``count`` elements of
    an array each of size ``item``; any other scalar is one unit."""

    count: int = 1
    item: Size | None = None
    is_string: bool = False

    @property
    def total(self) -> int:
        """Characters and elements, all nesting counted."""
        if self.item is None:
            return self.count
        return self.count * max(1, self.item.total)

    @property
    def elements(self) -> int:
        """Elements of the array, nested arrays flattened (0 for a scalar)."""
        if self.item is None:
            return 0
        return self.count * max(1, self.item.elements)


ONE = Size()


def string(length: int) -> Size:
    return Size(max(0, length), None, True)


def check_value_sizes(tree: exp.Expr, budget: WorkBudget) -> exp.Expr:
    """Check the size of every value ``tree`` computes; return it unchanged.

    Runs after :func:`~horizon_broker.broker.sql.passes.check_budget`, whose walk marks the trees that need it.

    >>> import sqlglot
    >>> from horizon_broker.broker.sql.passes.check_budget import check_budget
    >>> def sized(sql):
    ...     tree = check_budget(sqlglot.parse_one(sql, read="spark"), WorkBudget())
    ...     return check_value_sizes(tree, WorkBudget())
    >>> sized("SELECT concat(repeat('a', 1000), repeat('b', 1000))")
    Select(...)
    >>> sized("SELECT transform(sequence(1, 90000), x -> repeat('q', 90000))")
    Traceback (most recent call last):
    ...
    horizon_broker.broker.sql.errors.OverBudget: transform() would make a value of 8100000000 characters ...
    """
    if not state_of(tree).amplifies:
        return tree  # check_budget's walk found nothing that makes a value larger
    sizer = _Sizer(budget)
    try:
        sizer.size(tree)
    except RecursionError:
        raise QueryTooLarge("query is nested too deeply to be processed") from None
    return tree


class _Sizer:
    """Sizes expressions bottom-up, with lambda parameters bound to the sizes they stand for."""

    def __init__(self, budget: WorkBudget) -> None:
        self.budget = budget
        self.bound: dict[str, Size] = {}

    def size(self, node: exp.Expr) -> Size:
        size = self._size(node)
        self._check(size, node)
        return size

    def _check(self, size: Size, node: exp.Expr) -> None:
        budget = self.budget
        if size.item is None and size.is_string and size.count > budget.max_string_length:
            raise OverBudget(
                f"{_name(node)} would make a string of {size.count} characters, over the limit "
                f"[limits].max_string_length = {budget.max_string_length}"
            )
        if size.elements > budget.max_array_elements:
            raise OverBudget(
                f"{_name(node)} would make an array of {size.elements} elements (nested arrays "
                f"flattened), over the limit [limits].max_array_elements = "
                f"{budget.max_array_elements}"
            )
        if size.total > budget.max_value_size:
            raise OverBudget(
                f"{_name(node)} would make a value of {size.total} characters and elements, over "
                f"the limit [limits].max_value_size = {budget.max_value_size}"
            )

    def _size(self, node: exp.Expr) -> Size:
        for sized_by_kind in (self._leaf, self._repeated, self._array, self._text_built):
            size = sized_by_kind(node)
            if size is not None:
                return size
        return self._composite(node)

    def _leaf(self, node: exp.Expr) -> Size | None:
        """A literal, a column or a lambda's parameter; None for any other node."""
        if isinstance(node, exp.Literal):
            return string(len(node.this)) if node.is_string else ONE
        if isinstance(node, exp.Column):
            return ONE if node.table else self.bound.get(node.name.lower(), ONE)
        if isinstance(node, exp.Identifier):  # a lambda's parameter, inside its body
            return self.bound.get(node.name.lower(), ONE)
        return None

    def _repeated(self, node: exp.Expr) -> Size | None:
        """A value sized by a count (repeat, space, pad, format, sequence, array_repeat)."""
        if isinstance(node, exp.Repeat):
            return string(self._times(node.args.get("times")) * self._text(node.this))
        if isinstance(node, exp.Space):
            self._children(node)
            return string(self._times(node.this))
        if isinstance(node, exp.Pad):
            self._children(node)
            return string(self._times(node.expression))
        if isinstance(node, exp.Format) or _named(node, "printf", "format_string"):
            return self._format(node)
        if isinstance(node, exp.GenerateSeries):
            self._children(node)
            return Size(sequence_length(node, self.budget), ONE)
        if _named(node, "array_repeat") and len(node.expressions) == 2:
            item = self.size(node.expressions[0])
            return Size(self._times(node.expressions[1]), item)
        return None

    def _array(self, node: exp.Expr) -> Size | None:
        """An array built or mapped from others (array, transform, zip_with, aggregate, flatten)."""
        if isinstance(node, exp.Array):
            items = [self.size(element) for element in node.expressions]
            return Size(len(items), _largest(items) or ONE)
        if isinstance(node, exp.Transform):
            return self._mapped(node.this, node.expression)
        if _named(node, "transform_values", "transform_keys") and len(node.expressions) == 2:
            return self._mapped(node.expressions[0], node.expressions[1])
        if _named(node, "zip_with") and len(node.expressions) == 3:
            left, right = (self.size(side) for side in node.expressions[:2])
            body = self._lambda(node.expressions[2], [_item(left), _item(right)])
            return Size(max(left.count, right.count), body)
        if isinstance(node, exp.Reduce):
            return self._aggregate(node)
        if isinstance(node, exp.Flatten):
            return self._flattened(node)
        return None

    def _flattened(self, node: exp.Flatten) -> Size:
        outer = self.size(node.this)
        inner = outer.item
        if inner is None or inner.item is None:
            return outer
        return Size(outer.count * inner.count, inner.item)

    def _text_built(self, node: exp.Expr) -> Size | None:
        """A string joined or replaced from others (concatenation, regexp_replace, replace)."""
        if isinstance(node, (exp.DPipe, exp.Concat, exp.ConcatWs)):
            return self._concat(node)
        if isinstance(node, (exp.RegexpReplace, exp.Replace)):
            text, replacement = self.size(node.this), self.size(node.args["replacement"])
            self.size(node.expression)
            # An empty pattern matches between every two characters.
            return string(text.total + (text.total + 1) * replacement.total)
        return None

    def _composite(self, node: exp.Expr) -> Size:
        """Any other node, from its children: a lambda's body, a scalar subquery's projection,
        the largest branch of a choice, a number, or the sum of the children."""
        if isinstance(node, exp.Lambda):
            return self._lambda(node, [])
        if isinstance(node, exp.Subquery) and isinstance(node.this, exp.Select):
            self._children(node)
            projections = node.this.expressions
            return self.size(projections[0]) if len(projections) == 1 else ONE
        children = self._children(node)
        if isinstance(node, (exp.Query, *_SCALARS)):
            return ONE
        if isinstance(node, (exp.If, exp.Case, exp.Coalesce, exp.Alias, exp.Paren)):
            return _largest(children) or ONE
        return _summed(children)

    def _children(self, node: exp.Expr) -> list[Size]:
        return [self.size(child) for child in node.iter_expressions()]

    def _times(self, argument: exp.Expr | None) -> int:
        """A constant count (check_budget has refused the others)."""
        if argument is not None:
            self.size(argument)
        value = integer_value(argument)
        return max(0, value) if value is not None else 1

    def _text(self, node: exp.Expr) -> int:
        return self.size(node).total

    def _format(self, node: exp.Expr) -> Size:
        arguments = (
            [node.this, *node.expressions] if isinstance(node, exp.Format) else node.expressions
        )
        sizes = [self.size(argument) for argument in arguments]
        pattern = arguments[0] if arguments else None
        if not isinstance(pattern, exp.Literal) or not pattern.is_string:
            raise OverBudget(
                f"{_name(node)}'s format is computed from the data, so the widths it asks for "
                "cannot be bounded before the query runs (the limit [limits].max_string_length "
                f"= {self.budget.max_string_length} needs a constant format); use a constant"
            )
        widths = sum(
            int(width or 0) + int(precision or 0)
            for width, precision in _FORMAT_SPEC.findall(pattern.this)
        )
        # Each argument is printed once per use at most as long as itself, numbers in 40.
        printed = sum(max(40, size.total) for size in sizes[1:])
        return string(len(pattern.this) + widths + printed * max(1, pattern.this.count("%")))

    def _concat(self, node: exp.Expr) -> Size:
        parts = (
            [node.this, node.expression] if isinstance(node, exp.DPipe) else list(node.expressions)
        )
        sizes = [self.size(part) for part in parts]
        arrays = [size for size in sizes if size.item is not None]
        if not isinstance(node, exp.ConcatWs) and arrays and len(arrays) == len(sizes):
            return Size(sum(size.count for size in arrays), _largest([a.item for a in arrays]))
        if isinstance(node, exp.ConcatWs) and sizes:
            separator = sizes[0].total
            pieces = sum(max(1, size.count) for size in sizes[1:])
            return string(sum(size.total for size in sizes[1:]) + separator * pieces)
        return string(sum(size.total for size in sizes))

    def _mapped(self, source: exp.Expr, function: exp.Expr) -> Size:
        array = self.size(source)
        return Size(array.count, self._lambda(function, [_item(array), ONE]))

    def _lambda(self, function: exp.Expr, parameters: list[Size]) -> Size:
        """The size of ``function``'s body with its parameters bound to ``parameters``."""
        if not isinstance(function, exp.Lambda):
            return self.size(function)
        names = [name.name.lower() for name in function.expressions]
        saved = {name: self.bound[name] for name in names if name in self.bound}
        for name, size in zip(names, parameters, strict=False):
            self.bound[name] = size
        try:
            return self.size(function.this)
        finally:
            for name in names:
                self.bound.pop(name, None)
            self.bound.update(saved)

    def _aggregate(self, node: exp.Reduce) -> Size:
        """``aggregate(array, start, merge[, finish])``: the accumulator after as many merge
        steps as the array has elements, followed step by step, then extrapolated."""
        array = self.size(node.this)
        accumulator = self.size(node.args["initial"])
        merge = node.args["merge"]
        element = _item(array)
        steps = array.count
        previous_growth: int | None = None
        for step in range(min(steps, _STEPS_TRACED)):
            merged = self._lambda(merge, [accumulator, element])
            growth = merged.total - accumulator.total
            accumulator = _largest([accumulator, merged]) or merged
            if growth <= 0:
                break
            if step == _STEPS_TRACED - 1 and steps > _STEPS_TRACED:
                if previous_growth is not None and growth > previous_growth:
                    raise OverBudget(
                        "aggregate()'s accumulator grows faster with every step of its "
                        f"{steps} steps: its size cannot be bounded under the limit "
                        f"[limits].max_value_size = {self.budget.max_value_size}; fold fewer "
                        "elements or keep the accumulator's size constant"
                    )
                remaining = steps - _STEPS_TRACED
                accumulator = _grown(accumulator, growth * remaining)
                self._check(accumulator, node)
            previous_growth = growth
        finish = node.args.get("finish")
        if finish is not None:
            return self._lambda(finish, [accumulator])
        return accumulator


def _grown(size: Size, more: int) -> Size:
    if size.item is None:
        return Size(size.count + more, None, size.is_string)
    return Size(size.count + more // max(1, size.item.total), size.item)


def _item(size: Size) -> Size:
    return size.item if size.item is not None else ONE


def _largest(sizes: list[Size | None] | list[Size]) -> Size | None:
    present = [size for size in sizes if size is not None]
    return max(present, key=lambda size: size.total) if present else None


def _summed(sizes: list[Size]) -> Size:
    if not sizes:
        return ONE
    return Size(sum(size.total for size in sizes), None, any(size.is_string for size in sizes))


def _named(node: exp.Expr, *names: str) -> bool:
    return isinstance(node, exp.Anonymous) and node.name.lower() in names


def _name(node: exp.Expr) -> str:
    if isinstance(node, exp.DPipe):
        return "'||'"
    if isinstance(node, exp.Anonymous):
        return f"{node.name.lower()}()"
    if isinstance(node, exp.Func):
        return f"{type(node).sql_names()[0].lower()}()"
    return "the expression"
