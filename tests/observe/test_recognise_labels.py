"""Label codes: every one fits the array the recognisers write, and none is used twice."""

from __future__ import annotations

import numpy as np

from ringfence.observe.recognise._bytes import LABEL_DTYPE, Labeller
from ringfence.observe.recognise.labels import N_LABELS, Label


def test_every_label_code_fits_the_label_array() -> None:
    # int8 held labels once; codes past 127 came out negative and broke the per-flow counts.
    assert N_LABELS - 1 <= np.iinfo(LABEL_DTYPE).max
    out = Labeller(len(Label))
    out.assign(np.arange(len(Label)), np.array([int(x) for x in Label], np.int64))
    assert out.label.tolist() == [int(x) for x in Label]


def test_label_codes_are_distinct() -> None:
    codes = [int(x) for x in Label]
    assert len(codes) == len(set(codes)) == len(Label.__members__)
