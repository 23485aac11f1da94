"""bench/loop_profile.py: the split of perf samples by where they ran (pure)."""

from bench.loop_profile import split_script

USER = """\
\t    7f0000013eb8 _PyEval_EvalFrameDefault (/usr/lib/libpython3.11.so.1.0)
\t    7f0000014000 [unknown] ([unknown])
"""
WRITE = """\
\tffffffff81000001 _raw_spin_unlock_irqrestore ([kernel.kallsyms])
\tffffffff81000002 tcp_sendmsg ([kernel.kallsyms])
\tffffffff81000003 entry_SYSCALL_64_after_hwframe ([kernel.kallsyms])
\t    7f00000f82ec __GI___libc_write (/usr/lib/libc.so.6)
"""
READ_SPIN = """\
\tffffffff81000010 __pv_queued_spin_lock_slowpath ([kernel.kallsyms])
\tffffffff81000011 lock_sock_nested ([kernel.kallsyms])
\tffffffff81000012 tcp_recvmsg ([kernel.kallsyms])
\t    7f00000f8200 read (/usr/lib/libc.so.6)
"""
READ_ACK = """\
\tffffffff81000020 __dev_queue_xmit ([kernel.kallsyms])
\tffffffff81000021 __tcp_transmit_skb ([kernel.kallsyms])
\tffffffff81000022 tcp_recvmsg_locked ([kernel.kallsyms])
\t    7f00000f8200 read (/usr/lib/libc.so.6)
"""
IRQ = """\
\tffffffff81000030 handle_softirqs ([kernel.kallsyms])
\t    7f0000013eb8 _PyObject_Malloc (/usr/lib/libpython3.11.so.1.0)
"""


def test_samples_split_by_user_syscall_and_read_costs():
    counts = split_script("\n".join([USER, USER, WRITE, READ_SPIN, READ_ACK, IRQ, ""]))
    assert counts["total"] == 6
    assert counts["user"] == 2
    assert counts["kernel:write"] == 1
    assert counts["kernel:read"] == 2
    assert counts["read:lock_spin"] == 1 and counts["read:ack"] == 1
    assert counts["kernel:other"] == 1  # an interrupt over user code


def test_empty_script():
    assert split_script("") == {}
