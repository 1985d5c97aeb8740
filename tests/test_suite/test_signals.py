"""suite.signals: SIGTERM and SIGHUP stop a command as Ctrl-C does, even where the stop lands in code
whose exceptions the interpreter swallows."""

import subprocess
import sys

import pytest

# NB: the fork hook raises the signal inside itself, where the handler's KeyboardInterrupt is swallowed
SWALLOWED = """
import os, signal, time
from suite.signals import stop_on_signals
restore = stop_on_signals()
os.register_at_fork(after_in_parent=lambda: signal.raise_signal(signal.{sig}))
try:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    time.sleep(20)  # NB: the stop sent again ends this
    print("ran past the stop")
except KeyboardInterrupt as err:
    print("stopped by", err)
restore()
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_a_stop_swallowed_in_a_fork_hook_is_delivered_again(sig):
    res = subprocess.run([sys.executable, "-c", SWALLOWED.format(sig=sig)], capture_output=True, text=True, timeout=60)
    assert res.stdout.strip() == f"stopped by {sig}", res.stdout + res.stderr


def test_a_signal_ignored_at_the_start_stays_ignored():
    """nohup: a closed terminal does not stop the command."""
    code = (
        "import signal; signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
        "from suite.signals import stop_on_signals\n"
        "restore = stop_on_signals()\n"
        "signal.raise_signal(signal.SIGHUP)\n"
        "print(signal.getsignal(signal.SIGHUP) is signal.SIG_IGN, signal.getsignal(signal.SIGTERM) is not "
        "signal.SIG_DFL)\n"
        "restore()\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.stdout.split() == ["True", "True"], res.stdout + res.stderr
