"""Peak memory of a child interpreter, for the bounded-memory tests that run a reader in a fresh process."""

#: A Python expression, for the child's code, giving its own peak RSS in KiB. VmHWM starts afresh at exec,
#: while getrusage(RUSAGE_SELF).ru_maxrss inherits the forking parent's high-water mark (Linux keeps it
#: across execve) — i.e. pytest's, which would make the bound depend on what ran before.
PEAK_KB = "int(next(x.split()[1] for x in open('/proc/self/status') if x.startswith('VmHWM')))"
