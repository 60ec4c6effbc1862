"""The totals' memo of prefix lengths: a tensor's length is read once (it is replaced, never
resized); a list is read every time (it may grow in place), and a sum that had a list in it is
never recalled whole."""

from __future__ import annotations

from poolwatch.probe.sglang.totals import Memo


class Tensor:
    """A stand-in with a host-side ``shape`` (reading it is counted)."""

    reads = 0

    def __init__(self, n: int) -> None:
        self._shape = (n,)

    @property
    def shape(self) -> tuple[int]:
        Tensor.reads += 1
        return self._shape


def test_tensor_lengths_are_read_once_and_lists_every_time() -> None:
    memo = Memo()
    tensors = [Tensor(n) for n in (3, 5, 7)]
    assert memo.total(tensors) == 15
    Tensor.reads = 0
    assert memo.total([*tensors, Tensor(2)]) == 17  # only the new tensor is looked at
    assert Tensor.reads == 1
    growing = [1, 2]
    assert memo.total([*tensors, growing]) == 17
    growing.append(3)  # a list grows in place: never recalled
    assert memo.total([*tensors, growing]) == 18
    assert memo.total(tensors) == 15
    Tensor.reads = 0
    assert memo.total(tensors) == 15  # the very same tensors: the last total, nothing read
    assert Tensor.reads == 0
