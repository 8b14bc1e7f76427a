"""pytest plugin (``-p tests.meta.numpy1_reprs``): print NumPy scalars as NumPy 1.x does.

``numpy.set_printoptions(legacy="1.25")`` makes NumPy 2 print ``3.0`` where it
would print ``np.float64(3.0)``; tests/meta/test_doctests.py runs the doctests so.
"""

import numpy


def pytest_configure(config):
    numpy.set_printoptions(legacy="1.25")
