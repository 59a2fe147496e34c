"""Benchmarks: tensorwire against the floors and every peer, measured in the same run.

    python -m tools.bench [--json] [--plot FILE] [--sizes 4K,1M,...] [--quick] [--interleave]
    python -m tools.bench.backing [--sizes 1M,...] [--rounds 20] [--json]
    python -m tools.bench.in_flight [--in-flight 0,8,64,512] [--size 64K] [--rounds 15]
                                    [--one-shot | --held | --pipeline]
    python -m tools.bench.small [--rounds 15] ...     (small messages, in process and over a Pipe)
    python -m tools.bench.instructions [--number 2000] [--cases ...]   (the same, counted by valgrind)

Prints a table of medians (p10-p90), GB/s, the ratio to the floor (``np.copyto`` of the same
bytes into warm memory, or one wake-up for zero-copy modes) and to the best peer at that size.
The floor modes are what no transfer of their kind goes below, run like the others: one wake-up,
a bare zero-copy handoff and a bare one-copy handoff (one ``np.copyto`` into a premapped segment,
in a process that waited for its message, where the ``np.copyto`` row copies back to back).
Modes run one after another (``--interleave``: all alive together, one transfer each per round);
``tools.bench.backing`` compares the memfd-backed pool with the named-segment pool, interleaved;
``tools.bench.in_flight`` times a send through the pool behind messages no receiver has claimed yet
(or tensors a receiver keeps).
"""
