"""engine/timer.pyx's DueTimer: the loop's µs-precise one-shot timer (a
timerfd) that brings a loop-driven dynamic batcher back as its delay ends.
Margins are generous: what is checked is that it fires, once, not before
its time, and that moving and closing it work, not how fast it is."""

import asyncio

import pytest
import uvloop

from pyserver.engine import now_ns
from pyserver.engine.timer import DueTimer


def run(main):
    return uvloop.run(asyncio.wait_for(main(), 10))


@pytest.mark.parametrize("spin", [False, True])
def test_fires_once_and_not_before_its_time(spin):
    async def main():
        loop = asyncio.get_running_loop()
        fired = []
        timer = DueTimer(loop, lambda: fired.append(now_ns()))
        due = now_ns() + 20_000_000
        timer.arm(due, spin)
        assert timer.armed_ns == due
        await asyncio.sleep(0.3)
        timer.close()
        return due, fired, timer.armed_ns

    due, fired, armed = run(main)
    assert len(fired) == 1
    assert fired[0] >= due  # a spinning timer wakes early and spins its end
    assert fired[0] - due < 200_000_000
    assert armed == 0


def test_an_earlier_time_moves_it_a_later_one_does_not():
    async def main():
        loop = asyncio.get_running_loop()
        fired = []
        timer = DueTimer(loop, lambda: fired.append(now_ns()))
        start = now_ns()
        timer.arm(start + 5_000_000_000)
        timer.arm(start + 30_000_000)  # earlier: moves it
        timer.arm(start + 4_000_000_000)  # later than pending: the callback asks again then
        assert timer.armed_ns == start + 30_000_000
        await asyncio.sleep(0.3)
        timer.close()
        return start, fired

    start, fired = run(main)
    assert len(fired) == 1 and 30_000_000 <= fired[0] - start < 2_000_000_000


def test_closed_it_never_fires_and_arming_is_ignored():
    async def main():
        loop = asyncio.get_running_loop()
        fired = []
        timer = DueTimer(loop, lambda: fired.append(1))
        timer.arm(now_ns() + 10_000_000)
        timer.close()
        timer.arm(now_ns() + 10_000_000)
        timer.close()  # twice is fine
        await asyncio.sleep(0.1)
        return fired

    assert run(main) == []


def test_the_spin_margin_follows_how_late_the_loop_wakes():
    # set ahead and slept through, each fire teaches it the loop's oversleep
    async def main():
        loop = asyncio.get_running_loop()
        done = asyncio.Event()
        count = [0]
        timer = None

        def fired():
            count[0] += 1
            if count[0] < 20:
                timer.arm(now_ns() + 2_000_000, True)
            else:
                done.set()

        timer = DueTimer(loop, fired)
        timer.arm(now_ns() + 2_000_000, True)
        await done.wait()
        margin = timer.spin_margin_ns
        timer.close()
        return margin

    margin = run(main)
    assert 5_000 <= margin <= 100_000  # within MIN_SPIN_NS and MAX_SPIN_NS
