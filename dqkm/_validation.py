"""Declarative parameter validation: one table per estimator, one check.

Every dqkm estimator declares a class-level ``_parameter_constraints`` table
that maps each constructor parameter to a list of constraints; the value is
valid when it satisfies at least one of them.  A constraint is

- an :class:`Interval` (``Interval(Integral, 1, None, closed="left")``),
- an :class:`Options` (``Options(str, {"k-means++", "random"})``),
- ``None`` (the value may be None),
- one of the strings ``"array-like"``, ``"boolean"``, ``"integer"`` (an int
  whose range the fit checks against the data), ``"callable"``,
  ``"random_state"`` (None, an int in ``[0, 2**32 - 1]`` or a
  ``numpy.random.RandomState``), ``"no_validation"``,
- a class (the value must be an instance of it),
- a :class:`Predicate` (any test with its description).

:func:`validate_params` checks a whole table at the start of ``fit``;
:func:`check_value` checks one value, for data-dependent bounds that a fit
computes (``n_probe <= n_clusters``).  Both raise
:class:`~dqkm.exceptions.InvalidParameterError` (a ``ValueError`` and a
``TypeError``) with scikit-learn's wording::

    The 'tol' parameter of KMeans must be a float in the range [0, inf). Got -1 instead.

This module imports nothing from dqkm but :mod:`dqkm.exceptions`, so every
layer may use it.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .exceptions import InvalidParameterError

__all__ = ["Interval", "Options", "Predicate", "InvalidParameterError", "VERBOSE", "PERSIST",
           "SPLIT_EVERY", "check_value", "validate_params", "check_n_samples", "describe"]

_RANDOM_STATE_MAX = 2**32 - 1


def _article(word: str) -> str:
    return f"an {word}" if word[:1].lower() in "aeiou" else f"a {word}"


def _fmt(x) -> str:
    if x is None:
        return "inf"
    if isinstance(x, float) and x.is_integer():
        return str(int(x))  # "[0, inf)", as the messages users and tests know
    return str(x)


class Interval:
    """Numbers of one type in ``[low, high]`` (ends per ``closed``).

    Parameters
    ----------
    type : numbers.Integral or numbers.Real
        Integral: ints (NumPy's included, bool excluded).  Real: any real
        number but bool; NaN never lies in an interval.
    low, high : number or None
        The bounds; None is -inf / +inf (never included).
    closed : {'both', 'left', 'right', 'neither'}, default='both'
        Which finite bounds belong to the interval.
    """

    _CLOSED = ("both", "left", "right", "neither")

    def __init__(self, type, low, high, *, closed="both"):
        if type not in (numbers.Integral, numbers.Real):
            raise TypeError(f"Interval type must be numbers.Integral or numbers.Real. Got "
                            f"{type!r} instead.")
        if closed not in self._CLOSED:
            raise ValueError(f"Interval closed must be one of {list(self._CLOSED)}. Got "
                             f"{closed!r} instead.")
        if low is not None and high is not None and low > high:
            raise ValueError(f"Interval low={low} must be <= high={high}.")
        self.type, self.low, self.high, self.closed = type, low, high, closed

    def is_satisfied_by(self, value) -> bool:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, self.type):
            return False
        left = self.closed in ("both", "left")
        right = self.closed in ("both", "right")
        if self.low is None:
            ok_low = value > -np.inf
        else:
            ok_low = value >= self.low if left else value > self.low
        if self.high is None:
            ok_high = value < np.inf
        else:
            ok_high = value <= self.high if right else value < self.high
        return bool(ok_low and ok_high)

    def __str__(self):
        what = "an int" if self.type is numbers.Integral else "a float"
        lb = "[" if self.low is not None and self.closed in ("both", "left") else "("
        rb = "]" if self.high is not None and self.closed in ("both", "right") else ")"
        lo = "-inf" if self.low is None else _fmt(self.low)
        return f"{what} in the range {lb}{lo}, {_fmt(self.high)}{rb}"

    def __repr__(self):
        return (f"Interval({self.type.__name__}, {self.low!r}, {self.high!r}, "
                f"closed={self.closed!r})")


class Options:
    """One of a fixed set of values of one type (``Options(str, {'a', 'b'})``).

    A value of another type never matches (``True`` is not among ``{1}``).
    """

    def __init__(self, type, values):
        self.type = type
        self.values = frozenset(values)
        if not all(isinstance(v, type) for v in self.values):
            raise TypeError(f"Options values must all be of type {type.__name__}.")

    def is_satisfied_by(self, value) -> bool:
        if not isinstance(value, self.type) or (self.type is not bool and isinstance(value, bool)):
            return False
        return value in self.values

    def __str__(self):
        try:
            values = sorted(self.values)
        except TypeError:  # mixed types: a stable order all the same
            values = sorted(self.values, key=repr)
        return f"one of {values}"

    def __repr__(self):
        return f"Options({self.type.__name__}, {set(self.values)!r})"


@dataclass(frozen=True)
class Predicate:
    """Any test of a value, with what it expects in words (``"a dict"``)."""

    test: Callable[[Any], bool]
    description: str

    def is_satisfied_by(self, value) -> bool:
        return bool(self.test(value))

    def __str__(self):
        return self.description


def _is_array_like(v) -> bool:
    return (hasattr(v, "__array__") or hasattr(v, "shape") and hasattr(v, "dtype")
            or isinstance(v, (list, tuple)))


def _is_random_state(v) -> bool:
    if v is None or isinstance(v, np.random.RandomState):
        return True
    return (isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))
            and 0 <= v <= _RANDOM_STATE_MAX)


_NAMED = {
    "array-like": Predicate(_is_array_like, "an array-like"),
    "boolean": Predicate(lambda v: isinstance(v, (bool, np.bool_)), "a bool"),
    "integer": Predicate(lambda v: isinstance(v, numbers.Integral)
                         and not isinstance(v, (bool, np.bool_)), "an int"),
    "callable": Predicate(callable, "a callable"),
    "random_state": Predicate(_is_random_state,
                              f"an int in the range [0, {_RANDOM_STATE_MAX}], a "
                              "numpy.random.RandomState instance or None"),
    "no_validation": Predicate(lambda v: True, "anything"),
}


def _as_constraint(c):
    """A constraint object with ``is_satisfied_by`` and ``str``."""
    if c is None:
        return Predicate(lambda v: v is None, "None")
    if isinstance(c, str):
        try:
            return _NAMED[c]
        except KeyError:
            raise ValueError(f"Unknown constraint {c!r}; the named constraints are "
                             f"{sorted(_NAMED)}.") from None
    if isinstance(c, type):
        return Predicate(lambda v: isinstance(v, c), _article(c.__name__))
    if hasattr(c, "is_satisfied_by"):
        return c
    raise TypeError(f"Unknown constraint {c!r}: use an Interval, Options, Predicate, a class, "
                    f"None or one of {sorted(_NAMED)}.")


def describe(constraints) -> str:
    """The constraints in words: ``"an int in the range [1, inf) or None"``.

    None is named last, as scikit-learn does.
    """
    cs = [_as_constraint(c) for c in constraints if c is not None]
    words = [str(c) for c in cs if str(c) != "anything"]
    if any(c is None for c in constraints):
        words.append("None")
    if len(words) <= 1:
        return "".join(words)
    return f"{', '.join(words[:-1])} or {words[-1]}"


def check_value(name, value, constraints, caller):
    """Return ``value`` if it satisfies one of ``constraints``; raise otherwise.

    Parameters
    ----------
    name : str
        The parameter's name, as the caller's signature spells it.
    value : object
    constraints : list
        Constraints as in a ``_parameter_constraints`` table.
    caller : str
        Who owns the parameter (``"KMeans"``, ``"make_blobs"``).

    Raises
    ------
    InvalidParameterError
        "The 'name' parameter of caller must be <constraints>. Got <value> instead."
    """
    if constraints == "no_validation":
        return value
    for c in constraints:
        if _as_constraint(c).is_satisfied_by(value):
            return value
    raise InvalidParameterError(f"The {name!r} parameter of {caller} must be "
                                f"{describe(constraints)}. Got {value!r} instead.")


def validate_params(obj, params=None, constraints=None, *, caller=None):
    """Check every parameter against its constraints.

    Parameters
    ----------
    obj : estimator or None
        An estimator: its ``get_params(deep=False)`` are checked against its
        class's ``_parameter_constraints`` and its class name is the caller
        (``tests/test_common.py`` holds every table to name every parameter).
        None: ``params``, ``constraints`` and ``caller`` are given (a
        function's arguments).
    params : dict, optional
    constraints : dict, optional
    caller : str, optional

    Raises
    ------
    InvalidParameterError
        For the first parameter (in the table's order) that satisfies none of
        its constraints.
    """
    if obj is not None:
        params = obj.get_params(deep=False)
        constraints = type(obj)._parameter_constraints
        caller = caller or type(obj).__name__
    for name, cons in constraints.items():
        if name in params:
            check_value(name, params[name], cons, caller)


def check_n_samples(n_samples, n_clusters):
    """The data-dependent check every clusterer makes: ``n_samples >= n_clusters``."""
    if n_clusters > n_samples:
        raise InvalidParameterError(f"n_samples={n_samples} should be >= "
                                    f"n_clusters={n_clusters}: pass more rows or lower "
                                    "n_clusters.")


# Constraints several estimators share.
# ``verbose``: 0 (silent), 1, 2, ... (a bool counts as 0 or 1).
VERBOSE = [Interval(numbers.Integral, 0, None, closed="left"), "boolean"]
# ``persist``: 'auto' (when X takes at most half the cluster's memory), True or False.
PERSIST = [Options(str, {"auto"}), "boolean"]
# ``split_every``: the fan-in of tree reductions, or None for the default.
SPLIT_EVERY = [Interval(numbers.Integral, 2, None, closed="left"), None]
