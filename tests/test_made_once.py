"""conftest.made_once, which makes what the pytest-xdist workers share (the copy task, the trained models,
the Multi30k slice): made once however many ask, and never read half-made."""

import threading

import pytest
from conftest import made_once


class Maker:
    """A make(folder) that writes its file in two parts and counts its calls; ``between`` runs between them."""

    def __init__(self, between=lambda: None):
        self.calls, self.between = 0, between

    def __call__(self, folder):
        self.calls += 1
        with open(folder / "model.txt", "w") as f:
            f.write("first half, ")
            f.flush()
            self.between()
            f.write("second half")


def test_made_once_and_then_read(tmp_path):
    make = Maker()
    assert made_once(tmp_path / "model", make) == tmp_path / "model"
    assert made_once(tmp_path / "model", make) == tmp_path / "model"
    assert make.calls == 1 and (tmp_path / "model" / "model.txt").read_text() == "first half, second half"


def test_a_half_made_folder_is_made_afresh_by_the_next_that_asks(tmp_path):
    def stopped():
        raise KeyboardInterrupt  # its maker stopped between the halves

    with pytest.raises(KeyboardInterrupt):
        made_once(tmp_path / "model", Maker(stopped))
    assert (tmp_path / "model" / "model.txt").read_text() == "first half, "
    (tmp_path / "model" / "stale.txt").write_text("left by the stopped maker")
    make = Maker()
    made_once(tmp_path / "model", make)
    assert make.calls == 1 and sorted(p.name for p in (tmp_path / "model").iterdir()) == ["model.txt"]
    assert (tmp_path / "model" / "model.txt").read_text() == "first half, second half"


def test_who_asks_while_another_makes_it_waits_and_reads_it_whole(tmp_path):
    # the second asks while the first is between the halves; however the threads interleave, the second
    # reads the whole file and nothing is made twice
    second_asks = threading.Event()
    make = Maker(between=lambda: second_asks.wait(timeout=60))
    read = []

    def second():
        second_asks.set()
        read.append((made_once(tmp_path / "model", make) / "model.txt").read_text())

    first = threading.Thread(target=made_once, args=(tmp_path / "model", make))
    first.start()
    other = threading.Thread(target=second)
    other.start()
    first.join(timeout=120)
    other.join(timeout=120)
    assert make.calls == 1 and read == ["first half, second half"]
