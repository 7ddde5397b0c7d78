import numpy as np
import pytest

from modulekit._ext import _isa


@pytest.fixture(params=_isa.available_isas())
def isa(request):
    """Run the test once per instruction-set path this CPU has, restoring the default after."""
    previous = _isa.set_isa(request.param)
    try:
        yield request.param
    finally:
        _isa.set_isa(previous)


@pytest.fixture
def rng():
    return np.random.default_rng(0)
