"""``--timeout``'s deadline: a signal on the main thread, an exception sent to any other thread;
both withdrawn when the block ends first."""

import signal
import threading
import time

import pytest

from ampdoctor.trace.deadline import Deadline, holding_stops


class Expired(BaseException):
    pass


def busy_until_stopped(seconds: float) -> str:
    end = time.monotonic() + seconds
    with Deadline(0.2, Expired):
        try:
            while time.monotonic() < end:
                pass
        except Expired:
            return "stopped"
    return "ran out"


def test_on_the_main_thread_a_blocking_wait_is_interrupted():
    handler = signal.getsignal(signal.SIGALRM)
    with pytest.raises(Expired):
        with Deadline(0.2, Expired):
            threading.Event().wait(60)
    assert signal.getsignal(signal.SIGALRM) is handler and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


@pytest.mark.parametrize("in_thread", [False, True])
def test_a_stop_waits_for_a_held_block_and_lands_after_it(in_thread):
    """The tracer's own bookkeeping (a dispatch mode pushed and recorded) is never cut in half."""
    results = []

    def run() -> None:
        finished_held = False
        try:
            with Deadline(0.05, Expired):
                with holding_stops():
                    end = time.monotonic() + 0.4  # well past the deadline
                    while time.monotonic() < end:
                        pass
                    finished_held = True
                end = time.monotonic() + 30  # busy: a stop sent to a thread lands between instructions
                while time.monotonic() < end:
                    pass
        except Expired:
            results.append(finished_held)

    if in_thread:
        worker = threading.Thread(target=run)
        worker.start()
        worker.join(60)
    else:
        run()
    assert results == [True]


def test_on_another_thread_the_stop_is_sent_to_that_thread():
    results = []
    worker = threading.Thread(target=lambda: results.append(busy_until_stopped(60)))
    worker.start()
    worker.join(60)
    assert results == ["stopped"]


@pytest.mark.slow
@pytest.mark.parametrize("in_thread", [False, True])
def test_a_block_that_ends_first_is_never_interrupted(in_thread):
    results = []

    def quick():
        with Deadline(0.3, Expired):
            pass
        time.sleep(0.6)  # past the deadline: nothing may arrive now
        results.append("fine")

    if in_thread:
        worker = threading.Thread(target=quick)
        worker.start()
        worker.join(60)
    else:
        quick()
    assert results == ["fine"]


def test_no_timeout_installs_nothing():
    handler = signal.getsignal(signal.SIGALRM)
    with Deadline(None, Expired):
        assert signal.getsignal(signal.SIGALRM) is handler


@pytest.mark.slow
def test_a_stop_that_never_lands_ends_the_process_with_124_after_the_grace():
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import signal, time
        from ampdoctor.trace.deadline import Deadline

        class Expired(BaseException):
            pass

        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})  # every stop is lost
        with Deadline(0.3, Expired, grace=0.5, on_give_up=lambda: print("report written", flush=True)):
            time.sleep(30)
        print("not reached")
        """
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 124
    assert run.stdout.split() == ["report", "written"]
    assert "did not stop within 0.5 s of --timeout" in run.stderr


def test_a_stop_that_keeps_being_swallowed_is_sent_again_until_it_lands():
    caught = 0
    with pytest.raises(Expired):
        with Deadline(0.1, Expired):
            while True:
                try:
                    time.sleep(0.02)
                except Expired:
                    caught += 1
                    if caught == 3:
                        raise
    assert caught == 3
