"""A collector stopped by SIGTERM exits quietly, whatever it was doing (tj-hybrid 0.9.9).

The pool stops its collectors with SIGTERM, whose handler raises ``SystemExit(0)``. When the
signal lands inside a C extension, the extension turns that exit into its own error: safetensors'
``get_tensor`` raises ``ValueError: could not determine the shape of object type
'torch.storage.UntypedStorage'`` (14 of 30 processes that SIGTERM stopped in a loop of reads, a
probe), and phase 3 printed that traceback after its last iteration in 2 of 6 runs. ``send_fragments`` treats any error after the
signal as the stop. The child below makes the signal land exactly there (it signals itself inside
the generator and converts the exit as the extension does), so nothing depends on timing.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tj_hybrid.phase3.collectors import send_fragments

CHILD = textwrap.dedent("""
    import multiprocessing as mp, os, signal, sys
    from tj_hybrid.phase3.collectors import exit_on_sigterm, send_fragments

    stop = sys.argv[1] == "sigterm"
    stopping = exit_on_sigterm()
    parent, child = mp.Pipe(duplex=False)

    def fragments():
        yield "first"
        try:
            if stop:
                os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, raising SystemExit
            raise SystemExit(0)
        except SystemExit:  # what a C extension does with it
            raise ValueError("could not determine the shape of object type 'UntypedStorage'")
        yield "never"

    try:
        send_fragments(fragments(), child, stopping)
    finally:
        print("received", parent.recv(), "stopping", stopping(), flush=True)
""")


def _child(mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip


def test_an_error_raised_by_the_stop_itself_ends_the_collector_quietly() -> None:
    done = _child("sigterm")
    assert done.returncode == 0, done.stderr
    assert "received first stopping True" in done.stdout
    assert "Traceback" not in done.stderr and "ValueError" not in done.stderr


def test_the_same_error_without_a_stop_is_a_failure() -> None:
    done = _child("none")
    assert done.returncode == 1
    assert "received first stopping False" in done.stdout
    assert "ValueError: could not determine the shape" in done.stderr


def test_send_fragments_ends_when_the_rank_closes_its_end_and_raises_real_errors() -> None:
    parent, child = mp.Pipe(duplex=False)
    parent.close()
    send_fragments(iter(["a", "b"]), child, lambda: False)  # BrokenPipeError: the rank is done

    def broken():
        yield "a"
        raise ValueError("a real bug")

    parent, child = mp.Pipe(duplex=False)
    with pytest.raises(ValueError, match="a real bug"):
        send_fragments(broken(), child, lambda: False)
    assert parent.recv() == "a"
    send_fragments(broken(), child, lambda: True)  # after a stop: quiet


@pytest.mark.skipif(not hasattr(signal, "SIGTERM") or os.name != "posix", reason="POSIX signals")
def test_exit_on_sigterm_reports_the_signal() -> None:
    code = ("from tj_hybrid.phase3.collectors import exit_on_sigterm\n"
            "import os, signal\ns = exit_on_sigterm()\nprint(s())\n"
            "try:\n    os.kill(os.getpid(), signal.SIGTERM)\nexcept SystemExit as e:\n"
            "    print(s(), e.code)\n")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    assert done.stdout.split() == ["False", "True", "0"]
