"""The parameter validation of dqkm._validation: Interval, Options, the table check."""

from numbers import Integral, Real

import numpy as np
import pytest

import dqkm
from dqkm._validation import (VERBOSE, Interval, Options, Predicate, check_value, describe,
                              validate_params)
from dqkm.exceptions import DqkmError, InvalidParameterError


# ------------------------------------------------------------------------------ Interval
@pytest.mark.parametrize("interval, inside, outside", [
    (Interval(Integral, 1, None, closed="left"), [1, 2, np.int64(7), 10**12],
     [0, -1, 1.0, True, np.bool_(True), "3", None, [1]]),
    (Interval(Integral, 1, 4), [1, 4], [0, 5]),
    (Interval(Real, 0, None, closed="neither"), [1e-300, 1, 2.5, np.float32(3)],
     [0, 0.0, -1, np.inf, np.nan, True, "0.5"]),
    (Interval(Real, 0, 1, closed="right"), [1, 0.5], [0, 1.0000001]),
    (Interval(Real, None, None), [-1e300, 0, 1e300], [np.nan, np.inf, -np.inf]),
])
def test_interval_membership(interval, inside, outside):
    assert all(interval.is_satisfied_by(v) for v in inside), inside
    assert not any(interval.is_satisfied_by(v) for v in outside), outside


@pytest.mark.parametrize("interval, words", [
    (Interval(Integral, 1, None, closed="left"), "an int in the range [1, inf)"),
    (Interval(Integral, 1, 10), "an int in the range [1, 10]"),
    (Interval(Real, 0.0, None, closed="left"), "a float in the range [0, inf)"),
    (Interval(Real, 0, 1, closed="right"), "a float in the range (0, 1]"),
    (Interval(Real, 0.5, 1, closed="neither"), "a float in the range (0.5, 1)"),
    (Interval(Real, None, 0, closed="both"), "a float in the range (-inf, 0]"),
])
def test_interval_words(interval, words):
    assert str(interval) == words


def test_interval_refuses_a_bad_declaration():
    with pytest.raises(TypeError, match="Interval type must be numbers.Integral or numbers.Real"):
        Interval(int, 0, 1)
    with pytest.raises(ValueError, match="Interval closed must be one of"):
        Interval(Real, 0, 1, closed="open")
    with pytest.raises(ValueError, match="low=2 must be <= high=1"):
        Interval(Integral, 2, 1)


# ------------------------------------------------------------------------------- Options
def test_options():
    o = Options(str, {"k-means++", "random"})
    assert o.is_satisfied_by("random") and not o.is_satisfied_by("kmeans")
    assert not o.is_satisfied_by(None) and not o.is_satisfied_by(1)
    assert str(o) == "one of ['k-means++', 'random']"
    ints = Options(Integral, {1, 2})
    assert ints.is_satisfied_by(np.int64(2)) and not ints.is_satisfied_by(True)
    assert not ints.is_satisfied_by(1.0)
    with pytest.raises(TypeError, match="Options values must all be of type str"):
        Options(str, {"a", 1})


# -------------------------------------------------------------------- named constraints
@pytest.mark.parametrize("name, good, bad", [
    ("array-like", [np.zeros((2, 2)), [[1.0]], (1, 2)], ["abc", 3, None]),
    ("boolean", [True, False, np.bool_(False)], [0, 1, "yes", None]),
    ("integer", [0, -3, np.int32(5)], [1.0, True, "1"]),
    ("callable", [len, lambda x: x], [3, "f"]),
    ("random_state", [None, 0, 2**32 - 1, np.random.RandomState(0)],
     [-1, 2**32, 1.5, "0", True, np.random.default_rng(0)]),
])
def test_named_constraints(name, good, bad):
    for v in good:
        check_value("p", v, [name], "f")
    for v in bad:
        with pytest.raises(InvalidParameterError, match=r"The 'p' parameter of f must be"):
            check_value("p", v, [name], "f")


def test_unknown_constraints_are_refused():
    with pytest.raises(ValueError, match="Unknown constraint 'int'"):
        check_value("p", 1, ["int"], "f")
    with pytest.raises(TypeError, match="Unknown constraint 3"):
        check_value("p", 1, [3], "f")


# ------------------------------------------------------------------------ the messages
def test_message_has_scikit_learn_form():
    with pytest.raises(InvalidParameterError) as e:
        check_value("tol", -1, [Interval(Real, 0, None, closed="left")], "KMeans")
    assert str(e.value) == ("The 'tol' parameter of KMeans must be a float in the range "
                            "[0, inf). Got -1 instead.")


def test_several_constraints_and_none():
    cons = [Options(str, {"auto"}), Interval(Integral, 1, None, closed="left"), None]
    assert describe(cons) == "one of ['auto'], an int in the range [1, inf) or None"
    for v in ("auto", 3, None):
        assert check_value("n", v, cons, "C") is v
    with pytest.raises(InvalidParameterError,
                       match=r"must be one of \['auto'\], an int in the range \[1, inf\) or "
                             r"None\. Got 0 instead\."):
        check_value("n", 0, cons, "C")
    # without None in the list, None is refused
    with pytest.raises(InvalidParameterError, match=r"Got None instead"):
        check_value("n", None, cons[:2], "C")
    assert describe([dict, None]) == "a dict or None"
    assert describe([Predicate(lambda v: True, "anything at all")]) == "anything at all"


def test_one_error_class_for_type_and_value(tmp_path):
    """A wrong type and a wrong value are one error: a ValueError, a TypeError and a
    DqkmError at once (a string count is the same error everywhere)."""
    assert issubclass(InvalidParameterError, (ValueError, TypeError, DqkmError))
    for bad in ("3", 0, 2.5):
        with pytest.raises(InvalidParameterError):
            dqkm.KMeans(bad).fit(np.zeros((4, 2)))
    with pytest.raises(InvalidParameterError, match="'n_samples' parameter must be an int"):
        dqkm.datasets.make_blobs("3", 2, 2)
    from dqkm.kernels.projections import Splin

    with pytest.raises(InvalidParameterError, match="'s' parameter of Splin"):
        Splin((3, 5), "2")
    with pytest.raises(InvalidParameterError, match="'n_samples' parameter of make_sparse_blobs"):
        dqkm.sparse.make_sparse_blobs("3", 10)
    with pytest.raises(InvalidParameterError, match="dqkm.save saves dqkm estimators; got list"):
        dqkm.io.save([1, 2], tmp_path / "m.npz")
    assert not (tmp_path / "m.npz").exists()


# -------------------------------------------------------------------- validate_params
class _Toy(dqkm.KMeans):
    """A table of its own, to check validate_params on an estimator."""

    _parameter_constraints = {"n_clusters": [Interval(Integral, 2, 5)], "init": ["no_validation"]}


def test_validate_params_on_an_estimator_and_a_function():
    validate_params(_Toy(3))
    with pytest.raises(InvalidParameterError,
                       match=r"The 'n_clusters' parameter of _Toy must be an int in the range "
                             r"\[2, 5\]\. Got 6 instead\."):
        validate_params(_Toy(6))
    validate_params(None, {"a": 1, "b": None}, {"a": ["integer"], "b": [None]}, caller="f")
    with pytest.raises(InvalidParameterError, match="The 'b' parameter of f must be None"):
        validate_params(None, {"a": 1, "b": 2}, {"a": ["integer"], "b": [None]}, caller="f")


def test_verbose_constraint():
    for v in (0, 1, 3, True):
        check_value("verbose", v, VERBOSE, "KMeans")
    with pytest.raises(InvalidParameterError, match=r"'verbose' parameter of KMeans must be an "
                                                    r"int in the range \[0, inf\) or a bool"):
        check_value("verbose", -1, VERBOSE, "KMeans")


@pytest.mark.parametrize("est, match", [
    (dqkm.KMeans(2, persist="yes"), r"'persist' parameter of KMeans must be one of \['auto'\] "
                                    r"or a bool\. Got 'yes'"),
    (dqkm.KMeans(2, init=3), r"'init' parameter of KMeans must be one of \['k-means\+\+', "
                             r"'k-means\|\|', 'random'\], a callable or an array-like\. Got 3"),
    (dqkm.KMeans(2, random_state=-1), "'random_state' parameter of KMeans"),
    (dqkm.KMeans(2, n_init=0), r"'n_init' parameter of KMeans must be one of \['auto'\] or an "
                               r"int in the range \[1, inf\)"),
    (dqkm.KMeans(2, tol=float("nan")), "'tol' parameter of KMeans .* Got nan"),
    (dqkm.QKMeans(2, sparsity=2.0), r"'sparsity' parameter of QKMeans must be an int\. Got 2.0"),
    (dqkm.KMeansL1(2, radius=0), r"'radius' parameter of KMeansL1 must be a float in the range "
                                 r"\(0, inf\)"),
    (dqkm.SparseEmbeddedKMeans(2, kmeans=[]), "'kmeans' parameter of SparseEmbeddedKMeans must "
                                              "be a dict or None"),
    (dqkm.KMultipleMeans(2, detect_outliers=1), "'detect_outliers' parameter of KMultipleMeans "
                                                "must be a bool"),
])
def test_every_estimator_refuses_before_reading_x(est, match):
    """validate_params runs before X is read: X here is not even an array."""
    with pytest.raises(InvalidParameterError, match=match):
        est.fit(object())
