"""PyTorch's own module database, every sample, through modulekit.nn (``tests/torch_parity.py``).

Every class of ``module_db`` that modulekit.nn has must match torch on every sample, with
torch-initialised and with randomised weights, or refuse it with a reason documented in
``torch_parity.REFUSALS``. The classes modulekit does not have yet are listed in
:data:`NOT_YET`, and the list must be exact: adding a class means taking it off the list (and
its samples then run above), so the list only shrinks.
"""

from __future__ import annotations

import os
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("expecttest")  # torch's test database imports it

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_parity  # noqa: E402

import modulekit.nn as mnn  # noqa: E402

#: torch.nn classes of the module database that modulekit.nn does not have yet.
NOT_YET: frozenset[str] = frozenset()

CLASSES = torch_parity.class_names()
PRESENT = [name for name in CLASSES if hasattr(mnn, name)]


def test_not_yet_is_exact():
    missing = {name for name in CLASSES if not hasattr(mnn, name)}
    assert missing - NOT_YET == set(), "classes lost from modulekit.nn"
    assert NOT_YET - missing == set(), "classes now present: take them off NOT_YET"


@pytest.mark.parametrize("name", PRESENT)
def test_every_sample_matches_or_is_a_documented_refusal(name):
    results = torch_parity.run_class(name)
    assert results, f"module_db has no sample of {name}"
    bad = [(desc, outcome, detail) for desc, outcome, detail in results
           if outcome == "mismatch"
           or (outcome == "refused" and not torch_parity.accepted_refusal(name, detail))]
    assert not bad, "\n".join(f"{outcome}: {desc}: {detail}" for desc, outcome, detail in bad)
    assert any(outcome in ("match", "refused") for _, outcome, _ in results), \
        f"no sample of {name} ran (torch refused them all)"
